//! Pinning a process to one CPU (ucx_perftest's `-c`), and parsing CPU lists.

use rustix::process::{sched_getaffinity, sched_setaffinity, CpuSet};
use ucs::{Result, Status};

/// Pins the calling thread (the whole process, when called before it starts others) to
/// `cpu`.
pub fn pin_to_cpu(cpu: usize) -> Result<()> {
    if cpu >= CpuSet::MAX_CPU {
        tracing::error!("cpu {cpu} is out of range");
        return Err(Status::InvalidParam);
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).map_err(|e| {
        tracing::error!("cannot pin to cpu {cpu}: {e}");
        Status::from(e)
    })
}

/// The CPUs this process may run on, in increasing order (empty if unknown).
pub fn allowed_cpus() -> Vec<usize> {
    match sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        Err(_) => Vec::new(),
    }
}

/// Parses a CPU list: numbers and ranges separated by commas ("0,1", "2-3").
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b || b >= CpuSet::MAX_CPU {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => {
                let c: usize = part.parse().ok()?;
                if c >= CpuSet::MAX_CPU {
                    return None;
                }
                cpus.push(c);
            }
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_may_run_somewhere() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0,1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("2-4, 7"), Some(vec![2, 3, 4, 7]));
        for bad in ["", "a", "1,", "3-1", "-1", "99999"] {
            assert_eq!(parse_cpu_list(bad), None, "{bad}");
        }
    }
}
