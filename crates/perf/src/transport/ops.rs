//! The operations a test repeats, one type per (operation, data layout): the layout is
//! decided once when the test starts and the timed loop is compiled for that one type, so
//! the loop has no per-iteration branch on the layout ("decide at setup").

use crate::mem::AlignedBuf;
use ucs::Result;
use uct::{EpId, Iface, Outcome, Rkey};

/// One repeatable operation.
pub trait Op {
    /// Starts the operation once. `NoResource` means "progress and try again".
    fn issue(&mut self, iface: &mut Iface) -> Result<Outcome>;
    /// The operation's data buffer: what is sent or put, or where a get lands.
    fn buf(&mut self) -> &mut [u8];
}

fn unit<T>(o: Outcome<T>) -> Outcome {
    match o {
        Outcome::Done(_) => Outcome::Done(()),
        Outcome::InProgress => Outcome::InProgress,
        Outcome::NoResource => Outcome::NoResource,
    }
}

/// Bytes of the AM header of short and zcopy messages.
pub const AM_HDR: usize = 8;

/// `am_short`: the first 8 bytes of the data travel as the header, so the receiver sees
/// exactly the data.
pub struct AmShort {
    pub ep: EpId,
    pub id: u8,
    pub data: Vec<u8>,
}

impl Op for AmShort {
    #[inline]
    fn issue(&mut self, iface: &mut Iface) -> Result<Outcome> {
        let mut h = [0u8; AM_HDR];
        h.copy_from_slice(&self.data[..AM_HDR]);
        iface.am_short(
            self.ep,
            self.id,
            u64::from_ne_bytes(h),
            &self.data[AM_HDR..],
        )
    }

    fn buf(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

/// `am_bcopy`: the data is packed into the transport's buffer.
pub struct AmBcopy {
    pub ep: EpId,
    pub id: u8,
    pub data: Vec<u8>,
}

impl Op for AmBcopy {
    #[inline]
    fn issue(&mut self, iface: &mut Iface) -> Result<Outcome> {
        let data = &self.data;
        iface
            .am_bcopy(self.ep, self.id, |b| {
                b[..data.len()].copy_from_slice(data);
                data.len()
            })
            .map(unit)
    }

    fn buf(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

/// `am_zcopy`: up to 8 bytes of header, the rest as one iov entry.
pub struct AmZcopy {
    pub ep: EpId,
    pub id: u8,
    pub data: Vec<u8>,
}

impl Op for AmZcopy {
    #[inline]
    fn issue(&mut self, iface: &mut Iface) -> Result<Outcome> {
        let (h, rest) = self.data.split_at(AM_HDR.min(self.data.len()));
        iface.am_zcopy(self.ep, self.id, h, &[rest], 0)
    }

    fn buf(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

/// A put of `data` to `addr` of the peer's region.
pub struct Put {
    pub ep: EpId,
    pub data: AlignedBuf,
    pub addr: u64,
    pub rkey: Rkey,
}

/// `put_short`.
pub struct PutShort(pub Put);
/// `put_bcopy`.
pub struct PutBcopy(pub Put);
/// `put_zcopy`.
pub struct PutZcopy(pub Put);

impl Op for PutShort {
    #[inline]
    fn issue(&mut self, iface: &mut Iface) -> Result<Outcome> {
        let p = &self.0;
        iface.put_short(p.ep, &p.data[..], p.addr, &p.rkey)
    }

    fn buf(&mut self) -> &mut [u8] {
        &mut self.0.data
    }
}

impl Op for PutBcopy {
    #[inline]
    fn issue(&mut self, iface: &mut Iface) -> Result<Outcome> {
        let p = &self.0;
        let data = &p.data[..];
        iface
            .put_bcopy(
                p.ep,
                |b| {
                    b[..data.len()].copy_from_slice(data);
                    data.len()
                },
                p.addr,
                &p.rkey,
            )
            .map(unit)
    }

    fn buf(&mut self) -> &mut [u8] {
        &mut self.0.data
    }
}

impl Op for PutZcopy {
    #[inline]
    fn issue(&mut self, iface: &mut Iface) -> Result<Outcome> {
        let p = &self.0;
        iface.put_zcopy(p.ep, &[&p.data[..]], p.addr, &p.rkey, 0)
    }

    fn buf(&mut self) -> &mut [u8] {
        &mut self.0.data
    }
}

/// `get_bcopy` of `data.len()` bytes from `addr` into `data`.
pub struct GetBcopy(pub Put);
/// `get_zcopy` of `data.len()` bytes from `addr` into `data`.
pub struct GetZcopy(pub Put);

impl Op for GetBcopy {
    #[inline]
    fn issue(&mut self, iface: &mut Iface) -> Result<Outcome> {
        let p = &mut self.0;
        let dst = &mut p.data;
        let len = dst.len();
        iface.get_bcopy(p.ep, len, p.addr, &p.rkey, |d| dst.copy_from_slice(d), 0)
    }

    fn buf(&mut self) -> &mut [u8] {
        &mut self.0.data
    }
}

impl Op for GetZcopy {
    #[inline]
    fn issue(&mut self, iface: &mut Iface) -> Result<Outcome> {
        let p = &mut self.0;
        iface.get_zcopy(p.ep, &mut [&mut p.data[..]], p.addr, &p.rkey, 0)
    }

    fn buf(&mut self) -> &mut [u8] {
        &mut self.0.data
    }
}
