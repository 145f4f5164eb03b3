//! rucx-info: the version, the transports and devices this build finds with their
//! attributes, and the configuration with its defaults (like `ucx_info -v -d -c`).
//! Without options it prints all three.

#![forbid(unsafe_code)]

use clap::Parser;
use std::fmt::Write;
use std::process::ExitCode;
use uct::{Caps, Iface, IfaceAttr, IfaceConfig, Transport};

#[derive(Parser, Debug)]
#[command(
    name = "rucx-info",
    about = "Show rucx version, transports and configuration"
)]
struct Cli {
    /// Print the version.
    #[arg(short = 'v', long = "version")]
    version: bool,
    /// Print the transports and devices with their capabilities, limits and costs.
    #[arg(short = 'd', long = "devices")]
    devices: bool,
    /// Print the configuration (UCX_* variables with their current values and defaults).
    #[arg(short = 'c', long = "config")]
    config: bool,
}

fn version() -> String {
    format!(
        "# rucx version {}\n# Rust re-design of UCX; C API and ABI of UCX 1.13\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// Limits are `usize::MAX` when the transport has none.
fn limit(n: usize) -> String {
    if n == usize::MAX {
        "unlimited".into()
    } else {
        format!("<= {n}")
    }
}

fn cost(out: &mut String, name: &str, c: &uct::CostModel) {
    let _ = writeln!(
        out,
        "#   {name:>18}: overhead {:.1} nsec, latency {:.1} nsec, bandwidth {:.2} MB/sec",
        c.overhead * 1e9,
        c.latency * 1e9,
        c.bandwidth / (1u64 << 20) as f64
    );
}

fn describe(out: &mut String, t: Transport, a: &IfaceAttr) {
    let _ = writeln!(out, "#");
    let _ = writeln!(out, "#      Transport: {}", t.name());
    let _ = writeln!(out, "#         Device: {}", t.device());
    let kind = match t {
        Transport::SelfTl => "loopback",
        Transport::Shm => "intra-node",
        Transport::Tcp | Transport::Udp => "network",
        Transport::Fabric => "test (in memory)",
    };
    let _ = writeln!(out, "#           Type: {kind}");
    let _ = writeln!(out, "#");
    let _ = writeln!(out, "#   capabilities:");
    let ops: [(Caps, &str, usize); 9] = [
        (Caps::AM_SHORT, "am_short", a.max_am_short),
        (Caps::AM_BCOPY, "am_bcopy", a.max_am_bcopy),
        (Caps::AM_ZCOPY, "am_zcopy", a.max_am_zcopy),
        (Caps::PUT_SHORT, "put_short", a.max_put_short),
        (Caps::PUT_BCOPY, "put_bcopy", a.max_put_bcopy),
        (Caps::PUT_ZCOPY, "put_zcopy", a.max_put_zcopy),
        (Caps::GET_BCOPY, "get_bcopy", a.max_get_bcopy),
        (Caps::GET_ZCOPY, "get_zcopy", a.max_get_zcopy),
        (Caps::AM_ZCOPY, "am header", a.max_am_hdr),
    ];
    for (cap, name, max) in ops {
        if a.caps.contains(cap) {
            let _ = writeln!(out, "#   {name:>18}: {}", limit(max));
        }
    }
    let widths: Vec<&str> = [(Caps::ATOMIC32, "32"), (Caps::ATOMIC64, "64")]
        .into_iter()
        .filter(|(c, _)| a.caps.contains(*c))
        .map(|(_, w)| w)
        .collect();
    if !widths.is_empty() {
        let _ = writeln!(
            out,
            "#   {:>18}: add, and, or, xor, swap, cswap ({} bit)",
            "atomics",
            widths.join(", ")
        );
    }
    let conn = if a.caps.contains(Caps::CONNECT_TO_IFACE) {
        "to iface"
    } else if a.caps.contains(Caps::CONNECT_TO_EP) {
        "to ep"
    } else {
        "none"
    };
    let _ = writeln!(out, "#   {:>18}: {conn}", "connection");
    let mut flags = Vec::new();
    if a.caps.contains(Caps::EVENT_RECV) {
        flags.push("event fd on receive");
    }
    if a.caps.contains(Caps::RKEY_PTR) {
        flags.push("rkey_ptr (direct load/store)");
    }
    if !flags.is_empty() {
        let _ = writeln!(out, "#   {:>18}: {}", "features", flags.join(", "));
    }
    let _ = writeln!(
        out,
        "#   {:>18}: {} bytes",
        "device address", a.device_addr_len
    );
    let _ = writeln!(
        out,
        "#   {:>18}: {} bytes",
        "iface address", a.iface_addr_len
    );
    let _ = writeln!(out, "#");
    let _ = writeln!(out, "#   cost model:");
    cost(out, "messages", &a.cost);
    cost(out, "remote memory", &a.rma_cost);
}

fn devices(cfg: &IfaceConfig) -> (String, bool) {
    let mut out = String::new();
    let mut ok = true;
    for t in Transport::ALL {
        let _ = writeln!(out, "#");
        let _ = writeln!(out, "# Memory domain: {}", t.name());
        let _ = writeln!(
            out,
            "#     allocate: {}",
            match t {
                Transport::SelfTl | Transport::Shm => "shared segment (peers on this host map it)",
                Transport::Tcp | Transport::Udp | Transport::Fabric => {
                    "none (no remote memory access)"
                }
            }
        );
        let _ = writeln!(
            out,
            "#     register: {}",
            match t {
                Transport::SelfTl => "local key (this process only)",
                Transport::Shm => "cross-memory attach key",
                Transport::Tcp | Transport::Udp | Transport::Fabric => {
                    "none (remote memory over tcp/udp is emulated by ucp)"
                }
            }
        );
        match Iface::open(t, cfg) {
            Ok(iface) => describe(&mut out, t, iface.attr()),
            Err(e) => {
                ok = false;
                let _ = writeln!(out, "#      Transport: {} (cannot open: {e})", t.name());
            }
        }
    }
    (out, ok)
}

fn main() -> ExitCode {
    ucs::log::init();
    let cli = Cli::parse();
    let all = !(cli.version || cli.devices || cli.config);
    // Reading the interface configuration registers uct's variables, so that -c lists
    // them and the unknown-variable check knows them.
    let cfg = match IfaceConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rucx-info: invalid configuration: {e}");
            return ExitCode::from(1);
        }
    };
    // The protocol layer's variables (thresholds, UCX_TLS, RMA path, tcp budget) too.
    if let Err(e) = ucp::Config::from_env() {
        eprintln!("rucx-info: invalid configuration: {e}");
        return ExitCode::from(1);
    }
    // The collectives' variables (UCX_COLL_<NAME>_ALG, ...), checked as coll checks them.
    ucs::config::register(coll::COLL_VARS);
    if let Err(e) = coll::Options::from_env() {
        eprintln!("rucx-info: invalid configuration: {e}");
        return ExitCode::from(1);
    }
    ucs::config::warn_unknown();
    let mut out = String::new();
    let mut ok = true;
    if all || cli.version {
        out.push_str(&version());
    }
    if all || cli.devices {
        let (d, good) = devices(&cfg);
        out.push_str(&d);
        ok &= good;
    }
    if all || cli.config {
        ucs::config::dump(&mut out, true);
    }
    print!("{out}");
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
