//! libucc.so.1 from C: `tests/c/ucc_mpi.c`, built with `mpicc` against rucx's own
//! `include/ucc/api/ucc.h` and linked to the built library, runs under Open MPI's
//! `mpirun` on 2, 3 and 4 ranks with MPI_Iallgather as the OOB: every collective on the
//! world team, a split team and a reversed (ep-map) team, in place and not, persistent
//! and not, data checked; plus the error paths. The library is found through
//! LD_LIBRARY_PATH under its SONAME, as an installed UCC would be.
//!
//! Skipped, with a message, when Open MPI (openmpi-bin, libopenmpi-dev) is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One mpirun may take this long.
const LIMIT: Duration = Duration::from_secs(60);

fn have(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `target/<profile>`, from this test's executable (`target/<profile>/deps/c_api-…`).
fn out_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// The built library, built first if `cargo test` did not (it does not always build a
/// package's cdylib for its integration tests).
fn library() -> PathBuf {
    let p = out_dir().join("libucc.so");
    let target_dir = out_dir().parent().expect("target dir").to_path_buf();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "ucc", "--lib", "--target-dir"])
        .arg(&target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if out_dir().file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("run cargo build -p ucc");
    assert!(st.success(), "cargo build -p ucc failed");
    assert!(p.exists(), "{} is missing", p.display());
    p
}

/// A directory with the library under its installed names.
fn lib_dir() -> PathBuf {
    let dir = out_dir().join("rucx-ucc").join("lib");
    std::fs::create_dir_all(&dir).expect("lib dir");
    let lib = library();
    for name in ["libucc.so.1", "libucc.so"] {
        let l = dir.join(name);
        let _ = std::fs::remove_file(&l);
        std::os::unix::fs::symlink(&lib, &l).expect("symlink");
    }
    dir
}

fn compile(lib: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/ucc_mpi.c");
    let inc = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let exe = lib.parent().expect("rucx-ucc").join("ucc_mpi");
    let out = Command::new("mpicc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(&inc)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(lib)
        .arg("-lucc")
        .output()
        .expect("run mpicc");
    assert!(
        out.status.success(),
        "mpicc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn launch(exe: &Path, lib: &Path, np: u32, tls: Option<&str>) {
    launch_env(exe, lib, np, tls, &[]);
}

fn launch_env(exe: &Path, lib: &Path, np: u32, tls: Option<&str>, env: &[(&str, &str)]) {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(np.to_string())
        .args(["-x", "LD_LIBRARY_PATH", "-x", "RUST_LOG"])
        .arg(exe)
        .env("LD_LIBRARY_PATH", lib)
        .env("RUST_LOG", "off")
        .env_remove("UCX_TLS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(t) = tls {
        cmd.args(["-x", "UCX_TLS"]).env("UCX_TLS", t);
    }
    for (k, v) in env {
        cmd.args(["-x", k]).env(k, v);
    }
    let t0 = Instant::now();
    let child = cmd.spawn().expect("spawn mpirun");
    let pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    let watchdog = std::thread::spawn(move || {
        while t0.elapsed() < LIMIT {
            if d2.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // A hung run: end mpirun (it takes its ranks down); it has not been reaped yet,
        // so the pid is still its own.
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    let out = child.wait_with_output().expect("wait for mpirun");
    done.store(true, Ordering::Release);
    let _ = watchdog.join();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(&format!("UCC_MPI_OK np={np}")),
        "ucc_mpi on {np} ranks (UCX_TLS={tls:?}, {env:?}) failed ({}) after {:?}:\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status,
        t0.elapsed()
    );
    eprintln!("ucc_mpi np={np} tls={tls:?}: {:?}", t0.elapsed());
}

#[test]
fn every_collective_from_c_under_mpirun() {
    if !have("mpicc") || !have("mpirun") {
        eprintln!("mpicc/mpirun not found (apt-get install openmpi-bin libopenmpi-dev): skipped");
        return;
    }
    let lib = lib_dir();
    let exe = compile(&lib);
    for np in [2, 3, 4] {
        launch(&exe, &lib, np, None);
    }
    launch(&exe, &lib, 3, Some("tcp"));
    // The algorithms the table does not pick at these sizes, forced through coll's
    // variables: they reach the C API's collectives too.
    launch_env(
        &exe,
        &lib,
        4,
        None,
        &[
            ("UCX_COLL_ALLREDUCE_ALG", "ring"),
            ("UCX_COLL_ALLTOALL_ALG", "rma"),
            ("UCX_COLL_BCAST_ALG", "scatter_allgather"),
            ("UCX_COLL_ALLGATHER_ALG", "bruck"),
            ("UCX_COLL_REDUCE_ALG", "reduce_scatter_gather"),
        ],
    );
}
