//! Opaque handles: what a `ucp_context_h`, `ucp_worker_h`, `ucp_ep_h`, `ucp_mem_h`,
//! `ucp_rkey_h`, `ucp_config_t *` or generic datatype points to.
//!
//! A handle is a small heap cell: a tag word naming its kind, a generation, and the value.
//! The cells are never returned to the allocator: destroying a handle marks the tag dead,
//! drops the value and queues the cell on a free list of its kind. So a pointer that was
//! once a handle stays readable forever, and every check (null, misaligned, wrong kind,
//! already destroyed) is a load and a compare, never a crash. A dead cell is reused only
//! after [`QUARANTINE`] more cells of its kind died, so a destroyed handle keeps being
//! refused for a long while rather than silently naming the next object; a reused cell
//! gets a new generation, and objects that refer to a handle (a request to its worker, an
//! endpoint to its worker) remember the generation and notice the reuse.
//!
//! Pointers that were never handles of ours cannot be told apart from handles without a
//! registry lookup on every call; the C API leaves them undefined and so do we.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use ucs::{Result, Status};

const DEAD: u64 = 0x6465_6164_6465_6164;

/// Dead cells of a kind that are kept out of reuse (first in, first out).
pub(crate) const QUARANTINE: usize = 256;

/// The kinds of handle, each with its tag and its free list.
pub(crate) trait Kind: Sized + 'static {
    const TAG: u64;
    fn free_list() -> &'static Mutex<VecDeque<usize>>;
}

macro_rules! handle_kind {
    ($t:ty, $tag:expr) => {
        impl $crate::handle::Kind for $t {
            const TAG: u64 = $tag;
            fn free_list() -> &'static std::sync::Mutex<std::collections::VecDeque<usize>> {
                static FREE: std::sync::Mutex<std::collections::VecDeque<usize>> =
                    std::sync::Mutex::new(std::collections::VecDeque::new());
                &FREE
            }
        }
    };
}
pub(crate) use handle_kind;

/// A handle cell. `#[repr(C)]` so the tag is the first word of every kind.
#[repr(C)]
pub(crate) struct Handle<T> {
    tag: AtomicU64,
    gen: AtomicU64,
    val: UnsafeCell<Option<T>>,
}

// SAFETY: the value is reached through shared references only (`get`); the kinds that are
// used from several threads (contexts, workers in thread mode multi) synchronise
// internally. `destroy` takes the value out, which the C API allows only once no other
// thread uses the handle.
unsafe impl<T: Send> Sync for Handle<T> {}
// SAFETY: as above; a handle owns its value.
unsafe impl<T: Send> Send for Handle<T> {}

static GEN: AtomicU64 = AtomicU64::new(1);

impl<T: Kind> Handle<T> {
    /// Makes a handle holding `v`; returns it with its generation.
    pub(crate) fn alloc(v: T) -> (*mut Handle<T>, u64) {
        let gen = GEN.fetch_add(1, Ordering::Relaxed);
        let reused = {
            let mut free = T::free_list().lock().unwrap_or_else(|p| p.into_inner());
            if free.len() > QUARANTINE {
                free.pop_front()
            } else {
                None
            }
        };
        let p = match reused {
            Some(a) => {
                let p = a as *mut Handle<T>;
                // SAFETY: cells on the free list are leaked `Handle<T>` boxes of this kind,
                // dead and holding no value; only this thread took this one off the list.
                unsafe { *(*p).val.get() = Some(v) };
                p
            }
            None => Box::into_raw(Box::new(Handle {
                tag: AtomicU64::new(DEAD),
                gen: AtomicU64::new(0),
                val: UnsafeCell::new(Some(v)),
            })),
        };
        // SAFETY: `p` is a valid cell (just made or reused above).
        let h = unsafe { &*p };
        h.gen.store(gen, Ordering::Relaxed);
        h.tag.store(T::TAG, Ordering::Release);
        (p, gen)
    }

    /// The value of a live handle of this kind.
    ///
    /// # Safety
    /// `p` must be null or point to memory that was a handle of ours at some time (any
    /// kind); the value must not be destroyed while the reference is used.
    #[inline(always)]
    pub(crate) unsafe fn get<'a>(p: *const Handle<T>) -> Result<&'a T> {
        // SAFETY: forwarded contract.
        unsafe { Self::slot(p) }?
            .as_ref()
            .ok_or(Status::InvalidParam)
    }

    /// The value slot of a handle whose pointer and tag check out, `None` inside when
    /// its value is gone: for a hot path that tests the value's presence together with a
    /// condition of its own (where the value's niche allows, one compare for both).
    ///
    /// # Safety
    /// As for [`Handle::get`].
    #[inline(always)]
    pub(crate) unsafe fn slot<'a>(p: *const Handle<T>) -> Result<&'a Option<T>> {
        if p.is_null() || (p as usize) % std::mem::align_of::<Handle<T>>() != 0 {
            return Err(Status::InvalidParam);
        }
        // SAFETY: by the contract, `p` is (or was) a handle cell, and cells are never
        // freed; every kind starts with the tag word.
        let h = unsafe { &*p };
        if h.tag.load(Ordering::Acquire) != T::TAG {
            return Err(Status::InvalidParam);
        }
        // SAFETY: the tag says the cell holds (or held) a `T`; the value is only replaced
        // by `destroy`, which the contract excludes while this reference lives.
        Ok(unsafe { &*h.val.get() })
    }

    /// The value slot of a handle known to be live by an invariant of its owner rather
    /// than by checking the caller's pointer (the worker of a live endpoint,
    /// [`crate::core::ep_slot`]).
    ///
    /// # Safety
    /// `p` must point to a live handle of this kind, of generation `gen` (checked in
    /// debug builds only), which is not destroyed while the reference is used.
    #[inline(always)]
    pub(crate) unsafe fn slot_live<'a>(p: *const Handle<T>, gen: u64) -> &'a Option<T> {
        // SAFETY: by the contract, `p` is a live cell of this kind.
        let h = unsafe { &*p };
        debug_assert_eq!(h.gen.load(Ordering::Relaxed), gen, "a stale handle");
        let _ = gen;
        // SAFETY: as above; only `destroy` replaces the value, which the contract excludes.
        unsafe { &*h.val.get() }
    }

    /// Like [`Handle::get`], and also checks the generation.
    ///
    /// # Safety
    /// As for [`Handle::get`].
    #[inline(always)]
    pub(crate) unsafe fn get_gen<'a>(p: *const Handle<T>, gen: u64) -> Result<&'a T> {
        // SAFETY: forwarded contract.
        let v = unsafe { Self::get(p)? };
        // SAFETY: `get` checked that `p` is a live cell.
        if unsafe { &*p }.gen.load(Ordering::Relaxed) != gen {
            return Err(Status::InvalidParam);
        }
        Ok(v)
    }

    /// Destroys the handle and returns its value; the cell goes to the free list.
    ///
    /// # Safety
    /// As for [`Handle::get`], and no reference from `get` may be alive.
    pub(crate) unsafe fn destroy(p: *mut Handle<T>) -> Result<T> {
        // SAFETY: forwarded contract (validates `p`).
        unsafe { Self::get(p)? };
        // SAFETY: `p` is a live cell of this kind.
        let h = unsafe { &*p };
        if h.tag
            .compare_exchange(T::TAG, DEAD, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Status::InvalidParam);
        }
        // SAFETY: we won the race to kill the handle; by the contract no reference to the
        // value is alive.
        let v = unsafe { (*h.val.get()).take() }.ok_or(Status::InvalidParam)?;
        T::free_list()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(p as usize);
        Ok(v)
    }
}
