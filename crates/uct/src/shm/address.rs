//! The shm interface address and device address: what a peer needs to reach a receive
//! FIFO.
//!
//! ```text
//! iface address, 32 bytes, little endian
//!  0       1        2           4        8          12          16         24        32
//!  +-------+--------+-----------+--------+----------+-----------+----------+---------+
//!  |version|reserved| reserved  |  pid   |  seg fd  | event fd  | seg inode| seg len |
//!  |  = 1  |  = 0   |   = 0     |  u32   |   i32    |   i32     |   u64    |  u64    |
//!  +-------+--------+-----------+--------+----------+-----------+----------+---------+
//!
//! device address, 8 bytes: the host id (ucs::sys::host::host_id); shm reaches a peer only
//! when the two host ids are equal.
//! ```
//! Reserved fields are written as zero and must be zero on decode (room for a later
//! version to use them without ambiguity).

use crate::wire::{Reader, Writer};
use ucs::sys::SegmentId;
use ucs::{Result, Status};

/// Current address version.
pub const VERSION: u8 = 1;
/// Encoded length of an iface address.
pub const IFACE_ADDR_LEN: usize = 32;
/// Encoded length of a device address.
pub const DEVICE_ADDR_LEN: usize = 8;

/// A decoded shm interface address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmIfaceAddr {
    /// The receive segment (FIFO and bcopy buffers).
    pub seg: SegmentId,
    /// The receiver's wakeup eventfd number in its own process.
    pub event_fd: i32,
}

impl ShmIfaceAddr {
    /// Encodes into exactly [`IFACE_ADDR_LEN`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(IFACE_ADDR_LEN);
        w.u8(VERSION)
            .u8(0)
            .u16(0)
            .u32(self.seg.pid)
            .i32(self.seg.fd)
            .i32(self.event_fd)
            .u64(self.seg.ino)
            .u64(self.seg.len);
        w.buf
    }

    /// Decodes and checks an iface address.
    pub fn decode(buf: &[u8]) -> Result<ShmIfaceAddr> {
        let mut r = Reader::new(buf);
        let bad = Status::InvalidAddr;
        if r.u8().ok_or(bad)? != VERSION || r.u8().ok_or(bad)? != 0 || r.u16().ok_or(bad)? != 0 {
            return Err(bad);
        }
        let pid = r.u32().ok_or(bad)?;
        let fd = r.i32().ok_or(bad)?;
        let event_fd = r.i32().ok_or(bad)?;
        let ino = r.u64().ok_or(bad)?;
        let len = r.u64().ok_or(bad)?;
        if !r.is_empty() || pid == 0 || fd < 0 || event_fd < 0 || len == 0 {
            return Err(bad);
        }
        Ok(ShmIfaceAddr {
            seg: SegmentId { pid, fd, ino, len },
            event_fd,
        })
    }
}

/// Encodes the device address of this host.
pub fn encode_device_addr(host_id: u64) -> Vec<u8> {
    host_id.to_le_bytes().to_vec()
}

/// Decodes a device address into a host id.
pub fn decode_device_addr(buf: &[u8]) -> Result<u64> {
    let mut r = Reader::new(buf);
    let id = r.u64().ok_or(Status::InvalidAddr)?;
    if !r.is_empty() {
        return Err(Status::InvalidAddr);
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(pid in 1u32.., fd in 0i32.., efd in 0i32.., ino: u64, len in 1u64..) {
            let a = ShmIfaceAddr { seg: SegmentId { pid, fd, ino, len }, event_fd: efd };
            let b = a.encode();
            prop_assert_eq!(b.len(), IFACE_ADDR_LEN);
            prop_assert_eq!(ShmIfaceAddr::decode(&b).unwrap(), a);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = ShmIfaceAddr::decode(&bytes);
            let _ = decode_device_addr(&bytes);
        }

        #[test]
        fn device_round_trip(id: u64) {
            prop_assert_eq!(decode_device_addr(&encode_device_addr(id)).unwrap(), id);
        }
    }

    #[test]
    fn rejects_bad_version_truncation_and_trailing_bytes() {
        let a = ShmIfaceAddr {
            seg: SegmentId {
                pid: 5,
                fd: 3,
                ino: 9,
                len: 4096,
            },
            event_fd: 4,
        };
        let good = a.encode();
        let mut v = good.clone();
        v[0] = 2;
        assert_eq!(ShmIfaceAddr::decode(&v), Err(Status::InvalidAddr));
        assert!(ShmIfaceAddr::decode(&good[..31]).is_err());
        let mut long = good.clone();
        long.push(0);
        assert!(ShmIfaceAddr::decode(&long).is_err());
        let mut r = good;
        r[1] = 1;
        assert!(ShmIfaceAddr::decode(&r).is_err());
    }
}
