//! Concurrency stress of the shm receive FIFO: several producer processes push 10^6
//! messages in all into one receiver (this test process) and the receiver proves that
//! nothing was lost, duplicated, corrupted or reordered per producer.
//!
//! Each message carries (producer id, sequence) in its 8-byte header; seven in eight are
//! `am_short` with up to 16 pattern bytes, one in eight `am_bcopy` with up to 96, so the
//! inline area and the bcopy buffers of the slots both see contention. Producers retry on
//! `NoResource`; the receiver progresses and, when it finds nothing, sleeps in
//! `iface.wait`, so the arm/wakeup path is exercised under load too.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::proto::{stress_is_bcopy, stress_payload_len, stress_split};
use testkit::{pattern, Peer, STEP_TIMEOUT};
use uct::{Iface, IfaceConfig, Transport};

const PEER: &str = env!("CARGO_BIN_EXE_rucx-testpeer");

#[derive(Default)]
struct Seen {
    /// Next expected sequence number per producer.
    next: Vec<u64>,
    received: u64,
    failure: Option<String>,
}

impl Seen {
    fn check(&mut self, am_id: u8, data: &[u8]) {
        if self.failure.is_some() {
            return;
        }
        if let Err(e) = self.check_inner(am_id, data) {
            self.failure = Some(e);
        }
    }

    fn check_inner(&mut self, am_id: u8, data: &[u8]) -> Result<(), String> {
        let hdr = u64::from_ne_bytes(
            data.get(..8)
                .ok_or(format!("{} bytes, no header", data.len()))?
                .try_into()
                .expect("8 bytes"),
        );
        let (p, seq) = stress_split(hdr);
        let next = self
            .next
            .get_mut(p as usize)
            .ok_or(format!("producer id {p} out of range"))?;
        if seq != *next {
            return Err(format!(
                "producer {p}: got sequence {seq}, expected {next} (lost, duplicated or reordered)"
            ));
        }
        *next += 1;
        let bcopy = stress_is_bcopy(seq);
        if (am_id == 2) != bcopy {
            return Err(format!(
                "producer {p} seq {seq}: arrived with am id {am_id}"
            ));
        }
        let len = stress_payload_len(seq);
        if data.len() != 8 + len {
            return Err(format!(
                "producer {p} seq {seq}: {} bytes, want {}",
                data.len(),
                8 + len
            ));
        }
        if let Some(i) = pattern::check_am(&data[8..], seq, p, u8::from(bcopy)) {
            return Err(format!("producer {p} seq {seq}: payload byte {i} wrong"));
        }
        self.received += 1;
        Ok(())
    }
}

/// Runs producers with `counts` messages each (the first one with `fault`, if any) into
/// this process and checks everything; Err(reason) when the receiver's check failed.
fn stress(counts: &[u64], fault: Option<&str>) -> Result<(), String> {
    let total: u64 = counts.iter().sum();
    let mut iface = Iface::open(Transport::Shm, &IfaceConfig::from_env().unwrap()).unwrap();
    let seen = Arc::new(Mutex::new(Seen {
        next: vec![0; counts.len()],
        ..Seen::default()
    }));
    for id in [1u8, 2] {
        let s = seen.clone();
        iface
            .set_am_handler(
                id,
                Box::new(move |d: &[u8]| s.lock().unwrap_or_else(|p| p.into_inner()).check(id, d)),
            )
            .unwrap();
    }
    let addr = testkit::hex::encode(&iface.address());

    let mut producers: Vec<Peer> = counts
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let (id, n) = (i.to_string(), n.to_string());
            let mut args = vec!["stress-producer", id.as_str(), n.as_str()];
            if let (0, Some(f)) = (i, fault) {
                args.push(f);
            }
            Peer::spawn(PEER, &args).unwrap()
        })
        .collect();
    for p in &mut producers {
        p.send(format!("addr {addr}")).unwrap();
        p.expect("ready", STEP_TIMEOUT).unwrap();
    }
    for p in &mut producers {
        p.send("go").unwrap();
    }

    let start = Instant::now();
    loop {
        let (received, failure) = {
            let s = seen.lock().unwrap_or_else(|p| p.into_inner());
            (s.received, s.failure.clone())
        };
        if let Some(f) = failure {
            return Err(format!("after {received} messages: {f}"));
        }
        if received == total {
            break;
        }
        if iface.progress() == 0 {
            // Idle: sleep until a producer publishes (the wakeup path under load).
            iface.wait(100).unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "only {received} of {total} messages arrived"
        );
    }
    for (p, n) in producers.iter_mut().zip(counts) {
        let w = p.expect("done", STEP_TIMEOUT).unwrap();
        assert_eq!(w[0], n.to_string(), "{}", p.name());
        eprintln!("{}: {} sends found the FIFO full", p.name(), w[1]);
        assert!(
            p.expect_exit(STEP_TIMEOUT).unwrap().success(),
            "{}",
            p.name()
        );
    }
    // Nothing more arrives, nothing was dropped as malformed.
    while iface.progress() > 0 {}
    let s = seen.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(f) = &s.failure {
        return Err(f.clone());
    }
    assert_eq!(s.received, total, "messages after the last expected one");
    assert_eq!(s.next, counts, "per-producer counts");
    assert_eq!(iface.dropped(), 0, "malformed FIFO elements");
    Ok(())
}

/// 10^6 messages from three producer processes into one receiver.
#[test]
fn fifo_stress_three_producers_one_million_messages() {
    let _serial = testkit::heavy_test();
    stress(&[333_334, 333_333, 333_333], None).unwrap();
}

/// The receiver's check is live: a producer that leaves out one sequence number is
/// caught at the next message.
#[test]
fn fifo_stress_checker_detects_a_lost_message() {
    let _serial = testkit::heavy_test();
    let e = stress(&[5000, 5000], Some("skip=1234")).unwrap_err();
    assert!(
        e.contains("producer 0: got sequence 1235, expected 1234"),
        "{e}"
    );
}
