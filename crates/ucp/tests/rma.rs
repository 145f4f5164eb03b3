//! Remote memory access through every path (direct mapping, CMA, emulation), each forced
//! by configuration, from 1 B to 16 MiB with every byte checked; atomics from four
//! processes on shared words with mixed paths; and refusal of bad keys and ranges.

mod common;

use common::*;
use std::time::Instant;
use ucp::{AtomicOp, AtomicSize, Buf, Config, Context, Features, RmaPath, ThreadMode, Worker};
use ucs::Status;

const REGION: usize = (16 << 20) + 64;

fn ctx_with(path: RmaPath) -> Context {
    let cfg = Config {
        rma_path: path,
        ..Config::from_env().unwrap()
    };
    Context::with_config(
        Features::TAG | Features::RMA | Features::AMO32 | Features::AMO64,
        cfg,
        uct::IfaceConfig::default(),
    )
    .unwrap()
}

fn read_u64(p: *const u8) -> u64 {
    // SAFETY: callers pass addresses inside a mapped region they own.
    unsafe { (p as *const u64).read_volatile() }
}

// ----- peer roles ---------------------------------------------------------------------------

/// Owns a region (allocated or registered) and answers check/fill orders while it
/// progresses (so emulated accesses are served).
fn role_target(args: &str) {
    let alloc = args == "alloc";
    let mut w = worker();
    let _ep = peer_connect(&mut w);
    let ctx = w.context().clone();
    let mut own = vec![0u8; if alloc { 0 } else { REGION }];
    // SAFETY: `own` outlives the mapping.
    let mem =
        unsafe { ctx.mem_map(if alloc { None } else { Some(own.as_mut_ptr()) }, REGION) }.unwrap();
    // SAFETY: the region is REGION bytes mapped for as long as `mem` lives.
    let region = unsafe { std::slice::from_raw_parts_mut(mem.address(), REGION) };
    println!("@@ {} {}", mem.address() as u64, hex(&mem.rkey_pack()));
    let lines = stdin_lines();
    loop {
        if let Ok(l) = lines.try_recv() {
            let f: Vec<&str> = l.split(' ').collect();
            match f[0] {
                "check" => {
                    let (seed, off, len): (u64, usize, usize) = (
                        f[1].parse().unwrap(),
                        f[2].parse().unwrap(),
                        f[3].parse().unwrap(),
                    );
                    let ok = region[off..off + len] == pattern(len, seed)[..];
                    println!("@@ {}", if ok { "ok" } else { "bad" });
                }
                "fill" => {
                    region.copy_from_slice(&pattern(REGION, f[1].parse().unwrap()));
                    println!("@@ filled");
                }
                "bye" => break,
                o => panic!("unknown order {o}"),
            }
        }
        if w.progress() == 0 {
            w.wait(1).unwrap();
        }
    }
    drop(mem);
    drop(own);
}

/// Does atomics on the test's words; reports sums it needs to check them.
fn role_amo(args: &str) {
    let id: u64 = args.parse().unwrap();
    let mut w = worker();
    let ep = peer_connect(&mut w);
    let l = stdin_line();
    let (base, key) = l.split_once(' ').unwrap();
    let base: u64 = base.parse().unwrap();
    let rk = w.rkey_unpack(ep, &unhex(key)).unwrap();
    println!("@@ path {:?}", rk.amo_path());
    assert_eq!(stdin_line(), "go");
    let n = AMO_N;
    let mut swap_olds = 0u64;
    for k in 0..n {
        w.atomic_post(ep, AtomicOp::Add, AtomicSize::B64, id + 1, base, &rk)
            .unwrap();
        w.atomic_fetch(ep, AtomicOp::Add, AtomicSize::B32, 1, 0, base + 8, &rk)
            .unwrap();
        w.atomic_post(
            ep,
            AtomicOp::Xor,
            AtomicSize::B64,
            0xf << (4 * id),
            base + 16,
            &rk,
        )
        .unwrap();
        w.atomic_fetch(
            ep,
            AtomicOp::Xor,
            AtomicSize::B32,
            0xf << (4 * id),
            0,
            base + 56,
            &rk,
        )
        .unwrap();
        if k == 0 {
            w.atomic_post(ep, AtomicOp::Or, AtomicSize::B64, 1 << id, base + 24, &rk)
                .unwrap();
            w.atomic_fetch(
                ep,
                AtomicOp::And,
                AtomicSize::B64,
                !(1u64 << id),
                0,
                base + 32,
                &rk,
            )
            .unwrap();
            w.atomic_fetch(
                ep,
                AtomicOp::Or,
                AtomicSize::B32,
                1 << id,
                0,
                base + 48,
                &rk,
            )
            .unwrap();
            w.atomic_post(
                ep,
                AtomicOp::And,
                AtomicSize::B32,
                !(1u64 << id),
                base + 52,
                &rk,
            )
            .unwrap();
        }
        swap_olds = swap_olds.wrapping_add(
            w.atomic_fetch(
                ep,
                AtomicOp::Swap,
                AtomicSize::B64,
                id << 32 | (k + 1),
                0,
                base + 40,
                &rk,
            )
            .unwrap(),
        );
        // A lock taken with cswap protects a plain counter read and written with get/put.
        while w
            .atomic_fetch(
                ep,
                AtomicOp::Cswap,
                AtomicSize::B64,
                id + 1,
                0,
                base + 64,
                &rk,
            )
            .unwrap()
            != 0
        {}
        let mut c = [0u8; 8];
        w.get(ep, &mut c, base + 128, &rk).unwrap();
        w.put(
            ep,
            &(u64::from_ne_bytes(c) + 1).to_ne_bytes(),
            base + 128,
            &rk,
        )
        .unwrap();
        assert_eq!(
            w.atomic_fetch(
                ep,
                AtomicOp::Cswap,
                AtomicSize::B64,
                0,
                id + 1,
                base + 64,
                &rk
            )
            .unwrap(),
            id + 1
        );
    }
    w.flush_ep_blocking(ep).unwrap();
    println!("@@ done {swap_olds}");
    assert_eq!(stdin_line(), "bye");
}

const AMO_N: u64 = 300;

#[test]
fn peer_main() {
    let Ok(role) = std::env::var("RUCX_TEST_ROLE") else {
        return;
    };
    let args = std::env::var("RUCX_TEST_ARGS").unwrap_or_default();
    match role.as_str() {
        "target" => role_target(&args),
        "amo" => role_amo(&args),
        r => panic!("unknown role {r}"),
    }
}

// ----- tests --------------------------------------------------------------------------------

fn rma_path_case(target_mem: &str, mode: RmaPath, expect: RmaPath) {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut p = Peer::spawn("target", target_mem);
    let mut w = Worker::new(&ctx_with(mode), ThreadMode::Single).unwrap();
    let ep = connect(&mut w, &mut p);
    let l = p.line();
    let (base, key) = l.split_once(' ').unwrap();
    let base: u64 = base.parse().unwrap();
    let key = unhex(key);
    assert!(key.len() <= 16, "a packed key of {} bytes", key.len());
    let rk = w.rkey_unpack(ep, &key).unwrap();
    assert_eq!(rk.rma_path(), expect, "{target_mem} memory with {mode:?}");
    for (i, size) in [1usize, 7, 64, 4095, 4096, 65_537, (1 << 20) + 3, 16 << 20]
        .into_iter()
        .enumerate()
    {
        let off = if size + 3 <= REGION { 3 } else { 0 };
        let seed = 100 + i as u64;
        let data = pattern(size, seed);
        w.put(ep, &data, base + off as u64, &rk).unwrap();
        p.send(&format!("check {seed} {off} {size}"));
        assert_eq!(p.line(), "ok", "put of {size} bytes ({expect:?})");
        p.send(&format!("fill {}", seed + 1000));
        assert_eq!(p.line(), "filled");
        let mut back = vec![0u8; size];
        w.get(ep, &mut back, base + off as u64, &rk).unwrap();
        let want = pattern(REGION, seed + 1000);
        assert!(
            back[..] == want[off..off + size],
            "get of {size} bytes ({expect:?})"
        );
    }
    // Nonblocking variants, many in flight at once, then one flush.
    let chunks: Vec<Vec<u8>> = (0..32).map(|i| pattern(1000, 7000 + i)).collect();
    let reqs: Vec<_> = chunks
        .iter()
        .enumerate()
        // SAFETY: `chunks` outlives the requests, waited for below.
        .map(|(i, c)| unsafe {
            w.put_nb(
                ep,
                Buf::contig(c.as_ptr().cast_mut(), c.len()),
                base + (i * 1000) as u64,
                &rk,
                None,
            )
            .unwrap()
        })
        .collect();
    for r in reqs.into_iter().flatten() {
        assert_eq!(w.wait_request(r, TIMEOUT).unwrap(), Status::Ok);
    }
    w.flush_ep_blocking(ep).unwrap();
    for (i, _) in chunks.iter().enumerate() {
        p.send(&format!("check {} {} 1000", 7000 + i, i * 1000));
        assert_eq!(p.line(), "ok", "nonblocking put {i}");
    }
    // Implicit gets: the data is there after the flush.
    let mut outs = vec![vec![0u8; 1000]; 32];
    for (i, o) in outs.iter_mut().enumerate() {
        // SAFETY: `outs` outlives the flush below, which completes the gets.
        unsafe {
            w.get_nbi(
                ep,
                Buf::contig(o.as_mut_ptr(), 1000),
                base + (i * 1000) as u64,
                &rk,
            )
            .unwrap()
        };
    }
    w.flush_ep_blocking(ep).unwrap();
    for (i, o) in outs.iter().enumerate() {
        assert!(o[..] == chunks[i][..], "implicit get {i}");
    }
    p.send("bye");
    p.finish();
}

#[test]
fn rma_direct_mapping() {
    rma_path_case("alloc", RmaPath::Auto, RmaPath::Direct);
}

#[test]
fn rma_cma_registered_memory() {
    rma_path_case("reg", RmaPath::Auto, RmaPath::Cma);
}

#[test]
fn rma_cma_forced() {
    rma_path_case("alloc", RmaPath::Cma, RmaPath::Cma);
}

#[test]
fn rma_emulated_forced() {
    rma_path_case("alloc", RmaPath::Emulated, RmaPath::Emulated);
    rma_path_case("reg", RmaPath::Emulated, RmaPath::Emulated);
}

/// Four processes, two with direct CPU atomics and two emulated, on the same words.
#[test]
fn four_processes_atomics_on_shared_words() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut w = worker();
    let ctx = w.context().clone();
    let mem = ctx.mem_alloc(4096).unwrap();
    let base = mem.address();
    // SAFETY: the region is 4096 bytes; set the initial values before anyone has the key.
    unsafe {
        (base.add(32) as *mut u64).write(u64::MAX);
        (base.add(52) as *mut u32).write(u32::MAX);
    }
    let mut peers: Vec<Peer> = (0..4u64)
        .map(|id| {
            let path = if id < 2 { "auto" } else { "am" };
            Peer::spawn_env("amo", &id.to_string(), &[("UCX_RMA_PATH", path)])
        })
        .collect();
    for p in peers.iter_mut() {
        connect(&mut w, p);
        p.send(&format!("{} {}", base as u64, hex(&mem.rkey_pack())));
    }
    let paths: Vec<String> = peers.iter().map(|p| p.line()).collect();
    assert_eq!(
        paths,
        [
            "path Direct",
            "path Direct",
            "path Emulated",
            "path Emulated"
        ]
    );
    for p in peers.iter_mut() {
        p.send("go");
    }
    let mut olds = 0u64;
    let mut done = 0;
    let deadline = Instant::now() + TIMEOUT;
    while done < 4 {
        for p in peers.iter() {
            if let Ok(l) = p.lines.try_recv() {
                olds = olds.wrapping_add(l.strip_prefix("done ").unwrap().parse::<u64>().unwrap());
                done += 1;
            }
        }
        if w.progress() == 0 {
            w.wait(1).unwrap();
        }
        assert!(Instant::now() < deadline, "atomics workers did not finish");
    }
    let n = AMO_N;
    let word = |off: usize| read_u64(base.wrapping_add(off));
    // SAFETY: 4-byte aligned offsets inside the 4096-byte region.
    let word32 = |off: usize| unsafe { (base.add(off) as *const u32).read_volatile() };
    assert_eq!(word(0), n * (1 + 2 + 3 + 4), "add64");
    assert_eq!(word32(8), (4 * n) as u32, "fetch-add32");
    let x = if n % 2 == 1 { 0xffff } else { 0 };
    assert_eq!(word(16), x, "xor64");
    assert_eq!(word32(56), x as u32, "fetch-xor32");
    assert_eq!(word(24), 0xf, "or64");
    assert_eq!(word(32), !0xfu64, "fetch-and64");
    assert_eq!(word32(48), 0xf, "fetch-or32");
    assert_eq!(word32(52), !0xfu32, "and32");
    // Swap conserves values: what was swapped in is either returned to someone or left.
    let swapped_in: u64 = (0..4u64)
        .flat_map(|id| (1..=n).map(move |k| id << 32 | k))
        .fold(0, u64::wrapping_add);
    assert_eq!(olds.wrapping_add(word(40)), swapped_in, "swap");
    assert_eq!(word(64), 0, "the lock is free");
    assert_eq!(word(128), 4 * n, "the counter protected by the cswap lock");
    for mut p in peers {
        p.send("bye");
        p.finish();
    }
}

/// Malformed keys are refused at unpack; emulated accesses outside the region or with a
/// stale key are refused by the target, which writes nothing.
#[test]
fn bad_keys_and_ranges_are_refused() {
    let target_ctx = ctx_with(RmaPath::Auto);
    let mut t = Worker::new(&target_ctx, ThreadMode::Single).unwrap();
    let mut i = Worker::new(&ctx_with(RmaPath::Emulated), ThreadMode::Single).unwrap();
    let ep = i.ep_create(&t.address()).unwrap();
    let _ = i.address();
    let mut backing = vec![0xeeu8; 4096];
    // SAFETY: the region is inside `backing`, which outlives the mapping.
    let region = unsafe { backing.as_mut_ptr().add(1024) };
    // SAFETY: `backing` outlives the mapping.
    let mem = unsafe { target_ctx.mem_map(Some(region), 1024) }.unwrap();
    let packed = mem.rkey_pack();
    let base = region as u64;

    for bad in [&packed[..packed.len() - 1], &[], &[2u8; 40][..]] {
        assert!(i.rkey_unpack(ep, bad).is_err());
    }
    let mut flipped = packed.clone();
    flipped[0] ^= 0xff;
    assert!(i.rkey_unpack(ep, &flipped).is_err());

    let rk = i.rkey_unpack(ep, &packed).unwrap();
    assert_eq!(rk.rma_path(), RmaPath::Emulated);
    // The initiator refuses what its key does not cover.
    assert_eq!(
        i.put_nbi(ep, &[1; 8], base + 1020, &rk),
        Err(Status::InvalidParam)
    );

    // A forged key that claims more memory gets past the initiator; the target refuses.
    let ucp::mem::PackedKey::Region(mut forged) = ucp::mem::PackedKey::decode(&packed).unwrap()
    else {
        panic!("a region's key decoded as the empty key");
    };
    forged.len = 4096;
    let fk = i.rkey_unpack(ep, &forged.encode()).unwrap();
    let pump = |i: &mut Worker,
                t: &mut Worker,
                f: &mut dyn FnMut(&mut Worker) -> Option<ucp::Request>|
     -> Status {
        let r = f(i);
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
    let data = [7u8; 64];
    let s = pump(&mut i, &mut t, &mut |i| {
        // SAFETY: `data` outlives the request (pump waits for it).
        unsafe {
            i.put_nb(
                ep,
                Buf::contig(data.as_ptr().cast_mut(), 64),
                base + 1000,
                &fk,
                None,
            )
            .unwrap()
        }
    });
    assert_eq!(s, Status::InvalidAddr);
    let mut out = [0u8; 64];
    let s = pump(&mut i, &mut t, &mut |i| {
        // SAFETY: `out` outlives the request.
        unsafe {
            i.get_nb(
                ep,
                Buf::contig(out.as_mut_ptr(), 64),
                base + 1000,
                &fk,
                None,
            )
            .unwrap()
        }
    });
    assert_eq!(s, Status::InvalidAddr);
    let mut res = 0u64;
    let s = pump(&mut i, &mut t, &mut |i| {
        // SAFETY: `res` outlives the request.
        unsafe {
            i.atomic_fetch_nb(
                ep,
                AtomicOp::Add,
                AtomicSize::B64,
                1,
                0,
                Buf::contig((&mut res as *mut u64).cast(), 8),
                base + 2000,
                &fk,
                None,
            )
            .unwrap()
        }
    });
    assert_eq!(s, Status::InvalidAddr);

    // A good put lands.
    let s = pump(&mut i, &mut t, &mut |i| {
        // SAFETY: `data` outlives the request.
        unsafe {
            i.put_nb(
                ep,
                Buf::contig(data.as_ptr().cast_mut(), 64),
                base,
                &rk,
                None,
            )
            .unwrap()
        }
    });
    assert_eq!(s, Status::Ok);
    // Stale key: the region is unmapped, the same key is refused.
    drop(mem);
    let s = pump(&mut i, &mut t, &mut |i| {
        // SAFETY: `data` outlives the request.
        unsafe {
            i.put_nb(
                ep,
                Buf::contig([9u8; 64].as_ptr().cast_mut(), 64),
                base + 64,
                &rk,
                None,
            )
            .unwrap()
        }
    });
    assert_eq!(s, Status::InvalidAddr);
    // Nothing but the one good put changed the memory.
    assert!(backing[..1024].iter().all(|&b| b == 0xee));
    assert_eq!(backing[1024..1088], [7u8; 64]);
    assert!(backing[1088..].iter().all(|&b| b == 0xee));
}

/// An emulated get whose reply waits for room on a full lane, while the target unmaps
/// the region, completes with an error and reads nothing: the target checks the region
/// again, under its lease, when it copies.
#[test]
fn get_reply_after_unmap_is_an_error_and_reads_nothing() {
    let target_ctx = ctx_with(RmaPath::Auto);
    let mut t = Worker::new(&target_ctx, ThreadMode::Single).unwrap();
    let mut i = Worker::new(&ctx_with(RmaPath::Emulated), ThreadMode::Single).unwrap();
    let i_addr = i.address();
    let ep = i.ep_create(&t.address()).unwrap();
    let back = t.ep_create(&i_addr).unwrap();
    let mut backing = vec![0x5au8; 4096];
    // SAFETY: `backing` outlives the mapping (dropped before it below).
    let mem = unsafe { target_ctx.mem_map(Some(backing.as_mut_ptr()), backing.len()) }.unwrap();
    let base = mem.address() as u64;
    let rk = i.rkey_unpack(ep, &mem.rkey_pack()).unwrap();
    assert_eq!(rk.rma_path(), RmaPath::Emulated);
    // The target fills its lane to the initiator, which does not receive meanwhile.
    let flood = [1u8; 8];
    let mut queued = Vec::new();
    let mut in_a_row = 0;
    for n in 0..100_000 {
        // SAFETY: `flood` outlives the sends (waited for below).
        let r = unsafe {
            t.tag_send_nb(
                back,
                ucp::Buf::contig(flood.as_ptr().cast_mut(), 8),
                9,
                false,
                None,
            )
            .unwrap()
        };
        t.progress();
        match r {
            Some(r) if t.request_test(r).unwrap().is_none() => {
                queued.push(r);
                in_a_row += 1;
            }
            Some(r) => t.request_free(r).unwrap(),
            None => in_a_row = 0,
        }
        if in_a_row == 16 {
            break;
        }
        assert!(n < 99_999, "the lane never filled");
    }
    let mut out = vec![0u8; 2048];
    // SAFETY: `out` outlives the request, waited for below.
    let g = unsafe {
        i.get_nb(
            ep,
            Buf::contig(out.as_mut_ptr(), out.len()),
            base + 1024,
            &rk,
            None,
        )
        .unwrap()
        .expect("an emulated get is a request")
    };
    // The request went in the call (the initiator's lane is free); the target takes it,
    // but its reply cannot go while the initiator does not receive.
    for _ in 0..50 {
        t.progress();
    }
    assert_eq!(i.request_test(g).unwrap(), None);
    drop(mem);
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        i.progress();
        t.progress();
        // The initiator takes the flood so the reply gets room.
        while let Some((info, Some(m))) = i.tag_probe(9, u64::MAX, true) {
            let mut sink = [0u8; 8];
            // SAFETY: `sink` outlives the receive, waited for right here.
            let r = unsafe {
                i.tag_msg_recv_nb(m, ucp::Buf::contig(sink.as_mut_ptr(), 8), None)
                    .unwrap()
            };
            assert_eq!(info.length, 8);
            i.wait_request(r, TIMEOUT).unwrap();
        }
        if let Some(s) = i.request_test(g).unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the get never completed");
    };
    i.request_free(g).unwrap();
    assert_eq!(status, Status::InvalidAddr);
    assert!(
        out.iter().all(|&b| b == 0),
        "a byte of unmapped memory was read"
    );
    for r in queued {
        let _ = t.wait_request(r, TIMEOUT);
    }
}

/// Through a key that maps the memory (the in-call paths of put_nb and atomic_fetch_nb
/// with no callback), a put or atomic outside the key, a fetch whose result buffer is too
/// short and a misaligned atomic are refused in the call and change nothing; good ones
/// land and return the previous value.
#[test]
fn direct_key_refuses_bad_calls_in_the_call() {
    let ctx = ctx_with(RmaPath::Auto);
    let mut t = Worker::new(&ctx, ThreadMode::Single).unwrap();
    let mut i = Worker::new(&ctx, ThreadMode::Single).unwrap();
    let ep = i.ep_create(&t.address()).unwrap();
    // Allocated by rucx: a shared segment, which the key maps.
    let mem = ctx.mem_alloc(1024).unwrap();
    let base = mem.address() as u64;
    let view = || {
        // SAFETY: the region is mapped until `mem` drops, at the end; nothing writes it
        // while the copy is taken (every call below completes in the call).
        unsafe { std::slice::from_raw_parts(mem.address(), 1024) }.to_vec()
    };
    // SAFETY: as in `view`.
    unsafe { std::ptr::write_bytes(mem.address(), 0xee, 1024) };
    let rk = i.rkey_unpack(ep, &mem.rkey_pack()).unwrap();
    assert_eq!(rk.rma_path(), RmaPath::Direct);
    assert_eq!(rk.amo_path(), RmaPath::Direct);
    let data = [7u8; 16];
    let put = |i: &mut Worker, addr: u64, len: usize| {
        // SAFETY: `data` outlives the call, which completes or fails in the call
        // (checked below: no request comes back).
        let b = unsafe { Buf::contig(data.as_ptr().cast_mut(), len) };
        i.put_nb(ep, b, addr, &rk, None)
    };
    assert_eq!(put(&mut i, base + 1020, 8), Err(Status::InvalidParam));
    assert_eq!(put(&mut i, base - 8, 8), Err(Status::InvalidParam));
    assert_eq!(put(&mut i, u64::MAX - 4, 8), Err(Status::InvalidParam));
    let mut res = [0u8; 8];
    let fetch = |i: &mut Worker, addr: u64, res: &mut [u8], len: usize| {
        assert!(len <= res.len());
        // SAFETY: `res` outlives the call, which completes or fails in the call.
        let b = unsafe { Buf::contig(res.as_mut_ptr(), len) };
        i.atomic_fetch_nb(ep, AtomicOp::Add, AtomicSize::B64, 5, 0, b, addr, &rk, None)
    };
    assert_eq!(
        fetch(&mut i, base + 1024, &mut res, 8),
        Err(Status::InvalidParam)
    );
    assert_eq!(
        fetch(&mut i, base + 8, &mut res, 4),
        Err(Status::InvalidParam)
    );
    assert_eq!(
        fetch(&mut i, base + 4, &mut res, 8),
        Err(Status::InvalidParam)
    );
    assert_eq!(res, [0u8; 8], "a refused fetch wrote its result");
    assert!(view().iter().all(|&b| b == 0xee), "a refused call wrote");
    // Good calls complete in the call.
    assert_eq!(put(&mut i, base + 16, 16), Ok(None));
    assert_eq!(fetch(&mut i, base + 16, &mut res, 8), Ok(None));
    assert_eq!(u64::from_ne_bytes(res), u64::from_ne_bytes([7; 8]));
    let v = view();
    assert_eq!(v[16..24], (u64::from_ne_bytes([7; 8]) + 5).to_ne_bytes());
    assert_eq!(v[24..32], [7u8; 8]);
    assert!(v[..16].iter().all(|&b| b == 0xee));
    assert!(v[32..].iter().all(|&b| b == 0xee));
    drop(mem);
    t.progress();
}
