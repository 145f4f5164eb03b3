//! The panic boundary: every exported function runs its body through one of these, so a
//! panic (a bug of ours) becomes an error status for the caller instead of unwinding into
//! C, which would abort the process.

use crate::ffi::{ucs_status_ptr_t, ucs_status_t};
use std::panic::{catch_unwind, AssertUnwindSafe};
use ucs::{Result, Status};

/// The status a caller sees when a call panicked.
const PANIC_STATUS: Status = Status::IoError;

#[cold]
fn report(name: &str) {
    tracing::error!("rucx: internal error (panic) in {name}; returning an error status");
}

/// For functions that return `ucs_status_t`.
#[inline]
pub(crate) fn status(name: &str, f: impl FnOnce() -> Result<()>) -> ucs_status_t {
    // The body's `Result` is turned into the C value inside the guarded closure, so that
    // only that plain value crosses `catch_unwind` (its result goes through memory, and a
    // `Result` written field by field and read back whole stalls the load).
    let guarded = || match f() {
        Ok(()) => Status::Ok.code(),
        Err(s) => {
            failed(name, s);
            s.code()
        }
    };
    match catch_unwind(AssertUnwindSafe(guarded)) {
        Ok(c) => c,
        Err(_) => {
            report(name);
            PANIC_STATUS.code()
        }
    }
}

/// For functions that return `ucs_status_ptr_t`: the closure gives the pointer (a request,
/// or null for done), an error becomes `UCS_STATUS_PTR(error)`.
#[inline]
pub(crate) fn status_ptr(
    name: &str,
    f: impl FnOnce() -> Result<ucs_status_ptr_t>,
) -> ucs_status_ptr_t {
    // As in `status`: only the plain pointer crosses `catch_unwind`.
    let guarded = || to_ptr(name, f());
    match catch_unwind(AssertUnwindSafe(guarded)) {
        Ok(p) => p,
        Err(_) => {
            report(name);
            status_to_ptr(PANIC_STATUS)
        }
    }
}

/// For functions that return nothing.
#[inline]
pub(crate) fn void(name: &str, f: impl FnOnce() -> Result<()>) {
    let guarded = || {
        if let Err(s) = f() {
            failed(name, s);
        }
    };
    if catch_unwind(AssertUnwindSafe(guarded)).is_err() {
        report(name);
    }
}

/// The C value of a status pointer's `Result`: the pointer, or the error as a status
/// pointer (logged). [`status_ptr`] uses it inside its guard, and the plain hot paths on
/// their slow ends.
#[inline(always)]
pub(crate) fn to_ptr(name: &str, r: Result<ucs_status_ptr_t>) -> ucs_status_ptr_t {
    match r {
        Ok(p) => p,
        Err(s) => {
            failed(name, s);
            status_to_ptr(s)
        }
    }
}

/// Logs a call that failed with `s`. Out of line, so that the guarded call's own code
/// does not carry the logging's stack frame.
#[cold]
#[inline(never)]
fn failed(name: &str, s: Status) {
    tracing::debug!("{name}: {s}");
}

/// For functions that return a plain value; `fallback` on error or panic.
#[inline]
pub(crate) fn value<T: Copy>(name: &str, fallback: T, f: impl FnOnce() -> Result<T>) -> T {
    // As in `status`: only the plain value crosses `catch_unwind`.
    let guarded = || match f() {
        Ok(v) => v,
        Err(s) => {
            failed(name, s);
            fallback
        }
    };
    match catch_unwind(AssertUnwindSafe(guarded)) {
        Ok(v) => v,
        Err(_) => {
            report(name);
            fallback
        }
    }
}

/// `UCS_STATUS_PTR(status)`.
#[inline]
pub(crate) fn status_to_ptr(s: Status) -> ucs_status_ptr_t {
    s.code() as isize as usize as ucs_status_ptr_t
}

/// The status of a `ucs_status_t` value received from C (an unknown value is an I/O error).
pub(crate) fn from_c(s: ucs_status_t) -> Status {
    Status::from_code(i32::from(s)).unwrap_or(Status::IoError)
}

/// The status a C status value means, keeping `Ok` apart from errors.
pub(crate) fn result_from_c(s: ucs_status_t) -> Result<()> {
    match from_c(s) {
        Status::Ok => Ok(()),
        e => Err(e),
    }
}
