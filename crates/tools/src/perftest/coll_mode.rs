//! rucx-perftest's collective mode: forms a team of N processes and runs
//! `perf::collective` over it; only rank 0 prints.
//!
//! How the team is formed:
//! - by default this process is rank 0 and starts ranks 1..N as copies of itself (the
//!   same command line plus the hidden `--peer-role coll --coll-rank R`). Each child writes
//!   its worker address to its stdout as one hex line; rank 0 answers every child with the
//!   whole list, in rank order, on its stdin. Children die with rank 0 (parent-death
//!   signal); rank 0 kills and reaps them when anything fails; every wait is bounded by
//!   `--timeout`. With `--netns A,B,...` the ranks run in those network namespaces, in
//!   blocks (the seed's experiment: 8 ranks, 2 per namespace), started through
//!   `ip netns exec`;
//! - under a PMIx launcher (`mpirun`, `srun --mpi=pmix`: `PMIX_RANK` is set) and with the
//!   `pmix` feature, every process is started by the launcher and the addresses travel
//!   through PMIx put, commit, fence and get (`perf::pmix`).
//!
//! Afterwards the ranks are symmetric: each runs every size of the plan in the same order.

use super::Failure;
use perf::collective::{self, CollParams};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Upper bound of `-N` (the tag space allows more; this keeps a typo from forking a host
/// to death).
const MAX_RANKS: usize = 256;

/// What the collective mode does, from the command line.
pub struct Plan {
    pub tests: Vec<CollParams>,
    pub ranks: usize,
    pub timeout: Duration,
    pub json: bool,
    /// CPU of each rank, by rank (empty: no pinning).
    pub cpus: Vec<usize>,
    /// Network namespaces the ranks are spread over in blocks (rank r in
    /// `netns[r * len / ranks]`; rank 0 must run in the first already). Empty: none.
    pub netns: Vec<String>,
}

/// The sizes of a comma-separated list (`8,4k,1m`).
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|x| super::parse_size(x.trim()))
        .collect::<Result<Vec<_>, _>>()
}

/// The plan of a collective test.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    coll: coll::CollType,
    alg: Option<&str>,
    sizes: Vec<usize>,
    iterations: Option<u64>,
    warmup: Option<u64>,
    ranks: Option<usize>,
    cpus: Option<&str>,
    timeout: Duration,
    json: bool,
    netns: Option<&str>,
) -> Result<Plan, Failure> {
    let alg = match alg {
        None => None,
        Some(a) => match coll::Alg::from_name(a).filter(|&x| coll.accepts(x)) {
            Some(x) => Some(x),
            None => {
                let names: Vec<_> = coll.algorithms().iter().map(|a| a.name()).collect();
                return Err(Failure::Usage(format!(
                    "-A {a}: not an algorithm of {} (those are: {})",
                    collective::name(coll),
                    names.join(", ")
                )));
            }
        },
    };
    let ranks = ranks.unwrap_or(2);
    if ranks == 0 || ranks > MAX_RANKS {
        return Err(Failure::Usage(format!(
            "-N must be between 1 and {MAX_RANKS}"
        )));
    }
    if iterations == Some(0) {
        return Err(Failure::Usage("-n must be at least 1".into()));
    }
    let tests = sizes
        .into_iter()
        .map(|size| {
            let mut p = CollParams::new(coll, size);
            p.alg = alg;
            if let Some(n) = iterations {
                p.iterations = n;
                p.warmup = n / 10;
            }
            if let Some(w) = warmup {
                p.warmup = w;
            }
            p
        })
        .collect();
    let allowed = perf::affinity::allowed_cpus();
    let cpus = match cpus {
        Some("off") => Vec::new(),
        Some(s) => match perf::affinity::parse_cpu_list(s) {
            Some(v) if v.len() >= ranks => v,
            _ => {
                return Err(Failure::Usage(format!(
                    "-c {s}: give one CPU per rank ({ranks}), or off"
                )))
            }
        },
        // Pinned ranks that share a CPU wait for each other's time slices; with more
        // ranks than CPUs the scheduler places them better.
        None if ranks <= allowed.len() => allowed[..ranks].to_vec(),
        None => Vec::new(),
    };
    let netns: Vec<String> = netns
        .map(|l| l.split(',').map(|n| n.trim().to_string()).collect())
        .unwrap_or_default();
    if netns.iter().any(|n| n.is_empty() || n.contains('/')) || netns.len() > ranks {
        return Err(Failure::Usage(format!(
            "--netns: at most {ranks} namespace names, comma-separated"
        )));
    }
    Ok(Plan {
        tests,
        ranks,
        timeout,
        json,
        cpus,
        netns,
    })
}

/// The other ranks, started by rank 0; killed and reaped when dropped unless they exited.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

impl Children {
    /// Waits up to `timeout` for every child to exit by itself.
    fn wait(mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        for (i, c) in self.0.iter_mut().enumerate() {
            loop {
                match c.try_wait() {
                    Ok(Some(st)) if st.success() => break,
                    Ok(Some(st)) => return Err(format!("rank {} failed ({st})", i + 1)),
                    Ok(None) if Instant::now() >= deadline => {
                        return Err(format!("rank {} did not exit; killed it", i + 1))
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                    Err(e) => return Err(format!("waiting for rank {}: {e}", i + 1)),
                }
            }
        }
        Ok(())
    }
}

/// A coll context over a worker configured from the environment (`UCX_TLS`, ...).
fn context() -> Result<coll::Context, Failure> {
    // Before ucp reads the environment, so that UCX_COLL_* are not reported as unknown.
    ucs::config::register(coll::COLL_VARS);
    let ctx = ucp::Context::new(ucp::Features::TAG | ucp::Features::RMA)
        .map_err(|e| Failure::Run(format!("cannot create a ucp context: {e}")))?;
    let worker = ucp::Worker::new(&ctx, ucp::ThreadMode::Single)
        .map_err(|e| Failure::Run(format!("cannot create a ucp worker: {e}")))?;
    coll::Context::new(worker)
        .map_err(|e| Failure::Run(format!("cannot create a coll context: {e}")))
}

/// Rank 0 of a local team: starts the other ranks, trades addresses, runs the plan.
pub fn launch(plan: &Plan) -> Result<(), Failure> {
    if let Some(r) = pmix_launch(plan) {
        return r;
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::Run(format!("cannot find own executable: {e}")))?;
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let mut children = Children(Vec::new());
    let (tx, rx) = mpsc::channel();
    for r in 1..plan.ranks {
        let mut cmd = match plan.netns.get(r * plan.netns.len() / plan.ranks) {
            Some(ns) => {
                // ip(8) enters the namespace and execs the rank: still our child.
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let mut child = cmd
            .args(&args)
            .args(["--peer-role", "coll", "--coll-rank", &r.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Failure::Run(format!("cannot start rank {r}: {e}")))?;
        let out = child.stdout.take();
        children.0.push(child);
        let tx = tx.clone();
        // One reader per child, so that a silent child costs the deadline, not a hang.
        std::thread::spawn(move || {
            let mut line = String::new();
            let got = out.map(|o| BufReader::new(o).read_line(&mut line));
            let _ = tx.send((r, got.is_some_and(|g| g.is_ok_and(|n| n > 0)), line));
        });
    }
    drop(tx);
    pin(plan, 0)?;
    let mut cx = context()?;
    let mut addrs = vec![Vec::new(); plan.ranks];
    addrs[0] = cx.address().to_vec();
    let deadline = Instant::now() + plan.timeout;
    for _ in 1..plan.ranks {
        let left = deadline.saturating_duration_since(Instant::now());
        let (r, ok, line) = rx.recv_timeout(left).map_err(|_| {
            Failure::Run("the other ranks did not send their addresses in time".into())
        })?;
        match perf::channel::hex_decode(line.trim()) {
            Some(a) if ok && !a.is_empty() => addrs[r] = a,
            _ => return Err(Failure::Run(format!("rank {r} sent no address"))),
        }
    }
    let list: Vec<String> = addrs.iter().map(|a| perf::channel::hex_encode(a)).collect();
    let list = list.join(",") + "\n";
    for (i, c) in children.0.iter_mut().enumerate() {
        let sent = c
            .stdin
            .as_mut()
            .map(|s| s.write_all(list.as_bytes()).and_then(|()| s.flush()));
        if !matches!(sent, Some(Ok(()))) {
            return Err(Failure::Run(format!(
                "cannot send the addresses to rank {}",
                i + 1
            )));
        }
    }
    run_plan(plan, &mut cx, addrs, 0)?;
    drop(cx);
    children.wait(plan.timeout).map_err(Failure::Run)
}

/// A rank started by [`launch`].
pub fn child(plan: &Plan, rank: usize) -> Result<(), Failure> {
    let parent = rustix::process::getppid();
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::Kill));
    if rustix::process::getppid() != parent || parent.is_none() {
        return Err(Failure::Run("rank 0 is gone".into()));
    }
    if rank == 0 || rank >= plan.ranks {
        return Err(Failure::Usage(format!("--coll-rank {rank} out of range")));
    }
    pin(plan, rank)?;
    let mut cx = context()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", perf::channel::hex_encode(cx.address()))
        .and_then(|()| out.flush())
        .map_err(|e| Failure::Run(format!("rank {rank}: cannot send the address: {e}")))?;
    drop(out);
    // Rank 0 answers within its timeout or dies, which kills this process.
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| Failure::Run(format!("rank {rank}: no address list: {e}")))?;
    let addrs: Option<Vec<Vec<u8>>> = line
        .trim()
        .split(',')
        .map(perf::channel::hex_decode)
        .collect();
    let addrs = addrs
        .filter(|a| a.len() == plan.ranks)
        .ok_or_else(|| Failure::Run(format!("rank {rank}: bad address list")))?;
    run_plan(plan, &mut cx, addrs, rank)
}

fn pin(plan: &Plan, rank: usize) -> Result<(), Failure> {
    match plan.cpus.get(rank) {
        Some(&cpu) => perf::affinity::pin_to_cpu(cpu)
            .map_err(|e| Failure::Run(format!("rank {rank}: cannot pin to cpu {cpu}: {e}"))),
        None => Ok(()),
    }
}

/// Every rank: the team, then the plan's tests in order; rank 0 prints.
fn run_plan(
    plan: &Plan,
    cx: &mut coll::Context,
    addrs: Vec<Vec<u8>>,
    rank: usize,
) -> Result<(), Failure> {
    let team = cx
        .team_create(addrs, rank)
        .map_err(|e| Failure::Run(format!("rank {rank}: cannot form the team: {e}")))?;
    if rank == 0 && !plan.json {
        print!("{}", collective::table_header());
    }
    for p in &plan.tests {
        let r = collective::run(cx, team, p).map_err(|e| {
            Failure::Run(format!(
                "rank {rank}: {} ({} bytes) failed: {e}",
                collective::name(p.coll),
                p.size
            ))
        })?;
        if rank == 0 {
            let line = if plan.json {
                collective::json_line(&r) + "\n"
            } else {
                collective::table_line(&r)
            };
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(line.as_bytes());
            let _ = out.flush();
        }
    }
    cx.team_destroy(team)
        .map_err(|e| Failure::Run(format!("rank {rank}: team_destroy: {e}")))
}

/// Under a PMIx launcher: this process's rank and the team through PMIx. `None` when not
/// launched by PMIx (or built without the `pmix` feature).
#[cfg(feature = "pmix")]
fn pmix_launch(plan: &Plan) -> Option<Result<(), Failure>> {
    std::env::var_os("PMIX_RANK")?;
    Some((|| {
        let px = perf::pmix::Pmix::init().map_err(|e| Failure::Run(format!("PMIx_Init: {e}")))?;
        // The launcher places and binds the processes (its --bind-to); no pinning here.
        let (rank, size) = (px.rank(), px.size());
        let mut cx = context()?;
        let addrs = px
            .allgather("rucx.perftest.addr", cx.address(), plan.timeout)
            .map_err(|e| Failure::Run(format!("rank {rank}: PMIx address exchange: {e}")))?;
        if addrs.len() != size {
            return Err(Failure::Run(format!(
                "rank {rank}: PMIx gave {} addresses",
                addrs.len()
            )));
        }
        run_plan(plan, &mut cx, addrs, rank)?;
        drop(cx);
        px.fence()
            .map_err(|e| Failure::Run(format!("rank {rank}: PMIx_Fence: {e}")))
    })())
}

#[cfg(not(feature = "pmix"))]
fn pmix_launch(_: &Plan) -> Option<Result<(), Failure>> {
    // Every process of the job would otherwise start a team of its own.
    std::env::var_os("PMIX_RANK").map(|_| {
        Err(Failure::Run(
            "launched by PMIx (PMIX_RANK is set) but built without the pmix feature".into(),
        ))
    })
}
