//! Other people's programs: UCX's own example programs, as Debian's libucx-dev ships
//! their sources (`/usr/share/doc/libucx-dev/examples/`), built here with UCX's headers
//! and run unchanged on rucx's library, over the default transports and over tcp alone.
//!
//! - `ucp_hello_world`: each peer-failure mode (`-e send|recv|keepalive`: one side kills
//!   itself, the survivor must hear of it through its endpoint's error handler exactly
//!   once and end as it does on UCX 1.13), in the busy-polling, `ucp_worker_wait` and
//!   event-descriptor modes.
//! - `ucp_client_server`: stream, tag and active-message modes, several sizes and
//!   iterations. Its server accepts each connection on a second worker (the listener's
//!   worker only listens) and serves clients forever; the test stops it once the client
//!   is done and checks both outputs.
//!
//! Skipped, with a message, where libucx-dev is not installed. The sources are never
//! copied into this repository.

mod common;

use common::SERIAL;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const EXAMPLES: &str = "/usr/share/doc/libucx-dev/examples";
const LIMIT: Duration = Duration::from_secs(60);

/// Builds example `name` against UCX's installed headers, linked with rucx's library
/// directory first; `None` when the sources are not installed.
fn build(name: &str) -> Option<PathBuf> {
    let src = Path::new(EXAMPLES).join(format!("{name}.c"));
    if !src.exists() {
        common::require::skip(
            "ucx",
            &format!("{} not found (libucx-dev): skipped", src.display()),
        );
        return None;
    }
    let out = common::bin_dir().join(format!("{name}-ucx-example"));
    let o = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .arg(format!("-L{}", common::lib_dir().display()))
        .args(["-lucp", "-lucs"])
        .output()
        .expect("cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    Some(out)
}

/// A port for this test process's `i`-th server: below the kernel's ephemeral range (so
/// no outgoing connection takes it meanwhile) and free when chosen.
fn port(i: u32) -> String {
    let base = 10000 + (std::process::id() * 7 + i * 131) % 10000;
    (0..10000u32)
        .map(|k| 10000 + (base - 10000 + k * 17) % 10000)
        .find(|&p| std::net::TcpListener::bind(("0.0.0.0", p as u16)).is_ok())
        .expect("a free port")
        .to_string()
}

/// A program on rucx's library, with stdout line-buffered (the examples print with
/// `printf`, and a server is stopped with a signal) and its own process group.
fn command(prog: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new("stdbuf");
    c.arg("-oL")
        .arg(prog)
        .args(args)
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .envs(env.iter().copied());
    c
}

fn text(o: &Output) -> String {
    format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A server running in the background, killed (with its process group) when dropped.
struct Server {
    child: Option<Child>,
}

impl Server {
    fn start(mut cmd: Command) -> Server {
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        Server {
            child: Some(cmd.spawn().expect("spawn server")),
        }
    }

    /// Waits up to `limit` for the server to exit by itself.
    fn wait(mut self, limit: Duration) -> Output {
        let mut child = self.child.take().expect("server");
        let t0 = Instant::now();
        while child.try_wait().expect("try_wait").is_none() {
            if t0.elapsed() > limit {
                kill_group(&child);
                let out = child.wait_with_output().expect("wait");
                panic!("server did not end in {limit:?}:\n{}", text(&out));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().expect("wait")
    }

    /// Stops the server (it serves clients forever) and returns what it printed.
    fn stop(mut self) -> Output {
        let child = self.child.take().expect("server");
        kill_group(&child);
        child.wait_with_output().expect("wait")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_group(&c);
            let _ = c.wait();
        }
    }
}

fn kill_group(c: &Child) {
    // SAFETY: kill(2) on the process group the child leads; at worst it is gone already.
    unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
}

/// Killed by a signal (a crash, or the failure a mode emulates)?
fn signal(o: &Output) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    o.status.signal()
}

#[test]
fn hello_world_peer_failure_modes() {
    let Some(prog) = build("ucp_hello_world") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut n = 0;
    for tls in ["", "tcp"] {
        let env: Vec<(&str, &str)> = if tls.is_empty() {
            vec![]
        } else {
            vec![("UCX_TLS", tls)]
        };
        for wait in [None, Some("-w"), Some("-f")] {
            for mode in ["send", "recv", "keepalive"] {
                n += 1;
                let p = port(n);
                let mut args = vec!["-e", mode, "-p", &p];
                args.extend(wait);
                let what = format!("-e {mode} {} UCX_TLS={tls}", wait.unwrap_or("-b"));
                let server = Server::start(command(&prog, &args, &env));
                std::thread::sleep(Duration::from_millis(300));
                let mut cargs = args.clone();
                cargs.extend(["-n", "127.0.0.1"]);
                let mut c = command(&prog, &cargs, &env);
                c.process_group(0);
                let client = common::run(c, LIMIT);
                let server = server.wait(LIMIT);
                // The side that emulates the failure kills itself; the other one
                // survives, hears of it once through its error handler, and ends as it
                // does on UCX 1.13 (status 255 when the failure interrupted its work,
                // 0 when it was waiting for it).
                let (dead, alive, code) = match mode {
                    "send" => (&server, &client, 255),
                    "recv" => (&client, &server, 255),
                    _ => (&client, &server, 0),
                };
                assert_eq!(signal(dead), Some(libc::SIGKILL), "{what}: {}", text(dead));
                assert_eq!(
                    signal(alive),
                    None,
                    "{what}: survivor crashed: {}",
                    text(alive)
                );
                assert_eq!(alive.status.code(), Some(code), "{what}: {}", text(alive));
                let out = String::from_utf8_lossy(&alive.stdout);
                assert_eq!(
                    out.matches("failure handler called with status").count(),
                    1,
                    "{what}: {}",
                    text(alive)
                );
            }
        }
    }
}

/// The server's and the client's outputs for one run of `ucp_client_server`. A run whose
/// server does not finish is reported (both programs' output) and tried once more; a
/// second failure fails the test.
fn client_server(prog: &Path, i: u32, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    match client_server_once(prog, i, args, env) {
        Ok(r) => r,
        Err(first) => {
            eprintln!("ucp_client_server {args:?}: STALLED, trying once more:\n{first}");
            client_server_once(prog, 1000 + i, args, env).unwrap_or_else(|e| panic!("{e}"))
        }
    }
}

fn client_server_once(
    prog: &Path,
    i: u32,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<(String, String), String> {
    let p = port(100 + i);
    let mut sargs = vec!["-p", p.as_str()];
    sargs.extend(args);
    // The server's output goes to a file, read while it runs: it prints its results and
    // then waits for the next client, forever.
    let log = common::bin_dir().join(format!("client_server-{}-{i}.out", std::process::id()));
    let file = std::fs::File::create(&log).expect("server log");
    let mut cmd = command(prog, &sargs, env);
    cmd.stdout(file.try_clone().expect("dup")).stderr(file);
    cmd.process_group(0);
    let server = Server {
        child: Some(cmd.spawn().expect("spawn server")),
    };
    // The client may start once the server listens.
    let t0 = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("Waiting for connection...")
    {
        if t0.elapsed() > LIMIT {
            return Err(format!("server {args:?} never listened"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cargs = vec!["-a", "127.0.0.1"];
    cargs.extend(&sargs);
    let mut c = command(prog, &cargs, env);
    c.process_group(0);
    let client = common::run(c, LIMIT);
    let t0 = Instant::now();
    let served = loop {
        let out = std::fs::read_to_string(&log).unwrap_or_default();
        if out.matches("Waiting for connection...").count() >= 2 {
            break out;
        }
        if t0.elapsed() > LIMIT / 2 {
            drop(server);
            let _ = std::fs::remove_file(&log);
            return Err(format!(
                "server {args:?} did not finish:\n{out}\nclient ({}):\n{}",
                client.status,
                text(&client)
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let s = server.stop();
    let _ = std::fs::remove_file(&log);
    assert!(
        client.status.success(),
        "client {args:?}: {}",
        text(&client)
    );
    assert_eq!(
        signal(&s),
        Some(libc::SIGKILL),
        "server {args:?} ended by itself: {served}"
    );
    Ok((served, String::from_utf8_lossy(&client.stdout).into_owned()))
}

#[test]
fn client_server_every_mode() {
    let Some(prog) = build("ucp_client_server") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut i = 0;
    for tls in ["", "tcp"] {
        let env: Vec<(&str, &str)> = if tls.is_empty() {
            vec![]
        } else {
            vec![("UCX_TLS", tls)]
        };
        for comm in ["stream", "tag", "am"] {
            for (size, iters) in [
                ("16", "1"),
                ("1000", "3"),
                ("100000", "5"),
                ("1000000", "2"),
            ] {
                i += 1;
                let args = ["-c", comm, "-s", size, "-i", iters];
                let (s, c) = client_server(&prog, i, &args, &env);
                let what = format!("{args:?} UCX_TLS={tls}");
                let n: usize = iters.parse().expect("iterations");
                let size: usize = size.parse().expect("size");
                // The server checks nothing itself: it prints what it received. The first
                // and last iterations are printed; each must be the test string, whole.
                let printed = if n == 1 { 1 } else { 2 };
                assert_eq!(
                    s.matches("UCX data message was received").count(),
                    printed,
                    "server {what}:\n{s}"
                );
                assert!(
                    s.contains(&format!("Server: iteration #{n}")),
                    "server {what}:\n{s}"
                );
                let expect = format!("{}.", test_string(size));
                assert_eq!(
                    s.lines().filter(|l| *l == expect).count(),
                    printed,
                    "server {what} did not print the whole string"
                );
                assert!(
                    c.contains(&format!("Client: iteration #{n}")),
                    "client {what}:\n{c}"
                );
                assert!(
                    !s.contains("failed") && !c.contains("failed"),
                    "{what}:\n{s}\n{c}"
                );
            }
        }
    }
}

/// The string `ucp_client_server` sends: the alphabet over and over, `size - 1`
/// characters and a terminating NUL (the program prints it followed by a period).
fn test_string(size: usize) -> String {
    (0..size.saturating_sub(1))
        .map(|i| (b'A' + (i % 26) as u8) as char)
        .collect()
}
