//! Small active messages held inline while they wait for their C handler.
//!
//! An eager message whose data and user header together fit [`AM_INLINE`] bytes travels
//! from the Rust handler to the dispatch inside its event, and its C handler reads it
//! from the dispatching thread's stack: no pool buffer is taken or given back, nothing is
//! registered as "the message whose handler runs now", and the worker is not entered a
//! second time after the handler returns.
//!
//! The price is the one UCX sets for data that lives in a transport's own inline slot:
//! such a message comes without `UCP_AM_RECV_ATTR_FLAG_DATA` (older handlers: without
//! `UCP_CB_PARAM_FLAG_DATA`), so its handler may not keep it by returning
//! `UCS_INPROGRESS` (the API allows that return only with one of those flags) and copies
//! what it needs. Larger messages keep the flag and the pool buffer.
//!
//! Invariant: `len <= AM_INLINE`, and the first `len` bytes are the data, then the
//! header.

/// Data plus user header bytes a message may have to be held inline.
pub(crate) const AM_INLINE: usize = 56;

/// The data, then the user header, of a small eager message. Aligned to 8 bytes, so that
/// a handler that reads its data as words (as C programs do) reads aligned ones.
#[repr(C, align(8))]
pub(crate) struct SmallAm {
    bytes: [u8; AM_INLINE],
    len: u8,
}

impl SmallAm {
    /// The message `data` with `header`, or `None` when the two do not fit inline.
    #[inline]
    pub(crate) fn new(data: &[u8], header: &[u8]) -> Option<SmallAm> {
        let len = data.len().checked_add(header.len())?;
        if len > AM_INLINE {
            return None;
        }
        let mut s = SmallAm {
            bytes: [0; AM_INLINE],
            len: len as u8,
        };
        put(&mut s.bytes[..data.len()], data);
        put(&mut s.bytes[data.len()..len], header);
        Some(s)
    }

    /// Data and header bytes held.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Where the held bytes start (the data; the header follows it), writable as a C
    /// handler's `data` is.
    #[inline]
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.bytes.as_mut_ptr()
    }

    /// The held bytes (for tests and checks).
    #[cfg(test)]
    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len()]
    }
}

/// Copies `src` into `dst` (of the same length), with no call to `memcpy` for the
/// usual lengths of a small message's parts (none, and one word).
#[inline(always)]
fn put(dst: &mut [u8], src: &[u8]) {
    match src.len() {
        0 => {}
        8 => dst[..8].copy_from_slice(&src[..8]),
        _ => dst.copy_from_slice(src),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_data_then_header_up_to_the_limit() {
        for total in 0..=AM_INLINE {
            for data_len in 0..=total {
                let data: Vec<u8> = (0..data_len).map(|i| i as u8).collect();
                let header: Vec<u8> = (0..total - data_len).map(|i| 200 - i as u8).collect();
                let s = SmallAm::new(&data, &header).expect("fits");
                assert_eq!(s.len(), total);
                assert_eq!(&s.bytes()[..data_len], &data[..]);
                assert_eq!(&s.bytes()[data_len..], &header[..]);
            }
        }
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let big = [7u8; AM_INLINE + 1];
        assert!(SmallAm::new(&big, &[]).is_none());
        assert!(SmallAm::new(&big[..AM_INLINE], &[1]).is_none());
        assert!(SmallAm::new(&[], &big).is_none());
    }

    #[test]
    fn data_is_word_aligned() {
        let mut s = SmallAm::new(&[1; 8], &[]).expect("fits");
        assert_eq!(s.as_mut_ptr() as usize % 8, 0);
    }
}
