//! Fuzz target: the packed remote key decoder (version 2: a header byte and varints).
//!
//! A key that decodes must encode back to the very same bytes, and decoding that encoding
//! must give the same key; its length must be what `encoded_len` finds from the bytes
//! alone (reading none past the key); a key that decodes never describes a range that
//! wraps around the address space.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uct::rkey::{PackedRkey, RkeyKind, MAX_PACKED_LEN, SEGMENT_ALIGN};

fuzz_target!(|data: &[u8]| {
    // The length finder never reads past the key it finds (bytes past the input read as
    // a continuation byte, so a short input can only make it read further, never stop).
    let found = PackedRkey::encoded_len(|i| data.get(i).copied().unwrap_or(0x80));
    let Ok(key) = PackedRkey::decode(data) else {
        return;
    };
    assert_eq!(
        found,
        Ok(data.len()),
        "encoded_len disagrees with the decoder"
    );
    assert!(data.len() <= MAX_PACKED_LEN);
    let bytes = key.encode();
    assert_eq!(bytes, data, "packed rkey does not round-trip: {key:?}");
    assert_eq!(PackedRkey::decode(&bytes), Ok(key));
    assert!(key.pid != Some(0));
    assert!(key.base.checked_add(key.len).is_some());
    match key.kind {
        RkeyKind::Segment => assert_eq!(key.base % SEGMENT_ALIGN, 0),
        RkeyKind::Wire => assert_eq!((key.fd, key.pid), (0, None)),
        RkeyKind::Memory => assert_eq!(key.fd, 0),
    }
});
