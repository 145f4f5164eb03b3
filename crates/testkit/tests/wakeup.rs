//! A receiver asleep in `iface.wait(timeout)` is woken by a message another process
//! sends: `wait` returns true (an event, not the timeout) and the message arrives intact.
//!
//! The test sends only once /proc shows the receiver asleep in `poll`, so the wakeup goes
//! through the armed flag and the eventfd rather than the receiver finding the message
//! when it arms. Nothing is timed: the receiver's 60 s wait bound only turns a lost
//! wakeup into a failure (`woke <r> false`) instead of a hang.

use std::time::{Duration, Instant};
use testkit::{hex, pattern, procfs, Peer, STEP_TIMEOUT};
use uct::{Iface, IfaceConfig, Outcome, Transport};

const PEER: &str = env!("CARGO_BIN_EXE_rucx-testpeer");

/// Waits (bounded polling of /proc) until `pid` sleeps in poll. Returns false when /proc
/// cannot tell on this system.
fn await_sleep_in_poll(pid: u32) -> bool {
    let start = Instant::now();
    loop {
        match procfs::sleeping_in_poll(pid) {
            Some(true) => return true,
            None => return false,
            Some(false) => {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "the receiver never went to sleep in poll"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

#[test]
fn receiver_blocked_in_wait_is_woken_by_a_send_from_another_process() {
    let _serial = testkit::heavy_test();
    const ROUNDS: u32 = 3;
    let mut peer = Peer::spawn(PEER, &["wait-recv", &ROUNDS.to_string()]).unwrap();
    let addr = hex::decode(&peer.expect("addr", STEP_TIMEOUT).unwrap().concat()).unwrap();
    let mut iface = Iface::open(Transport::Shm, &IfaceConfig::from_env().unwrap()).unwrap();
    let ep = iface.ep_create(&addr).unwrap();
    for r in 0..ROUNDS {
        assert_eq!(
            peer.expect("waiting", STEP_TIMEOUT).unwrap(),
            [r.to_string()]
        );
        let observed = await_sleep_in_poll(peer.pid());
        if !observed {
            testkit::require::skip(
                "wakeup",
                "/proc cannot show whether the receiver sleeps; sending anyway",
            );
        }
        // One flavour per round: short, bcopy, zcopy.
        let payload = pattern::am_vec(40 + r as usize * 1000, u64::from(r), 9, 0);
        let sent = match r {
            0 => iface.am_short(ep, 5, 0x0123_4567_89ab_cdef, &payload),
            1 => iface
                .am_bcopy(ep, 5, |b| {
                    b[..payload.len()].copy_from_slice(&payload);
                    payload.len()
                })
                .map(|o| {
                    if o.is_done() {
                        Outcome::Done(())
                    } else {
                        Outcome::NoResource
                    }
                }),
            _ => iface.am_zcopy(ep, 5, &payload[..8], &[&payload[8..]], 0),
        };
        assert_eq!(
            sent,
            Ok(Outcome::Done(())),
            "round {r}: the receiver's FIFO is empty"
        );
        assert_eq!(
            peer.expect("woke", STEP_TIMEOUT).unwrap(),
            [r.to_string(), "true".to_string()],
            "round {r}: wait must return because of the message, not the timeout"
        );
        let mut want = Vec::new();
        if r == 0 {
            want.extend_from_slice(&0x0123_4567_89ab_cdefu64.to_ne_bytes());
        }
        want.extend_from_slice(&payload);
        assert_eq!(
            peer.expect("got", STEP_TIMEOUT).unwrap(),
            [r.to_string(), hex::encode(&want)],
            "round {r}: message content"
        );
    }
    peer.close_stdin();
    assert!(peer.expect_exit(STEP_TIMEOUT).unwrap().success());
}
