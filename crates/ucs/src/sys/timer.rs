//! A one-shot monotonic timer as a file descriptor (timerfd), for epoll sets that must
//! wake at a deadline ([`crate::now_ns`] time).
//!
//! Invariant: `at` is what the kernel timer is set to, so setting the same deadline
//! again costs no system call.

use crate::Result;
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// A nonblocking, close-on-exec timerfd on the monotonic clock.
pub struct DeadlineTimer {
    fd: OwnedFd,
    /// The deadline set, in `now_ns` nanoseconds (`None`: disarmed).
    at: Option<u64>,
}

impl DeadlineTimer {
    /// A disarmed timer.
    pub fn new() -> Result<DeadlineTimer> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK,
        )?;
        Ok(DeadlineTimer { fd, at: None })
    }

    /// Makes the descriptor readable at `at` (`None` disarms it). Re-arming also clears an
    /// expiry that was not read.
    pub fn set(&mut self, at: Option<u64>) -> Result<()> {
        if at == self.at {
            return Ok(());
        }
        let ts = |t: u64| Timespec {
            tv_sec: (t / 1_000_000_000) as _,
            tv_nsec: (t % 1_000_000_000) as _,
        };
        let spec = Itimerspec {
            it_interval: ts(0),
            // All zero disarms; a deadline of 0 is long past, so 1 ns fires at once.
            it_value: ts(at.map_or(0, |t| t.max(1))),
        };
        timerfd_settime(&self.fd, TimerfdTimerFlags::ABSTIME, &spec)?;
        self.at = at;
        Ok(())
    }

    /// Consumes an expiry (the descriptor is no longer readable) and disarms.
    pub fn clear(&mut self) {
        let _ = rustix::io::read(&self.fd, &mut [0u8; 8]);
        self.at = None;
    }
}

impl AsFd for DeadlineTimer {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_at_the_deadline_and_clears() {
        let mut t = DeadlineTimer::new().unwrap();
        let readable = |t: &DeadlineTimer| crate::sys::poll::readable(t.as_fd(), 0).unwrap();
        assert!(!readable(&t));
        t.set(Some(crate::now_ns() + 2_000_000)).unwrap();
        assert!(
            crate::sys::poll::readable(t.as_fd(), 1000).unwrap(),
            "never fired"
        );
        t.clear();
        assert!(!readable(&t));
        t.set(Some(crate::now_ns() + 10_000_000_000)).unwrap();
        t.set(None).unwrap();
        assert!(
            !crate::sys::poll::readable(t.as_fd(), 20).unwrap(),
            "disarmed yet fired"
        );
    }
}
