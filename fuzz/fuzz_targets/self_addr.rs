//! Fuzz target: the self transport's interface address decoder. A successful decode must
//! round-trip to the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uct::self_tl::{SelfAddr, IFACE_ADDR_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(addr) = SelfAddr::decode(data) {
        assert_eq!(data.len(), IFACE_ADDR_LEN);
        assert_eq!(addr.encode(), data, "self address does not round-trip");
    }
});
