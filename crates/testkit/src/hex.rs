//! Hex encoding for binary values (addresses, remote keys) in the line protocol.

/// Lower-case hex of `bytes`; the empty slice encodes as `-` so that a line never has an
/// empty word.
pub fn encode(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".into();
    }
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Decodes what [`encode`] produced; `None` for anything else.
pub fn decode(s: &str) -> Option<Vec<u8>> {
    if s == "-" {
        return Some(Vec::new());
    }
    if s.len() % 2 != 0 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for v in [vec![], vec![0u8], vec![0xab, 0x01, 0xff]] {
            assert_eq!(decode(&encode(&v)), Some(v));
        }
        assert_eq!(decode("abc"), None);
        assert_eq!(decode("zz"), None);
    }
}
