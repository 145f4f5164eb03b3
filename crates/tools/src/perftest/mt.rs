//! rucx-perftest's multithreaded mode (`-T`, `-M`, `--progress-thread`): checks the
//! options, starts the peer process with the same options, and prints the figures of
//! `perf::threads`.

use super::{Cli, Failure, PeerProcess};
use perf::channel::LineChannel;
use perf::threads::{MtOptions, MtTest};
use std::time::Duration;
use ucp::ThreadMode;

fn options(cli: &Cli) -> Result<MtOptions, Failure> {
    let bad = |m: String| Err(Failure::Usage(m));
    let test = match cli.test.as_deref().unwrap_or("tag_lat") {
        "tag_lat" => MtTest::Lat,
        "tag_mr" | "tag_bw" => MtTest::Rate,
        t => return bad(format!("-T runs tag_lat, tag_mr or tag_bw, not {t}")),
    };
    let threads = cli.threads.unwrap_or(1);
    if !(1..=64).contains(&threads) {
        return bad(format!("-T {threads}: between 1 and 64 threads"));
    }
    let mode = match cli.thread_mode.as_deref().unwrap_or("multi") {
        "single" => ThreadMode::Single,
        "serialized" => ThreadMode::Serialized,
        "multi" => ThreadMode::Multi,
        m => return bad(format!("-M {m}: single, serialized or multi")),
    };
    if mode == ThreadMode::Single && (threads > 1 || cli.progress_thread) {
        return bad("-M single allows one thread only (no -T above 1, no progress thread)".into());
    }
    if cli.transport.is_some() || cli.layout.is_some() || cli.loopback || cli.server {
        return bad("-T takes no -x, -D, -l or --server".into());
    }
    let size = cli.size.unwrap_or(8);
    if size == 0 || size > 1 << 24 {
        return bad(format!("-s {size}: 1 B to 16 MiB with -T"));
    }
    Ok(MtOptions {
        test,
        threads,
        mode,
        progress_thread: cli.progress_thread,
        size,
        iterations: cli.iterations.unwrap_or(100_000).max(1),
        warmup: cli.warmup.unwrap_or(10_000),
        window: cli.window.unwrap_or(32).max(1),
    })
}

/// The options as the peer's command line.
fn peer_args(cli: &Cli, o: &MtOptions) -> Vec<String> {
    let mut a = vec![
        "-t".into(),
        cli.test.clone().unwrap_or_else(|| "tag_lat".into()),
        "-T".into(),
        o.threads.to_string(),
        "-M".into(),
        cli.thread_mode.clone().unwrap_or_else(|| "multi".into()),
        "-s".into(),
        o.size.to_string(),
        "-n".into(),
        o.iterations.to_string(),
        "-w".into(),
        o.warmup.to_string(),
        "-O".into(),
        o.window.to_string(),
    ];
    if o.progress_thread {
        a.push("--progress-thread".into());
    }
    a
}

fn cpus(cli: &Cli) -> Result<Vec<usize>, Failure> {
    match cli.cpus.as_deref() {
        // Unpinned by default: the threads of a process spread over the cores.
        None | Some("off") => Ok(Vec::new()),
        Some(list) => list
            .split(',')
            .map(|c| c.trim().parse::<usize>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| Failure::Usage(format!("-c {list}: a list of CPU numbers"))),
    }
}

pub(super) fn initiator(cli: &Cli) -> Result<(), Failure> {
    let o = options(cli)?;
    if cli.connect.is_some() || cli.host.is_some() {
        return Err(Failure::Usage(
            "-T runs between two local processes only".into(),
        ));
    }
    let cpus = cpus(cli)?;
    let timeout = Duration::from_secs_f64(cli.timeout.clamp(0.001, 86_400.0));
    let (peer, rd, wr) = PeerProcess::spawn_as("mt-responder", &peer_args(cli, &o), timeout, &cpus)
        .map_err(Failure::Run)?;
    if let Some(&cpu) = cpus.first() {
        perf::affinity::pin_to_cpu(cpu)
            .map_err(|e| Failure::Run(format!("cannot pin to cpu {cpu}: {e}")))?;
    }
    let mut chan = LineChannel::new(rd, wr);
    let r = perf::threads::initiator(&mut chan, &o, timeout)
        .map_err(|e| Failure::Run(format!("multithreaded test failed: {e}")))?;
    peer.wait(timeout).map_err(Failure::Run)?;
    let test = cli.test.as_deref().unwrap_or("tag_lat");
    let mode = cli.thread_mode.as_deref().unwrap_or("multi");
    let per: Vec<String> = r.per_thread.iter().map(|x| format!("{x:.0}")).collect();
    if cli.json {
        println!(
            "{{\"test\":\"{test}\",\"threads\":{},\"thread_mode\":\"{mode}\",\
             \"progress_thread\":{},\"size\":{},\"iterations\":{},\"transport\":\"{}\",\
             \"latency_us\":{:.4},\"msg_rate\":{:.0},\"per_thread\":[{}]}}",
            o.threads,
            o.progress_thread,
            o.size,
            o.iterations,
            r.transport,
            r.latency_us,
            r.rate,
            per.join(",")
        );
    } else {
        println!(
            "{test} threads={} mode={mode} progress_thread={} size={} over {}: \
             latency {:.3} us, rate {:.0} msg/s (per thread: {})",
            o.threads,
            if o.progress_thread { "yes" } else { "no" },
            o.size,
            r.transport,
            r.latency_us,
            r.rate,
            per.join(", ")
        );
    }
    Ok(())
}

pub(super) fn responder(cli: &Cli) -> Result<(), Failure> {
    let o = options(cli)?;
    let mut chan = super::peer_setup(cli)?;
    let timeout = Duration::from_secs_f64(cli.timeout.clamp(0.001, 86_400.0));
    match perf::threads::responder(&mut chan, &o, timeout) {
        Ok(()) | Err(ucs::Status::ConnectionReset) => Ok(()),
        Err(e) => Err(Failure::Run(format!("peer: {e}"))),
    }
}
