//! Thread mode multi: several threads use one worker at once through `SharedWorker`.
//! Three threads send on worker A while three threads receive on worker B; every message
//! is checked and each sender's messages arrive in order.

use std::time::{Duration, Instant};
use ucp::{Buf, Context, Features, SharedWorker, ThreadMode, Worker};
use ucs::Status;

const THREADS: u64 = 3;
const COUNT: u64 = 2000;

fn payload(tag: u64) -> Vec<u8> {
    let len = (tag % 300) as usize * 37 % 12_000;
    (0..len).map(|i| (i as u64 ^ tag) as u8).collect()
}

fn wait(w: &SharedWorker, r: ucp::Request) -> Status {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(s) = w.with(|w| w.request_test(r).unwrap()).unwrap() {
            w.with(|w| w.request_free(r).unwrap()).unwrap();
            return s;
        }
        w.progress().unwrap();
        assert!(Instant::now() < deadline, "request did not complete");
        std::thread::yield_now();
    }
}

#[test]
fn concurrent_senders_and_receivers() {
    let ctx = Context::new(Features::TAG).unwrap();
    let mut a = Worker::new(&ctx, ThreadMode::Multi).unwrap();
    let mut b = Worker::new(&ctx, ThreadMode::Multi).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    let _ = a.address();
    let (a, b) = (SharedWorker::new(a), SharedWorker::new(b));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let a = a.clone();
            s.spawn(move || {
                for seq in 0..COUNT {
                    let tag = t << 32 | seq;
                    let data = payload(tag);
                    // SAFETY: `data` lives until the request completes (waited below).
                    let r = a
                        .with(|w| unsafe {
                            w.tag_send_nb(
                                ep,
                                Buf::contig(data.as_ptr().cast_mut(), data.len()),
                                tag,
                                false,
                                None,
                            )
                        })
                        .unwrap()
                        .unwrap();
                    if let Some(r) = r {
                        assert_eq!(wait(&a, r), Status::Ok);
                    }
                }
            });
        }
        for t in 0..THREADS {
            let b = b.clone();
            s.spawn(move || {
                let mut buf = vec![0u8; 16_384];
                for seq in 0..COUNT {
                    let tag = t << 32 | seq;
                    // SAFETY: `buf` lives until the request completes (waited below).
                    let r = b
                        .with(|w| unsafe {
                            w.tag_recv_nb(
                                Buf::contig(buf.as_mut_ptr(), buf.len()),
                                tag,
                                u64::MAX,
                                None,
                            )
                        })
                        .unwrap()
                        .unwrap();
                    assert_eq!(wait(&b, r), Status::Ok);
                    let want = payload(tag);
                    assert!(
                        buf[..want.len()] == want[..],
                        "thread {t} message {seq} differs"
                    );
                }
            });
        }
    });
}
