//! Protocol-layer configuration from `UCX_*` variables.
//!
//! `UCX_TLS` selects transports as UCX users write it: a comma-separated list (`shm,self`),
//! `all`, or `^name,...` to exclude. UCX's names of its shared-memory transports (`posix`,
//! `sysv`, `cma`, `mm`, `sm`) select rucx's shm; names of transports this build does not
//! have (`tcp`, `rc`, `ud`, ...) are ignored with a debug message.

use ucs::config::{self, Var};
use ucs::{Result, Status};
use uct::Transport;

pub static VARS: &[Var] = &[
    Var {
        name: "RNDV_THRESH",
        default: "auto",
        doc: "Message size from which tag and AM sends use the rendezvous protocol ('auto': from the transports' cost model).",
    },
    Var {
        name: "ZCOPY_THRESH",
        default: "auto",
        doc: "Message size from which eager fragments are gathered straight from the user buffer instead of packed ('auto': 16k).",
    },
    Var {
        name: "RMA_PATH",
        default: "auto",
        doc: "How put/get/atomics reach remote memory: auto, direct (mapping; fails if impossible), cma (one copy by cross-memory attach, atomics emulated), am (emulated by messages the target executes).",
    },
    Var {
        name: "TCP_MAX_EPS",
        default: "inf",
        doc: "Largest number of endpoints of a worker connected over tcp; peers beyond it are reached over another transport that reaches them (udp), keeping memory per peer constant as jobs grow.",
    },
    Var {
        name: "MAX_EAGER_LANES",
        default: "1",
        doc: "Lanes used for eager messages (rucx uses one; kept for compatibility).",
    },
    Var {
        name: "RUCX_PROGRESS_THREAD",
        default: "n",
        doc: "Give every worker a progress thread that serves peers (emulated RMA, rendezvous fetches, acknowledgements) while the application is outside rucx; user callbacks still run in the application's own calls.",
    },
    Var {
        name: "RUCX_RNDV_SPLIT",
        default: "auto",
        doc: "Rendezvous size over shared memory from which both sides copy at once: the sender writes the first part into the receive buffer while the receiver reads the rest ('auto': 32k; 'inf': the receiver reads it all).",
    },
];

/// A threshold: automatic (from the cost model) or fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Thresh {
    Auto,
    Bytes(usize),
}

/// How remote memory is reached (the `UCX_RMA_PATH` choice, and a resolved key's path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmaPath {
    /// Pick per key: direct if mappable, else CMA, else emulated.
    Auto,
    /// Load/store through a mapping, CPU atomics.
    Direct,
    /// One copy by cross-memory attach; atomics emulated.
    Cma,
    /// Messages the target executes in its progress.
    Emulated,
}

/// Configuration of a context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Transports allowed, in preference order.
    pub transports: Vec<Transport>,
    pub rndv_thresh: Thresh,
    pub zcopy_thresh: Thresh,
    pub rma_path: RmaPath,
    /// Endpoints connected over tcp at most (the rest go over udp).
    pub tcp_max_eps: usize,
    /// Workers get a progress thread (`UCX_RUCX_PROGRESS_THREAD`).
    pub progress_thread: bool,
    /// Rendezvous size over shared memory from which sender and receiver copy a part
    /// each (`UCX_RUCX_RNDV_SPLIT`; `usize::MAX`: never).
    pub rndv_split: usize,
}

/// [`Config::rndv_split`] under `auto`: measured on a 2-CPU host, splitting pays from
/// about 32 KiB (below it the extra round trip of the Rtr costs more than half a copy).
pub const RNDV_SPLIT_AUTO: usize = 32 << 10;

impl Default for Config {
    fn default() -> Self {
        Config {
            transports: Transport::ALL.to_vec(),
            rndv_thresh: Thresh::Auto,
            zcopy_thresh: Thresh::Auto,
            rma_path: RmaPath::Auto,
            tcp_max_eps: usize::MAX,
            progress_thread: false,
            rndv_split: RNDV_SPLIT_AUTO,
        }
    }
}

fn thresh(var: &Var) -> Result<Thresh> {
    let v = config::raw(var);
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok(Thresh::Auto);
    }
    let n = config::parse_size(&v).ok_or_else(|| {
        tracing::error!("invalid value '{v}' for UCX_{}", var.name);
        Status::InvalidParam
    })?;
    Ok(Thresh::Bytes(usize::try_from(n).unwrap_or(usize::MAX)))
}

fn rma_path(var: &Var) -> Result<RmaPath> {
    match config::raw(var).trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(RmaPath::Auto),
        "direct" => Ok(RmaPath::Direct),
        "cma" => Ok(RmaPath::Cma),
        "am" | "emulated" => Ok(RmaPath::Emulated),
        v => {
            tracing::error!("invalid value '{v}' for UCX_{}", var.name);
            Err(Status::InvalidParam)
        }
    }
}

/// Parses a `UCX_TLS` value into the transports it allows.
pub fn parse_tls(spec: &str) -> Result<Vec<Transport>> {
    let spec = spec.trim();
    let (exclude, list) = match spec.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, spec),
    };
    let mut named = Vec::new();
    let mut all = false;
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item {
            "all" | "any" => all = true,
            "sm" | "shm" | "posix" | "sysv" | "cma" | "mm" | "knem" | "xpmem" => {
                named.push(Transport::Shm)
            }
            other => match Transport::from_name(other) {
                Some(t) => named.push(t),
                None => tracing::debug!("UCX_TLS: transport '{other}' is not in this build"),
            },
        }
    }
    let out: Vec<Transport> = if exclude {
        Transport::ALL
            .iter()
            .copied()
            .filter(|t| !named.contains(t))
            .collect()
    } else if all || list.is_empty() {
        Transport::ALL.to_vec()
    } else {
        // Named transports outside ALL (the test fabric) come last, only when named.
        let extra = named
            .iter()
            .copied()
            .filter(|t| !Transport::ALL.contains(t));
        Transport::ALL
            .iter()
            .copied()
            .filter(|t| named.contains(t))
            .chain(extra)
            .collect()
    };
    Ok(out)
}

impl Config {
    /// Reads the configuration from the environment.
    pub fn from_env() -> Result<Config> {
        config::register(VARS);
        let tls = config::raw(&config::TLS);
        Ok(Config {
            transports: parse_tls(&tls)?,
            rndv_thresh: thresh(&VARS[0])?,
            zcopy_thresh: thresh(&VARS[1])?,
            rma_path: rma_path(&VARS[2])?,
            tcp_max_eps: usize::try_from(config::size(&VARS[3])?).unwrap_or(usize::MAX),
            progress_thread: config::boolean(&VARS[5])?,
            rndv_split: match thresh(&VARS[6])? {
                Thresh::Auto => RNDV_SPLIT_AUTO,
                Thresh::Bytes(n) => n,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_lists() {
        use Transport::*;
        assert_eq!(parse_tls("all").unwrap(), Transport::ALL.to_vec());
        assert_eq!(parse_tls("").unwrap(), Transport::ALL.to_vec());
        assert_eq!(parse_tls("posix,self").unwrap(), vec![SelfTl, Shm]);
        assert_eq!(parse_tls("^shm").unwrap(), vec![SelfTl, Tcp, Udp]);
        assert_eq!(parse_tls("udp").unwrap(), vec![Udp]);
        assert_eq!(parse_tls("tcp").unwrap(), vec![Tcp]);
        assert_eq!(parse_tls("sm,tcp").unwrap(), vec![Shm, Tcp]);
        assert_eq!(parse_tls("rc,ud").unwrap(), vec![]);
    }
}
