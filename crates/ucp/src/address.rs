//! The worker address: what a peer needs to create an endpoint to a worker.
//!
//! ```text
//!  0        1        2          4          12          20         21
//!  +--------+--------+----------+----------+-----------+----------+----------------------+
//!  |version | flags  | reserved |   uuid   |  host id  | n ifaces | n × iface entry      |
//!  |  = 1   | = 0    |  u16 = 0 |   u64    |   u64     |   u8     |                      |
//!  +--------+--------+----------+----------+-----------+----------+----------------------+
//!  iface entry: transport id u8 | caps u32 | addr len u8 | addr (addr len bytes)
//!  transport ids: 1 = self, 2 = shm, 3 = tcp, 4 = udp (one entry per device); other ids are
//!  skipped (a newer peer's transport)
//! ```
//! All integers little endian. Decoding checks every length and rejects trailing bytes,
//! reserved bits and empty interface lists.

use ucs::{Result, Status};
use uct::wire::{Reader, Writer};
use uct::{Caps, Transport};

pub const VERSION: u8 = 1;
/// At most this many interfaces per address.
pub const MAX_IFACES: usize = 16;

/// One interface of a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfaceEntry {
    /// `None` for a transport id this build does not know.
    pub transport: Option<Transport>,
    pub tl_id: u8,
    pub caps: Caps,
    pub addr: Vec<u8>,
}

/// A decoded worker address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerAddress {
    pub uuid: u64,
    pub host_id: u64,
    pub ifaces: Vec<IfaceEntry>,
}

/// The wire id of a transport.
pub fn tl_id(t: Transport) -> u8 {
    match t {
        Transport::SelfTl => 1,
        Transport::Shm => 2,
        Transport::Tcp => 3,
        Transport::Udp => 4,
        Transport::Fabric => 5,
    }
}

fn tl_from_id(id: u8) -> Option<Transport> {
    match id {
        1 => Some(Transport::SelfTl),
        2 => Some(Transport::Shm),
        3 => Some(Transport::Tcp),
        4 => Some(Transport::Udp),
        5 => Some(Transport::Fabric),
        _ => None,
    }
}

impl WorkerAddress {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(64);
        w.u8(VERSION).u8(0).u16(0).u64(self.uuid).u64(self.host_id);
        w.u8(self.ifaces.len() as u8);
        for i in &self.ifaces {
            w.u8(i.tl_id).u32(i.caps.bits()).u8(i.addr.len() as u8);
            w.buf.extend_from_slice(&i.addr);
        }
        w.buf
    }

    pub fn decode(buf: &[u8]) -> Result<WorkerAddress> {
        let bad = Status::InvalidAddr;
        let mut r = Reader::new(buf);
        if r.u8().ok_or(bad)? != VERSION || r.u8().ok_or(bad)? != 0 || r.u16().ok_or(bad)? != 0 {
            return Err(bad);
        }
        let uuid = r.u64().ok_or(bad)?;
        let host_id = r.u64().ok_or(bad)?;
        let n = r.u8().ok_or(bad)? as usize;
        if n == 0 || n > MAX_IFACES {
            return Err(bad);
        }
        let mut ifaces = Vec::with_capacity(n);
        for _ in 0..n {
            let tl_id = r.u8().ok_or(bad)?;
            let caps = Caps::from_bits_retain(r.u32().ok_or(bad)?);
            let len = r.u8().ok_or(bad)? as usize;
            let addr = r.bytes(len).ok_or(bad)?.to_vec();
            ifaces.push(IfaceEntry {
                transport: tl_from_id(tl_id),
                tl_id,
                caps,
                addr,
            });
        }
        if !r.is_empty() {
            return Err(bad);
        }
        Ok(WorkerAddress {
            uuid,
            host_id,
            ifaces,
        })
    }

    /// The entry for transport `t`, if the peer has it.
    pub fn iface(&self, t: Transport) -> Option<&IfaceEntry> {
        self.ifaces.iter().find(|i| i.transport == Some(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry() -> impl Strategy<Value = IfaceEntry> {
        (
            1u8..5,
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..40),
        )
            .prop_map(|(id, caps, addr)| IfaceEntry {
                transport: tl_from_id(id),
                tl_id: id,
                caps: Caps::from_bits_retain(caps),
                addr,
            })
    }

    proptest! {
        #[test]
        fn round_trip(uuid: u64, host: u64, ifaces in proptest::collection::vec(entry(), 1..5)) {
            let a = WorkerAddress { uuid, host_id: host, ifaces };
            prop_assert_eq!(WorkerAddress::decode(&a.encode()).unwrap(), a);
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = WorkerAddress::decode(&b);
        }

        #[test]
        fn truncation_is_rejected(uuid: u64, ifaces in proptest::collection::vec(entry(), 1..4), cut in 1usize..10) {
            let b = WorkerAddress { uuid, host_id: 1, ifaces }.encode();
            let cut = cut.min(b.len());
            prop_assert!(WorkerAddress::decode(&b[..b.len() - cut]).is_err());
        }
    }
}
