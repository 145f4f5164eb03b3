//! Obtaining a duplicate of another process's file descriptor (`pidfd_getfd`).
//!
//! rucx shares memory segments and wakeup descriptors between processes this way instead
//! of through names in /dev/shm: nothing is left in a file system when the owner dies, even
//! by SIGKILL, and the permission needed is the one cross-memory attach needs anyway.

use crate::{Result, Status};
use rustix::process::{pidfd_getfd, pidfd_open, Pid, PidfdFlags, PidfdGetfdFlags};
use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Once;

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

/// This process's id, cached: `getpid` is a system call (about 200 ns on this project's
/// virtual machines), and the rendezvous paths name the process in every memory key.
/// A child made by `fork` forgets the parent's id before `fork` returns in it (an
/// `atfork` handler), so the cache is never stale.
pub fn current_pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => pid_slow(),
        p => p,
    }
}

/// The cached id of [`current_pid`]; 0 until first asked for, and again in a new child.
static PID: AtomicU32 = AtomicU32::new(0);

#[cold]
fn pid_slow() -> u32 {
    static FORGET_IN_CHILD: Once = Once::new();
    FORGET_IN_CHILD.call_once(|| {
        // SAFETY: `forget_pid` is an `extern "C"` function that only stores to an atomic
        // (async-signal-safe, as a handler run in a forked child must be); registering it
        // has no other precondition. If registration fails, the id is not cached at all.
        if unsafe { libc::pthread_atfork(None, None, Some(forget_pid)) } != 0 {
            CACHE_OFF.store(true, Ordering::Relaxed);
        }
    });
    let p = rustix::process::getpid().as_raw_nonzero().get() as u32;
    if !CACHE_OFF.load(Ordering::Relaxed) {
        PID.store(p, Ordering::Relaxed);
    }
    p
}

/// Set when the fork handler could not be registered: every call asks the kernel.
static CACHE_OFF: AtomicBool = AtomicBool::new(false);

extern "C" fn forget_pid() {
    PID.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel_pid() -> u32 {
        rustix::process::getpid().as_raw_nonzero().get() as u32
    }

    #[test]
    fn the_cached_id_is_the_kernels_also_in_a_forked_child() {
        let parent = current_pid();
        assert_eq!(parent, kernel_pid());
        assert_eq!(current_pid(), parent);
        // SAFETY: the child only reads its id (an atomic and the getpid system call, both
        // async-signal-safe) and leaves with `_exit`, so no lock another thread of the
        // test harness held at the fork is touched.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let ok = current_pid() == kernel_pid() && current_pid() != parent;
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child made above; `status` is a valid out pointer.
        let got = unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(got, child);
        assert!(
            libc::WIFEXITED(status),
            "the child did not exit: {status:#x}"
        );
        assert_eq!(libc::WEXITSTATUS(status), 0, "the child saw a stale id");
        assert_eq!(current_pid(), parent);
    }
}
