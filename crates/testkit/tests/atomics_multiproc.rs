//! Atomics from two processes at once on one word of an `md.mem_alloc` segment owned by
//! this process: for every operation and both widths the final value is exact.
//!
//! The two `atomic-worker` peers unpack the segment's key (a direct mapping), meet at a
//! barrier word and run `n` operations each in lockstep chunks of 128 (neither gets more
//! than a chunk ahead), so the two streams interleave on the word even on one CPU:
//! - add: `n` adds each (posted and fetched alternately): final = init + n·(a0 + a1);
//! - and / or: each clears / sets its own bit mask one bit per operation: final =
//!   init & !(m0 | m1) / init | m0 | m1;
//! - xor: each xors `n` pseudo-random values: final = init ^ X0 ^ X1;
//! - swap: each swaps in `n` distinct values; the values fetched plus the final value are
//!   exactly the initial value plus the values swapped in (checked by sum and xor), and
//!   the final value is the last value of one of the workers;
//! - cswap: each increments `n` times with a compare-and-swap loop: final = init + 2n.
//!
//! The words next to the target word are sentinels that must not change; the 32-bit word
//! is 4- but not 8-byte aligned. Values with bits above the width check truncation.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use testkit::{hex, pattern, Peer, STEP_TIMEOUT};
use uct::{AtomicSize, Iface, IfaceConfig, Md, Transport};

const PEER: &str = env!("CARGO_BIN_EXE_rucx-testpeer");

/// The workers' start barrier and chunk counters (three 64-bit words).
const SYNC: usize = 0;
const W64: usize = 64;
const W32: usize = 132;
const N: u64 = 100_000;

struct Mem {
    base: *mut u8,
}

impl Mem {
    fn a64(&self, off: usize) -> &AtomicU64 {
        assert_eq!(off % 8, 0);
        // SAFETY: off + 8 <= 4096 (the allocation), 8-byte aligned (segment is page
        // aligned); the workers access it only through atomics as well.
        unsafe { AtomicU64::from_ptr(self.base.add(off).cast()) }
    }

    fn a32(&self, off: usize) -> &AtomicU32 {
        assert_eq!(off % 4, 0);
        // SAFETY: as in a64, 4-byte aligned.
        unsafe { AtomicU32::from_ptr(self.base.add(off).cast()) }
    }

    fn get(&self, off: usize, size: AtomicSize) -> u64 {
        match size {
            AtomicSize::B32 => u64::from(self.a32(off).load(Ordering::SeqCst)),
            AtomicSize::B64 => self.a64(off).load(Ordering::SeqCst),
        }
    }

    fn set(&self, off: usize, size: AtomicSize, v: u64) {
        match size {
            AtomicSize::B32 => self.a32(off).store(v as u32, Ordering::SeqCst),
            AtomicSize::B64 => self.a64(off).store(v, Ordering::SeqCst),
        }
    }
}

/// Sentinels around the target word of `size`: (offset, width) pairs and their values.
fn sentinels(size: AtomicSize) -> Vec<(usize, AtomicSize, u64)> {
    match size {
        AtomicSize::B64 => vec![
            (W64 - 8, AtomicSize::B64, 0x5555_aaaa_5555_aaaa),
            (W64 + 8, AtomicSize::B64, 0xaaaa_5555_aaaa_5555),
        ],
        AtomicSize::B32 => vec![
            (W32 - 4, AtomicSize::B32, 0x5555_aaaa),
            (W32 + 4, AtomicSize::B32, 0xaaaa_5555),
        ],
    }
}

#[test]
fn atomics_two_processes_on_one_word_every_op_and_width() {
    let _serial = testkit::heavy_test();
    let md = Md::open(Transport::Shm);
    let h = md.mem_alloc(4096).unwrap();
    let mem = Mem { base: h.address() };
    let iface = Iface::open(Transport::Shm, &IfaceConfig::from_env().unwrap()).unwrap();
    let line = format!(
        "target {} {}",
        hex::encode(&iface.address()),
        hex::encode(&h.pack_rkey())
    );
    let mut workers: Vec<Peer> = (0..2)
        .map(|i| Peer::spawn(PEER, &["atomic-worker", &i.to_string()]).unwrap())
        .collect();
    for w in &mut workers {
        w.send(&line).unwrap();
        assert_eq!(
            w.expect("ready", STEP_TIMEOUT).unwrap(),
            ["1"],
            "the key must map directly"
        );
    }
    let base = h.address() as u64;

    for size in [AtomicSize::B32, AtomicSize::B64] {
        let (off, bits, mask) = match size {
            AtomicSize::B32 => (W32, 32, u64::from(u32::MAX)),
            AtomicSize::B64 => (W64, 64, u64::MAX),
        };
        for op in ["add", "and", "or", "xor", "swap", "cswap"] {
            let (init, args): (u64, [u64; 2]) = match op {
                "add" => (mask - 1000, [3, 0x1_0000_0005]),
                "and" => (mask, [0x0f0f_0f0f_0f0f_0f0f, 0x00ff_00ff_00ff_00ff]),
                "or" => (0, [0x8000_0001_0000_1000, 0x0000_0300_0f00_0001]),
                "xor" => (0x1234_5678_9abc_def0 & mask, [1, 2]),
                "swap" => (7, [1 << 20, 1 << 21]),
                _ => (mask - 5, [0, 0]),
            };
            let what = format!("{op} {bits}-bit");
            for k in 0..3 {
                mem.set(SYNC + 8 * k, AtomicSize::B64, 0);
            }
            mem.set(off, size, init);
            for (o, s, v) in sentinels(size) {
                mem.set(o, s, v);
            }
            for (w, a) in workers.iter_mut().zip(args) {
                w.send(format!(
                    "run {op} {bits} {} {N} {a} {}",
                    base + off as u64,
                    base + SYNC as u64
                ))
                .unwrap();
            }
            let mut res = Vec::new();
            for w in &mut workers {
                let r = w.expect("done", STEP_TIMEOUT).unwrap();
                let x: u64 = r[0].parse().unwrap();
                let y: u64 = r[1].parse().unwrap();
                res.push((x, y));
            }
            let fin = mem.get(off, size);
            match op {
                "add" => {
                    let want = args
                        .iter()
                        .fold(init, |v, a| v.wrapping_add(N.wrapping_mul(a & mask)))
                        & mask;
                    assert_eq!(fin, want, "{what}");
                }
                "and" => assert_eq!(fin, init & !(args[0] | args[1]) & mask, "{what}"),
                "or" => assert_eq!(fin, (init | args[0] | args[1]) & mask, "{what}"),
                "xor" => {
                    let mut want = init;
                    for (k, &seed) in args.iter().enumerate() {
                        let x = (0..N).fold(0, |x, j| x ^ (pattern::mix64(seed ^ j) & mask));
                        assert_eq!(res[k].0, x, "{what}: worker {k}'s xor of its values");
                        want ^= x;
                    }
                    assert_eq!(fin, want, "{what}");
                }
                "swap" => {
                    // Conservation: {init} + swapped in == {final} + fetched.
                    let put_sum = args.iter().fold(init, |s, &b| {
                        (0..N).fold(s, |s, j| s.wrapping_add((b + j) & mask))
                    });
                    let put_xor = args
                        .iter()
                        .fold(init, |s, &b| (0..N).fold(s, |s, j| s ^ ((b + j) & mask)));
                    let got_sum = res.iter().fold(fin, |s, r| s.wrapping_add(r.0));
                    let got_xor = res.iter().fold(fin, |s, r| s ^ r.1);
                    assert_eq!(got_sum, put_sum, "{what}: sum of values");
                    assert_eq!(got_xor, put_xor, "{what}: xor of values");
                    assert!(
                        args.iter().any(|&b| fin == (b + N - 1) & mask),
                        "{what}: final {fin:#x} is not the last value of a worker"
                    );
                }
                _ => {
                    assert_eq!(fin, init.wrapping_add(2 * N) & mask, "{what}");
                    // Proof that the two streams interleaved on the word: each worker's
                    // compare missed at least once after the other one's chunk.
                    assert!(res.iter().all(|r| r.0 >= 1), "{what}: no retries {res:?}");
                    eprintln!(
                        "{what}: {} + {} compare-and-swap retries",
                        res[0].0, res[1].0
                    );
                }
            }
            for (o, s, v) in sentinels(size) {
                assert_eq!(mem.get(o, s), v, "{what}: a neighbouring word changed");
            }
            assert_eq!(mem.get(SYNC, AtomicSize::B64), 2, "{what}: barrier");
            let chunks = (N - 1) / 128;
            for k in 1..3 {
                assert_eq!(
                    mem.get(SYNC + 8 * k, AtomicSize::B64),
                    chunks,
                    "{what}: chunk counter"
                );
            }
        }
    }
    for w in &mut workers {
        w.close_stdin();
        assert!(
            w.expect_exit(STEP_TIMEOUT).unwrap().success(),
            "{}",
            w.name()
        );
    }
}
