//! rucx-info: `-c` lists the collectives' variables, and a bad one is refused.

use std::process::{Command, Output};

/// Runs rucx-info with `args` and `env`, killed by timeout(1) after 60 s.
fn info(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new("timeout")
        .arg("60")
        .arg(env!("CARGO_BIN_EXE_rucx-info"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run rucx-info")
}

#[test]
fn config_lists_the_collective_variables() {
    let out = info(&["-c"], &[("UCX_COLL_ALLTOALL_ALG", "bruck")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for v in [
        "UCX_COLL_ALLREDUCE_ALG",
        "UCX_COLL_TIMEOUT",
        "UCX_COLL_KNOMIAL_RADIX",
        "UCX_COLL_SHM",
        "UCX_COLL_HOST_GROUP_SIZE",
    ] {
        assert!(text.contains(v), "{v} missing:\n{text}");
    }
    let line = text
        .lines()
        .find(|l| l.contains("UCX_COLL_ALLTOALL_ALG"))
        .unwrap();
    assert!(line.contains("bruck"), "{line}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("unused environment variable"), "{err}");
}

#[test]
fn the_segment_algorithm_is_listed_and_checked() {
    let out = info(&["-c"], &[("UCX_COLL_BCAST_ALG", "shm")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("UCX_COLL_BCAST_ALG"))
        .unwrap();
    assert!(line.contains("shm"), "{line}");
    // alltoallv has no segment form.
    let out = info(&["-c"], &[("UCX_COLL_ALLTOALLV_ALG", "shm")]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_bad_collective_variable_is_refused() {
    let out = info(&["-c"], &[("UCX_COLL_ALLREDUCE_ALG", "bruck")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid configuration"), "{err}");
}
