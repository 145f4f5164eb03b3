//! The window of tag_bw / tag_mr with `--cq` or `--callbacks`: the window is a count of
//! operations in flight instead of a list of requests.
//!
//! - `--cq`: operations report into a completion queue (`ucp::Cq`, attached to the worker
//!   and named by `ucp::Callback::cq_attached`), and the count drops by
//!   the entries polled (an operation that completed in its call has its entry too).
//! - `--callbacks`: each operation carries a closure (`ucp::Callback::new`) that counts
//!   its completion; its request is released at once (the closure still runs), and an
//!   operation that completed in its call (no request, no closure call) is not counted.
//!
//! A completion with an error status is an error of the test; the one operation whose
//! data is checked carries the context [`CHECKED`].

use super::{MsgBuf, MASK, TAG};
use crate::channel::Channel;
use crate::transport::wait::{check_stall, SPINS};
use std::sync::atomic::{AtomicBool, AtomicI8, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use ucp::{Callback, Cq, CqEntry, CqId, Ep, RecvInfo, Request, Worker};
use ucs::{Result, Status};

/// The context of the operation whose completion is looked at (the checked message).
pub(super) const CHECKED: u64 = 1;

/// What the closures of `--callbacks` record.
#[derive(Default)]
struct Counted {
    done: AtomicUsize,
    /// The code of the first error status (0: none).
    failed: AtomicI8,
    checked: AtomicBool,
    checked_tag: AtomicU64,
    checked_len: AtomicUsize,
}

enum Via {
    Cq {
        cq: Cq,
        /// The queue attached to the test's worker.
        id: CqId,
        out: Vec<CqEntry>,
    },
    Fn(Arc<Counted>),
}

/// Operations in flight.
pub(super) struct CqWindow {
    via: Via,
    pub inflight: usize,
    /// What the [`CHECKED`] operation reported, once it completed.
    pub checked: Option<RecvInfo>,
}

impl CqWindow {
    /// A window of at most `window` operations, through a queue attached to `w` or
    /// (`callbacks`) closures.
    pub(super) fn new(w: &mut Worker, window: usize, callbacks: bool) -> Result<CqWindow> {
        let via = if callbacks {
            Via::Fn(Arc::default())
        } else {
            let cq = Cq::new(window.max(1) * 2)?;
            Via::Cq {
                id: w.cq_attach(&cq),
                cq,
                out: (0..64).map(|_| CqEntry::default()).collect(),
            }
        };
        Ok(CqWindow {
            via,
            inflight: 0,
            checked: None,
        })
    }

    /// The callback of a new operation (counted in flight until [`CqWindow::started`]
    /// says otherwise).
    #[inline]
    fn cb(&mut self, user: u64) -> Option<Callback> {
        self.inflight += 1;
        match &self.via {
            Via::Cq { id, .. } => Some(Callback::cq_attached(*id, user)),
            Via::Fn(c) => {
                let c = c.clone();
                Some(Callback::new(move |_, s, info| {
                    if s != Status::Ok {
                        let _ = c.failed.compare_exchange(
                            0,
                            s.code(),
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                    if user == CHECKED {
                        c.checked_tag.store(info.sender_tag, Ordering::Relaxed);
                        c.checked_len.store(info.length, Ordering::Relaxed);
                        c.checked.store(true, Ordering::Relaxed);
                    }
                    c.done.fetch_add(1, Ordering::Release);
                }))
            }
        }
    }

    /// The call that took the callback returned `r`.
    #[inline]
    fn started(&mut self, w: &mut Worker, r: Option<Request>) -> Result<()> {
        if let Via::Fn(_) = self.via {
            match r {
                // Completed in the call: the closure will not run.
                None => self.inflight -= 1,
                Some(r) => w.request_free(r)?,
            }
        }
        Ok(())
    }

    /// Takes the completions that came; returns how many.
    #[inline]
    pub(super) fn poll(&mut self, what: &str) -> Result<usize> {
        let n = match &mut self.via {
            Via::Cq { cq, out, .. } => {
                let n = cq.poll(out);
                for e in &out[..n] {
                    if e.status != Status::Ok {
                        tracing::error!("{what}: completed with {}", e.status);
                        return Err(e.status);
                    }
                    if e.user == CHECKED {
                        self.checked = Some(RecvInfo {
                            sender_tag: e.tag,
                            length: e.length,
                        });
                    }
                }
                n
            }
            Via::Fn(c) => {
                let n = c.done.swap(0, Ordering::Acquire);
                let f = c.failed.load(Ordering::Relaxed);
                if f != 0 {
                    let s = Status::from_code(i32::from(f)).unwrap_or(Status::IoError);
                    tracing::error!("{what}: completed with {s}");
                    return Err(s);
                }
                if c.checked.swap(false, Ordering::Relaxed) {
                    self.checked = Some(RecvInfo {
                        sender_tag: c.checked_tag.load(Ordering::Relaxed),
                        length: c.checked_len.load(Ordering::Relaxed),
                    });
                }
                n
            }
        };
        self.inflight -= n;
        Ok(n)
    }

    /// Progresses until at most `limit` operations are in flight.
    #[inline]
    pub(super) fn drain_to<C: Channel>(
        &mut self,
        w: &mut Worker,
        chan: &mut C,
        timeout: Duration,
        limit: usize,
        what: &str,
    ) -> Result<()> {
        let mut n: u32 = 0;
        let mut since = None;
        // Entries of operations that completed in their call are there already: poll
        // before progressing.
        loop {
            self.poll(what)?;
            if self.inflight <= limit {
                return Ok(());
            }
            if w.progress() > 0 {
                (n, since) = (0, None);
            }
            n = n.wrapping_add(1);
            if n % SPINS == 0 {
                check_stall(chan, &mut since, timeout, what)?;
            }
        }
    }
}

/// One send or receive of the test message, its completion counted by `q`.
#[inline]
pub(super) fn post_cq(
    w: &mut Worker,
    ep: Option<Ep>,
    buf: &MsgBuf,
    q: &mut CqWindow,
    user: u64,
) -> Result<()> {
    let cb = q.cb(user);
    let r = match ep {
        Some(ep) => w.tag_send_nb(ep, buf.ucp(), TAG, false, cb)?,
        None => Some(w.tag_recv_nb(buf.ucp(), TAG, MASK, cb)?),
    };
    q.started(w, r)
}
