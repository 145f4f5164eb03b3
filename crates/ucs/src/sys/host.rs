//! Host identity and machine facts.
//!
//! The host id decides shared-memory reachability: two interfaces can use shm only when
//! their host ids are equal. It hashes the kernel's boot id, the host name and the network
//! namespace: processes in different network namespaces (containers, or the test hosts
//! made with `ip netns`) count as different hosts and talk over the network, as they would
//! on separate machines, while two machines or two boots never collide in practice.

use std::sync::OnceLock;

/// A 64-bit id of this running kernel.
pub fn host_id() -> u64 {
    static ID: OnceLock<u64> = OnceLock::new();
    *ID.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let name = hostname();
        let ns = crate::sys::net::netns_id();
        fnv1a(boot.trim().as_bytes())
            ^ fnv1a(name.as_bytes()).rotate_left(17)
            ^ fnv1a(&ns.to_le_bytes()).rotate_left(39)
    })
}

/// A 64-bit id of the CPUs this process competes for: the running kernel's boot id and
/// this process's cgroup cpuset (else the online CPUs). Unlike [`host_id`] it ignores the
/// network namespace and the host name: processes in different namespaces or containers
/// of one machine still share its CPUs, which is what decides whether they outnumber them.
pub fn cpu_domain_id() -> u64 {
    static ID: OnceLock<u64> = OnceLock::new();
    *ID.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let cpus = std::fs::read_to_string("/sys/fs/cgroup/cpuset.cpus.effective")
            .ok()
            .filter(|s| count_cpu_list(s).is_some())
            .or_else(|| std::fs::read_to_string("/sys/devices/system/cpu/online").ok())
            .unwrap_or_default();
        fnv1a(boot.trim().as_bytes()) ^ fnv1a(cpus.trim().as_bytes()).rotate_left(29)
    })
}

/// The host name (empty if unknown).
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The page size.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// Number of CPUs this process may run on (its affinity mask and CPU quota).
pub fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Number of CPUs the processes of this host share: the cgroup's cpuset (v2) when there
/// is one, else the online CPUs; never fewer than [`cpu_count`]. Unlike [`cpu_count`] it
/// does not shrink when a process is pinned to one CPU, so processes pinned one per CPU
/// do not count themselves as outnumbering the cores. Read once per process (the files
/// and `available_parallelism` cost a dozen system calls), then cached.
pub fn host_cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(read_host_cpus)
}

fn read_host_cpus() -> usize {
    let listed = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| count_cpu_list(&s))
    };
    listed("/sys/fs/cgroup/cpuset.cpus.effective")
        .or_else(|| listed("/sys/devices/system/cpu/online"))
        .unwrap_or(0)
        .max(cpu_count())
}

/// The number of CPUs in a kernel CPU list ("0-3,8,10-11"); `None` if it is empty or
/// malformed.
pub fn count_cpu_list(s: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in s.trim().split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (
                a.trim().parse::<usize>().ok()?,
                b.trim().parse::<usize>().ok()?,
            ),
            None => {
                let c = part.trim().parse::<usize>().ok()?;
                (c, c)
            }
        };
        n = n.checked_add(hi.checked_sub(lo)? + 1)?;
    }
    (n > 0).then_some(n)
}

/// FNV-1a, 64 bit: a small stable hash for ids (not for security).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// 64 random bits from the kernel (for unique ids, not for secrets); falls back to a
/// mix of the clock and the process id if the kernel has no entropy call.
pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    match rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()) {
        Ok(8) => u64::from_le_bytes(b),
        _ => {
            let t = crate::timer::now_ns();
            fnv1a(&t.to_le_bytes()) ^ u64::from(crate::sys::pidfd::current_pid()).rotate_left(32)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_domain_id_is_stable_and_not_the_host_id() {
        let a = super::cpu_domain_id();
        assert_eq!(a, super::cpu_domain_id());
        assert_ne!(a, super::host_id());
    }

    #[test]
    fn host_id_is_stable() {
        assert_eq!(super::host_id(), super::host_id());
        assert_ne!(super::host_id(), 0);
        assert!(super::page_size() >= 4096);
    }

    #[test]
    fn cpu_lists_are_counted() {
        use super::count_cpu_list as c;
        assert_eq!(c("0-1\n"), Some(2));
        assert_eq!(c("0-3,8,10-11"), Some(7));
        assert_eq!(c("5"), Some(1));
        assert_eq!(c(""), None);
        assert_eq!(c("3-1"), None);
        assert_eq!(c("a-b"), None);
        assert!(super::host_cpus() >= super::cpu_count());
    }
}

/// True when this process and process `pid` may together run on one CPU only (both
/// pinned to the same CPU): one of them then runs only while the other does not. `false`
/// when they may use two CPUs or more, or when `pid`'s set cannot be read.
pub fn confined_to_one_cpu_with(pid: u32) -> bool {
    use rustix::process::{sched_getaffinity, CpuSet, Pid};
    let Some(peer) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    let (Ok(mine), Ok(theirs)) = (sched_getaffinity(None), sched_getaffinity(Some(peer))) else {
        return false;
    };
    (0..CpuSet::MAX_CPU)
        .filter(|&c| mine.is_set(c) || theirs.is_set(c))
        .nth(1)
        .is_none()
}

#[cfg(test)]
mod affinity_tests {
    use super::confined_to_one_cpu_with;

    #[test]
    fn a_process_on_one_cpu_is_confined_with_itself_only() {
        use rustix::process::{sched_getaffinity, CpuSet};
        let me = std::process::id();
        let cpus = sched_getaffinity(None)
            .map(|s| (0..CpuSet::MAX_CPU).filter(|&c| s.is_set(c)).count())
            .unwrap_or(0);
        assert_eq!(confined_to_one_cpu_with(me), cpus == 1);
        // No such process: not known to be confined.
        assert!(!confined_to_one_cpu_with(u32::MAX));
        assert!(!confined_to_one_cpu_with(0));
    }
}
