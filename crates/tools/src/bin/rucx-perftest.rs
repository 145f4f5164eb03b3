//! rucx-perftest: ucx_perftest's tests on rucx, between two processes.
//!
//! Four ways to run:
//!
//! - no peer named (the default): the process starts its peer itself, running its own
//!   executable again with a hidden `--peer-role responder`, talks to it over the child's
//!   stdin and stdout (one JSON message per line, see `perf::channel`), and kills and reaps
//!   it on any error;
//! - `--server [-p PORT]`: waits for one client on a TCP port, serves the tests it asks
//!   for, and exits when the client is done;
//! - `--connect HOST[:PORT]` (or ucx_perftest's `HOST -p PORT`): connects to such a server
//!   and runs the tests, printing the results. The two sides trade addresses and test
//!   parameters over the TCP connection; the test traffic goes over whatever transport
//!   the test uses (ucp picks one; today only shared memory exists, so the two sides must
//!   be on one host, and a server on another host fails with "unreachable");
//! - `-l` (`--loopback`, as ucx_perftest's `-l`): one process, whose ucp endpoint leads to
//!   its own worker (the `self` transport), and for transport-layer tests a uct interface
//!   whose endpoint leads to itself (`self` unless `-x` names another); each iteration is
//!   the send and the receive (or the put, get, atomic) in this process. This is the mode
//!   in which instructions per operation are counted (`scripts/instr-count`).
//!
//! Every wait for the peer is bounded by `--timeout`.
//!
//! Collective tests (`-t allreduce`, ... with `-N RANKS`, `-A ALG`, `--sizes LIST`) run
//! over a team of processes instead; see the `coll_mode` module.
//!
//! Exit status: 0 on success, 1 when a test fails, 2 for a bad command line.

#![forbid(unsafe_code)]

use clap::{CommandFactory, FromArgMatches, Parser};
use perf::channel::LineChannel;
use perf::{report, Api, Initiator, Layout, Params, PerfResult, TestId};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[path = "../perftest/coll_mode.rs"]
mod coll_mode;
#[path = "../perftest/mt.rs"]
mod mt;

/// Command line, with ucx_perftest's option letters where it has them.
#[derive(Parser, Debug)]
#[command(
    name = "rucx-perftest",
    version,
    about = "Measure rucx performance (ucx_perftest's tests)",
    after_help = "Without -t, runs a short suite: the protocol-layer tests (tag_lat 8 B and \
                  4 KiB, tag_bw 64 KiB and 1 MiB, tag_mr 8 B), then transport-layer tests over \
                  shm (am_lat, am_bw, put_lat, put_bw, get_bw), between this process and a \
                  peer process it starts (or the server named with --connect).\n\n\
                  Layers: am_lat, am_bw, put_lat, put_bw, get_lat and get_bw exist on both \
                  layers. With -x TRANSPORT they are the transport-layer (uct) tests over that \
                  transport; without -x, the protocol-layer (ucp) tests, like every other test \
                  but ucx_perftest's \"get\" (ucp picks the transport; UCX_TLS restricts it, \
                  and UCX_RMA_PATH=auto|direct|cma|am chooses how put, get and atomics reach \
                  the peer's memory; results report it as rma_path). The JSON's \"api\" says \
                  which layer ran.\n\n\
                  Loopback (-l): one process, the endpoint connected to its own worker \
                  (ucp's self transport); transport-layer tests on an interface connected \
                  to itself (-x, default self).\n\n\
                  Server/client mode: run `rucx-perftest --server` on one side and \
                  `rucx-perftest --connect HOST [-t TEST ...]` (or `rucx-perftest HOST ...`) \
                  on the other; the client chooses the tests and prints the results."
)]
struct Cli {
    /// Test to run (the list comes from perf's test table at run time).
    #[arg(short = 't', long = "test", value_name = "TEST")]
    test: Option<String>,
    /// Transport of transport-layer tests (shm; posix, sysv, mm and cma name it too; self
    /// with -l) [default: shm; with -l, self]. Selects the transport layer for the names both layers have
    /// (am_lat, am_bw, put_lat, put_bw, get_lat, get_bw); without it they are
    /// protocol-layer tests. Protocol-layer tests take their transport from UCX_TLS.
    #[arg(short = 'x', long = "tl", value_name = "TRANSPORT")]
    transport: Option<String>,
    /// Device of transport-layer tests [default: the transport's first].
    #[arg(short = 'd', long = "device", value_name = "DEVICE")]
    device: Option<String>,
    /// Message size in bytes (suffixes k, m, g); for AM short it includes the 8-byte header.
    #[arg(short = 's', long = "size", value_name = "SIZE", value_parser = parse_size)]
    size: Option<usize>,
    /// Measured iterations [default: 10000; the suite has its own].
    #[arg(short = 'n', long = "iterations", value_name = "N")]
    iterations: Option<u64>,
    /// Warm-up iterations, not measured [default: 1000; the suite has its own].
    #[arg(short = 'w', long = "warmup", value_name = "N")]
    warmup: Option<u64>,
    /// Data layout: short, bcopy or zcopy (transport-layer tests) [default: the cheapest
    /// the size fits]; contig (protocol-layer tests).
    #[arg(short = 'D', long = "layout", value_name = "LAYOUT")]
    layout: Option<String>,
    /// CPUs: the first for this process, the second for the local peer (e.g. "0,1"), or
    /// "off" [default: the first two CPUs this process may use; with --server/--connect,
    /// off].
    #[arg(short = 'c', long = "cpus", value_name = "CPUS")]
    cpus: Option<String>,
    /// Protocol layer: tag_bw/tag_mr: most sends in flight and receives posted ahead;
    /// put_bw, get_bw, am_bw, stream_bw, fadd_mr: most requests in flight; add_mr: most
    /// posts between flushes when ucp emulates them [default: 32]. Transport layer: am_bw: credit window in
    /// messages; put_bw/get_bw: operations between flushes [default: 0, none].
    #[arg(short = 'O', long = "outstanding", value_name = "N")]
    window: Option<u32>,
    /// tag_bw / tag_mr: report completions through a completion queue instead of
    /// request handles (both sides).
    #[arg(long, conflicts_with = "callbacks")]
    cq: bool,
    /// tag_bw / tag_mr: the responder keeps -O receives posted ahead of their messages
    /// (MPI's message-rate pattern). By default it receives as ucx_perftest does: one
    /// receive at a time, taken in the call when its message is already there.
    #[arg(long)]
    prepost: bool,
    /// tag_bw / tag_mr: report completions through a closure per operation instead of
    /// request handles (both sides).
    #[arg(long)]
    callbacks: bool,
    /// Print only the final numbers (ucx_perftest's -f).
    #[arg(short = 'f', long = "final-only")]
    final_only: bool,
    /// Print one JSON object per result instead of the table.
    #[arg(long)]
    json: bool,
    /// Longest wait for the peer, in seconds (also for a server waiting for its client;
    /// on the responder of one-sided tests (put, get, atomics) this bounds a whole test).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    timeout: f64,
    /// Wait for a client on a TCP port (-p) and serve the tests it asks for.
    #[arg(long, conflicts_with_all = ["connect", "host"])]
    server: bool,
    /// Connect to a server started with --server: HOST or HOST:PORT.
    #[arg(long, value_name = "HOST[:PORT]", conflicts_with = "host")]
    connect: Option<String>,
    /// TCP port of server/client mode [default: 13337].
    #[arg(short = 'p', long = "port", value_name = "PORT")]
    port: Option<u16>,
    /// Loopback: one process, the endpoint connected to its own worker (transport-layer
    /// tests: to its own interface, over -x, default self).
    #[arg(short = 'l', long, conflicts_with_all = ["server", "connect", "host", "port"])]
    loopback: bool,
    /// Server to connect to, as in `ucx_perftest HOST` (same as --connect HOST).
    /// Application threads per process, all on one worker in thread mode multi (or
    /// serialized), each with its own endpoint and tag (tag_lat, tag_mr, tag_bw).
    #[arg(short = 'T', long = "threads", value_name = "N")]
    threads: Option<usize>,
    /// Thread mode of the worker with -T: single (one thread only), serialized or multi.
    #[arg(short = 'M', long = "thread-mode", value_name = "MODE")]
    thread_mode: Option<String>,
    /// With -T: one more thread per process progresses the worker; the application
    /// threads only post and test their operations.
    #[arg(long)]
    progress_thread: bool,
    #[arg(value_name = "HOST")]
    host: Option<String>,
    /// Collective tests: processes in the team [default: 2]. Under a PMIx launcher
    /// (mpirun, srun --mpi=pmix) the launcher's count applies.
    #[arg(short = 'N', long = "ranks", value_name = "N")]
    ranks: Option<usize>,
    /// Collective tests: the algorithm (see docs/collectives.md) [default: the selection
    /// table, or UCX_COLL_<NAME>_ALG].
    #[arg(short = 'A', long = "alg", value_name = "ALG")]
    alg: Option<String>,
    /// Collective tests: message sizes, comma-separated (e.g. 8,4k,64k,1m) [default: -s,
    /// or 8]. Bytes of the vector (allreduce, reduce, bcast), of one rank's block
    /// (allgather, gather, scatter, reduce_scatter), of one block per peer (alltoall).
    #[arg(long = "sizes", value_name = "LIST", conflicts_with = "size")]
    sizes: Option<String>,
    /// Collective tests: network namespaces to spread the ranks over, in blocks (rank r
    /// in the (r x count / N)-th); rank 0 must already run in the first (`ip netns exec`).
    #[arg(long = "netns", value_name = "LIST")]
    netns: Option<String>,
    /// Internal: the rank of a collective-test process started by rank 0.
    #[arg(long, hide = true, value_name = "RANK")]
    coll_rank: Option<usize>,
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

/// The suite run when no test is named: the protocol-layer tests first, then short
/// transport-layer ones; a few seconds in all over shared memory.
fn default_suite() -> Vec<Params> {
    let p = |test, size, layout, iterations, warmup| Params {
        size,
        layout,
        iterations,
        warmup,
        ..Params::new(test)
    };
    vec![
        p(TestId::TagLat, 8, None, 500_000, 50_000),
        p(TestId::TagLat, 4096, None, 200_000, 20_000),
        p(TestId::TagBw, 64 << 10, None, 40_000, 4_000),
        p(TestId::TagBw, 1 << 20, None, 4_000, 400),
        p(TestId::TagMr, 8, None, 2_000_000, 200_000),
        p(TestId::AmLat, 8, Some(Layout::Short), 100_000, 10_000),
        p(TestId::AmBw, 8, Some(Layout::Short), 1_000_000, 100_000),
        p(TestId::PutLat, 8, Some(Layout::Short), 100_000, 10_000),
        p(TestId::PutBw, 1 << 20, Some(Layout::Zcopy), 2_000, 200),
        p(TestId::GetBw, 1 << 20, Some(Layout::Zcopy), 2_000, 200),
    ]
}

/// Where the peer is.
enum Mode {
    /// A process this one starts.
    Local,
    /// Wait for a client on this port.
    Server(u16),
    /// Connect to a server.
    Client { host: String, port: u16 },
    /// No peer: the endpoint leads to this process's own worker.
    Loopback,
}

/// What the program does, from the command line.
struct Plan {
    mode: Mode,
    tests: Vec<Params>,
    cpus: Vec<usize>,
    timeout: Duration,
}

fn mode(cli: &Cli) -> Result<Mode, Failure> {
    let default_port = |given: Option<u16>| given.unwrap_or(perf::net::DEFAULT_PORT);
    if cli.port == Some(0) {
        return usage("-p: the port must be between 1 and 65535");
    }
    if cli.loopback {
        return Ok(Mode::Loopback);
    }
    if cli.server {
        return Ok(Mode::Server(default_port(cli.port)));
    }
    let target = match (&cli.connect, &cli.host) {
        (Some(c), _) => c,
        (None, Some(h)) => h,
        (None, None) => {
            if cli.port.is_some() {
                return usage("-p needs --server, or a server to connect to (--connect HOST)");
            }
            return Ok(Mode::Local);
        }
    };
    let (host, port) = perf::net::parse_host_port(target).map_err(Failure::Usage)?;
    let port = match (port, cli.port) {
        (Some(a), Some(b)) if a != b => {
            return usage(format!("two ports given: {target} and -p {b}"));
        }
        (Some(a), _) => a,
        (None, b) => default_port(b),
    };
    Ok(Mode::Client { host, port })
}

fn plan(cli: &Cli) -> Result<Plan, Failure> {
    let mode = mode(cli)?;
    let loopback = matches!(mode, Mode::Loopback);
    // Loopback reaches its own interface: the self transport unless -x says otherwise.
    let tl_name = cli
        .transport
        .as_deref()
        .unwrap_or(if loopback { "self" } else { "shm" });
    let Some(tl) = uct::Transport::from_name(tl_name) else {
        return usage(format!(
            "transport '{tl_name}' is not available (available: {}; posix, sysv, mm and cma \
             name shm)",
            uct::Transport::ALL
                .iter()
                .filter(|t| **t != uct::Transport::SelfTl)
                .map(|t| t.name())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    if tl == uct::Transport::SelfTl && !loopback {
        return usage("transport 'self' only reaches its own process; use shm, or -l");
    }
    if let Some(dev) = &cli.device {
        // Both sides open the transport's first device; naming it is allowed.
        let devices: Vec<String> = tl.devices().into_iter().map(|d| d.0).collect();
        if *dev != tl.device() && devices.first() != Some(dev) {
            return usage(format!(
                "device '{dev}' cannot be used with transport {} (it runs on {})",
                tl.name(),
                devices.first().map_or(tl.device(), |d| d.as_str())
            ));
        }
    }
    let layout = match cli.layout.as_deref() {
        None => None,
        Some(s) => match Layout::from_name(s) {
            Some(l) => Some(l),
            None => {
                return usage(format!(
                    "data layout '{s}' is not supported (short, bcopy, zcopy; contig for \
                     tag tests)"
                ))
            }
        },
    };
    let cpus = match cli.cpus.as_deref() {
        // Two spinning processes that the scheduler puts on one CPU measure the scheduler
        // (a ping-pong round trip becomes a time slice), so by default each gets its own.
        // A server and its client are started separately; they are pinned only on request.
        None if !matches!(mode, Mode::Local) => Vec::new(),
        None if matches!(mode, Mode::Loopback) => {
            // One process: the first CPU it may use.
            perf::affinity::allowed_cpus().into_iter().take(1).collect()
        }
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
    let timeout = Duration::from_secs_f64(cli.timeout);
    if let Mode::Server(_) = mode {
        // The client chooses the tests; a server only checks what it was given.
        if let Some(name) = &cli.test {
            perf::lookup(name).map_err(|e| Failure::Usage(e.to_string()))?;
        }
        return Ok(Plan {
            mode,
            tests: Vec::new(),
            cpus,
            timeout,
        });
    }
    let mut tests = match &cli.test {
        Some(name) => {
            // -x selects the transport layer for the names both layers have.
            let api = cli.transport.as_ref().map(|_| Api::Uct);
            let info =
                perf::registry::lookup_in(name, api).map_err(|e| Failure::Usage(e.to_string()))?;
            if info.api == Api::Ucp && cli.transport.is_some() {
                return usage(format!(
                    "-x does not apply to {} (a protocol-layer test: ucp picks the \
                     transport; restrict it with UCX_TLS)",
                    info.name
                ));
            }
            if info.api == Api::Ucp
                && layout.is_some_and(|l| l != Layout::Contig)
                && perf::registry::on_both_layers(info.name)
            {
                return usage(format!(
                    "{} without -x is the protocol-layer test, whose only layout is contig; \
                     for the transport-layer {} with -D {}, add -x shm",
                    info.name,
                    info.name,
                    layout.map_or("?", |l| l.name())
                ));
            }
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
        if p.test.info().api == Api::Uct {
            p.transport = tl.name().into();
        }
        if let Some(w) = cli.window {
            p.window = w;
        }
        p.cq = cli.cq;
        p.callbacks = cli.callbacks;
        p.prepost = cli.prepost;
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
        mode,
        tests,
        cpus,
        timeout,
    })
}

/// The peer process; killed and reaped when dropped unless it already exited.
struct PeerProcess {
    child: Child,
}

impl PeerProcess {
    /// Starts this executable as the responder; returns it with the channel's read and
    /// write descriptors (the child's stdout and stdin).
    fn spawn(plan: &Plan) -> Result<(PeerProcess, OwnedFd, OwnedFd), String> {
        PeerProcess::spawn_as("responder", &[], plan.timeout, &plan.cpus)
    }

    /// Starts this executable in peer role `role` with `extra` arguments.
    fn spawn_as(
        role: &str,
        extra: &[String],
        timeout: Duration,
        cpus: &[usize],
    ) -> Result<(PeerProcess, OwnedFd, OwnedFd), String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args(["--peer-role", role])
            .args(extra)
            .arg("--timeout")
            .arg(timeout.as_secs_f64().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(&cpu) = cpus.get(1) {
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

/// Reads the configuration of every layer, so that misspelt UCX_* variables are reported
/// once (here, not again by a peer process) and bad values stop the run early.
fn check_config() -> Result<(), Failure> {
    if let Err(e) = uct::IfaceConfig::from_env() {
        return Err(Failure::Run(format!("invalid UCX_* configuration: {e}")));
    }
    if let Err(e) = ucp::Config::from_env() {
        return Err(Failure::Run(format!("invalid UCX_* configuration: {e}")));
    }
    ucs::config::warn_unknown();
    Ok(())
}

fn pin(cpus: &[usize]) -> Result<(), Failure> {
    if let Some(&cpu) = cpus.first() {
        perf::affinity::pin_to_cpu(cpu)
            .map_err(|e| Failure::Run(format!("cannot pin to cpu {cpu}: {e}")))?;
    }
    Ok(())
}

/// Runs the plan's tests over `chan`, printing each result.
fn run_tests(cli: &Cli, plan: &Plan, chan: LineChannel, peer: &str) -> Result<(), Failure> {
    // Calibrate the clock before anything is timed (about 20 ms).
    perf::clock::init();
    let mut init = Initiator::new(chan, plan.timeout);
    for p in &plan.tests {
        let r = init
            .run(p)
            .map_err(|e| Failure::Run(format!("{} ({} bytes) failed: {e}", p.test, p.size)))?;
        print_result(&r, cli);
    }
    init.finish()
        .map_err(|e| Failure::Run(format!("cannot stop the {peer}: {e}")))
}

/// The plan of a collective test, or `None` when `-t` names no collective.
fn coll_plan(cli: &Cli) -> Result<Option<coll_mode::Plan>, Failure> {
    let Some(c) = cli.test.as_deref().and_then(perf::collective::lookup) else {
        if cli.ranks.is_some() || cli.alg.is_some() || cli.sizes.is_some() || cli.netns.is_some() {
            return usage("-N, -A, --sizes and --netns apply to the collective tests only");
        }
        return Ok(None);
    };
    if cli.server || cli.connect.is_some() || cli.host.is_some() || cli.loopback {
        return usage(
            "collective tests start their ranks themselves (-N), or run under a PMIx launcher",
        );
    }
    if cli.transport.is_some() || cli.layout.is_some() {
        return usage(
            "-x and -D do not apply to collective tests (UCX_TLS restricts the transports)",
        );
    }
    let sizes = match (&cli.sizes, cli.size) {
        (Some(l), _) => coll_mode::parse_sizes(l).map_err(Failure::Usage)?,
        (None, Some(s)) => vec![s],
        (None, None) => vec![8],
    };
    if !(cli.timeout > 0.0 && cli.timeout <= 86_400.0) {
        return usage("--timeout must be between 0 and 86400 seconds");
    }
    coll_mode::plan(
        c,
        cli.alg.as_deref(),
        sizes,
        cli.iterations,
        cli.warmup,
        cli.ranks,
        cli.cpus.as_deref(),
        Duration::from_secs_f64(cli.timeout),
        cli.json,
        cli.netns.as_deref(),
    )
    .map(Some)
}

fn initiator(cli: &Cli) -> Result<(), Failure> {
    if let Some(p) = coll_plan(cli)? {
        // The UCX_COLL_* variables are known too (coll registers them with its contexts,
        // which come after this check).
        ucs::config::register(::coll::COLL_VARS);
        check_config()?;
        return coll_mode::launch(&p);
    }
    if cli.threads.is_some() || cli.thread_mode.is_some() || cli.progress_thread {
        return mt::initiator(cli);
    }
    let plan = plan(cli)?;
    check_config()?;
    match &plan.mode {
        Mode::Local => {
            // Start the peer before pinning: a child inherits its parent's CPU mask.
            let (peer, rd, wr) = PeerProcess::spawn(&plan).map_err(Failure::Run)?;
            pin(&plan.cpus)?;
            run_tests(cli, &plan, LineChannel::new(rd, wr), "peer process")?;
            peer.wait(plan.timeout).map_err(Failure::Run)
        }
        Mode::Client { host, port } => {
            pin(&plan.cpus)?;
            let chan = perf::net::connect(host, *port, plan.timeout).map_err(Failure::Run)?;
            run_tests(cli, &plan, chan, "server")
        }
        Mode::Server(port) => server(&plan, *port),
        Mode::Loopback => loopback(cli, &plan),
    }
}

/// Runs the plan's tests in this process: protocol-layer tests on a worker with an
/// endpoint to itself, transport-layer tests on an interface with an endpoint to itself
/// (one per transport, opened when first needed).
fn loopback(cli: &Cli, plan: &Plan) -> Result<(), Failure> {
    pin(&plan.cpus)?;
    perf::clock::init();
    let mut ucp_lb: Option<perf::UcpPeer<perf::NoPeer>> = None;
    let mut uct_lb: Option<perf::UctPeer<perf::NoPeer>> = None;
    for p in &plan.tests {
        let r = match p.test.info().api {
            Api::Ucp => {
                if ucp_lb.is_none() {
                    let lb = perf::UcpPeer::loopback(plan.timeout).map_err(|e| {
                        Failure::Run(format!("cannot connect a worker to itself: {e}"))
                    })?;
                    ucp_lb = Some(lb);
                }
                ucp_lb.as_mut().map(|lb| lb.run(p))
            }
            Api::Uct => {
                if !uct_lb
                    .as_ref()
                    .is_some_and(|lb| lb.transport() == p.transport)
                {
                    let lb = perf::UctPeer::loopback(&p.transport, plan.timeout).map_err(|e| {
                        Failure::Run(format!("cannot connect {} to itself: {e}", p.transport))
                    })?;
                    uct_lb = Some(lb);
                }
                uct_lb.as_mut().map(|lb| lb.run(p))
            }
        };
        let r = r
            .unwrap_or(Err(ucs::Status::InvalidParam))
            .map_err(|e| Failure::Run(format!("{} ({} bytes) failed: {e}", p.test, p.size)))?;
        print_result(&r, cli);
    }
    Ok(())
}

/// Serves one client, then exits.
fn server(plan: &Plan, port: u16) -> Result<(), Failure> {
    pin(&plan.cpus)?;
    let listener = perf::net::listen(port).map_err(Failure::Run)?;
    let port = listener.local_addr().map_or(port, |a| a.port());
    eprintln!("rucx-perftest: waiting for a client on port {port}");
    let (chan, client) = perf::net::accept(&listener, plan.timeout).map_err(Failure::Run)?;
    drop(listener);
    eprintln!("rucx-perftest: client {client} connected");
    match perf::respond(chan, plan.timeout) {
        Ok(()) => Ok(()),
        Err(e) => Err(Failure::Run(format!("serving {client} failed: {e}"))),
    }
}

/// What every peer process does first: die with the initiator, pin itself, and take its
/// channel (stdin and stdout).
fn peer_setup(cli: &Cli) -> Result<LineChannel, Failure> {
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
    Ok(LineChannel::new(rd, wr))
}

fn responder(cli: &Cli) -> Result<(), Failure> {
    let chan = peer_setup(cli)?;
    let timeout = Duration::from_secs_f64(cli.timeout.clamp(0.001, 86_400.0));
    match perf::respond(chan, timeout) {
        Ok(()) => Ok(()),
        // The initiator reports its own failure; the responder only follows it out.
        Err(ucs::Status::ConnectionReset) => Ok(()),
        Err(e) => Err(Failure::Run(format!("peer: {e}"))),
    }
}

/// The help of `-t`, from the test table, so that a test added there shows up here.
fn test_help() -> String {
    let names = |api: Api| -> String {
        perf::TESTS
            .iter()
            .filter(|t| t.api == api)
            .map(|t| match t.aliases {
                [] => t.name.to_string(),
                a => format!("{} (or {})", t.name, a.join(", ")),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let colls: Vec<_> = perf::collective::TESTS.iter().map(|t| t.0).collect();
    format!(
        "Test. Protocol layer: {}. Transport layer (with -x; \"get\" also without): {}. \
         Collectives (with -N, -A, --sizes): {}",
        names(Api::Ucp),
        names(Api::Uct),
        colls.join(", ")
    )
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
        Some("mt-responder") => mt::responder(&cli),
        Some("coll") => match coll_plan(&cli) {
            Ok(Some(p)) => coll_mode::child(&p, cli.coll_rank.unwrap_or(0)),
            Ok(None) => Err(Failure::Usage(
                "a collective rank needs a collective test".into(),
            )),
            Err(e) => Err(e),
        },
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
