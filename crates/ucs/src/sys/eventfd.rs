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

    /// Wraps a descriptor that is known to be an eventfd (a clone of one of ours).
    pub fn from_owned(fd: OwnedFd) -> EventFd {
        EventFd { fd }
    }

    /// Wraps a descriptor that an address named (duplicated from a peer, or from this
    /// process for an address of its own), after checking that it is an eventfd:
    /// `signal` writes to it, and an address that named some other descriptor (a file,
    /// a socket) must not make rucx write into that. `InvalidAddr` when it is not one.
    /// Where `/proc` cannot say, the descriptor is taken as it is.
    pub fn from_peer(fd: OwnedFd) -> Result<EventFd> {
        let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
        match std::fs::read_link(&link) {
            Ok(target) if target.as_os_str() != "anon_inode:[eventfd]" => {
                tracing::debug!("{link} is {target:?}, not an eventfd");
                Err(Status::InvalidAddr)
            }
            _ => Ok(EventFd { fd }),
        }
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

    /// A descriptor named by an address is taken only if it is an eventfd.
    #[test]
    fn from_peer_takes_eventfds_only() {
        let e = EventFd::new().unwrap();
        let dup = e.as_fd().try_clone_to_owned().unwrap();
        let w = EventFd::from_peer(dup).unwrap();
        w.signal().unwrap();
        assert!(e.drain(), "the checked duplicate wakes the original");
        let (r, _wr) = rustix::pipe::pipe().unwrap();
        assert_eq!(EventFd::from_peer(r).err(), Some(Status::InvalidAddr));
        let file = std::fs::File::open("/proc/self/status").unwrap();
        assert_eq!(
            EventFd::from_peer(OwnedFd::from(file)).err(),
            Some(Status::InvalidAddr)
        );
    }
}
