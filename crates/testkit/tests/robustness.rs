//! Misuse that safe Rust code can commit must not crash the process. Each case runs in a
//! peer process, because the failure being tested for is a fault that would take the test
//! binary down with it.

use testkit::{Peer, STEP_TIMEOUT};

const PEER: &str = env!("CARGO_BIN_EXE_rucx-testpeer");

/// A remote key unpacked by the allocating memory domain, used after the allocation's
/// handle was dropped: every operation must either still work or return an error, but
/// the process must not fault (all of it is safe code).
fn stale_rkey(transport: &str) {
    let mut p = Peer::spawn(PEER, &["stale-rkey", transport]).unwrap();
    let r = p.expect("survived", STEP_TIMEOUT);
    let status = p.expect_exit(STEP_TIMEOUT).unwrap();
    assert!(
        r.is_ok() && status.success(),
        "{transport}: using a key after its allocation was freed killed the process \
         ({status}): {r:?}"
    );
    eprintln!("{transport}: {:?}", r.unwrap());
}

#[test]
fn stale_rkey_after_mem_free_does_not_fault_self() {
    stale_rkey("self");
}

#[test]
fn stale_rkey_after_mem_free_does_not_fault_shm() {
    stale_rkey("shm");
}

/// Operations towards a peer that was killed: a CMA put or get is an error, memory it
/// allocated and this process mapped stays usable (the mapping keeps it alive), a new
/// endpoint to its address is refused, and active messages to an existing endpoint fill
/// the orphaned FIFO and then say `NoResource`; nothing crashes or hangs.
#[test]
fn operations_towards_a_killed_peer_fail_cleanly() {
    use testkit::hex;
    use uct::{Iface, IfaceConfig, Md, Outcome, Transport};

    let mut target = Peer::spawn(PEER, &["rma-target"]).unwrap();
    let addr = hex::decode(&target.expect("addr", STEP_TIMEOUT).unwrap().concat()).unwrap();
    let md = Md::open(Transport::Shm);
    let mut iface = Iface::open(Transport::Shm, &IfaceConfig::default()).unwrap();
    let ep = iface.ep_create(&addr).unwrap();
    // A mapped key first (this process maps the segment, which keeps it alive even after
    // the target frees it for the next `new`), then a CMA key.
    let mut key = |kind: &str| {
        target.send(format!("new {kind} 8192 1")).unwrap();
        let packed = hex::decode(&target.expect("buf", STEP_TIMEOUT).unwrap().concat()).unwrap();
        md.rkey_unpack(&packed).unwrap()
    };
    let mapped = key("alloc");
    let cma = key("reg");
    assert!(!cma.is_direct() && mapped.is_direct());
    let a = cma.range().0;
    assert_eq!(
        iface.put_short(ep, b"alive", a, &cma),
        Ok(Outcome::Done(()))
    );
    target.kill().unwrap();

    assert!(
        iface.put_short(ep, b"dead", a, &cma).is_err(),
        "CMA put to a dead process"
    );
    let mut b = [0u8; 16];
    assert!(
        iface.get_zcopy(ep, &mut [&mut b[..]], a, &cma, 0).is_err(),
        "CMA get from a dead process"
    );

    let m = mapped.range().0;
    assert_eq!(
        iface.put_short(ep, b"orphan", m, &mapped),
        Ok(Outcome::Done(()))
    );
    let mut got = Vec::new();
    assert_eq!(
        iface.get_bcopy(ep, 6, m, &mapped, |d| got = d.to_vec(), 0),
        Ok(Outcome::Done(()))
    );
    assert_eq!(got, b"orphan");

    assert!(
        iface.ep_create(&addr).is_err(),
        "ep_create to a dead process"
    );

    let mut sent = 0;
    loop {
        match iface.am_short(ep, 1, sent, b"to nobody") {
            Ok(Outcome::Done(())) => sent += 1,
            Ok(Outcome::NoResource) => break,
            other => panic!("am_short to a dead peer: {other:?}"),
        }
        assert!(sent <= 1 << 16, "a dead peer's FIFO never filled");
    }
    iface.ep_destroy(ep).unwrap();
}
