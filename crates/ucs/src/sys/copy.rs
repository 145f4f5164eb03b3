//! Bulk byte copies that stay fast when the destination sits just past the source modulo
//! a page.
//!
//! Why this exists: glibc's x86-64 `memcpy` hands blocks above about 2 KiB to `rep movsb`
//! on CPUs that advertise fast string moves (ERMS/FSRM). That microcoded loop slows down
//! by an order of magnitude or more when `(dst - src) mod 4096` is a small positive number:
//! its loads keep hitting the page offsets its own stores just wrote (4K aliasing). On
//! the development host (AMD EPYC, glibc 2.36), 4 KiB copied from a page-aligned source to
//! 8 bytes past a page boundary took 1.2-2.3 µs instead of 50 ns, and 64 KiB 22 µs instead
//! of 1.2 µs. A protocol that writes an 8-byte header and then the payload into a
//! page-aligned transport buffer produces exactly that distance for every page-aligned
//! user buffer, so the shm eager path hit it on every message from 2 KiB up.
//!
//! [`copy`] checks the distance (two instructions) and takes an unrolled vector loop
//! when it is in the bad window, `memcpy` otherwise. Invariant: it copies exactly
//! `src.len()` bytes into the start of `dst` (panics if `dst` is shorter, as
//! `copy_from_slice` does); which loop ran is never visible except in time.

/// Below this many bytes `memcpy` never uses the string instruction (and a vector loop
/// would not win anything): the check is skipped.
const MIN_CHECKED: usize = 1024;

/// `(dst - src) mod PAGE` below this (and above 0) is the slow window. Measured: 1..24
/// bytes cost 4-40×, 60 bytes 9×; 40 and 56 bytes, 64 and more, and 0 cost nothing.
const ALIAS_WINDOW: usize = 64;

/// The granule of the aliasing check: the page offset bits that the CPU compares.
const PAGE: usize = 4096;

/// True when a copy of `len` bytes from `src` to `dst` would fall into the slow case of
/// the string instruction.
#[inline(always)]
fn aliased(dst: *const u8, src: *const u8, len: usize) -> bool {
    let dist = (dst as usize).wrapping_sub(src as usize) & (PAGE - 1);
    len >= MIN_CHECKED && dist.wrapping_sub(1) < ALIAS_WINDOW - 1
}

/// Copies `src` into the start of `dst`.
///
/// # Panics
/// If `dst` is shorter than `src`.
#[inline(never)]
pub fn copy(dst: &mut [u8], src: &[u8]) {
    let dst = &mut dst[..src.len()];
    if aliased(dst.as_ptr(), src.as_ptr(), src.len()) {
        vector_copy(dst, src);
    } else {
        dst.copy_from_slice(src);
    }
}

/// [`copy`] from raw pointers.
///
/// Both are out of line on purpose: callers reach them only for copies that would call
/// `memcpy` anyway, and inlining the check into ucp's receive path changed the code
/// around its 8-byte case (two more instructions per 8-byte tag receive).
///
/// # Safety
/// As `std::ptr::copy_nonoverlapping`: `src..src+n` readable, `dst..dst+n` writable, the
/// two ranges do not overlap.
#[inline(never)]
pub unsafe fn copy_raw(src: *const u8, dst: *mut u8, n: usize) {
    if aliased(dst, src, n) {
        // SAFETY: the caller's contract makes both ranges valid and disjoint for n bytes.
        let (d, s) = unsafe {
            (
                std::slice::from_raw_parts_mut(dst, n),
                std::slice::from_raw_parts(src, n),
            )
        };
        vector_copy(d, s);
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
    }
}

/// Appends `src` to `v` (as `extend_from_slice`, through [`copy`]).
#[inline]
pub fn extend(v: &mut Vec<u8>, src: &[u8]) {
    v.reserve(src.len());
    let len = v.len();
    // SAFETY: `reserve` made room for src.len() bytes after len; a borrowed `src` cannot
    // be inside `v`, which we hold mutably. After the copy those bytes are initialized,
    // so the new length covers only written bytes.
    unsafe {
        copy_raw(src.as_ptr(), v.as_mut_ptr().add(len), src.len());
        v.set_len(len + src.len());
    }
}

/// The copy for the aliased case: whole 128-byte blocks by vector registers, the tail
/// (under 128 bytes, below `memcpy`'s string-instruction size) by `memcpy`.
#[cold]
#[inline(never)]
fn vector_copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    let blocks = src.len() / BLOCK * BLOCK;
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked); both slices hold `blocks` bytes and are
            // distinct borrows, so they do not overlap.
            unsafe { x86::blocks_avx2(dst.as_mut_ptr(), src.as_ptr(), blocks) };
        } else {
            // SAFETY: SSE2 is part of x86-64; sizes and disjointness as above.
            unsafe { x86::blocks_sse2(dst.as_mut_ptr(), src.as_ptr(), blocks) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst[..blocks].copy_from_slice(&src[..blocks]);
    dst[blocks..].copy_from_slice(&src[blocks..]);
}

/// Bytes per iteration of the vector loops.
const BLOCK: usize = 128;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::BLOCK;
    use std::arch::x86_64::*;

    /// Copies `n` bytes (a multiple of [`BLOCK`]) with 32-byte unaligned loads and stores,
    /// four loads before four stores per block.
    ///
    /// # Safety
    /// The CPU supports AVX2; `src..src+n` readable, `dst..dst+n` writable, disjoint.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn blocks_avx2(dst: *mut u8, src: *const u8, n: usize) {
        let mut i = 0;
        while i < n {
            // SAFETY: i + BLOCK <= n, so every access is inside both ranges (caller's
            // contract); unaligned loads and stores accept any address.
            unsafe {
                let s = src.add(i).cast::<__m256i>();
                let d = dst.add(i).cast::<__m256i>();
                let a = _mm256_loadu_si256(s);
                let b = _mm256_loadu_si256(s.add(1));
                let c = _mm256_loadu_si256(s.add(2));
                let e = _mm256_loadu_si256(s.add(3));
                _mm256_storeu_si256(d, a);
                _mm256_storeu_si256(d.add(1), b);
                _mm256_storeu_si256(d.add(2), c);
                _mm256_storeu_si256(d.add(3), e);
            }
            i += BLOCK;
        }
    }

    /// As [`blocks_avx2`] with 16-byte SSE2 registers, eight per block.
    ///
    /// # Safety
    /// `src..src+n` readable, `dst..dst+n` writable, disjoint; `n` a multiple of BLOCK.
    pub(super) unsafe fn blocks_sse2(dst: *mut u8, src: *const u8, n: usize) {
        let mut i = 0;
        while i < n {
            // SAFETY: as in `blocks_avx2`; SSE2 is baseline on x86-64.
            unsafe {
                let s = src.add(i).cast::<__m128i>();
                let d = dst.add(i).cast::<__m128i>();
                let v = [
                    _mm_loadu_si128(s),
                    _mm_loadu_si128(s.add(1)),
                    _mm_loadu_si128(s.add(2)),
                    _mm_loadu_si128(s.add(3)),
                    _mm_loadu_si128(s.add(4)),
                    _mm_loadu_si128(s.add(5)),
                    _mm_loadu_si128(s.add(6)),
                    _mm_loadu_si128(s.add(7)),
                ];
                for (k, x) in v.into_iter().enumerate() {
                    _mm_storeu_si128(d.add(k), x);
                }
            }
            i += BLOCK;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page-aligned scratch area of `len` bytes (the offsets under test are relative
    /// to page boundaries).
    fn pages(len: usize) -> Vec<u8> {
        vec![0u8; len + PAGE]
    }

    fn page_start(v: &[u8]) -> usize {
        let p = v.as_ptr() as usize;
        (PAGE - p % PAGE) % PAGE
    }

    #[test]
    fn aliasing_window() {
        let base = 0x10_0000usize as *const u8;
        let at = |d: usize| (0x20_0000usize + d) as *const u8;
        assert!(!aliased(at(0), base, 4096));
        assert!(aliased(at(8), base, 4096));
        assert!(aliased(at(1), base, MIN_CHECKED));
        assert!(aliased(at(63), base, 4096));
        assert!(!aliased(at(64), base, 4096));
        assert!(!aliased(at(4096 - 8), base, 4096));
        assert!(aliased(at(4096 + 8), base, 4096));
        assert!(!aliased(at(8), base, MIN_CHECKED - 1));
    }

    /// Every length around the block and check boundaries, at aliased and plain offsets
    /// on both sides: every byte of the destination is the source's, and nothing past
    /// it is touched.
    #[test]
    fn copies_every_byte_at_every_offset() {
        let lens = [
            0, 1, 127, 128, 129, 1023, 1024, 1025, 2047, 2048, 2113, 4096, 4104, 8191, 65536, 65537,
        ];
        let mut src = pages(70_000 + 256);
        let s0 = page_start(&src);
        for (i, b) in src.iter_mut().enumerate() {
            *b = (i * 131 % 251) as u8;
        }
        let mut dst = pages(70_000 + 256);
        let d0 = page_start(&dst);
        for &len in &lens {
            for (so, doff) in [(0, 8), (0, 0), (8, 0), (24, 40), (0, 63), (3, 17), (0, 64)] {
                dst.fill(0xEE);
                let s = &src[s0 + so..s0 + so + len];
                copy(&mut dst[d0 + doff..], s);
                assert_eq!(
                    &dst[d0 + doff..d0 + doff + len],
                    s,
                    "len {len} src+{so} dst+{doff}"
                );
                assert!(dst[..d0 + doff].iter().all(|&b| b == 0xEE));
                assert!(dst[d0 + doff + len..].iter().all(|&b| b == 0xEE));
                dst.fill(0xEE);
                // SAFETY: both ranges lie inside their vectors, which are distinct.
                unsafe { copy_raw(s.as_ptr(), dst.as_mut_ptr().add(d0 + doff), len) };
                assert_eq!(
                    &dst[d0 + doff..d0 + doff + len],
                    s,
                    "raw: len {len} src+{so} dst+{doff}"
                );
                assert!(dst[d0 + doff + len..].iter().all(|&b| b == 0xEE));
            }
        }
    }

    #[test]
    fn extend_appends_every_byte() {
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 13 % 241) as u8).collect();
        for start in [0usize, 8, 4088] {
            let mut v = vec![7u8; start];
            extend(&mut v, &src);
            assert_eq!(v.len(), start + src.len());
            assert!(v[..start].iter().all(|&b| b == 7));
            assert_eq!(&v[start..], &src[..]);
        }
    }

    #[test]
    fn sse2_blocks_copy_every_byte() {
        // The AVX2 loop runs on this host; the fallback is checked directly.
        #[cfg(target_arch = "x86_64")]
        {
            let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 253) as u8).collect();
            let mut dst = vec![0u8; 4096 + 8];
            // SAFETY: 4096 bytes readable in src and writable at dst+8; distinct vectors.
            unsafe { x86::blocks_sse2(dst.as_mut_ptr().add(8), src.as_ptr(), 4096) };
            assert_eq!(&dst[8..], &src[..]);
            assert!(dst[..8].iter().all(|&b| b == 0));
        }
    }

    #[test]
    #[should_panic]
    fn short_destination_panics() {
        let mut d = [0u8; 3];
        copy(&mut d, &[1, 2, 3, 4]);
    }
}
