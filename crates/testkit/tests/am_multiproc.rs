//! Active messages between 2 and 4 shm processes, every byte checked by the receivers.
//!
//! Each `am-node` peer sends every other node `reps` rounds of the size plan of each
//! flavour (`testkit::proto::am_size_plan`: 0, 1 and the sizes around `max_am_short`,
//! `max_am_bcopy`, `max_am_zcopy` and `max_am_hdr`), with byte `i` of message `m` from
//! node `s` a function of (m, i, s, flavour). A receiver checks length, header, every byte
//! and the order of each (sender, flavour) stream, and reports how many messages and bytes
//! it got; the test checks those counts against its own computation of the plan.

use testkit::proto::{am_size_plan, KINDS, SHORT};
use testkit::{Peer, PeerOptions, STEP_TIMEOUT};
use uct::{Iface, IfaceConfig, Transport};

const PEER: &str = env!("CARGO_BIN_EXE_rucx-testpeer");

/// Runs `nodes` am-node peers, all sending to all, and checks what each reports. `env`
/// goes to the peers (the size plan does not depend on the FIFO size).
fn all_to_all(nodes: u32, reps: u64, env: &[(&str, &str)]) {
    let _serial = testkit::heavy_test();
    // The peers read the same configuration from the same environment.
    let attr = Iface::open(Transport::Shm, &IfaceConfig::from_env().unwrap())
        .unwrap()
        .attr()
        .clone();
    let (mut msgs, mut bytes) = (0u64, 0u64);
    for kind in KINDS {
        let plan = am_size_plan(&attr, kind);
        let hdr = if kind == SHORT { 8 } else { 0 };
        msgs += reps * plan.len() as u64;
        bytes += reps * plan.iter().map(|&s| (s + hdr) as u64).sum::<u64>();
    }
    let others = u64::from(nodes - 1);

    let mut peers: Vec<Peer> = (0..nodes)
        .map(|i| {
            let args = [
                "am-node".to_string(),
                i.to_string(),
                nodes.to_string(),
                reps.to_string(),
            ];
            let opts = PeerOptions {
                name: None,
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            };
            Peer::spawn_with(PEER, &args.each_ref().map(String::as_str), &opts).unwrap()
        })
        .collect();
    let addrs: Vec<String> = peers
        .iter_mut()
        .map(|p| p.expect("addr", STEP_TIMEOUT).unwrap().concat())
        .collect();
    let line = format!("peers {}", addrs.join(" "));
    for p in &mut peers {
        p.send(&line).unwrap();
    }
    for p in &mut peers {
        let w = p.expect("done", STEP_TIMEOUT).unwrap();
        assert_eq!(
            w,
            [(others * msgs).to_string(), (others * bytes).to_string()],
            "{}",
            p.name()
        );
    }
    for p in &mut peers {
        assert!(
            p.expect_exit(STEP_TIMEOUT).unwrap().success(),
            "{}",
            p.name()
        );
    }
}

/// Two processes send each other every flavour at every size across the limits.
#[test]
fn am_two_processes_all_flavours_all_sizes() {
    all_to_all(2, 400, &[]);
}

/// Four processes each send to the three others at once (12 streams of each flavour),
/// so every receive FIFO has three concurrent producers.
#[test]
fn am_four_processes_all_to_all() {
    all_to_all(4, 150, &[]);
}

/// Four processes all to all through 4-element FIFOs: almost every send first finds the
/// FIFO full, so the retry path (progressing the own FIFO while waiting for room in the
/// peer's) carries the whole exchange without deadlock or loss.
#[test]
fn am_four_processes_all_to_all_tiny_fifos() {
    all_to_all(4, 40, &[("UCX_MM_FIFO_SIZE", "4")]);
}

/// The receivers' checks are live: one flipped byte in one message makes the receiving
/// node report a failure naming that message.
#[test]
fn am_checker_detects_a_corrupted_byte() {
    let _serial = testkit::heavy_test();
    let mut peers: Vec<Peer> = (0..2)
        .map(|i| {
            let id = i.to_string();
            let mut args = vec!["am-node", id.as_str(), "2", "1"];
            if i == 0 {
                args.push("corrupt");
            }
            Peer::spawn(PEER, &args).unwrap()
        })
        .collect();
    let addrs: Vec<String> = peers
        .iter_mut()
        .map(|p| p.expect("addr", STEP_TIMEOUT).unwrap().concat())
        .collect();
    for p in &mut peers {
        p.send(format!("peers {}", addrs.join(" "))).unwrap();
    }
    let e = peers[1].expect("done", STEP_TIMEOUT).unwrap_err();
    assert!(
        e.to_string().contains("message 1 of flavour 1 from node 0"),
        "{e}"
    );
    // Node 0 may now wait forever for room in node 1's FIFO; dropping kills both.
}
