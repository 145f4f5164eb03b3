//! Runs the built `rucx-perftest` binary: two processes over shared memory, JSON output
//! checked for its fields and for sane values (no timing thresholds: performance belongs
//! to benchmarks), and a bad command line that must fail cleanly.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs rucx-perftest with `args`, killing it if it runs longer than [`LIMIT`].
fn perftest(args: &[&str]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rucx-perftest"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rucx-perftest");
    // Drain both pipes in threads so a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rucx-perftest {args:?} ran longer than {LIMIT:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

fn json_results(run: &Run) -> Vec<serde_json::Value> {
    run.stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON {l}: {e}")))
        .collect()
}

fn check_result(v: &serde_json::Value, test: &str, size: u64, iterations: u64, layout: &str) {
    assert_eq!(v["test"], test, "{v}");
    assert_eq!(v["size"], size, "{v}");
    assert_eq!(v["iterations"], iterations, "{v}");
    assert_eq!(v["transport"], "shm", "{v}");
    assert_eq!(v["layout"], layout, "{v}");
    let num = |k: &str| {
        v[k].as_f64()
            .unwrap_or_else(|| panic!("{k} missing or not a number: {v}"))
    };
    for k in [
        "latency_p50_us",
        "latency_avg_us",
        "latency_overall_us",
        "bandwidth_mbps",
        "bandwidth_overall_mbps",
        "msg_rate",
    ] {
        let x = num(k);
        assert!(x.is_finite() && x >= 0.0, "{k} = {x}: {v}");
    }
    // Positive and consistent with each other, whatever the machine's speed.
    assert!(num("latency_avg_us") > 0.0 && num("msg_rate") > 0.0, "{v}");
    assert!(
        num("latency_overall_us") >= num("latency_avg_us") * 0.999,
        "{v}"
    );
    let mb = size as f64 / (1u64 << 20) as f64;
    let bw_from_rate = num("msg_rate") * mb;
    assert!(
        (bw_from_rate - num("bandwidth_mbps")).abs() <= 1e-6 * bw_from_rate.max(1.0),
        "{v}"
    );
}

#[test]
fn am_lat_json() {
    let run = perftest(&["-t", "am_lat", "-s", "8", "-n", "2000", "--json"]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    let r = json_results(&run);
    assert_eq!(r.len(), 1, "stdout: {}", run.stdout);
    check_result(&r[0], "am_lat", 8, 2000, "short");
}

#[test]
fn put_bw_zcopy_json() {
    let run = perftest(&[
        "-t", "put_bw", "-s", "65536", "-n", "200", "-D", "zcopy", "--json",
    ]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    let r = json_results(&run);
    assert_eq!(r.len(), 1, "stdout: {}", run.stdout);
    check_result(&r[0], "put_bw", 65536, 200, "zcopy");
}

#[test]
fn table_output_has_final_line() {
    let run = perftest(&["-t", "get_lat", "-s", "64", "-n", "500", "-w", "10"]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    let fin: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("Final:"))
        .collect();
    assert_eq!(fin.len(), 1, "{}", run.stdout);
    let cols: Vec<&str> = fin[0].split_whitespace().collect();
    assert_eq!(cols.len(), 9, "{}", fin[0]);
    assert_eq!(cols[1], "500");
    assert!(run.stdout.contains("get_lat"));
}

#[test]
fn bogus_test_fails_with_a_message() {
    let run = perftest(&["-t", "nope"]);
    assert!(matches!(run.code, Some(c) if c != 0), "exit {:?}", run.code);
    assert!(run.stderr.contains("unknown test 'nope'"), "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}

#[test]
fn unsupported_modes_fail_with_a_message() {
    for args in [
        &["--server"][..],
        &["-t", "tag_lat"],
        &["-x", "tcp"],
        &["-t", "am_lat", "-D", "short", "-s", "100000"],
    ] {
        let run = perftest(args);
        assert!(
            matches!(run.code, Some(c) if c != 0),
            "{args:?}: exit {:?}",
            run.code
        );
        assert!(!run.stderr.trim().is_empty(), "{args:?}: no message");
        assert!(!run.stderr.contains("panicked"), "{args:?}: {}", run.stderr);
    }
}
