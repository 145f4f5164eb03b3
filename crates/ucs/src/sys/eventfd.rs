//! A nonblocking eventfd used to wake a sleeping process.

use crate::{Result, Status};
use rustix::event::{eventfd, EventfdFlags};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// A nonblocking, close-on-exec eventfd.
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// Creates an eventfd with counter 0.
    pub fn new() -> Result<EventFd> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(EventFd { fd })
    }

    /// Wraps a descriptor that is known to be an eventfd (for example one duplicated from
    /// a peer). A descriptor of another kind makes `signal` fail, never misbehave.
    pub fn from_owned(fd: OwnedFd) -> EventFd {
        EventFd { fd }
    }

    /// Adds one to the counter, waking whoever polls the descriptor.
    pub fn signal(&self) -> Result<()> {
        match rustix::io::write(&self.fd, &1u64.to_ne_bytes()) {
            Ok(_) => Ok(()),
            // The counter is saturated: the reader has wakeups pending already.
            Err(rustix::io::Errno::AGAIN) => Ok(()),
            Err(e) => Err(Status::from(e)),
        }
    }

    /// Resets the counter; returns true when it was non-zero.
    pub fn drain(&self) -> bool {
        let mut b = [0u8; 8];
        matches!(rustix::io::read(&self.fd, &mut b), Ok(8))
    }

    /// Blocks until the descriptor is readable or `timeout_ms` passes (-1: forever).
    /// Returns true when it became readable.
    pub fn wait(&self, timeout_ms: i32) -> Result<bool> {
        crate::sys::poll::readable(self.fd.as_fd(), timeout_ms)
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_then_drain() {
        let e = EventFd::new().unwrap();
        assert!(!e.drain());
        assert!(!e.wait(0).unwrap());
        e.signal().unwrap();
        e.signal().unwrap();
        assert!(e.wait(1000).unwrap());
        assert!(e.drain());
        assert!(!e.drain());
    }
}
