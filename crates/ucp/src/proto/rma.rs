//! Messages of emulated remote memory access: the initiator asks, the target (which owns
//! the memory) checks the region and does the access in its progress, then answers.
//! Every header is a run of little-endian u64 fields; data, where there is any, follows.
//!
//! ```text
//! id  message   fields (u64 each)                                         data
//!  9  Put       src uuid, request, key id, address                         bytes to write
//! 10  GetReq    src uuid, request, key id, address, length                 -
//! 11  GetRep    request, offset, status                                    bytes read
//! 12  AmoReq    src uuid, request, key id, address, value, compare, op     -
//! 13  AmoRep    request, status, previous value                            -
//! 14  Ack       request, status                                            -
//! 22  PutSignal src uuid, request, key id, address, signal key id,          bytes to write
//!               signal address, signal op, signal value
//! op word: bits 0-7 operation, bits 8-15 size in bytes (4 or 8), bit 16 fetch;
//! status: the ucs status code, sign-extended; signal op: 1 add, 2 set.
//! ```
//!
//! A PutSignal is the last (or only) piece of a put with remote signal: the target writes
//! its bytes, then applies the signal to the 64-bit word, so a reader of the word that
//! sees the signal sees the data of this piece and of every piece before it on the lane.

use ucs::{Result, Status};
use uct::{AtomicOp, AtomicSize};

/// Header bytes of a Put.
pub const PUT_HDR: usize = 32;
/// Header bytes of a GetRep.
pub const GET_REP_HDR: usize = 24;
/// Header bytes of a PutSignal.
pub const PUT_SIGNAL_HDR: usize = 64;

pub use crate::core::request::SignalOp;

fn signal_code(op: SignalOp) -> u64 {
    match op {
        SignalOp::Add => 1,
        SignalOp::Set => 2,
    }
}

fn signal_from_code(c: u64) -> Result<SignalOp> {
    match c {
        1 => Ok(SignalOp::Add),
        2 => Ok(SignalOp::Set),
        _ => Err(Status::InvalidParam),
    }
}

/// The header of a PutSignal message (its data follows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutSignal {
    pub uuid: u64,
    pub sreq: u64,
    pub key: u64,
    pub addr: u64,
    pub signal_key: u64,
    pub signal_addr: u64,
    pub op: SignalOp,
    pub value: u64,
}

impl PutSignal {
    /// Writes the header at the start of `b` (at least [`PUT_SIGNAL_HDR`] bytes); returns
    /// its length.
    pub fn encode_into(&self, b: &mut [u8]) -> usize {
        encode(
            &[
                self.uuid,
                self.sreq,
                self.key,
                self.addr,
                self.signal_key,
                self.signal_addr,
                signal_code(self.op),
                self.value,
            ],
            b,
        )
    }

    /// Reads a header; returns it and the data after it. An unknown signal op is a
    /// malformed message.
    pub fn decode(b: &[u8]) -> Result<(PutSignal, &[u8])> {
        let ([uuid, sreq, key, addr, signal_key, signal_addr, op, value], data) = decode::<8>(b)?;
        let h = PutSignal {
            uuid,
            sreq,
            key,
            addr,
            signal_key,
            signal_addr,
            op: signal_from_code(op)?,
            value,
        };
        Ok((h, data))
    }
}

/// Writes `fields` at the start of `b`; returns the bytes written.
pub fn encode(fields: &[u64], b: &mut [u8]) -> usize {
    for (i, f) in fields.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&f.to_le_bytes());
    }
    fields.len() * 8
}

/// Reads `N` fields; returns them and the rest (the data).
pub fn decode<const N: usize>(b: &[u8]) -> Result<([u64; N], &[u8])> {
    if b.len() < N * 8 {
        return Err(Status::InvalidParam);
    }
    let mut f = [0u64; N];
    for (i, v) in f.iter_mut().enumerate() {
        *v = u64::from_le_bytes(
            b[i * 8..i * 8 + 8]
                .try_into()
                .map_err(|_| Status::InvalidParam)?,
        );
    }
    Ok((f, &b[N * 8..]))
}

/// Status as a field.
pub fn status_field(s: Status) -> u64 {
    i64::from(s.code()) as u64
}

/// A field as a status (an unknown code, or a field that is not a sign-extended code, is
/// a malformed message).
pub fn field_status(v: u64) -> Result<Status> {
    let code = i32::try_from(v as i64).map_err(|_| Status::InvalidParam)?;
    Status::from_code(code).ok_or(Status::InvalidParam)
}

fn op_code(op: AtomicOp) -> u64 {
    match op {
        AtomicOp::Add => 1,
        AtomicOp::And => 2,
        AtomicOp::Or => 3,
        AtomicOp::Xor => 4,
        AtomicOp::Swap => 5,
        AtomicOp::Cswap => 6,
    }
}

/// Packs an atomic's operation, size and whether it fetches.
pub fn op_word(op: AtomicOp, size: AtomicSize, fetch: bool) -> u64 {
    op_code(op) | (size.bytes() as u64) << 8 | u64::from(fetch) << 16
}

/// Unpacks an op word.
pub fn parse_op_word(w: u64) -> Result<(AtomicOp, AtomicSize, bool)> {
    let op = match w & 0xff {
        1 => AtomicOp::Add,
        2 => AtomicOp::And,
        3 => AtomicOp::Or,
        4 => AtomicOp::Xor,
        5 => AtomicOp::Swap,
        6 => AtomicOp::Cswap,
        _ => return Err(Status::InvalidParam),
    };
    let size = match (w >> 8) & 0xff {
        4 => AtomicSize::B32,
        8 => AtomicSize::B64,
        _ => return Err(Status::InvalidParam),
    };
    if w >> 17 != 0 {
        return Err(Status::InvalidParam);
    }
    Ok((op, size, (w >> 16) & 1 == 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn fields_round_trip(f in proptest::collection::vec(any::<u64>(), 7), data in proptest::collection::vec(any::<u8>(), 0..32)) {
            let mut b = vec![0u8; 56 + data.len()];
            let n = encode(&f, &mut b);
            b[n..].copy_from_slice(&data);
            let (g, rest) = decode::<7>(&b).unwrap();
            prop_assert_eq!(&g[..], &f[..]);
            prop_assert_eq!(rest, &data[..]);
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64), w: u64) {
            let _ = decode::<7>(&b);
            let _ = decode::<2>(&b);
            let _ = parse_op_word(w);
            if let Ok(s) = field_status(w) {
                prop_assert_eq!(status_field(s), w, "a status field must be a sign-extended code");
            }
        }
    }

    fn signal_op() -> impl Strategy<Value = SignalOp> {
        prop_oneof![Just(SignalOp::Add), Just(SignalOp::Set)]
    }

    proptest! {
        #[test]
        fn put_signal_round_trips(
            f in proptest::collection::vec(any::<u64>(), 7),
            op in signal_op(),
            data in proptest::collection::vec(any::<u8>(), 0..32),
        ) {
            let h = PutSignal {
                uuid: f[0],
                sreq: f[1],
                key: f[2],
                addr: f[3],
                signal_key: f[4],
                signal_addr: f[5],
                op,
                value: f[6],
            };
            let mut b = vec![0u8; PUT_SIGNAL_HDR + data.len()];
            prop_assert_eq!(h.encode_into(&mut b), PUT_SIGNAL_HDR);
            b[PUT_SIGNAL_HDR..].copy_from_slice(&data);
            let (g, rest) = PutSignal::decode(&b).unwrap();
            prop_assert_eq!(g, h);
            prop_assert_eq!(rest, &data[..]);
            prop_assert!(PutSignal::decode(&b[..PUT_SIGNAL_HDR - 1]).is_err());
        }

        #[test]
        fn put_signal_refuses_unknown_ops(b in proptest::collection::vec(any::<u8>(), 64..80), op: u64) {
            let mut b = b;
            b[48..56].copy_from_slice(&op.to_le_bytes());
            prop_assert_eq!(PutSignal::decode(&b).is_ok(), op == 1 || op == 2);
        }
    }

    #[test]
    fn op_words_round_trip() {
        for op in [
            AtomicOp::Add,
            AtomicOp::And,
            AtomicOp::Or,
            AtomicOp::Xor,
            AtomicOp::Swap,
            AtomicOp::Cswap,
        ] {
            for size in [AtomicSize::B32, AtomicSize::B64] {
                for fetch in [false, true] {
                    assert_eq!(
                        parse_op_word(op_word(op, size, fetch)).unwrap(),
                        (op, size, fetch)
                    );
                }
            }
        }
        assert!(parse_op_word(7).is_err());
        assert!(parse_op_word(1 | 3 << 8).is_err());
        assert!(parse_op_word(1 | 8 << 8 | 1 << 20).is_err());
        for s in ucs::status::ALL {
            assert_eq!(field_status(status_field(s)).unwrap(), s);
        }
    }
}
