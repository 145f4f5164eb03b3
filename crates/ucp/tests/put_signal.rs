//! Put with remote signal on every access path: the target waits for its signal word
//! (acquire loads) and then checks every byte of the data, round after round with a new
//! pattern each time, so data older than the signal would be caught. Paths: shm with a
//! direct mapping, CMA (registered memory, and forced), emulation forced over shm, tcp and
//! udp, the worker's endpoint to itself, and keys whose data and signal take different
//! paths; through the worker and, where both keys are mapped, the worker-free
//! `ucp::rma::put_signal_in_call`. Bad input (misaligned or out-of-range words, foreign
//! keys, a forged range) is refused with an error and leaves the memory and the process
//! intact.

mod common;

use common::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use ucp::config::parse_tls;
use ucp::{Buf, Config, Context, Features, RemoteKey, RmaPath, SignalOp, ThreadMode, Worker};
use ucs::Status;

/// Each region: data at the start, signal words at `SIG_OFF`.
const REGION: usize = (2 << 20) + 4096;
const SIG_OFF: usize = 2 << 20;
/// From one byte to past the eager and zero-copy thresholds of every transport; the large
/// ones more often, since a signal that overtook its data shows best there.
const SIZES: [usize; 10] = [
    1,
    8,
    63,
    4096,
    65_537,
    300_000,
    (1 << 20) + 5,
    (1 << 20) + 5,
    300_000,
    (1 << 20) + 5,
];

fn ctx_with(path: RmaPath, tls: &str) -> Context {
    let cfg = Config {
        rma_path: path,
        transports: parse_tls(tls).unwrap(),
        ..Config::from_env().unwrap()
    };
    Context::with_config(
        Features::TAG | Features::RMA | Features::AMO64,
        cfg,
        uct::IfaceConfig::default(),
    )
    .unwrap()
}

/// The signal word at `p`, read as a target does.
fn load_acquire(p: *mut u8) -> u64 {
    // SAFETY: callers pass an 8-byte aligned word inside a region mapped in this process,
    // which rucx changes only atomically.
    unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }.load(Ordering::Acquire)
}

fn signal_op(s: &str) -> SignalOp {
    match s {
        "add" => SignalOp::Add,
        "set" => SignalOp::Set,
        o => panic!("unknown signal op {o}"),
    }
}

/// What the signal word holds after round `round` (`before`: what it held).
fn next_signal(op: SignalOp, round: u64, before: u64) -> (u64, u64) {
    match op {
        SignalOp::Add => (round + 1, before.wrapping_add(round + 1)),
        SignalOp::Set => {
            let v = (round + 1).wrapping_mul(0x1_0000_0001) ^ 0xabc0_0000_0000_0000;
            (v, v)
        }
    }
}

// ----- peer role ----------------------------------------------------------------------------

/// Maps an allocated and a registered region, publishes both, then for each order
/// `expect <region> <sigoff> <value> <region> <off> <size> <seed>` waits (progressing,
/// blocking when idle) until the signal word holds the value, and checks the data.
fn role_target(_args: &str) {
    let mut w = worker();
    let _ep = peer_connect(&mut w);
    let ctx = w.context().clone();
    let alloc = ctx.mem_alloc(REGION).unwrap();
    let mut own = vec![0u8; REGION];
    // SAFETY: `own` outlives the mapping (dropped after it, below).
    let reg = unsafe { ctx.mem_map(Some(own.as_mut_ptr()), REGION) }.unwrap();
    let bases = [alloc.address(), reg.address()];
    println!(
        "@@ {} {} {} {}",
        bases[0] as u64,
        hex(&alloc.rkey_pack()),
        bases[1] as u64,
        hex(&reg.rkey_pack())
    );
    let lines = stdin_lines();
    loop {
        let l = loop {
            if let Ok(l) = lines.try_recv() {
                break l;
            }
            if w.progress() == 0 {
                w.wait(1).unwrap();
            }
        };
        let f: Vec<&str> = l.split(' ').collect();
        match f[0] {
            "expect" => {
                let n = |i: usize| f[i].parse::<u64>().unwrap();
                let sig = bases[n(1) as usize].wrapping_add(n(2) as usize);
                let want = n(3);
                let data = bases[n(4) as usize].wrapping_add(n(5) as usize);
                let (size, seed) = (n(6) as usize, n(7));
                let want_data = pattern(size, seed);
                assert_ne!(load_acquire(sig), want, "signalled before the put");
                // The initiator puts only now, so this process watches the word while
                // the data is written (it spins: the initiator only waits meanwhile).
                println!("@@ ready");
                let deadline = Instant::now() + TIMEOUT;
                while load_acquire(sig) != want {
                    w.progress();
                    assert!(Instant::now() < deadline, "signal {want:#x} never came");
                }
                // Right after the acquire load that saw the signal: the data must be new.
                // Both ends and the middle first: a copy still running (from either end)
                // cannot stay ahead of the check.
                // SAFETY: the range is inside one of the regions (the test chose it).
                let got = unsafe { std::slice::from_raw_parts(data, size) };
                let bad = [0, size / 2, size - 1]
                    .into_iter()
                    .chain(0..size)
                    .find(|&i| got[i] != want_data[i]);
                match bad {
                    None => println!("@@ ok"),
                    Some(i) => println!("@@ bad byte {i} of {size}"),
                }
            }
            "bye" => break,
            o => panic!("unknown order {o}"),
        }
    }
    drop(reg);
    drop(own);
    drop(alloc);
}

#[test]
fn peer_main() {
    let Ok(role) = std::env::var("RUCX_TEST_ROLE") else {
        return;
    };
    let args = std::env::var("RUCX_TEST_ARGS").unwrap_or_default();
    match role.as_str() {
        "target" => role_target(&args),
        r => panic!("unknown role {r}"),
    }
}

// ----- tests --------------------------------------------------------------------------------

/// Region index: 0 allocated (mappable), 1 registered (CMA or emulated).
const ALLOC: usize = 0;
const REG: usize = 1;

/// Rounds of put_signal (nb and nbi alternating) to a peer with `tls` and the initiator's
/// `path`: data in region `data_in`, signal words in region `sig_in`; checks the paths
/// the keys resolved to.
fn peer_case(tls: &str, path: RmaPath, data_in: usize, sig_in: usize, expect: (RmaPath, RmaPath)) {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut p = Peer::spawn_env("target", "", &[("UCX_TLS", tls)]);
    let mut w = Worker::new(&ctx_with(path, tls), ThreadMode::Single).unwrap();
    let ep = connect(&mut w, &mut p);
    let l = p.line();
    let f: Vec<&str> = l.split(' ').collect();
    let bases = [f[0].parse::<u64>().unwrap(), f[2].parse::<u64>().unwrap()];
    let keys: Vec<RemoteKey> = [f[1], f[3]]
        .iter()
        .map(|k| w.rkey_unpack(ep, &unhex(k)).unwrap())
        .collect();
    let (dk, sk) = (&keys[data_in], &keys[sig_in]);
    assert_eq!(
        (dk.rma_path(), sk.amo_path()),
        expect,
        "{tls} {path:?}: data in {data_in}, signal in {sig_in}"
    );
    let mut round = 0u64;
    for (o, op) in ["add", "set"].into_iter().enumerate() {
        let sop = signal_op(op);
        let sig_off = SIG_OFF + 8 * o;
        let mut held = 0u64;
        for pass in 0..4 {
            for &size in SIZES.iter() {
                let off = (round as usize * 8 + 3) % 4096;
                let seed = 1000 + round;
                let data = pattern(size, seed);
                let (value, want) = next_signal(sop, round, held);
                held = want;
                p.send(&format!(
                    "expect {sig_in} {sig_off} {want} {data_in} {off} {size} {seed}"
                ));
                assert_eq!(p.line(), "ready");
                let addr = bases[data_in] + off as u64;
                let saddr = bases[sig_in] + sig_off as u64;
                // Pass 2 takes the worker-free call where the keys allow it (both
                // mapped): it must say so exactly then, and complete in the call.
                let in_call = (pass == 2)
                    .then(|| {
                        ucp::rma::put_signal_in_call(ep, &data, addr, dk, saddr, sk, sop, value)
                    })
                    .flatten();
                assert_eq!(
                    in_call.is_some(),
                    pass == 2 && expect.0 != RmaPath::Emulated && expect.1 == RmaPath::Direct,
                    "{tls} {path:?}: which calls need the worker"
                );
                if let Some(r) = in_call {
                    r.unwrap();
                } else if pass % 2 == 0 {
                    // SAFETY: `data` outlives the request, waited for right here.
                    let r = unsafe {
                        w.put_signal_nb(
                            ep,
                            Buf::contig(data.as_ptr().cast_mut(), size),
                            addr,
                            dk,
                            saddr,
                            sk,
                            sop,
                            value,
                            None,
                        )
                    }
                    .unwrap();
                    if let Some(r) = r {
                        assert_eq!(w.wait_request(r, TIMEOUT).unwrap(), Status::Ok);
                    }
                } else {
                    w.put_signal_nbi(ep, &data, addr, dk, saddr, sk, sop, value)
                        .unwrap();
                    // The data was copied: scribbling on it now must not matter.
                    drop(data);
                    w.flush_ep_blocking(ep).unwrap();
                }
                assert_eq!(
                    p.line(),
                    "ok",
                    "{tls} {path:?}: {op} round {round}, {size} bytes"
                );
                round += 1;
            }
        }
    }
    p.send("bye");
    p.finish();
}

#[test]
fn shm_direct_mapping() {
    peer_case(
        "shm",
        RmaPath::Auto,
        ALLOC,
        ALLOC,
        (RmaPath::Direct, RmaPath::Direct),
    );
}

#[test]
fn shm_cma_registered_memory() {
    peer_case(
        "shm",
        RmaPath::Auto,
        REG,
        REG,
        (RmaPath::Cma, RmaPath::Emulated),
    );
}

#[test]
fn shm_cma_forced() {
    peer_case(
        "shm",
        RmaPath::Cma,
        ALLOC,
        ALLOC,
        (RmaPath::Cma, RmaPath::Emulated),
    );
}

#[test]
fn shm_emulated_forced() {
    peer_case(
        "shm",
        RmaPath::Emulated,
        ALLOC,
        ALLOC,
        (RmaPath::Emulated, RmaPath::Emulated),
    );
}

/// Data by CMA, signal through the mapping; and data through the mapping, signal
/// emulated: the first path's copy is complete before the second path's signal.
#[test]
fn shm_data_and_signal_on_different_paths() {
    peer_case(
        "shm",
        RmaPath::Auto,
        REG,
        ALLOC,
        (RmaPath::Cma, RmaPath::Direct),
    );
    peer_case(
        "shm",
        RmaPath::Auto,
        ALLOC,
        REG,
        (RmaPath::Direct, RmaPath::Emulated),
    );
}

#[test]
fn tcp_emulated() {
    peer_case(
        "tcp",
        RmaPath::Emulated,
        ALLOC,
        ALLOC,
        (RmaPath::Emulated, RmaPath::Emulated),
    );
}

#[test]
fn udp_emulated() {
    peer_case(
        "udp",
        RmaPath::Emulated,
        REG,
        ALLOC,
        (RmaPath::Emulated, RmaPath::Emulated),
    );
}

/// The worker's endpoint to itself, mapped and emulated: the same checks, the "target"
/// being this process (it polls the word between its own progress calls).
#[test]
fn self_loopback() {
    for (path, expect) in [
        (RmaPath::Auto, RmaPath::Direct),
        (RmaPath::Emulated, RmaPath::Emulated),
    ] {
        let ctx = ctx_with(path, "self");
        let mut w = Worker::new(&ctx, ThreadMode::Single).unwrap();
        let me = w.address();
        let ep = w.ep_create(&me).unwrap();
        let mem = ctx.mem_alloc(REGION).unwrap();
        let base = mem.address();
        let rk = w.rkey_unpack(ep, &mem.rkey_pack()).unwrap();
        assert_eq!(rk.rma_path(), expect);
        let sig = base.wrapping_add(SIG_OFF);
        let mut held = 0;
        for (round, &size) in SIZES.iter().cycle().take(40).enumerate() {
            let round = round as u64;
            let op = if round % 2 == 0 {
                SignalOp::Add
            } else {
                SignalOp::Set
            };
            let (value, want) = next_signal(op, round, held);
            held = want;
            let data = pattern(size, 50 + round);
            let off = (round as usize * 24 + 1) % 4096;
            // SAFETY: `data` outlives the request: this loop waits for the signal, and
            // the request (if any) is waited for before `data` goes.
            let r = unsafe {
                w.put_signal_nb(
                    ep,
                    Buf::contig(data.as_ptr().cast_mut(), size),
                    base as u64 + off as u64,
                    &rk,
                    sig as u64,
                    &rk,
                    op,
                    value,
                    None,
                )
            }
            .unwrap();
            let deadline = Instant::now() + TIMEOUT;
            while load_acquire(sig) != want {
                w.progress();
                assert!(Instant::now() < deadline, "{path:?}: signal never came");
            }
            // SAFETY: inside the region.
            let got = unsafe { std::slice::from_raw_parts(base.add(off), size) };
            assert!(got == &data[..], "{path:?}: round {round}, {size} bytes");
            if let Some(r) = r {
                assert_eq!(w.wait_request(r, TIMEOUT).unwrap(), Status::Ok);
            }
        }
    }
}

/// Refusals: the initiator's own checks (alignment, ranges, a key of another endpoint,
/// a null source), and the target's for a forged key, which writes nothing and signals
/// nothing; a good put with signal works afterwards.
#[test]
fn bad_input_is_refused() {
    let target_ctx = ctx_with(RmaPath::Auto, "self,shm");
    let mut t = Worker::new(&target_ctx, ThreadMode::Single).unwrap();
    let mut i = Worker::new(&ctx_with(RmaPath::Emulated, "self,shm"), ThreadMode::Single).unwrap();
    let ep = i.ep_create(&t.address()).unwrap();
    let other = i.ep_create(&t.address()).unwrap();
    let mut backing = vec![0xeeu8; 4096];
    // SAFETY: the region is inside `backing`, which outlives the mapping.
    let region = unsafe { backing.as_mut_ptr().add(1024) };
    // SAFETY: `backing` outlives the mapping.
    let mem = unsafe { target_ctx.mem_map(Some(region), 1024) }.unwrap();
    let packed = mem.rkey_pack();
    let base = region as u64;
    let rk = i.rkey_unpack(ep, &packed).unwrap();
    let rk_other = i.rkey_unpack(other, &packed).unwrap();
    let d = [5u8; 16];
    let sig = base + 1016;
    let add = SignalOp::Add;
    let cases: [(u64, u64, &RemoteKey, &RemoteKey, &str); 6] = [
        (base, sig + 4, &rk, &rk, "misaligned signal"),
        (base, base + 1020, &rk, &rk, "signal past the end"),
        (base, base - 8, &rk, &rk, "signal before the start"),
        (base + 1010, sig, &rk, &rk, "data past the end"),
        (base, sig, &rk_other, &rk, "data key of another endpoint"),
        (base, sig, &rk, &rk_other, "signal key of another endpoint"),
    ];
    for (addr, saddr, dk, sk, what) in cases {
        assert_eq!(
            i.put_signal_nbi(ep, &d, addr, dk, saddr, sk, add, 1),
            Err(Status::InvalidParam),
            "{what}"
        );
        // SAFETY: refused in the call, nothing is read later.
        let r = unsafe {
            i.put_signal_nb(
                ep,
                Buf::contig(d.as_ptr().cast_mut(), 16),
                addr,
                dk,
                saddr,
                sk,
                add,
                1,
                None,
            )
        };
        assert_eq!(r.err(), Some(Status::InvalidParam), "{what} (nb)");
    }

    let pump = |i: &mut Worker, t: &mut Worker, r: Option<ucp::Request>| -> Status {
        let Some(r) = r else { return Status::Ok };
        let deadline = Instant::now() + TIMEOUT;
        loop {
            t.progress();
            i.progress();
            if let Some(s) = i.request_test(r).unwrap() {
                i.request_free(r).unwrap();
                return s;
            }
            assert!(Instant::now() < deadline);
        }
    };
    // A forged key claiming more memory passes the initiator; the target refuses both a
    // signal outside its region and data outside it (and then does not signal).
    let ucp::mem::PackedKey::Region(mut forged) = ucp::mem::PackedKey::decode(&packed).unwrap()
    else {
        panic!("a region's key decoded as the empty key");
    };
    forged.len = 4096;
    let fk = i.rkey_unpack(ep, &forged.encode()).unwrap();
    // SAFETY: `d` outlives the requests (pump waits for them).
    let r = unsafe {
        i.put_signal_nb(
            ep,
            Buf::contig(d.as_ptr().cast_mut(), 16),
            base,
            &rk,
            base + 2048,
            &fk,
            add,
            1,
            None,
        )
    };
    assert_eq!(pump(&mut i, &mut t, r.unwrap()), Status::InvalidAddr);
    // SAFETY: as above.
    let r = unsafe {
        i.put_signal_nb(
            ep,
            Buf::contig(d.as_ptr().cast_mut(), 16),
            base + 2000,
            &fk,
            sig,
            &rk,
            add,
            1,
            None,
        )
    };
    assert_eq!(pump(&mut i, &mut t, r.unwrap()), Status::InvalidAddr);
    assert_eq!(
        load_acquire(sig as *mut u8),
        0xeeee_eeee_eeee_eeee,
        "signalled after a refused put"
    );
    // A good one lands: data, then the signal.
    // SAFETY: as above.
    let r = unsafe {
        i.put_signal_nb(
            ep,
            Buf::contig(d.as_ptr().cast_mut(), 16),
            base + 8,
            &rk,
            sig,
            &rk,
            SignalOp::Set,
            42,
            None,
        )
    };
    assert_eq!(pump(&mut i, &mut t, r.unwrap()), Status::Ok);
    assert_eq!(load_acquire(sig as *mut u8), 42);
    drop(mem);
    // The first forged case wrote its data (its signal was the refused part).
    assert!(backing[..1024].iter().all(|&b| b == 0xee));
    assert_eq!(backing[1024..1048], [5u8; 24]);
    assert!(backing[1048..2040].iter().all(|&b| b == 0xee));
    assert_eq!(backing[2040..2048], 42u64.to_ne_bytes());
    assert!(backing[2048..].iter().all(|&b| b == 0xee));
}

/// The worker-free call on mapped keys (the self transport maps this process's own
/// region): each refusal comes before any byte is written; a good call lands its data and
/// then its signal; an emulated key is left to the worker (`None`).
#[test]
fn in_call_refuses_before_writing() {
    let ctx = ctx_with(RmaPath::Auto, "self");
    let mut w = Worker::new(&ctx, ThreadMode::Single).unwrap();
    let me = w.address();
    let ep = w.ep_create(&me).unwrap();
    let other = w.ep_create(&me).unwrap();
    let mut backing = vec![0xeeu8; 4096];
    // SAFETY: the region is inside `backing`, which outlives the mapping.
    let region = unsafe { backing.as_mut_ptr().add(1024) };
    // SAFETY: `backing` outlives the mapping.
    let mem = unsafe { ctx.mem_map(Some(region), 1024) }.unwrap();
    let packed = mem.rkey_pack();
    let base = region as u64;
    let rk = w.rkey_unpack(ep, &packed).unwrap();
    let rk_other = w.rkey_unpack(other, &packed).unwrap();
    assert_eq!(
        (rk.rma_path(), rk.amo_path()),
        (RmaPath::Direct, RmaPath::Direct)
    );
    let d = [5u8; 16];
    let sig = base + 1016;
    let add = SignalOp::Add;
    let cases: [(u64, u64, &RemoteKey, &RemoteKey, &str); 6] = [
        (base, sig + 4, &rk, &rk, "misaligned signal"),
        (base, base + 1020, &rk, &rk, "signal past the end"),
        (base, base - 8, &rk, &rk, "signal before the start"),
        (base + 1010, sig, &rk, &rk, "data past the end"),
        (base, sig, &rk_other, &rk, "data key of another endpoint"),
        (base, sig, &rk, &rk_other, "signal key of another endpoint"),
    ];
    for (addr, saddr, dk, sk, what) in cases {
        let r = ucp::rma::put_signal_in_call(ep, &d, addr, dk, saddr, sk, add, 1);
        assert_eq!(r, Some(Err(Status::InvalidParam)), "{what}");
    }
    assert!(backing.iter().all(|&b| b == 0xee), "a refused call wrote");
    let r = ucp::rma::put_signal_in_call(ep, &d, base + 8, &rk, sig, &rk, SignalOp::Set, 42);
    assert_eq!(r, Some(Ok(())));
    assert_eq!(load_acquire(sig as *mut u8), 42);
    let r = ucp::rma::put_signal_in_call(ep, &[], base, &rk, sig, &rk, add, 3);
    assert_eq!(r, Some(Ok(())), "no data, only the signal");
    assert_eq!(load_acquire(sig as *mut u8), 45);
    // A key resolved for emulation needs the worker: `None`, and nothing written.
    let ectx = ctx_with(RmaPath::Emulated, "self");
    let mut ew = Worker::new(&ectx, ThreadMode::Single).unwrap();
    let eme = ew.address();
    let eep = ew.ep_create(&eme).unwrap();
    let emem = ectx.mem_alloc(4096).unwrap();
    let ek = ew.rkey_unpack(eep, &emem.rkey_pack()).unwrap();
    assert_eq!(ek.rma_path(), RmaPath::Emulated);
    let eb = emem.address() as u64;
    let r = ucp::rma::put_signal_in_call(eep, &d, eb, &ek, eb + 64, &ek, add, 1);
    assert_eq!(r, None);
    assert_eq!(load_acquire(emem.address().wrapping_add(64)), 0);
    drop(mem);
    assert!(backing[..1032].iter().all(|&b| b == 0xee));
    assert_eq!(backing[1032..1048], [5u8; 16]);
    assert!(backing[1048..2040].iter().all(|&b| b == 0xee));
    assert_eq!(
        u64::from_ne_bytes(backing[2040..2048].try_into().unwrap()),
        45
    );
}
