//! The window of tag_bw / tag_mr with `--cq`: operations report into a completion queue
//! (`ucp::Cq`) instead of returning requests, and the window is a count of operations in
//! flight, lowered by the entries polled. An entry with an error status is an error of the
//! test; the one operation whose data is checked carries the context [`CHECKED`].

use super::{MsgBuf, MASK, TAG};
use crate::channel::Channel;
use crate::transport::wait::{check_stall, SPINS};
use std::time::Duration;
use ucp::{Callback, Cq, CqEntry, Ep, RecvInfo, Worker};
use ucs::{Result, Status};

/// The context of the operation whose completion is looked at (the checked message).
pub(super) const CHECKED: u64 = 1;

/// Operations in flight on one queue.
pub(super) struct CqWindow {
    cq: Cq,
    out: Vec<CqEntry>,
    pub inflight: usize,
    /// What the [`CHECKED`] operation's entry reported, once it came.
    pub checked: Option<RecvInfo>,
}

impl CqWindow {
    pub(super) fn new(window: usize) -> Result<CqWindow> {
        Ok(CqWindow {
            cq: Cq::new(window.max(1) * 2)?,
            out: (0..64).map(|_| CqEntry::default()).collect(),
            inflight: 0,
            checked: None,
        })
    }

    /// The callback of a new operation (counted in flight).
    #[inline]
    pub(super) fn cb(&mut self, user: u64) -> Option<Callback> {
        self.inflight += 1;
        Some(Callback::cq(&self.cq, user))
    }

    /// Takes what the queue holds; returns how many.
    #[inline]
    pub(super) fn poll(&mut self, what: &str) -> Result<usize> {
        let n = self.cq.poll(&mut self.out);
        for e in &self.out[..n] {
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

/// One send or receive of the test message reporting into a completion queue.
///
/// # Safety
/// As for the plain sends and receives of the tests, until the operation's entry came.
#[inline]
pub(super) unsafe fn post_cq(
    w: &mut Worker,
    ep: Option<Ep>,
    buf: &MsgBuf,
    q: &mut CqWindow,
    user: u64,
) -> Result<()> {
    // SAFETY: passed on to the caller.
    unsafe {
        match ep {
            Some(ep) => w
                .tag_send_nb(ep, buf.ucp(), TAG, false, q.cb(user))
                .map(drop),
            None => w.tag_recv_nb(buf.ucp(), TAG, MASK, q.cb(user)).map(drop),
        }
    }
}
