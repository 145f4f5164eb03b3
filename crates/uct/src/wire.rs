//! Little-endian field access for the wire formats of this crate. A `Reader` never reads
//! past its slice: every getter returns `None` at the end of input, so a decoder built on
//! it cannot panic on short or malformed bytes.

/// A cursor over input bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

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

    pub fn u64(&mut self) -> Option<u64> {
        self.bytes(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    /// An unsigned LEB128 integer (7 bits per byte, low group first, high bit = more
    /// follows), at most 10 bytes. Only the shortest encoding of a value is accepted, so
    /// that every value has exactly one encoding.
    pub fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            let group = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return None; // more than 64 bits
            }
            v |= group << (7 * i);
            if b & 0x80 == 0 {
                // A last byte of zero after others is an overlong encoding.
                return (i == 0 || b != 0).then_some(v);
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
