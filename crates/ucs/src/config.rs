//! Typed configuration read from `UCX_*` environment variables.
//!
//! Each layer declares its variables as a static table of [`Var`] (name without the `UCX_`
//! prefix, default, documentation); `rucx-info -c` prints every table and an environment
//! variable starting with `UCX_` that no table declares gets one warning.
//! Invariant: a value that does not parse is an error naming the variable, never a silent
//! fallback to the default.

use crate::{Result, Status};

/// One configuration variable.
#[derive(Clone, Copy, Debug)]
pub struct Var {
    /// Name without the `UCX_` prefix, e.g. `"MM_FIFO_SIZE"`.
    pub name: &'static str,
    /// Default value, in the same syntax as the environment value.
    pub default: &'static str,
    /// One-line documentation.
    pub doc: &'static str,
}

/// The raw value of `UCX_<name>`, or the default of `var`.
pub fn raw(var: &Var) -> String {
    std::env::var(format!("UCX_{}", var.name)).unwrap_or_else(|_| var.default.to_string())
}

/// Parses a size with an optional unit suffix (`b`, `k`, `m`, `g`, case-insensitive,
/// optional trailing `b`): `"8k"` is 8192. `"inf"` is `u64::MAX`.
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim().to_ascii_lowercase();
    if t == "inf" || t == "infinity" {
        return Some(u64::MAX);
    }
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (num, mult) = match t.chars().last()? {
        'k' => (&t[..t.len() - 1], 1u64 << 10),
        'm' => (&t[..t.len() - 1], 1u64 << 20),
        'g' => (&t[..t.len() - 1], 1u64 << 30),
        _ => (t, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// Parses a boolean the way UCX does: y/yes/on/1 and n/no/off/0.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" | "on" | "1" | "true" => Some(true),
        "n" | "no" | "off" | "0" | "false" => Some(false),
        _ => None,
    }
}

/// Reads `var` as a size.
pub fn size(var: &Var) -> Result<u64> {
    let v = raw(var);
    parse_size(&v).ok_or_else(|| bad(var, &v))
}

/// Reads `var` as a boolean.
pub fn boolean(var: &Var) -> Result<bool> {
    let v = raw(var);
    parse_bool(&v).ok_or_else(|| bad(var, &v))
}

/// Reads `var` as a comma-separated list (empty items dropped).
pub fn list(var: &Var) -> Vec<String> {
    raw(var)
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn bad(var: &Var, value: &str) -> Status {
    tracing::error!("invalid value '{value}' for UCX_{}", var.name);
    Status::InvalidParam
}
