//! A small slab of endpoints indexed by [`EpId`]: ids are reused after removal, a stale or
//! unknown id finds nothing (an error for the caller, never a panic).

use crate::types::EpId;
use ucs::{Result, Status};

pub struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    pub fn insert(&mut self, v: T) -> EpId {
        if let Some(i) = self.free.pop() {
            self.items[i as usize] = Some(v);
            EpId(i)
        } else {
            self.items.push(Some(v));
            EpId((self.items.len() - 1) as u32)
        }
    }

    pub fn remove(&mut self, id: EpId) -> Result<T> {
        let v = self
            .items
            .get_mut(id.0 as usize)
            .and_then(Option::take)
            .ok_or(Status::InvalidParam)?;
        self.free.push(id.0);
        Ok(v)
    }

    #[inline]
    pub fn get_mut(&mut self, id: EpId) -> Result<&mut T> {
        self.items
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(Status::InvalidParam)
    }

    #[inline]
    pub fn get(&self, id: EpId) -> Result<&T> {
        self.items
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(Status::InvalidParam)
    }

    /// The live entries with their ids.
    #[cfg(feature = "fabric")]
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (EpId, &mut T)> {
        self.items
            .iter_mut()
            .enumerate()
            .filter_map(|(i, v)| v.as_mut().map(|v| (EpId(i as u32), v)))
    }

    pub fn len(&self) -> usize {
        self.items.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_and_stale_ids() {
        let mut s = Slab::default();
        let a = s.insert(1);
        let b = s.insert(2);
        assert_eq!(s.remove(a), Ok(1));
        assert_eq!(s.remove(a), Err(Status::InvalidParam));
        assert_eq!(s.get(EpId(99)).err(), Some(Status::InvalidParam));
        let c = s.insert(3);
        assert_eq!(c, a);
        assert_eq!(*s.get(b).unwrap(), 2);
        assert_eq!(s.len(), 2);
    }
}
