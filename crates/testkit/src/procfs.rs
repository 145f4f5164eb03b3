//! Looking at processes and shared memory from the outside, through /proc and /dev/shm:
//! what the segment tests need to prove that a segment is private and that it is gone.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The names in /dev/shm (empty when it does not exist). rucx's segments are memfds and
/// should never appear there; tests compare this before and after.
pub fn dev_shm_entries() -> BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// What a descriptor of some process refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdInfo {
    /// Permission bits of the file (`st_mode & 0o777`).
    pub mode: u32,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    /// The link text of /proc/<pid>/fd/<fd>, e.g. `/memfd:rucx-fifo (deleted)`.
    pub target: String,
}

/// Describes descriptor `fd` of process `pid` (following the /proc link to the file).
pub fn fd_info(pid: u32, fd: i32) -> std::io::Result<FdInfo> {
    let link = format!("/proc/{pid}/fd/{fd}");
    let target = std::fs::read_link(&link)?.to_string_lossy().into_owned();
    let md = std::fs::metadata(&link)?;
    Ok(FdInfo {
        mode: md.mode() & 0o777,
        dev: md.dev(),
        ino: md.ino(),
        size: md.size(),
        target,
    })
}

fn dev_major_minor(dev: u64) -> (u64, u64) {
    // The Linux encoding of dev_t (see makedev(3)).
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    (major, minor)
}

/// Every place on this host that still holds the file (`dev`, `ino`) open or mapped, as
/// `"<pid> fd <n>"` or `"<pid> map <line>"`. An empty result means the file has no
/// descriptor and no mapping left, so the kernel has freed it. Processes that vanish
/// during the scan are skipped.
pub fn holders_of(dev: u64, ino: u64) -> Vec<String> {
    let mut found = Vec::new();
    let (major, minor) = dev_major_minor(dev);
    let dev_text = format!("{major:02x}:{minor:02x}");
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for p in procs.filter_map(|e| e.ok()) {
        let name = p.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(fds) = std::fs::read_dir(p.path().join("fd")) {
            for fd in fds.filter_map(|e| e.ok()) {
                if let Ok(md) = std::fs::metadata(fd.path()) {
                    if md.dev() == dev && md.ino() == ino {
                        found.push(format!("{name} fd {}", fd.file_name().to_string_lossy()));
                    }
                }
            }
        }
        if let Ok(maps) = std::fs::read_to_string(p.path().join("maps")) {
            for line in maps.lines() {
                let mut w = line.split_whitespace();
                let (Some(_), Some(_), Some(_), Some(d), Some(i)) =
                    (w.next(), w.next(), w.next(), w.next(), w.next())
                else {
                    continue;
                };
                if d == dev_text && i.parse::<u64>().ok() == Some(ino) {
                    found.push(format!("{name} map {line}"));
                }
            }
        }
    }
    found
}

/// Whether process `pid` (its main thread) is asleep inside `poll`/`ppoll` right now;
/// `None` when /proc does not say (no such file, or an architecture this does not know).
/// Tests use it to make sure a receiver really sleeps before they send, so that a wakeup
/// is proven rather than a message found by arming.
pub fn sleeping_in_poll(pid: u32) -> Option<bool> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the parenthesised command name, which may contain spaces.
    let state = stat.rsplit_once(')')?.1.split_whitespace().next()?;
    let sc = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    let nr = sc.split_whitespace().next()?;
    if nr == "running" {
        return Some(false);
    }
    let nr: i64 = nr.parse().ok()?;
    let polls: &[i64] = if cfg!(target_arch = "x86_64") {
        &[7, 271] // poll, ppoll
    } else if cfg!(target_arch = "aarch64") || cfg!(target_arch = "riscv64") {
        &[73] // ppoll
    } else {
        return None;
    };
    Some(state == "S" && polls.contains(&nr))
}

/// True when /proc/<pid> exists.
pub fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_encoding() {
        for (major, minor) in [(0u32, 0u32), (8, 1), (0x1234, 0x5_6789), (0xfff, 0xff)] {
            let dev = libc::makedev(major, minor);
            assert_eq!(dev_major_minor(dev), (u64::from(major), u64::from(minor)));
        }
    }

    #[test]
    fn a_mapped_segment_is_found_by_descriptor_and_by_mapping() {
        let seg = ucs::sys::ShmSegment::create("rucx-procfs-test", 4096).unwrap();
        let id = *seg.id();
        let info = fd_info(std::process::id(), id.fd).unwrap();
        assert_eq!(info.ino, id.ino);
        let holders = holders_of(info.dev, info.ino);
        let me = std::process::id();
        assert!(
            holders.iter().any(|h| h.starts_with(&format!("{me} fd "))),
            "{holders:?}"
        );
        assert!(
            holders.iter().any(|h| h.starts_with(&format!("{me} map "))),
            "{holders:?}"
        );
        drop(seg);
        assert_eq!(holders_of(info.dev, info.ino), Vec::<String>::new());
    }

    #[test]
    fn own_descriptors_are_found() {
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        use std::os::fd::AsRawFd;
        let info = fd_info(std::process::id(), f.as_raw_fd()).unwrap();
        let holders = holders_of(info.dev, info.ino);
        let me = std::process::id().to_string();
        assert!(holders.iter().any(|h| h.starts_with(&me)), "{holders:?}");
    }
}
