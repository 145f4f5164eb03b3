//! libucs utilities that programs built against UCX import beyond the UCP API
//! (`ucx_perftest` and `io_demo` among them): clock frequency, CPU and affinity queries,
//! string helpers, an async context that rucx does not need, and a few stubs that UCX
//! itself exports as "do nothing" functions.
//!
//! The functions with variable argument lists (`ucs_snprintf_safe`,
//! `ucs_string_buffer_appendf`, `ucs_log_dispatch`, `ucs_fatal_error_format`) and the
//! data objects programs read from inline code (`ucs_global_opts`,
//! `ucs_arch_x86_enable_rdtsc`) are in `csrc/ucs_varargs.c`. What each does is in
//! docs/c-abi.md, "UCS utilities".

use crate::ffi::ucs_status_t;
use std::ffi::{c_char, c_int, c_long, c_uint, c_void};
use std::sync::OnceLock;
use ucs::Status;

extern "C" {
    /// The address of `ucs_arch_x86_enable_rdtsc` as the dynamic linker resolved it (the
    /// program's copy if it made one).
    fn rucx_ucs_arch_x86_enable_rdtsc_ptr() -> *mut c_int;
}

/// `ucs_ternary_auto_value_t` values.
const UCS_NO: c_int = 0;
const UCS_YES: c_int = 1;

/// What the clock source of programs' `ucs_get_time()` is, decided once.
#[derive(Clone, Copy, Debug)]
struct ClockChoice {
    /// Read the TSC (`UCS_YES`) or fall back to `gettimeofday` (`UCS_NO`, microseconds).
    rdtsc: bool,
    /// Ticks per second of the chosen clock.
    hz: f64,
}

static CLOCK: OnceLock<ClockChoice> = OnceLock::new();

/// Whether /proc/cpuinfo says the TSC runs at a constant rate that does not stop in idle
/// states (then it is a usable wall clock).
fn tsc_is_invariant() -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    let Some(flags) = info.lines().find(|l| l.starts_with("flags")) else {
        return false;
    };
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    has("constant_tsc") && has("nonstop_tsc")
}

#[cfg(target_arch = "x86_64")]
fn read_tsc() -> u64 {
    #[allow(unused_unsafe)]
    // SAFETY: RDTSC has no memory effects; it is available on every x86-64 CPU.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

/// Measures the TSC against the monotonic clock over about 20 ms. It sleeps rather than
/// spins meanwhile: a few microseconds of wakeup delay are noise at that span, and the
/// process neither burns the CPU nor runs a number of instructions that depends on how
/// fast it runs (under callgrind, that made every count of a program that starts here
/// vary by a hundred instructions per iteration).
#[cfg(target_arch = "x86_64")]
fn measure_tsc_hz() -> Option<f64> {
    let span = std::time::Duration::from_millis(20);
    let t0 = std::time::Instant::now();
    let c0 = read_tsc();
    std::thread::sleep(span);
    let c1 = read_tsc();
    let secs = t0.elapsed().as_secs_f64();
    let hz = c1.wrapping_sub(c0) as f64 / secs;
    // Anything outside 100 MHz .. 20 GHz is a broken measurement.
    (1.0e8..2.0e10).contains(&hz).then_some(hz)
}

#[cfg(not(target_arch = "x86_64"))]
fn measure_tsc_hz() -> Option<f64> {
    None
}

fn clock_choice() -> ClockChoice {
    *CLOCK.get_or_init(|| {
        let tsc = if cfg!(target_arch = "x86_64") && tsc_is_invariant() {
            measure_tsc_hz()
        } else {
            None
        };
        let choice = match tsc {
            Some(hz) => ClockChoice { rdtsc: true, hz },
            None => ClockChoice {
                rdtsc: false,
                hz: 1.0e6,
            },
        };
        // SAFETY: the C accessor returns the address of an int object that lives for the
        // whole process; writes of an aligned int are the only access made here, and the
        // value only ever moves from "try" to the same final answer.
        unsafe {
            *rucx_ucs_arch_x86_enable_rdtsc_ptr() = if choice.rdtsc { UCS_YES } else { UCS_NO }
        };
        tracing::debug!(
            "ucs clock for programs: {} at {:.0} Hz",
            if choice.rdtsc {
                "rdtsc"
            } else {
                "gettimeofday"
            },
            choice.hz
        );
        choice
    })
}

/// `ucs_x86_init_tsc_freq`: decides whether programs' inline `ucs_get_time()` reads the
/// TSC, and sets `ucs_arch_x86_enable_rdtsc` to yes or no accordingly.
#[no_mangle]
pub extern "C" fn ucs_x86_init_tsc_freq() {
    crate::guard::void("ucs_x86_init_tsc_freq", || {
        clock_choice();
        Ok(())
    })
}

/// `ucs_get_cpu_clocks_per_sec`: ticks per second of the clock programs' `ucs_get_time()`
/// reads (the TSC frequency, or 1e6 for the `gettimeofday` fallback).
#[no_mangle]
pub extern "C" fn ucs_get_cpu_clocks_per_sec() -> f64 {
    crate::guard::value(
        "ucs_get_cpu_clocks_per_sec",
        1.0e6,
        || Ok(clock_choice().hz),
    )
}

/// `ucs_get_page_size`.
#[no_mangle]
pub extern "C" fn ucs_get_page_size() -> usize {
    crate::guard::value(
        "ucs_get_page_size",
        4096,
        || Ok(ucs::sys::host::page_size()),
    )
}

/// `ucs_sys_get_num_cpus`: CPUs online.
#[no_mangle]
pub extern "C" fn ucs_sys_get_num_cpus() -> c_long {
    // SAFETY: sysconf only reads system information.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n
    } else {
        1
    }
}

/// `ucs_sys_getaffinity(ucs_sys_cpuset_t *)`: the calling thread's CPU set (glibc's
/// `cpu_set_t`); 0 on success, -1 on failure.
#[no_mangle]
pub unsafe extern "C" fn ucs_sys_getaffinity(cpuset: *mut libc::cpu_set_t) -> c_int {
    if cpuset.is_null() {
        return -1;
    }
    // SAFETY: the caller's cpu_set_t; the kernel writes at most its size.
    unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), cpuset) }
}

/// `ucs_sys_setaffinity(ucs_sys_cpuset_t *)`: binds the calling thread; 0 or -1.
#[no_mangle]
pub unsafe extern "C" fn ucs_sys_setaffinity(cpuset: *mut libc::cpu_set_t) -> c_int {
    if cpuset.is_null() {
        return -1;
    }
    // SAFETY: the caller's cpu_set_t, only read.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), cpuset) }
}

/// `ucs_close_fd(int *)`: closes a descriptor that is not -1 and sets it to -1.
#[no_mangle]
pub unsafe extern "C" fn ucs_close_fd(fd_p: *mut c_int) {
    crate::guard::void("ucs_close_fd", || {
        if fd_p.is_null() {
            return Ok(());
        }
        // SAFETY: the caller's int.
        let fd = unsafe { *fd_p };
        if fd == -1 {
            return Ok(());
        }
        // SAFETY: the caller hands over ownership of `fd`.
        if unsafe { libc::close(fd) } != 0 {
            tracing::warn!("ucs_close_fd({fd}): {}", std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        unsafe { *fd_p = -1 };
        Ok(())
    })
}

/// `ucs_socket_setopt`: `setsockopt`, with errors as `UCS_ERR_IO_ERROR`.
#[no_mangle]
pub unsafe extern "C" fn ucs_socket_setopt(
    fd: c_int,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: libc::socklen_t,
) -> ucs_status_t {
    crate::guard::status("ucs_socket_setopt", || {
        // SAFETY: the caller's option value of `optlen` bytes.
        if unsafe { libc::setsockopt(fd, level, optname, optval, optlen) } == 0 {
            return Ok(());
        }
        tracing::error!(
            "setsockopt(fd={fd} level={level} optname={optname}): {}",
            std::io::Error::last_os_error()
        );
        Err(Status::IoError)
    })
}

/// `ucs_strncpy_zero`: copies at most `max - 1` bytes of `src` and always terminates
/// `dest` (when `max` > 0).
#[no_mangle]
pub unsafe extern "C" fn ucs_strncpy_zero(dest: *mut c_char, src: *const c_char, max: usize) {
    if dest.is_null() || max == 0 {
        return;
    }
    let mut n = 0;
    if !src.is_null() {
        // SAFETY: `src` is a C string; at most `max - 1` of its bytes are read, and
        // `dest` has room for `max` bytes.
        unsafe {
            while n < max - 1 && *src.add(n) != 0 {
                *dest.add(n) = *src.add(n);
                n += 1;
            }
        }
    }
    // SAFETY: n < max.
    unsafe { *dest.add(n) = 0 };
}

/// `ucs_string_buffer_t` (an array of char: buffer, length, capacity with bit 0 marking
/// fixed storage).
#[repr(C)]
pub struct StringBuffer {
    buffer: *mut c_char,
    length: usize,
    capacity: usize,
}

const _: () = assert!(std::mem::size_of::<StringBuffer>() == 24);

/// `ucs_string_buffer_cstr`: the text; "" for a buffer with no text. An empty buffer's
/// storage is not read: a fixed buffer on the stack (`UCS_STRING_BUFFER_ONSTACK`) starts
/// as uninitialised memory, with no terminator until something is appended.
#[no_mangle]
pub unsafe extern "C" fn ucs_string_buffer_cstr(strb: *const StringBuffer) -> *const c_char {
    // SAFETY: the caller's string buffer.
    match unsafe { strb.as_ref() } {
        Some(s) if !s.buffer.is_null() && s.length > 0 => s.buffer,
        _ => c"".as_ptr(),
    }
}

/// `ucs_string_buffer_rtrim`: removes trailing characters found in `charset`, or
/// whitespace when `charset` is NULL.
#[no_mangle]
pub unsafe extern "C" fn ucs_string_buffer_rtrim(strb: *mut StringBuffer, charset: *const c_char) {
    // SAFETY: the caller's string buffer.
    let Some(s) = (unsafe { strb.as_mut() }) else {
        return;
    };
    if s.buffer.is_null() {
        return;
    }
    let set: &[u8] = if charset.is_null() {
        b" \t\n\r\x0b\x0c"
    } else {
        // SAFETY: a C string of the caller's.
        unsafe { std::ffi::CStr::from_ptr(charset) }.to_bytes()
    };
    // SAFETY: `length` bytes of `buffer` are the text, followed by its terminator.
    unsafe {
        while s.length > 0 && set.contains(&(*s.buffer.add(s.length - 1) as u8)) {
            s.length -= 1;
        }
        *s.buffer.add(s.length) = 0;
    }
}

/// `ucs_async_context_t`: UCX 1.13's layout begins with a 40-byte union (a recursive lock
/// or signal state), then the mode and the number of handlers. rucx writes only these
/// 48 bytes.
#[repr(C)]
pub struct AsyncContextHead {
    lock: [u8; 40],
    mode: c_int,
    num_handlers: u32,
}

/// `ucs_async_context_init(async, mode)`: rucx has no async thread or signal handler and
/// registers nothing on the context; it records the mode with no handlers and returns
/// `UCS_OK`, so the caller may pass the context along and clean it up.
#[no_mangle]
pub unsafe extern "C" fn ucs_async_context_init(
    async_: *mut AsyncContextHead,
    mode: c_int,
) -> ucs_status_t {
    if async_.is_null() {
        return Status::InvalidParam.code();
    }
    // SAFETY: the caller's context, at least the 48 bytes written here.
    unsafe {
        async_.write(AsyncContextHead {
            lock: [0; 40],
            mode,
            num_handlers: 0,
        })
    };
    Status::Ok.code()
}

/// `ucs_async_context_cleanup`: nothing was registered, so nothing is released.
#[no_mangle]
pub extern "C" fn ucs_async_context_cleanup(_async: *mut AsyncContextHead) {}

/// `ucs_async_context_create(mode, &async)`: a context of rucx's own memory, set up as
/// `ucs_async_context_init` does (programs only pass it on, e.g. to `uct_worker_create`).
#[no_mangle]
pub unsafe extern "C" fn ucs_async_context_create(
    mode: c_int,
    async_p: *mut *mut AsyncContextHead,
) -> ucs_status_t {
    if async_p.is_null() {
        return Status::InvalidParam.code();
    }
    let ctx = Box::into_raw(Box::new(AsyncContextHead {
        lock: [0; 40],
        mode,
        num_handlers: 0,
    }));
    // SAFETY: the caller's output pointer.
    unsafe { async_p.write(ctx) };
    Status::Ok.code()
}

/// `ucs_async_context_destroy(async)`: frees a context made by `ucs_async_context_create`.
#[no_mangle]
pub unsafe extern "C" fn ucs_async_context_destroy(async_: *mut AsyncContextHead) {
    if !async_.is_null() {
        // SAFETY: by the API's contract, a context `ucs_async_context_create` made (a Box
        // of ours), given back once.
        drop(unsafe { Box::from_raw(async_) });
    }
}

/// `ucs_load_modules(framework, module, init_once, flags)`: rucx is one library with no
/// loadable modules; there is nothing to load.
#[no_mangle]
pub extern "C" fn ucs_load_modules(
    _framework: *const c_char,
    _module: *const c_char,
    _init_once: *mut c_void,
    _flags: c_uint,
) {
}

/// `ucs_stats_get_root`: rucx keeps no statistics tree (UCX built without statistics
/// returns NULL too); callers pass the NULL on as "no parent node".
#[no_mangle]
pub extern "C" fn ucs_stats_get_root() -> *mut c_void {
    std::ptr::null_mut()
}

/// `ucs_empty_function`: does nothing (programs use it as a no-op callback).
#[no_mangle]
pub extern "C" fn ucs_empty_function() {}

/// `ucs_empty_function_return_success`: returns `UCS_OK` (a no-op callback).
#[no_mangle]
pub extern "C" fn ucs_empty_function_return_success() -> ucs_status_t {
    Status::Ok.code()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strncpy_zero_truncates_and_terminates() {
        let mut buf = [0x55 as c_char; 4];
        // SAFETY: a 4-byte buffer and a C string.
        unsafe { ucs_strncpy_zero(buf.as_mut_ptr(), c"abcdef".as_ptr(), buf.len()) };
        assert_eq!(buf.map(|c| c as u8), *b"abc\0");
    }

    #[test]
    fn rtrim_removes_trailing_set() {
        let mut text = *b"a, b,, \0";
        let mut s = StringBuffer {
            buffer: text.as_mut_ptr().cast(),
            length: 7,
            capacity: text.len() | 1,
        };
        // SAFETY: `s` describes `text`.
        unsafe { ucs_string_buffer_rtrim(&mut s, c", ".as_ptr()) };
        assert_eq!(s.length, 4);
        assert_eq!(&text[..5], b"a, b\0");
    }

    #[test]
    fn clock_is_decided_once() {
        ucs_x86_init_tsc_freq();
        let hz = ucs_get_cpu_clocks_per_sec();
        assert!(hz >= 1.0e6);
        // SAFETY: the C data object of this library.
        let v = unsafe { *rucx_ucs_arch_x86_enable_rdtsc_ptr() };
        assert!(v == UCS_YES || v == UCS_NO);
        assert_eq!(hz, ucs_get_cpu_clocks_per_sec());
    }
}
