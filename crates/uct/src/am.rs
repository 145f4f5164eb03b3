//! The active-message handler table of an interface: one optional handler per id.

use crate::types::{AmHandler, AM_ID_MAX};
use ucs::{Result, Status};

/// Handlers by active-message id. A message for an id without a handler is counted and
/// dropped (a peer's mistake must not stop the receiver).
#[derive(Default)]
pub struct AmTable {
    handlers: [Option<AmHandler>; AM_ID_MAX as usize],
    unhandled: u64,
}

impl AmTable {
    /// Installs (or replaces) the handler of `id`.
    pub fn set(&mut self, id: u8, h: AmHandler) -> Result<()> {
        let slot = self
            .handlers
            .get_mut(usize::from(id))
            .ok_or(Status::InvalidParam)?;
        *slot = Some(h);
        Ok(())
    }

    /// Removes the handler of `id`.
    pub fn clear(&mut self, id: u8) -> Result<()> {
        let slot = self
            .handlers
            .get_mut(usize::from(id))
            .ok_or(Status::InvalidParam)?;
        *slot = None;
        Ok(())
    }

    /// Delivers one message.
    #[inline]
    pub fn dispatch(&mut self, id: u8, data: &[u8]) {
        match self.handlers.get_mut(usize::from(id)) {
            Some(Some(h)) => h(data),
            _ => {
                self.unhandled += 1;
                tracing::debug!("active message with id {id} has no handler; dropped");
            }
        }
    }

    /// Messages dropped for lack of a handler.
    pub fn unhandled(&self) -> u64 {
        self.unhandled
    }
}
