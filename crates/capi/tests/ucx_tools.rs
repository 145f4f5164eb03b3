//! UCX's own tools, as Debian builds them, run unchanged on rucx's library: every UCP test
//! of `/usr/bin/ucx_perftest` (server and client processes) must print its results table,
//! `/usr/bin/io_demo` must start and connect, and every `ucp_*`/`ucs_*`/`ucm_*`/`uct_*`
//! symbol those programs and Open MPI's UCX components import must be exported by the
//! library. Skipped, with a message, when a program is not installed (ucx-utils,
//! openmpi-bin).

mod common;

use common::SERIAL;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PERFTEST: &str = "/usr/bin/ucx_perftest";
const IO_DEMO: &str = "/usr/bin/io_demo";

// ----- processes -------------------------------------------------------------------------

/// A child process in its own process group, killed (with its group) when dropped, whose
/// standard output and error are collected by reader threads.
struct Proc {
    name: String,
    child: Child,
    out: Option<std::thread::JoinHandle<String>>,
    err: Option<std::thread::JoinHandle<String>>,
}

/// What a finished (or killed) process left.
struct Finished {
    status: Option<std::process::ExitStatus>,
    timed_out: bool,
    stdout: String,
    stderr: String,
}

impl Finished {
    fn ok(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }
    fn describe(&self, who: &str) -> String {
        format!(
            "{who}: {}\n--- stdout\n{}\n--- stderr\n{}",
            if self.timed_out {
                "timed out (killed)".to_string()
            } else {
                format!("{:?}", self.status)
            },
            self.stdout,
            self.stderr
        )
    }
}

fn reader(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    })
}

impl Proc {
    fn spawn(name: &str, mut cmd: Command) -> Proc {
        use std::os::unix::process::CommandExt;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let out = child.stdout.take().map(reader);
        let err = child.stderr.take().map(reader);
        Proc {
            name: name.to_string(),
            child,
            out,
            err,
        }
    }

    fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) on the process group this Proc created (its pid); at worst
            // the group is gone already.
            unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        }
    }

    /// Waits up to `limit`, then kills the process; collects its output either way.
    fn finish(mut self, limit: Duration) -> Finished {
        let t0 = Instant::now();
        let (status, timed_out) = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break (Some(s), false),
                Ok(None) if t0.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    self.kill();
                    break (self.child.wait().ok(), true);
                }
                Err(e) => panic!("wait {}: {e}", self.name),
            }
        };
        let stdout = self.out.take().map(|h| h.join().unwrap_or_default());
        let stderr = self.err.take().map(|h| h.join().unwrap_or_default());
        Finished {
            status,
            timed_out,
            stdout: stdout.unwrap_or_default(),
            stderr: stderr.unwrap_or_default(),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
        let _ = self.child.wait();
    }
}

/// A TCP port that was free a moment ago.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    l.local_addr().expect("local addr").port()
}

/// Whether some socket listens on `port` (IPv4 or IPv6), from /proc/net/tcp{,6}: checking
/// by connecting would use up the server's one accept.
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let mut w = l.split_whitespace();
                let local = w.nth(1).unwrap_or("");
                let state = w.nth(1).unwrap_or("");
                local.ends_with(&want) && state == "0A"
            })
        })
    })
}

/// Waits until `port` listens, `server` exits, or `limit` passes.
fn wait_listening(port: u16, server: &mut Proc, limit: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if listening(port) {
            return true;
        }
        if let Ok(Some(_)) = server.child.try_wait() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn on_rucx(prog: &str) -> Command {
    let mut c = Command::new(prog);
    c.env("LD_LIBRARY_PATH", common::lib_dir())
        // The load line names the library that served the process.
        .env("UCX_LOG_LEVEL", "info");
    c
}

// ----- ucx_perftest ------------------------------------------------------------------------

/// One row of numbers from the results table.
#[derive(Debug)]
struct Row {
    iterations: u64,
    values: Vec<f64>,
}

/// The `Final:` row of ucx_perftest's table: iterations, then 50th-percentile, average and
/// overall latency (usec), average and overall bandwidth (MB/s), average and overall
/// message rate (msg/s).
fn final_row(stdout: &str) -> Option<Row> {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("Final:"))?;
    let mut nums = line
        .trim_start()
        .trim_start_matches("Final:")
        .split_whitespace();
    let iterations = nums.next()?.parse().ok()?;
    let values: Vec<f64> = nums.map(|n| n.parse().ok()).collect::<Option<_>>()?;
    (values.len() == 7).then_some(Row { iterations, values })
}

/// Runs `test` with `args` between a server and a client process on rucx; returns the
/// client's and the server's output, or a description of what went wrong.
fn perftest(test: &str, args: &[&str], env: &[(&str, &str)]) -> Result<(String, String), String> {
    const LIMIT: Duration = Duration::from_secs(60);
    // A port found free can be taken by another socket before the server binds it; then
    // the server says so and exits, and another port is tried.
    let mut attempt = 0;
    let (port, server) = loop {
        attempt += 1;
        let port = free_port().to_string();
        let mut server_cmd = on_rucx(PERFTEST);
        server_cmd
            .args(["-p", &port])
            .args(args)
            .envs(env.iter().copied());
        let mut server = Proc::spawn("ucx_perftest server", server_cmd);
        if wait_listening(port.parse().unwrap(), &mut server, Duration::from_secs(20)) {
            break (port, server);
        }
        let s = server.finish(Duration::from_secs(1));
        if attempt < 3 && s.stderr.contains("Address already in use") {
            continue;
        }
        return Err(format!(
            "{test}: the server never listened\n{}",
            s.describe("server")
        ));
    };
    let mut client_cmd = on_rucx(PERFTEST);
    client_cmd
        .args(["127.0.0.1", "-p", &port, "-t", test])
        .args(args)
        .envs(env.iter().copied());
    let c = Proc::spawn("ucx_perftest client", client_cmd).finish(LIMIT);
    let s = server.finish(if c.ok() {
        Duration::from_secs(20)
    } else {
        Duration::from_secs(1)
    });
    if !c.ok() || !s.ok() {
        return Err(format!(
            "{test} {args:?} {env:?}\n{}\n{}",
            c.describe("client"),
            s.describe("server")
        ));
    }
    for (who, f) in [("client", &c), ("server", &s)] {
        if !(f.stderr.contains("rucx") && f.stderr.contains("loaded")) {
            return Err(format!(
                "{test}: the {who} did not load rucx\n{}",
                f.describe(who)
            ));
        }
    }
    Ok((c.stdout, s.stdout))
}

/// Checks the output: the server's header names the protocol layer, and the client's
/// final row has the requested number of iterations and sane numbers.
fn check_results(test: &str, iters: u64, (out, server): (String, String)) -> Result<Row, String> {
    if !server.contains("API:          protocol layer") {
        return Err(format!("{test}: no UCP header from the server:\n{server}"));
    }
    let out = out.as_str();
    let Some(row) = final_row(out) else {
        return Err(format!("{test}: no Final row with 8 numbers in\n{out}"));
    };
    if row.iterations != iters {
        return Err(format!(
            "{test}: {} iterations instead of {iters}\n{out}",
            row.iterations
        ));
    }
    if !row.values.iter().all(|v| v.is_finite() && *v >= 0.0) {
        return Err(format!("{test}: bad numbers {row:?}\n{out}"));
    }
    // Overall latency (usec) and message rate (msg/s) of a finished run are positive.
    if row.values[2] <= 0.0 || row.values[6] <= 0.0 {
        return Err(format!("{test}: zero latency or rate {row:?}\n{out}"));
    }
    Ok(row)
}

fn have_perftest() -> bool {
    if Path::new(PERFTEST).exists() {
        return true;
    }
    common::require::skip(
        "ucx",
        &format!("{PERFTEST} not found (apt-get install ucx-utils): skipped"),
    );
    false
}

/// Two-sided tests: run in ucx_perftest's sleep mode (`-E sleep`: `ucp_worker_wait`
/// instead of busy polling), so that two processes do not starve a small machine.
const TWO_SIDED: &[(&str, &[&str])] = &[
    ("tag_lat", &[]),
    ("tag_bw", &[]),
    ("tag_sync_lat", &[]),
    ("tag_sync_bw", &[]),
    ("stream_bw", &[]),
    ("stream_lat", &[]),
    ("ucp_am_lat", &[]),
    ("ucp_am_bw", &[]),
    // Variants: rendezvous sizes, I/O vectors, wildcard tags, probe, stream data receive.
    ("tag_lat", &["-s", "300000"]),
    ("tag_bw", &["-s", "65536"]),
    ("tag_lat", &["-D", "iov,iov", "-s", "16,48,8192"]),
    ("tag_lat", &["-C"]),
    ("tag_lat", &["-U"]),
    ("ucp_am_bw", &["-s", "300000"]),
];

/// Two-sided variants that ucx_perftest cannot run in sleep mode (with UCX too: its
/// `recv_data` loop sleeps while data it has not taken yet is queued): busy-polled.
const TWO_SIDED_POLLED: &[(&str, &[&str])] = &[
    ("stream_bw", &["-r", "recv_data"]),
    ("stream_lat", &["-r", "recv_data"]),
];

/// One-sided tests: the target makes no call that could wake it (a put into mapped
/// memory raises no event), so they busy-poll (UCX cannot run them with `-E sleep`
/// either); few iterations keep that short.
const ONE_SIDED: &[&str] = &[
    "ucp_put_lat",
    "ucp_put_bw",
    "ucp_get",
    "ucp_add",
    "ucp_fadd",
    "ucp_swap",
    "ucp_cswap",
];

fn run_all(env: &[(&str, &str)], iters_two: u64, iters_one: u64) {
    let mut failures = Vec::new();
    let n2 = iters_two.to_string();
    let n1 = iters_one.to_string();
    for (test, extra) in TWO_SIDED {
        let mut args = vec!["-n", &n2, "-w", "10", "-E", "sleep"];
        args.extend_from_slice(extra);
        match perftest(test, &args, env).and_then(|o| check_results(test, iters_two, o)) {
            Ok(row) => eprintln!("{test} {extra:?} {env:?}: {row:?}"),
            Err(e) => failures.push(e),
        }
    }
    let polled = TWO_SIDED_POLLED
        .iter()
        .copied()
        .chain(ONE_SIDED.iter().map(|t| (*t, &[] as &[&str])));
    for (test, extra) in polled {
        let mut args = vec!["-n", &n1, "-w", "10"];
        args.extend_from_slice(extra);
        match perftest(test, &args, env).and_then(|o| check_results(test, iters_one, o)) {
            Ok(row) => eprintln!("{test} {extra:?} {env:?}: {row:?}"),
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} ucx_perftest runs failed:\n{}",
        failures.len(),
        failures.join("\n==========\n")
    );
}

#[test]
fn ucx_perftest_ucp_tests_report_results() {
    if !have_perftest() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    run_all(&[], 2000, 500);
}

#[test]
fn ucx_perftest_ucp_tests_over_tcp() {
    if !have_perftest() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    run_all(&[("UCX_TLS", "tcp")], 500, 100);
}

/// Loopback (`-l`): one process, one worker, an endpoint to itself; every UCP test.
#[test]
fn ucx_perftest_ucp_tests_in_loopback() {
    if !have_perftest() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut failures = Vec::new();
    let tests = TWO_SIDED
        .iter()
        .chain(TWO_SIDED_POLLED)
        .copied()
        .chain(ONE_SIDED.iter().map(|t| (*t, &[] as &[&str])));
    for (test, extra) in tests {
        let mut cmd = on_rucx(PERFTEST);
        cmd.args(["-l", "-t", test, "-n", "500", "-w", "10"])
            .args(extra);
        let r = Proc::spawn("ucx_perftest -l", cmd).finish(Duration::from_secs(60));
        let checked = if !r.ok() {
            Err(r.describe(test))
        } else if !(r.stderr.contains("rucx") && r.stderr.contains("loaded")) {
            Err(format!("{test}: rucx not loaded\n{}", r.describe(test)))
        } else {
            check_results(test, 500, (r.stdout.clone(), r.stdout.clone()))
        };
        match checked {
            Ok(row) => eprintln!("-l {test} {extra:?}: {row:?}"),
            Err(e) => failures.push(e),
        }
    }
    assert!(
        failures.is_empty(),
        "{} loopback runs failed:\n{}",
        failures.len(),
        failures.join("\n==========\n")
    );
}

#[test]
fn final_row_parses_the_table() {
    let out = "\
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
Final:                  1000      0.441     0.531     0.531       14.36      14.36     1881698     1881698
";
    let row = final_row(out).expect("row");
    assert_eq!(row.iterations, 1000);
    assert_eq!(row.values.len(), 7);
    assert_eq!(row.values[0], 0.441);
    assert_eq!(row.values[6], 1_881_698.0);
    assert!(final_row("Final: 10 1 2").is_none());
}

// ----- io_demo -----------------------------------------------------------------------------

#[test]
fn io_demo_starts_and_connects() {
    if !Path::new(IO_DEMO).exists() {
        common::require::skip(
            "ucx",
            &format!("{IO_DEMO} not found (apt-get install ucx-utils): skipped"),
        );
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let port = free_port();
    let mut server_cmd = on_rucx(IO_DEMO);
    // -q: io_demo checks the data and the transactions.
    server_cmd.args(["-p", &port.to_string(), "-q"]);
    let mut server = Proc::spawn("io_demo server", server_cmd);
    let up = wait_listening(port, &mut server, Duration::from_secs(20));
    let mut client_cmd = on_rucx(IO_DEMO);
    client_cmd.args([
        "-p",
        &port.to_string(),
        "-q",
        "-i",
        "200",
        "-c",
        "1",
        "127.0.0.1",
    ]);
    let client = up.then(|| Proc::spawn("io_demo client", client_cmd));
    let c = client.map(|c| c.finish(Duration::from_secs(30)));
    // The server runs until it is killed.
    let s = server.finish(Duration::from_millis(500));
    let lib = common::lib_dir().display().to_string();
    assert!(
        up,
        "io_demo server never listened\n{}",
        s.describe("server")
    );
    let c = c.expect("client ran");
    for (who, f) in [("client", &c), ("server", &s)] {
        assert!(
            f.stdout.contains(&format!("UCX library path: {lib}")),
            "{who} did not load rucx\n{}",
            f.describe(who)
        );
    }
    assert!(
        c.stdout.contains("Connecting to 127.0.0.1"),
        "{}",
        c.describe("client")
    );
    assert!(
        c.ok() && c.stdout.contains("Client exit with status 'OK'"),
        "{}\n{}",
        c.describe("client"),
        s.describe("server")
    );
}

// ----- symbols -----------------------------------------------------------------------------

/// The dynamic symbols `file` defines (`--defined-only`) or imports, as (name, type, size).
fn dynamic_symbols(file: &str, defined: bool) -> Vec<(String, char, u64)> {
    let out = Command::new("nm")
        .arg("-DS")
        .arg(if defined {
            "--defined-only"
        } else {
            "--undefined-only"
        })
        .arg(file)
        .output()
        .expect("nm");
    assert!(out.status.success(), "nm {file} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ty, name, size) = match f.as_slice() {
                [_, size, ty, name] => (ty, name, u64::from_str_radix(size, 16).unwrap_or(0)),
                [_, ty, name] | [ty, name] => (ty, name, 0),
                _ => return None,
            };
            let name = name.split('@').next().unwrap_or(name).to_string();
            Some((name, ty.chars().next().unwrap_or('?'), size))
        })
        .collect()
}

const PREFIXES: [&str; 4] = ["ucp_", "ucs_", "uct_", "ucm_"];

/// Open MPI's UCX components and their common library, wherever this system has them.
fn open_mpi_ucx_components() -> Vec<String> {
    let mut found = Vec::new();
    for dir in [
        "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3",
        "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi",
        "/usr/lib64/openmpi/lib/openmpi",
        "/usr/lib/x86_64-linux-gnu/openmpi/lib",
        "/usr/lib/x86_64-linux-gnu",
    ] {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("mca_") && name.contains("ucx") && name.ends_with(".so")
                || name.starts_with("libmca_common_ucx.so")
            {
                found.push(e.path().display().to_string());
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn every_imported_ucx_symbol_is_exported() {
    if !common::have("nm") {
        common::require::skip("nm", "nm not found: symbol check skipped");
        return;
    }
    let mut importers: Vec<String> = [PERFTEST, IO_DEMO]
        .iter()
        .filter(|p| Path::new(p).exists())
        .map(|p| p.to_string())
        .collect();
    importers.extend(open_mpi_ucx_components());
    if importers.is_empty() {
        common::require::skip(
            "ucx",
            "neither ucx-utils nor Open MPI's UCX components installed: skipped",
        );
        return;
    }
    let lib = common::cdylib().display().to_string();
    let ours = dynamic_symbols(&lib, true);
    let mut missing = Vec::new();
    for f in &importers {
        for (sym, _, _) in dynamic_symbols(f, false) {
            if !PREFIXES.iter().any(|p| sym.starts_with(p)) || ours.iter().any(|o| o.0 == sym) {
                continue;
            }
            missing.push(format!("{sym} ({f})"));
        }
    }
    eprintln!("checked {importers:?}");
    assert!(missing.is_empty(), "imported but not exported: {missing:?}");
}

/// A program that reads a data object of libucs directly holds a copy of it made at load
/// time (a copy relocation: its own definition, with the size UCX's headers gave it). The
/// library must define every such object with exactly that size, or the loader warns and
/// copies a part.
#[test]
fn copied_data_objects_have_ucx_sizes() {
    if !common::have("nm") {
        common::require::skip("nm", "nm not found: skipped");
        return;
    }
    let lib = common::cdylib().display().to_string();
    let ours = dynamic_symbols(&lib, true);
    let mut checked = 0;
    for f in [PERFTEST, IO_DEMO] {
        if !Path::new(f).exists() {
            continue;
        }
        for (sym, ty, size) in dynamic_symbols(f, true) {
            if !PREFIXES.iter().any(|p| sym.starts_with(p)) || !"BDR".contains(ty) {
                continue;
            }
            let o = ours.iter().find(|o| o.0 == sym);
            assert!(o.is_some(), "{f} copies {sym}, which the library lacks");
            let (_, oty, osize) = o.unwrap();
            assert!("BDR".contains(*oty), "{sym} is not data in the library");
            assert_eq!(
                *osize, size,
                "{sym}: {f} copies {size} bytes, the library has {osize}"
            );
            checked += 1;
        }
    }
    eprintln!("{checked} copied data objects checked");
    // Both programs, when installed, copy ucs_memory_type_names at least.
    if Path::new(PERFTEST).exists() {
        assert!(
            checked >= 3,
            "ucx_perftest copies ucs_global_opts and the type names"
        );
    }
}

/// With nothing asked of it, the library loads into ucx_perftest and its help lists the
/// UCP tests this file runs.
#[test]
fn ucx_perftest_loads_and_lists_the_ucp_tests() {
    if !have_perftest() {
        return;
    }
    let mut cmd = Command::new(PERFTEST);
    cmd.arg("-h").env("LD_LIBRARY_PATH", common::lib_dir());
    let out = common::run(cmd, Duration::from_secs(20));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("undefined symbol"), "{text}");
    assert!(
        !text.contains("different size"),
        "the loader saw a data object of the wrong size:\n{text}"
    );
    let listed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" - UCP "))
        .filter_map(|l| l.split(" - ").next().map(str::trim))
        .collect();
    for t in TWO_SIDED
        .iter()
        .map(|t| t.0)
        .chain(ONE_SIDED.iter().copied())
    {
        assert!(listed.contains(&t), "{t} not in the help:\n{text}");
    }
    for t in &listed {
        assert!(
            TWO_SIDED.iter().any(|x| x.0 == *t) || ONE_SIDED.contains(t),
            "ucx_perftest offers {t}, which this file does not run"
        );
    }
}

// ----- the utilities from C ----------------------------------------------------------------

/// `c-tests/ucs_util.c`, built with UCX's headers (their string-buffer and logging macros)
/// and run on rucx: string helpers, system queries, the async context, and logging
/// through the program's copy of `ucs_global_opts`; `fatal` ends in the program's own
/// fatal error, which aborts.
#[test]
fn ucs_utilities_from_c() {
    if !common::have_ucx_headers() {
        common::require::skip("ucx", "UCX's headers not installed (libucx-dev): skipped");
        return;
    }
    let prog = common::compile("ucs_util.c", common::Headers::Ucx);
    let mut cmd = Command::new(&prog);
    cmd.env("LD_LIBRARY_PATH", common::lib_dir())
        .env_remove("UCX_LOG_LEVEL");
    let out = common::run(cmd, Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("UCS UTIL OK"),
        "{}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stderr.contains("WARN  warning number 17"), "{stderr}");
    assert!(stderr.contains("DEBUG debug line shown"), "{stderr}");
    assert!(!stderr.contains("not printed"), "{stderr}");

    let mut cmd = Command::new(&prog);
    cmd.arg("fatal")
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .env_remove("UCX_LOG_LEVEL");
    let out = common::run(cmd, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stderr}");
    assert!(
        stderr.contains("Fatal: the program's own fatal error 3"),
        "{stderr}"
    );
}
