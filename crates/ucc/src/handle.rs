//! The registry of live handles: every handle given to C is a `Box` pointer recorded here
//! with its kind, so that a null, freed or wrong-kind handle is refused with
//! `UCC_ERR_INVALID_PARAM` instead of being dereferenced.

use crate::ffi::{Status, UCC_ERR_INVALID_PARAM};
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    LibConfig,
    Lib,
    CtxConfig,
    Ctx,
    Team,
    Req,
    Ee,
    Event,
    Executor,
    ExecTask,
}

static LIVE: Mutex<Option<HashMap<usize, Kind>>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut HashMap<usize, Kind>) -> R) -> R {
    let mut g = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// Hands `b` to C as a handle of kind `k`.
pub fn register<T>(b: Box<T>, k: Kind) -> *mut T {
    let p = Box::into_raw(b);
    with(|m| m.insert(p as usize, k));
    p
}

/// Whether `p` is a live handle of kind `k`.
pub fn is<P>(p: *const P, k: Kind) -> bool {
    !p.is_null() && with(|m| m.get(&(p as usize)) == Some(&k))
}

/// The object behind a live handle of kind `k` (whose Rust type the caller names: each
/// kind is registered with one type only).
pub fn get<'a, T, P>(p: *mut P, k: Kind) -> Result<&'a T, Status> {
    if !is(p, k) {
        return Err(UCC_ERR_INVALID_PARAM);
    }
    // SAFETY: registered handles of kind `k` are live `Box<T>` pointers of the one type
    // registered for `k`; UCC's threading rules keep concurrent mutation out.
    Ok(unsafe { &*p.cast::<T>() })
}

/// As [`get`], mutable.
pub fn get_mut<'a, T, P>(p: *mut P, k: Kind) -> Result<&'a mut T, Status> {
    if !is(p, k) {
        return Err(UCC_ERR_INVALID_PARAM);
    }
    // SAFETY: as in `get`; the C caller does not use a handle from two threads at once.
    Ok(unsafe { &mut *p.cast::<T>() })
}

/// Unregisters a handle of kind `k` and gives its box back.
///
/// # Safety
/// `T` must be the type registered for `k`.
pub unsafe fn take<T, P>(p: *mut P, k: Kind) -> Option<Box<T>> {
    let ok = with(|m| {
        if m.get(&(p as usize)) == Some(&k) {
            m.remove(&(p as usize));
            true
        } else {
            false
        }
    });
    // SAFETY: registered pointers come from Box::into_raw of a `T` (the caller's promise
    // on `T`), and it is now unregistered, so this is the only owner.
    ok.then(|| unsafe { Box::from_raw(p.cast::<T>()) })
}
