//! Fuzz target: the packed remote key decoder.
//!
//! A key that decodes must encode back to the very same bytes, and decoding that encoding
//! must give the same key; a key that decodes never describes a range that wraps around
//! the address space.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uct::rkey::{PackedRkey, RkeyKind};

fuzz_target!(|data: &[u8]| {
    let Ok(key) = PackedRkey::decode(data) else {
        return;
    };
    let bytes = key.encode();
    assert_eq!(bytes, data, "packed rkey does not round-trip: {key:?}");
    assert_eq!(PackedRkey::decode(&bytes), Ok(key));
    assert!(key.pid != 0);
    assert!(key.base.checked_add(key.len).is_some());
    match key.kind {
        RkeyKind::Segment => assert!(key.fd >= 0 && key.reg == 0),
        RkeyKind::Wire => assert_eq!((key.fd, key.ino), (-1, 0)),
        RkeyKind::Local | RkeyKind::Cma => assert_eq!((key.fd, key.ino, key.reg), (-1, 0, 0)),
    }
});
