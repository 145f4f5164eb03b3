//! The index from a datagram's source address to its peer number, for the peer table
//! that owns the addresses.
//!
//! A map keyed by `SocketAddr` would store every address twice (in the table and as
//! the key, 32 bytes each, in every bucket, with half the buckets empty after growth).
//! Here a bucket holds only the 4-byte peer number; lookups compare against the table's
//! address, which the caller lends through `addr_of`. The hash is keyed per index (std's
//! `RandomState`), since the addresses come from the network.
//!
//! Invariant: every number in the index names a table entry whose address is unique in
//! the index (the owner inserts an address only after `find` missed it).

use hashbrown::HashTable;
use std::hash::BuildHasher;
use std::net::SocketAddr;

#[derive(Default)]
pub(super) struct AddrIndex {
    table: HashTable<u32>,
    hasher: std::hash::RandomState,
}

impl AddrIndex {
    /// The peer whose address is `a`.
    #[inline]
    pub fn find(&self, a: &SocketAddr, addr_of: impl Fn(u32) -> SocketAddr) -> Option<u32> {
        let h = self.hasher.hash_one(a);
        self.table.find(h, |&p| addr_of(p) == *a).copied()
    }

    /// Adds peer `p` at `a`, which `find` did not know.
    pub fn insert(&mut self, a: &SocketAddr, p: u32, addr_of: impl Fn(u32) -> SocketAddr) {
        let h = self.hasher.hash_one(a);
        let hasher = &self.hasher;
        self.table
            .insert_unique(h, p, |&q| hasher.hash_one(addr_of(q)));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_inserted_address_and_nothing_else() {
        let addrs: Vec<SocketAddr> = (0..5000u32)
            .map(|i| {
                if i % 2 == 0 {
                    SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 1000 + i as u16))
                } else {
                    SocketAddr::from(([0xfd00, 0, 0, 0, 0, 0, 0, i as u16], 7))
                }
            })
            .collect();
        let mut ix = AddrIndex::default();
        for (i, a) in addrs.iter().enumerate() {
            assert_eq!(ix.find(a, |p| addrs[p as usize]), None);
            ix.insert(a, i as u32, |p| addrs[p as usize]);
        }
        assert_eq!(ix.len(), addrs.len());
        for (i, a) in addrs.iter().enumerate() {
            assert_eq!(ix.find(a, |p| addrs[p as usize]), Some(i as u32));
        }
        let other = SocketAddr::from(([10, 0, 0, 0], 999));
        assert_eq!(ix.find(&other, |p| addrs[p as usize]), None);
    }
}
