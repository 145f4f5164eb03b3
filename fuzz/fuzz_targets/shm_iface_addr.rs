//! Fuzz target: the shm interface address and device address decoders.
//!
//! Any input must either be rejected with an error or decode to a value that encodes back
//! to exactly the same bytes (the formats have no slack: fixed length, reserved fields
//! zero), so a successful decode is also checked as a round trip.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uct::shm::address::{
    decode_device_addr, encode_device_addr, ShmIfaceAddr, DEVICE_ADDR_LEN, IFACE_ADDR_LEN,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(addr) = ShmIfaceAddr::decode(data) {
        assert_eq!(data.len(), IFACE_ADDR_LEN);
        assert_eq!(addr.encode(), data, "iface address does not round-trip");
        assert!(addr.seg.pid != 0 && addr.seg.fd >= 0 && addr.event_fd >= 0);
        assert!(addr.seg.len != 0);
    }
    if let Ok(host) = decode_device_addr(data) {
        assert_eq!(data.len(), DEVICE_ADDR_LEN);
        assert_eq!(
            encode_device_addr(host),
            data,
            "device address does not round-trip"
        );
    }
});
