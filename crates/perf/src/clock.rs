//! The clock of the timed loops: the CPU's time-stamp counter where it is usable, else
//! `Instant`.
//!
//! `Instant::now` reads the vDSO clock, about 25 ns here; a bandwidth or message-rate loop
//! whose iterations take 30 to 100 ns would measure the clock as much as the operation.
//! ucx_perftest reads a cycle counter for the same reason. On x86_64 with an invariant TSC
//! (CPUID 0x8000_0007, EDX bit 8: constant rate, not stopped in sleep states, the same on
//! every core) [`Clock`] reads it with `rdtsc` (about 10 ns) and converts ticks to
//! nanoseconds with a rate calibrated once per process against `Instant` over ~20 ms (the
//! first [`Clock::get`]; [`init`] does it early, outside anything timed). Elsewhere, or with
//! `RUCX_PERF_CLOCK=instant` in the environment, it reads `Instant`.
//!
//! `rdtsc` does not serialize the pipeline: a stamp may be taken some tens of cycles early
//! or late, which is noise well below one iteration of any test.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the TSC is calibrated against `Instant`.
const CALIBRATION: Duration = Duration::from_millis(20);

/// Where the ticks come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The x86_64 time-stamp counter.
    Tsc,
    /// `std::time::Instant` (one tick is one nanosecond).
    Instant,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Tsc => "tsc",
            Source::Instant => "instant",
        }
    }
}

/// A calibrated clock; cheap to copy.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    source: Source,
    /// Nanoseconds per tick.
    ns_per_tick: f64,
    /// The same in 32.32 fixed point, so that converting a tick count is a multiply.
    ns_per_tick_q32: u64,
    /// Origin of `Instant` ticks.
    origin: Instant,
}

static CLOCK: OnceLock<Clock> = OnceLock::new();

/// Calibrates the process's clock now (it is otherwise done by the first [`Clock::get`]);
/// returns what it uses.
pub fn init() -> Clock {
    Clock::get()
}

impl Clock {
    /// The process's clock, calibrated on first use.
    pub fn get() -> Clock {
        *CLOCK.get_or_init(|| {
            let forced = std::env::var("RUCX_PERF_CLOCK").is_ok_and(|v| v == "instant");
            let c = if forced { None } else { tsc::calibrate() };
            c.unwrap_or(Clock::instant())
        })
    }

    /// A clock that reads `Instant` (the fallback; also for tests).
    pub fn instant() -> Clock {
        Clock {
            source: Source::Instant,
            ns_per_tick: 1.0,
            ns_per_tick_q32: 1 << 32,
            origin: Instant::now(),
        }
    }

    pub fn source(&self) -> Source {
        self.source
    }

    /// Nanoseconds per tick.
    pub fn ns_per_tick(&self) -> f64 {
        self.ns_per_tick
    }

    /// The current tick count. Only differences of ticks of one clock mean anything.
    #[inline(always)]
    pub fn ticks(&self) -> u64 {
        match self.source {
            Source::Tsc => tsc::read(),
            Source::Instant => self.origin.elapsed().as_nanos() as u64,
        }
    }

    /// Nanoseconds in `ticks` ticks.
    #[inline]
    pub fn to_ns(&self, ticks: u64) -> u64 {
        // Rounded to the nearest nanosecond, as the floating-point product would be.
        ((u128::from(ticks) * u128::from(self.ns_per_tick_q32) + (1 << 31)) >> 32) as u64
    }
}

#[cfg(target_arch = "x86_64")]
mod tsc {
    use super::{Clock, Source, CALIBRATION};
    use std::time::Instant;

    /// True when CPUID says the TSC is invariant.
    fn invariant() -> bool {
        use core::arch::x86_64::__cpuid;
        let max_ext = __cpuid(0x8000_0000).eax;
        max_ext >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
    }

    #[inline(always)]
    pub(super) fn read() -> u64 {
        // SAFETY: rdtsc only reads the time-stamp counter; every x86_64 CPU has it (the TSC
        // flag is part of the x86_64 baseline) and it has no memory effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// The TSC rate measured against `Instant`, or `None` when the TSC is not invariant or
    /// the measurement is implausible (a TSC that stops or jumps).
    pub(super) fn calibrate() -> Option<Clock> {
        if !invariant() {
            tracing::debug!("the TSC is not invariant; timing with Instant");
            return None;
        }
        let origin = Instant::now();
        let c0 = read();
        std::thread::sleep(CALIBRATION);
        let c1 = read();
        let ns = origin.elapsed().as_nanos() as f64;
        let ticks = c1.wrapping_sub(c0) as f64;
        let ns_per_tick = ns / ticks;
        // 0.1 to 10 GHz.
        if !(0.1..=10.0).contains(&ns_per_tick) {
            tracing::debug!("implausible TSC rate ({ns_per_tick} ns/tick); timing with Instant");
            return None;
        }
        tracing::debug!("TSC at {:.3} GHz", 1.0 / ns_per_tick);
        Some(Clock {
            source: Source::Tsc,
            ns_per_tick,
            ns_per_tick_q32: (ns_per_tick * 4_294_967_296.0).round() as u64,
            origin,
        })
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod tsc {
    use super::Clock;

    #[inline(always)]
    pub(super) fn read() -> u64 {
        0
    }

    pub(super) fn calibrate() -> Option<Clock> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_follow_wall_time() {
        for c in [Clock::get(), Clock::instant()] {
            let t0 = c.ticks();
            let w0 = Instant::now();
            std::thread::sleep(Duration::from_millis(30));
            let t1 = c.ticks();
            let wall = w0.elapsed().as_nanos() as f64;
            let measured = c.to_ns(t1 - t0) as f64;
            // Generous: the two clocks are read at slightly different moments, and the
            // machine may be busy.
            assert!(
                (measured - wall).abs() < 0.05 * wall + 2e6,
                "{:?}: {measured} ns vs {wall} ns",
                c.source()
            );
        }
    }

    #[test]
    fn ticks_never_go_back() {
        let c = Clock::get();
        let mut prev = c.ticks();
        for _ in 0..100_000 {
            let t = c.ticks();
            assert!(t >= prev);
            prev = t;
        }
    }
}
