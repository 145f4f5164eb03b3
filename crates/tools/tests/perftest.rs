//! Runs the built `rucx-perftest` binary: two processes over shared memory (a peer it
//! starts itself, or a server and a client over TCP), JSON output checked for its fields
//! and for sane values (no timing thresholds: performance belongs to benchmarks), and bad
//! command lines that must fail cleanly.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs rucx-perftest with `args`, killing it if it runs longer than [`LIMIT`].
fn perftest(args: &[&str]) -> Run {
    perftest_env(args, &[])
}

/// [`perftest`] with extra environment variables.
fn perftest_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    run_limited(env!("CARGO_BIN_EXE_rucx-perftest"), args, env)
}

/// Runs `program` (a launcher of rucx-perftest) with `args`, within [`LIMIT`].
#[cfg(feature = "pmix")]
fn perftest_cmd(program: &str, args: &[&str]) -> Run {
    run_limited(program, args, &[])
}

fn run_limited(program: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {program}: {e}"));
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
            panic!("{program} {args:?} ran longer than {LIMIT:?}; killed");
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
    // Only the protocol layer has the contig layout.
    let api = if layout == "contig" { "ucp" } else { "uct" };
    check_result_api(v, test, api, size, iterations, layout);
}

fn check_result_api(
    v: &serde_json::Value,
    test: &str,
    api: &str,
    size: u64,
    iterations: u64,
    layout: &str,
) {
    assert_eq!(v["test"], test, "{v}");
    assert_eq!(v["api"], api, "{v}");
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
    let run = perftest(&[
        "-t", "am_lat", "-x", "shm", "-s", "8", "-n", "2000", "--json",
    ]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    let r = json_results(&run);
    assert_eq!(r.len(), 1, "stdout: {}", run.stdout);
    check_result(&r[0], "am_lat", 8, 2000, "short");
}

#[test]
fn put_bw_zcopy_json() {
    let run = perftest(&[
        "-t", "put_bw", "-x", "shm", "-s", "65536", "-n", "200", "-D", "zcopy", "--json",
    ]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    let r = json_results(&run);
    assert_eq!(r.len(), 1, "stdout: {}", run.stdout);
    check_result(&r[0], "put_bw", 65536, 200, "zcopy");
}

#[test]
fn table_output_has_final_line() {
    let run = perftest(&[
        "-t", "get_lat", "-x", "shm", "-s", "64", "-n", "500", "-w", "10",
    ]);
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
        &["-t", "tag_sync_bw"][..],
        &["-x", "ib"],
        &["-d", "mlx5_0:1"],
        &["-t", "am_lat", "-x", "shm", "-D", "short", "-s", "100000"],
        // Without -x, put_lat is the protocol-layer test: contig only.
        &["-t", "put_lat", "-D", "zcopy"],
        &["-t", "fadd_lat", "-s", "16"],
        &["-t", "add_mr", "-x", "shm"],
        &["-t", "tag_lat", "-x", "shm"],
        &["-t", "tag_bw", "-D", "zcopy"],
        &["-p", "5000"],
        &["--connect", "host:1:2:x"],
        &["--server", "--connect", "localhost"],
        &["--connect", "localhost:5000", "-p", "5001"],
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

#[test]
fn tag_tests_json() {
    for (test, size, n) in [
        ("tag_lat", 8, 2000),
        ("tag_sync_lat", 100, 1000),
        ("tag_bw", 65536, 300),
        ("tag_bw", 1 << 20, 50),
        ("tag_mr", 8, 20000),
    ] {
        let (s, n_s) = (size.to_string(), n.to_string());
        let run = perftest(&["-t", test, "-s", &s, "-n", &n_s, "-w", "10", "--json"]);
        assert_eq!(run.code, Some(0), "{test}: stderr: {}", run.stderr);
        let r = json_results(&run);
        assert_eq!(r.len(), 1, "stdout: {}", run.stdout);
        check_result(&r[0], test, size, n, "contig");
    }
}

/// The protocol-layer RMA, atomic, AM and stream tests through the binary, with the path
/// ucp took to the peer's memory; then the RMA paths forced with UCX_RMA_PATH.
#[test]
fn ucp_rma_amo_am_stream_json() {
    for (test, size, n, path) in [
        ("put_lat", 8, 2000, Some("direct")),
        ("get_bw", 1 << 20, 100, Some("direct")),
        ("fadd_lat", 8, 2000, Some("direct")),
        ("add_mr", 4, 20000, Some("direct")),
        ("am_lat", 8, 2000, None),
        ("stream_bw", 65536, 300, None),
        ("put_signal_lat", 8, 2000, Some("direct")),
        ("put_signal_lat", 100_000, 300, Some("direct")),
    ] {
        let (s, n_s) = (size.to_string(), n.to_string());
        let run = perftest(&["-t", test, "-s", &s, "-n", &n_s, "-w", "10", "--json"]);
        assert_eq!(run.code, Some(0), "{test}: stderr: {}", run.stderr);
        let r = json_results(&run);
        assert_eq!(r.len(), 1, "stdout: {}", run.stdout);
        check_result_api(&r[0], test, "ucp", size, n, "contig");
        assert_eq!(r[0]["rma_path"].as_str(), path, "{}", r[0]);
    }
    for (test, env, path) in [
        ("put_bw", "cma", "cma"),
        ("get_lat", "am", "am"),
        ("swap_lat", "am", "am"),
        ("fadd_mr", "cma", "am"),
        ("put_signal_lat", "am", "am"),
        ("put_signal_lat", "cma", "cma"),
    ] {
        let run = perftest_env(
            &["-t", test, "-n", "500", "-w", "10", "--json"],
            &[("UCX_RMA_PATH", env)],
        );
        assert_eq!(run.code, Some(0), "{test} {env}: stderr: {}", run.stderr);
        let r = json_results(&run);
        check_result_api(&r[0], test, "ucp", 8, 500, "contig");
        assert_eq!(r[0]["rma_path"], path, "{}", r[0]);
    }
}

/// The names both layers have: the transport layer with -x, the protocol layer without;
/// the table's banner says which.
#[test]
fn shared_names_pick_the_layer() {
    let run = perftest(&["-t", "put_bw", "-s", "4096", "-n", "300", "-f"]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    assert!(
        run.stdout
            .contains("# put_bw (put bandwidth / message rate, protocol layer)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("rma path direct"), "{}", run.stdout);
    let run = perftest(&[
        "-t", "put_bw", "-x", "shm", "-s", "4096", "-n", "300", "--json",
    ]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    let r = json_results(&run);
    assert_eq!(
        (r[0]["api"].as_str(), r[0].get("rma_path")),
        (Some("uct"), None)
    );
    // ucx_perftest's name of the protocol-layer get test.
    let run = perftest(&["-t", "ucp_get", "-n", "300", "--json"]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    check_result_api(&json_results(&run)[0], "get_bw", "ucp", 8, 300, "contig");
}

/// A TCP port nobody listens on (at the moment of the call).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A `rucx-perftest --server`, killed when dropped unless it exited.
struct Server {
    child: Child,
    stderr: mpsc::Receiver<String>,
}

impl Server {
    /// Starts a server on a free port and waits until it listens; returns the port too.
    /// A port found free may be taken by another socket before the server binds it (tests
    /// run in parallel): then the server exits, and another port is tried.
    fn start_any() -> (u16, Server) {
        let mut why = String::new();
        for _ in 0..3 {
            let port = free_port();
            match Server::start(port) {
                Ok(s) => return (port, s),
                Err(e) => why = e,
            }
        }
        panic!("the server did not start listening: {why}");
    }

    /// Starts a server on `port` and waits until it listens.
    fn start(port: u16) -> Result<Server, String> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rucx-perftest"))
            .args(["--server", "-p", &port.to_string(), "--timeout", "30"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server");
        let err = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let server = Server { child, stderr: rx };
        let deadline = Instant::now() + LIMIT;
        let mut said = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match server.stderr.recv_timeout(left) {
                Ok(l) if l.contains("waiting for a client") => return Ok(server),
                Ok(l) => said.push(l),
                Err(e) => return Err(format!("{e}: {}", said.join("\n"))),
            }
        }
    }

    /// Waits for the server to exit by itself; its exit code.
    fn wait(mut self) -> Option<i32> {
        let deadline = Instant::now() + LIMIT;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stderr(&self) -> String {
        self.stderr.try_iter().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn server_and_client_over_tcp() {
    // --connect HOST:PORT
    let (port, server) = Server::start_any();
    let target = format!("127.0.0.1:{port}");
    let run = perftest(&[
        "--connect",
        &target,
        "-t",
        "tag_lat",
        "-n",
        "1000",
        "--json",
    ]);
    assert_eq!(
        run.code,
        Some(0),
        "client stderr: {}\nserver stderr: {}",
        run.stderr,
        server.stderr()
    );
    let r = json_results(&run);
    assert_eq!(r.len(), 1, "stdout: {}", run.stdout);
    check_result(&r[0], "tag_lat", 8, 1000, "contig");
    assert_eq!(server.wait(), Some(0));

    // ucx_perftest's style: HOST -p PORT; a transport test after a protocol test.
    let (port, server) = Server::start_any();
    let p = port.to_string();
    let run = perftest(&[
        "127.0.0.1",
        "-p",
        &p,
        "-t",
        "am_bw",
        "-x",
        "shm",
        "-n",
        "5000",
        "--json",
    ]);
    assert_eq!(run.code, Some(0), "client stderr: {}", run.stderr);
    check_result(&json_results(&run)[0], "am_bw", 8, 5000, "short");
    assert_eq!(server.wait(), Some(0));
}

#[test]
fn client_without_server_fails_cleanly() {
    let port = free_port();
    let target = format!("127.0.0.1:{port}");
    let run = perftest(&["--connect", &target, "-t", "tag_lat"]);
    assert_eq!(run.code, Some(1), "stderr: {}", run.stderr);
    assert!(run.stderr.contains("refused"), "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}

/// Two workers that share no transport (loopback only reaches its own worker): the same
/// failure as a server on another host with only intra-host transports.
#[test]
fn unreachable_peer_fails_cleanly() {
    let run = perftest_env(&["-t", "tag_lat", "-n", "100"], &[("UCX_TLS", "self")]);
    assert_eq!(run.code, Some(1), "stderr: {}", run.stderr);
    assert!(run.stderr.contains("unreachable"), "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}

#[test]
fn default_suite_prints_every_table() {
    // Fewer iterations than the suite's own (millions): the tables are what is checked,
    // and a loaded machine must not turn that into a timeout.
    let run = perftest(&["-f", "-n", "20000", "-w", "1000"]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    let banners: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with("# ")).collect();
    let names: Vec<&str> = banners
        .iter()
        .filter_map(|l| l[2..].split_whitespace().next())
        .collect();
    assert_eq!(
        names,
        [
            "tag_lat", "tag_lat", "tag_bw", "tag_bw", "tag_mr", "am_lat", "am_bw", "put_lat",
            "put_bw", "get_bw"
        ],
        "{}",
        run.stdout
    );
    // Final-only lines: 8 numbers each.
    let finals = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("    ") && l.split_whitespace().count() == 8)
        .count();
    assert_eq!(finals, 10, "{}", run.stdout);
}

/// The numbers of a table's `Final:` line (8 of them after the label), or a panic.
fn final_numbers(stdout: &str) -> Vec<f64> {
    let fin: Vec<&str> = stdout.lines().filter(|l| l.starts_with("Final:")).collect();
    assert_eq!(fin.len(), 1, "{stdout}");
    let nums: Vec<f64> = fin[0]
        .split_whitespace()
        .skip(1)
        .map(|x| {
            x.parse()
                .unwrap_or_else(|e| panic!("'{x}' in {}: {e}", fin[0]))
        })
        .collect();
    assert_eq!(nums.len(), 8, "{}", fin[0]);
    nums
}

/// Loopback (-l): every protocol-layer test in one process, on an endpoint to its own
/// worker, printed as the usual table. The tests check their data themselves (the last
/// message byte by byte, the regions of puts, the bytes of a last get, every fetched value
/// and the final word of atomics) and exit 1 on a mismatch, so exit 0 means verified.
#[test]
fn loopback_runs_every_protocol_test() {
    for (test, size) in [
        ("tag_lat", 8),
        ("tag_lat", 100_000),
        ("tag_sync_lat", 8),
        ("tag_bw", 65536),
        ("tag_mr", 8),
        ("am_lat", 8),
        ("am_bw", 300_000),
        ("stream_lat", 8),
        ("stream_bw", 4096),
        ("put_lat", 8),
        ("put_bw", 4096),
        ("get_lat", 8),
        ("ucp_get", 65536),
        ("add_lat", 8),
        ("fadd_lat", 8),
        ("ucp_fadd", 4),
        ("swap_lat", 8),
        ("cswap_lat", 4),
        ("add_mr", 8),
        ("fadd_mr", 8),
        ("put_signal_lat", 8),
    ] {
        let s = size.to_string();
        let run = perftest(&["-l", "-t", test, "-s", &s, "-n", "300", "-w", "20"]);
        assert_eq!(run.code, Some(0), "{test} {size}: stderr: {}", run.stderr);
        assert!(!run.stderr.contains("ERROR"), "{test}: {}", run.stderr);
        let banner = run
            .stdout
            .lines()
            .find(|l| l.starts_with("# "))
            .unwrap_or_else(|| panic!("{test}: no banner: {}", run.stdout));
        assert!(banner.contains("protocol layer"), "{banner}");
        assert!(banner.contains("self/"), "{banner}");
        assert!(banner.contains(&format!("{size} bytes")), "{banner}");
        let nums = final_numbers(&run.stdout);
        assert_eq!(nums[0], 300.0, "{test}: {}", run.stdout);
        for x in &nums[1..] {
            assert!(x.is_finite() && *x >= 0.0, "{test}: {}", run.stdout);
        }
        // Average latency and message rate are positive whatever the machine's speed.
        assert!(nums[2] > 0.0 && nums[6] > 0.0, "{test}: {}", run.stdout);
    }
}

/// Loopback with JSON output and the RMA path ucp resolved for its own memory; and with
/// the accesses emulated by active messages, which the same worker serves.
#[test]
fn loopback_json_and_emulated_paths() {
    for (env, path) in [(None, "direct"), (Some("am"), "am")] {
        for test in ["put_lat", "fadd_lat"] {
            let env: Vec<(&str, &str)> = env.map(|e| ("UCX_RMA_PATH", e)).into_iter().collect();
            let run = perftest_env(&["-l", "-t", test, "-n", "200", "--json"], &env);
            assert_eq!(run.code, Some(0), "{test}: stderr: {}", run.stderr);
            let r = json_results(&run);
            assert_eq!(r.len(), 1, "stdout: {}", run.stdout);
            assert_eq!(r[0]["test"], test, "{}", r[0]);
            assert_eq!(r[0]["api"], "ucp", "{}", r[0]);
            assert_eq!(r[0]["transport"], "self", "{}", r[0]);
            assert_eq!(r[0]["iterations"], 200, "{}", r[0]);
            assert_eq!(r[0]["rma_path"], path, "{}", r[0]);
        }
    }
}

/// The transport-layer tests in loopback: an interface whose endpoint leads to itself,
/// over self by default and over shm when asked, every layout; the tests check their data.
#[test]
fn loopback_runs_transport_tests() {
    for (test, size, tl, layout) in [
        ("am_lat", "8", None, "short"),
        ("am_lat", "2000", Some("shm"), "bcopy"),
        ("am_bw", "8", None, "short"),
        ("put_lat", "8", None, "short"),
        ("put_lat", "5000", Some("shm"), "bcopy"),
        ("put_bw", "65536", None, "zcopy"),
        ("get_lat", "8", None, "bcopy"),
        ("get_bw", "65536", None, "zcopy"),
    ] {
        let tl_args = tl.map(|t| ["-x", t]);
        let mut args = vec!["-l", "-t", test, "-s", size, "-D", layout];
        args.extend(["-n", "200", "-w", "10", "--json"]);
        match tl_args {
            Some(a) => args.extend(a),
            // Without -x, the names both layers have are protocol-layer tests.
            None => args.extend(["-x", "self"]),
        }
        let run = perftest(&args);
        assert_eq!(run.code, Some(0), "{args:?}: stderr: {}", run.stderr);
        let r = json_results(&run);
        assert_eq!(r.len(), 1, "stdout: {}", run.stdout);
        assert_eq!(r[0]["test"], test, "{}", r[0]);
        assert_eq!(r[0]["api"], "uct", "{}", r[0]);
        assert_eq!(r[0]["layout"], layout, "{}", r[0]);
        assert_eq!(r[0]["transport"], tl.unwrap_or("self"), "{}", r[0]);
        assert_eq!(r[0]["iterations"], 200, "{}", r[0]);
        assert!(
            r[0]["msg_rate"].as_f64().is_some_and(|x| x > 0.0),
            "{}",
            r[0]
        );
    }
    // ucx_perftest's "get" is a transport-layer test: over self in loopback.
    let run = perftest(&["-l", "-t", "get", "-s", "4096", "-n", "100", "-f"]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    assert!(
        run.stdout.contains("transport layer): self/"),
        "{}",
        run.stdout
    );
}

/// Without -t, loopback runs the default suite in one process; it refuses the two-process
/// modes with a message, and self without -l.
#[test]
fn loopback_suite_and_refusals() {
    let run = perftest(&["-l", "-f", "-n", "200", "-w", "10"]);
    assert_eq!(run.code, Some(0), "stderr: {}", run.stderr);
    let banners: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with("# ")).collect();
    let names: Vec<&str> = banners
        .iter()
        .filter_map(|l| l[2..].split_whitespace().next())
        .collect();
    assert_eq!(
        names,
        [
            "tag_lat", "tag_lat", "tag_bw", "tag_bw", "tag_mr", "am_lat", "am_bw", "put_lat",
            "put_bw", "get_bw"
        ],
        "{}",
        run.stdout
    );
    assert!(
        banners.iter().all(|b| b.contains(": self/")),
        "{}",
        run.stdout
    );
    for args in [
        &["-l", "--server"][..],
        &["-l", "--connect", "localhost"],
        &["-l", "-p", "5000"],
        &["-t", "am_lat", "-x", "self"],
    ] {
        let run = perftest(args);
        assert_eq!(run.code, Some(2), "{args:?}: stderr: {}", run.stderr);
        assert!(!run.stderr.trim().is_empty(), "{args:?}: no message");
        assert!(!run.stderr.contains("panicked"), "{args:?}: {}", run.stderr);
    }
}

/// The multithreaded mode: threads ping-pong and stream through one shared worker per
/// process, with and without a progress thread; every message is checked by the side
/// that receives it (a mismatch fails the run).
#[test]
fn threads_json() {
    for (test, extra) in [
        ("tag_lat", &["-T", "2"][..]),
        ("tag_lat", &["-T", "2", "--progress-thread"][..]),
        ("tag_mr", &["-T", "3", "-O", "8"][..]),
        (
            "tag_bw",
            &[
                "-T",
                "1",
                "-M",
                "serialized",
                "--progress-thread",
                "-s",
                "3000",
            ][..],
        ),
    ] {
        let mut args = vec!["-t", test, "-n", "2000", "-w", "100", "--json"];
        args.extend_from_slice(extra);
        let run = perftest(&args);
        assert_eq!(run.code, Some(0), "{test} {extra:?} failed: {}", run.stderr);
        let v: serde_json::Value = serde_json::from_str(run.stdout.trim()).expect("one JSON line");
        assert_eq!(v["test"], test);
        let threads: usize = extra[1].parse().unwrap();
        assert_eq!(v["threads"].as_u64(), Some(threads as u64));
        assert_eq!(v["per_thread"].as_array().map(|a| a.len()), Some(threads));
        assert!(v["msg_rate"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    }
    let bad = perftest(&["-t", "tag_lat", "-T", "2", "-M", "single"]);
    assert!(
        run_failed(&bad) && bad.stderr.contains("one thread only"),
        "{}",
        bad.stderr
    );
}

fn run_failed(r: &Run) -> bool {
    r.code != Some(0)
}

/// Checks one collective result line: the fields and consistent, positive times. The
/// data were checked by every rank (a wrong byte makes the run exit 1).
fn check_coll(v: &serde_json::Value, test: &str, ranks: u64, size: u64, iterations: u64) {
    assert_eq!(v["test"], test, "{v}");
    assert_eq!(v["ranks"], ranks, "{v}");
    assert_eq!(v["size"], size, "{v}");
    assert_eq!(v["iterations"], iterations, "{v}");
    assert!(v["alg"].as_str().is_some_and(|a| !a.is_empty()), "{v}");
    let num = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k}: {v}"));
    assert!(num("min_us") > 0.0, "{v}");
    assert!(num("min_us") <= num("avg_us") * 1.000_001, "{v}");
    assert!(num("avg_us") <= num("max_us") * 1.000_001, "{v}");
}

/// Every collective test over 3 processes (shm): sizes that do not divide by the team.
#[test]
fn collective_tests_over_three_processes() {
    for (test, _) in perf::collective::TESTS {
        let run = perftest(&[
            "-t", test, "-N", "3", "--sizes", "4,52,4k", "-n", "20", "--json",
        ]);
        assert_eq!(run.code, Some(0), "{test}: {}", run.stderr);
        let res = json_results(&run);
        let sizes: &[u64] = if *test == "barrier" {
            &[0, 0, 0]
        } else {
            &[4, 52, 4096]
        };
        assert_eq!(res.len(), 3, "{test}: {}", run.stdout);
        for (v, &s) in res.iter().zip(sizes) {
            check_coll(v, test, 3, s, 20);
        }
    }
}

/// Every alltoall and allreduce algorithm over tcp, 4 processes, forced with -A.
#[test]
fn collective_algorithms_over_tcp() {
    for (test, algs) in [
        ("alltoall", &["bruck", "direct", "pairwise", "rma"][..]),
        ("allreduce", &["recursive_doubling", "rabenseifner", "ring"]),
    ] {
        for alg in algs {
            let run = perftest_env(
                &[
                    "-t", test, "-N", "4", "-A", alg, "--sizes", "8,20000", "-n", "5", "--json",
                ],
                &[("UCX_TLS", "tcp")],
            );
            assert_eq!(run.code, Some(0), "{test} {alg}: {}", run.stderr);
            let res = json_results(&run);
            assert_eq!(res.len(), 2, "{test} {alg}: {}", run.stdout);
            for (v, s) in res.iter().zip([8, 20000]) {
                check_coll(v, test, 4, s, 5);
                assert_eq!(v["alg"], *alg, "{v}");
            }
        }
    }
}

/// The table form, and a one-rank team (on one host, so the table picks the segment).
#[test]
fn collective_table_and_single_rank() {
    let run = perftest(&["-t", "bcast", "-N", "1", "-s", "1k", "-n", "10"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let lines: Vec<_> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(lines[0].starts_with("# test"), "{}", run.stdout);
    let f: Vec<_> = lines[1].split_whitespace().collect();
    assert_eq!(
        &f[..5],
        &["bcast", "shm", "1", "1024", "10"],
        "{}",
        run.stdout
    );
}

#[test]
fn collective_command_lines_that_fail() {
    for (args, code) in [
        (&["-t", "allreduce", "-A", "bruck"][..], 2),
        (&["-t", "allreduce", "-N", "0"], 2),
        (&["-t", "allreduce", "-l"], 2),
        (&["-t", "allreduce", "-x", "shm"], 2),
        (&["-t", "allreduce", "--sizes", "8,x"], 2),
        (&["-t", "allreduce", "-N", "2", "-c", "0"], 2),
        (&["-t", "tag_lat", "-N", "2"], 2),
        // Reductions are of 4-byte integers.
        (&["-t", "allreduce", "-N", "2", "-s", "6", "-n", "2"], 1),
    ] {
        let run = perftest(args);
        assert_eq!(run.code, Some(code), "{args:?}: {}", run.stderr);
        assert!(!run.stderr.trim().is_empty(), "{args:?}: no message");
        assert!(!run.stderr.contains("panicked"), "{args:?}: {}", run.stderr);
    }
}

/// Started by a PMIx launcher that is not there: a clear failure, at once.
#[test]
fn collective_pmix_without_a_server_fails_cleanly() {
    let run = perftest_env(&["-t", "allreduce", "-n", "2"], &[("PMIX_RANK", "0")]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("PMIx") || run.stderr.contains("pmix"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}

/// Under Open MPI's mpirun (PMIx), with no MPI in the process: the ranks trade addresses
/// through PMIx and run checked collectives; only rank 0 prints.
#[cfg(feature = "pmix")]
#[test]
fn collectives_under_mpirun() {
    let have = Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        testkit::require::skip(
            "mpi",
            "mpirun not found (apt-get install openmpi-bin): skipped",
        );
        return;
    }
    let exe = env!("CARGO_BIN_EXE_rucx-perftest");
    for (np, test, tls) in [
        ("3", "alltoall", "shm"),
        ("4", "allreduce", "tcp"),
        ("2", "bcast", "shm"),
    ] {
        let run = perftest_cmd(
            "mpirun",
            &[
                "--allow-run-as-root",
                "--oversubscribe",
                "-np",
                np,
                "-x",
                &format!("UCX_TLS={tls}"),
                exe,
                "-t",
                test,
                "--sizes",
                "8,52,64k",
                "-n",
                "10",
                "--json",
            ],
        );
        assert_eq!(run.code, Some(0), "np {np} {test}: {}", run.stderr);
        let res = json_results(&run);
        assert_eq!(res.len(), 3, "np {np} {test}: {}", run.stdout);
        let np: u64 = np.parse().unwrap();
        for (v, s) in res.iter().zip([8, 52, 65536]) {
            check_coll(v, test, np, s, 10);
        }
    }
}
