//! Process-wide logging: a `tracing` subscriber configured from UCX's variables.
//!
//! rucx code logs with the `tracing` macros directly; this module only decides where the
//! output goes (`UCX_LOG_FILE`, standard error by default) and which levels pass
//! (`UCX_LOG_LEVEL`, in UCX's level names).
//!
//! Invariants: [`init`] installs at most one subscriber per process and never panics; if the
//! application (or a test harness) installed its own global subscriber first, that one is
//! kept and rucx's events go to it.

use crate::config;
use std::io::IsTerminal;
use std::sync::{Mutex, Once};
use tracing::Level;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

/// Maps a UCX log level name (case-insensitive) to the `tracing` level that shows the same
/// messages. UCX has more levels than `tracing`; the finer ones all become `TRACE`.
pub fn level_from_ucx(s: &str) -> Option<Level> {
    match s.trim().to_ascii_lowercase().as_str() {
        "fatal" | "error" => Some(Level::ERROR),
        "warn" | "warning" => Some(Level::WARN),
        "diag" | "info" => Some(Level::INFO),
        "debug" => Some(Level::DEBUG),
        "trace" | "req" | "data" | "async" | "func" | "poll" => Some(Level::TRACE),
        _ => None,
    }
}

/// Installs the global subscriber once per process; later calls do nothing.
///
/// An unknown `UCX_LOG_LEVEL` falls back to `warn` and an unopenable `UCX_LOG_FILE` to
/// standard error; both are reported through the log itself, because failing to set up
/// logging must not stop communication.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(install);
}

fn install() {
    let level_name = config::raw(&config::LOG_LEVEL);
    let level = level_from_ucx(&level_name);
    let file_template = config::raw(&config::LOG_FILE);
    let mut file_error = None;

    let file = if file_template.trim().is_empty() {
        None
    } else {
        let path = expand_file_name(file_template.trim());
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            Ok(f) => Some(f),
            Err(e) => {
                file_error = Some(format!("cannot open log file '{path}': {e}"));
                None
            }
        }
    };

    let builder = tracing_subscriber::fmt()
        .with_max_level(LevelFilter::from_level(level.unwrap_or(Level::WARN)))
        .with_thread_ids(true);
    let result = match file {
        Some(f) => builder
            .with_ansi(false)
            .with_writer(BoxMakeWriter::new(Mutex::new(f)))
            .try_init(),
        None => builder
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(BoxMakeWriter::new(std::io::stderr))
            .try_init(),
    };
    if result.is_err() {
        tracing::debug!("a global tracing subscriber was already installed; keeping it");
    }
    if level.is_none() {
        tracing::warn!("invalid UCX_LOG_LEVEL '{level_name}', using 'warn'");
    }
    if let Some(msg) = file_error {
        tracing::warn!("{msg}; logging to standard error");
    }
}

/// Expands `%p` (process id), `%h` (host name) and `%%` in a log file name, so that several
/// processes given one `UCX_LOG_FILE` write separate files. Other `%` sequences stay as-is.
fn expand_file_name(template: &str) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&std::process::id().to_string()),
            Some('h') => out.push_str(&crate::sys::host::hostname()),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ucx_levels_map_to_tracing_levels() {
        let cases = [
            ("fatal", Level::ERROR),
            ("error", Level::ERROR),
            ("warn", Level::WARN),
            ("diag", Level::INFO),
            ("info", Level::INFO),
            ("debug", Level::DEBUG),
            ("trace", Level::TRACE),
            ("req", Level::TRACE),
            ("data", Level::TRACE),
            ("async", Level::TRACE),
            ("func", Level::TRACE),
            ("poll", Level::TRACE),
            (" WARN ", Level::WARN),
            ("Debug", Level::DEBUG),
        ];
        for (name, level) in cases {
            assert_eq!(level_from_ucx(name), Some(level), "{name}");
        }
        for bad in ["", "verbose", "3", "warnings"] {
            assert_eq!(level_from_ucx(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn file_name_template() {
        let pid = std::process::id().to_string();
        assert_eq!(
            expand_file_name("/tmp/x.%p.log"),
            format!("/tmp/x.{pid}.log")
        );
        assert_eq!(expand_file_name("a%%b%q%"), "a%b%q%");
        let host = crate::sys::host::hostname();
        assert_eq!(expand_file_name("%h-%p"), format!("{host}-{pid}"));
    }

    #[test]
    fn init_is_idempotent() {
        init();
        init();
        tracing::info!("logging initialised twice without panicking");
    }
}
