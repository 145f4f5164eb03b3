//! Waiting for one descriptor to become readable.

use crate::{Result, Status};
use std::os::fd::BorrowedFd;

/// The buffer one `epoll_wait` fills, for an event set that moves between threads.
pub struct EpollEvents(pub rustix::event::epoll::EventVec);

// SAFETY: the buffer holds only the u64 user data registered with each descriptor (rustix
// keeps it in a pointer-sized union, hence not Send by default); nothing in it is ever
// dereferenced, so moving it to another thread is sound.
unsafe impl Send for EpollEvents {}

/// Blocks until `fd` is readable or `timeout_ms` passes (-1: forever); restarts after
/// signals. Returns true when it became readable.
pub fn readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> Result<bool> {
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    loop {
        match rustix::event::poll(&mut fds, timeout_ms) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Status::from(e)),
        }
    }
}
