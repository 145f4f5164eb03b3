//! The UCT C API (`crates/capi/src/uct_api`) from C: the struct layouts of Debian's UCX
//! headers against the Rust mirrors, a two-process program built against UCX's `uct.h`
//! that checks every byte of AM/put/get/atomics over posix, sysv, cma and tcp, and Debian's
//! `ucx_perftest` UCT tests (server + client) on rucx's library.

mod common;

use common::{compile, have, have_ucx_headers, lib_dir, run, run_on_rucx, Headers, SERIAL};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(90);

fn have_uct_headers() -> bool {
    have_ucx_headers() && std::path::Path::new("/usr/include/uct/api/uct.h").exists()
}

#[test]
fn uct_struct_layouts_match_ucx() {
    if !have_uct_headers() {
        common::require::skip("ucx", "UCX headers (libucx-dev) not installed: skipped");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let prog = compile("uct_layout.c", Headers::Ucx);
    let out = run_on_rucx(&prog, &[], LIMIT);
    let c: Vec<&str> = out.lines().collect();
    let rust = rucx_capi::uct_api::ffi::layout_lines();
    assert!(rust.len() > 50, "too few layout facts");
    for l in &rust {
        assert!(
            c.contains(&l.as_str()),
            "Rust mirror says `{l}`, UCX's headers do not:\n{out}"
        );
    }
}

/// Runs `c-tests/uct_transfer.c` over `tl`/`dev`; returns its output.
fn transfer(tl: &str, dev: &str) -> String {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let prog = compile("uct_transfer.c", Headers::Ucx);
    let mut cmd = Command::new(&prog);
    cmd.args([tl, dev]).env("LD_LIBRARY_PATH", lib_dir());
    let o = run(cmd, LIMIT);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "uct_transfer {tl} {dev} failed ({}):\n{out}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains(&format!("UCT TEST SUCCESS {tl}/{dev}")),
        "{out}"
    );
    out
}

fn assert_checked(out: &str, what: &[&str]) {
    for w in what {
        assert!(
            out.contains(&format!("checked {w}\n")),
            "`{w}` was not checked:\n{out}"
        );
    }
}

#[test]
fn uct_transfer_over_posix_and_sysv() {
    if !have_uct_headers() {
        common::require::skip("ucx", "UCX headers (libucx-dev) not installed: skipped");
        return;
    }
    for tl in ["posix", "sysv"] {
        let out = transfer(tl, "memory");
        assert_checked(
            &out,
            &[
                "am_short",
                "am_bcopy",
                "am_zcopy",
                "put_short",
                "put_bcopy",
                "put_zcopy",
                "get_bcopy",
                "get_zcopy",
                "atomics",
            ],
        );
    }
}

#[test]
fn uct_transfer_over_tcp() {
    if !have_uct_headers() {
        common::require::skip("ucx", "UCX headers (libucx-dev) not installed: skipped");
        return;
    }
    let out = transfer("tcp", "lo");
    assert_checked(&out, &["am_short", "am_bcopy", "am_zcopy", "put_zcopy"]);
    // tcp offers no put short/bcopy, get or atomics (as UCX's tcp).
    assert!(!out.contains("checked put_short") && !out.contains("checked get_"));
}

#[test]
fn uct_transfer_over_cma() {
    if !have_uct_headers() {
        common::require::skip("ucx", "UCX headers (libucx-dev) not installed: skipped");
        return;
    }
    let out = transfer("cma", "memory");
    assert_checked(&out, &["put_zcopy", "get_zcopy"]);
    assert!(
        !out.contains("checked am_"),
        "cma offers no active messages:\n{out}"
    );
}

#[test]
fn uct_self_pending_progress_array_and_misuse() {
    if !have_uct_headers() {
        common::require::skip("ucx", "UCX headers (libucx-dev) not installed: skipped");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let prog = compile("uct_api.c", Headers::Ucx);
    let out = run_on_rucx(&prog, &[], LIMIT);
    assert_checked(
        &out,
        &["self", "pending and flush", "progress array", "misuse"],
    );
    assert!(out.contains("UCT API SUCCESS"), "{out}");
}

// ----- UCX's programs -------------------------------------------------------------------

/// The names the library exports.
fn exported_symbols() -> std::collections::HashSet<String> {
    let lib = common::cdylib();
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm (binutils)");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect()
}

/// UCX's `uct_hello_world.c` (shipped by Debian's libucx-dev, not part of rucx), built with
/// UCX's headers and run as server and client on rucx with short, bcopy and zcopy active
/// messages over posix and tcp.
#[test]
fn ucx_uct_hello_world_example_runs_on_rucx() {
    let src = std::path::Path::new("/usr/share/doc/libucx-dev/examples/uct_hello_world.c");
    if !src.exists() || !have("nm") {
        common::require::skip(
            "ucx",
            &format!("{} (libucx-dev) or nm not found: skipped", src.display()),
        );
        return;
    }
    let have_syms = exported_symbols();
    let missing: Vec<&str> = ["ucs_async_context_create", "ucs_async_context_destroy"]
        .into_iter()
        .filter(|n| !have_syms.contains(*n))
        .collect();
    assert!(missing.is_empty(), "uct_hello_world needs {missing:?}");
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = common::bin_dir().join("uct_hello_world-ucx");
    let o = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&out)
        .arg(src)
        .arg(format!("-L{}", lib_dir().display()))
        .args(["-luct", "-lucs"])
        .output()
        .expect("cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (tl, dev) in [("posix", "memory"), ("tcp", "lo")] {
        for mode in ["-i", "-b", "-z"] {
            let p = port().to_string();
            let mut server = Command::new(&out);
            server
                .args(["-t", tl, "-d", dev, mode, "-p", &p])
                .env("LD_LIBRARY_PATH", lib_dir());
            let srv = std::thread::spawn(move || run(server, LIMIT));
            std::thread::sleep(Duration::from_millis(500));
            let mut client = Command::new(&out);
            client
                .args(["-t", tl, "-d", dev, mode, "-p", &p, "-n", "127.0.0.1"])
                .env("LD_LIBRARY_PATH", lib_dir());
            let c = run(client, LIMIT);
            let s = srv.join().expect("server thread");
            for (who, r) in [("client", &c), ("server", &s)] {
                assert!(
                    r.status.success(),
                    "uct_hello_world {who} {tl} {mode} failed:\n{}\n{}",
                    String::from_utf8_lossy(&r.stdout),
                    String::from_utf8_lossy(&r.stderr)
                );
            }
            let text = String::from_utf8_lossy(&s.stdout);
            assert!(
                text.contains("UCT TEST SUCCESS") && text.contains("ABCDEFGHIJKLMNO"),
                "server {tl} {mode}:\n{text}"
            );
        }
    }
}

// ----- Debian's ucx_perftest ---------------------------------------------------------------

/// The `ucs_*`/`uct_*` symbols `ucx_perftest` imports that the library does not export
/// (empty when it can run on rucx).
fn perftest_missing_symbols() -> Vec<String> {
    let exported = exported_symbols();
    // Functions it imports, and data it takes by copy relocation (`ucs_global_opts` is
    // defined in the program's bss and initialized from the library's copy).
    let o = Command::new("nm")
        .args(["-D", "/usr/bin/ucx_perftest"])
        .output()
        .expect("nm (binutils)");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["U", n] => Some(n.to_string()),
                [_, "B" | "D", n] => Some(n.to_string()),
                _ => None,
            }
        })
        .filter(|n| n.starts_with("ucs_") || n.starts_with("uct_") || n.starts_with("ucp_"))
        .filter(|n| !exported.contains(n))
        .collect()
}

/// A TCP port for ucx_perftest's address exchange (its server takes a port number, so
/// port 0 cannot be used): different per call, below the kernel's ephemeral range, and
/// free when chosen.
fn port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let first =
        (std::process::id() % 2000) * 4 + u32::from(NEXT.fetch_add(1, Ordering::Relaxed) % 4);
    (0..8000u32)
        .map(|k| (21000 + (first + k * 13) % 8000) as u16)
        .find(|&p| std::net::TcpListener::bind(("0.0.0.0", p)).is_ok())
        .expect("a free port")
}

/// Runs one ucx_perftest UCT test as server + client on rucx; returns the client's
/// "Final:" row.
fn perftest(test: &str, tl: &str, dev: &str, extra: &[&str]) -> String {
    let p = port().to_string();
    let mut args = vec![
        "-t", test, "-x", tl, "-d", dev, "-n", "2000", "-w", "100", "-p", &p,
    ];
    args.extend_from_slice(extra);
    let mut server = Command::new("ucx_perftest");
    server
        .args(&args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let server = std::thread::spawn(move || run(server, LIMIT));
    // The server listens once it is up; the client retries connecting for a while.
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    let client = loop {
        let mut c = Command::new("ucx_perftest");
        c.arg("127.0.0.1")
            .args(&args)
            .env("LD_LIBRARY_PATH", lib_dir());
        let o = run(c, LIMIT);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        if !o.status.success() && err.contains("connect") && t0.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(300));
            continue;
        }
        break o;
    };
    let server = server.join().expect("server thread");
    let cout = String::from_utf8_lossy(&client.stdout).into_owned();
    let report = format!(
        "ucx_perftest {test} -x {tl} -d {dev} {extra:?}\n--- client ({})\n{cout}\n{}\n--- server ({})\n{}\n{}",
        client.status,
        String::from_utf8_lossy(&client.stderr),
        server.status,
        String::from_utf8_lossy(&server.stdout),
        String::from_utf8_lossy(&server.stderr)
    );
    assert!(
        client.status.success() && server.status.success(),
        "{report}"
    );
    let row = cout
        .lines()
        .find(|l| l.trim_start().starts_with("Final:"))
        .unwrap_or_else(|| panic!("no results row:\n{report}"))
        .to_string();
    // "Final:  iterations  latency..." : the iteration count is the first number.
    let iters: u64 = row
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("bad results row `{row}`:\n{report}"));
    assert!(iters > 0, "{report}");
    row
}

#[test]
fn ucx_perftest_uct_tests_run_on_rucx() {
    if !have("ucx_perftest") || !have("nm") {
        common::require::skip("ucx", "ucx_perftest or nm not installed: skipped");
        return;
    }
    let missing = perftest_missing_symbols();
    assert!(
        missing.is_empty(),
        "ucx_perftest imports symbols rucx does not export: {missing:?}"
    );
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let cases: &[(&str, &str, &str, &[&str])] = &[
        ("am_lat", "posix", "memory", &[]),
        ("am_bw", "posix", "memory", &[]),
        ("put_lat", "posix", "memory", &[]),
        ("put_bw", "posix", "memory", &[]),
        ("get", "posix", "memory", &["-D", "bcopy"]),
        ("am_lat", "posix", "memory", &["-D", "shortiov"]),
        ("am_bw", "posix", "memory", &["-D", "zcopy", "-s", "1024"]),
        ("get", "posix", "memory", &["-D", "zcopy"]),
        ("add_lat", "posix", "memory", &[]),
        ("fadd", "posix", "memory", &[]),
        ("cswap", "posix", "memory", &[]),
        ("am_lat", "sysv", "memory", &["-D", "bcopy"]),
        ("put_bw", "cma", "memory", &["-D", "zcopy", "-s", "65536"]),
        ("get", "cma", "memory", &["-D", "zcopy", "-s", "65536"]),
        ("am_lat", "tcp", "lo", &[]),
        ("am_bw", "tcp", "lo", &["-D", "bcopy", "-s", "1024"]),
        ("put_lat", "tcp", "lo", &["-D", "zcopy"]),
        ("put_bw", "tcp", "lo", &["-D", "zcopy", "-s", "4096"]),
    ];
    for (test, tl, dev, extra) in cases {
        let row = perftest(test, tl, dev, extra);
        eprintln!("{test} {tl}/{dev} {extra:?}: {row}");
    }
    // Loopback (`-l`): one process, an endpoint to its own interface.
    for (test, tl, dev) in [("am_lat", "self", "memory0"), ("put_bw", "posix", "memory")] {
        let mut c = Command::new("ucx_perftest");
        c.args([
            "-l", "-t", test, "-x", tl, "-d", dev, "-n", "2000", "-w", "100",
        ])
        .env("LD_LIBRARY_PATH", lib_dir());
        let o = run(c, LIMIT);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.lines().any(|l| l.trim_start().starts_with("Final:")),
            "ucx_perftest -l {test} -x {tl} ({}):\n{out}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
