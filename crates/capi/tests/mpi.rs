//! Open MPI over rucx: MPI and OpenSHMEM programs of `c-tests/` built with `mpicc` /
//! `oshcc` and run through `scripts/ompi-rucx` (pml, osc, spml and atomic ucx on rucx's
//! library) on 2 and 4 ranks, over shared memory and with TCP only (UCX_TLS=tcp). Each
//! program checks its data and that the libucp.so.0 its process loaded is rucx.
//!
//! Skipped, with a message, when Open MPI (openmpi-bin, libopenmpi-dev) is not installed.

mod common;

use common::{compile_with, have, Headers, SERIAL};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

fn have_open_mpi(wrapper: &str) -> bool {
    let ok = have(wrapper) && have("mpirun");
    if !ok {
        common::require::skip(
            "mpi",
            &format!(
                "{wrapper}/mpirun not found (apt-get install openmpi-bin libopenmpi-dev): skipped"
            ),
        );
    }
    ok
}

/// Runs `prog` with `launcher` on `np` ranks; returns stdout after checking `expect`.
fn launch(launcher: &str, prog: &std::path::Path, np: u32, tls: Option<&str>, expect: &str) {
    launch_with(launcher, prog, &[], np, tls, expect)
}

/// `launch` with program arguments.
fn launch_with(
    launcher: &str,
    prog: &std::path::Path,
    args: &[&str],
    np: u32,
    tls: Option<&str>,
    expect: &str,
) {
    launch_env(launcher, prog, args, np, tls, &[], expect)
}

/// `launch_with` with more environment (`UCX_*` variables reach every rank).
fn launch_env(
    launcher: &str,
    prog: &std::path::Path,
    args: &[&str],
    np: u32,
    tls: Option<&str>,
    env: &[(&str, &str)],
    expect: &str,
) {
    let mut cmd = Command::new(common::root().join("scripts/ompi-rucx"));
    cmd.arg(launcher)
        .args(["-np", &np.to_string()])
        .arg(prog)
        .args(args)
        .env("RUCX_LIB_DIR", common::lib_dir())
        .env_remove("UCX_TLS")
        .envs(env.iter().copied());
    if let Some(t) = tls {
        cmd.env("UCX_TLS", t);
    }
    let out = common::run(cmd, LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(expect),
        "{} on {np} ranks (UCX_TLS={tls:?}) failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        prog.display(),
        out.status
    );
    assert!(
        stdout.contains("(rucx "),
        "the program did not report rucx's libucp:\n{stdout}"
    );
}

fn mpi_program(src: &str) -> Option<std::path::PathBuf> {
    have_open_mpi("mpicc").then(|| compile_with("mpicc", src, Headers::Ucx, false))
}

#[test]
fn mpi_point_to_point_and_collectives() {
    let Some(prog) = mpi_program("mpi_p2p.c") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for np in [2, 4] {
        launch(
            "mpirun",
            &prog,
            np,
            None,
            &format!("all passed on {np} ranks"),
        );
    }
    launch("mpirun", &prog, 2, Some("tcp"), "all passed on 2 ranks");
}

#[test]
fn mpi_one_sided() {
    let Some(prog) = mpi_program("mpi_rma.c") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for np in [2, 4] {
        launch(
            "mpirun",
            &prog,
            np,
            None,
            &format!("all passed on {np} ranks"),
        );
    }
    launch("mpirun", &prog, 4, Some("tcp"), "all passed on 4 ranks");
}

/// Dynamic windows: memory attached at any time after `MPI_Win_create_dynamic`, several
/// regions, detach and re-attach, put/get/atomics checked byte by byte. Part 1 of the
/// program (two regions attached in increasing address order) makes Open MPI 4.1 hand
/// `ucp_ep_rkey_unpack` the empty key; it is skipped over TCP, where what Open MPI reads
/// instead is whatever the heap holds (see the program).
#[test]
fn mpi_dynamic_windows() {
    let Some(prog) = mpi_program("mpi_rma_dynamic.c") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for np in [2, 4] {
        launch(
            "mpirun",
            &prog,
            np,
            None,
            &format!("all passed on {np} ranks"),
        );
    }
    launch_with(
        "mpirun",
        &prog,
        &["no-hole"],
        2,
        Some("tcp"),
        "all passed on 2 ranks",
    );
}

/// Passive-target synchronisation while the window's owner sleeps outside MPI, over TCP
/// (where osc ucx's lock and atomics are executed by the owner's CPU): with
/// `UCX_RUCX_PROGRESS_THREAD=y` the origin's `MPI_Win_unlock` completes during the sleep,
/// without it only after. The program checks the data and the time.
#[test]
fn mpi_passive_target_progress_thread() {
    let Some(prog) = mpi_program("mpi_rma_passive.c") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for (thread, expect) in [("y", "during"), ("n", "after")] {
        launch_env(
            "mpirun",
            &prog,
            &[expect],
            2,
            Some("tcp"),
            &[("UCX_RUCX_PROGRESS_THREAD", thread)],
            &format!("passive target ({expect}): all passed on 2 ranks"),
        );
    }
}

#[test]
fn openshmem() {
    if !have_open_mpi("oshcc") || !have("oshrun") {
        return;
    }
    let prog = compile_with("oshcc", "shmem_test.c", Headers::Ucx, false);
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for np in [2, 4] {
        launch(
            "oshrun",
            &prog,
            np,
            None,
            &format!("all passed on {np} PEs"),
        );
    }
    launch("oshrun", &prog, 2, Some("tcp"), "all passed on 2 PEs");
}
