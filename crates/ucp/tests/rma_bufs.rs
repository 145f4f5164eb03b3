//! Remote memory access with every kind of `Buf` (an I/O vector, an application
//! datatype, owned memory) on the direct and the emulated path, and fetching atomics that
//! write exactly the operation's size into their result buffer (a shorter one is refused).
//! Two workers of one process; every byte checked.

mod common;

use common::{pattern, TIMEOUT};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use ucp::{
    AtomicOp, AtomicSize, Buf, Config, Context, Features, GenericDt, MemH, RemoteKey, Request,
    RmaPath, ThreadMode, Worker,
};
use ucs::Status;

const LEN: usize = 3000;

fn ctx_with(path: RmaPath) -> Context {
    let cfg = Config {
        rma_path: path,
        ..Config::from_env().unwrap()
    };
    Context::with_config(
        Features::RMA | Features::AMO32 | Features::AMO64,
        cfg,
        uct::IfaceConfig::default(),
    )
    .unwrap()
}

/// Progresses both workers until `r` (if any) completes; its status.
fn pump(i: &mut Worker, t: &mut Worker, r: Option<Request>) -> Status {
    let Some(r) = r else { return Status::Ok };
    let deadline = Instant::now() + TIMEOUT;
    loop {
        t.progress();
        i.progress();
        if let Some(s) = i.request_test(r).unwrap() {
            i.request_free(r).unwrap();
            return s;
        }
        assert!(Instant::now() < deadline, "an operation timed out");
    }
}

/// A copy of the target's region.
fn region(mem: &MemH) -> Vec<u8> {
    // SAFETY: the region is mem.len() bytes mapped while `mem` lives; no request runs on
    // it now (every operation was waited for).
    unsafe { std::slice::from_raw_parts(mem.address(), mem.len()) }.to_vec()
}

/// A packed datatype whose stream lands in (and comes from) a shared vector, reversed.
struct Reversed(Arc<Mutex<Vec<u8>>>);

impl GenericDt for Reversed {
    fn packed_size(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn pack(&mut self, off: usize, dst: &mut [u8]) -> usize {
        let v = self.0.lock().unwrap();
        for (k, d) in dst.iter_mut().enumerate() {
            *d = v[v.len() - 1 - (off + k)];
        }
        dst.len()
    }
    fn unpack(&mut self, off: usize, src: &[u8]) -> ucs::Result<()> {
        let mut v = self.0.lock().unwrap();
        let n = v.len();
        for (k, s) in src.iter().enumerate() {
            v[n - 1 - (off + k)] = *s;
        }
        Ok(())
    }
}

struct Pair {
    i: Worker,
    t: Worker,
    ep: ucp::Ep,
    mem: MemH,
    rk: RemoteKey,
}

fn pair(path: RmaPath) -> Pair {
    let tctx = ctx_with(RmaPath::Auto);
    let mut t = Worker::new(&tctx, ThreadMode::Single).unwrap();
    let mut i = Worker::new(&ctx_with(path), ThreadMode::Single).unwrap();
    let ep = i.ep_create(&t.address()).unwrap();
    let mem = tctx.mem_alloc(LEN + 64).unwrap();
    let rk = i.rkey_unpack(ep, &mem.rkey_pack()).unwrap();
    Pair { i, t, ep, mem, rk }
}

fn every_kind_of_buffer(path: RmaPath) {
    let Pair {
        mut i,
        mut t,
        ep,
        mem,
        rk,
    } = pair(path);
    let what = format!("{path:?} (resolved {:?})", rk.rma_path());
    let base = mem.address() as u64;

    // Put from an I/O vector of three uneven pieces (one empty).
    let data = pattern(LEN, 1);
    let mut parts = [data[..700].to_vec(), Vec::new(), data[700..].to_vec()];
    let segs: Vec<(*mut u8, usize)> = parts
        .iter_mut()
        .map(|v| (v.as_mut_ptr(), v.len()))
        .collect();
    // SAFETY: `parts` outlives the request (pump waits for it) and is not written.
    let src = unsafe { Buf::iov(segs) };
    let r = i.put_nb(ep, src, base, &rk, None).unwrap();
    assert_eq!(pump(&mut i, &mut t, r), Status::Ok, "{what}: iov put");
    assert!(region(&mem)[..LEN] == data[..], "{what}: iov put bytes");

    // Get into an I/O vector.
    let mut back = [vec![0u8; 1234], vec![0u8; LEN - 1234]];
    let segs: Vec<(*mut u8, usize)> = back.iter_mut().map(|v| (v.as_mut_ptr(), v.len())).collect();
    // SAFETY: `back` outlives the request and is not touched meanwhile.
    let dst = unsafe { Buf::iov(segs) };
    let r = i.get_nb(ep, dst, base, &rk, None).unwrap();
    assert_eq!(pump(&mut i, &mut t, r), Status::Ok, "{what}: iov get");
    assert!(back.concat() == data, "{what}: iov get bytes");

    // Get into an application datatype (which reverses what it unpacks).
    let into = Arc::new(Mutex::new(vec![0u8; LEN]));
    let r = i
        .get_nb(ep, Buf::generic(Reversed(into.clone())), base, &rk, None)
        .unwrap();
    assert_eq!(pump(&mut i, &mut t, r), Status::Ok, "{what}: generic get");
    let mut want = data.clone();
    want.reverse();
    assert!(*into.lock().unwrap() == want, "{what}: generic get bytes");

    // Put from owned memory, at an offset.
    let data2 = pattern(LEN, 2);
    let r = i
        .put_nb(ep, Buf::from(data2.clone()), base + 64, &rk, None)
        .unwrap();
    assert_eq!(pump(&mut i, &mut t, r), Status::Ok, "{what}: owned put");
    let now = region(&mem);
    assert!(
        now[..64] == data[..64] && now[64..64 + LEN] == data2[..],
        "{what}: owned put bytes"
    );
}

#[test]
fn rma_with_every_kind_of_buffer_direct_or_auto() {
    every_kind_of_buffer(RmaPath::Auto);
}

#[test]
fn rma_with_every_kind_of_buffer_emulated() {
    every_kind_of_buffer(RmaPath::Emulated);
}

/// The word of `size` at `addr`, read by a fetching add of 0 (both workers progressed:
/// an emulated access needs the target's progress).
fn fetch(
    i: &mut Worker,
    t: &mut Worker,
    ep: ucp::Ep,
    size: AtomicSize,
    addr: u64,
    rk: &RemoteKey,
) -> u64 {
    let mut res = [0u8; 8];
    // SAFETY: `res` outlives the request (pump waits for it) and is not touched.
    let b = unsafe { Buf::contig(res.as_mut_ptr(), 8) };
    let r = i
        .atomic_fetch_nb(ep, AtomicOp::Add, size, 0, 0, b, addr, rk, None)
        .unwrap();
    assert_eq!(pump(i, t, r), Status::Ok, "fetch of {size:?} at {addr:#x}");
    match size {
        AtomicSize::B32 => u64::from(u32::from_ne_bytes([res[0], res[1], res[2], res[3]])),
        AtomicSize::B64 => u64::from_ne_bytes(res),
    }
}

fn atomic_results(path: RmaPath) {
    let Pair {
        mut i,
        mut t,
        ep,
        mem,
        rk,
    } = pair(path);
    let what = format!("{path:?} (resolved {:?})", rk.amo_path());
    let base = mem.address() as u64;
    // The word at 0 starts at zero (mem_alloc zeroes); add 5 twice as 32 bits.
    let mut res = [0xaau8; 8];
    for round in 0..2u32 {
        // SAFETY: `res` outlives the request (pump waits for it) and is not touched.
        let b = unsafe { Buf::contig(res.as_mut_ptr(), res.len()) };
        let r = i
            .atomic_fetch_nb(ep, AtomicOp::Add, AtomicSize::B32, 5, 0, b, base, &rk, None)
            .unwrap();
        assert_eq!(pump(&mut i, &mut t, r), Status::Ok, "{what}: fetch-add");
        assert_eq!(
            res[..4],
            (5 * round).to_ne_bytes(),
            "{what}: round {round}: the previous value"
        );
        assert_eq!(res[4..], [0xaa; 4], "{what}: wrote past a 32-bit result");
    }
    // 64 bits at 8: swap in a value, read the previous one back.
    let mut res = [0u8; 8];
    // SAFETY: as above.
    let b = unsafe { Buf::contig(res.as_mut_ptr(), 8) };
    let r = i
        .atomic_fetch_nb(
            ep,
            AtomicOp::Swap,
            AtomicSize::B64,
            77,
            0,
            b,
            base + 8,
            &rk,
            None,
        )
        .unwrap();
    assert_eq!(pump(&mut i, &mut t, r), Status::Ok, "{what}: swap");
    assert_eq!(u64::from_ne_bytes(res), 0, "{what}: swap's previous value");
    let got = fetch(&mut i, &mut t, ep, AtomicSize::B64, base + 8, &rk);
    assert_eq!(got, 77, "{what}: the swapped value");
    let got = fetch(&mut i, &mut t, ep, AtomicSize::B32, base, &rk);
    assert_eq!(got, 10, "{what}: the 32-bit word");

    // A result buffer shorter than the operation is refused, and nothing is written.
    let mut short = [0x55u8; 4];
    // SAFETY: refused in the call; nothing is written later.
    let b = unsafe { Buf::contig(short.as_mut_ptr(), short.len()) };
    let r = i.atomic_fetch_nb(
        ep,
        AtomicOp::Add,
        AtomicSize::B64,
        1,
        0,
        b,
        base + 8,
        &rk,
        None,
    );
    assert_eq!(r.err(), Some(Status::InvalidParam), "{what}: short result");
    assert_eq!(short, [0x55; 4]);
    let r = i.atomic_fetch_nb(
        ep,
        AtomicOp::Add,
        AtomicSize::B32,
        1,
        0,
        Buf::empty(),
        base,
        &rk,
        None,
    );
    assert_eq!(r.err(), Some(Status::InvalidParam), "{what}: no result");
    // The refused operations changed nothing.
    let got = fetch(&mut i, &mut t, ep, AtomicSize::B64, base + 8, &rk);
    assert_eq!(got, 77, "{what}: after the refusals");
}

#[test]
fn fetching_atomics_write_their_size_direct_or_auto() {
    atomic_results(RmaPath::Auto);
}

#[test]
fn fetching_atomics_write_their_size_emulated() {
    atomic_results(RmaPath::Emulated);
}
