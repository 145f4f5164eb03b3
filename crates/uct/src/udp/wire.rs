//! The udp transport's wire formats: the interface address, and the frames (an active
//! message, or a piece of a put) inside one reliable message of [`uct_rel`].
//!
//! ```text
//! iface address: version u8 = 2 | family u8 (4 or 6) | port u16 | seg size u16 | ip (4 or 16 bytes)
//!
//! datagram:  uct_rel packet header (20 bytes, see uct_rel::packet) | payload
//! payload of a DATA packet, one frame:
//!
//!   0        1        2
//!   +--------+--------+----------------------------------------+
//!   | am id  | flags  | AM bytes (am_short: 8-byte header in   |
//!   | u8 <32 | u8 = 0 | native order, then the payload)        |
//!   +--------+--------+----------------------------------------+
//!
//!   a put piece (flags = PUT):
//!   +--------+--------+-----------------+-----------------+-------------+
//!   | 0      | 1      | registration u64| address u64     | data        |
//!   +--------+--------+-----------------+-----------------+-------------+
//! ```
//! The port, seg size (the largest datagram payload the interface sends and receives,
//! [`super::UdpConfig::seg_size`]), IP, registration and address are in network order.
//! A put piece writes its data at `address`, which must lie with the whole piece inside
//! the live registration `registration` of the receiving process's udp (or tcp) domain
//! (`crate::md::wire_target`); a piece that does not is counted and dropped. Other flag
//! values are reserved. The address's version is the frames' version: version 1 (no put
//! pieces) addresses are refused, so processes that cannot parse each other's frames
//! never reach each other. Everything is checked on decode: a bad frame is counted and
//! dropped by the interface.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use ucs::{Result, Status};

pub const VERSION: u8 = 2;
/// Bytes in front of the active-message bytes in a reliable message.
pub const FRAME_HDR: usize = 2;

/// Encodes an interface address: the socket address and the datagram size.
pub fn encode_addr(a: &SocketAddr, seg_size: u16) -> Vec<u8> {
    let mut w = Vec::with_capacity(22);
    w.push(VERSION);
    w.push(if a.is_ipv4() { 4 } else { 6 });
    w.extend_from_slice(&a.port().to_be_bytes());
    w.extend_from_slice(&seg_size.to_be_bytes());
    match a.ip() {
        IpAddr::V4(ip) => w.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => w.extend_from_slice(&ip.octets()),
    }
    w
}

/// Decodes an interface address: exact length, known family, port not 0, a seg size of
/// at least the two headers.
pub fn decode_addr(b: &[u8]) -> Result<(SocketAddr, u16)> {
    let bad = Status::InvalidAddr;
    let (&[ver, fam, p0, p1, s0, s1], ip) = b.split_first_chunk::<6>().ok_or(bad)?;
    let port = u16::from_be_bytes([p0, p1]);
    let seg = u16::from_be_bytes([s0, s1]);
    if ver != VERSION || port == 0 || usize::from(seg) < uct_rel::packet::HEADER_LEN + FRAME_HDR {
        return Err(bad);
    }
    let ip = match (fam, ip.len()) {
        (4, 4) => {
            let o: [u8; 4] = ip.try_into().map_err(|_| bad)?;
            IpAddr::V4(Ipv4Addr::from(o))
        }
        (6, 16) => {
            let o: [u8; 16] = ip.try_into().map_err(|_| bad)?;
            IpAddr::V6(Ipv6Addr::from(o))
        }
        _ => return Err(bad),
    };
    Ok((SocketAddr::new(ip, port), seg))
}

/// Writes a frame header for active-message id `id`.
#[inline]
pub fn frame_header(id: u8) -> [u8; FRAME_HDR] {
    [id, 0]
}

/// The flag of a put piece.
pub const FLAG_PUT: u8 = 1;
/// Bytes of a put piece's header after the frame header: registration and address.
pub const PUT_HDR: usize = 16;

/// Writes the frame and put headers of a put piece aimed at `addr` of registration `reg`.
#[inline]
pub fn put_header(reg: u64, addr: u64) -> [u8; FRAME_HDR + PUT_HDR] {
    let mut h = [0u8; FRAME_HDR + PUT_HDR];
    h[1] = FLAG_PUT;
    h[2..10].copy_from_slice(&reg.to_be_bytes());
    h[10..18].copy_from_slice(&addr.to_be_bytes());
    h
}

/// One reliable message, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// An active message: its id and bytes.
    Am(u8, &'a [u8]),
    /// A piece of a put: `data` goes at `addr` of registration `reg`.
    Put { reg: u64, addr: u64, data: &'a [u8] },
}

/// Decodes a reliable message. An active message's id must be below
/// [`crate::AM_ID_MAX`]; a put piece has id 0 and its whole header.
#[inline]
pub fn parse(m: &[u8]) -> Result<Frame<'_>> {
    match m {
        [id, 0, rest @ ..] if *id < crate::AM_ID_MAX => Ok(Frame::Am(*id, rest)),
        [0, FLAG_PUT, rest @ ..] if rest.len() >= PUT_HDR => {
            let (h, data) = rest.split_at(PUT_HDR);
            let (reg, addr) = h.split_at(8);
            let be = |b: &[u8]| b.try_into().map(u64::from_be_bytes);
            Ok(Frame::Put {
                reg: be(reg).map_err(|_| Status::InvalidParam)?,
                addr: be(addr).map_err(|_| Status::InvalidParam)?,
                data,
            })
        }
        _ => Err(Status::InvalidParam),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn addr_round_trip(v4: [u8; 4], v6: [u8; 16], port in 1u16.., seg in (uct_rel::packet::HEADER_LEN + FRAME_HDR) as u16..) {
            for ip in [IpAddr::V4(Ipv4Addr::from(v4)), IpAddr::V6(Ipv6Addr::from(v6))] {
                let a = SocketAddr::new(ip, port);
                prop_assert_eq!(decode_addr(&encode_addr(&a, seg)).unwrap(), (a, seg));
            }
        }

        #[test]
        fn frame_round_trip(id in 0u8..32, body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut m = frame_header(id).to_vec();
            m.extend_from_slice(&body);
            prop_assert_eq!(parse(&m).unwrap(), Frame::Am(id, &body[..]));
        }

        #[test]
        fn put_round_trip(reg: u64, addr: u64, body in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut m = put_header(reg, addr).to_vec();
            m.extend_from_slice(&body);
            prop_assert_eq!(parse(&m).unwrap(), Frame::Put { reg, addr, data: &body[..] });
        }

        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok((a, seg)) = decode_addr(&b) {
                prop_assert_eq!(encode_addr(&a, seg), b.clone());
            }
            let _ = parse(&b);
        }
    }

    #[test]
    fn bad_input_is_rejected() {
        let a = encode_addr(&"127.0.0.1:7".parse().unwrap(), 1472);
        assert!(decode_addr(&a).is_ok());
        assert!(decode_addr(&a[..a.len() - 1]).is_err());
        let mut b = a.clone();
        b.push(0);
        assert!(decode_addr(&b).is_err(), "trailing byte");
        let mut b = a.clone();
        b[0] = 1;
        assert!(decode_addr(&b).is_err(), "version 1: no put pieces");
        let mut b = a.clone();
        b[1] = 6;
        assert!(decode_addr(&b).is_err(), "family and length disagree");
        let mut b = a.clone();
        b[2] = 0;
        b[3] = 0;
        assert!(decode_addr(&b).is_err(), "port 0");
        let mut b = a;
        b[4] = 0;
        b[5] = 17;
        assert!(decode_addr(&b).is_err(), "seg size below the headers");
        assert!(parse(&[]).is_err());
        assert!(parse(&[1]).is_err());
        assert!(parse(&[32, 0]).is_err());
        assert!(parse(&[1, 1]).is_err(), "a put piece has id 0");
        assert!(parse(&[0, 2]).is_err(), "reserved flag");
        assert!(parse(&put_header(1, 2)[..17]).is_err(), "short put header");
        assert_eq!(parse(&[31, 0]).unwrap(), Frame::Am(31, &[][..]));
        assert_eq!(
            parse(&put_header(7, 9)).unwrap(),
            Frame::Put {
                reg: 7,
                addr: 9,
                data: &[][..]
            }
        );
    }
}
