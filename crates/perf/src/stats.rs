//! Timing of the measured loop and the numbers computed from it.
//!
//! The loop records timestamps into a vector allocated before it starts ([`Stamps`]); no
//! allocation and no system call happen in between. The clock is [`crate::clock::Clock`]:
//! the CPU's time-stamp counter where it is invariant (about 10 ns a read), else `Instant`.
//!
//! Latency tests stamp every iteration. Bandwidth and message-rate tests stamp every
//! [`STREAM_STRIDE`] iterations (and after the last one): their iterations take tens of
//! nanoseconds, and even a cheap clock read per iteration would be a visible share of them.
//! A stamp then closes a batch of iterations, and the batch's time divided by its size is
//! the per-iteration sample of that batch.
//!
//! Afterwards [`PerfResult::compute`] turns the timestamps into the numbers of
//! ucx_perftest's table:
//!
//! - per-iteration time `d_i = t_i - t_(i-1)` (with `t_(-1)` the start; per batch, divided
//!   by the batch size), divided by the test's factor (2 for ping-pong, since one
//!   iteration is a round trip);
//! - latency "50.0%ile": the median of the `d_i` (mean of the two middle ones for an even
//!   count), "average": their mean, "overall": the whole run including the final
//!   completion (flush or acknowledgement) divided by the iteration count;
//! - bandwidth and message rate derived from the average and the overall latency, in
//!   MB/s with MB = 2^20 bytes (as ucx_perftest).

use crate::clock::Clock;
use crate::registry::{Api, Kind, Layout, TestId};
use serde::Serialize;
use ucs::{Result, Status};

/// Iterations per timestamp of bandwidth and message-rate tests ([`Kind::Stream`]).
pub const STREAM_STRIDE: u64 = 16;

/// Iterations per timestamp for a test of `kind`.
pub fn stride_of(kind: Kind) -> u64 {
    match kind {
        Kind::Stream => STREAM_STRIDE,
        Kind::PingPong | Kind::Sequential => 1,
    }
}

/// Timestamps of one measured run of a known number of iterations.
#[derive(Debug)]
pub struct Stamps {
    clock: Clock,
    start: u64,
    /// Ticks at the end of each batch.
    marks: Vec<u64>,
    /// Iterations of the run.
    total: u64,
    stride: u64,
    /// Iterations marked so far.
    count: u64,
    /// The count at which the next stamp is taken.
    next: u64,
}

impl Stamps {
    /// Stamps for `iterations` iterations, one stamp every `stride` of them (and after
    /// the last). The clock starts now and again with [`Stamps::start`].
    pub fn new(iterations: u64, stride: u64) -> Stamps {
        let stride = stride.max(1);
        let clock = Clock::get();
        let mut s = Stamps {
            clock,
            start: clock.ticks(),
            marks: Vec::with_capacity(iterations.div_ceil(stride) as usize),
            total: iterations,
            stride,
            count: 0,
            next: 0,
        };
        s.start();
        s
    }

    /// One stamp per iteration for `n` iterations.
    pub fn with_capacity(n: usize) -> Stamps {
        Stamps::new(n as u64, 1)
    }

    /// (Re)starts the clock and forgets earlier marks.
    pub fn start(&mut self) {
        self.marks.clear();
        self.count = 0;
        self.next = self.stride.min(self.total);
        self.start = self.clock.ticks();
    }

    /// Records the end of one iteration: a stamp at the end of every batch. Never
    /// allocates; iterations beyond the announced count are ignored.
    #[inline]
    pub fn mark(&mut self) {
        self.count += 1;
        if self.count == self.next {
            self.stamp();
        }
    }

    #[inline]
    fn stamp(&mut self) {
        let t = self.clock.ticks();
        if self.marks.len() < self.marks.capacity() {
            self.marks.push(t);
        }
        self.next = (self.next + self.stride).min(self.total);
    }

    /// Stops the clock: the run ended now (after its final completion).
    pub fn finish(self) -> Timing {
        let end = self.clock.ticks();
        let ns = |t: u64| self.clock.to_ns(t.saturating_sub(self.start));
        Timing {
            marks: self.marks.iter().map(|&t| ns(t)).collect(),
            end: ns(end),
            iterations: self.count.min(self.total),
            stride: self.stride,
        }
    }
}

/// What a measured run recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// End of each batch of `stride` iterations (the last batch may be shorter),
    /// nanoseconds since the start (non-decreasing).
    pub marks: Vec<u64>,
    /// End of the whole run, nanoseconds since the start.
    pub end: u64,
    /// Iterations of the run.
    pub iterations: u64,
    /// Iterations per mark.
    pub stride: u64,
}

impl Timing {
    /// A timing with one mark per iteration.
    pub fn per_iteration(marks: Vec<u64>, end: u64) -> Timing {
        Timing {
            iterations: marks.len() as u64,
            marks,
            end,
            stride: 1,
        }
    }
}

/// Samples below this many nanoseconds (65 µs: every latency sample of a small message,
/// also under valgrind, which runs about fifty times slower) are counted in a table by
/// [`median`]; the rare larger ones are sorted out among themselves.
const DENSE: usize = 1 << 16;

/// Median of `v`: the middle value, or the mean of the two middle values. Linear with a
/// small constant, so that a benchmark's own statistics stay a small part of what an
/// instruction count per iteration sees: values below [`DENSE`] (nearly all samples of a
/// latency test, in nanoseconds) are counted, the others selected among themselves.
pub fn median(v: &[u64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    let mut counts = vec![0u32; DENSE];
    let mut big: Vec<u64> = Vec::new();
    for &x in v {
        match counts.get_mut(x as usize) {
            Some(c) => *c += 1,
            None => big.push(x),
        }
    }
    let dense = n - big.len();
    // The value of rank k (0-based) in sorted order.
    let mut kth = |k: usize| -> u64 {
        if k >= dense {
            let (_, &mut x, _) = big.select_nth_unstable(k - dense);
            return x;
        }
        let mut seen = 0usize;
        for (value, &c) in counts.iter().enumerate() {
            seen += c as usize;
            if seen > k {
                return value as u64;
            }
        }
        // Unreachable: the counts add up to `dense` > k.
        DENSE as u64
    };
    if n % 2 == 1 {
        return kth(n / 2) as f64;
    }
    (kth(n / 2 - 1) as f64 + kth(n / 2) as f64) / 2.0
}

const MB: f64 = (1u64 << 20) as f64;

/// The result of one test, as printed in the table and the JSON line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PerfResult {
    /// The test, by its name (put_lat of either layer is "put_lat"; `api` tells them
    /// apart).
    #[serde(serialize_with = "serialize_name")]
    pub test: TestId,
    /// The layer the test ran on: "uct" or "ucp".
    pub api: Api,
    /// The transport: the one asked for (uct tests) or the one ucp chose (ucp tests).
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
    /// Iterations per timestamp (1, or [`STREAM_STRIDE`] for bandwidth tests).
    pub stamp_stride: u64,
    /// How the protocol layer reached the peer's memory in RMA and atomic tests
    /// ("direct", "cma" or "am"; see `UCX_RMA_PATH`); absent for other tests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rma_path: Option<&'static str>,
    /// Time of each measured iteration in nanoseconds, in order (whole round trips for
    /// ping-pong tests); with a stamp stride above 1, one value per batch of iterations
    /// (the batch's time over its size). Not part of the JSON line.
    #[serde(skip)]
    pub samples_ns: Vec<u64>,
}

fn serialize_name<S: serde::Serializer>(t: &TestId, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(t.name())
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
    /// Computes the numbers of `timing`.
    pub fn compute(subject: Subject, kind: Kind, timing: &Timing) -> Result<PerfResult> {
        let n = timing.iterations;
        let stride = timing.stride.max(1);
        let bad = || {
            tracing::error!("{}: no, missing or disordered timestamps", subject.test);
            Status::InvalidParam
        };
        if n == 0 || timing.marks.len() as u64 != n.div_ceil(stride) {
            return Err(bad());
        }
        let factor = kind.factor();
        // One pass makes the samples and checks the order. Every batch but the last has
        // `stride` iterations; with one stamp per iteration (ping-pong tests, the long
        // runs) a sample is just the difference.
        let mut samples: Vec<u64> = Vec::with_capacity(timing.marks.len());
        let mut prev = 0;
        for &t in &timing.marks {
            samples.push(t.checked_sub(prev).ok_or_else(bad)?);
            prev = t;
        }
        if stride > 1 {
            let full = (n / stride) as usize;
            for d in &mut samples[..full] {
                *d /= stride;
            }
            if let Some(d) = samples.get_mut(full) {
                *d /= n % stride;
            }
        }
        let last = prev;
        let end = timing.end.max(last);
        let p50_ns = median(&samples) / factor;
        // A clock too coarse to see an iteration still must not divide by zero.
        let avg_ns = (last.max(1) as f64) / n as f64 / factor;
        let overall_ns = (end.max(1) as f64) / n as f64 / factor;
        let size = subject.size as f64;
        Ok(PerfResult {
            test: subject.test,
            api: subject.test.info().api,
            transport: subject.transport,
            layout: subject.layout,
            size: subject.size,
            iterations: n,
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
            stamp_stride: stride,
            rma_path: None,
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

    /// The counted median agrees with a sort on vectors of every length up to 300, with
    /// values drawn below, around and far above the counted range.
    #[test]
    fn median_agrees_with_a_sort() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            x >> 11
        };
        for len in 1..300usize {
            for spread in [16u64, 4000, DENSE as u64 - 5, DENSE as u64 + 200, 1 << 24] {
                let v: Vec<u64> = (0..len).map(|_| next() % spread).collect();
                let mut s = v.clone();
                s.sort_unstable();
                let want = if len % 2 == 1 {
                    s[len / 2] as f64
                } else {
                    (s[len / 2 - 1] as f64 + s[len / 2] as f64) / 2.0
                };
                assert_eq!(median(&v), want, "len {len}, spread {spread}");
            }
        }
    }

    #[test]
    fn median_odd_even_and_empty() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[5]), 5.0);
        assert_eq!(median(&[9, 1, 5]), 5.0);
        assert_eq!(median(&[4, 1, 3, 2]), 2.5);
        assert_eq!(median(&[7, 7, 1, 100, 7, 2]), 7.0);
        let big: Vec<u64> = (0..1001).rev().collect();
        assert_eq!(median(&big), 500.0);
        // Values on both sides of the counted range, the middle ones among the large.
        let d = DENSE as u64;
        assert_eq!(median(&[1, d + 5, d + 7, d + 6, 2]), (d + 5) as f64);
        assert_eq!(median(&[1, d + 9, d - 1, d]), ((d - 1) + d) as f64 / 2.0);
        assert_eq!(median(&[u64::MAX, 3, u64::MAX]), u64::MAX as f64);
    }

    #[test]
    fn stream_numbers() {
        // Four iterations of 100, 100, 300, 100 ns; the flush ends the run at 1000 ns.
        let t = Timing::per_iteration(vec![100, 200, 500, 600], 1000);
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
        let t = Timing::per_iteration(vec![200, 400, 600], 600);
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
        let empty = Timing::per_iteration(vec![], 5);
        assert!(PerfResult::compute(s.clone(), Kind::Stream, &empty).is_err());
        let back = Timing::per_iteration(vec![5, 3], 9);
        assert!(PerfResult::compute(s.clone(), Kind::Stream, &back).is_err());
        let zero = Timing::per_iteration(vec![0, 0], 0);
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
        assert_eq!((t.iterations, t.stride), (3, 1));
    }

    #[test]
    fn strided_stamps_close_batches() {
        // 10 iterations, a stamp every 4: after 4, 8 and 10.
        let mut s = Stamps::new(10, 4);
        s.start();
        for _ in 0..12 {
            s.mark();
        }
        let t = s.finish();
        assert_eq!(t.marks.len(), 3);
        assert_eq!((t.iterations, t.stride), (10, 4));
        // Restarting forgets the marks and counts again.
        let mut s = Stamps::new(3, 4);
        s.mark();
        s.start();
        for _ in 0..3 {
            s.mark();
        }
        assert_eq!(s.finish().marks.len(), 1);
    }

    #[test]
    fn strided_numbers() {
        // 10 iterations stamped every 4: batches of 4, 4, 2 taking 400, 800, 200 ns.
        let t = Timing {
            marks: vec![400, 1200, 1400],
            end: 2000,
            iterations: 10,
            stride: 4,
        };
        let r = PerfResult::compute(subject(TestId::AmBw, 8), Kind::Stream, &t).unwrap();
        assert_eq!(r.iterations, 10);
        assert_eq!(r.stamp_stride, 4);
        assert_eq!(r.samples_ns, vec![100, 200, 100]);
        assert!((r.latency_p50_us - 0.1).abs() < 1e-12);
        assert!((r.latency_avg_us - 0.14).abs() < 1e-12);
        assert!((r.latency_overall_us - 0.2).abs() < 1e-12);
        // A mark count that does not fit the iterations is an error.
        let bad = Timing {
            marks: vec![400, 1200],
            ..t
        };
        assert!(PerfResult::compute(subject(TestId::AmBw, 8), Kind::Stream, &bad).is_err());
    }
}
