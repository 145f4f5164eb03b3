//! Names and text: entity names in fixed C arrays, and printing to a C stream.

use crate::ffi::UCP_ENTITY_NAME_MAX;
use std::ffi::{c_char, CString};

/// Copies a C name into a fixed array (truncated, NUL-terminated); null leaves it alone.
pub(crate) fn copy_name(dst: &mut [c_char; UCP_ENTITY_NAME_MAX], src: *const c_char) {
    if src.is_null() {
        return;
    }
    // SAFETY: the caller's NUL-terminated name.
    let s = unsafe { std::ffi::CStr::from_ptr(src) }.to_bytes();
    let n = s.len().min(UCP_ENTITY_NAME_MAX - 1);
    for (d, &b) in dst.iter_mut().zip(&s[..n]) {
        *d = b as c_char;
    }
    dst[n] = 0;
}

/// `prefix:pid`, the default name of an entity.
pub(crate) fn default_name(prefix: &str, dst: &mut [c_char; UCP_ENTITY_NAME_MAX]) {
    let s = format!("{}:{}", prefix, std::process::id());
    let b = s.as_bytes();
    let n = b.len().min(UCP_ENTITY_NAME_MAX - 1);
    for (d, &c) in dst.iter_mut().zip(&b[..n]) {
        *d = c as c_char;
    }
    dst[n] = 0;
}

/// A fixed name as a Rust string.
pub(crate) fn name_str(n: &[c_char; UCP_ENTITY_NAME_MAX]) -> String {
    let b: Vec<u8> = n
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&b).into_owned()
}

/// Writes `text` to a C stream (nothing for a null stream).
pub(crate) fn print_to(stream: *mut libc::FILE, text: &str) {
    if stream.is_null() {
        return;
    }
    let Ok(c) = CString::new(text.replace('\0', " ")) else {
        return;
    };
    // SAFETY: the caller's open stream and a NUL-terminated string.
    unsafe { libc::fputs(c.as_ptr(), stream) };
}
