//! Helpers of the C ABI tests: the library under UCX's names, compiling C programs, and
//! running them with a time limit.
#![allow(dead_code)]

pub mod require;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Multi-process programs spin; run them one at a time within a test binary.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The cargo output directory of this test's profile (`target/debug`).
pub fn out_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/<test>-<hash>
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// The built C library (`librucx_capi.so`, SONAME `libucp.so.0`). `cargo test` does not
/// always build a package's cdylib for its integration tests (a fresh checkout has only
/// the rlib, and a library left by an earlier build may be stale), so the first caller
/// builds it with the cargo that runs the tests (a no-op when it is up to date).
pub fn cdylib() -> PathBuf {
    static BUILD: std::sync::Once = std::sync::Once::new();
    let p = out_dir().join("librucx_capi.so");
    BUILD.call_once(|| {
        let target_dir = out_dir()
            .parent()
            .map(Path::to_path_buf)
            .expect("target dir");
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "capi", "--lib", "--target-dir"])
            .arg(&target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build -p capi");
        assert!(status.success(), "cargo build -p capi failed");
    });
    assert!(
        p.exists(),
        "{} is missing: the capi library target was not built",
        p.display()
    );
    p
}

fn link(target: &Path, name: &Path) {
    // Atomic replace: make the link under a private name, then rename it over.
    // The private name is unique per call: tests of one binary run on several threads.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = name.with_extension(format!("tmp{}-{n}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).expect("symlink");
    std::fs::rename(&tmp, name).expect("rename symlink");
}

/// A directory holding the library under every name UCX's libraries have, as
/// `scripts/install` lays them out.
pub fn lib_dir() -> PathBuf {
    let dir = out_dir().join("rucx-c-abi").join("lib");
    std::fs::create_dir_all(&dir).expect("lib dir");
    let lib = cdylib();
    link(&lib, &dir.join("libucp.so.0"));
    for l in ["ucs", "uct", "ucm"] {
        link(Path::new("libucp.so.0"), &dir.join(format!("lib{l}.so.0")));
    }
    for l in ["ucp", "ucs", "uct", "ucm"] {
        link(
            Path::new(&format!("lib{l}.so.0")),
            &dir.join(format!("lib{l}.so")),
        );
    }
    dir
}

/// Where compiled test programs go.
pub fn bin_dir() -> PathBuf {
    let dir = out_dir().join("rucx-c-abi").join("bin");
    std::fs::create_dir_all(&dir).expect("bin dir");
    dir
}

/// True when `prog` is on the PATH.
pub fn have(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Which headers a C program is built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Headers {
    /// rucx's own (`include/`).
    Rucx,
    /// UCX's, from Debian's libucx-dev (`/usr/include`).
    Ucx,
}

impl Headers {
    pub fn name(self) -> &'static str {
        match self {
            Headers::Rucx => "rucx",
            Headers::Ucx => "ucx",
        }
    }
}

/// True when UCX's headers are installed (libucx-dev).
pub fn have_ucx_headers() -> bool {
    Path::new("/usr/include/ucp/api/ucp.h").exists()
}

/// Compiles `c-tests/<src>` with `compiler` against `headers`; a UCP program (`link_ucp`)
/// is linked with rucx's library, an MPI program is not (Open MPI's components load it).
/// Returns the program.
pub fn compile_with(compiler: &str, src: &str, headers: Headers, link_ucp: bool) -> PathBuf {
    let root = root();
    let stem = src.trim_end_matches(".c");
    let out = bin_dir().join(format!("{stem}-{}", headers.name()));
    let mut cmd = Command::new(compiler);
    cmd.args(["-Wall", "-Werror", "-O1", "-g", "-o"])
        .arg(&out)
        .arg(root.join("c-tests").join(src));
    if headers == Headers::Rucx {
        cmd.arg(format!("-I{}", root.join("include").display()));
    }
    if link_ucp {
        cmd.arg(format!("-L{}", lib_dir().display()))
            .args(["-lucp", "-lucs"]);
    }
    cmd.args(["-lpthread", "-ldl"]);
    let o = cmd.output().unwrap_or_else(|e| panic!("{compiler}: {e}"));
    assert!(
        o.status.success(),
        "compiling {src} with {} headers failed:\n{}",
        headers.name(),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

pub fn compile(src: &str, headers: Headers) -> PathBuf {
    compile_with("cc", src, headers, true)
}

/// Runs `cmd` to completion or `limit`, killing it (and its process group) on timeout.
pub fn run(cmd: Command, limit: Duration) -> Output {
    run_with(cmd, limit, |_| {})
}

/// [`run`], telling `started` the process id once the program runs.
pub fn run_with(mut cmd: Command, limit: Duration, started: impl FnOnce(u32)) -> Output {
    use std::os::unix::process::CommandExt;
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.process_group(0);
    let child = cmd.spawn().expect("spawn");
    let pid = child.id();
    started(pid);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    let watchdog = std::thread::spawn(move || {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if d2.load(std::sync::atomic::Ordering::Acquire) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: kill(2) on the process group we created; at worst it is gone already.
        unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        true
    });
    let out = child.wait_with_output().expect("wait");
    done.store(true, std::sync::atomic::Ordering::Release);
    let timed_out = watchdog.join().unwrap_or(false);
    assert!(
        !timed_out,
        "timed out after {limit:?}:\n--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a program on rucx's library; asserts success; returns stdout.
pub fn run_on_rucx(prog: &Path, env: &[(&str, &str)], limit: Duration) -> String {
    let mut cmd = Command::new(prog);
    cmd.env("LD_LIBRARY_PATH", lib_dir())
        .envs(env.iter().copied());
    let out = run(cmd, limit);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        prog.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A TCP port that was free a moment ago: the kernel's choice for a socket bound to port 0
/// (for programs that cannot be told to take port 0 themselves).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind(("0.0.0.0", 0))
        .and_then(|l| l.local_addr())
        .expect("bind to port 0")
        .port()
}

/// The TCP ports process `pid` listens on, as the kernel shows them: its socket inodes
/// (/proc/<pid>/fd) matched with the LISTEN entries of /proc/net/tcp and tcp6.
pub fn listening_ports(pid: u32) -> Vec<u16> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let inodes: std::collections::HashSet<String> = fds
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" || !inodes.contains(f[9]) {
                continue;
            }
            if let Some(p) = f[1]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            {
                ports.push(p);
            }
        }
    }
    ports
}

/// Waits until process `pid` listens on TCP `port` (true), or `gone` says it ended, or
/// `limit` passes (false).
pub fn await_listening(pid: u32, port: u16, limit: Duration, gone: impl Fn() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if listening_ports(pid).contains(&port) {
            return true;
        }
        if gone() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}
