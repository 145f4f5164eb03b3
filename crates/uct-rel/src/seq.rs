//! Serial-number arithmetic on 32-bit sequence numbers (RFC 1982 style).
//!
//! Sequence numbers wrap around: `a` is "before" `b` when the forward distance from `a` to
//! `b`, taken modulo 2^32, is below 2^31. This is well defined as long as no two numbers
//! compared are 2^31 or more apart, which the engine guarantees by keeping every live
//! number within one window (at most [`crate::MAX_WINDOW`]) of its reference point and
//! treating anything further as invalid or old.

/// Forward distance from `from` to `to`, modulo 2^32.
#[inline]
pub fn dist(from: u32, to: u32) -> u32 {
    to.wrapping_sub(from)
}

/// Whether `a` comes strictly before `b`.
#[inline]
pub fn lt(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn across_the_wrap() {
        assert!(lt(u32::MAX, 0));
        assert!(lt(u32::MAX - 5, 3));
        assert!(!lt(3, u32::MAX - 5));
        assert!(!lt(7, 7));
        assert_eq!(dist(u32::MAX - 1, 2), 4);
        assert!(lt(0, 0x7fff_ffff));
        assert!(!lt(0, 0x8000_0000));
    }
}
