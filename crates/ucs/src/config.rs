//! Typed configuration read from `UCX_*` environment variables.
//!
//! Each layer declares its variables as a static table of [`Var`] (name without the `UCX_`
//! prefix, default, documentation) and hands it to [`register`]; `rucx-info -c` prints every
//! registered table through [`dump`], and [`warn_unknown`] warns once about each environment
//! variable starting with `UCX_` that no table declares (usually a typo that would otherwise
//! be ignored silently).
//!
//! Invariants:
//! - a value that does not parse is an error naming the variable, never a silent fallback to
//!   the default;
//! - ucs's own table [`UCS_VARS`] is always registered, so its names are never reported as
//!   unknown even before any layer registered anything;
//! - the registry only grows; registering the same table twice is a no-op.

use crate::{Result, Status};
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// `UCX_LOG_LEVEL`: the threshold of the log, in UCX's level names.
pub const LOG_LEVEL: Var = Var {
    name: "LOG_LEVEL",
    default: "warn",
    doc: "Logging level: fatal, error, warn, diag, info, debug, trace, req, data, async, \
          func or poll. Messages of this level and more severe ones are printed.",
};

/// `UCX_LOG_FILE`: where the log goes.
pub const LOG_FILE: Var = Var {
    name: "LOG_FILE",
    default: "",
    doc: "File to write the log to; empty means standard error. %p is replaced by the \
          process id and %h by the host name.",
};

/// `UCX_TLS`: which transports may be used.
pub const TLS: Var = Var {
    name: "TLS",
    default: "all",
    doc: "Comma-separated list of transports to use (self, shm, tcp, udp), or \"all\". \
          A leading ^ excludes the listed transports instead.",
};

/// `UCX_NET_DEVICES`: which network devices may be used.
pub const NET_DEVICES: Var = Var {
    name: "NET_DEVICES",
    default: "all",
    doc: "Comma-separated list of network devices to use, or \"all\".",
};

/// `UCX_WARN_UNUSED_ENV_VARS`: whether [`warn_unknown`] says anything.
pub const WARN_UNUSED_ENV_VARS: Var = Var {
    name: "WARN_UNUSED_ENV_VARS",
    default: "y",
    doc: "Warn about UCX_ environment variables that no component declares.",
};

/// The variables ucs itself owns. Also the allow-list of [`unknown_vars`]: these names are
/// known even in a process that never registered another table.
pub static UCS_VARS: &[Var] = &[LOG_LEVEL, LOG_FILE, TLS, NET_DEVICES, WARN_UNUSED_ENV_VARS];

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

/// Parses a duration: a number (fractions allowed) with an optional unit `ns`, `us`, `ms`,
/// `s`, `m` (minutes) or `h`; a plain number is seconds. `"inf"` is `Duration::MAX`.
pub fn parse_time(s: &str) -> Option<Duration> {
    let t = s.trim().to_ascii_lowercase();
    if t == "inf" || t == "infinity" {
        return Some(Duration::MAX);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let unit_ns: u64 = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 3_600 * 1_000_000_000,
        _ => return None,
    };
    if num.is_empty() || num == "." {
        return None;
    }
    if num.contains('.') {
        // Fractions go through f64: "1.5ms" has no exact integer form in general, and
        // configuration values never need more than f64's precision.
        // Rounding to whole nanoseconds keeps "1.5ms" from becoming 1499999ns.
        let ns = (num.parse::<f64>().ok()? * unit_ns as f64).round();
        if ns < u64::MAX as f64 {
            Some(Duration::from_nanos(ns as u64))
        } else {
            Duration::try_from_secs_f64(ns / 1e9).ok()
        }
    } else {
        // Integers stay exact so that "18446744073709551615ns" round-trips.
        let ns = u128::from(num.parse::<u64>().ok()?) * u128::from(unit_ns);
        let secs = u64::try_from(ns / 1_000_000_000).ok()?;
        Some(Duration::new(secs, (ns % 1_000_000_000) as u32))
    }
}

/// Parses an unsigned integer in decimal (or hex with `0x`); `"inf"` is `u64::MAX`.
pub fn parse_u64(s: &str) -> Option<u64> {
    let t = s.trim().to_ascii_lowercase();
    if t == "inf" || t == "infinity" {
        return Some(u64::MAX);
    }
    match t.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

/// Reads `var` as a duration (see [`parse_time`]).
pub fn time(var: &Var) -> Result<Duration> {
    let v = raw(var);
    parse_time(&v).ok_or_else(|| bad(var, &v))
}

/// Reads `var` as an unsigned integer (see [`parse_u64`]).
pub fn u64_value(var: &Var) -> Result<u64> {
    let v = raw(var);
    parse_u64(&v).ok_or_else(|| bad(var, &v))
}

/// Locks the registry. The registry only holds `&'static` slices and every update is a
/// single push, so a panic elsewhere cannot leave it inconsistent: poisoning is ignored.
fn tables() -> MutexGuard<'static, Vec<&'static [Var]>> {
    static TABLES: OnceLock<Mutex<Vec<&'static [Var]>>> = OnceLock::new();
    TABLES
        .get_or_init(|| Mutex::new(vec![UCS_VARS]))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Adds a layer's table to the registry (for [`dump`] and [`unknown_vars`]). Registering
/// the same table again does nothing.
pub fn register(table: &'static [Var]) {
    let mut t = tables();
    if !t.iter().any(|known| std::ptr::eq(*known, table)) {
        t.push(table);
    }
}

/// Every registered variable, sorted by name. When two tables declare the same name the
/// first registered declaration wins (they describe the same environment variable).
pub fn registered() -> Vec<Var> {
    let mut all: Vec<Var> = tables().iter().flat_map(|t| t.iter().copied()).collect();
    // Stable sort keeps registration order among equal names, so dedup keeps the first.
    all.sort_by(|a, b| a.name.cmp(b.name));
    all.dedup_by(|later, first| later.name == first.name);
    all
}

/// Environment variables (full names, sorted) that start with `UCX_` but that no registered
/// table declares. The names of [`UCS_VARS`] are always known.
pub fn unknown_vars() -> Vec<String> {
    let known: HashSet<&'static str> = registered().iter().map(|v| v.name).collect();
    let mut unknown: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| {
            let k = k.to_string_lossy().into_owned();
            let short = k.strip_prefix("UCX_")?;
            (!known.contains(short)).then_some(k)
        })
        .collect();
    unknown.sort();
    unknown
}

/// Logs one warning for each unknown `UCX_` variable (see [`unknown_vars`]). A variable is
/// reported at most once per process however often this runs, so every layer may call it
/// after registering its table. `UCX_WARN_UNUSED_ENV_VARS=n` silences it.
pub fn warn_unknown() {
    static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    if !boolean(&WARN_UNUSED_ENV_VARS).unwrap_or(true) {
        return;
    }
    let unknown = unknown_vars();
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    let warned = warned.get_or_insert_with(HashSet::new);
    for name in unknown {
        if !warned.contains(&name) {
            tracing::warn!("unused environment variable: {name} (maybe a misspelling?)");
            warned.insert(name);
        }
    }
}

/// Prints every registered variable as `UCX_NAME=value` with its current value, sorted by
/// name. With `with_docs`, each is preceded by its documentation and default as `#` lines.
/// Write errors are ignored: the output goes to a `String` or a terminal.
pub fn dump(out: &mut impl std::fmt::Write, with_docs: bool) {
    for var in registered() {
        let _ = dump_one(out, &var, with_docs);
    }
}

fn dump_one(out: &mut impl std::fmt::Write, var: &Var, with_docs: bool) -> std::fmt::Result {
    if with_docs {
        writeln!(out, "#")?;
        for line in var.doc.lines() {
            writeln!(out, "# {}", line.trim())?;
        }
        writeln!(out, "# default: {}", var.default)?;
        writeln!(out, "#")?;
    }
    writeln!(out, "UCX_{}={}", var.name, raw(var))?;
    if with_docs {
        writeln!(out)?;
    }
    Ok(())
}

fn bad(var: &Var, value: &str) -> Status {
    tracing::error!("invalid value '{value}' for UCX_{}", var.name);
    Status::InvalidParam
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("8k"), Some(8192));
        assert_eq!(parse_size("8K"), Some(8192));
        assert_eq!(parse_size("8kb"), Some(8192));
        assert_eq!(parse_size(" 2m "), Some(2 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("10b"), Some(10));
        assert_eq!(parse_size("inf"), Some(u64::MAX));
        for bad in ["", "k", "-1", "1.5k", "1t", "abc", "18446744073709551615k"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn bools() {
        for t in ["y", "YES", "on", "1", "true"] {
            assert_eq!(parse_bool(t), Some(true), "{t}");
        }
        for f in ["n", "No", "off", "0", "false"] {
            assert_eq!(parse_bool(f), Some(false), "{f}");
        }
        for bad in ["", "2", "maybe", "yess"] {
            assert_eq!(parse_bool(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn times() {
        let ms = Duration::from_millis;
        assert_eq!(parse_time("10ms"), Some(ms(10)));
        assert_eq!(parse_time("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_time("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_time("500us"), Some(Duration::from_micros(500)));
        assert_eq!(parse_time("250ns"), Some(Duration::from_nanos(250)));
        assert_eq!(parse_time("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_time("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_time(" 1.5 ms "), Some(Duration::from_micros(1500)));
        assert_eq!(parse_time("0.25"), Some(ms(250)));
        assert_eq!(parse_time("INF"), Some(Duration::MAX));
        assert_eq!(
            parse_time("18446744073709551615ns"),
            Some(Duration::from_nanos(u64::MAX))
        );
        for bad in ["", "ms", "-1s", "1x", "1 m s", ".", "1.2.3s", "s10", "1e3s"] {
            assert_eq!(parse_time(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn integers() {
        assert_eq!(parse_u64("42"), Some(42));
        assert_eq!(parse_u64(" 0x1F "), Some(31));
        assert_eq!(parse_u64("inf"), Some(u64::MAX));
        for bad in ["", "-1", "1k", "0x", "0xg", "18446744073709551616"] {
            assert_eq!(parse_u64(bad), None, "{bad:?}");
        }
    }

    // The typed readers go through the environment; each test uses its own variable names
    // because tests run in parallel in one process.
    static TEST_VARS: &[Var] = &[
        Var {
            name: "RUCX_TEST_CFG_SIZE",
            default: "4k",
            doc: "test size",
        },
        Var {
            name: "RUCX_TEST_CFG_BAD",
            default: "bogus",
            doc: "test value that never parses",
        },
        Var {
            name: "RUCX_TEST_CFG_LIST",
            default: " a, ,b ,c",
            doc: "test list\nsecond line",
        },
    ];

    #[test]
    fn typed_readers_use_default_and_reject_garbage() {
        // TEST_VARS[0] is set in the environment by the registry test, so not used here.
        let [bad_var, lst] = [TEST_VARS[1], TEST_VARS[2]];
        let sz = Var {
            name: "RUCX_TEST_CFG_SIZE_DEFAULT",
            default: "4k",
            doc: "",
        };
        assert_eq!(size(&sz), Ok(4096));
        assert_eq!(size(&bad_var), Err(Status::InvalidParam));
        assert_eq!(boolean(&bad_var), Err(Status::InvalidParam));
        assert_eq!(time(&bad_var), Err(Status::InvalidParam));
        assert_eq!(u64_value(&bad_var), Err(Status::InvalidParam));
        assert_eq!(list(&lst), ["a", "b", "c"]);
        let t = Var {
            name: "RUCX_TEST_CFG_TIME",
            default: "10ms",
            doc: "",
        };
        assert_eq!(time(&t), Ok(Duration::from_millis(10)));
        std::env::set_var("UCX_RUCX_TEST_CFG_TIME", "2s");
        assert_eq!(time(&t), Ok(Duration::from_secs(2)));
        std::env::set_var("UCX_RUCX_TEST_CFG_TIME", "2 parsecs");
        assert_eq!(time(&t), Err(Status::InvalidParam));
        std::env::remove_var("UCX_RUCX_TEST_CFG_TIME");
        let n = Var {
            name: "RUCX_TEST_CFG_U64",
            default: "7",
            doc: "",
        };
        assert_eq!(u64_value(&n), Ok(7));
    }

    #[test]
    fn registry_unknown_and_dump() {
        std::env::set_var("UCX_RUCX_TEST_CFG_SIZE", "1m");
        std::env::set_var("UCX_RUCX_TEST_NOBODY_DECLARES_THIS", "1");
        // ucs's own table is known before anyone registers anything.
        assert!(registered().iter().any(|v| v.name == "LOG_LEVEL"));
        register(TEST_VARS);
        register(TEST_VARS);
        let all = registered();
        let n = all
            .iter()
            .filter(|v| v.name == "RUCX_TEST_CFG_SIZE")
            .count();
        assert_eq!(n, 1);
        assert!(all.windows(2).all(|w| w[0].name < w[1].name));

        let unknown = unknown_vars();
        assert!(unknown.contains(&"UCX_RUCX_TEST_NOBODY_DECLARES_THIS".to_string()));
        assert!(!unknown.iter().any(|u| u == "UCX_RUCX_TEST_CFG_SIZE"));
        warn_unknown();
        warn_unknown();

        let mut plain = String::new();
        dump(&mut plain, false);
        assert!(plain.contains("UCX_RUCX_TEST_CFG_SIZE=1m\n"), "{plain}");
        assert!(plain.contains("UCX_RUCX_TEST_CFG_BAD=bogus\n"));
        assert!(!plain.contains('#'));
        let a = plain.find("UCX_LOG_FILE=").unwrap();
        let b = plain.find("UCX_LOG_LEVEL=").unwrap();
        assert!(a < b, "dump is sorted by name");

        let mut docs = String::new();
        dump(&mut docs, true);
        assert!(docs.contains("# test list\n# second line\n# default:  a, ,b ,c\n"));
        assert!(docs.contains("# default: 4k\n#\nUCX_RUCX_TEST_CFG_SIZE=1m\n"));
        std::env::remove_var("UCX_RUCX_TEST_CFG_SIZE");
        std::env::remove_var("UCX_RUCX_TEST_NOBODY_DECLARES_THIS");
    }

    proptest! {
        #[test]
        fn kilobytes(n in 0u64..(1 << 54)) {
            prop_assert_eq!(parse_size(&format!("{n}k")), Some(n * 1024));
            prop_assert_eq!(parse_size(&format!("{n}KB")), Some(n * 1024));
        }

        #[test]
        fn milliseconds(n in 0u64..(1 << 40)) {
            prop_assert_eq!(parse_time(&format!("{n}ms")), Some(Duration::from_millis(n)));
        }

        #[test]
        fn parsers_never_panic(s in "\\PC{0,12}") {
            let _ = (parse_size(&s), parse_bool(&s), parse_time(&s), parse_u64(&s));
        }
    }
}
