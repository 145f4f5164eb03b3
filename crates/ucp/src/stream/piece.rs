//! One arrived stream message's bytes, waiting for a receive: inline when short, so that
//! a stream of small messages takes no buffer and gives none back, else in a buffer of
//! the worker's pool. Reads as the bytes it holds (`Deref<Target = [u8]>`).

use crate::core::buf::copy_into;
use std::ops::Deref;
use ucs::BufPool;

/// Bytes kept inline at most: a piece is then as large as a pointer-sized buffer's
/// record plus this, and moving it in the endpoint's queue stays cheap.
pub(crate) const SMALL: usize = 40;

/// Inline bytes, aligned so that making and moving them takes whole-word stores.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct Inline([u8; SMALL]);

/// See the module documentation.
pub(crate) enum Piece {
    /// At most [`SMALL`] bytes, the first `len` of `bytes`.
    Small { len: u8, bytes: Inline },
    /// A buffer of the pool, all of it the piece's bytes.
    Buf(Vec<u8>),
}

impl Piece {
    /// A piece holding a copy of `data`.
    #[inline]
    pub(crate) fn new(bufs: &mut BufPool, data: &[u8]) -> Piece {
        if data.len() <= SMALL {
            let mut bytes = Inline([0u8; SMALL]);
            copy_into(&mut bytes.0, data);
            return Piece::Small {
                len: data.len() as u8,
                bytes,
            };
        }
        Piece::Buf(bufs.keep(data))
    }

    /// The piece is used up: its buffer, if it has one, goes back to the pool.
    #[inline]
    pub(crate) fn release(self, bufs: &mut BufPool) {
        if let Piece::Buf(v) = self {
            bufs.give(v);
        }
    }

    /// The piece's bytes as a vector of their own.
    pub(crate) fn into_vec(self) -> Vec<u8> {
        match self {
            Piece::Small { len, bytes } => bytes.0[..usize::from(len)].to_vec(),
            Piece::Buf(v) => v,
        }
    }
}

impl Deref for Piece {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Piece::Small { len, bytes } => &bytes.0[..usize::from(*len)],
            Piece::Buf(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_pieces_hold_their_bytes() {
        let mut bufs = BufPool::new(4096, 4, 1 << 16);
        for len in [0, 1, SMALL - 1, SMALL, SMALL + 1, 4096, 5000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let p = Piece::new(&mut bufs, &data);
            assert_eq!(&*p, &data[..], "{len}");
            assert_eq!(matches!(p, Piece::Small { .. }), len <= SMALL);
            if len % 2 == 0 {
                p.release(&mut bufs);
            } else {
                assert_eq!(p.into_vec(), data);
            }
        }
        // The large pieces' buffers came back (the one beyond the pool's size did not).
        assert_eq!(bufs.spare_count(), 1);
    }
}
