//! Little-endian field access for the wire formats of this crate. A `Reader` never reads
//! past its slice: every getter returns `None` at the end of input, so a decoder built on
//! it cannot panic on short or malformed bytes.

/// A cursor over input bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
}

// `u64` (and what it is made of) reads every message's protocol header: inlined across
// crates rather than called (18 instructions per message through libucp.so).
impl<'a> Reader<'a> {
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    #[inline]
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.buf.len() < n {
            return None;
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Some(a)
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.bytes(1).map(|b| b[0])
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.bytes(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.bytes(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    pub fn i32(&mut self) -> Option<i32> {
        self.u32().map(|v| v as i32)
    }

    #[inline]
    pub fn u64(&mut self) -> Option<u64> {
        self.bytes(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    /// An unsigned LEB128 integer (7 bits per byte, low group first, high bit = more
    /// follows), at most 10 bytes. Only the shortest encoding of a value is accepted, so
    /// that every value has exactly one encoding.
    pub fn varint(&mut self) -> Option<u64> {
        // Over the slice itself, not byte by byte through `u8` (a rendezvous decodes
        // several of these per message).
        let mut v = 0u64;
        for (i, &b) in self.buf.iter().take(10).enumerate() {
            if i == 9 && b > 1 {
                return None; // more than 64 bits
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                // A last byte of zero after others is an overlong encoding.
                if i > 0 && b == 0 {
                    return None;
                }
                self.buf = &self.buf[i + 1..];
                return Some(v);
            }
        }
        None
    }

    /// True when all input was consumed.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// Appends little-endian fields to a vector.
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn with_capacity(n: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.u32(v as u32)
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// An unsigned LEB128 integer (see [`Reader::varint`]).
    pub fn varint(&mut self, mut v: u64) -> &mut Self {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
        self
    }
}

/// Bytes of the LEB128 encoding of `v` (1 to 10).
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varints_round_trip_and_leave_the_rest(v in any::<u64>(), tail in proptest::collection::vec(any::<u8>(), 0..4)) {
            let mut w = Writer::default();
            w.varint(v);
            prop_assert_eq!(w.buf.len(), varint_len(v));
            w.buf.extend_from_slice(&tail);
            let mut r = Reader::new(&w.buf);
            prop_assert_eq!(r.varint(), Some(v));
            prop_assert_eq!(r.bytes(tail.len()), Some(&tail[..]));
            prop_assert!(r.is_empty());
        }

        #[test]
        fn a_decoded_varint_is_the_only_encoding_of_its_value(b in proptest::collection::vec(any::<u8>(), 0..12)) {
            let mut r = Reader::new(&b);
            if let Some(v) = r.varint() {
                let mut w = Writer::default();
                w.varint(v);
                prop_assert_eq!(&b[..w.buf.len()], &w.buf[..]);
                prop_assert_eq!(r.buf.len(), b.len() - w.buf.len());
            }
        }
    }

    #[test]
    fn overlong_and_oversized_varints_are_refused() {
        // Zero as two bytes, one as 0x81 0x00, a value past 64 bits, and 11 bytes.
        for bad in [
            &[0x80u8, 0x00][..],
            &[0x81, 0x00],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
            &[
                0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
            ],
            &[0x80],
            &[],
        ] {
            assert_eq!(Reader::new(bad).varint(), None, "{bad:02x?}");
        }
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(Reader::new(&max).varint(), Some(u64::MAX));
    }
}
