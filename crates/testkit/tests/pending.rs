//! The pending contract across processes: a receiver with a 4-element FIFO does not
//! progress; the sender gets `NoResource` after exactly 4 messages, queues a callback with
//! `pending_add`, keeps its endpoint's order (a direct send now says `NoResource`), and
//! once the receiver drains, the sender's progress runs the callback, which sends the
//! rest. The receiver checks that all messages arrive once, intact and in order.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::{hex, pattern, Peer, STEP_TIMEOUT};
use ucs::Status;
use uct::{Iface, IfaceConfig, Outcome, PendingResult, Transport};

const PEER: &str = env!("CARGO_BIN_EXE_rucx-testpeer");

/// Message `k` as the fifo-recv peer expects it: header k, payload mix64(k).
fn payload(k: u64) -> [u8; 8] {
    pattern::mix64(k).to_le_bytes()
}

#[derive(Default)]
struct Progress {
    next: u64,
    calls: u64,
    error: Option<Status>,
}

#[test]
fn full_fifo_pending_callback_sends_after_the_receiver_drains() {
    let _serial = testkit::heavy_test();
    const FIFO: u64 = 4;
    const TOTAL: u64 = 2000;
    let mut peer = Peer::spawn(PEER, &["fifo-recv", &FIFO.to_string(), "7"]).unwrap();
    let addr = hex::decode(&peer.expect("addr", STEP_TIMEOUT).unwrap().concat()).unwrap();
    let mut iface = Iface::open(Transport::Shm, &IfaceConfig::from_env().unwrap()).unwrap();
    let ep = iface.ep_create(&addr).unwrap();

    assert_eq!(
        iface
            .pending_add(ep, Box::new(|_: &mut Iface, _| PendingResult::Done))
            .err(),
        Some(Status::Busy),
        "pending_add while the FIFO has room"
    );
    let mut sent = 0;
    while iface
        .am_short(ep, 7, sent, &payload(sent))
        .unwrap()
        .is_done()
    {
        sent += 1;
        assert!(sent <= FIFO, "more sends succeeded than the FIFO holds");
    }
    assert_eq!(
        sent, FIFO,
        "the receiver does not progress: exactly FIFO sends fit"
    );

    let state = Arc::new(Mutex::new(Progress {
        next: sent,
        ..Progress::default()
    }));
    let s = state.clone();
    iface
        .pending_add(
            ep,
            Box::new(move |i: &mut Iface, ep| {
                let mut st = s.lock().unwrap_or_else(|p| p.into_inner());
                st.calls += 1;
                while st.next < TOTAL {
                    let k = st.next;
                    match i.am_short(ep, 7, k, &payload(k)) {
                        Ok(Outcome::Done(())) => st.next += 1,
                        Ok(_) => return PendingResult::Again,
                        Err(e) => {
                            st.error = Some(e);
                            return PendingResult::Done;
                        }
                    }
                }
                PendingResult::Done
            }),
        )
        .expect("pending_add after NoResource");
    assert_eq!(
        iface.am_short(ep, 7, 999, &[]).unwrap(),
        Outcome::NoResource,
        "a direct send must queue behind the pending callback"
    );

    // The receiver is still not progressing: the callback runs but cannot send.
    for _ in 0..100 {
        iface.progress();
    }
    {
        let st = state.lock().unwrap();
        assert!(st.calls >= 1, "progress did not run the callback");
        assert_eq!(st.next, FIFO, "the callback sent into a full FIFO");
    }

    peer.send(format!("drain {TOTAL}")).unwrap();
    let start = Instant::now();
    loop {
        {
            let st = state.lock().unwrap();
            assert_eq!(st.error, None, "send from the callback failed");
            if st.next == TOTAL {
                break;
            }
        }
        if iface.progress() == 0 {
            std::thread::yield_now();
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the callback never sent everything"
        );
    }
    assert_eq!(
        peer.expect("got", STEP_TIMEOUT).unwrap(),
        [TOTAL.to_string()]
    );
    assert!(peer.expect_exit(STEP_TIMEOUT).unwrap().success());
    // Nothing is queued on the endpoint any more, so it flushes.
    assert_eq!(iface.ep_flush(ep, 0), Ok(Outcome::Done(())));
    eprintln!(
        "the pending callback ran {} times",
        state.lock().unwrap().calls
    );
}
