//! Shared-memory segments: anonymous memfd files, mode 0600, that peers reach through
//! `pidfd_getfd`.
//!
//! Invariants: a segment has no name in any file system, so it disappears with the last
//! descriptor and mapping, also when its owner is killed; its mode is owner-only; a peer
//! that attaches checks the inode and length it was told against what it got, so a reused
//! descriptor number in the owner never maps the wrong file.

use crate::sys::{mapping::Mapping, pidfd};
use crate::{Result, Status};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// What a peer needs to attach to a segment. Carried inside addresses and remote keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SegmentId {
    /// Owner's process id.
    pub pid: u32,
    /// The segment's descriptor number in the owner.
    pub fd: i32,
    /// The memfd's inode number, checked on attach.
    pub ino: u64,
    /// Length of the segment in bytes.
    pub len: u64,
}

/// A segment created by this process (owned) or attached from another one.
pub struct ShmSegment {
    // Field order: the mapping is dropped before the descriptor.
    map: Mapping,
    fd: OwnedFd,
    id: SegmentId,
}

impl ShmSegment {
    /// Creates a zero-filled segment of `len` bytes (rounded up to the page size), mapped
    /// into this process. `name` only labels it in /proc for debugging.
    pub fn create(name: &str, len: usize) -> Result<ShmSegment> {
        let len = round_up(len.max(1), crate::sys::host::page_size());
        let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC).map_err(|e| {
            tracing::warn!("memfd_create failed: {e}");
            Status::ShmemSegment
        })?;
        rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o600))
            .map_err(|_| Status::ShmemSegment)?;
        rustix::fs::ftruncate(&fd, len as u64).map_err(|e| {
            tracing::warn!("ftruncate of shm segment to {len} failed: {e}");
            Status::NoMemory
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|_| Status::ShmemSegment)?;
        let map = Mapping::map_shared(&fd, len)?;
        let id = SegmentId {
            pid: pidfd::current_pid(),
            fd: fd.as_raw_fd(),
            ino: st.st_ino,
            len: len as u64,
        };
        Ok(ShmSegment { map, fd, id })
    }

    /// Maps the segment `id` of another process (or of this one).
    pub fn attach(id: &SegmentId) -> Result<ShmSegment> {
        let len = usize::try_from(id.len).map_err(|_| Status::InvalidAddr)?;
        if len == 0 {
            return Err(Status::InvalidAddr);
        }
        let fd = pidfd::fd_of_process(id.pid, id.fd)?;
        let st = rustix::fs::fstat(&fd).map_err(|_| Status::ShmemSegment)?;
        if st.st_ino != id.ino || (st.st_size as u64) < id.len {
            tracing::debug!("segment {id:?} does not match the descriptor found");
            return Err(Status::InvalidAddr);
        }
        let map = Mapping::map_shared(&fd, len)?;
        Ok(ShmSegment { map, fd, id: *id })
    }

    /// Maps at least `len` bytes of the segment that is descriptor `fd` of process `pid`,
    /// after checking that the descriptor is a memfd named `name` (its creator gives each
    /// segment a name it never reuses, so a descriptor number that was closed and reused
    /// in the owner is refused) and that the file holds `len` bytes.
    pub fn attach_named(pid: u32, fd: i32, name: &str, len: usize) -> Result<ShmSegment> {
        if len == 0 || fd < 0 {
            return Err(Status::InvalidAddr);
        }
        let len = len
            .checked_next_multiple_of(crate::sys::host::page_size())
            .ok_or(Status::InvalidAddr)?;
        let owned = pidfd::fd_of_process(pid, fd)?;
        let link = std::fs::read_link(format!("/proc/self/fd/{}", owned.as_raw_fd()))
            .map_err(|_| Status::ShmemSegment)?;
        let want = format!("/memfd:{name} (deleted)");
        if link.as_os_str().as_encoded_bytes() != want.as_bytes() {
            tracing::debug!("descriptor {fd} of {pid} is {link:?}, not the segment {name}");
            return Err(Status::InvalidAddr);
        }
        let st = rustix::fs::fstat(&owned).map_err(|_| Status::ShmemSegment)?;
        if (st.st_size as u64) < len as u64 {
            tracing::debug!("segment {name} of {pid} is shorter than {len} bytes");
            return Err(Status::InvalidAddr);
        }
        let map = Mapping::map_shared(&owned, len)?;
        let id = SegmentId {
            pid,
            fd,
            ino: st.st_ino,
            len: len as u64,
        };
        Ok(ShmSegment { map, fd: owned, id })
    }

    /// The segment's identity for peers.
    pub fn id(&self) -> &SegmentId {
        &self.id
    }

    /// Base address of the mapping in this process.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Never true: segments are at least one page.
    #[inline]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The file mode bits of the segment (0o600 for segments rucx creates).
    pub fn mode(&self) -> Result<u32> {
        let st = rustix::fs::fstat(&self.fd).map_err(Status::from)?;
        Ok(st.st_mode & 0o777)
    }

    /// The descriptor, for callers that pass it on.
    pub fn fd(&self) -> impl AsFd + '_ {
        &self.fd
    }
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_is_owner_only_and_attachable() {
        let a = ShmSegment::create("rucx-test", 10).unwrap();
        assert_eq!(a.mode().unwrap(), 0o600);
        assert_eq!(a.len() % crate::sys::host::page_size(), 0);
        // SAFETY: the mapping is at least 10 bytes long and owned by `a`.
        unsafe { a.as_ptr().write(42) };
        let b = ShmSegment::attach(a.id()).unwrap();
        // SAFETY: same segment, mapped by `b`.
        assert_eq!(unsafe { b.as_ptr().read() }, 42);
    }

    #[test]
    fn attach_named_checks_name_and_length() {
        let a = ShmSegment::create("rucx-test-named-7", 10).unwrap();
        // SAFETY: the mapping is at least one page long and owned by `a`.
        unsafe { a.as_ptr().add(5).write(9) };
        let (pid, fd) = (a.id().pid, a.id().fd);
        let b = ShmSegment::attach_named(pid, fd, "rucx-test-named-7", 10).unwrap();
        // SAFETY: same segment, mapped by `b`.
        assert_eq!(unsafe { b.as_ptr().add(5).read() }, 9);
        for (name, len) in [("rucx-test-named-8", 10), ("rucx-test-named-", 10)] {
            assert_eq!(
                ShmSegment::attach_named(pid, fd, name, len).err(),
                Some(Status::InvalidAddr)
            );
        }
        let page = crate::sys::host::page_size();
        assert!(ShmSegment::attach_named(pid, fd, "rucx-test-named-7", page + 1).is_err());
        assert!(ShmSegment::attach_named(pid, fd, "rucx-test-named-7", 0).is_err());
        assert!(ShmSegment::attach_named(pid, 100_000, "rucx-test-named-7", 10).is_err());
    }

    #[test]
    fn attach_checks_inode() {
        let a = ShmSegment::create("rucx-test", 10).unwrap();
        let mut id = *a.id();
        id.ino ^= 1;
        assert_eq!(ShmSegment::attach(&id).err(), Some(Status::InvalidAddr));
        id = *a.id();
        id.fd = 100_000;
        assert!(ShmSegment::attach(&id).is_err());
        id = *a.id();
        id.len = 0;
        assert!(ShmSegment::attach(&id).is_err());
    }
}
