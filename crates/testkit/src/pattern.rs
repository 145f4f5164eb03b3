//! Deterministic data patterns shared by the test processes and the peers, so that a
//! receiver can check every byte it gets without being told what was sent.

/// The SplitMix64 finaliser: a cheap bijective mixer of 64-bit values.
pub fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Byte `i` of active message number `m` from `sender`. The `i >> 8` term keeps the
/// pattern from repeating every 256 bytes (a shifted copy would otherwise look right);
/// `kind` keeps the short, bcopy and zcopy streams apart.
#[inline]
pub fn am_byte(m: u64, i: usize, sender: u32, kind: u8) -> u8 {
    let i = i as u64;
    m.wrapping_mul(31)
        .wrapping_add(i.wrapping_mul(7))
        .wrapping_add((i >> 8).wrapping_mul(13))
        .wrapping_add(u64::from(sender))
        .wrapping_add(u64::from(kind) * 101) as u8
}

/// Fills `buf` with message `m`'s pattern.
pub fn fill_am(buf: &mut [u8], m: u64, sender: u32, kind: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = am_byte(m, i, sender, kind);
    }
}

/// The pattern of message `m` as a vector of `len` bytes.
pub fn am_vec(len: usize, m: u64, sender: u32, kind: u8) -> Vec<u8> {
    let mut v = vec![0; len];
    fill_am(&mut v, m, sender, kind);
    v
}

/// Index of the first byte of `buf` that differs from message `m`'s pattern.
pub fn check_am(buf: &[u8], m: u64, sender: u32, kind: u8) -> Option<usize> {
    buf.iter()
        .enumerate()
        .position(|(i, &b)| b != am_byte(m, i, sender, kind))
}

/// The 8-byte header `am_short` carries with message `m` from `sender`.
pub fn am_header(m: u64, sender: u32) -> u64 {
    mix64(m ^ (u64::from(sender) << 56))
}

/// Byte at absolute offset `pos` of a memory region filled with `seed`. Eight bytes come
/// from one mixed word, so filling megabytes is cheap; no two offsets of a region share a
/// word, so a copy to the wrong offset is caught.
#[inline]
pub fn mem_byte(seed: u64, pos: u64) -> u8 {
    (mem_word(seed, pos / 8) >> ((pos % 8) * 8)) as u8
}

#[inline]
fn mem_word(seed: u64, w: u64) -> u64 {
    mix64(w ^ seed.wrapping_mul(0xd6e8_feb8_6659_fd93))
}

/// Fills `buf`, which sits at offset `pos` of its region, with `seed`'s pattern.
pub fn fill_mem(buf: &mut [u8], seed: u64, pos: u64) {
    let mut word = mem_word(seed, pos / 8);
    for (i, b) in buf.iter_mut().enumerate() {
        let p = pos + i as u64;
        if p % 8 == 0 {
            word = mem_word(seed, p / 8);
        }
        *b = (word >> ((p % 8) * 8)) as u8;
    }
}

/// The index (in `buf`) of the first byte that differs from `seed`'s pattern at `pos`.
pub fn check_mem(buf: &[u8], seed: u64, pos: u64) -> Option<usize> {
    let mut word = mem_word(seed, pos / 8);
    for (i, &b) in buf.iter().enumerate() {
        let p = pos + i as u64;
        if p % 8 == 0 {
            word = mem_word(seed, p / 8);
        }
        if b != (word >> ((p % 8) * 8)) as u8 {
            return Some(i);
        }
    }
    None
}

/// A vector of `len` bytes of `seed`'s pattern starting at offset `pos`.
pub fn mem_vec(len: usize, seed: u64, pos: u64) -> Vec<u8> {
    let mut v = vec![0; len];
    fill_mem(&mut v, seed, pos);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_pattern_is_position_dependent() {
        let v = mem_vec(100, 5, 3);
        assert_eq!(check_mem(&v, 5, 3), None);
        assert!(check_mem(&v, 5, 4).is_some());
        assert!(check_mem(&v, 6, 3).is_some());
        for (i, b) in v.iter().enumerate() {
            assert_eq!(*b, mem_byte(5, 3 + i as u64));
        }
    }

    #[test]
    fn am_pattern_does_not_repeat_every_256_bytes() {
        let v = am_vec(1024, 9, 2, 1);
        assert_eq!(check_am(&v, 9, 2, 1), None);
        assert_ne!(v[..256], v[256..512]);
        assert!(check_am(&v[1..], 9, 2, 1).is_some());
    }
}
