//! An event set over epoll: the one place a worker sleeps on many descriptors.
//!
//! Interfaces register their descriptors (sockets, eventfds) with a `u64` of user data and
//! get that value back when the descriptor becomes ready. The set's own descriptor is
//! readable whenever any member is ready, so it can itself be nested in an application's
//! poll loop (the worker's "efd").
//!
//! Invariants: the epoll descriptor is close-on-exec and closed on drop; a wait interrupted
//! by a signal resumes with the time that remains rather than returning early or sleeping
//! longer than asked. A descriptor should be removed before it is closed: epoll forgets a
//! closed descriptor only when no duplicate of it remains open.

use crate::timer::now_ns;
use crate::{Result, Status};
use rustix::event::epoll;
use rustix::io::Errno;
use std::ops::{BitOr, BitOrAssign};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// Readiness bits, both asked for (`READABLE`, `WRITABLE`, `EDGE`) and reported
/// (`READABLE`, `WRITABLE`, `ERROR`, `HANGUP`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Events(u32);

impl Events {
    /// No bits.
    pub const NONE: Events = Events(0);
    /// Data can be read (or the peer closed, and a read returns end of file).
    pub const READABLE: Events = Events(1);
    /// Data can be written.
    pub const WRITABLE: Events = Events(1 << 1);
    /// Asked for only: report a change of readiness once instead of while it lasts.
    pub const EDGE: Events = Events(1 << 2);
    /// Reported only: an error condition on the descriptor.
    pub const ERROR: Events = Events(1 << 3);
    /// Reported only: the peer hung up.
    pub const HANGUP: Events = Events(1 << 4);

    /// True when every bit of `other` is set in `self`.
    #[inline]
    pub const fn contains(self, other: Events) -> bool {
        self.0 & other.0 == other.0
    }

    /// True when no bit is set.
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The raw bits (for logging).
    #[inline]
    pub const fn bits(self) -> u32 {
        self.0
    }

    fn to_epoll(self) -> epoll::EventFlags {
        let mut f = epoll::EventFlags::empty();
        if self.contains(Events::READABLE) {
            f |= epoll::EventFlags::IN;
        }
        if self.contains(Events::WRITABLE) {
            f |= epoll::EventFlags::OUT;
        }
        if self.contains(Events::EDGE) {
            f |= epoll::EventFlags::ET;
        }
        f
    }

    fn from_epoll(f: epoll::EventFlags) -> Events {
        let mut e = Events::NONE;
        if f.intersects(epoll::EventFlags::IN | epoll::EventFlags::PRI) {
            e |= Events::READABLE;
        }
        if f.contains(epoll::EventFlags::OUT) {
            e |= Events::WRITABLE;
        }
        if f.contains(epoll::EventFlags::ERR) {
            e |= Events::ERROR;
        }
        if f.intersects(epoll::EventFlags::HUP | epoll::EventFlags::RDHUP) {
            e |= Events::HANGUP;
        }
        e
    }
}

impl BitOr for Events {
    type Output = Events;
    #[inline]
    fn bitor(self, rhs: Events) -> Events {
        Events(self.0 | rhs.0)
    }
}

impl BitOrAssign for Events {
    #[inline]
    fn bitor_assign(&mut self, rhs: Events) {
        self.0 |= rhs.0;
    }
}

/// A set of descriptors to wait on, each with user data.
pub struct EventSet {
    epfd: OwnedFd,
    buf: crate::sys::poll::EpollEvents,
}

impl EventSet {
    /// Events reported per wait when not told otherwise; more stay pending for the next.
    pub const DEFAULT_BATCH: usize = 32;

    /// An empty set.
    pub fn new() -> Result<EventSet> {
        EventSet::with_batch(Self::DEFAULT_BATCH)
    }

    /// An empty set that reports up to `batch` events per [`EventSet::wait`].
    pub fn with_batch(batch: usize) -> Result<EventSet> {
        let epfd = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| {
            tracing::warn!("epoll_create failed: {e}");
            Status::from(e)
        })?;
        Ok(EventSet {
            epfd,
            buf: crate::sys::poll::EpollEvents(epoll::EventVec::with_capacity(batch.max(1))),
        })
    }

    /// Starts watching `fd` for `events`; `user_data` comes back with each report.
    /// Adding a descriptor twice is `AlreadyExists`.
    pub fn add(&self, fd: impl AsFd, events: Events, user_data: u64) -> Result<()> {
        epoll::add(
            &self.epfd,
            fd,
            epoll::EventData::new_u64(user_data),
            events.to_epoll(),
        )
        .map_err(ctl_error)
    }

    /// Changes what is watched on `fd` and its user data. `NoElem` if `fd` is not in the set.
    pub fn modify(&self, fd: impl AsFd, events: Events, user_data: u64) -> Result<()> {
        epoll::modify(
            &self.epfd,
            fd,
            epoll::EventData::new_u64(user_data),
            events.to_epoll(),
        )
        .map_err(ctl_error)
    }

    /// Stops watching `fd`. `NoElem` if `fd` is not in the set.
    pub fn remove(&self, fd: impl AsFd) -> Result<()> {
        epoll::delete(&self.epfd, fd).map_err(ctl_error)
    }

    /// Waits up to `timeout_ms` milliseconds (0: poll, negative: forever) for a member to be
    /// ready and calls `f(user_data, events)` for each ready one. Returns how many were
    /// reported; 0 means the timeout passed.
    pub fn wait(&mut self, timeout_ms: i32, mut f: impl FnMut(u64, Events)) -> Result<usize> {
        let deadline = (timeout_ms > 0).then(|| now_ns() + timeout_ms as u64 * 1_000_000);
        let mut timeout = timeout_ms;
        loop {
            match epoll::wait(&self.epfd, &mut self.buf.0, timeout) {
                Ok(()) => break,
                Err(Errno::INTR) => {
                    if let Some(deadline) = deadline {
                        // Round up so that a remainder under 1 ms still waits, not polls.
                        let left_ns = deadline.saturating_sub(now_ns());
                        timeout = left_ns.div_ceil(1_000_000) as i32;
                    }
                }
                Err(e) => {
                    tracing::warn!("epoll_wait failed: {e}");
                    return Err(Status::from(e));
                }
            }
        }
        let mut n = 0;
        for ev in self.buf.0.iter() {
            f(ev.data.u64(), Events::from_epoll(ev.flags));
            n += 1;
        }
        Ok(n)
    }
}

impl AsFd for EventSet {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epfd.as_fd()
    }
}

impl AsRawFd for EventSet {
    fn as_raw_fd(&self) -> RawFd {
        self.epfd.as_raw_fd()
    }
}

/// Registration errors are caller mistakes with specific meanings; keep them apart from
/// generic I/O failures.
fn ctl_error(e: Errno) -> Status {
    match e {
        Errno::EXIST => Status::AlreadyExists,
        Errno::NOENT => Status::NoElem,
        Errno::BADF | Errno::PERM => Status::InvalidParam,
        e => Status::from(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::EventFd;
    use rustix::pipe::{pipe_with, PipeFlags};

    fn collect(set: &mut EventSet, timeout_ms: i32) -> Vec<(u64, Events)> {
        let mut got = Vec::new();
        let n = set.wait(timeout_ms, |d, e| got.push((d, e))).unwrap();
        assert_eq!(n, got.len());
        got
    }

    #[test]
    fn eventfd_wakes_with_user_data() {
        let mut set = EventSet::new().unwrap();
        let efd = EventFd::new().unwrap();
        set.add(&efd, Events::READABLE, 0xfeed_beef_0000_0001)
            .unwrap();
        assert_eq!(
            set.add(&efd, Events::READABLE, 2),
            Err(Status::AlreadyExists)
        );

        let start = now_ns();
        assert!(collect(&mut set, 20).is_empty());
        assert!(now_ns() - start >= 15_000_000, "timed wait returned early");
        assert!(collect(&mut set, 0).is_empty());

        efd.signal().unwrap();
        assert_eq!(
            collect(&mut set, 1000),
            [(0xfeed_beef_0000_0001, Events::READABLE)]
        );
        // Level-triggered: still ready until drained.
        assert_eq!(collect(&mut set, 0).len(), 1);
        assert!(efd.drain());
        assert!(collect(&mut set, 0).is_empty());

        efd.signal().unwrap();
        set.remove(&efd).unwrap();
        assert!(collect(&mut set, 0).is_empty());
        assert_eq!(set.remove(&efd), Err(Status::NoElem));
        assert_eq!(set.modify(&efd, Events::READABLE, 1), Err(Status::NoElem));
    }

    #[test]
    fn pipe_readable_writable_and_edge() {
        let mut set = EventSet::with_batch(1).unwrap();
        let (rd, wr) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).unwrap();
        set.add(rd.as_fd(), Events::READABLE, 10).unwrap();
        set.add(wr.as_fd(), Events::WRITABLE, 20).unwrap();
        assert_eq!(collect(&mut set, 0), [(20, Events::WRITABLE)]);

        set.modify(wr.as_fd(), Events::WRITABLE | Events::EDGE, 21)
            .unwrap();
        // Edge-triggered: reported once after the change, then quiet.
        assert_eq!(collect(&mut set, 0), [(21, Events::WRITABLE)]);
        assert!(collect(&mut set, 0).is_empty());

        // Whether our own write gives the writer a new edge depends on the kernel's pipe
        // wakeups, so the writer leaves the set first.
        set.remove(wr.as_fd()).unwrap();
        rustix::io::write(&wr, b"x").unwrap();
        assert_eq!(collect(&mut set, 100), [(10, Events::READABLE)]);
        assert_eq!(collect(&mut set, 0), [(10, Events::READABLE)]);

        drop(wr);
        let got = collect(&mut set, 100);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 10);
        assert!(got[0].1.contains(Events::READABLE | Events::HANGUP));
    }

    #[test]
    fn set_descriptor_is_nestable_and_cloexec() {
        let inner = EventSet::new().unwrap();
        let mut outer = EventSet::new().unwrap();
        outer.add(&inner, Events::READABLE, 7).unwrap();
        let efd = EventFd::new().unwrap();
        inner.add(&efd, Events::READABLE, 1).unwrap();
        assert!(collect(&mut outer, 0).is_empty());
        efd.signal().unwrap();
        assert_eq!(collect(&mut outer, 1000), [(7, Events::READABLE)]);

        let flags = rustix::io::fcntl_getfd(&inner).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }
}
