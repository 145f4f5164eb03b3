//! Timing of the measured loop and the numbers computed from it.
//!
//! The loop records one timestamp per iteration into a vector allocated before it starts
//! ([`Stamps`]); no allocation and no system call happen in between (`Instant::now` reads
//! the vDSO clock). Afterwards [`PerfResult::compute`] turns the timestamps into the
//! numbers of ucx_perftest's table:
//!
//! - per-iteration time `d_i = t_i - t_(i-1)` (with `t_(-1)` the start), divided by the
//!   test's factor (2 for ping-pong, since one iteration is a round trip);
//! - latency "50.0%ile": the median of the `d_i` (mean of the two middle ones for an even
//!   count), "average": their mean, "overall": the whole run including the final
//!   completion (flush or acknowledgement) divided by the iteration count;
//! - bandwidth and message rate derived from the average and the overall latency, in
//!   MB/s with MB = 2^20 bytes (as ucx_perftest).

use crate::registry::{Kind, Layout, TestId};
use serde::Serialize;
use std::time::Instant;
use ucs::{Result, Status};

/// Per-iteration timestamps of one measured run, in nanoseconds since its start.
#[derive(Debug)]
pub struct Stamps {
    start: Instant,
    marks: Vec<u64>,
}

impl Stamps {
    /// Room for `n` iterations; the clock starts now and again with [`Stamps::start`].
    pub fn with_capacity(n: usize) -> Stamps {
        Stamps {
            start: Instant::now(),
            marks: Vec::with_capacity(n),
        }
    }

    /// (Re)starts the clock and forgets earlier marks.
    pub fn start(&mut self) {
        self.marks.clear();
        self.start = Instant::now();
    }

    /// Records the end of one iteration. Never allocates within the capacity.
    #[inline]
    pub fn mark(&mut self) {
        let t = self.start.elapsed().as_nanos() as u64;
        if self.marks.len() < self.marks.capacity() {
            self.marks.push(t);
        }
    }

    /// Stops the clock: the run ended now (after its final completion).
    pub fn finish(self) -> Timing {
        let end = self.start.elapsed().as_nanos() as u64;
        Timing {
            marks: self.marks,
            end,
        }
    }
}

/// What a measured run recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// End of each iteration, nanoseconds since the start (non-decreasing).
    pub marks: Vec<u64>,
    /// End of the whole run, nanoseconds since the start.
    pub end: u64,
}

/// Median of `v` (reorders it): the middle value, or the mean of the two middle values.
pub fn median(v: &mut [u64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    let (_, &mut hi, _) = v.select_nth_unstable(n / 2);
    if n % 2 == 1 {
        return hi as f64;
    }
    // After the selection every element before n/2 is <= hi; the lower middle is their max.
    let lo = v[..n / 2].iter().copied().max().unwrap_or(hi);
    (lo as f64 + hi as f64) / 2.0
}

const MB: f64 = (1u64 << 20) as f64;

/// The result of one test, as printed in the table and the JSON line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PerfResult {
    pub test: TestId,
    pub transport: String,
    pub layout: Layout,
    pub size: usize,
    pub iterations: u64,
    pub warmup: u64,
    pub window: u32,
    /// Median per-iteration latency (halved for ping-pong), microseconds.
    pub latency_p50_us: f64,
    /// Mean per-iteration latency, microseconds.
    pub latency_avg_us: f64,
    /// Whole run including the final completion, per iteration, microseconds.
    pub latency_overall_us: f64,
    /// MB/s (2^20 bytes) from the average latency.
    pub bandwidth_mbps: f64,
    /// MB/s (2^20 bytes) over the whole run.
    pub bandwidth_overall_mbps: f64,
    /// Messages per second from the average latency.
    pub msg_rate: f64,
    /// Messages per second over the whole run.
    pub msg_rate_overall: f64,
    /// Length of the measured run, seconds.
    pub elapsed_s: f64,
    /// Time of each measured iteration in nanoseconds, in order (whole round trips for
    /// ping-pong tests). Not part of the JSON line.
    #[serde(skip)]
    pub samples_ns: Vec<u64>,
}

/// What a result is about (everything but the numbers).
#[derive(Clone, Debug, PartialEq)]
pub struct Subject {
    pub test: TestId,
    pub transport: String,
    pub layout: Layout,
    pub size: usize,
    pub warmup: u64,
    pub window: u32,
}

impl PerfResult {
    /// Computes the numbers of `timing` (one mark per measured iteration).
    pub fn compute(subject: Subject, kind: Kind, timing: &Timing) -> Result<PerfResult> {
        let n = timing.marks.len();
        if n == 0 || timing.marks.windows(2).any(|w| w[1] < w[0]) {
            tracing::error!("{}: no or disordered timestamps", subject.test);
            return Err(Status::InvalidParam);
        }
        let factor = kind.factor();
        let mut samples: Vec<u64> = Vec::with_capacity(n);
        let mut prev = 0;
        for &t in &timing.marks {
            samples.push(t - prev);
            prev = t;
        }
        let last = prev;
        let end = timing.end.max(last);
        let p50_ns = median(&mut samples.clone()) / factor;
        // A clock too coarse to see an iteration still must not divide by zero.
        let avg_ns = (last.max(1) as f64) / n as f64 / factor;
        let overall_ns = (end.max(1) as f64) / n as f64 / factor;
        let size = subject.size as f64;
        Ok(PerfResult {
            test: subject.test,
            transport: subject.transport,
            layout: subject.layout,
            size: subject.size,
            iterations: n as u64,
            warmup: subject.warmup,
            window: subject.window,
            latency_p50_us: p50_ns / 1e3,
            latency_avg_us: avg_ns / 1e3,
            latency_overall_us: overall_ns / 1e3,
            bandwidth_mbps: size / (avg_ns * 1e-9) / MB,
            bandwidth_overall_mbps: size / (overall_ns * 1e-9) / MB,
            msg_rate: 1e9 / avg_ns,
            msg_rate_overall: 1e9 / overall_ns,
            elapsed_s: end as f64 * 1e-9,
            samples_ns: samples,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(test: TestId, size: usize) -> Subject {
        Subject {
            test,
            transport: "shm".into(),
            layout: Layout::Short,
            size,
            warmup: 0,
            window: 0,
        }
    }

    #[test]
    fn median_odd_even_and_empty() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [5]), 5.0);
        assert_eq!(median(&mut [9, 1, 5]), 5.0);
        assert_eq!(median(&mut [4, 1, 3, 2]), 2.5);
        assert_eq!(median(&mut [7, 7, 1, 100, 7, 2]), 7.0);
        let mut big: Vec<u64> = (0..1001).rev().collect();
        assert_eq!(median(&mut big), 500.0);
    }

    #[test]
    fn stream_numbers() {
        // Four iterations of 100, 100, 300, 100 ns; the flush ends the run at 1000 ns.
        let t = Timing {
            marks: vec![100, 200, 500, 600],
            end: 1000,
        };
        let r = PerfResult::compute(subject(TestId::PutBw, 1 << 20), Kind::Stream, &t).unwrap();
        assert_eq!(r.iterations, 4);
        assert_eq!(r.samples_ns, vec![100, 100, 300, 100]);
        assert!((r.latency_p50_us - 0.1).abs() < 1e-12);
        assert!((r.latency_avg_us - 0.15).abs() < 1e-12);
        assert!((r.latency_overall_us - 0.25).abs() < 1e-12);
        // 1 MiB per 150 ns = 1/150e-9 MiB/s.
        assert!((r.bandwidth_mbps - 1.0 / 150e-9).abs() < 1e-3);
        assert!((r.bandwidth_overall_mbps - 1.0 / 250e-9).abs() < 1e-3);
        assert!((r.msg_rate - 1e9 / 150.0).abs() < 1e-6);
        assert!((r.msg_rate_overall - 4e6).abs() < 1e-6);
        assert!((r.elapsed_s - 1e-6).abs() < 1e-15);
    }

    #[test]
    fn ping_pong_halves_the_round_trip() {
        let t = Timing {
            marks: vec![200, 400, 600],
            end: 600,
        };
        let r = PerfResult::compute(subject(TestId::AmLat, 8), Kind::PingPong, &t).unwrap();
        assert!((r.latency_p50_us - 0.1).abs() < 1e-12);
        assert!((r.latency_avg_us - 0.1).abs() < 1e-12);
        assert!((r.latency_overall_us - 0.1).abs() < 1e-12);
        assert!((r.msg_rate - 1e7).abs() < 1e-3);
        assert!((r.bandwidth_mbps - 8.0 / 100e-9 / MB).abs() < 1e-6);
    }

    #[test]
    fn bad_timings_are_errors() {
        let s = subject(TestId::AmBw, 8);
        let empty = Timing {
            marks: vec![],
            end: 5,
        };
        assert!(PerfResult::compute(s.clone(), Kind::Stream, &empty).is_err());
        let back = Timing {
            marks: vec![5, 3],
            end: 9,
        };
        assert!(PerfResult::compute(s.clone(), Kind::Stream, &back).is_err());
        let zero = Timing {
            marks: vec![0, 0],
            end: 0,
        };
        let r = PerfResult::compute(s, Kind::Stream, &zero).unwrap();
        assert!(r.bandwidth_mbps.is_finite() && r.msg_rate.is_finite());
    }

    #[test]
    fn stamps_record_without_growing() {
        let mut s = Stamps::with_capacity(3);
        s.start();
        for _ in 0..5 {
            s.mark();
        }
        let t = s.finish();
        assert_eq!(t.marks.len(), 3);
        assert!(t.marks.windows(2).all(|w| w[0] <= w[1]));
        assert!(t.end >= t.marks[2]);
    }
}
