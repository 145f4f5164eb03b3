//! Buffers of operations: the one place of ucp that reads and writes the memory of a
//! request's buffer (contiguous, an I/O vector, an application-packed datatype, or
//! memory the request owns) and registers it with a memory domain.
//!
//! The `unsafe` of a nonblocking call lives in the constructors that name caller memory
//! ([`Buf::contig`], [`Buf::iov`]): whoever makes such a `Buf` promises that its memory
//! stays valid until the request that takes it completes (or is aborted, and that
//! completion was seen). The calls that take a `Buf` are then safe, and so are the
//! accessors below, which the protocol modules use under one crate invariant:
//!
//! - **a `Buf` is read or written only while the request that holds it is in progress**
//!   (its status is still `None`), or inside the call that starts that request. The
//!   protocols keep it: completion is the last thing that happens to a request's buffer;
//!   an aborted request is completed before its buffer is dropped.
//!
//! A `Buf` is neither `Clone` nor `Copy`, so one promise covers one request. Owned memory
//! ([`Buf::from`] a `Vec<u8>`) needs no promise: it lives inside the `Buf`.

use std::cell::RefCell;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;
use ucs::{Result, Status};

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

/// The memory of one nonblocking operation: the caller's (made by an `unsafe`
/// constructor), the request's own (`Buf::from(Vec<u8>)`), or an application datatype.
///
/// Naming the caller's memory takes `unsafe`:
/// ```compile_fail,E0133
/// let mut v = [0u8; 4];
/// let b = ucp::Buf::contig(v.as_mut_ptr(), v.len());
/// ```
/// and one promise covers one request (a `Buf` cannot be copied):
/// ```compile_fail,E0599
/// let b = ucp::Buf::from(vec![1u8]);
/// let c = b.clone();
/// ```
pub struct Buf {
    /// A contiguous buffer's start (dangling for an empty one whose start was null);
    /// otherwise what `len`'s tag names: an `Arc<OwnedMem>` or a `Box<Other>`, as raw
    /// pointers this `Buf` owns.
    ptr: NonNull<u8>,
    /// A contiguous buffer's length, below `TAGGED`; otherwise `OWNED` or `BOXED`.
    len: usize,
}

/// `len` values at or above this are tags, not lengths: no object is longer than
/// `isize::MAX` bytes, so a contiguous buffer's length never has the top bit set.
const TAGGED: usize = 1 << (usize::BITS - 1);
/// `ptr` is an `Arc<OwnedMem>` (`Arc::into_raw`).
const OWNED: usize = TAGGED | 1;
/// `ptr` is a `Box<Other>` (`Box::into_raw`).
const BOXED: usize = TAGGED | 2;

/// The kinds of buffer that are not a plain contiguous piece, owned or not. A `Buf` is
/// two words so that it moves, and is passed, in two registers: the common contiguous
/// buffer (the start and the length) needs no more, and the rare kinds live behind the
/// pointer. (A three-word `Buf` went through memory at every call, written by parts and
/// read back whole, and that load waited for the stores: a store-forwarding stall on the
/// message path of every receive.)
enum Other {
    /// A contiguous buffer that does not fit the two words: a null start with a nonzero
    /// length (nothing may read it, but it is kept as given), or a length with the top
    /// bit set.
    Contig {
        ptr: *mut u8,
        len: usize,
    },
    Iov(Box<[(*mut u8, usize)]>),
    Generic(Box<RefCell<dyn GenericDt>>),
}

const _: () = assert!(std::mem::size_of::<Buf>() == 2 * std::mem::size_of::<usize>());

/// What a `Buf` holds, borrowed.
enum View<'a> {
    Contig(*mut u8, usize),
    Owned(&'a OwnedMem),
    Other(&'a Other),
}

/// A `Vec<u8>` held as raw parts, so that every access (the transports', the protocols')
/// goes through the one pointer and no reference to the vector exists meanwhile.
struct OwnedMem {
    ptr: *mut u8,
    len: usize,
    cap: usize,
}

impl OwnedMem {
    fn new(v: Vec<u8>) -> OwnedMem {
        let mut v = std::mem::ManuallyDrop::new(v);
        OwnedMem {
            ptr: v.as_mut_ptr(),
            len: v.len(),
            cap: v.capacity(),
        }
    }

    fn into_vec(self) -> Vec<u8> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: the parts came from a Vec<u8> in `new` and were not used to free it
        // (the ManuallyDrop skips our Drop).
        unsafe { Vec::from_raw_parts(me.ptr, me.len, me.cap) }
    }
}

impl Drop for OwnedMem {
    fn drop(&mut self) {
        // SAFETY: as in `into_vec`, which skips this drop.
        drop(unsafe { Vec::from_raw_parts(self.ptr, self.len, self.cap) });
    }
}

// SAFETY: an OwnedMem is a uniquely owned heap allocation, as the Vec it came from; the
// Arc around it is shared only between a Buf and a `Lent` that never touches the memory.
unsafe impl Send for OwnedMem {}
// SAFETY: nothing reads or writes the memory through a shared `&OwnedMem` except the one
// Buf holding it, under the crate invariant of the module doc.
unsafe impl Sync for OwnedMem {}

// SAFETY: a Buf names memory that its creator promised (by the `unsafe` constructor)
// stays valid until its request completes, from whichever thread completes it; owned
// memory (the Arc, the Box) moves with it; a generic datatype is Send by its trait bound.
unsafe impl Send for Buf {}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.view() {
            View::Contig(ptr, len) | View::Other(&Other::Contig { ptr, len }) => {
                write!(f, "Contig({ptr:?}, {len})")
            }
            View::Other(Other::Iov(v)) => write!(f, "Iov({} segments)", v.len()),
            View::Other(Other::Generic(_)) => write!(f, "Generic"),
            View::Owned(o) => write!(f, "Owned({} bytes)", o.len),
        }
    }
}

impl Drop for Buf {
    /// Inline, so that dropping the common contiguous buffer (which owns nothing) costs a
    /// compare instead of a call.
    #[inline(always)]
    fn drop(&mut self) {
        if self.len >= TAGGED {
            self.drop_owned();
        }
    }
}

impl Buf {
    /// The drop of a buffer that owns something, out of line: the drop glue that callers
    /// inline is then a compare and a branch, with no registers to save.
    #[cold]
    #[inline(never)]
    fn drop_owned(&mut self) {
        match self.len {
            // SAFETY: made by `Arc::into_raw` in `owned_arc`, and released once: this is
            // the Buf's drop, and `into_vec` skips it.
            OWNED => drop(unsafe { Arc::from_raw(self.ptr.as_ptr().cast::<OwnedMem>()) }),
            // SAFETY: made by `Box::into_raw` in `boxed`, freed once as above.
            BOXED => drop(unsafe { Box::from_raw(self.ptr.as_ptr().cast::<Other>()) }),
            _ => {}
        }
    }

    /// A buffer holding `o`.
    fn boxed(o: Other) -> Buf {
        let p = Box::into_raw(Box::new(o));
        Buf {
            // SAFETY: `Box::into_raw` never gives null.
            ptr: unsafe { NonNull::new_unchecked(p.cast::<u8>()) },
            len: BOXED,
        }
    }

    /// A buffer holding (one count of) `a`.
    fn owned_arc(a: Arc<OwnedMem>) -> Buf {
        let p = Arc::into_raw(a).cast_mut();
        Buf {
            // SAFETY: `Arc::into_raw` never gives null.
            ptr: unsafe { NonNull::new_unchecked(p.cast::<u8>()) },
            len: OWNED,
        }
    }

    /// What this buffer holds.
    #[inline(always)]
    fn view(&self) -> View<'_> {
        match self.len {
            l if l < TAGGED => View::Contig(
                if l == 0 {
                    std::ptr::null_mut()
                } else {
                    self.ptr.as_ptr()
                },
                l,
            ),
            // SAFETY: the tag says `ptr` came from `Arc::into_raw`; this Buf holds a count
            // until it drops, which outlives the borrow.
            OWNED => View::Owned(unsafe { &*self.ptr.as_ptr().cast::<OwnedMem>() }),
            // SAFETY: the tag says `ptr` came from `Box::into_raw`, owned by this Buf.
            _ => View::Other(unsafe { &*self.ptr.as_ptr().cast::<Other>() }),
        }
    }
}

impl From<Vec<u8>> for Buf {
    /// Memory the request owns: freed with the request, or given back by
    /// [`crate::Worker::request_take_owned`].
    fn from(v: Vec<u8>) -> Buf {
        Buf::owned_arc(Arc::new(OwnedMem::new(v)))
    }
}

/// The owner's claim on memory lent to a request by [`Buf::lend`]: it gives the vector
/// back once the request no longer holds it.
pub(crate) struct Lent(Arc<OwnedMem>);

impl Lent {
    /// The vector, if the request that held it is gone (it completed in its starting
    /// call); else the claim back.
    pub(crate) fn take(self) -> std::result::Result<Vec<u8>, Lent> {
        Arc::try_unwrap(self.0)
            .map(OwnedMem::into_vec)
            .map_err(Lent)
    }
}

impl Buf {
    /// True when dropping this buffer frees nothing: a plain contiguous view. Owned memory
    /// and the boxed descriptions (I/O vectors, generic datatypes, whose drop may call the
    /// application) are something.
    #[inline(always)]
    pub(crate) fn owns_nothing(&self) -> bool {
        self.len < TAGGED
    }

    /// True for memory the request owns (given back through the request).
    #[inline]
    pub(crate) fn is_owned(&self) -> bool {
        self.len == OWNED
    }

    /// The contiguous `len` bytes at `ptr` (null is fine when `len` is 0).
    ///
    /// # Safety
    /// Until the request that takes this buffer completes (or is aborted, and that
    /// completion was seen), `ptr..ptr+len` must stay allocated; for a send, readable and
    /// unchanged; for a receive (or the destination of a get or fetching atomic),
    /// writable and not read or written by anything else.
    #[inline(always)]
    pub unsafe fn contig(ptr: *mut u8, len: usize) -> Buf {
        match NonNull::new(ptr) {
            Some(p) if len < TAGGED => Buf { ptr: p, len },
            None if len == 0 => Buf::empty(),
            _ => Buf::boxed(Other::Contig { ptr, len }),
        }
    }

    /// An I/O vector: the segments `(start, length)` in order.
    ///
    /// # Safety
    /// As for [`Buf::contig`], for every segment; segments must not overlap.
    pub unsafe fn iov(segs: impl Into<Box<[(*mut u8, usize)]>>) -> Buf {
        Buf::boxed(Other::Iov(segs.into()))
    }

    /// A datatype the application packs and unpacks.
    pub fn generic(dt: impl GenericDt + 'static) -> Buf {
        Buf::boxed(Other::Generic(Box::new(RefCell::new(dt))))
    }

    /// [`Buf::generic`] for a datatype already boxed.
    pub fn generic_boxed(dt: Box<RefCell<dyn GenericDt>>) -> Buf {
        Buf::boxed(Other::Generic(dt))
    }

    /// No memory (zero bytes).
    #[inline(always)]
    pub fn empty() -> Buf {
        Buf {
            ptr: NonNull::dangling(),
            len: 0,
        }
    }

    /// `v` as owned memory, with the claim that gives it back when the request that
    /// takes the buffer is gone (see [`Lent::take`]).
    pub(crate) fn lend(v: Vec<u8>) -> (Buf, Lent) {
        let m = Arc::new(OwnedMem::new(v));
        (Buf::owned_arc(m.clone()), Lent(m))
    }

    /// The owned vector, for a buffer made from one.
    pub(crate) fn into_vec(self) -> Option<Vec<u8>> {
        if self.len != OWNED {
            return None;
        }
        let me = ManuallyDrop::new(self);
        // SAFETY: the tag says `ptr` came from `Arc::into_raw`; `me` is never dropped, so
        // this takes its count back once.
        let a = unsafe { Arc::from_raw(me.ptr.as_ptr().cast::<OwnedMem>()) };
        Arc::try_unwrap(a).ok().map(OwnedMem::into_vec)
    }

    /// Start and length of a contiguous buffer (the caller's or an owned one).
    #[inline(always)]
    fn raw(&self) -> Option<(*mut u8, usize)> {
        match self.view() {
            View::Contig(ptr, len) | View::Other(&Other::Contig { ptr, len }) => Some((ptr, len)),
            View::Owned(o) => Some((o.ptr, o.len)),
            View::Other(Other::Iov(_) | Other::Generic(_)) => None,
        }
    }

    /// Total length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        if self.len < TAGGED {
            return self.len;
        }
        self.len_other()
    }

    #[inline(never)]
    fn len_other(&self) -> usize {
        match self.view() {
            View::Contig(_, len) | View::Other(&Other::Contig { len, .. }) => len,
            View::Owned(o) => o.len,
            View::Other(Other::Iov(v)) => v.iter().map(|s| s.1).sum(),
            View::Other(Other::Generic(g)) => g.borrow().packed_size(),
        }
    }

    /// True for zero length.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The start of a contiguous buffer (`None` for an I/O vector or a datatype; null for
    /// an empty one).
    #[inline]
    pub fn contig_ptr(&self) -> Option<*mut u8> {
        self.raw().map(|(p, _)| p)
    }

    /// True for an application-packed datatype.
    pub fn is_generic(&self) -> bool {
        matches!(self.view(), View::Other(Other::Generic(_)))
    }

    /// The bytes of a contiguous buffer, to send them (`None` for the other kinds).
    #[inline]
    pub(crate) fn as_bytes(&self) -> Option<&[u8]> {
        let (p, l) = self.raw()?;
        Some(if l == 0 {
            &[]
        } else {
            // SAFETY: the constructor's contract (or our ownership) makes p..p+l readable
            // while the request is in progress, which is when the protocols call this
            // (module invariant); the slice borrows the Buf, which lives in the request.
            unsafe { std::slice::from_raw_parts(p, l) }
        })
    }

    /// The bytes of a contiguous buffer, to receive into them (`None` for the other
    /// kinds).
    #[inline]
    pub(crate) fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        let (p, l) = self.raw()?;
        Some(if l == 0 {
            &mut []
        } else {
            // SAFETY: the receive's contract: p..p+l is writable and accessed by nothing
            // else while the request is in progress (module invariant); the slice borrows
            // the Buf mutably, so no other access through it overlaps.
            unsafe { std::slice::from_raw_parts_mut(p, l) }
        })
    }

    /// The buffer as mutable slices, for one-copy transfers into it (none for a datatype).
    pub(crate) fn slices_mut(&mut self) -> Vec<&mut [u8]> {
        let one = |p: *mut u8, l: usize| -> &mut [u8] {
            if l == 0 {
                &mut []
            } else {
                // SAFETY: the receive's contract: p..p+l is writable and accessed by
                // nothing else while the request is in progress (module invariant); the
                // slices borrow the Buf mutably, so no other access through it overlaps.
                unsafe { std::slice::from_raw_parts_mut(p, l) }
            }
        };
        match self.view() {
            View::Other(Other::Iov(v)) => v.iter().map(|&(p, l)| one(p, l)).collect(),
            View::Other(Other::Generic(_)) => Vec::new(),
            _ => self.raw().map(|(p, l)| one(p, l)).into_iter().collect(),
        }
    }

    /// Registers the first `len` bytes of a contiguous buffer with `md`, so that a peer
    /// reads (or writes) them directly. The handle must go no later than the request:
    /// keep it in the request's state or in an entry removed before it completes.
    pub(crate) fn mem_reg(&self, md: &uct::Md, len: usize) -> Result<uct::MemHandle> {
        let (p, l) = self.raw().ok_or(Status::InvalidParam)?;
        if len > l.max(1) {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the buffer's memory stays valid while its request is in progress (the
        // constructor's contract, or our ownership), and the caller drops the handle with
        // the request; the protocols access it only through these raw-pointer copies.
        unsafe { md.mem_reg(p, len) }
    }

    /// Copies `data` into the buffer at logical offset `off`; returns bytes copied (less
    /// than `data.len()` when the buffer ends first).
    #[inline]
    pub(crate) fn write_at(&self, off: usize, data: &[u8]) -> usize {
        if let Some((ptr, len)) = self.raw() {
            let n = data.len().min(len.saturating_sub(off));
            if n > 0 {
                // SAFETY: off + n <= len, inside memory writable while the request is in
                // progress (module invariant); `data` is not the buffer (we never hand
                // out a slice of it across this call).
                unsafe { copy_small(data.as_ptr(), ptr.add(off), n) };
            }
            return n;
        }
        self.write_at_scattered(off, data)
    }

    /// [`Buf::write_at`] for the buffers that are not one contiguous piece.
    #[cold]
    #[inline(never)]
    fn write_at_scattered(&self, off: usize, data: &[u8]) -> usize {
        match self.view() {
            View::Other(Other::Iov(segs)) => {
                let mut done = 0;
                for (p, s, n) in pieces(segs, off, data.len()) {
                    // SAFETY: s + n <= the segment's length (see `pieces`), writable while
                    // the request is in progress (module invariant).
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().add(done), p.add(s), n) };
                    done += n;
                }
                done
            }
            View::Other(Other::Generic(g)) => {
                let mut g = g.borrow_mut();
                let n = data.len().min(g.packed_size().saturating_sub(off));
                if n > 0 && g.unpack(off, &data[..n]).is_err() {
                    return 0;
                }
                n
            }
            _ => 0,
        }
    }

    /// Copies bytes at logical offset `off` out of the buffer into `dst`; returns bytes
    /// copied.
    #[inline]
    pub(crate) fn read_at(&self, off: usize, dst: &mut [u8]) -> usize {
        if let Some((ptr, len)) = self.raw() {
            let n = dst.len().min(len.saturating_sub(off));
            if n > 0 {
                // SAFETY: off + n <= len, inside memory readable while the request is in
                // progress (module invariant).
                unsafe { copy_small(ptr.add(off), dst.as_mut_ptr(), n) };
            }
            return n;
        }
        self.read_at_scattered(off, dst)
    }

    /// [`Buf::read_at`] for the buffers that are not one contiguous piece.
    #[cold]
    #[inline(never)]
    fn read_at_scattered(&self, off: usize, dst: &mut [u8]) -> usize {
        match self.view() {
            View::Other(Other::Iov(segs)) => {
                let mut done = 0;
                for (p, s, n) in pieces(segs, off, dst.len()) {
                    // SAFETY: s + n <= the segment's length (see `pieces`), readable while
                    // the request is in progress (module invariant).
                    unsafe {
                        std::ptr::copy_nonoverlapping(p.add(s), dst.as_mut_ptr().add(done), n)
                    };
                    done += n;
                }
                done
            }
            View::Other(Other::Generic(g)) => {
                let mut g = g.borrow_mut();
                let n = dst.len().min(g.packed_size().saturating_sub(off));
                g.pack(off, &mut dst[..n])
            }
            _ => 0,
        }
    }
}

/// The pieces of the I/O vector `segs` that cover `want` bytes from logical offset `off`:
/// `(segment start, offset in the segment, bytes)`, in order, each inside its segment.
fn pieces(
    segs: &[(*mut u8, usize)],
    off: usize,
    want: usize,
) -> impl Iterator<Item = (*mut u8, usize, usize)> + '_ {
    let mut pos = 0;
    let mut done = 0;
    segs.iter().filter_map(move |&(p, l)| {
        let (s, e) = (pos, pos + l);
        pos = e;
        let at = off + done;
        if at >= e || at < s || done == want {
            return None;
        }
        let n = (e - at).min(want - done);
        done += n;
        Some((p, at - s, n))
    })
}

/// Copies `src` to the start of `dst` (as much as fits), small pieces without a call to
/// `memcpy`.
#[inline(always)]
pub(crate) fn copy_into(dst: &mut [u8], src: &[u8]) {
    let n = src.len().min(dst.len());
    // SAFETY: n bytes are readable in src and writable in dst; distinct borrows do not
    // overlap.
    unsafe { copy_small(src.as_ptr(), dst.as_mut_ptr(), n) };
}

/// Copies `n` bytes; messages of up to 16 bytes (the common small ones) without a call
/// to `memcpy`, larger ones by `ucs::sys::copy` (which avoids `memcpy`'s slow case for
/// a destination a few bytes past the source modulo a page).
///
/// # Safety
/// As `copy_nonoverlapping`: `src..src+n` readable, `dst..dst+n` writable, no overlap.
#[inline(always)]
unsafe fn copy_small(src: *const u8, dst: *mut u8, n: usize) {
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
            _ => ucs::sys::copy::copy_raw(src, dst, n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_keeps_its_bytes_and_length_in_two_words() {
        let mut a = [0u8; 12];
        // SAFETY: `a` outlives the buffer.
        let b = unsafe { Buf::contig(a.as_mut_ptr(), a.len()) };
        assert_eq!((b.len(), b.contig_ptr()), (12, Some(a.as_mut_ptr())));
        assert_eq!(b.write_at(4, &[7; 20]), 8);
        drop(b);
        assert_eq!(a, [0, 0, 0, 0, 7, 7, 7, 7, 7, 7, 7, 7]);
        // An empty buffer reports a null start, as it was given, or none at all.
        // SAFETY: zero bytes.
        let e = unsafe { Buf::contig(std::ptr::null_mut(), 0) };
        assert_eq!(
            (e.len(), e.contig_ptr(), e.as_bytes()),
            (0, Some(std::ptr::null_mut()), Some(&[][..]))
        );
        assert_eq!(Buf::empty().len(), 0);
        // A null start with a length, or a length past isize::MAX, is kept as given
        // (boxed); nothing touches its memory here.
        // SAFETY: the buffer is only measured, never read or written.
        let n = unsafe { Buf::contig(std::ptr::null_mut(), 5) };
        assert_eq!((n.len(), n.contig_ptr()), (5, Some(std::ptr::null_mut())));
        // SAFETY: as above.
        let h = unsafe { Buf::contig(a.as_mut_ptr(), usize::MAX) };
        assert_eq!(h.len(), usize::MAX);
        // Owned memory goes back whole.
        let o = Buf::from(vec![1u8, 2, 3]);
        assert!(o.is_owned());
        assert_eq!(o.len(), 3);
        assert_eq!(o.into_vec(), Some(vec![1, 2, 3]));
        assert_eq!(Buf::from(vec![9u8]).as_bytes(), Some(&[9u8][..]));
        assert!(!Buf::empty().is_owned());
        assert!(Buf::empty().into_vec().is_none());
    }

    #[test]
    fn only_a_plain_view_owns_nothing() {
        let mut a = [0u8; 4];
        // SAFETY: `a` outlives the buffers; nothing reads or writes through them.
        let (view, odd, iov) = unsafe {
            (
                Buf::contig(a.as_mut_ptr(), a.len()),
                Buf::contig(std::ptr::null_mut(), 5),
                Buf::iov(vec![(a.as_mut_ptr(), 2)]),
            )
        };
        assert!(view.owns_nothing() && Buf::empty().owns_nothing());
        // Owned memory, and the boxed kinds (a null start with a length, an I/O vector,
        // a generic datatype) free something when dropped.
        assert!(!Buf::from(vec![1u8]).owns_nothing());
        assert!(!odd.owns_nothing() && !iov.owns_nothing());
        assert!(!Buf::generic(Empty).owns_nothing());
    }

    #[test]
    fn iov_reads_and_writes_across_segments() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 0];
        let mut c = [0u8; 5];
        // SAFETY: the arrays outlive the buffer, and nothing else touches them meanwhile.
        let buf = unsafe {
            Buf::iov(vec![
                (a.as_mut_ptr(), a.len()),
                (b.as_mut_ptr(), b.len()),
                (c.as_mut_ptr(), c.len()),
            ])
        };
        assert_eq!(buf.len(), 8);
        assert_eq!(buf.write_at(2, &[1, 2, 3, 4, 5, 6, 7]), 6);
        let mut out = [0u8; 8];
        assert_eq!(buf.read_at(1, &mut out), 7);
        assert_eq!(out, [0, 1, 2, 3, 4, 5, 6, 0]);
        drop(buf);
        assert_eq!((a, c), ([0, 0, 1], [2, 3, 4, 5, 6]));
    }

    #[test]
    fn lent_memory_comes_back_once_the_buffer_is_gone() {
        let (buf, lent) = Buf::lend(vec![7; 10]);
        let Err(lent) = lent.take() else {
            panic!("given back while the buffer still holds it");
        };
        assert_eq!(buf.write_at(8, &[1, 2, 3]), 2);
        drop(buf);
        let Ok(v) = lent.take() else {
            panic!("not given back after the buffer went");
        };
        assert_eq!(v, [7, 7, 7, 7, 7, 7, 7, 7, 1, 2]);
    }

    #[test]
    fn registration_is_refused_past_the_end() {
        let buf = Buf::from(vec![0u8; 16]);
        let md = uct::Md::open(uct::Transport::SelfTl);
        assert_eq!(buf.mem_reg(&md, 17).err(), Some(Status::InvalidParam));
        assert!(buf.mem_reg(&md, 16).is_ok());
        assert_eq!(Buf::empty().as_bytes(), Some(&[][..]));
        assert!(Buf::generic_boxed(Box::new(RefCell::new(Empty))).is_generic());
    }

    struct Empty;
    impl GenericDt for Empty {
        fn packed_size(&self) -> usize {
            0
        }
        fn pack(&mut self, _: usize, _: &mut [u8]) -> usize {
            0
        }
        fn unpack(&mut self, _: usize, _: &[u8]) -> ucs::Result<()> {
            Ok(())
        }
    }
}
