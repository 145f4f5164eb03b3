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
    /// Names no request: the `request` of a [`Completed`] whose operation never had one
    /// (a receive posted by word that a whole message completed). No pool hands it out
    /// (its slot number is beyond any pool's capacity), so every lookup of it fails.
    pub const NONE: Request = Request(PoolIdx::NONE);

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

    /// True for the callbacks an operation completed in the call can drop with
    /// [`Callback::drop_uncalled`]: none, a closure, a word (a completion queue wants
    /// its entry, which the full path makes).
    #[inline(always)]
    pub(crate) fn droppable(cb: &Option<Callback>) -> bool {
        !matches!(cb, Some(Callback::Cq(_)))
    }

    /// The callback of an operation that completed in the call and is
    /// [`Callback::droppable`]: dropped uncalled, as UCX calls no callback then.
    #[inline(always)]
    pub(crate) fn drop_uncalled(cb: Option<Callback>) {
        debug_assert!(Callback::droppable(&cb), "a queue's entry would be lost");
        if let Some(cb) = cb {
            cb.done_in_call(|_| {});
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

pub use super::buf::{Buf, GenericDt};

/// State of a send in progress.
/// An active message's id, user header and whether the receiver gets a reply endpoint
/// (boxed in requests: most sends are tag sends and should not carry its size).
pub(crate) struct AmInfo {
    pub id: u16,
    pub header: Vec<u8>,
    /// How the application asked to send it (reply endpoint, eager or rendezvous).
    pub flags: AmSendFlags,
}

/// Which protocol a send belongs to. A plain tag rather than an enum carrying the active
/// message's details (those are in [`SendState::am`]): a one-byte kind lets the request
/// stay within 128 bytes, which the pool then moves without a call to `memcpy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendKind {
    Tag,
    /// An active message ([`SendState::am`] holds its id, user header and flags).
    Am,
    /// Bytes of the endpoint's stream.
    Stream,
}

pub(crate) struct SendState {
    pub kind: SendKind,
    /// The active message's id, user header and whether the receiver gets a reply
    /// endpoint: `Some` exactly when `kind` is [`SendKind::Am`].
    pub am: Option<Box<AmInfo>>,
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
    /// A tag or stream send of `buf` on `ep` that has sent nothing yet (eager bcopy until
    /// a protocol is chosen).
    pub(crate) fn new(kind: SendKind, ep: u32, buf: Buf) -> SendState {
        debug_assert!(
            kind != SendKind::Am,
            "active messages start with SendState::am"
        );
        SendState {
            kind,
            am: None,
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

    /// An active message send of `buf` on `ep`, as [`SendState::new`].
    pub(crate) fn am(info: Box<AmInfo>, ep: u32, buf: Buf) -> SendState {
        SendState {
            kind: SendKind::Am,
            am: Some(info),
            ..SendState::new(SendKind::Tag, ep, buf)
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
    /// Its owner may abort it before completion (a blocking call that gives up): never
    /// split its rendezvous (`rndv::split`), whose sender would write into it until its
    /// fin whatever the abort.
    pub no_split: bool,
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

impl Req {
    /// True when dropping this request would free nothing: no callback, and a send or
    /// receive whose buffer is a plain contiguous view (`Buf::owns_nothing`: not owned
    /// memory, not an I/O vector or a generic datatype, whose drop may call the
    /// application) and that holds no extras. Such a request may leave the pool without
    /// its destructor ([`ucs::Removal::Forget`]), which saves a call on every completed
    /// operation.
    #[inline(always)]
    pub(crate) fn owns_nothing(&self) -> bool {
        self.cb.is_none()
            && match &self.kind {
                ReqKind::Recv(rs) => rs.buf.owns_nothing(),
                ReqKind::Send(s) => s.am.is_none() && s.mem.is_none() && s.buf.owns_nothing(),
                ReqKind::Rma(_) => false,
                ReqKind::Flush(_) | ReqKind::Close(_) => true,
            }
    }
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
