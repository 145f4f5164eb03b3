//! The fabric's formats: the interface address and the frames carried as reliable
//! messages of the engine.
//!
//! ```text
//! iface address, 16 bytes: version u8 = 1 | reserved u8, u16 = 0 | node u32 | network u64
//!                          (little endian)
//! frame: kind u8 | ...
//!   kind 0  active message:  am id u8 | bytes (am_short: 8-byte header in native order,
//!                            then the payload)
//!   kind 1  put (rendezvous by put): registration u64 | address u64 | data
//! ```

use crate::wire::{Reader, Writer};
use ucs::{Result, Status};

const VERSION: u8 = 1;
pub const ADDR_LEN: usize = 16;
/// Bytes of a frame in front of an active message.
pub const AM_HDR: usize = 2;
/// Bytes of a frame in front of put data.
pub const PUT_HDR: usize = 17;
const KIND_AM: u8 = 0;
const KIND_PUT: u8 = 1;

/// A decoded interface address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FabricAddr {
    pub net: u64,
    pub node: u32,
}

impl FabricAddr {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(ADDR_LEN);
        w.u8(VERSION).u8(0).u16(0).u32(self.node).u64(self.net);
        w.buf
    }

    pub fn decode(b: &[u8]) -> Result<FabricAddr> {
        let bad = Status::InvalidAddr;
        let mut r = Reader::new(b);
        if r.u8().ok_or(bad)? != VERSION || r.u8().ok_or(bad)? != 0 || r.u16().ok_or(bad)? != 0 {
            return Err(bad);
        }
        let node = r.u32().ok_or(bad)?;
        let net = r.u64().ok_or(bad)?;
        if !r.is_empty() {
            return Err(bad);
        }
        Ok(FabricAddr { net, node })
    }
}

/// A decoded frame, borrowing the message.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Am { id: u8, data: &'a [u8] },
    Put { reg: u64, addr: u64, data: &'a [u8] },
}

pub fn put_am_hdr(buf: &mut Vec<u8>, id: u8) {
    buf.push(KIND_AM);
    buf.push(id);
}

pub fn put_put_hdr(buf: &mut Vec<u8>, reg: u64, addr: u64) {
    buf.push(KIND_PUT);
    buf.extend_from_slice(&reg.to_le_bytes());
    buf.extend_from_slice(&addr.to_le_bytes());
}

/// Decodes a frame; `None` when malformed.
pub fn decode(b: &[u8]) -> Option<Frame<'_>> {
    let mut r = Reader::new(b);
    match r.u8()? {
        KIND_AM => {
            let id = r.u8()?;
            Some(Frame::Am {
                id,
                data: &b[AM_HDR..],
            })
        }
        KIND_PUT => {
            let reg = r.u64()?;
            let addr = r.u64()?;
            Some(Frame::Put {
                reg,
                addr,
                data: &b[PUT_HDR..],
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn address_round_trip(net: u64, node: u32) {
            let a = FabricAddr { net, node };
            prop_assert_eq!(FabricAddr::decode(&a.encode()).unwrap(), a);
        }

        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = FabricAddr::decode(&b);
            let _ = decode(&b);
        }

        #[test]
        fn frames_round_trip(id: u8, reg: u64, addr: u64,
                             data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut b = Vec::new();
            put_am_hdr(&mut b, id);
            b.extend_from_slice(&data);
            prop_assert_eq!(decode(&b), Some(Frame::Am { id, data: &data }));
            let mut b = Vec::new();
            put_put_hdr(&mut b, reg, addr);
            b.extend_from_slice(&data);
            prop_assert_eq!(decode(&b), Some(Frame::Put { reg, addr, data: &data }));
        }
    }
}
