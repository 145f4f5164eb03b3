//! rucx-perftest: ucx_perftest's tests on rucx, between two local processes.
//!
//! Without a peer named on the command line (the only mode so far) the process starts its
//! peer itself: it runs its own executable again with a hidden `--peer-role responder`,
//! talks to it over the child's stdin and stdout (one JSON message per line, see
//! `perf::channel`), and kills and reaps it on any error. Every wait for the peer is
//! bounded by `--timeout`.
//!
//! Exit status: 0 on success, 1 when a test fails, 2 for a bad command line.

use clap::{CommandFactory, FromArgMatches, Parser};
use perf::channel::LineChannel;
use perf::{report, Layout, Params, PerfResult, TestId, UctPeer};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use ucs::Status;

/// Command line, with ucx_perftest's option letters where it has them.
#[derive(Parser, Debug)]
#[command(
    name = "rucx-perftest",
    version,
    about = "Measure rucx transport performance (ucx_perftest's tests)",
    after_help = "Without -t, runs a short suite over shared memory (am_lat, am_bw, put_lat, \
                  put_bw, get_bw) between this process and a peer process it starts."
)]
struct Cli {
    /// Test to run (the list comes from perf's test table at run time).
    #[arg(short = 't', long = "test", value_name = "TEST")]
    test: Option<String>,
    /// Transport: shm (also posix, sysv, mm, cma).
    #[arg(
        short = 'x',
        long = "tl",
        value_name = "TRANSPORT",
        default_value = "shm"
    )]
    transport: String,
    /// Device.
    #[arg(
        short = 'd',
        long = "device",
        value_name = "DEVICE",
        default_value = "memory"
    )]
    device: String,
    /// Message size in bytes (suffixes k, m, g); for AM short it includes the 8-byte header.
    #[arg(short = 's', long = "size", value_name = "SIZE", value_parser = parse_size)]
    size: Option<usize>,
    /// Measured iterations [default: 10000; the suite has its own].
    #[arg(short = 'n', long = "iterations", value_name = "N")]
    iterations: Option<u64>,
    /// Warm-up iterations, not measured [default: 1000; the suite has its own].
    #[arg(short = 'w', long = "warmup", value_name = "N")]
    warmup: Option<u64>,
    /// Data layout: short, bcopy or zcopy [default: the cheapest the size fits].
    #[arg(short = 'D', long = "layout", value_name = "LAYOUT")]
    layout: Option<String>,
    /// CPUs: the first for this process, the second for the peer (e.g. "0,1"), or "off"
    /// [default: the first two CPUs this process may use].
    #[arg(short = 'c', long = "cpus", value_name = "CPUS")]
    cpus: Option<String>,
    /// am_bw: credit window in messages; put_bw/get_bw: operations between flushes.
    #[arg(
        short = 'O',
        long = "outstanding",
        value_name = "N",
        default_value_t = 0
    )]
    window: u32,
    /// Print only the final numbers (ucx_perftest's -f).
    #[arg(short = 'f', long = "final-only")]
    final_only: bool,
    /// Print one JSON object per result instead of the table.
    #[arg(long)]
    json: bool,
    /// Longest wait for the peer, in seconds (on the responder of put/get tests this
    /// bounds a whole test).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    timeout: f64,
    /// Serve a remote client (not implemented yet).
    #[arg(long)]
    server: bool,
    /// Connect to a remote server (not implemented yet).
    #[arg(long, value_name = "HOST[:PORT]")]
    connect: Option<String>,
    /// Port of server/client mode (not implemented yet).
    #[arg(short = 'p', long = "port", value_name = "PORT")]
    port: Option<u16>,
    /// Server host, as in `ucx_perftest HOST` (not implemented yet).
    #[arg(value_name = "HOST")]
    host: Option<String>,
    /// Internal: the role of a peer process started by rucx-perftest itself.
    #[arg(long, hide = true, value_name = "ROLE")]
    peer_role: Option<String>,
    /// Internal: the CPU a peer process pins itself to.
    #[arg(long, hide = true, value_name = "CPU")]
    peer_cpu: Option<usize>,
}

fn parse_size(s: &str) -> Result<usize, String> {
    ucs::config::parse_size(s)
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| format!("'{s}' is not a size (e.g. 8, 4k, 1m)"))
}

/// Why the program stops: a command-line problem (exit 2) or a failed run (exit 1).
enum Failure {
    Usage(String),
    Run(String),
}

fn usage<T>(msg: impl Into<String>) -> Result<T, Failure> {
    Err(Failure::Usage(msg.into()))
}

/// The suite run when no test is named: a few seconds over shared memory.
fn default_suite() -> Vec<Params> {
    let p = |test, size, layout, iterations, warmup| Params {
        size,
        layout,
        iterations,
        warmup,
        ..Params::new(test)
    };
    vec![
        p(TestId::AmLat, 8, Some(Layout::Short), 20_000, 2_000),
        p(TestId::AmBw, 8, Some(Layout::Short), 200_000, 20_000),
        p(TestId::AmBw, 4096, Some(Layout::Bcopy), 50_000, 5_000),
        p(TestId::PutLat, 8, Some(Layout::Short), 20_000, 2_000),
        p(TestId::PutBw, 1 << 20, Some(Layout::Zcopy), 2_000, 200),
        p(TestId::GetBw, 1 << 20, Some(Layout::Zcopy), 2_000, 200),
    ]
}

/// What the initiator runs, from the command line.
struct Plan {
    tests: Vec<Params>,
    cpus: Vec<usize>,
    timeout: Duration,
}

fn plan(cli: &Cli) -> Result<Plan, Failure> {
    if cli.server || cli.connect.is_some() || cli.port.is_some() || cli.host.is_some() {
        return usage(
            "server/client mode (--server, --connect, -p, HOST) is not implemented yet; \
             run without these options to start a local peer",
        );
    }
    let Some(tl) = uct::Transport::from_name(&cli.transport) else {
        return usage(format!(
            "transport '{}' is not available (available: shm, posix, sysv, mm, cma)",
            cli.transport
        ));
    };
    if tl == uct::Transport::SelfTl {
        return usage("transport 'self' only reaches its own process; use shm");
    }
    if cli.device != tl.device() {
        return usage(format!(
            "device '{}' not found for transport {} (devices: {})",
            cli.device,
            tl.name(),
            tl.device()
        ));
    }
    let layout = match cli.layout.as_deref() {
        None => None,
        Some(s) => match Layout::from_name(s) {
            Some(l) => Some(l),
            None => {
                return usage(format!(
                    "data layout '{s}' is not supported (short, bcopy, zcopy)"
                ))
            }
        },
    };
    let cpus = match cli.cpus.as_deref() {
        // Two spinning processes that the scheduler puts on one CPU measure the scheduler
        // (a ping-pong round trip becomes a time slice), so by default each gets its own.
        None => {
            let allowed = perf::affinity::allowed_cpus();
            if allowed.len() >= 2 {
                allowed[..2].to_vec()
            } else {
                Vec::new()
            }
        }
        Some("off") => Vec::new(),
        Some(s) => match perf::affinity::parse_cpu_list(s) {
            Some(v) if !v.is_empty() => v,
            _ => return usage(format!("'{s}' is not a CPU list (e.g. 0,1)")),
        },
    };
    if !(cli.timeout > 0.0 && cli.timeout <= 86_400.0) {
        return usage("--timeout must be between 0 and 86400 seconds");
    }
    let mut tests = match &cli.test {
        Some(name) => {
            let info = perf::lookup(name).map_err(|e| Failure::Usage(e.to_string()))?;
            let mut p = Params::new(info.id);
            if let Some(s) = cli.size {
                p.size = s;
            }
            p.layout = layout;
            vec![p]
        }
        None => {
            if cli.size.is_some() || layout.is_some() {
                return usage("-s and -D need a test (-t); without -t the default suite runs");
            }
            default_suite()
        }
    };
    for p in &mut tests {
        p.transport = tl.name().into();
        p.window = cli.window;
        if let Some(n) = cli.iterations {
            p.iterations = n;
        }
        if let Some(w) = cli.warmup {
            p.warmup = w;
        }
        if let Err(e) = p.validate() {
            return usage(format!("{}: invalid parameters: {e}", p.test));
        }
    }
    Ok(Plan {
        tests,
        cpus,
        timeout: Duration::from_secs_f64(cli.timeout),
    })
}

/// The peer process; killed and reaped when dropped unless it already exited.
struct PeerProcess {
    child: Child,
}

impl PeerProcess {
    /// Starts this executable as the responder; returns it with the channel's read and
    /// write descriptors (the child's stdout and stdin).
    fn spawn(cli: &Cli, plan: &Plan) -> Result<(PeerProcess, OwnedFd, OwnedFd), String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args(["--peer-role", "responder", "-x", &cli.transport])
            .arg("--timeout")
            .arg(plan.timeout.as_secs_f64().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(&cpu) = plan.cpus.get(1) {
            cmd.arg("--peer-cpu").arg(cpu.to_string());
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the peer process: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the peer process has no pipes".into());
        };
        // Under Yama's ptrace_scope=1 a child may not reach into its parent; the peer
        // needs to (pidfd_getfd of this side's segments, CMA into this side's memory), so
        // allow exactly this child. Without Yama the call fails and nothing is needed.
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::set_ptracer(rustix::process::PTracer::ProcessID(pid));
        }
        Ok((
            PeerProcess { child },
            OwnedFd::from(stdout),
            OwnedFd::from(stdin),
        ))
    }

    /// Waits up to `timeout` for the peer to exit by itself, then kills it.
    fn wait(mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) if st.success() => return Ok(()),
                Ok(Some(st)) => return Err(format!("the peer process failed ({st})")),
                Ok(None) if Instant::now() >= deadline => {
                    return Err("the peer process did not exit; killed it".into())
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(format!("waiting for the peer process: {e}")),
            }
        }
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn print_result(r: &PerfResult, cli: &Cli) {
    let text = if cli.json {
        format!("{}\n", report::json_line(r))
    } else {
        report::table(r, cli.final_only)
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn initiator(cli: &Cli) -> Result<(), Failure> {
    let plan = plan(cli)?;
    // Reading the configuration registers uct's variables; then misspelt UCX_* variables
    // are reported, once (here, not again by the peer process).
    if let Err(e) = uct::IfaceConfig::from_env() {
        return Err(Failure::Run(format!("invalid UCX_* configuration: {e}")));
    }
    ucs::config::warn_unknown();
    // Start the peer before pinning: a child inherits its parent's CPU mask.
    let (peer, rd, wr) = PeerProcess::spawn(cli, &plan).map_err(Failure::Run)?;
    if let Some(&cpu) = plan.cpus.first() {
        perf::affinity::pin_to_cpu(cpu)
            .map_err(|e| Failure::Run(format!("cannot pin to cpu {cpu}: {e}")))?;
    }
    let chan = LineChannel::new(rd, wr);
    let transport = &plan.tests[0].transport;
    let mut side = UctPeer::connect(transport, chan, plan.timeout)
        .map_err(|e| Failure::Run(format!("cannot connect to the peer process: {e}")))?;
    for p in &plan.tests {
        let r = side
            .run(p)
            .map_err(|e| Failure::Run(format!("{} ({} bytes) failed: {e}", p.test, p.size)))?;
        print_result(&r, cli);
    }
    side.finish()
        .map_err(|e| Failure::Run(format!("cannot stop the peer process: {e}")))?;
    peer.wait(plan.timeout).map_err(Failure::Run)
}

fn responder(cli: &Cli) -> Result<(), Failure> {
    // Die with the parent: a stray responder must not outlive a killed initiator. The
    // parent may have died before this line; then we were re-parented already.
    let parent = rustix::process::getppid();
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::Kill));
    if rustix::process::getppid() != parent || parent.is_none() {
        return Err(Failure::Run("the initiator is gone".into()));
    }
    if let Some(cpu) = cli.peer_cpu {
        perf::affinity::pin_to_cpu(cpu)
            .map_err(|e| Failure::Run(format!("peer: cannot pin to cpu {cpu}: {e}")))?;
    }
    let dup = |fd: std::os::fd::BorrowedFd<'_>| fd.try_clone_to_owned();
    let (rd, wr) = match (
        dup(std::io::stdin().as_fd()),
        dup(std::io::stdout().as_fd()),
    ) {
        (Ok(r), Ok(w)) => (r, w),
        _ => return Err(Failure::Run("peer: no stdin/stdout channel".into())),
    };
    let timeout = Duration::from_secs_f64(cli.timeout.clamp(0.001, 86_400.0));
    let mut side = UctPeer::connect(&cli.transport, LineChannel::new(rd, wr), timeout)
        .map_err(|e| Failure::Run(format!("peer: cannot connect to the initiator: {e}")))?;
    match side.serve() {
        Ok(()) => Ok(()),
        // The initiator reports its own failure; the responder only follows it out.
        Err(Status::ConnectionReset) => Ok(()),
        Err(e) => Err(Failure::Run(format!("peer: {e}"))),
    }
}

/// The help of `-t`, from the test table, so that a test added there shows up here.
fn test_help() -> String {
    let names: Vec<String> = perf::TESTS
        .iter()
        .map(|t| match t.aliases {
            [] => t.name.to_string(),
            a => format!("{} (or {})", t.name, a.join(", ")),
        })
        .collect();
    format!("Test: {}", names.join(", "))
}

fn parse_cli() -> Cli {
    let cmd = Cli::command().mut_arg("test", |a| a.help(test_help()));
    let matches = cmd.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    ucs::log::init();
    let cli = parse_cli();
    let r = match cli.peer_role.as_deref() {
        None => initiator(&cli),
        Some("responder") => responder(&cli),
        Some(other) => Err(Failure::Usage(format!("unknown peer role '{other}'"))),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(m)) => {
            eprintln!("rucx-perftest: error: {m}");
            eprintln!("Try 'rucx-perftest --help' for more information.");
            ExitCode::from(2)
        }
        Err(Failure::Run(m)) => {
            eprintln!("rucx-perftest: {m}");
            ExitCode::from(1)
        }
    }
}
