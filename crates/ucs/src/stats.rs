//! Named counters for statistics (bytes sent, retransmissions, pending queue hits, ...).
//!
//! A counter is one relaxed atomic add: cheap enough to leave on in release builds, exact
//! once the counting threads have finished, and only approximately current while they run
//! (nothing is ordered with it). The counters of one [`CounterSet`] share cache lines, so a
//! set should belong to one worker or interface rather than be bumped by many threads.
//!
//! Invariant: a set's names are fixed when it is made; counter `i` is always `names[i]`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonically updated 64-bit statistic.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// A counter at zero (usable in a `static`).
    pub const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }

    /// Adds `n` (wrapping at 2^64).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// The current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the value back to zero and returns what it was.
    pub fn reset(&self) -> u64 {
        self.0.swap(0, Ordering::Relaxed)
    }
}

/// A named group of counters; callers index it with their own constants, e.g.
/// `const TX_BYTES: usize = 0;` next to `static NAMES: &[&str] = &["tx_bytes", ...]`.
#[derive(Debug)]
pub struct CounterSet {
    name: String,
    names: &'static [&'static str],
    values: Box<[Counter]>,
}

impl CounterSet {
    /// A set called `name` with one zeroed counter per entry of `names`.
    pub fn new(name: impl Into<String>, names: &'static [&'static str]) -> CounterSet {
        CounterSet {
            name: name.into(),
            names,
            values: names.iter().map(|_| Counter::new()).collect(),
        }
    }

    /// The set's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counter names, in index order.
    pub fn names(&self) -> &'static [&'static str] {
        self.names
    }

    /// Counter `i`.
    ///
    /// # Panics
    /// When `i` is not below `names().len()` (a caller's constant out of step with its
    /// name list).
    #[inline]
    pub fn counter(&self, i: usize) -> &Counter {
        &self.values[i]
    }

    /// Adds `n` to counter `i` (panics like [`CounterSet::counter`]).
    #[inline]
    pub fn add(&self, i: usize, n: u64) {
        self.values[i].add(n);
    }

    /// The value of counter `i` (panics like [`CounterSet::counter`]).
    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        self.values[i].get()
    }

    /// Every counter as `(name, value)`, in index order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        self.names
            .iter()
            .zip(self.values.iter())
            .map(|(n, v)| (*n, v.get()))
            .collect()
    }

    /// Writes `name:` followed by one indented `counter: value` line per counter.
    /// Write errors are ignored: the output goes to a `String` or a terminal.
    pub fn dump(&self, out: &mut impl fmt::Write) {
        let _ = self.write_to(out);
    }

    fn write_to(&self, out: &mut impl fmt::Write) -> fmt::Result {
        writeln!(out, "{}:", self.name)?;
        for (n, v) in self.snapshot() {
            writeln!(out, "  {n}: {v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_and_dump() {
        static NAMES: &[&str] = &["tx_bytes", "retransmits"];
        const TX: usize = 0;
        const RTX: usize = 1;
        let set = CounterSet::new("udp_iface", NAMES);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        set.add(TX, 64);
                        set.counter(RTX).inc();
                    }
                });
            }
        });
        assert_eq!(set.get(TX), 256_000);
        assert_eq!(set.get(RTX), 4000);
        let mut s = String::new();
        set.dump(&mut s);
        assert_eq!(s, "udp_iface:\n  tx_bytes: 256000\n  retransmits: 4000\n");
        assert_eq!(set.counter(RTX).reset(), 4000);
        assert_eq!(set.snapshot(), [("tx_bytes", 256_000), ("retransmits", 0)]);
    }
}
