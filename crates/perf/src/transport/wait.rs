//! Waiting for the peer, always bounded.
//!
//! In the timed loops a side spins on `progress()` (a system call or a sleep there would
//! be measured). Every 4096 fruitless spins (a progress call that handles an event starts
//! the count again) it reads the clock once and yields the CPU: past the timeout it gives
//! up, and after a second without events it also looks at the channel, so that a peer that
//! failed or died ends the test within about a second instead of at the timeout. Outside the
//! timed part ([`idle`]) a side sleeps on the interface's event descriptor instead, which
//! leaves the CPU to the peer on a machine with few cores.

use super::ops::Op;
use crate::channel::{Channel, Msg};
use std::time::{Duration, Instant};
use ucs::{Result, Status};
use uct::{EpId, Iface, Outcome};

/// Spins between two looks at the clock.
pub(crate) const SPINS: u32 = 4096;

/// Waiting longer than this makes a side check that its peer is still there.
pub(crate) const STALL_CHECK: Duration = Duration::from_secs(1);

/// The slow path of every wait: the deadline and the peer's health.
#[cold]
#[inline(never)]
pub(crate) fn check_stall<C: Channel>(
    chan: &mut C,
    since: &mut Option<Instant>,
    timeout: Duration,
    what: &str,
) -> Result<()> {
    let now = Instant::now();
    let waited = now - *since.get_or_insert(now);
    if waited >= timeout {
        tracing::error!("timed out after {timeout:?} waiting for {what}");
        return Err(Status::TimedOut);
    }
    if waited >= STALL_CHECK {
        peer_check(chan, what)?;
    }
    // Thousands of fruitless spins mean the peer is not running (more busy processes than
    // cores). Yielding lets it run if it waits for this CPU; the measurement of this
    // iteration is spoiled anyway, and a normal wait never gets here.
    std::thread::yield_now();
    Ok(())
}

/// Fails when the peer reported a failure or closed the channel.
pub fn peer_check<C: Channel>(chan: &mut C, what: &str) -> Result<()> {
    match try_msg(chan, what)? {
        None => Ok(()),
        Some(m) => {
            tracing::error!("unexpected message from peer while waiting for {what}: {m:?}");
            Err(Status::InvalidParam)
        }
    }
}

/// The peer's next message if one is here: a reported failure is `IoError`, a lost
/// channel its error (both logged), anything else is the caller's to judge.
pub(crate) fn try_msg<C: Channel>(chan: &mut C, what: &str) -> Result<Option<Msg>> {
    match chan.try_recv() {
        Ok(Some(Msg::Failed { error })) => {
            tracing::error!("the peer failed while this side waited for {what}: {error}");
            Err(Status::IoError)
        }
        Err(e) => {
            tracing::error!("lost the peer while waiting for {what}: {e}");
            Err(e)
        }
        r => r,
    }
}

/// Progresses `iface` until `done()` holds.
#[inline]
pub fn spin<C: Channel>(
    iface: &mut Iface,
    chan: &mut C,
    timeout: Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
) -> Result<()> {
    let mut n: u32 = 0;
    let mut since = None;
    loop {
        if done() {
            return Ok(());
        }
        if iface.progress() > 0 {
            // Events: the peer is alive; only fruitless spins count towards a stall.
            (n, since) = (0, None);
        }
        n = n.wrapping_add(1);
        if n % SPINS == 0 {
            check_stall(chan, &mut since, timeout, what)?;
        }
    }
}

/// Issues `op`, progressing and retrying while the transport has no resources. Returns
/// true when the operation completed in place, false when it is in progress (a flush
/// completes it).
#[inline]
pub fn issue<O: Op, C: Channel>(
    op: &mut O,
    iface: &mut Iface,
    chan: &mut C,
    timeout: Duration,
) -> Result<bool> {
    let mut n: u32 = 0;
    let mut since = None;
    loop {
        match op.issue(iface)? {
            Outcome::Done(()) => return Ok(true),
            Outcome::InProgress => return Ok(false),
            Outcome::NoResource => {
                if iface.progress() > 0 {
                    (n, since) = (0, None);
                }
                n = n.wrapping_add(1);
                if n % SPINS == 0 {
                    check_stall(chan, &mut since, timeout, "send resources")?;
                }
            }
        }
    }
}

/// Completes everything issued on `ep`.
pub fn flush<C: Channel>(
    iface: &mut Iface,
    ep: EpId,
    chan: &mut C,
    timeout: Duration,
) -> Result<()> {
    let mut n: u32 = 0;
    let mut since = None;
    loop {
        match iface.ep_flush(ep, 0)? {
            Outcome::Done(()) => return Ok(()),
            // shm completes in place; a transport that returns InProgress reports the end
            // of the flush through progress, which the NoResource path also drives.
            Outcome::InProgress | Outcome::NoResource => {
                iface.progress();
                n = n.wrapping_add(1);
                if n % SPINS == 0 {
                    check_stall(chan, &mut since, timeout, "flush")?;
                }
            }
        }
    }
}

/// Waits for `done()` outside the timed part: a short spin, then sleeps on the event
/// descriptor between progress calls.
pub fn idle<C: Channel>(
    iface: &mut Iface,
    chan: &mut C,
    timeout: Duration,
    what: &str,
    mut done: impl FnMut() -> bool,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last_check = Instant::now();
    for _ in 0..SPINS {
        if done() {
            return Ok(());
        }
        iface.progress();
    }
    loop {
        if done() {
            return Ok(());
        }
        // A message that arrives between this progress and the wait makes wait() return at
        // once (it arms first and reports pending events), so no wakeup is lost.
        iface.progress();
        if done() {
            return Ok(());
        }
        iface.wait(10)?;
        let now = Instant::now();
        if now >= deadline {
            tracing::error!("timed out after {timeout:?} waiting for {what}");
            return Err(Status::TimedOut);
        }
        if now - last_check >= STALL_CHECK {
            last_check = now;
            peer_check(chan, what)?;
        }
    }
}

/// Responder: progresses `iface` until the initiator says `Done`. The interface keeps
/// being progressed after this side's last send: over a transport that recovers losses
/// by retransmission (udp) the last answer may still have to be sent again, and only
/// progress does that.
pub fn progress_until_done<C: Channel>(
    iface: &mut Iface,
    chan: &mut C,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        iface.progress();
        match try_msg(chan, "the initiator's done")? {
            None => {}
            Some(Msg::Done) => return Ok(()),
            Some(m) => {
                tracing::error!("expected done from the initiator, got {m:?}");
                return Err(Status::InvalidParam);
            }
        }
        if Instant::now() >= deadline {
            tracing::error!("timed out after {timeout:?} waiting for the initiator's done");
            return Err(Status::TimedOut);
        }
        // Sleeps on the interface's descriptor (its retransmission timer included), at
        // most a millisecond, so the channel is looked at often enough.
        iface.wait(1)?;
    }
}
