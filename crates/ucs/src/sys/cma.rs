//! Cross-memory attach: copying to and from another process's address space in one copy
//! (`process_vm_readv` / `process_vm_writev`).
//!
//! The remote range is whatever the peer said; the kernel checks it against the peer's
//! mappings and a bad range gives an error status, never a fault in this process.

use crate::{Result, Status};

/// Reads `local.len()` bytes at `remote_addr` of process `pid` into `local`.
pub fn read(pid: u32, remote_addr: u64, local: &mut [u8]) -> Result<()> {
    transfer(pid, remote_addr, local.as_mut_ptr(), local.len(), false)
}

/// Writes `local` to `remote_addr` of process `pid`.
pub fn write(pid: u32, remote_addr: u64, local: &[u8]) -> Result<()> {
    transfer(
        pid,
        remote_addr,
        local.as_ptr().cast_mut(),
        local.len(),
        true,
    )
}

/// Moves `len` bytes between `local` and the peer, looping over partial transfers.
/// `local` must be valid for reads (write direction) or writes (read direction) of `len`.
fn transfer(pid: u32, remote_addr: u64, local: *mut u8, len: usize, to_remote: bool) -> Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| Status::InvalidAddr)?;
    let mut done = 0usize;
    while done < len {
        let liov = libc::iovec {
            // SAFETY: done < len, so the offset stays inside the caller's buffer.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: len - done,
        };
        let raddr = remote_addr
            .checked_add(done as u64)
            .ok_or(Status::InvalidAddr)?;
        let riov = libc::iovec {
            iov_base: raddr as usize as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the local iovec lies inside the caller's slice (checked above); the
        // remote iovec is only interpreted by the kernel in the other process's space.
        let n = unsafe {
            if to_remote {
                libc::process_vm_writev(pid, &liov, 1, &riov, 1, 0)
            } else {
                libc::process_vm_readv(pid, &liov, 1, &riov, 1, 0)
            }
        };
        if n < 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if errno == libc::EINTR {
                continue;
            }
            tracing::debug!("cma transfer of {len} bytes with pid {pid} failed: errno {errno}");
            return Err(match errno {
                libc::EFAULT => Status::InvalidAddr,
                libc::EPERM => Status::Rejected,
                libc::ESRCH => Status::Unreachable,
                e => Status::from_errno(e),
            });
        }
        if n == 0 {
            return Err(Status::IoError);
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_read_write() {
        let pid = crate::sys::pidfd::current_pid();
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        write(pid, dst.as_mut_ptr() as u64, &src).unwrap();
        assert_eq!(src, dst);
        let mut back = vec![0u8; src.len()];
        read(pid, dst.as_ptr() as u64, &mut back).unwrap();
        assert_eq!(src, back);
    }

    #[test]
    fn bad_address_is_an_error() {
        let pid = crate::sys::pidfd::current_pid();
        let mut b = [0u8; 16];
        assert_eq!(read(pid, 8, &mut b), Err(Status::InvalidAddr));
        assert!(read(u32::MAX, 8, &mut b).is_err());
    }
}
