//! Packed remote keys and their unpacked, resolved form.
//!
//! A packed key carries only what the owner's peer cannot learn elsewhere: the region
//! (base and length), a registration id, and for a shared segment its descriptor number.
//! The owner's process id comes from the endpoint the key is unpacked for (the peer's
//! interface address names it), so a key is 5 to 16 bytes for any realistic region.
//!
//! ```text
//! packed rkey (version 2): a header byte, then unsigned LEB128 varints, nothing else
//!   header  bits 7..4 version = 2 | bit 3 P: a pid follows | bit 2 W: the base is 6 bytes
//!           | bits 1..0 kind
//!   kind 1 memory   [pid] base        length  id
//!   kind 2 segment  [pid] base / 4096 length  id  fd
//!   kind 3 wire           base        length  id
//!  W (kinds 1 and 3): the base is a 6-byte little-endian integer instead of a varint; used
//!  exactly when that is shorter (a base of 2^42 up to 2^48: the usual user addresses)
//!  kind 1 = registered memory of the owner: reached by pointer when the owner is the
//!           unpacking process itself (self), else by process_vm_readv/writev (shm)
//!  kind 2 = a shared-memory segment the peer maps (direct load/store, CPU atomics); the
//!           segment is the owner's descriptor `fd`, a memfd named `rucx-mem-<id>`
//!  kind 3 = memory the owner's tcp transport writes received data into; `id` is the
//!           registration the owner checks every write against (never carries a pid)
//! ```
//! Decoding is strict: version 2, kind 1..=3, the shortest encodings only, pid
//! and fd at most 31 bits, `base + length` without overflow, no trailing byte. The length
//! of a key can be found from its bytes alone ([`PackedRkey::encoded_len`]).
//!
//! Unpacking resolves the access path once ("resolve once" in DESIGN.md); an operation then
//! only checks that its range lies inside the key and copies.

use crate::wire::Reader;
use std::sync::Arc;
use ucs::sys::ShmSegment;
use ucs::{Result, Status};

pub const VERSION: u8 = 2;
/// Header bit: the owner's process id follows the header.
const PID_FLAG: u8 = 0x08;
/// Header bit: the base is 6 bytes, little endian (kinds memory and wire).
const WIDE_FLAG: u8 = 0x04;
/// Bases the 6-byte form is used for: those whose varint is longer than 6 bytes.
const WIDE: std::ops::Range<u64> = 1 << 42..1 << 48;
/// Unit of a segment key's base address.
pub const SEGMENT_ALIGN: u64 = 4096;
/// The longest valid key: header, pid (5), base, length, id (10 each), fd (5).
pub const MAX_PACKED_LEN: usize = 1 + 5 + 10 + 10 + 10 + 5;

/// How the memory behind a key is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RkeyKind {
    Memory = 1,
    Segment = 2,
    Wire = 3,
}

/// The decoded fields of a packed key (before resolution).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedRkey {
    pub kind: RkeyKind,
    /// The owner's process id, when the key names it (keys for uct users that exchange
    /// keys without endpoints); `None`: taken from the endpoint at unpack time.
    pub pid: Option<u32>,
    /// Owner's address of the region; a multiple of [`SEGMENT_ALIGN`] for segments.
    pub base: u64,
    pub len: u64,
    /// The owner's registration id (unique in the owner process, never reused).
    pub id: u64,
    /// The segment's descriptor number in the owner (`RkeyKind::Segment` only; 0 else).
    pub fd: u32,
}

/// A packed key's bytes held inline: at most [`MAX_PACKED_LEN`], the longest valid key,
/// so that the rendezvous messages carry keys without allocating.
#[derive(Clone, Copy)]
pub struct KeyBytes {
    len: u8,
    bytes: [u8; MAX_PACKED_LEN],
}

impl KeyBytes {
    /// No key (a rendezvous whose receiver is asked to answer with its own).
    pub const EMPTY: KeyBytes = KeyBytes {
        len: 0,
        bytes: [0; MAX_PACKED_LEN],
    };

    /// A copy of `b`; `InvalidParam` when it is longer than any valid key.
    pub fn from_slice(b: &[u8]) -> Result<KeyBytes> {
        let mut k = KeyBytes::EMPTY;
        k.bytes
            .get_mut(..b.len())
            .ok_or(Status::InvalidParam)?
            .copy_from_slice(b);
        k.len = b.len() as u8;
        Ok(k)
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Appends a byte; the encoder writes at most [`MAX_PACKED_LEN`] of them.
    fn push(&mut self, b: u8) {
        self.bytes[usize::from(self.len)] = b;
        self.len += 1;
    }

    /// Appends an unsigned LEB128 integer (as `wire::Writer::varint`).
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.push(v as u8);
    }
}

impl std::ops::Deref for KeyBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for KeyBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyBytes({:02x?})", self.as_slice())
    }
}

impl PartialEq for KeyBytes {
    fn eq(&self, o: &KeyBytes) -> bool {
        self.as_slice() == o.as_slice()
    }
}

impl Eq for KeyBytes {}

impl PackedRkey {
    pub fn encode(&self) -> Vec<u8> {
        self.encode_inline().to_vec()
    }

    /// The encoding, held inline: what the rendezvous paths send, without an allocation.
    pub fn encode_inline(&self) -> KeyBytes {
        let pid = if self.kind == RkeyKind::Wire {
            None
        } else {
            self.pid
        };
        let seg = self.kind == RkeyKind::Segment;
        let wide = !seg && WIDE.contains(&self.base);
        let mut k = KeyBytes::EMPTY;
        k.push(
            VERSION << 4
                | if pid.is_some() { PID_FLAG } else { 0 }
                | if wide { WIDE_FLAG } else { 0 }
                | self.kind as u8,
        );
        if let Some(p) = pid {
            k.varint(u64::from(p));
        }
        if seg {
            k.varint(self.base / SEGMENT_ALIGN);
        } else if wide {
            for &b in &self.base.to_le_bytes()[..6] {
                k.push(b);
            }
        } else {
            k.varint(self.base);
        }
        k.varint(self.len);
        k.varint(self.id);
        if self.kind == RkeyKind::Segment {
            k.varint(u64::from(self.fd));
        }
        k
    }

    pub fn decode(buf: &[u8]) -> Result<PackedRkey> {
        let mut r = Reader::new(buf);
        let k = Self::read(&mut r)?;
        if !r.is_empty() {
            return Err(Status::InvalidParam);
        }
        Ok(k)
    }

    fn read(r: &mut Reader<'_>) -> Result<PackedRkey> {
        let bad = Status::InvalidParam;
        let h = r.u8().ok_or(bad)?;
        if h >> 4 != VERSION {
            return Err(bad);
        }
        let kind = match h & 3 {
            1 => RkeyKind::Memory,
            2 => RkeyKind::Segment,
            3 => RkeyKind::Wire,
            _ => return Err(bad),
        };
        let wide = h & WIDE_FLAG != 0;
        if wide && kind == RkeyKind::Segment {
            return Err(bad);
        }
        let small = |v: u64| u32::try_from(v).ok().filter(|&v| v <= i32::MAX as u32);
        let pid = if h & PID_FLAG != 0 {
            if kind == RkeyKind::Wire {
                return Err(bad);
            }
            Some(
                small(r.varint().ok_or(bad)?)
                    .filter(|&p| p != 0)
                    .ok_or(bad)?,
            )
        } else {
            None
        };
        let base = if wide {
            let b = r.bytes(6).ok_or(bad)?;
            let mut v = [0u8; 8];
            v[..6].copy_from_slice(b);
            let base = u64::from_le_bytes(v);
            if !WIDE.contains(&base) {
                return Err(bad); // a varint would be as short: not the canonical form
            }
            base
        } else if kind == RkeyKind::Segment {
            r.varint()
                .ok_or(bad)?
                .checked_mul(SEGMENT_ALIGN)
                .ok_or(bad)?
        } else {
            let base = r.varint().ok_or(bad)?;
            if WIDE.contains(&base) {
                return Err(bad); // the 6-byte form is the canonical one
            }
            base
        };
        let len = r.varint().ok_or(bad)?;
        let id = r.varint().ok_or(bad)?;
        let fd = if kind == RkeyKind::Segment {
            small(r.varint().ok_or(bad)?).ok_or(bad)?
        } else {
            0
        };
        if base.checked_add(len).is_none() {
            return Err(bad);
        }
        Ok(PackedRkey {
            kind,
            pid,
            base,
            len,
            id,
            fd,
        })
    }

    /// The length of the key that starts with the bytes `byte(0)`, `byte(1)`, ...,
    /// reading no byte past the key's end (for C callers that hand a key without its
    /// length). An invalid header or a varint longer than 10 bytes is an error; the
    /// fields themselves are checked by [`PackedRkey::decode`] afterwards.
    pub fn encoded_len(mut byte: impl FnMut(usize) -> u8) -> Result<usize> {
        let h = byte(0);
        if h >> 4 != VERSION {
            return Err(Status::InvalidParam);
        }
        let mut fields = match h & 3 {
            1 | 3 => 3,
            2 => 4,
            _ => return Err(Status::InvalidParam),
        };
        if h & PID_FLAG != 0 {
            fields += 1;
        }
        let mut at = 1;
        if h & WIDE_FLAG != 0 {
            // The base: 6 bytes, not a varint (fields are pid?, base, length, id).
            if h & PID_FLAG != 0 {
                at += varint_end(&mut byte, at)?;
                fields -= 1;
            }
            at += 6;
            fields -= 1;
        }
        for _ in 0..fields {
            at += varint_end(&mut byte, at)?;
        }
        Ok(at)
    }
}

/// Bytes of the varint that starts at `at` (at most 10).
fn varint_end(byte: &mut impl FnMut(usize) -> u8, at: usize) -> Result<usize> {
    for n in 1..=10 {
        if byte(at + n - 1) & 0x80 == 0 {
            return Ok(n);
        }
    }
    Err(Status::InvalidParam)
}

/// The resolved access path of an unpacked key.
#[derive(Clone)]
pub(crate) enum Access {
    /// `remote address == local address`: this process's own registered memory, checked
    /// against the domain's registrations when unpacked. The token is the registration's
    /// liveness: once it is gone, every access is refused (the memory may be gone too).
    Local(std::sync::Weak<()>),
    /// Mapped segment: local address = map base + (remote address - key base).
    Mapped(Arc<ShmSegment>),
    /// Copy through process_vm_readv/writev of `pid`.
    Cma,
    /// Reached only by a transport that sends the data to the owner, who writes it into
    /// registration `reg` (tcp's `put_zcopy`); no local access.
    Wire { reg: u64 },
}

/// An unpacked remote key: everything an RMA or atomic operation needs.
#[derive(Clone)]
pub struct Rkey {
    pub(crate) base: u64,
    pub(crate) len: u64,
    pub(crate) pid: u32,
    pub(crate) access: Access,
}

impl std::fmt::Debug for Rkey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.access {
            Access::Local(_) => "local",
            Access::Mapped(_) => "mapped",
            Access::Cma => "cma",
            Access::Wire { .. } => "wire",
        };
        write!(
            f,
            "Rkey({kind} pid {} {:#x}+{})",
            self.pid, self.base, self.len
        )
    }
}

impl Rkey {
    /// Checks `[addr, addr+len)` lies inside the key.
    #[inline]
    pub(crate) fn check(&self, addr: u64, len: usize) -> Result<()> {
        let end = addr.checked_add(len as u64).ok_or(Status::InvalidParam)?;
        if addr < self.base || end > self.base + self.len {
            return Err(Status::InvalidParam);
        }
        Ok(())
    }

    /// A local pointer to remote address `addr` when the memory is directly reachable
    /// (local or mapped), after checking `len` bytes fit in the key.
    #[inline]
    pub fn ptr(&self, addr: u64, len: usize) -> Result<*mut u8> {
        self.check(addr, len)?;
        match &self.access {
            Access::Local(alive) => {
                if alive.strong_count() == 0 {
                    return Err(Status::InvalidParam);
                }
                Ok(addr as usize as *mut u8)
            }
            // check() proved addr - base + len <= key len <= segment len (the segment was
            // attached with at least the key's length): the pointer stays inside it.
            Access::Mapped(seg) => Ok(seg.as_ptr().wrapping_add((addr - self.base) as usize)),
            Access::Cma | Access::Wire { .. } => Err(Status::Unsupported),
        }
    }

    /// True when `ptr` works (direct load/store and CPU atomics).
    pub fn is_direct(&self) -> bool {
        matches!(self.access, Access::Local(_) | Access::Mapped(_))
    }

    /// The owner's registration id of a wire key (see [`RkeyKind::Wire`]).
    pub fn wire_reg(&self) -> Option<u64> {
        match self.access {
            Access::Wire { reg } => Some(reg),
            _ => None,
        }
    }

    /// The same memory reached by cross-memory attach instead (the key's addresses are
    /// the owner's own, so a mapped or local key also works through CMA).
    pub fn to_cma(&self) -> Rkey {
        Rkey {
            base: self.base,
            len: self.len,
            pid: self.pid,
            access: Access::Cma,
        }
    }

    /// The owner's base address and length of the key's region.
    pub fn range(&self) -> (u64, u64) {
        (self.base, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Writer;
    use proptest::prelude::*;

    fn kind() -> impl Strategy<Value = RkeyKind> {
        prop_oneof![
            Just(RkeyKind::Memory),
            Just(RkeyKind::Segment),
            Just(RkeyKind::Wire)
        ]
    }

    fn key() -> impl Strategy<Value = PackedRkey> {
        (
            kind(),
            proptest::option::of(1u32..=i32::MAX as u32),
            0u64..1 << 57,
            prop_oneof![0u64..1 << 20, 0u64..1 << 50],
            prop_oneof![1u64..1 << 14, any::<u64>()],
            0u32..=i32::MAX as u32,
        )
            .prop_map(|(kind, pid, base, len, id, fd)| {
                let seg = kind == RkeyKind::Segment;
                PackedRkey {
                    kind,
                    pid: if kind == RkeyKind::Wire { None } else { pid },
                    base: if seg {
                        base & !(SEGMENT_ALIGN - 1)
                    } else {
                        base
                    },
                    len,
                    id,
                    fd: if seg { fd } else { 0 },
                }
            })
    }

    proptest! {
        #[test]
        fn round_trip(k in key()) {
            let b = k.encode();
            prop_assert_eq!(PackedRkey::decode(&b).unwrap(), k);
            prop_assert_eq!(PackedRkey::encoded_len(|i| b.get(i).copied().unwrap_or(0x80)), Ok(b.len()));
            prop_assert!(b.len() <= MAX_PACKED_LEN);
            prop_assert_eq!(KeyBytes::from_slice(&b).unwrap(), k.encode_inline());
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(k) = PackedRkey::decode(&bytes) {
                prop_assert_eq!(k.encode(), bytes.clone());
                prop_assert_eq!(PackedRkey::encoded_len(|i| bytes.get(i).copied().unwrap_or(0x80)), Ok(bytes.len()));
            }
            // Never reads past the first error or the key's end.
            let _ = PackedRkey::encoded_len(|i| bytes.get(i).copied().unwrap_or(0));
        }
    }

    #[test]
    fn the_longest_fields_fit_inline_and_longer_bytes_are_refused() {
        for kind in [RkeyKind::Memory, RkeyKind::Segment, RkeyKind::Wire] {
            let k = PackedRkey {
                kind,
                pid: Some(u32::MAX),
                base: u64::MAX,
                len: u64::MAX,
                id: u64::MAX,
                fd: u32::MAX,
            };
            let b = k.encode_inline();
            assert!(b.len() <= MAX_PACKED_LEN);
            assert_eq!(&b[..], &k.encode()[..]);
        }
        assert!(KeyBytes::from_slice(&[7; MAX_PACKED_LEN]).is_ok());
        assert_eq!(
            KeyBytes::from_slice(&[7; MAX_PACKED_LEN + 1]),
            Err(Status::InvalidParam)
        );
        assert!(KeyBytes::EMPTY.is_empty());
    }

    /// Keys without the owner's pid (as ucp packs them) are at most 16 bytes for
    /// registered memory below 4 TiB and allocated memory below 32 GiB, registration ids
    /// below 2^21 and descriptor numbers below 16384.
    #[test]
    fn realistic_keys_fit_16_bytes() {
        let va = 0x7fff_ffff_f000u64; // the top of a 47-bit address space
        for (kind, len) in [
            (RkeyKind::Memory, (1u64 << 42) - 1),
            (RkeyKind::Segment, (1 << 35) - 1),
            (RkeyKind::Wire, (1 << 42) - 1),
        ] {
            let k = PackedRkey {
                kind,
                pid: None,
                base: va - len,
                len,
                id: (1 << 21) - 1,
                fd: 16383,
            };
            let n = k.encode().len();
            assert!(n <= 16, "{kind:?}: {n} bytes");
        }
    }

    #[test]
    fn corrupted_keys_are_rejected() {
        let k = PackedRkey {
            kind: RkeyKind::Segment,
            pid: Some(7),
            base: 4096,
            len: 100,
            id: 11,
            fd: 3,
        };
        let good = k.encode();
        assert_eq!(PackedRkey::decode(&good), Ok(k));
        let bad = Err(Status::InvalidParam);
        for h in [0x00, 0x12, 0x20, 0x24, 0x26, 0x2e, 0x30, 0xff] {
            let mut b = good.clone();
            b[0] = h;
            assert_eq!(PackedRkey::decode(&b), bad, "header {h:#x}");
        }
        for n in 0..good.len() {
            assert_eq!(PackedRkey::decode(&good[..n]), bad, "truncated to {n}");
        }
        let mut long = good.clone();
        long.push(0);
        assert_eq!(PackedRkey::decode(&long), bad);
        // An overlong varint (the pid 7 as two bytes).
        let overlong = [0x2a, 0x87, 0x00, 0x01, 0x64, 0x0b, 0x03];
        assert_eq!(PackedRkey::decode(&overlong), bad);
        // pid 0, a pid over 31 bits, a base + length that wraps.
        assert_eq!(PackedRkey::decode(&[0x29, 0x00, 0x00, 0x00, 0x01]), bad);
        let mut w = Writer::default();
        w.u8(0x29).varint(1 << 31).varint(0).varint(0).varint(1);
        assert_eq!(PackedRkey::decode(&w.buf), bad);
        let mut w = Writer::default();
        w.u8(0x21).varint(u64::MAX).varint(1).varint(1);
        assert_eq!(PackedRkey::decode(&w.buf), bad);
        // A wire key never carries a pid.
        let mut w = Writer::default();
        w.u8(0x2b).varint(5).varint(0).varint(0).varint(1);
        assert_eq!(PackedRkey::decode(&w.buf), bad);
        // The 6-byte base for a base that a varint encodes as short.
        let mut w = Writer::default();
        w.u8(0x25).u32(0x1000).u16(0).varint(1).varint(1);
        assert_eq!(PackedRkey::decode(&w.buf), bad);
        // A varint base where the 6-byte form is the canonical one.
        let mut w = Writer::default();
        w.u8(0x21).varint(0x7fff_0000_1000).varint(1).varint(1);
        assert_eq!(PackedRkey::decode(&w.buf), bad);
        // ... and the wide form of a real address decodes.
        let mut w = Writer::default();
        w.u8(0x25).u32(0x1000).u16(0x7fff).varint(1).varint(1);
        assert!(PackedRkey::decode(&w.buf).is_ok());
        // A segment base in pages that overflows 64 bits.
        let mut w = Writer::default();
        w.u8(0x22)
            .varint(u64::MAX / 4096 + 1)
            .varint(0)
            .varint(1)
            .varint(3);
        assert_eq!(PackedRkey::decode(&w.buf), bad);
    }
}
