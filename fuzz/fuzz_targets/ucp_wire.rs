//! Fuzz target: the protocol layer's (ucp) wire decoders — the worker address, every
//! message of `ucp::proto::header` (EagerOnly, EagerSync, EagerFirst, EagerMiddle, Rts,
//! Rtr, Ats, SyncAck, Wireup and the worker address it carries, RndvFin), the emulated-RMA
//! messages of `ucp::proto::rma` (Put, GetReq, GetRep, AmoReq, AmoRep, Ack, PutSignal, with
//! their status fields, atomic op word and signal op) and the packed remote key of `ucp::mem`. Every decoder gets the
//! whole input, as if it had arrived under its active-message id.
//!
//! No panic; whatever decodes encodes back to exactly the bytes it came from, or for a
//! message that carries data to exactly its header, the data being precisely the rest of the
//! input; no decoded length or slice reaches beyond the input; the formats with an exact
//! length refuse the input cut short by one byte and the input with a byte appended.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ucp::address::{tl_id, WorkerAddress, MAX_IFACES};
use ucp::mem::PackedKey;
use ucp::proto::header::{
    decode_ats, decode_eager_only, decode_rndv_fin, decode_sync_ack, decode_wireup, encode_ats,
    encode_rndv_fin, EagerFirst, EagerMiddle, EagerSync, Rtr, Rts, ATS_LEN, EAGER_FIRST_LEN,
    EAGER_MIDDLE_LEN, EAGER_ONLY_LEN, EAGER_SYNC_LEN, RNDV_FIN_LEN, RTR_FIXED_LEN, RTS_FIXED_LEN,
    SYNC_ACK_LEN, WIREUP_LEN,
};
use ucp::proto::rma::{
    decode, encode, field_status, op_word, parse_op_word, status_field, PutSignal, GET_REP_HDR,
    PUT_HDR, PUT_SIGNAL_HDR,
};

/// Worker address before the interface entries, and each entry before its address bytes.
const ADDR_FIXED: usize = 21;
const ADDR_ENTRY: usize = 6;
/// Packed remote key before the transport keys, and each transport key before its bytes.
/// The most header fields an emulated-RMA message has (PutSignal).
const RMA_MAX_FIELDS: usize = 8;

fuzz_target!(|data: &[u8]| {
    worker_address(data);
    tag_messages(data);
    rma_messages(data);
    packed_key(data);
});

/// `rest` is exactly the input after its first `hdr` bytes: the same memory, every byte of it.
fn is_tail(data: &[u8], hdr: usize, rest: &[u8], what: &str) {
    assert!(hdr <= data.len(), "{what}: header longer than the input");
    assert!(
        std::ptr::eq(rest, &data[hdr..]),
        "{what}: data is not the rest of the input"
    );
}

/// For a format whose length is exact and which decoded `data`: one byte less and one byte
/// more are both refused.
fn exact_length(data: &[u8], ok: impl Fn(&[u8]) -> bool, what: &str) {
    assert!(
        !ok(&data[..data.len() - 1]),
        "{what}: decoded with its last byte cut off"
    );
    let mut longer = data.to_vec();
    longer.push(0);
    assert!(!ok(&longer), "{what}: decoded with a trailing byte");
}

fn worker_address(data: &[u8]) {
    let Ok(a) = WorkerAddress::decode(data) else {
        return;
    };
    assert!((1..=MAX_IFACES).contains(&a.ifaces.len()));
    let mut used = ADDR_FIXED;
    for i in &a.ifaces {
        if let Some(t) = i.transport {
            assert_eq!(tl_id(t), i.tl_id, "transport does not match its id");
        }
        used += ADDR_ENTRY + i.addr.len();
    }
    assert_eq!(
        used,
        data.len(),
        "worker address lengths disagree with the input"
    );
    let bytes = a.encode();
    assert_eq!(bytes, data, "worker address does not round-trip: {a:?}");
    assert_eq!(WorkerAddress::decode(&bytes), Ok(a));
    exact_length(data, |b| WorkerAddress::decode(b).is_ok(), "worker address");
}

fn tag_messages(data: &[u8]) {
    if let Ok((tag, payload)) = decode_eager_only(data) {
        assert_eq!(tag.to_le_bytes(), data[..EAGER_ONLY_LEN]);
        is_tail(data, EAGER_ONLY_LEN, payload, "EagerOnly");
    }

    if let Ok((h, payload)) = EagerSync::decode(data) {
        let mut b = [0u8; EAGER_SYNC_LEN];
        assert_eq!(h.encode_into(&mut b), EAGER_SYNC_LEN);
        assert_eq!(b, data[..EAGER_SYNC_LEN], "EagerSync does not round-trip");
        is_tail(data, EAGER_SYNC_LEN, payload, "EagerSync");
    }

    if let Ok((h, payload)) = EagerFirst::decode(data) {
        let mut b = [0u8; EAGER_FIRST_LEN];
        assert_eq!(h.encode_into(&mut b), EAGER_FIRST_LEN);
        assert_eq!(b, data[..EAGER_FIRST_LEN], "EagerFirst does not round-trip");
        is_tail(data, EAGER_FIRST_LEN, payload, "EagerFirst");
        assert!(
            payload.len() as u64 <= h.total,
            "first fragment longer than the message"
        );
    }

    if let Ok((h, payload)) = EagerMiddle::decode(data) {
        let mut b = [0u8; EAGER_MIDDLE_LEN];
        assert_eq!(h.encode_into(&mut b), EAGER_MIDDLE_LEN);
        assert_eq!(
            b,
            data[..EAGER_MIDDLE_LEN],
            "EagerMiddle does not round-trip"
        );
        is_tail(data, EAGER_MIDDLE_LEN, payload, "EagerMiddle");
    }

    if let Ok(r) = Rts::decode(data) {
        assert_eq!(r.encoded_len(), data.len());
        is_tail(data, RTS_FIXED_LEN, r.rkey, "Rts rkey");
        let mut b = vec![0u8; r.encoded_len()];
        assert_eq!(r.encode_into(&mut b), b.len());
        assert_eq!(b, data, "Rts does not round-trip");
        exact_length(data, |b| Rts::decode(b).is_ok(), "Rts");
    }

    if let Ok(r) = Rtr::decode(data) {
        assert_eq!(r.encoded_len(), data.len());
        is_tail(data, RTR_FIXED_LEN, r.rkey, "Rtr rkey");
        let mut b = vec![0u8; r.encoded_len()];
        assert_eq!(r.encode_into(&mut b), b.len());
        assert_eq!(b, data, "Rtr does not round-trip");
        exact_length(data, |b| Rtr::decode(b).is_ok(), "Rtr");
    }

    if let Ok((sreq, status)) = decode_ats(data) {
        let mut b = [0u8; ATS_LEN];
        assert_eq!(encode_ats(&mut b, sreq, status), ATS_LEN);
        assert_eq!(b, data, "Ats does not round-trip");
        exact_length(data, |b| decode_ats(b).is_ok(), "Ats");
    }

    if let Ok(sreq) = decode_sync_ack(data) {
        assert_eq!(data.len(), SYNC_ACK_LEN);
        assert_eq!(sreq.to_le_bytes(), data, "SyncAck does not round-trip");
        exact_length(data, |b| decode_sync_ack(b).is_ok(), "SyncAck");
    }

    if let Ok((uuid, addr)) = decode_wireup(data) {
        assert_eq!(uuid.to_le_bytes(), data[..WIREUP_LEN]);
        is_tail(data, WIREUP_LEN, addr, "Wireup");
        // What the receiver does next with the sender's address.
        worker_address(addr);
    }

    if let Ok((rreq, uuid)) = decode_rndv_fin(data) {
        assert_eq!(
            encode_rndv_fin(rreq, uuid),
            data,
            "RndvFin does not round-trip"
        );
        assert_eq!(data.len(), RNDV_FIN_LEN);
        exact_length(data, |b| decode_rndv_fin(b).is_ok(), "RndvFin");
    }
}

/// The header of an emulated-RMA message with `N` fields: it decodes exactly when the input
/// holds them, encodes back to the same bytes, and the rest of the input is its data.
fn fields<const N: usize>(data: &[u8], what: &str) -> Option<[u64; N]> {
    let decoded = decode::<N>(data);
    assert_eq!(decoded.is_ok(), data.len() >= N * 8, "{what}: {N} fields");
    let (f, rest) = decoded.ok()?;
    let mut b = [0u8; RMA_MAX_FIELDS * 8];
    assert_eq!(encode(&f, &mut b), N * 8);
    assert_eq!(b[..N * 8], data[..N * 8], "{what} does not round-trip");
    is_tail(data, N * 8, rest, what);
    Some(f)
}

/// A status field that decodes encodes back to the same field.
fn status(v: u64, what: &str) {
    let Ok(s) = field_status(v) else {
        return;
    };
    assert_eq!(
        status_field(s),
        v,
        "{what}: status {s:?} does not round-trip from {v:#x}"
    );
}

fn rma_messages(data: &[u8]) {
    // Put: src uuid, request, key id, address | bytes to write.
    const _: () = assert!(PUT_HDR == 4 * 8);
    fields::<4>(data, "Put");
    // GetReq: src uuid, request, key id, address, length.
    fields::<5>(data, "GetReq");
    // GetRep: request, offset, status | bytes read.
    const _: () = assert!(GET_REP_HDR == 3 * 8);
    if let Some([_, _, st]) = fields::<3>(data, "GetRep") {
        status(st, "GetRep");
    }
    // AmoReq: src uuid, request, key id, address, value, compare, op word.
    if let Some([.., w]) = fields::<7>(data, "AmoReq") {
        if let Ok((op, size, fetch)) = parse_op_word(w) {
            assert_eq!(
                op_word(op, size, fetch),
                w,
                "op word {w:#x} does not round-trip"
            );
        }
    }
    // AmoRep: request, status, previous value.
    if let Some([_, st, _]) = fields::<3>(data, "AmoRep") {
        status(st, "AmoRep");
    }
    // Ack: request, status.
    if let Some([_, st]) = fields::<2>(data, "Ack") {
        status(st, "Ack");
    }
    // PutSignal: src uuid, request, key id, address, signal key id, signal address, signal
    // op, value | bytes to write. Its own decoder also refuses an unknown signal op.
    const _: () = assert!(PUT_SIGNAL_HDR == 8 * 8);
    let raw = fields::<8>(data, "PutSignal fields");
    if let Ok((h, rest)) = PutSignal::decode(data) {
        let [.., op, _] = raw.expect("a PutSignal shorter than its fields");
        assert!(op == 1 || op == 2, "PutSignal decoded signal op {op}");
        let mut b = [0u8; PUT_SIGNAL_HDR];
        assert_eq!(h.encode_into(&mut b), PUT_SIGNAL_HDR);
        assert_eq!(b, data[..PUT_SIGNAL_HDR], "PutSignal does not round-trip");
        is_tail(data, PUT_SIGNAL_HDR, rest, "PutSignal");
    } else if let Some([.., op, _]) = raw {
        assert!(
            op != 1 && op != 2,
            "PutSignal refused with a known signal op {op}"
        );
    }
}

fn packed_key(data: &[u8]) {
    let found = PackedKey::encoded_len(|i| data.get(i).copied().unwrap_or(0x80));
    let Ok(k) = PackedKey::decode(data) else {
        return;
    };
    assert_eq!(
        found,
        Ok(data.len()),
        "encoded_len disagrees with the decoder"
    );
    if let PackedKey::Region(r) = k {
        assert!(r.base.checked_add(r.len).is_some(), "key range wraps");
        assert_ne!(r.kind, uct::rkey::RkeyKind::Wire, "a wire key as a ucp key");
    } else {
        assert_eq!(data, [PackedKey::EMPTY]);
    }
    let bytes = k.encode();
    assert_eq!(bytes, data, "packed key does not round-trip: {k:?}");
    assert_eq!(PackedKey::decode(&bytes), Ok(k));
    exact_length(data, |b| PackedKey::decode(b).is_ok(), "packed key");
}
