//! Waiting on a ucp worker, always bounded: every loop spins on `progress()` and, every
//! [`SPINS`] fruitless spins, looks at the clock and the peer ([`check_stall`], shared with
//! the transport tests), so a dead or failed peer ends the test within about a second.
//!
//! Requests are waited for and freed here; a request that completed with an error is an
//! error of the test.

use crate::channel::{Channel, Msg};
use crate::registry::TestId;
use crate::transport::wait::{check_stall, try_msg, SPINS};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use ucp::{Ep, RecvInfo, RecvPosted, Request, Worker};
use ucs::{Result, Status};

/// True when `r` completed successfully; an error when it completed otherwise.
#[inline]
pub(super) fn done(w: &Worker, r: Request, what: &str) -> Result<bool> {
    match w.request_test(r)? {
        None => Ok(false),
        Some(Status::Ok) => Ok(true),
        Some(s) => Err(failed(what, s)),
    }
}

/// Logs a request that completed with `s` and gives `s` back. Out of line: the logging
/// would otherwise take registers and a stack frame in the wait loops that inline the
/// callers.
#[cold]
#[inline(never)]
fn failed(what: &str, s: Status) -> Status {
    tracing::error!("{what}: the request completed with {s}");
    s
}

/// If `r` completed successfully: frees it and returns its receive information; an error
/// status is an error.
#[inline(always)]
pub(super) fn taken(w: &mut Worker, r: Request, what: &str) -> Result<Option<RecvInfo>> {
    match w.request_take(r)? {
        None => Ok(None),
        Some((Status::Ok, info)) => Ok(Some(info)),
        Some((s, _)) => Err(failed(what, s)),
    }
}

/// Progresses until `cond()` holds.
#[inline]
pub(super) fn spin<C: Channel>(
    w: &mut Worker,
    chan: &mut C,
    timeout: Duration,
    what: &str,
    mut cond: impl FnMut() -> bool,
) -> Result<()> {
    let mut n: u32 = 0;
    let mut since = None;
    loop {
        if cond() {
            return Ok(());
        }
        if w.progress() > 0 {
            // Events: the peer is alive; only fruitless spins count towards a stall.
            (n, since) = (0, None);
        }
        n = n.wrapping_add(1);
        if n % SPINS == 0 {
            check_stall(chan, &mut since, timeout, what)?;
        }
    }
}

/// Progresses until `send` (if any) and then `recv` complete; frees both and returns what
/// the receive got.
#[inline(always)]
pub(super) fn wait_pair<C: Channel>(
    w: &mut Worker,
    chan: &mut C,
    timeout: Duration,
    what: &str,
    mut send: Option<Request>,
    recv: RecvPosted,
) -> Result<RecvInfo> {
    if let (None, RecvPosted::Done(s, info)) = (send, recv) {
        return recv_done(s, info, what);
    }
    let mut n: u32 = 0;
    let mut since = None;
    // Progress first: a request passed in is still pending, and looking at it before
    // anything moved would cost a pool lookup per message.
    loop {
        if w.progress() > 0 {
            (n, since) = (0, None);
        }
        if let Some(s) = send {
            if taken(w, s, what)?.is_some() {
                send = None;
            }
        }
        if send.is_none() {
            match recv {
                RecvPosted::Done(s, info) => return recv_done(s, info, what),
                RecvPosted::Pending(r) => {
                    if let Some(info) = taken(w, r, what)? {
                        return Ok(info);
                    }
                }
            }
        }
        n = n.wrapping_add(1);
        if n % SPINS == 0 {
            check_stall(chan, &mut since, timeout, what)?;
        }
    }
}

/// The outcome of a receive that completed in its call.
fn recv_done(s: Status, info: RecvInfo, what: &str) -> Result<RecvInfo> {
    if s == Status::Ok {
        Ok(info)
    } else {
        tracing::error!("{what}: the receive completed with {s}");
        Err(s)
    }
}

/// Progresses until `r` completes; frees it and returns its receive information.
#[inline]
pub(super) fn wait_one<C: Channel>(
    w: &mut Worker,
    chan: &mut C,
    timeout: Duration,
    what: &str,
    r: Option<Request>,
) -> Result<RecvInfo> {
    let Some(r) = r else {
        return Ok(RecvInfo::default());
    };
    let mut n: u32 = 0;
    let mut since = None;
    // Progress first, as in `wait_pair`.
    loop {
        if w.progress() > 0 {
            (n, since) = (0, None);
        }
        if let Some(info) = taken(w, r, what)? {
            return Ok(info);
        }
        n = n.wrapping_add(1);
        if n % SPINS == 0 {
            check_stall(chan, &mut since, timeout, what)?;
        }
    }
}

/// Frees the completed requests at the front of `inflight` (one endpoint's operations
/// complete in order), calling `each` with the tag of every one freed, then progresses
/// until at most `limit` are outstanding.
#[inline]
pub(super) fn drain_tagged<C: Channel, T: Copy>(
    w: &mut Worker,
    chan: &mut C,
    timeout: Duration,
    inflight: &mut VecDeque<(Request, T)>,
    limit: usize,
    mut each: impl FnMut(T),
) -> Result<()> {
    let mut n: u32 = 0;
    let mut since = None;
    loop {
        while let Some(&(r, tag)) = inflight.front() {
            if !done(w, r, "an operation")? {
                break;
            }
            w.request_free(r)?;
            inflight.pop_front();
            each(tag);
        }
        if inflight.len() <= limit {
            return Ok(());
        }
        if w.progress() > 0 {
            (n, since) = (0, None);
        }
        n = n.wrapping_add(1);
        if n % SPINS == 0 {
            check_stall(chan, &mut since, timeout, "completions")?;
        }
    }
}

/// Progresses until at most `limit` requests of `inflight` are outstanding, freeing the
/// completed ones from the front.
#[inline]
pub(super) fn drain_to<C: Channel>(
    w: &mut Worker,
    chan: &mut C,
    timeout: Duration,
    inflight: &mut VecDeque<Request>,
    limit: usize,
) -> Result<()> {
    let mut n: u32 = 0;
    let mut since = None;
    loop {
        while let Some(&r) = inflight.front() {
            if !done(w, r, "an operation")? {
                break;
            }
            w.request_free(r)?;
            inflight.pop_front();
        }
        if inflight.len() <= limit {
            return Ok(());
        }
        if w.progress() > 0 {
            (n, since) = (0, None);
        }
        n = n.wrapping_add(1);
        if n % SPINS == 0 {
            check_stall(chan, &mut since, timeout, "completions")?;
        }
    }
}

/// Flushes `ep` (every operation issued on it so far completed at the peer) and waits.
pub(super) fn flush<C: Channel>(
    w: &mut Worker,
    chan: &mut C,
    timeout: Duration,
    ep: Ep,
) -> Result<()> {
    let r = w.ep_flush_nb(ep, None)?;
    wait_one(w, chan, timeout, "a flush", r).map(|_| ())
}

/// Progresses the worker until the peer's next channel message arrives (which it
/// returns; `Failed` is an error). The channel is looked at every [`SPINS`] spins; the
/// whole wait is bounded by `timeout`.
///
/// A side waiting for the peer's `Done` or `Verdict` this way keeps serving what the peer
/// may still need from its worker: the operations emulated by active messages, their
/// replies, rendezvous acknowledgements.
fn next_msg<C: Channel>(
    w: &mut Worker,
    chan: &mut C,
    timeout: Duration,
    what: &str,
) -> Result<Msg> {
    let deadline = Instant::now() + timeout;
    let mut n: u32 = 0;
    loop {
        w.progress();
        n = n.wrapping_add(1);
        if n % SPINS != 0 {
            continue;
        }
        if let Some(m) = try_msg(chan, what)? {
            return Ok(m);
        }
        if Instant::now() >= deadline {
            tracing::error!("timed out after {timeout:?} waiting for {what}");
            return Err(Status::TimedOut);
        }
        // On a machine with fewer cores than busy processes, let the peer run.
        std::thread::yield_now();
    }
}

/// Responder: progresses the worker (see [`next_msg`]) until the initiator says `Done`.
pub(super) fn progress_until_done<C: Channel>(
    w: &mut Worker,
    chan: &mut C,
    timeout: Duration,
) -> Result<()> {
    match next_msg(w, chan, timeout, "the initiator's done")? {
        Msg::Done => Ok(()),
        m => {
            tracing::error!("expected done from the initiator, got {m:?}");
            Err(Status::InvalidParam)
        }
    }
}

/// Initiator: ends the test on the responder and gets its verdict, progressing the worker
/// meanwhile (see [`next_msg`]).
pub(super) fn done_and_verdict<C: Channel>(
    w: &mut Worker,
    chan: &mut C,
    timeout: Duration,
    test: TestId,
) -> Result<()> {
    chan.send(&Msg::Done)?;
    match next_msg(w, chan, timeout, "the verdict")? {
        Msg::Verdict { error: None } => Ok(()),
        Msg::Verdict { error: Some(e) } => {
            tracing::error!("{test}: the responder found wrong data: {e}");
            Err(Status::IoError)
        }
        m => {
            tracing::error!("expected a verdict from the peer, got {m:?}");
            Err(Status::InvalidParam)
        }
    }
}

pub(super) use crate::handshake::judge;
