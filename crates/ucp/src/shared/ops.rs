//! The operations a thread can post to a shared worker, as values: run at once by a
//! thread that finds the worker free, or queued for the thread that holds it.
//!
//! Each variant carries what its nonblocking worker call needs, by value: a [`Buf`]
//! (whose maker promised its memory for as long as the operation runs, whichever thread
//! runs it) and a copy of an active message's header.

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
        header: Vec<u8>,
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
        src: Buf,
        addr: u64,
        rk: RemoteKey,
    },
    Get {
        ep: Ep,
        dst: Buf,
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
        result: Buf,
        addr: u64,
        rk: RemoteKey,
    },
    PutSignal {
        ep: Ep,
        src: Buf,
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
    /// `cb`. (The memory it names is covered by the contract of the `Buf` constructors.)
    #[inline(never)]
    pub fn start(self, w: &mut Worker, cb: Option<Callback>) -> Result<Option<Request>> {
        Ok(match self.issue(w, cb)? {
            Issue::Done(_) => None,
            Issue::Pending(r) => Some(r),
        })
    }

    /// Runs the operation's nonblocking call on the locked worker.
    pub(crate) fn issue(self, w: &mut Worker, cb: Option<Callback>) -> Result<Issue> {
        Ok(match self {
            Op::TagSend { ep, buf, tag, sync } => send_like(w.tag_send_nb(ep, buf, tag, sync, cb)?),
            Op::TagRecv { buf, tag, mask } => Issue::Pending(w.tag_recv_nb(buf, tag, mask, cb)?),
            Op::AmSend {
                ep,
                id,
                header,
                buf,
                flags,
            } => send_like(w.am_send_nb(ep, id, &header, buf, flags, cb)?),
            Op::StreamSend { ep, buf } => send_like(w.stream_send_nb(ep, buf, cb)?),
            Op::StreamRecv { ep, buf, waitall } => match w.stream_recv_nb(ep, buf, waitall, cb)? {
                StreamRecv::Done(n) => Issue::Done(Outcome {
                    status: Status::Ok,
                    info: RecvInfo {
                        sender_tag: 0,
                        length: n,
                    },
                }),
                StreamRecv::Pending(r) => Issue::Pending(r),
            },
            Op::Put { ep, src, addr, rk } => send_like(w.put_nb(ep, src, addr, &rk, cb)?),
            Op::Get { ep, dst, addr, rk } => send_like(w.get_nb(ep, dst, addr, &rk, cb)?),
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
            } => send_like(w.atomic_fetch_nb(ep, op, size, value, compare, result, addr, &rk, cb)?),
            Op::PutSignal {
                ep,
                src,
                addr,
                rk,
                signal_addr,
                signal_rk,
                op,
                value,
            } => send_like(w.put_signal_nb(
                ep,
                src,
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
