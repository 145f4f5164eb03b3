//! Fuzz target: the udp transport's decoders (interface address, and the frame inside a
//! reliable message: an active message or a put piece) — bytes that come from any sender
//! on the network. No panic; whatever decodes encodes back to exactly the bytes it was
//! decoded from.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uct::udp::wire::{decode_addr, encode_addr, frame_header, parse, put_header, Frame};

fuzz_target!(|data: &[u8]| {
    if let Ok((a, seg)) = decode_addr(data) {
        assert_ne!(a.port(), 0, "port 0 decoded");
        assert_eq!(
            encode_addr(&a, seg),
            data,
            "udp address does not round-trip"
        );
    }
    match parse(data) {
        Ok(Frame::Am(id, body)) => {
            let mut m = frame_header(id).to_vec();
            m.extend_from_slice(body);
            assert_eq!(m, data, "active-message frame does not round-trip");
        }
        Ok(Frame::Put {
            reg,
            addr,
            data: body,
        }) => {
            let mut m = put_header(reg, addr).to_vec();
            m.extend_from_slice(body);
            assert_eq!(m, data, "put piece does not round-trip");
        }
        Err(_) => {}
    }
});
