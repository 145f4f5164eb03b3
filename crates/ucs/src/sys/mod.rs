//! Operating-system services behind small safe wrappers.
//!
//! This module and the shared-memory ring in `uct` are where rucx's `unsafe` lives. Every
//! wrapper here turns an OS error into a [`crate::Status`] and owns what it creates: a
//! segment or descriptor is released by `Drop`, so an error path cannot leak it.

pub mod cma;
pub mod copy;
pub mod eventfd;
pub mod host;
pub mod mapping;
pub mod net;
pub mod pidfd;
pub mod poll;
pub mod shm;
pub mod timer;
pub mod udp_batch;

pub use eventfd::EventFd;
pub use mapping::Mapping;
pub use shm::{SegmentId, ShmSegment};
pub use timer::DeadlineTimer;
