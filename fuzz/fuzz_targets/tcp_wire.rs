//! Fuzz target: the tcp transport's decoders (interface address, connection handshake,
//! frame header) and the sockaddr connection manager's message decoder — all bytes that
//! come straight from a socket. No panic; whatever decodes encodes back to exactly the
//! bytes it was decoded from; a decoder that asks for more bytes does so only while the
//! message can still be complete, and an error is never undone by more bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uct::cm;
use uct::tcp::wire::{
    decode_addr, decode_handshake, decode_put_header, encode_addr, encode_handshake, frame_header,
    parse_frame, put_header, FRAME_HDR, HANDSHAKE_FIXED, PUT_HDR, PUT_ID,
};

/// Longest address a handshake may carry.
const MAX_HANDSHAKE_ADDR: usize = 64;
/// The connection manager's fixed header.
const CM_HDR: usize = 12;

fuzz_target!(|data: &[u8]| {
    // Interface address: the whole input, exact round trip.
    if let Ok(a) = decode_addr(data) {
        assert_ne!(a.port(), 0, "port 0 decoded");
        assert_eq!(encode_addr(&a), data, "tcp address does not round-trip");
    }

    // Handshake at the start of the input.
    match decode_handshake(data) {
        Ok(Some((addr, used))) => {
            assert_eq!(used, HANDSHAKE_FIXED + addr.len());
            assert!(used <= data.len());
            assert!(
                decode_addr(&addr).is_ok(),
                "handshake carried a bad address"
            );
            assert_eq!(
                encode_handshake(&addr),
                &data[..used],
                "handshake does not round-trip"
            );
            for cut in [0, used / 2, used - 1] {
                assert!(
                    matches!(decode_handshake(&data[..cut]), Ok(None)),
                    "a prefix of a good handshake was not 'need more'"
                );
            }
        }
        Ok(None) => assert!(
            data.len() < HANDSHAKE_FIXED + MAX_HANDSHAKE_ADDR,
            "asked for more bytes after {} of them",
            data.len()
        ),
        Err(_) => {
            let mut longer = data.to_vec();
            longer.extend_from_slice(&[0; 8]);
            assert!(
                decode_handshake(&longer).is_err(),
                "more bytes undid an error"
            );
        }
    }

    // Frame header at the start of the input, for a few segment and put sizes.
    for max in [0usize, 255, 65_536, u32::MAX as usize] {
        if let Ok((id, len)) = parse_frame(data, max, max) {
            if id == PUT_ID {
                assert!(len >= PUT_HDR && len - PUT_HDR <= max);
                if let Ok((addr, reg)) = decode_put_header(&data[FRAME_HDR..]) {
                    assert_eq!(
                        put_header(addr, reg, len - PUT_HDR)[..],
                        data[..FRAME_HDR + PUT_HDR],
                        "put header does not round-trip"
                    );
                }
            } else {
                assert!(id < uct::AM_ID_MAX && len <= max);
            }
            assert_eq!(
                frame_header(id, len)[..],
                data[..FRAME_HDR],
                "frame header does not round-trip"
            );
        }
    }

    // Connection manager message at the start of the input.
    match cm::decode(data) {
        Ok(Some((verdict, blob))) => {
            assert!(verdict <= 1 && blob.len() <= cm::MAX_BLOB);
            let again = cm::encode(verdict, &blob);
            assert_eq!(
                again,
                &data[..again.len()],
                "cm message does not round-trip"
            );
        }
        Ok(None) => assert!(data.len() < CM_HDR + cm::MAX_BLOB),
        Err(_) => {
            let mut longer = data.to_vec();
            longer.extend_from_slice(&[0; 16]);
            assert!(cm::decode(&longer).is_err(), "more bytes undid a cm error");
        }
    }
});
