//! The protocol messages ucp sends over transport active messages, one encoder and one
//! decoder each. All integers little endian; the payload (if any) follows the header.
//!
//! ```text
//! id  message       header fields (u64 unless noted)                 payload
//!  1  EagerOnly     tag                                              whole message
//!  2  EagerSync     tag, src uuid, sender request                     whole message
//!  3  EagerFirst    tag, src uuid, msg id, total length, sender req*  first fragment
//!  4  EagerMiddle   src uuid, msg id, offset                          next fragment
//!  5  Rts           tag, src uuid, sender req, length, address,       -
//!                   rkey length (u16, at most 41), rkey bytes
//!  6  Ats           sender request, status (i8)                       -
//!  7  SyncAck       sender request                                    -
//!  8  Wireup        src uuid                                          sender's worker address
//! 20  Rtr           sender request, receiver request, address,        -
//!                   length, rkey length (u16, at most 41), rkey bytes
//! 21  RndvFin       receiver request, src uuid                         -
//! 23  RtrPart       as Rtr: the part of the message the sender puts   -
//!  * 0 when the send is not synchronous
//! Rtr and RndvFin make the rendezvous where the sender puts (lanes without a one-copy
//! read, i.e. tcp): the receiver answers an Rts whose key is a wire key with an Rtr naming
//! its buffer, the sender puts the data there and sends RndvFin behind it. RtrPart
//! (shared memory, from `UCX_RUCX_RNDV_SPLIT` up) asks the sender to put only the
//! first `length` bytes while the receiver reads the rest itself; the sender's send then
//! completes on the Ats, which the receiver sends once it has both parts.
//! ```
//! Stream bytes (id 17) carry the sender's worker id (u64) in front of the bytes.
//! Decoders check lengths and never trust a length field beyond the bytes present.

// The wireup message belongs to the core (it makes endpoints); its codec is listed here
// with the others.
pub use crate::core::{decode_wireup, WIREUP_LEN};
use ucs::{Result, Status};
use uct::wire::Reader;

pub const EAGER_ONLY_LEN: usize = 8;
pub const EAGER_SYNC_LEN: usize = 24;
pub const EAGER_FIRST_LEN: usize = 40;
pub const EAGER_MIDDLE_LEN: usize = 24;
pub const RTS_FIXED_LEN: usize = 42;
pub const ATS_LEN: usize = 9;
pub const SYNC_ACK_LEN: usize = 8;
pub const RTR_FIXED_LEN: usize = 34;
/// Bytes of a stream message's header (the sender's worker id).
pub const STREAM_HDR: usize = 8;

fn put(buf: &mut [u8], off: &mut usize, v: u64) {
    buf[*off..*off + 8].copy_from_slice(&v.to_le_bytes());
    *off += 8;
}

fn short<T>(r: Option<T>) -> Result<T> {
    r.ok_or(Status::InvalidParam)
}

/// Writes `fields` and then `key` with its u16 length: the layout of Rts and Rtr.
fn encode_with_key(b: &mut [u8], fields: &[u64], key: &[u8]) -> usize {
    let mut o = 0;
    for &v in fields {
        put(b, &mut o, v);
    }
    b[o..o + 2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    o += 2;
    b[o..o + key.len()].copy_from_slice(key);
    o + key.len()
}

/// Reads `N` fields and then a key with its u16 length that must end the message.
fn decode_with_key<const N: usize>(b: &[u8]) -> Result<([u64; N], &[u8])> {
    let mut r = Reader::new(b);
    let mut fields = [0u64; N];
    for f in fields.iter_mut() {
        *f = short(r.u64())?;
    }
    let klen = short(r.u16())? as usize;
    // No valid packed key is longer; the receivers hold keys inline (`uct::rkey::KeyBytes`).
    if klen > uct::rkey::MAX_PACKED_LEN {
        return Err(Status::InvalidParam);
    }
    let key = short(r.bytes(klen))?;
    if !r.is_empty() {
        return Err(Status::InvalidParam);
    }
    Ok((fields, key))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EagerSync {
    pub tag: u64,
    pub uuid: u64,
    pub sreq: u64,
}

impl EagerSync {
    pub fn encode_into(&self, b: &mut [u8]) -> usize {
        let mut o = 0;
        put(b, &mut o, self.tag);
        put(b, &mut o, self.uuid);
        put(b, &mut o, self.sreq);
        o
    }
    pub fn decode(b: &[u8]) -> Result<(EagerSync, &[u8])> {
        let mut r = Reader::new(b);
        let h = EagerSync {
            tag: short(r.u64())?,
            uuid: short(r.u64())?,
            sreq: short(r.u64())?,
        };
        Ok((h, &b[EAGER_SYNC_LEN..]))
    }
}

/// Decodes an EagerOnly message into (tag, payload).
pub fn decode_eager_only(b: &[u8]) -> Result<(u64, &[u8])> {
    let tag = short(Reader::new(b).u64())?;
    Ok((tag, &b[EAGER_ONLY_LEN..]))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EagerFirst {
    pub tag: u64,
    pub uuid: u64,
    pub msg_id: u64,
    pub total: u64,
    pub sreq: u64,
}

impl EagerFirst {
    pub fn encode_into(&self, b: &mut [u8]) -> usize {
        let mut o = 0;
        for v in [self.tag, self.uuid, self.msg_id, self.total, self.sreq] {
            put(b, &mut o, v);
        }
        o
    }
    pub fn decode(b: &[u8]) -> Result<(EagerFirst, &[u8])> {
        let mut r = Reader::new(b);
        let h = EagerFirst {
            tag: short(r.u64())?,
            uuid: short(r.u64())?,
            msg_id: short(r.u64())?,
            total: short(r.u64())?,
            sreq: short(r.u64())?,
        };
        let payload = &b[EAGER_FIRST_LEN..];
        if payload.len() as u64 > h.total {
            return Err(Status::InvalidParam);
        }
        Ok((h, payload))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EagerMiddle {
    pub uuid: u64,
    pub msg_id: u64,
    pub offset: u64,
}

impl EagerMiddle {
    pub fn encode_into(&self, b: &mut [u8]) -> usize {
        let mut o = 0;
        for v in [self.uuid, self.msg_id, self.offset] {
            put(b, &mut o, v);
        }
        o
    }
    pub fn decode(b: &[u8]) -> Result<(EagerMiddle, &[u8])> {
        let mut r = Reader::new(b);
        let h = EagerMiddle {
            uuid: short(r.u64())?,
            msg_id: short(r.u64())?,
            offset: short(r.u64())?,
        };
        Ok((h, &b[EAGER_MIDDLE_LEN..]))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rts<'a> {
    pub tag: u64,
    pub uuid: u64,
    pub sreq: u64,
    pub len: u64,
    pub addr: u64,
    pub rkey: &'a [u8],
}

impl Rts<'_> {
    pub fn encoded_len(&self) -> usize {
        RTS_FIXED_LEN + self.rkey.len()
    }
    pub fn encode_into(&self, b: &mut [u8]) -> usize {
        let f = [self.tag, self.uuid, self.sreq, self.len, self.addr];
        encode_with_key(b, &f, self.rkey)
    }
    pub fn decode(b: &[u8]) -> Result<Rts<'_>> {
        let ([tag, uuid, sreq, len, addr], rkey) = decode_with_key(b)?;
        Ok(Rts {
            tag,
            uuid,
            sreq,
            len,
            addr,
            rkey,
        })
    }
}

/// Ready to receive: where the sender of request `sreq` puts `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rtr<'a> {
    pub sreq: u64,
    pub rreq: u64,
    pub addr: u64,
    pub len: u64,
    pub rkey: &'a [u8],
}

impl Rtr<'_> {
    pub fn encoded_len(&self) -> usize {
        RTR_FIXED_LEN + self.rkey.len()
    }
    pub fn encode_into(&self, b: &mut [u8]) -> usize {
        encode_with_key(b, &[self.sreq, self.rreq, self.addr, self.len], self.rkey)
    }
    pub fn decode(b: &[u8]) -> Result<Rtr<'_>> {
        let ([sreq, rreq, addr, len], rkey) = decode_with_key(b)?;
        Ok(Rtr {
            sreq,
            rreq,
            addr,
            len,
            rkey,
        })
    }
}

pub const RNDV_FIN_LEN: usize = 16;

/// Encodes a RndvFin (rendezvous data all put).
pub fn encode_rndv_fin(rreq: u64, uuid: u64) -> [u8; RNDV_FIN_LEN] {
    let mut b = [0u8; RNDV_FIN_LEN];
    b[..8].copy_from_slice(&rreq.to_le_bytes());
    b[8..].copy_from_slice(&uuid.to_le_bytes());
    b
}

/// Decodes a RndvFin into (receiver request, sender's uuid).
pub fn decode_rndv_fin(b: &[u8]) -> Result<(u64, u64)> {
    let mut r = Reader::new(b);
    let v = (short(r.u64())?, short(r.u64())?);
    if !r.is_empty() {
        return Err(Status::InvalidParam);
    }
    Ok(v)
}

/// Encodes an Ats (rendezvous done) message.
pub fn encode_ats(b: &mut [u8], sreq: u64, status: Status) -> usize {
    b[..8].copy_from_slice(&sreq.to_le_bytes());
    b[8] = status.code() as u8;
    ATS_LEN
}

/// Decodes an Ats into (sender request, status).
pub fn decode_ats(b: &[u8]) -> Result<(u64, Status)> {
    let mut r = Reader::new(b);
    let sreq = short(r.u64())?;
    let code = short(r.u8())? as i8;
    if !r.is_empty() {
        return Err(Status::InvalidParam);
    }
    let st = Status::from_code(i32::from(code)).ok_or(Status::InvalidParam)?;
    Ok((sreq, st))
}

/// Decodes a SyncAck into the sender request.
pub fn decode_sync_ack(b: &[u8]) -> Result<u64> {
    let mut r = Reader::new(b);
    let v = short(r.u64())?;
    if !r.is_empty() {
        return Err(Status::InvalidParam);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(a: u64, b: u64, c: u64, d: u64, e: u64, key in proptest::collection::vec(any::<u8>(), 0..=uct::rkey::MAX_PACKED_LEN),
                       payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut buf = vec![0u8; 256];
            let s = EagerSync { tag: a, uuid: b, sreq: c };
            let n = s.encode_into(&mut buf);
            buf[n..n + payload.len()].copy_from_slice(&payload);
            let (s2, p) = EagerSync::decode(&buf[..n + payload.len()]).unwrap();
            prop_assert_eq!(s2, s);
            prop_assert_eq!(p, &payload[..]);

            let f = EagerFirst { tag: a, uuid: b, msg_id: c, total: d.max(payload.len() as u64), sreq: e };
            let n = f.encode_into(&mut buf);
            buf[n..n + payload.len()].copy_from_slice(&payload);
            let (f2, p) = EagerFirst::decode(&buf[..n + payload.len()]).unwrap();
            prop_assert_eq!(f2, f);
            prop_assert_eq!(p, &payload[..]);

            let m = EagerMiddle { uuid: a, msg_id: b, offset: c };
            let n = m.encode_into(&mut buf);
            prop_assert_eq!(EagerMiddle::decode(&buf[..n]).unwrap().0, m);

            let r = Rts { tag: a, uuid: b, sreq: c, len: d, addr: e, rkey: &key };
            let n = r.encode_into(&mut buf);
            prop_assert_eq!(n, r.encoded_len());
            prop_assert_eq!(Rts::decode(&buf[..n]).unwrap(), r);

            let t = Rtr { sreq: a, rreq: b, addr: c, len: d, rkey: &key };
            let n = t.encode_into(&mut buf);
            prop_assert_eq!(n, t.encoded_len());
            prop_assert_eq!(Rtr::decode(&buf[..n]).unwrap(), t);
            prop_assert!(Rtr::decode(&buf[..n - 1]).is_err());
            prop_assert_eq!(decode_rndv_fin(&encode_rndv_fin(e, a)).unwrap(), (e, a));

            let n = encode_ats(&mut buf, a, Status::MessageTruncated);
            prop_assert_eq!(decode_ats(&buf[..n]).unwrap(), (a, Status::MessageTruncated));
        }

        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = decode_eager_only(&b);
            let _ = EagerSync::decode(&b);
            let _ = EagerFirst::decode(&b);
            let _ = EagerMiddle::decode(&b);
            let _ = Rts::decode(&b);
            let _ = decode_ats(&b);
            let _ = decode_sync_ack(&b);
            let _ = decode_wireup(&b);
            let _ = Rtr::decode(&b);
            let _ = decode_rndv_fin(&b);
        }
    }

    #[test]
    fn first_fragment_longer_than_total_is_rejected() {
        let mut buf = vec![0u8; 64];
        let f = EagerFirst {
            tag: 1,
            uuid: 2,
            msg_id: 3,
            total: 4,
            sreq: 0,
        };
        let n = f.encode_into(&mut buf);
        assert!(EagerFirst::decode(&buf[..n + 5]).is_err());
        assert!(EagerFirst::decode(&buf[..n + 4]).is_ok());
    }

    #[test]
    fn keys_longer_than_any_packed_key_are_refused() {
        let mut buf = vec![0u8; 128];
        let max = [9u8; uct::rkey::MAX_PACKED_LEN + 1];
        for n in [uct::rkey::MAX_PACKED_LEN, uct::rkey::MAX_PACKED_LEN + 1] {
            let key = &max[..n];
            let ok = n <= uct::rkey::MAX_PACKED_LEN;
            let r = Rts {
                tag: 1,
                uuid: 2,
                sreq: 3,
                len: 4,
                addr: 5,
                rkey: key,
            };
            let m = r.encode_into(&mut buf);
            assert_eq!(
                Rts::decode(&buf[..m]).is_ok(),
                ok,
                "Rts with a {n}-byte key"
            );
            let t = Rtr {
                sreq: 1,
                rreq: 2,
                addr: 3,
                len: 4,
                rkey: key,
            };
            let m = t.encode_into(&mut buf);
            assert_eq!(
                Rtr::decode(&buf[..m]).is_ok(),
                ok,
                "Rtr with a {n}-byte key"
            );
        }
    }
}
