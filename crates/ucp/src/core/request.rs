//! Requests: the state of an operation that did not complete inside the call that started
//! it, kept in a pool and named by a generation-checked handle.
//!
//! The states here are plain data: a send (tag, active message or stream bytes), a
//! receive, an emulated remote access, a flush. The protocol modules own what these
//! states mean; the core only stores them and completes them.

use crate::matcher::RecvId;
use ucs::{PoolIdx, Status};
use uct::{AtomicOp, AtomicSize};

/// A handle to an outstanding operation. A stale handle (freed, or from another worker)
/// is detected and reported as `InvalidParam`, never dereferenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Request(pub(crate) PoolIdx);

impl Request {
    /// The handle as a number (for wire headers and C callers).
    pub fn to_u64(self) -> u64 {
        self.0.to_u64()
    }

    /// The handle from `to_u64`.
    pub fn from_u64(v: u64) -> Request {
        Request(PoolIdx::from_u64(v))
    }
}

/// What a completed receive reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvInfo {
    /// The tag the sender used.
    pub sender_tag: u64,
    /// Bytes of the message (as sent; more than the buffer when truncated).
    pub length: usize,
}

/// How the completion of a request is reported.
pub enum Callback {
    /// Called once when the request completes, after the worker finished its own work (so
    /// it may use the worker again through whatever handle it captured).
    Fn(Box<dyn FnOnce(Request, Status, RecvInfo) + Send>),
    /// Reported through [`crate::Worker::drain_completed`] with this word (a layer above,
    /// such as the C ABI, keeps its own request there and needs no closure per request).
    Word(u64),
    /// Reported as an entry of a completion queue (see [`crate::Cq`]); the request
    /// is freed when its entry is pushed, so its handle is stale from then on.
    Cq(super::cq::CqTarget),
}

impl Callback {
    /// Drops a callback whose operation completed in the call: a completion queue gets
    /// its entry through `report`; a word needs nothing (and skips the out-of-line drop);
    /// a closure is dropped uncalled, as UCX calls no callback then.
    #[inline(always)]
    pub(crate) fn done_in_call(self, report: impl FnOnce(super::cq::CqTarget)) {
        match self {
            Callback::Word(_) => std::mem::forget(self),
            Callback::Cq(t) => report(t),
            Callback::Fn(_) => drop(self),
        }
    }

    /// Completion reported into `cq` with the context `user`.
    pub fn cq(cq: &super::cq::Cq, user: u64) -> Callback {
        Callback::Cq(super::cq::CqTarget {
            dest: super::cq::Dest::Shared(cq.clone()),
            user,
            op: super::cq::CqOp::None,
        })
    }

    /// Completion reported into the queue `id` attached to the worker that runs the
    /// operation (`Worker::cq_attach`), with the context `user`: no reference count per
    /// operation. Another worker refuses it (`InvalidParam`).
    pub fn cq_attached(id: super::cq::CqId, user: u64) -> Callback {
        Callback::Cq(super::cq::CqTarget {
            dest: super::cq::Dest::Attached {
                idx: id.idx,
                worker: id.worker,
            },
            user,
            op: super::cq::CqOp::None,
        })
    }

    /// A closure called at completion.
    pub fn new(f: impl FnOnce(Request, Status, RecvInfo) + Send + 'static) -> Callback {
        Callback::Fn(Box::new(f))
    }
}

impl std::fmt::Debug for Callback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Callback::Fn(_) => f.write_str("Callback::Fn"),
            Callback::Word(w) => write!(f, "Callback::Word({w:#x})"),
            Callback::Cq(t) => write!(f, "Callback::Cq({:?}, {:#x})", t.op, t.user),
        }
    }
}

/// A completion reported by word (see [`Callback::Word`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    pub request: Request,
    pub word: u64,
    pub status: Status,
    pub info: RecvInfo,
}

/// A datatype whose packing the application does (UCX's generic datatypes): the library
/// asks for the packed stream in pieces when sending and hands pieces back when receiving.
pub trait GenericDt: Send {
    /// Bytes of the packed stream.
    fn packed_size(&self) -> usize;
    /// Writes the packed bytes at stream offset `off` into `dst`; returns how many.
    fn pack(&mut self, off: usize, dst: &mut [u8]) -> usize;
    /// Takes `src` as the packed bytes at stream offset `off`.
    fn unpack(&mut self, off: usize, src: &[u8]) -> ucs::Result<()>;
}

/// A user buffer: contiguous, or an I/O vector. The memory belongs to the caller, who
/// keeps it valid and unaliased until the request completes (the `unsafe` contract of the
/// nonblocking calls).
pub enum Buf {
    Contig {
        ptr: *mut u8,
        len: usize,
    },
    Iov(Box<[(*mut u8, usize)]>),
    /// Packed and unpacked by the application.
    Generic(Box<std::cell::RefCell<dyn GenericDt>>),
    /// Memory the request owns (the owned-buffer API): given back when the request is
    /// taken, freed if it is dropped.
    Owned(OwnedBuf),
}

/// A `Vec<u8>` held as raw parts while a request owns it, so that the transports write
/// through the one pointer every access uses (no reference to the vector exists meanwhile).
pub struct OwnedBuf {
    ptr: *mut u8,
    len: usize,
    cap: usize,
}

impl OwnedBuf {
    /// Takes ownership of `v`.
    pub fn new(v: Vec<u8>) -> OwnedBuf {
        let mut v = std::mem::ManuallyDrop::new(v);
        OwnedBuf {
            ptr: v.as_mut_ptr(),
            len: v.len(),
            cap: v.capacity(),
        }
    }

    /// The vector back.
    pub fn into_vec(self) -> Vec<u8> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: the parts came from a Vec<u8> in `new` and were not used to free it.
        unsafe { Vec::from_raw_parts(me.ptr, me.len, me.cap) }
    }

    /// Start and length of the memory.
    pub fn raw(&self) -> (*mut u8, usize) {
        (self.ptr, self.len)
    }
}

impl Drop for OwnedBuf {
    fn drop(&mut self) {
        // SAFETY: as in `into_vec`; `into_vec` skips this drop.
        drop(unsafe { Vec::from_raw_parts(self.ptr, self.len, self.cap) });
    }
}

impl std::fmt::Debug for OwnedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OwnedBuf({} bytes)", self.len)
    }
}

// SAFETY: an OwnedBuf is a uniquely owned heap allocation, as the Vec it came from.
unsafe impl Send for OwnedBuf {}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Buf::Contig { ptr, len } => write!(f, "Contig({ptr:?}, {len})"),
            Buf::Iov(v) => write!(f, "Iov({} segments)", v.len()),
            Buf::Generic(_) => write!(f, "Generic"),
            Buf::Owned(o) => write!(f, "{o:?}"),
        }
    }
}

// SAFETY: a Buf is an address range or a generic datatype (which is Send by its trait
// bound); whoever created an address range promised (by the unsafe contract of the call
// that took it) that the memory stays valid until completion, which may happen on another
// thread in multi-thread mode.
unsafe impl Send for Buf {}

impl Buf {
    /// Drops the buffer, with the test for the one kind that owns nothing inline, so that
    /// the fast paths (which know it is contiguous) skip the out-of-line drop.
    #[inline(always)]
    pub(crate) fn release(self) {
        if let Buf::Contig { .. } = self {
            std::mem::forget(self);
        }
    }

    /// A contiguous buffer.
    pub fn contig(ptr: *mut u8, len: usize) -> Buf {
        Buf::Contig { ptr, len }
    }

    /// Start and length of a contiguous buffer (the caller's or an owned one).
    #[inline]
    fn raw(&self) -> Option<(*mut u8, usize)> {
        match self {
            Buf::Contig { ptr, len } => Some((*ptr, *len)),
            Buf::Owned(o) => Some(o.raw()),
            Buf::Iov(_) | Buf::Generic(_) => None,
        }
    }

    /// Total length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Buf::Contig { len, .. } => *len,
            Buf::Owned(o) => o.raw().1,
            Buf::Iov(v) => v.iter().map(|s| s.1).sum(),
            Buf::Generic(g) => g.borrow().packed_size(),
        }
    }

    /// True for zero length.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer as mutable slices, for one-copy transfers into it.
    ///
    /// # Safety
    /// The memory must be valid for writes and not otherwise accessed while the slices
    /// live (the caller's contract of the receive call).
    pub unsafe fn slices_mut<'a>(&self) -> Vec<&'a mut [u8]> {
        let one = |p: *mut u8, l: usize| -> &'a mut [u8] {
            if l == 0 {
                &mut []
            } else {
                // SAFETY: the caller promised p..p+l is valid and exclusively ours.
                unsafe { std::slice::from_raw_parts_mut(p, l) }
            }
        };
        match self {
            Buf::Contig { .. } | Buf::Owned(_) => {
                self.raw().map(|(p, l)| one(p, l)).into_iter().collect()
            }
            Buf::Iov(v) => v.iter().map(|&(p, l)| one(p, l)).collect(),
            Buf::Generic(_) => Vec::new(),
        }
    }

    /// The start of a contiguous buffer (`None` for an I/O vector).
    pub fn contig_ptr(&self) -> Option<*mut u8> {
        match self {
            Buf::Contig { .. } | Buf::Owned(_) => self.raw().map(|(p, _)| p),
            Buf::Iov(_) | Buf::Generic(_) => None,
        }
    }

    /// Copies `data` into the buffer at logical offset `off`; returns bytes copied (less
    /// than `data.len()` when the buffer ends first).
    ///
    /// # Safety
    /// The buffer's memory must be valid for writes (the caller's contract).
    #[inline]
    pub unsafe fn write_at(&self, off: usize, data: &[u8]) -> usize {
        if let Some((ptr, len)) = self.raw() {
            let n = data.len().min(len.saturating_sub(off));
            if n > 0 {
                // SAFETY: off + n <= len, inside the caller's (or the owned) buffer.
                unsafe { copy_small(data.as_ptr(), ptr.add(off), n) };
            }
            return n;
        }
        // SAFETY: forwarded contract.
        unsafe { self.write_at_scattered(off, data) }
    }

    /// [`Buf::write_at`] for the buffers that are not one contiguous piece.
    ///
    /// # Safety
    /// As for [`Buf::write_at`].
    #[cold]
    #[inline(never)]
    unsafe fn write_at_scattered(&self, off: usize, data: &[u8]) -> usize {
        match self {
            Buf::Contig { .. } | Buf::Owned(_) => 0,
            Buf::Iov(segs) => {
                let mut done = 0;
                let mut pos = 0;
                for &(p, l) in segs.iter() {
                    let (s, e) = (pos, pos + l);
                    pos = e;
                    let want_s = off + done;
                    if want_s >= e || done == data.len() {
                        continue;
                    }
                    if want_s < s {
                        break;
                    }
                    let n = (e - want_s).min(data.len() - done);
                    // SAFETY: want_s - s + n <= l, inside this segment.
                    unsafe {
                        std::ptr::copy_nonoverlapping(data.as_ptr().add(done), p.add(want_s - s), n)
                    };
                    done += n;
                }
                done
            }
            Buf::Generic(g) => {
                let mut g = g.borrow_mut();
                let n = data.len().min(g.packed_size().saturating_sub(off));
                if n > 0 && g.unpack(off, &data[..n]).is_err() {
                    return 0;
                }
                n
            }
        }
    }

    /// Copies bytes at logical offset `off` out of the buffer into `dst`; returns bytes
    /// copied.
    ///
    /// # Safety
    /// The buffer's memory must be valid for reads (the caller's contract).
    #[inline]
    pub unsafe fn read_at(&self, off: usize, dst: &mut [u8]) -> usize {
        if let Some((ptr, len)) = self.raw() {
            let n = dst.len().min(len.saturating_sub(off));
            if n > 0 {
                // SAFETY: off + n <= len, inside the caller's (or the owned) buffer.
                unsafe { copy_small(ptr.add(off), dst.as_mut_ptr(), n) };
            }
            return n;
        }
        // SAFETY: forwarded contract.
        unsafe { self.read_at_scattered(off, dst) }
    }

    /// [`Buf::read_at`] for the buffers that are not one contiguous piece.
    ///
    /// # Safety
    /// As for [`Buf::read_at`].
    #[cold]
    #[inline(never)]
    unsafe fn read_at_scattered(&self, off: usize, dst: &mut [u8]) -> usize {
        match self {
            Buf::Contig { .. } | Buf::Owned(_) => 0,
            Buf::Iov(segs) => {
                let mut done = 0;
                let mut pos = 0;
                for &(p, l) in segs.iter() {
                    let (s, e) = (pos, pos + l);
                    pos = e;
                    let want_s = off + done;
                    if want_s >= e || done == dst.len() {
                        continue;
                    }
                    if want_s < s {
                        break;
                    }
                    let n = (e - want_s).min(dst.len() - done);
                    // SAFETY: want_s - s + n <= l, inside this segment.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            p.add(want_s - s),
                            dst.as_mut_ptr().add(done),
                            n,
                        )
                    };
                    done += n;
                }
                done
            }
            Buf::Generic(g) => {
                let mut g = g.borrow_mut();
                let n = dst.len().min(g.packed_size().saturating_sub(off));
                g.pack(off, &mut dst[..n])
            }
        }
    }
}

/// Copies `n` bytes; messages of up to 16 bytes (the common small ones) without a call
/// to `memcpy`.
///
/// # Safety
/// As `copy_nonoverlapping`: `src..src+n` readable, `dst..dst+n` writable, no overlap.
#[inline(always)]
pub(crate) unsafe fn copy_small(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: the caller's contract; the unaligned reads and writes stay
    // inside the n bytes (two possibly overlapping words cover 8 < n <= 16).
    unsafe {
        match n {
            0 => {}
            8 => dst
                .cast::<u64>()
                .write_unaligned(src.cast::<u64>().read_unaligned()),
            9..=16 => {
                let a = src.cast::<u64>().read_unaligned();
                let b = src.add(n - 8).cast::<u64>().read_unaligned();
                dst.cast::<u64>().write_unaligned(a);
                dst.add(n - 8).cast::<u64>().write_unaligned(b);
            }
            _ => std::ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

/// State of a send in progress.
/// An active message's id, user header and whether the receiver gets a reply endpoint
/// (boxed in requests: most sends are tag sends and should not carry its size).
pub(crate) struct AmInfo {
    pub id: u16,
    pub header: Vec<u8>,
    /// How the application asked to send it (reply endpoint, eager or rendezvous).
    pub flags: AmSendFlags,
}

/// What a send carries.
pub(crate) enum SendKind {
    Tag,
    /// An active message: its id, user header and whether the receiver gets a reply
    /// endpoint.
    Am(Box<AmInfo>),
    /// Bytes of the endpoint's stream.
    Stream,
}

pub(crate) struct SendState {
    pub kind: SendKind,
    pub ep: u32,
    pub buf: Buf,
    pub tag: u64,
    pub sync: bool,
    /// Bytes handed to the transport so far (eager) or whether the RTS went out (rndv).
    pub offset: usize,
    pub msg_id: u64,
    pub proto: crate::core::lane::Proto,
    /// Queued before the endpoint had a lane: `proto` is chosen by the first send step.
    pub select: bool,
    /// Registration of the buffer while a rendezvous is in flight.
    pub mem: Option<Box<uct::MemHandle>>,
    /// Waiting for the peer's acknowledgement (sync ack or rendezvous done).
    pub remote_pending: bool,
    /// The peer's acknowledgement came while fragments were still being sent (a
    /// synchronous send matched by its first fragment): the send completes when its last
    /// fragment has left.
    pub early_ack: bool,
}

impl SendState {
    /// A send of `buf` on `ep` that has sent nothing yet (eager bcopy until a protocol
    /// is chosen).
    pub(crate) fn new(kind: SendKind, ep: u32, buf: Buf) -> SendState {
        SendState {
            kind,
            ep,
            buf,
            tag: 0,
            sync: false,
            offset: 0,
            msg_id: 0,
            proto: crate::core::lane::Proto::Bcopy,
            select: false,
            mem: None,
            remote_pending: false,
            early_ack: false,
        }
    }
}

/// State of a posted receive.
pub(crate) struct RecvState {
    pub buf: Buf,
    pub recv_id: Option<RecvId>,
    /// Bytes that arrived so far (fragmented messages).
    pub received: usize,
    pub truncated: bool,
    /// Stream receive that completes only when the buffer is full.
    pub waitall: bool,
}

pub(crate) enum ReqKind {
    Send(SendState),
    Recv(RecvState),
    /// An emulated remote access or atomic.
    Rma(Box<RmaState>),
    /// Completes when the endpoint (or, with `None`, every endpoint) has nothing in flight.
    Flush(Option<u32>),
    /// Like Flush, then destroys the endpoint.
    Close(u32),
}

pub(crate) struct Req {
    pub kind: ReqKind,
    /// `None` while in progress.
    pub status: Option<Status>,
    pub info: RecvInfo,
    pub cb: Option<Callback>,
    /// The user released the handle before completion: free the request when it
    /// completes.
    pub released: bool,
}

pub use super::ids::AmDesc;

/// How to send an active message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AmSendFlags {
    /// Give the receiver an endpoint to reply on.
    pub reply: bool,
    /// Use the eager protocol (the message must fit one transport message).
    pub eager: bool,
    /// Use the rendezvous protocol.
    pub rndv: bool,
}

/// What a put with remote signal does to its 64-bit signal word once the data is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SignalOp {
    /// Adds the value (wrapping).
    Add,
    /// Stores the value.
    Set,
}

/// The kinds of emulated remote access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RmaOp {
    Put,
    Get,
    Amo {
        op: AtomicOp,
        size: AtomicSize,
        fetch: bool,
    },
    /// A put whose last piece carries a signal for the 64-bit word at `addr` of the
    /// region `key` (the value is the state's `value`).
    PutSignal {
        op: SignalOp,
        key: u64,
        addr: u64,
    },
}

/// State of an emulated remote access.
pub(crate) struct RmaState {
    pub ep: u32,
    pub op: RmaOp,
    pub key_id: u64,
    pub addr: u64,
    /// Put: the source; get: the destination; fetching atomic: the 8-byte result.
    pub local: Buf,
    /// Put data copied when the caller's buffer may not outlive the call (nbi).
    pub owned: Option<Vec<u8>>,
    pub len: usize,
    pub value: u64,
    pub compare: u64,
    /// Bytes sent (put) or whether the request went out (get, atomic: 0 or 1).
    pub sent: usize,
    /// Put: acknowledgements still due; get: bytes received.
    pub progress: usize,
    pub error: Option<Status>,
}
