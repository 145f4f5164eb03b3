//! Waiting for one descriptor to become readable.

use crate::{Result, Status};
use std::os::fd::BorrowedFd;

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
