//! Active-message protocol messages: one encoder and one decoder per header.
//!
//! ```text
//! AmEager   id u16, flags u16, user header length u32, src uuid u64 | user header | data
//! AmRts     the AmEager fields | sender request, length, address (u64) |
//!           rkey length u16 (at most 41) | user header | rkey bytes
//! AmFirst   the AmEager fields | message id, total length (u64) | user header | data
//! AmMiddle  src uuid, message id, offset (u64) | data
//! flags: bit 0 = the receiver gets an endpoint to reply on; other bits reserved (0).
//! ```

use ucs::{Result, Status};
use uct::wire::Reader;

/// AmFirst header before the user header: the AmEager fields, message id, total length.
pub const FIRST_HDR: usize = 32;
/// AmMiddle header: src uuid, message id, offset.
pub const MIDDLE_HDR: usize = 24;
/// AmEager header before the user header.
pub const EAGER_HDR: usize = 16;
/// AmRts header before the user header and key.
pub const RTS_HDR: usize = 42;
/// The receiver gets an endpoint to reply on.
pub const FLAG_REPLY: u16 = 1;

/// The fields every active-message header starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    pub id: u16,
    pub flags: u16,
    pub hdr_len: usize,
    pub uuid: u64,
}

/// Writes `f` at the start of `b`; returns its length.
pub fn put_fields(b: &mut [u8], f: &Fields) -> usize {
    b[0..2].copy_from_slice(&f.id.to_le_bytes());
    b[2..4].copy_from_slice(&f.flags.to_le_bytes());
    b[4..8].copy_from_slice(&(f.hdr_len as u32).to_le_bytes());
    b[8..16].copy_from_slice(&f.uuid.to_le_bytes());
    EAGER_HDR
}

/// Reads the common fields.
pub fn get_fields(r: &mut Reader<'_>) -> Result<Fields> {
    let bad = Status::InvalidParam;
    let f = Fields {
        id: r.u16().ok_or(bad)?,
        flags: r.u16().ok_or(bad)?,
        hdr_len: r.u32().ok_or(bad)? as usize,
        uuid: r.u64().ok_or(bad)?,
    };
    if f.flags & !FLAG_REPLY != 0 {
        return Err(bad);
    }
    Ok(f)
}

/// Decodes an AmEager into (fields, user header, data).
pub fn decode_eager(d: &[u8]) -> Result<(Fields, &[u8], &[u8])> {
    let mut r = Reader::new(d);
    let f = get_fields(&mut r)?;
    let header = r.bytes(f.hdr_len).ok_or(Status::InvalidParam)?;
    let data = &d[EAGER_HDR + f.hdr_len..];
    Ok((f, header, data))
}

/// A decoded AmRts.
#[derive(Debug)]
pub struct Rts<'a> {
    pub f: Fields,
    pub sreq: u64,
    pub len: u64,
    pub addr: u64,
    pub header: &'a [u8],
    pub rkey: &'a [u8],
}

impl Rts<'_> {
    /// Bytes of the encoded message.
    pub fn encoded_len(&self) -> usize {
        RTS_HDR + self.header.len() + self.rkey.len()
    }

    /// Encodes into `b` (at least `encoded_len` bytes); returns the length.
    pub fn encode_into(&self, b: &mut [u8]) -> usize {
        let mut o = put_fields(b, &self.f);
        for v in [self.sreq, self.len, self.addr] {
            b[o..o + 8].copy_from_slice(&v.to_le_bytes());
            o += 8;
        }
        b[o..o + 2].copy_from_slice(&(self.rkey.len() as u16).to_le_bytes());
        o += 2;
        b[o..o + self.header.len()].copy_from_slice(self.header);
        o += self.header.len();
        b[o..o + self.rkey.len()].copy_from_slice(self.rkey);
        o + self.rkey.len()
    }

    pub fn decode(d: &[u8]) -> Result<Rts<'_>> {
        let bad = Status::InvalidParam;
        let mut r = Reader::new(d);
        let f = get_fields(&mut r)?;
        let (sreq, len, addr) = (
            r.u64().ok_or(bad)?,
            r.u64().ok_or(bad)?,
            r.u64().ok_or(bad)?,
        );
        let klen = r.u16().ok_or(bad)? as usize;
        // No valid packed key is longer (the receiver holds it inline).
        if klen > uct::rkey::MAX_PACKED_LEN {
            return Err(bad);
        }
        let header = r.bytes(f.hdr_len).ok_or(bad)?;
        let rkey = r.bytes(klen).ok_or(bad)?;
        if !r.is_empty() {
            return Err(bad);
        }
        Ok(Rts {
            f,
            sreq,
            len,
            addr,
            header,
            rkey,
        })
    }
}

/// A decoded AmFirst: the fields, message id, total length, user header and data.
#[derive(Debug)]
pub struct First<'a> {
    pub f: Fields,
    pub msg_id: u64,
    pub total: u64,
    pub header: &'a [u8],
    pub data: &'a [u8],
}

impl First<'_> {
    /// Encodes the header part (everything but the data) into `b`; returns its length.
    pub fn encode_header(
        f: &Fields,
        msg_id: u64,
        total: u64,
        header: &[u8],
        b: &mut [u8],
    ) -> usize {
        let mut o = put_fields(b, f);
        for w in [msg_id, total] {
            b[o..o + 8].copy_from_slice(&w.to_le_bytes());
            o += 8;
        }
        b[o..o + header.len()].copy_from_slice(header);
        o + header.len()
    }

    pub fn decode(d: &[u8]) -> Result<First<'_>> {
        let bad = Status::InvalidParam;
        let mut r = Reader::new(d);
        let f = get_fields(&mut r)?;
        let msg_id = r.u64().ok_or(bad)?;
        let total = r.u64().ok_or(bad)?;
        let header = r.bytes(f.hdr_len).ok_or(bad)?;
        let data = &d[FIRST_HDR + f.hdr_len..];
        Ok(First {
            f,
            msg_id,
            total,
            header,
            data,
        })
    }
}

/// A decoded AmMiddle.
#[derive(Debug, PartialEq, Eq)]
pub struct Middle<'a> {
    pub uuid: u64,
    pub msg_id: u64,
    pub offset: u64,
    pub data: &'a [u8],
}

impl Middle<'_> {
    /// Encodes the header into `b`; returns its length.
    pub fn encode_header(uuid: u64, msg_id: u64, offset: u64, b: &mut [u8]) -> usize {
        let mut o = 0;
        for w in [uuid, msg_id, offset] {
            b[o..o + 8].copy_from_slice(&w.to_le_bytes());
            o += 8;
        }
        o
    }

    pub fn decode(d: &[u8]) -> Result<Middle<'_>> {
        let bad = Status::InvalidParam;
        let mut r = Reader::new(d);
        let uuid = r.u64().ok_or(bad)?;
        let msg_id = r.u64().ok_or(bad)?;
        let offset = r.u64().ok_or(bad)?;
        Ok(Middle {
            uuid,
            msg_id,
            offset,
            data: &d[MIDDLE_HDR..],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn rts_round_trips(id: u16, reply: bool, uuid: u64, sreq: u64, len: u64, addr: u64,
                           header in proptest::collection::vec(any::<u8>(), 0..40),
                           rkey in proptest::collection::vec(any::<u8>(), 0..40)) {
            let f = Fields { id, flags: if reply { FLAG_REPLY } else { 0 }, hdr_len: header.len(), uuid };
            let rts = Rts { f, sreq, len, addr, header: &header, rkey: &rkey };
            let mut b = vec![0u8; rts.encoded_len()];
            assert_eq!(rts.encode_into(&mut b), b.len());
            let d = Rts::decode(&b).unwrap();
            prop_assert_eq!(d.f, f);
            prop_assert_eq!((d.sreq, d.len, d.addr), (sreq, len, addr));
            prop_assert_eq!(d.header, &header[..]);
            prop_assert_eq!(d.rkey, &rkey[..]);
        }

        #[test]
        fn fragments_and_eager_round_trip(id: u16, uuid: u64, msg_id: u64, total: u64, off: u64,
                                          header in proptest::collection::vec(any::<u8>(), 0..40),
                                          data in proptest::collection::vec(any::<u8>(), 0..40)) {
            let f = Fields { id, flags: 0, hdr_len: header.len(), uuid };
            let mut b = vec![0u8; FIRST_HDR + header.len() + data.len()];
            let h = First::encode_header(&f, msg_id, total, &header, &mut b);
            b[h..].copy_from_slice(&data);
            let d = First::decode(&b).unwrap();
            prop_assert_eq!((d.f, d.msg_id, d.total), (f, msg_id, total));
            prop_assert_eq!((d.header, d.data), (&header[..], &data[..]));

            let mut m = vec![0u8; MIDDLE_HDR + data.len()];
            let h = Middle::encode_header(uuid, msg_id, off, &mut m);
            m[h..].copy_from_slice(&data);
            prop_assert_eq!(Middle::decode(&m).unwrap(), Middle { uuid, msg_id, offset: off, data: &data });

            let mut e = vec![0u8; EAGER_HDR + header.len() + data.len()];
            let h = put_fields(&mut e, &f);
            e[h..h + header.len()].copy_from_slice(&header);
            e[h + header.len()..].copy_from_slice(&data);
            let (g, hh, dd) = decode_eager(&e).unwrap();
            prop_assert_eq!((g, hh, dd), (f, &header[..], &data[..]));
        }

        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode_eager(&b);
            let _ = Rts::decode(&b);
            let _ = First::decode(&b);
            let _ = Middle::decode(&b);
        }
    }

    #[test]
    fn an_rts_key_longer_than_any_packed_key_is_refused() {
        let f = Fields {
            id: 1,
            flags: 0,
            hdr_len: 2,
            uuid: 3,
        };
        let long = [5u8; uct::rkey::MAX_PACKED_LEN + 1];
        for n in [uct::rkey::MAX_PACKED_LEN, uct::rkey::MAX_PACKED_LEN + 1] {
            let rts = Rts {
                f,
                sreq: 4,
                len: 5,
                addr: 6,
                header: &[7, 8],
                rkey: &long[..n],
            };
            let mut b = vec![0u8; rts.encoded_len()];
            let m = rts.encode_into(&mut b);
            let ok = n <= uct::rkey::MAX_PACKED_LEN;
            assert_eq!(Rts::decode(&b[..m]).is_ok(), ok, "a {n}-byte key");
        }
    }
}
