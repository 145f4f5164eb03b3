//! Operations as values: what a thread of a thread-mode-multi worker leaves for the
//! thread inside the worker when it finds the worker held (see `core`, "Thread mode
//! multi"), so that it returns at once instead of waiting for the worker.
//!
//! Only operations whose start runs no application code are posted: tag sends and
//! receives of contiguous or I/O-vector data, reporting to a request (not a completion
//! queue). Invariant: a value holds everything its start needs; the buffers it names are
//! the application's, valid until the operation completes (the API's contract).

use ucp::{Buf, Callback, Request, Worker};
use ucs::Result;

/// Which operation.
pub(crate) enum What {
    TagSend { ep: ucp::Ep, tag: u64, sync: bool },
    TagRecv { tag: u64, mask: u64 },
}

/// An operation ready to start on any thread that holds its worker.
pub(crate) struct PostedOp {
    pub what: What,
    pub buf: Buf,
}

// SAFETY: the buffer is the application's memory (contiguous or an I/O vector; generic
// datatypes, whose state is application code, are never posted), which the API lets any
// thread of a multi-threaded worker use; the value is started by one thread only.
unsafe impl Send for PostedOp {}

impl PostedOp {
    /// True for a buffer a value may carry to another thread (no application callbacks).
    pub(crate) fn movable(buf: &Buf) -> bool {
        matches!(buf, Buf::Contig { .. } | Buf::Iov(_))
    }

    /// Starts the operation; `Some` is a request that reports through `cb`, `None` an
    /// operation that completed in the call.
    ///
    /// # Safety
    /// The buffer must stay valid until the operation completes (the caller's promise).
    #[inline(always)]
    pub(crate) unsafe fn start(
        self,
        w: &mut Worker,
        cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        // SAFETY: forwarded contract.
        unsafe {
            match self.what {
                What::TagSend { ep, tag, sync } => tag_send(w, ep, self.buf, tag, sync, cb),
                What::TagRecv { tag, mask } => tag_recv(w, self.buf, tag, mask, cb).map(Some),
            }
        }
    }
}

// The Rust calls are reached through these two functions only, so the C API's direct
// path and the posted path share one copy of each (the compiler inlines a protocol call
// into a function that is its only caller, not into two).

/// `Worker::tag_send_nb`.
///
/// # Safety
/// As for `Worker::tag_send_nb`.
#[inline(never)]
pub(crate) unsafe fn tag_send(
    w: &mut Worker,
    ep: ucp::Ep,
    buf: Buf,
    tag: u64,
    sync: bool,
    cb: Option<Callback>,
) -> Result<Option<Request>> {
    // SAFETY: forwarded contract.
    unsafe { w.tag_send_nb(ep, buf, tag, sync, cb) }
}

/// `Worker::tag_recv_nb`.
///
/// # Safety
/// As for `Worker::tag_recv_nb`.
#[inline(never)]
pub(crate) unsafe fn tag_recv(
    w: &mut Worker,
    buf: Buf,
    tag: u64,
    mask: u64,
    cb: Option<Callback>,
) -> Result<Request> {
    // SAFETY: forwarded contract.
    unsafe { w.tag_recv_nb(buf, tag, mask, cb) }
}
