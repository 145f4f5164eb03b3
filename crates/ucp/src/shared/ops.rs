//! The operations a thread can post to a shared worker, as values: run at once by a
//! thread that finds the worker free, or queued for the thread that holds it.
//!
//! Each variant carries what its nonblocking worker call needs. Buffers are raw: the
//! posting call is `unsafe` and its caller keeps them valid until the operation's ticket
//! completes, whichever thread runs it.

use super::slots::Outcome;
use crate::core::cq::CqOp;
use crate::core::ep::Ep;
use crate::core::request::{AmSendFlags, Buf, Callback, RecvInfo, Request, SignalOp};
use crate::rma::RemoteKey;
use crate::stream::StreamRecv;
use crate::worker::Worker;
use ucs::{Result, Status};
use uct::{AtomicOp, AtomicSize};

/// One operation, as [`crate::SharedWorker::post_op`] and
/// [`crate::SharedWorker::post_cq`] take it: the arguments of the worker call of the same
/// name (see [`Worker`]).
pub enum Op {
    TagSend {
        ep: Ep,
        buf: Buf,
        tag: u64,
        sync: bool,
    },
    TagRecv {
        buf: Buf,
        tag: u64,
        mask: u64,
    },
    AmSend {
        ep: Ep,
        id: u16,
        header: (*const u8, usize),
        buf: Buf,
        flags: AmSendFlags,
    },
    StreamSend {
        ep: Ep,
        buf: Buf,
    },
    StreamRecv {
        ep: Ep,
        buf: Buf,
        waitall: bool,
    },
    Put {
        ep: Ep,
        src: *const u8,
        len: usize,
        addr: u64,
        rk: RemoteKey,
    },
    Get {
        ep: Ep,
        dst: *mut u8,
        len: usize,
        addr: u64,
        rk: RemoteKey,
    },
    AtomicPost {
        ep: Ep,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        addr: u64,
        rk: RemoteKey,
    },
    AtomicFetch {
        ep: Ep,
        op: AtomicOp,
        size: AtomicSize,
        value: u64,
        compare: u64,
        result: *mut u64,
        addr: u64,
        rk: RemoteKey,
    },
    PutSignal {
        ep: Ep,
        src: *const u8,
        len: usize,
        addr: u64,
        rk: RemoteKey,
        signal_addr: u64,
        signal_rk: RemoteKey,
        op: SignalOp,
        value: u64,
    },
    Flush {
        ep: Option<Ep>,
    },
}

// SAFETY: the raw pointers of an `Op` name the caller's buffers, which the `unsafe`
// posting calls require to stay valid, and untouched by the caller, until the operation
// completes; the worker touches them only under its lock, from whichever thread holds
// it, so moving the operation to that thread is sound.
unsafe impl Send for Op {}

/// What issuing an operation left.
pub(crate) enum Issue {
    Done(Outcome),
    Pending(Request),
}

fn send_like(r: Option<Request>) -> Issue {
    match r {
        None => Issue::Done(Outcome::ok()),
        Some(r) => Issue::Pending(r),
    }
}

impl Op {
    /// Starts the operation on a worker the caller holds (a layer with a lock of its own,
    /// such as the C API's thread mode multi, running operations other threads posted):
    /// `None` when it completed in the call, else its request, which reports through
    /// `cb`.
    ///
    /// # Safety
    /// The memory the operation names must stay valid until it completes, as for the
    /// worker call of the same name.
    #[inline(never)]
    pub unsafe fn start(self, w: &mut Worker, cb: Option<Callback>) -> Result<Option<Request>> {
        Ok(match self.issue(w, cb)? {
            Issue::Done(_) => None,
            Issue::Pending(r) => Some(r),
        })
    }

    /// Runs the operation's nonblocking call on the locked worker.
    pub(crate) fn issue(self, w: &mut Worker, cb: Option<Callback>) -> Result<Issue> {
        // SAFETY: every call below gets buffers that stay valid until the operation
        // completes, as the posting call's contract requires of its caller.
        unsafe {
            Ok(match self {
                Op::TagSend { ep, buf, tag, sync } => {
                    send_like(w.tag_send_nb(ep, buf, tag, sync, cb)?)
                }
                Op::TagRecv { buf, tag, mask } => {
                    Issue::Pending(w.tag_recv_nb(buf, tag, mask, cb)?)
                }
                Op::AmSend {
                    ep,
                    id,
                    header,
                    buf,
                    flags,
                } => {
                    let header = if header.1 == 0 {
                        &[][..]
                    } else {
                        std::slice::from_raw_parts(header.0, header.1)
                    };
                    send_like(w.am_send_nb(ep, id, header, buf, flags, cb)?)
                }
                Op::StreamSend { ep, buf } => send_like(w.stream_send_nb(ep, buf, cb)?),
                Op::StreamRecv { ep, buf, waitall } => {
                    match w.stream_recv_nb(ep, buf, waitall, cb)? {
                        StreamRecv::Done(n) => Issue::Done(Outcome {
                            status: Status::Ok,
                            info: RecvInfo {
                                sender_tag: 0,
                                length: n,
                            },
                        }),
                        StreamRecv::Pending(r) => Issue::Pending(r),
                    }
                }
                Op::Put {
                    ep,
                    src,
                    len,
                    addr,
                    rk,
                } => send_like(w.put_nb(ep, src, len, addr, &rk, cb)?),
                Op::Get {
                    ep,
                    dst,
                    len,
                    addr,
                    rk,
                } => send_like(w.get_nb(ep, dst, len, addr, &rk, cb)?),
                Op::AtomicPost {
                    ep,
                    op,
                    size,
                    value,
                    addr,
                    rk,
                } => {
                    w.atomic_post(ep, op, size, value, addr, &rk)?;
                    if let Some(cb) = cb {
                        // No request behind it: report its (local) completion now.
                        w.report_now(cb, CqOp::Atomic, Status::Ok);
                    }
                    Issue::Done(Outcome::ok())
                }
                Op::AtomicFetch {
                    ep,
                    op,
                    size,
                    value,
                    compare,
                    result,
                    addr,
                    rk,
                } => send_like(
                    w.atomic_fetch_nb(ep, op, size, value, compare, result, addr, &rk, cb)?,
                ),
                Op::PutSignal {
                    ep,
                    src,
                    len,
                    addr,
                    rk,
                    signal_addr,
                    signal_rk,
                    op,
                    value,
                } => send_like(w.put_signal_nb(
                    ep,
                    src,
                    len,
                    addr,
                    &rk,
                    signal_addr,
                    &signal_rk,
                    op,
                    value,
                    cb,
                )?),
                Op::Flush { ep: Some(ep) } => send_like(w.ep_flush_nb(ep, cb)?),
                Op::Flush { ep: None } => send_like(w.flush_nb(cb)?),
            })
        }
    }

    /// The kind of completion entry this operation reports.
    pub(crate) fn cq_op(&self) -> CqOp {
        match self {
            Op::TagSend { .. } => CqOp::TagSend,
            Op::TagRecv { .. } => CqOp::TagRecv,
            Op::AmSend { .. } => CqOp::AmSend,
            Op::StreamSend { .. } => CqOp::StreamSend,
            Op::StreamRecv { .. } => CqOp::StreamRecv,
            Op::Put { .. } | Op::PutSignal { .. } => CqOp::Put,
            Op::Get { .. } => CqOp::Get,
            Op::AtomicPost { .. } | Op::AtomicFetch { .. } => CqOp::Atomic,
            Op::Flush { .. } => CqOp::Flush,
        }
    }
}
