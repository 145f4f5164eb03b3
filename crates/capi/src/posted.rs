//! Operations as values: what a thread of a thread-mode-multi worker leaves for the
//! thread inside the worker when it finds the worker held (see `core`, "Thread mode
//! multi"), so that it returns at once instead of waiting for the worker. The value is
//! the protocol layer's own (`ucp::shared::Op`, as `SharedWorker` posts it), started by
//! the holder with `Op::start`.
//!
//! Only operations whose start runs no application code are posted: tag sends and
//! receives of contiguous or I/O-vector data, reporting to a request (not a completion
//! queue). Invariant: a value holds everything its start needs; the buffers it names are
//! the application's, valid until the operation completes (the API's contract).

pub(crate) use ucp::shared::Op as PostedOp;
use ucp::Buf;

/// True for a buffer a value may carry to another thread (no application callbacks).
#[inline(always)]
pub(crate) fn movable(buf: &Buf) -> bool {
    !buf.is_generic()
}
