//! Tests of the process harness itself (`testkit::Peer`): timeouts, exit statuses, error
//! reports that carry the peer's stderr, and cleanup on drop.

use std::os::fd::AsFd;
use std::time::Duration;
use testkit::{Peer, PeerError, STEP_TIMEOUT};

const PEER: &str = env!("CARGO_BIN_EXE_rucx-testpeer");

/// A silent peer makes `read_line_timeout` return a timeout error (no hang), after which
/// the conversation continues normally.
#[test]
fn read_line_times_out_on_a_silent_peer() {
    let mut p = Peer::spawn(PEER, &["sleeper"]).unwrap();
    p.expect("ready", STEP_TIMEOUT).unwrap();
    let e = p.read_line_timeout(Duration::from_millis(50)).unwrap_err();
    assert!(e.is_timeout(), "{e}");
    p.send("echo hello world").unwrap();
    assert_eq!(p.read_line_timeout(STEP_TIMEOUT).unwrap(), "hello world");
    p.close_stdin();
    assert!(p.expect_exit(STEP_TIMEOUT).unwrap().success());
}

/// The exit code of a peer is reported by `expect_exit`.
#[test]
fn exit_status_is_reported() {
    let mut p = Peer::spawn(PEER, &["sleeper"]).unwrap();
    p.expect("ready", STEP_TIMEOUT).unwrap();
    p.send("exit 3").unwrap();
    assert_eq!(p.expect_exit(STEP_TIMEOUT).unwrap().code(), Some(3));
    // Reading from an exited peer is an error, not a hang.
    let e = p.read_line_timeout(STEP_TIMEOUT).unwrap_err();
    assert!(matches!(e, PeerError::Closed { .. }), "{e}");
}

/// `expect_exit` gives up on a peer that keeps running, and dropping the `Peer` kills and
/// reaps it (its pidfd becomes readable).
#[test]
fn drop_kills_a_running_peer() {
    let mut p = Peer::spawn(PEER, &["sleeper"]).unwrap();
    p.expect("ready", STEP_TIMEOUT).unwrap();
    let e = p.expect_exit(Duration::from_millis(50)).unwrap_err();
    assert!(e.is_timeout(), "{e}");
    let pidfd = testkit::peer::pidfd_of(p.pid()).unwrap();
    drop(p);
    assert!(
        ucs::sys::poll::readable(pidfd.as_fd(), 0).unwrap(),
        "the peer still runs after its Peer was dropped"
    );
}

/// A panicking peer's stderr (the panic message) ends up in the error the test sees; a
/// peer reporting `fail ...` gives `PeerError::Failed` and exit status 1.
#[test]
fn peer_failures_are_reported_with_their_reason() {
    let mut p = Peer::spawn(PEER, &["sleeper"]).unwrap();
    p.expect("ready", STEP_TIMEOUT).unwrap();
    p.send("panic").unwrap();
    let e = p.expect("never", STEP_TIMEOUT).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, PeerError::Closed { .. }), "{text}");
    assert!(text.contains("asked to panic"), "{text}");

    let mut p = Peer::spawn(PEER, &["no-such-role"]).unwrap();
    let e = p.expect("ready", STEP_TIMEOUT).unwrap_err();
    assert!(matches!(e, PeerError::Failed { .. }), "{e}");
    assert!(e.to_string().contains("unknown role"), "{e}");
    assert_eq!(p.expect_exit(STEP_TIMEOUT).unwrap().code(), Some(1));
}
