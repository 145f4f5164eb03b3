//! The soak run of CI (`scripts/soak` in short): 4 processes of `rucx-soak` run random
//! checked operations against each other over shm, tcp and udp (7 s each), then over shm
//! with one of them SIGKILLed at a random moment. Any verification failure, hang,
//! unexpected error or crash fails the test; the run's report is printed (see it with
//! `--nocapture`), and the seed in it replays the same choices (`scripts/soak --seed`).

use std::process::Command;

const SOAK: &str = env!("CARGO_BIN_EXE_rucx-soak");

fn soak(args: &[&str]) {
    let _serial = testkit::heavy_test();
    let out = Command::new(SOAK)
        .args(args)
        .output()
        .expect("run rucx-soak");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "rucx-soak {args:?} failed:\n{text}");
    assert!(text.contains(": PASS"), "no verdict:\n{text}");
}

#[test]
fn soak_shm() {
    soak(&["--time", "7", "--transport", "shm"]);
}

#[test]
fn soak_tcp() {
    soak(&["--time", "7", "--transport", "tcp"]);
}

#[test]
fn soak_udp() {
    soak(&["--time", "7", "--transport", "udp"]);
}

#[test]
fn soak_shm_kill() {
    soak(&["--time", "7", "--transport", "shm", "--kill"]);
}
