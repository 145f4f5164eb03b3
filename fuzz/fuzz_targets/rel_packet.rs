//! Fuzz target: what the udp transport decodes from a datagram. The reliability packet
//! (`uct_rel::packet::Packet::decode`): whatever decodes re-encodes to exactly the bytes it
//! came from; a data packet's payload goes through the udp frame decoder
//! (`uct::udp::wire::parse`), which must split it losslessly and only with a valid
//! am id. The same bytes also feed the frame decoder and the udp interface address
//! decoder directly, with the same round-trip checks.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uct::udp::wire;
use uct_rel::packet::{Body, Packet, HEADER_LEN};

fn check_frame(m: &[u8]) {
    let (mut again, rest) = match wire::parse(m) {
        Ok(wire::Frame::Am(id, rest)) => {
            assert!(id < uct::AM_ID_MAX);
            (wire::frame_header(id).to_vec(), rest)
        }
        Ok(wire::Frame::Put { reg, addr, data }) => (wire::put_header(reg, addr).to_vec(), data),
        Err(_) => return,
    };
    again.extend_from_slice(rest);
    assert_eq!(again, m, "udp frame does not round-trip");
}

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Packet::decode(data) {
        assert_eq!(p.encoded_len(), data.len());
        let mut buf = vec![0u8; p.encoded_len()];
        assert_eq!(p.encode_into(&mut buf), Ok(data.len()));
        assert_eq!(buf, data, "packet does not round-trip");
        assert_eq!(Packet::decode(&buf), Ok(p));
        // A smaller buffer is refused, not overrun.
        assert!(p.encode_into(&mut buf[..data.len() - 1]).is_err());
        match p.body {
            Body::Data { payload, .. } => {
                assert_eq!(payload, &data[HEADER_LEN..]);
                check_frame(payload);
            }
            Body::Ack { .. } => assert_eq!(data.len(), HEADER_LEN),
            Body::Nak { sack } => assert!(sack.len() <= uct_rel::packet::MAX_SACK_BYTES),
        }
    }
    check_frame(data);
    if let Ok((addr, seg)) = wire::decode_addr(data) {
        assert_ne!(addr.port(), 0);
        assert_eq!(
            wire::encode_addr(&addr, seg),
            data,
            "udp address does not round-trip"
        );
    }
});
