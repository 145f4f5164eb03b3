//! Obtaining a duplicate of another process's file descriptor (`pidfd_getfd`).
//!
//! rucx shares memory segments and wakeup descriptors between processes this way instead
//! of through names in /dev/shm: nothing is left in a file system when the owner dies, even
//! by SIGKILL, and the permission needed is the one cross-memory attach needs anyway.

use crate::{Result, Status};
use rustix::process::{pidfd_getfd, pidfd_open, Pid, PidfdFlags, PidfdGetfdFlags};
use std::os::fd::{OwnedFd, RawFd};

/// A descriptor of process `pid`: it becomes readable when the process exits, which is
/// how shared-memory peers notice that a peer died.
pub fn open(pid: u32) -> Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or(Status::InvalidAddr)?;
    pidfd_open(pid, PidfdFlags::empty()).map_err(|e| {
        tracing::debug!("pidfd_open({pid:?}) failed: {e}");
        Status::Unreachable
    })
}

/// Duplicates descriptor `fd` of process `pid` into this process.
/// For this process itself it is a plain `dup`: the same result without a process
/// descriptor (which tools such as valgrind 3.19 do not support).
pub fn fd_of_process(pid: u32, fd: i32) -> Result<OwnedFd> {
    if fd < 0 {
        return Err(Status::InvalidAddr);
    }
    if pid == current_pid() {
        // SAFETY: the descriptor is only borrowed for the `dup` call, which the kernel
        // checks: a number that is not open fails with EBADF. This is what
        // `pidfd_getfd` on our own process would do with it.
        let own = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd as RawFd) };
        return rustix::io::fcntl_dupfd_cloexec(own, 0).map_err(|e| {
            tracing::debug!("dup of own descriptor {fd} failed: {e}");
            Status::Unreachable
        });
    }
    let pidfd = open(pid)?;
    pidfd_getfd(&pidfd, fd as RawFd, PidfdGetfdFlags::empty()).map_err(|e| {
        tracing::debug!("pidfd_getfd({pid:?}, {fd}) failed: {e}");
        Status::Unreachable
    })
}

/// This process's id.
pub fn current_pid() -> u32 {
    rustix::process::getpid().as_raw_nonzero().get() as u32
}
