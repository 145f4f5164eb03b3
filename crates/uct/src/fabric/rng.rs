//! The fabric's random numbers: a small, seeded generator (SplitMix64), so that a run is
//! a function of its seed and the order of operations.

/// SplitMix64 (Steele, Lea and Flood): one 64-bit state, full period, good enough to
/// decide faults.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p` (0 never draws).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// A number in `0..=max`.
    pub fn upto(&mut self, max: u64) -> u64 {
        if max == 0 {
            0
        } else if max == u64::MAX {
            self.next_u64()
        } else {
            self.next_u64() % (max + 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_numbers() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = Rng::new(8);
        assert_ne!(Rng::new(7).next_u64(), c.next_u64());
    }

    #[test]
    fn chance_bounds() {
        let mut r = Rng::new(1);
        assert!((0..1000).all(|_| !r.chance(0.0)));
        assert!((0..1000).all(|_| r.chance(1.0)));
        let hits = (0..10_000).filter(|_| r.chance(0.5)).count();
        assert!((4000..6000).contains(&hits), "{hits}");
        assert!((0..1000).all(|_| r.upto(3) <= 3));
    }
}
