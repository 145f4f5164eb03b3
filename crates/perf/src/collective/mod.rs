//! Collective benchmarks: `rucx-perftest -t allreduce|alltoall|bcast|allgather|
//! reduce_scatter|barrier|reduce|gather|scatter [-A ALG]` over a team of N processes.
//!
//! Every rank runs [`run`] with the same [`CollParams`] on a team it already joined (the
//! tool forms the team: processes it started itself, or a PMIx-launched job). One run:
//! - a checked collective: fresh buffers, one post, every byte of every rank's result
//!   compared with [`data`]'s scalar reference;
//! - the timed loop: a persistent request (init once) posted `warmup + iterations` times,
//!   one completion after another, with a barrier before the timed part; the result of
//!   the last post is checked again (its destination started as the complement of the
//!   result, so a post that wrote nothing fails);
//! - the numbers: each rank's mean time per collective, combined over the team with the
//!   team's own allreduces (mean, min and max over ranks), and whether any rank saw wrong
//!   data, so that all ranks agree on the verdict and none waits for a rank that stopped;
//!   and the largest peak resident set over the ranks (memory per process).
//!
//! Invariant: all ranks call [`run`] with the same parameters in the same order (the
//! ordering rule of collectives).

pub mod data;

use coll::{Alg, Args, Buffer, CollType, Context, DataType, Op, Team};
use serde::Serialize;
use std::time::Instant;
use ucs::Status;

/// The collective tests by name.
pub const TESTS: &[(&str, CollType)] = &[
    ("allreduce", CollType::Allreduce),
    ("alltoall", CollType::Alltoall),
    ("bcast", CollType::Bcast),
    ("allgather", CollType::Allgather),
    ("reduce_scatter", CollType::ReduceScatter),
    ("barrier", CollType::Barrier),
    ("reduce", CollType::Reduce),
    ("gather", CollType::Gather),
    ("scatter", CollType::Scatter),
];

/// The collective test named `name`.
pub fn lookup(name: &str) -> Option<CollType> {
    TESTS.iter().find(|t| t.0 == name).map(|t| t.1)
}

/// The name of a collective test.
pub fn name(c: CollType) -> &'static str {
    TESTS.iter().find(|t| t.1 == c).map_or("?", |t| t.0)
}

/// What one run does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollParams {
    pub coll: CollType,
    /// Forced algorithm (`None`: the selection table, or `UCX_COLL_<NAME>_ALG`).
    pub alg: Option<Alg>,
    /// Message size in bytes (see [`data::case`] for its meaning by collective).
    pub size: usize,
    pub iterations: u64,
    pub warmup: u64,
}

impl CollParams {
    /// Iterations and warm-up by size when not given: enough for a stable mean on this
    /// 2-core machine without making the 1 MiB runs long.
    pub fn new(coll: CollType, size: usize) -> CollParams {
        let iterations = match size {
            0..=4096 => 5000,
            4097..=65536 => 1000,
            _ => 100,
        };
        CollParams {
            coll,
            alg: None,
            size,
            iterations,
            warmup: iterations / 10,
        }
    }
}

/// The outcome of one run, the same at every rank.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CollResult {
    pub test: &'static str,
    pub alg: &'static str,
    pub ranks: usize,
    pub size: usize,
    pub iterations: u64,
    /// Mean over ranks of each rank's mean time per collective, in µs.
    pub avg_us: f64,
    /// Smallest and largest rank mean, in µs.
    pub min_us: f64,
    pub max_us: f64,
    /// Largest peak resident set over the ranks (`VmHWM`, KiB: the peak of each process
    /// so far, earlier runs included; 0 where /proc does not say).
    pub peak_rss_kib: u64,
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CollError {
    /// The parameters do not make a collective (size not fitting the datatype or team,
    /// an algorithm of another collective).
    Params(String),
    /// A collective call failed.
    Status(Status),
    /// Some rank's result differed from the reference (`rank`: this rank, or `None` when
    /// another rank reported it).
    Data { rank: Option<usize>, detail: String },
}

impl std::fmt::Display for CollError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CollError::Params(s) => write!(f, "{s}"),
            CollError::Status(s) => write!(f, "{s}"),
            CollError::Data {
                rank: Some(r),
                detail,
            } => write!(f, "wrong data at rank {r}: {detail}"),
            CollError::Data { rank: None, detail } => {
                write!(f, "wrong data at another rank: {detail}")
            }
        }
    }
}

impl From<Status> for CollError {
    fn from(s: Status) -> CollError {
        CollError::Status(s)
    }
}

/// The arguments of `case` with owned buffers.
fn args_of(p: &CollParams, case: &data::Case) -> Args<'static> {
    let mut a = Args::new(p.coll)
        .dtype(case.dt)
        .op(Op::Sum)
        .count(case.count);
    if let Some(s) = &case.src {
        a = a.src(Buffer::from_vec(s.clone()));
    }
    if let Some(d) = &case.dst {
        a = a.dst(Buffer::from_vec(d.clone()));
    }
    if let Some(alg) = p.alg {
        a = a.alg(alg);
    }
    a
}

/// Compares a finished collective's destination with the reference; the first
/// difference as text.
fn check(args: Args<'static>, case: &data::Case) -> Option<String> {
    let got = args.dst.map(Buffer::into_vec);
    match (got, &case.expect) {
        (None, None) => None,
        (Some(Some(g)), Some(e)) if g == *e => None,
        (Some(Some(g)), Some(e)) => {
            let i = g
                .iter()
                .zip(e)
                .position(|(a, b)| a != b)
                .unwrap_or(g.len().min(e.len()));
            Some(format!(
                "byte {i} of {}: {:#04x}, expected {:#04x}",
                e.len(),
                g.get(i).copied().unwrap_or(0),
                e.get(i).copied().unwrap_or(0)
            ))
        }
        _ => Some("destination missing".into()),
    }
}

/// Runs one collective on owned buffers to completion and checks it.
fn checked_once(
    cx: &mut Context,
    team: Team,
    p: &CollParams,
    case: &data::Case,
) -> Result<Option<String>, CollError> {
    let args = cx.run_owned(team, args_of(p, case))?;
    Ok(check(args, case))
}

/// Allreduce of one f64 over the team.
fn allreduce_f64(cx: &mut Context, team: Team, x: f64, op: Op) -> Result<f64, CollError> {
    let src = x.to_ne_bytes();
    let mut dst = [0u8; 8];
    cx.run(
        team,
        Args::new(CollType::Allreduce)
            .src(Buffer::from_slice(&src))
            .dst(Buffer::from_mut(&mut dst))
            .dtype(DataType::Float64)
            .op(op)
            .count(1),
    )?;
    Ok(f64::from_ne_bytes(dst))
}

/// Runs the benchmark `p` at this rank of `team` (see the module documentation).
pub fn run(cx: &mut Context, team: Team, p: &CollParams) -> Result<CollResult, CollError> {
    let (rank, size) = (cx.rank(team)?, cx.size(team)?);
    let case = data::case(p.coll, rank, size, p.size).ok_or_else(|| {
        CollError::Params(format!(
            "{}: {} bytes do not fit (reductions take a multiple of 4 bytes)",
            name(p.coll),
            p.size
        ))
    })?;
    if let Some(a) = p.alg {
        if !p.coll.accepts(a) {
            let names: Vec<_> = p.coll.algorithms().iter().map(|a| a.name()).collect();
            return Err(CollError::Params(format!(
                "{a} is not an algorithm of {} (those are: {})",
                name(p.coll),
                names.join(", ")
            )));
        }
    }
    let mut bad = checked_once(cx, team, p, &case)?;

    let req = cx.init(team, args_of(p, &case))?;
    let alg = cx.algorithm(req)?;
    let timed = (|| -> Result<f64, CollError> {
        for _ in 0..p.warmup {
            cx.post(req)?;
            cx.wait(req)?;
        }
        cx.barrier(team)?;
        let t0 = Instant::now();
        for _ in 0..p.iterations {
            cx.post(req)?;
            cx.wait(req)?;
        }
        Ok(t0.elapsed().as_secs_f64() * 1e6 / p.iterations.max(1) as f64)
    })();
    let args = cx.finalize(req)?;
    let mean = timed?;
    if bad.is_none() && p.iterations + p.warmup > 0 {
        bad = check(args, &case);
    }

    let any_bad = allreduce_f64(cx, team, f64::from(u8::from(bad.is_some())), Op::Max)?;
    if let Some(detail) = bad {
        return Err(CollError::Data {
            rank: Some(rank),
            detail,
        });
    }
    if any_bad > 0.0 {
        return Err(CollError::Data {
            rank: None,
            detail: "see that rank's report".into(),
        });
    }
    let sum = allreduce_f64(cx, team, mean, Op::Sum)?;
    let min_us = allreduce_f64(cx, team, mean, Op::Min)?;
    let max_us = allreduce_f64(cx, team, mean, Op::Max)?;
    let rss = allreduce_f64(cx, team, peak_rss_kib() as f64, Op::Max)?;
    Ok(CollResult {
        test: name(p.coll),
        alg: alg.name(),
        ranks: size,
        size: if p.coll == CollType::Barrier {
            0
        } else {
            p.size
        },
        iterations: p.iterations,
        avg_us: sum / size as f64,
        min_us,
        max_us,
        peak_rss_kib: rss as u64,
    })
}

/// This process's peak resident set in KiB (`VmHWM` of /proc/self/status), or 0.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The header of [`table_line`]'s table.
pub fn table_header() -> String {
    format!(
        "{:<15} {:<22} {:>5} {:>10} {:>8} {:>11} {:>11} {:>11} {:>9}\n",
        "# test", "algorithm", "np", "bytes", "iters", "avg_us", "min_us", "max_us", "rss_kib"
    )
}

/// One result as a table line.
pub fn table_line(r: &CollResult) -> String {
    format!(
        "{:<15} {:<22} {:>5} {:>10} {:>8} {:>11.3} {:>11.3} {:>11.3} {:>9}\n",
        r.test, r.alg, r.ranks, r.size, r.iterations, r.avg_us, r.min_us, r.max_us, r.peak_rss_kib
    )
}

/// One result as a JSON line.
pub fn json_line(r: &CollResult) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_finds_a_wrong_or_missing_byte() {
        let c = data::case(CollType::Allgather, 1, 3, 5).unwrap();
        let args = |d: Option<Vec<u8>>| {
            let a = Args::new(CollType::Allgather);
            match d {
                Some(d) => a.dst(Buffer::from_vec(d)),
                None => a,
            }
        };
        let good = c.expect.clone().unwrap();
        assert_eq!(check(args(Some(good.clone())), &c), None);
        let mut bad = good.clone();
        bad[7] ^= 1;
        let msg = check(args(Some(bad)), &c).unwrap();
        assert!(msg.starts_with("byte 7 of 15"), "{msg}");
        // The destination as posted (never written) fails too.
        assert!(check(args(c.dst.clone()), &c).is_some());
        assert!(check(args(None), &c).is_some());
        assert_eq!(lookup("reduce_scatter"), Some(CollType::ReduceScatter));
        assert_eq!(name(CollType::Barrier), "barrier");
        assert_eq!(lookup("allgatherv"), None);
    }
}
