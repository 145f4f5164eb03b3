//! The tcp transport's wire formats: the interface address, the connection handshake and
//! the frame header of every active message.
//!
//! ```text
//! iface address: version u8 = 1 | family u8 (4 or 6) | port u16 | ip (4 or 16 bytes)
//!
//! handshake, first bytes a connecting endpoint sends:
//!   magic u32 = "RTCP" | version u8 = 1 | reserved u8 = 0 | addr len u16 | connector's iface address
//!
//! frame: am id u8 | reserved u8 = 0 | reserved u16 = 0 | payload length u32 | payload
//!
//! put frame (id 0x80): the frame header, then
//!   target address u64 | registration id u64 | data (payload length - 16 bytes)
//! the receiver writes the data straight from the socket into its registration `reg`
//! at the target address (see `put_zcopy` in the transport).
//! ```
//! All integers little endian except the port and IP, which are in network order as on
//! the wire of IP itself.

use crate::wire::{Reader, Writer};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use ucs::{Result, Status};

pub const VERSION: u8 = 1;
pub const MAGIC: u32 = u32::from_le_bytes(*b"RTCP");
pub const FRAME_HDR: usize = 8;
pub const HANDSHAKE_FIXED: usize = 8;
/// Frame id of a put (above the active-message ids, which are below 32).
pub const PUT_ID: u8 = 0x80;
/// Bytes of a put frame's own header (target address, registration id).
pub const PUT_HDR: usize = 16;

/// Encodes an interface address.
pub fn encode_addr(a: &SocketAddr) -> Vec<u8> {
    let mut w = Writer::with_capacity(20);
    w.u8(VERSION);
    match a.ip() {
        IpAddr::V4(ip) => {
            w.u8(4);
            w.buf.extend_from_slice(&a.port().to_be_bytes());
            w.buf.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            w.u8(6);
            w.buf.extend_from_slice(&a.port().to_be_bytes());
            w.buf.extend_from_slice(&ip.octets());
        }
    }
    w.buf
}

/// Decodes an interface address.
pub fn decode_addr(b: &[u8]) -> Result<SocketAddr> {
    let bad = Status::InvalidAddr;
    let mut r = Reader::new(b);
    if r.u8().ok_or(bad)? != VERSION {
        return Err(bad);
    }
    let fam = r.u8().ok_or(bad)?;
    let p = r.bytes(2).ok_or(bad)?;
    let port = u16::from_be_bytes([p[0], p[1]]);
    let ip = match fam {
        4 => {
            let o: [u8; 4] = r.bytes(4).ok_or(bad)?.try_into().map_err(|_| bad)?;
            IpAddr::V4(Ipv4Addr::from(o))
        }
        6 => {
            let o: [u8; 16] = r.bytes(16).ok_or(bad)?.try_into().map_err(|_| bad)?;
            IpAddr::V6(Ipv6Addr::from(o))
        }
        _ => return Err(bad),
    };
    if !r.is_empty() || port == 0 {
        return Err(bad);
    }
    Ok(SocketAddr::new(ip, port))
}

/// Encodes the handshake carrying the connector's interface address.
pub fn encode_handshake(iface_addr: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(HANDSHAKE_FIXED + iface_addr.len());
    w.u32(MAGIC).u8(VERSION).u8(0).u16(iface_addr.len() as u16);
    w.buf.extend_from_slice(iface_addr);
    w.buf
}

/// Parses a handshake at the start of `b`: `Ok(None)` when more bytes are needed,
/// else the connector's interface address and the bytes consumed. A prefix that cannot
/// start a handshake (wrong magic, version or reserved byte) is an error at once, so a
/// stray client is dropped without waiting for it.
pub fn decode_handshake(b: &[u8]) -> Result<Option<(Vec<u8>, usize)>> {
    let bad = Status::InvalidParam;
    let m = MAGIC.to_le_bytes();
    let head = [m[0], m[1], m[2], m[3], VERSION, 0];
    let n = b.len().min(head.len());
    if b[..n] != head[..n] {
        return Err(bad);
    }
    if b.len() < HANDSHAKE_FIXED {
        return Ok(None);
    }
    let mut r = Reader::new(b);
    if r.u32().ok_or(bad)? != MAGIC || r.u8().ok_or(bad)? != VERSION || r.u8().ok_or(bad)? != 0 {
        return Err(bad);
    }
    let n = r.u16().ok_or(bad)? as usize;
    if n > 64 {
        return Err(bad);
    }
    match r.bytes(n) {
        Some(a) => {
            decode_addr(a).map_err(|_| bad)?;
            Ok(Some((a.to_vec(), HANDSHAKE_FIXED + n)))
        }
        None => Ok(None),
    }
}

/// Writes a frame header.
#[inline]
pub fn frame_header(id: u8, len: usize) -> [u8; FRAME_HDR] {
    let l = (len as u32).to_le_bytes();
    [id, 0, 0, 0, l[0], l[1], l[2], l[3]]
}

/// Parses a frame header: (id, payload length). Reserved bytes must be zero; an
/// active-message frame (id below 32) carries at most `max` bytes, a put frame
/// ([`PUT_ID`]) at least its own header and at most `max_put` bytes of data.
#[inline]
pub fn parse_frame(h: &[u8], max: usize, max_put: usize) -> Result<(u8, usize)> {
    if h.len() < FRAME_HDR || h[1] != 0 || h[2] != 0 || h[3] != 0 {
        return Err(Status::InvalidParam);
    }
    let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    let ok = match h[0] {
        id if id < crate::AM_ID_MAX => len <= max,
        PUT_ID => len >= PUT_HDR && len - PUT_HDR <= max_put,
        _ => false,
    };
    if !ok {
        return Err(Status::InvalidParam);
    }
    Ok((h[0], len))
}

/// The frame header and put header of a put of `len` data bytes to `addr` in the peer's
/// registration `reg`.
#[inline]
pub fn put_header(addr: u64, reg: u64, len: usize) -> [u8; FRAME_HDR + PUT_HDR] {
    let mut h = [0u8; FRAME_HDR + PUT_HDR];
    h[..FRAME_HDR].copy_from_slice(&frame_header(PUT_ID, PUT_HDR + len));
    h[FRAME_HDR..FRAME_HDR + 8].copy_from_slice(&addr.to_le_bytes());
    h[FRAME_HDR + 8..].copy_from_slice(&reg.to_le_bytes());
    h
}

/// Decodes a put header (the 16 bytes after the frame header): (address, registration).
#[inline]
pub fn decode_put_header(b: &[u8]) -> Result<(u64, u64)> {
    let mut r = Reader::new(b);
    let addr = r.u64().ok_or(Status::InvalidParam)?;
    let reg = r.u64().ok_or(Status::InvalidParam)?;
    Ok((addr, reg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn addr_round_trip(v4: [u8; 4], v6: [u8; 16], port in 1u16..) {
            for ip in [IpAddr::V4(Ipv4Addr::from(v4)), IpAddr::V6(Ipv6Addr::from(v6))] {
                let a = SocketAddr::new(ip, port);
                prop_assert_eq!(decode_addr(&encode_addr(&a)).unwrap(), a);
                let h = encode_handshake(&encode_addr(&a));
                let (got, n) = decode_handshake(&h).unwrap().unwrap();
                prop_assert_eq!(n, h.len());
                prop_assert_eq!(decode_addr(&got).unwrap(), a);
                // Every prefix asks for more bytes instead of failing.
                for cut in 0..h.len() {
                    prop_assert!(decode_handshake(&h[..cut]).unwrap().is_none());
                }
            }
        }

        #[test]
        fn frame_round_trip(id in 0u8..32, len in 0usize..100_000) {
            prop_assert_eq!(parse_frame(&frame_header(id, len), 100_000, 0).unwrap(), (id, len));
        }

        #[test]
        fn put_round_trip(addr: u64, reg: u64, len in 0usize..1 << 20) {
            let h = put_header(addr, reg, len);
            prop_assert_eq!(parse_frame(&h, 0, 1 << 20).unwrap(), (PUT_ID, PUT_HDR + len));
            prop_assert_eq!(decode_put_header(&h[FRAME_HDR..]).unwrap(), (addr, reg));
        }

        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = decode_addr(&b);
            let _ = decode_handshake(&b);
            let _ = parse_frame(&b, 1000, 1000);
            let _ = decode_put_header(&b);
        }
    }

    #[test]
    fn bad_handshake_prefixes_are_rejected_early() {
        assert_eq!(decode_handshake(b"").unwrap(), None);
        assert_eq!(decode_handshake(b"RT").unwrap(), None);
        assert!(decode_handshake(b"GE").is_err());
        assert!(decode_handshake(b"RTCP\x02").is_err());
        assert!(decode_handshake(b"RTCP\x01\x01").is_err());
        assert_eq!(decode_handshake(b"RTCP\x01\x00\x08").unwrap(), None);
        // A length over 64 and an address that does not decode.
        assert!(decode_handshake(b"RTCP\x01\x00\x41\x00").is_err());
        let mut h = encode_handshake(&[1, 4, 0, 0, 127, 0, 0, 1]);
        assert!(decode_handshake(&h).is_err(), "port 0");
        h[10] = 1;
        assert_eq!(decode_handshake(&h).unwrap().unwrap().1, h.len());
    }

    #[test]
    fn bad_frames_are_rejected() {
        assert!(parse_frame(&frame_header(1, 2000), 1000, 1000).is_err());
        assert!(parse_frame(&frame_header(40, 1), 1000, 1000).is_err());
        let mut h = frame_header(1, 1);
        h[2] = 1;
        assert!(parse_frame(&h, 1000, 1000).is_err());
        // Put frames: shorter than their header, or more data than allowed.
        assert!(parse_frame(&frame_header(PUT_ID, PUT_HDR - 1), 1000, 1000).is_err());
        assert!(parse_frame(&frame_header(PUT_ID, PUT_HDR + 1001), 1000, 1000).is_err());
        assert!(parse_frame(&frame_header(PUT_ID, PUT_HDR + 1000), 0, 1000).is_ok());
    }
}
