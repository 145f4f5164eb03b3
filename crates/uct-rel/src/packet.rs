//! The wire format of the reliability protocol: one encoder ([`Packet::encode_into`]) and
//! one decoder ([`Packet::decode`]), and two in-place patch helpers the engine uses to
//! refresh a stored data packet's piggybacked acknowledgement before it goes out again.
//!
//! Every packet starts with a 20-byte header, all integers big-endian (network order):
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------+---------------+-------------------------------+
//! |  version = 2  |     flags     |        payload length         |  0
//! +---------------+---------------+-------------------------------+
//! |                 session (sender's connection id)              |  4
//! +---------------------------------------------------------------+
//! |           seq (DATA: this packet's sequence number)           |  8
//! +---------------------------------------------------------------+
//! |          ack (next sequence number the sender expects)        | 12
//! +---------------------------------------------------------------+
//! |     credit (bytes the sender of this packet can absorb)       | 16
//! +---------------------------------------------------------------+
//! |  payload (DATA: the message; NAK: selective-ack bitmap) ...   | 20
//! +----------------------------------------------------------------
//!
//! flags:  bit 0 DATA     the packet carries a message with sequence number `seq`
//!         bit 1 NAK      the receiver misses `ack`; payload bit i (LSB-first within each
//!                        byte) set means it holds `ack + 1 + i`
//!         bit 2 ACK_REQ  the sender asks for an acknowledgement right away
//!         bits 3-7       reserved, must be zero
//! ```
//!
//! Three packet kinds follow from the flags; any other combination is malformed:
//!
//! | kind | flags            | seq            | payload                              |
//! |------|------------------|----------------|--------------------------------------|
//! | Data | DATA [+ ACK_REQ] | message seq    | the message, 0..=65535 bytes         |
//! | Ack  | none [+ ACK_REQ] | reserved, 0    | empty                                |
//! | Nak  | NAK              | reserved, 0    | bitmap, 0..=[`MAX_SACK_BYTES`] bytes |
//!
//! Every packet carries a cumulative acknowledgement in `ack`: "I have every message before
//! `ack`", and a flow-control credit in `credit`: how many bytes of messages past `ack`
//! the sender of the packet offers to take from the receiver of the packet (its share of
//! its receive buffer). It is a window size, not an edge: the newest packet's value holds.
//! Version 1 (a 16-byte header without credit) is not accepted. An Ack with ACK_REQ is
//! a keepalive probe. The payload length must equal the datagram's length minus the
//! header exactly (a datagram is never padded or
//! concatenated). The `session` field identifies the sender's incarnation: a receiver pins
//! the first one it sees per peer, so packets from a restarted peer are not mistaken for the
//! old one's.
//!
//! The decoder checks every one of these rules and never panics; the engine counts what it
//! rejects and drops it. Decoded values are still untrusted: sequence numbers and
//! acknowledgements are range-checked by the engine against its own state.

use std::fmt;

/// The only version this module speaks.
pub const VERSION: u8 = 2;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 20;
/// Largest selective-acknowledgement bitmap of a NAK (covers 1024 sequence numbers past the
/// first gap; a window larger than that is still correct, its tail is recovered by timeout).
pub const MAX_SACK_BYTES: usize = 128;
/// Largest payload the length field can describe.
pub const MAX_PAYLOAD: usize = u16::MAX as usize;

/// Flag bit: the packet carries a message.
pub const FLAG_DATA: u8 = 0x01;
/// Flag bit: negative acknowledgement with a selective bitmap.
pub const FLAG_NAK: u8 = 0x02;
/// Flag bit: acknowledge immediately.
pub const FLAG_ACK_REQ: u8 = 0x04;
/// Bits that must be zero in this version.
pub const FLAGS_RESERVED: u8 = !(FLAG_DATA | FLAG_NAK | FLAG_ACK_REQ);

const OFF_FLAGS: usize = 1;
const OFF_LEN: usize = 2;
const OFF_SESSION: usize = 4;
const OFF_SEQ: usize = 8;
const OFF_ACK: usize = 12;
const OFF_CREDIT: usize = 16;

/// What a packet is, with the fields that belong to that kind only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    /// A message.
    Data {
        /// Its sequence number.
        seq: u32,
        /// Whether the receiver should acknowledge at once.
        ack_req: bool,
        /// The message bytes.
        payload: &'a [u8],
    },
    /// A standalone cumulative acknowledgement; with `ack_req` a keepalive probe.
    Ack {
        /// Whether the receiver should acknowledge at once.
        ack_req: bool,
    },
    /// The sender of this packet misses sequence number `ack`; `sack` bit i says whether it
    /// holds `ack + 1 + i`.
    Nak {
        /// Selective-acknowledgement bitmap, at most [`MAX_SACK_BYTES`].
        sack: &'a [u8],
    },
}

/// One packet, decoded (borrowing its payload from the datagram) or about to be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The sender's session (connection incarnation) id.
    pub session: u32,
    /// Cumulative acknowledgement: the next sequence number the sender expects from us.
    pub ack: u32,
    /// Flow-control credit: bytes of messages past `ack` the sender can absorb.
    pub credit: u32,
    /// Kind and kind-specific fields.
    pub body: Body<'a>,
}

/// Why a datagram was rejected. Each is counted by the engine as malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than the header.
    Truncated,
    /// A version this module does not speak.
    Version(u8),
    /// A reserved flag bit is set.
    ReservedFlags(u8),
    /// DATA and NAK together, or ACK_REQ on a NAK.
    BadFlags(u8),
    /// The length field disagrees with the datagram's size.
    Length {
        /// What the header says.
        header: usize,
        /// What follows the header.
        actual: usize,
    },
    /// A field that is reserved for this kind is not zero (seq of Ack/Nak, payload of Ack).
    ReservedField,
    /// A NAK bitmap longer than [`MAX_SACK_BYTES`].
    SackTooLong,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => write!(f, "datagram shorter than the {HEADER_LEN}-byte header"),
            Self::Version(v) => write!(f, "unknown version {v}"),
            Self::ReservedFlags(x) => write!(f, "reserved flag bits set in {x:#04x}"),
            Self::BadFlags(x) => write!(f, "invalid flag combination {x:#04x}"),
            Self::Length { header, actual } => {
                write!(
                    f,
                    "payload length {header} but {actual} bytes follow the header"
                )
            }
            Self::ReservedField => write!(f, "reserved field not zero"),
            Self::SackTooLong => write!(f, "NAK bitmap longer than {MAX_SACK_BYTES} bytes"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Why a packet could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The output buffer is smaller than [`Packet::encoded_len`].
    BufferTooSmall,
    /// A payload longer than [`MAX_PAYLOAD`] or a bitmap longer than [`MAX_SACK_BYTES`].
    PayloadTooLong,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BufferTooSmall => write!(f, "output buffer too small"),
            Self::PayloadTooLong => write!(f, "payload too long for the packet kind"),
        }
    }
}

impl std::error::Error for EncodeError {}

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

impl<'a> Packet<'a> {
    /// The payload (message or bitmap) this packet carries.
    pub fn payload(&self) -> &'a [u8] {
        match self.body {
            Body::Data { payload, .. } => payload,
            Body::Ack { .. } => &[],
            Body::Nak { sack } => sack,
        }
    }

    /// Bytes [`Packet::encode_into`] writes.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.payload().len()
    }

    /// Checks `bytes` against every rule of the format and returns the packet it holds.
    /// Never panics, whatever the input.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, DecodeError> {
        let Some((header, payload)) = bytes.split_first_chunk::<HEADER_LEN>() else {
            return Err(DecodeError::Truncated);
        };
        if header[0] != VERSION {
            return Err(DecodeError::Version(header[0]));
        }
        let flags = header[OFF_FLAGS];
        if flags & FLAGS_RESERVED != 0 {
            return Err(DecodeError::ReservedFlags(flags));
        }
        let len = usize::from(u16::from_be_bytes([header[OFF_LEN], header[OFF_LEN + 1]]));
        if len != payload.len() {
            return Err(DecodeError::Length {
                header: len,
                actual: payload.len(),
            });
        }
        let seq = be32(header, OFF_SEQ);
        let ack_req = flags & FLAG_ACK_REQ != 0;
        let body = match flags & (FLAG_DATA | FLAG_NAK) {
            FLAG_DATA => Body::Data {
                seq,
                ack_req,
                payload,
            },
            0 => {
                if seq != 0 || !payload.is_empty() {
                    return Err(DecodeError::ReservedField);
                }
                Body::Ack { ack_req }
            }
            FLAG_NAK => {
                if ack_req {
                    return Err(DecodeError::BadFlags(flags));
                }
                if seq != 0 {
                    return Err(DecodeError::ReservedField);
                }
                if payload.len() > MAX_SACK_BYTES {
                    return Err(DecodeError::SackTooLong);
                }
                Body::Nak { sack: payload }
            }
            _ => return Err(DecodeError::BadFlags(flags)),
        };
        Ok(Packet {
            session: be32(header, OFF_SESSION),
            ack: be32(header, OFF_ACK),
            credit: be32(header, OFF_CREDIT),
            body,
        })
    }

    /// Writes the packet to the front of `out` and returns the number of bytes written.
    /// What it writes always decodes back to `self`.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let (flags, seq) = match self.body {
            Body::Data { seq, ack_req, .. } => (FLAG_DATA | ack_flag(ack_req), seq),
            Body::Ack { ack_req } => (ack_flag(ack_req), 0),
            Body::Nak { sack } => {
                if sack.len() > MAX_SACK_BYTES {
                    return Err(EncodeError::PayloadTooLong);
                }
                (FLAG_NAK, 0)
            }
        };
        let payload = self.payload();
        let Ok(len) = u16::try_from(payload.len()) else {
            return Err(EncodeError::PayloadTooLong);
        };
        let total = HEADER_LEN + payload.len();
        let Some(out) = out.get_mut(..total) else {
            return Err(EncodeError::BufferTooSmall);
        };
        let (h, body) = out.split_at_mut(HEADER_LEN);
        write_header(h, flags, len, self.session, seq, self.ack, self.credit);
        body.copy_from_slice(payload);
        Ok(total)
    }
}

fn ack_flag(ack_req: bool) -> u8 {
    if ack_req {
        FLAG_ACK_REQ
    } else {
        0
    }
}

/// Rewrites the acknowledgement, the credit and the ACK_REQ flag of an encoded Data packet
/// in place, so that a stored packet carries the current values each time it is (re)sent.
/// `buf` must hold a packet this module encoded as Data (the engine only calls it on its
/// own stored packets); on a shorter buffer it does nothing.
pub(crate) fn patch_data(buf: &mut [u8], ack: u32, credit: u32, ack_req: bool) {
    if let Some(h) = buf.get_mut(..HEADER_LEN) {
        h[OFF_FLAGS] = FLAG_DATA | ack_flag(ack_req);
        h[OFF_ACK..OFF_ACK + 4].copy_from_slice(&ack.to_be_bytes());
        h[OFF_CREDIT..OFF_CREDIT + 4].copy_from_slice(&credit.to_be_bytes());
    }
}

/// Writes the header of a Data packet whose `payload_len` payload bytes the caller has
/// put (or will put) at `buf[HEADER_LEN..]`: the encoder for a payload packed in place.
/// The result decodes as [`Packet::decode`] would decode the same packet encoded by
/// [`Packet::encode_into`]. `buf` must hold at least [`HEADER_LEN`] bytes and
/// `payload_len` must be at most [`MAX_PAYLOAD`] (the engine checks both first).
pub(crate) fn encode_data_header(buf: &mut [u8], session: u32, seq: u32, payload_len: usize) {
    if let Some(h) = buf.get_mut(..HEADER_LEN) {
        let len = payload_len.min(MAX_PAYLOAD) as u16;
        write_header(h, FLAG_DATA, len, session, seq, 0, 0);
    }
}

/// The one writer of the header, for both encoders. `h` is exactly [`HEADER_LEN`] bytes.
fn write_header(h: &mut [u8], flags: u8, len: u16, session: u32, seq: u32, ack: u32, credit: u32) {
    h[0] = VERSION;
    h[OFF_FLAGS] = flags;
    h[OFF_LEN..OFF_LEN + 2].copy_from_slice(&len.to_be_bytes());
    h[OFF_SESSION..OFF_SESSION + 4].copy_from_slice(&session.to_be_bytes());
    h[OFF_SEQ..OFF_SEQ + 4].copy_from_slice(&seq.to_be_bytes());
    h[OFF_ACK..OFF_ACK + 4].copy_from_slice(&ack.to_be_bytes());
    h[OFF_CREDIT..OFF_CREDIT + 4].copy_from_slice(&credit.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(p: Packet<'_>) {
        let mut buf = vec![0u8; p.encoded_len() + 3];
        let n = p.encode_into(&mut buf).unwrap();
        assert_eq!(n, p.encoded_len());
        assert_eq!(Packet::decode(&buf[..n]).unwrap(), p);
    }

    #[test]
    fn kinds_round_trip() {
        round_trip(Packet {
            session: 7,
            ack: u32::MAX,
            credit: 0x5000,
            body: Body::Data {
                seq: 0xdead_beef,
                ack_req: true,
                payload: b"hello",
            },
        });
        round_trip(Packet {
            session: 0,
            ack: 3,
            credit: 0x5000,
            body: Body::Ack { ack_req: false },
        });
        round_trip(Packet {
            session: 1,
            ack: 3,
            credit: 0x5000,
            body: Body::Nak { sack: &[0x81, 0] },
        });
    }

    #[test]
    fn layout_is_as_documented() {
        let p = Packet {
            session: 0x0102_0304,
            ack: 0x0d0e_0f10,
            credit: 0x1112_1314,
            body: Body::Data {
                seq: 0x0809_0a0b,
                ack_req: true,
                payload: &[0xaa, 0xbb],
            },
        };
        let mut buf = [0u8; 22];
        p.encode_into(&mut buf).unwrap();
        assert_eq!(
            buf,
            [
                2, 0x05, 0, 2, 1, 2, 3, 4, 8, 9, 10, 11, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13,
                0x14, 0xaa, 0xbb
            ]
        );
    }

    #[test]
    fn rejects_each_rule() {
        let mut good = [0u8; HEADER_LEN];
        Packet {
            session: 1,
            ack: 2,
            credit: 0x5000,
            body: Body::Ack { ack_req: false },
        }
        .encode_into(&mut good)
        .unwrap();
        assert!(Packet::decode(&good).is_ok());
        assert_eq!(
            Packet::decode(&good[..HEADER_LEN - 1]),
            Err(DecodeError::Truncated)
        );
        let mut b = good;
        b[0] = 1;
        assert_eq!(Packet::decode(&b), Err(DecodeError::Version(1)));
        for bit in 3..8 {
            let mut b = good;
            b[1] = 1 << bit;
            assert_eq!(
                Packet::decode(&b),
                Err(DecodeError::ReservedFlags(1 << bit))
            );
        }
        let mut b = good;
        b[1] = FLAG_DATA | FLAG_NAK;
        assert_eq!(Packet::decode(&b), Err(DecodeError::BadFlags(3)));
        let mut b = good;
        b[1] = FLAG_NAK | FLAG_ACK_REQ;
        assert_eq!(Packet::decode(&b), Err(DecodeError::BadFlags(6)));
        let mut b = good;
        b[11] = 1; // seq of an Ack
        assert_eq!(Packet::decode(&b), Err(DecodeError::ReservedField));
        let mut b = good.to_vec();
        b.push(0); // payload without a length
        assert!(matches!(
            Packet::decode(&b),
            Err(DecodeError::Length { .. })
        ));
        b[3] = 1; // an Ack with a payload
        assert_eq!(Packet::decode(&b), Err(DecodeError::ReservedField));
        let mut b = vec![0u8; HEADER_LEN + MAX_SACK_BYTES + 1];
        b[..HEADER_LEN].copy_from_slice(&good);
        b[1] = FLAG_NAK;
        b[2..4].copy_from_slice(&((MAX_SACK_BYTES + 1) as u16).to_be_bytes());
        assert_eq!(Packet::decode(&b), Err(DecodeError::SackTooLong));
    }

    #[test]
    fn encode_checks_sizes() {
        let p = Packet {
            session: 0,
            ack: 0,
            credit: 0x5000,
            body: Body::Nak {
                sack: &[0; MAX_SACK_BYTES + 1],
            },
        };
        assert_eq!(
            p.encode_into(&mut [0; 400]),
            Err(EncodeError::PayloadTooLong)
        );
        let big = vec![0; MAX_PAYLOAD + 1];
        let p = Packet {
            session: 0,
            ack: 0,
            credit: 0x5000,
            body: Body::Data {
                seq: 0,
                ack_req: false,
                payload: &big,
            },
        };
        assert_eq!(
            p.encode_into(&mut vec![0; 70_000]),
            Err(EncodeError::PayloadTooLong)
        );
        let p = Packet {
            session: 0,
            ack: 0,
            credit: 0x5000,
            body: Body::Ack { ack_req: true },
        };
        assert_eq!(
            p.encode_into(&mut [0; HEADER_LEN - 1]),
            Err(EncodeError::BufferTooSmall)
        );
    }

    #[test]
    fn patch_rewrites_ack_and_flag() {
        let p = Packet {
            session: 9,
            ack: 1,
            credit: 0x5000,
            body: Body::Data {
                seq: 5,
                ack_req: false,
                payload: b"x",
            },
        };
        let mut buf = [0u8; HEADER_LEN + 1];
        p.encode_into(&mut buf).unwrap();
        patch_data(&mut buf, 77, 1234, true);
        let q = Packet::decode(&buf).unwrap();
        assert_eq!(q.ack, 77);
        assert_eq!(q.credit, 1234);
        assert_eq!(
            q.body,
            Body::Data {
                seq: 5,
                ack_req: true,
                payload: b"x"
            }
        );
    }

    #[derive(Debug, Clone)]
    enum OwnedBody {
        Data(u32, bool, Vec<u8>),
        Ack(bool),
        Nak(Vec<u8>),
    }

    fn owned_body() -> impl Strategy<Value = OwnedBody> {
        prop_oneof![
            (
                any::<u32>(),
                any::<bool>(),
                proptest::collection::vec(any::<u8>(), 0..300)
            )
                .prop_map(|(s, r, p)| OwnedBody::Data(s, r, p)),
            any::<bool>().prop_map(OwnedBody::Ack),
            proptest::collection::vec(any::<u8>(), 0..=MAX_SACK_BYTES).prop_map(OwnedBody::Nak),
        ]
    }

    proptest! {
        #[test]
        fn prop_round_trip(session: u32, ack: u32, credit: u32, body in owned_body()) {
            let body = match &body {
                OwnedBody::Data(seq, ack_req, p) => {
                    Body::Data { seq: *seq, ack_req: *ack_req, payload: p }
                }
                OwnedBody::Ack(r) => Body::Ack { ack_req: *r },
                OwnedBody::Nak(s) => Body::Nak { sack: s },
            };
            let p = Packet { session, ack, credit, body };
            let mut buf = vec![0u8; p.encoded_len()];
            prop_assert_eq!(p.encode_into(&mut buf), Ok(buf.len()));
            prop_assert_eq!(Packet::decode(&buf), Ok(p));
            if let Body::Data { seq, payload, .. } = p.body {
                // The in-place encoder plus patch gives the same bytes as the encoder.
                let mut b2 = vec![0u8; buf.len()];
                b2[HEADER_LEN..].copy_from_slice(payload);
                encode_data_header(&mut b2, session, seq, payload.len());
                patch_data(&mut b2, ack, credit, matches!(p.body, Body::Data { ack_req: true, .. }));
                prop_assert_eq!(b2, buf);
            }
        }

        #[test]
        fn prop_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = Packet::decode(&bytes) {
                // Whatever decodes re-encodes to the same bytes: nothing was ignored.
                let mut buf = vec![0u8; p.encoded_len()];
                prop_assert_eq!(p.encode_into(&mut buf), Ok(bytes.len()));
                prop_assert_eq!(buf, bytes);
            }
        }

        #[test]
        fn prop_decode_header_shaped(version in 0u8..4, flags: u8, len in 0u16..40,
                                     rest in proptest::collection::vec(any::<u8>(), 16),
                                     payload in proptest::collection::vec(any::<u8>(), 0..40)) {
            // Mostly-valid headers reach the deeper checks that random bytes rarely do.
            let mut b = vec![version, flags];
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(&rest);
            b.extend_from_slice(&payload);
            if let Ok(p) = Packet::decode(&b) {
                let mut buf = vec![0u8; p.encoded_len()];
                prop_assert_eq!(p.encode_into(&mut buf), Ok(b.len()));
                prop_assert_eq!(buf, b);
            }
        }
    }
}
