//! Packed remote keys of at most 16 bytes on every access path, between workers of one
//! process: self (by pointer), shm (a mapped segment, CMA), tcp and udp (emulated by the
//! target), and the empty key. Each path packs the key of allocated and of registered
//! memory, checks its size, unpacks it for the endpoint, and puts, gets and runs atomics
//! with every byte checked; accesses outside the region are refused. (Across processes,
//! `rma.rs` runs the same paths with keys that travel between them.)

use std::time::{Duration, Instant};
use ucp::{
    AtomicOp, AtomicSize, Buf, Config, Context, Ep, Features, MemH, RmaPath, ThreadMode, Worker,
};
use ucs::Status;
use uct::Transport;

const LEN: usize = 200_003;

fn ctx(t: Transport, path: RmaPath) -> Context {
    let cfg = Config {
        transports: vec![t],
        rma_path: path,
        ..Config::default()
    };
    Context::with_config(
        Features::TAG | Features::RMA | Features::AMO32 | Features::AMO64,
        cfg,
        uct::IfaceConfig::default(),
    )
    .unwrap()
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(2654435761).wrapping_add(seed * 977) >> 5) as u8)
        .collect()
}

/// The initiator and, when it is another worker, the target (which executes emulated
/// accesses in its progress).
struct Pair<'a> {
    a: &'a mut Worker,
    b: Option<&'a mut Worker>,
    ep: Ep,
}

impl Pair<'_> {
    fn pump(&mut self, mut done: impl FnMut(&mut Worker) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(self.a) {
            self.a.progress();
            if let Some(b) = self.b.as_mut() {
                b.progress();
            }
            assert!(Instant::now() < deadline, "timed out");
        }
    }

    fn wait(&mut self, r: Option<ucp::Request>) -> Status {
        let Some(r) = r else { return Status::Ok };
        let mut st = None;
        self.pump(|a| {
            st = a.request_test(r).unwrap();
            st.is_some()
        });
        st.unwrap()
    }

    fn flush(&mut self) -> Status {
        let f = self.a.ep_flush_nb(self.ep, None).unwrap();
        self.wait(f)
    }

    fn fetch(
        &mut self,
        op: AtomicOp,
        size: AtomicSize,
        v: u64,
        cmp: u64,
        addr: u64,
        rk: &ucp::RemoteKey,
    ) -> u64 {
        let mut out = 0u64;
        // SAFETY: `out` outlives the request, waited for here.
        let r = unsafe {
            self.a
                .atomic_fetch_nb(
                    self.ep,
                    op,
                    size,
                    v,
                    cmp,
                    Buf::contig((&mut out as *mut u64).cast(), 8),
                    addr,
                    rk,
                    None,
                )
                .unwrap()
        };
        assert_eq!(self.wait(r), Status::Ok);
        out
    }
}

/// Packs `mem`'s key, checks its size, unpacks it on the pair's endpoint and exercises
/// every operation through it, checking every byte of the region.
fn exercise(p: &mut Pair<'_>, mem: &MemH, expect: RmaPath, what: &str) {
    let key = mem.rkey_pack();
    eprintln!("{what}: packed key of {} bytes", key.len());
    assert!(key.len() <= 16, "{what}: packed key of {} bytes", key.len());
    let rk = p.a.rkey_unpack(p.ep, &key).unwrap();
    assert_eq!(rk.rma_path(), expect, "{what}");
    access(p, mem, &rk, what);
}

fn access(p: &mut Pair<'_>, mem: &MemH, rk: &ucp::RemoteKey, what: &str) {
    let base = mem.address() as u64;
    let len = mem.len();
    // SAFETY: the region is `len` bytes mapped while `mem` lives; the test reads it only
    // between operations (nothing writes it concurrently then).
    let region = || unsafe { std::slice::from_raw_parts(mem.address(), len) };

    let data = pattern(len, 1);
    p.a.put_nbi(p.ep, &data[..len / 2], base, rk).unwrap();
    // SAFETY: `data` outlives the request.
    let r = unsafe {
        p.a.put_nb(
            p.ep,
            Buf::contig(data[len / 2..].as_ptr().cast_mut(), len - len / 2),
            base + (len / 2) as u64,
            rk,
            None,
        )
        .unwrap()
    };
    assert_eq!(p.wait(r), Status::Ok, "{what}: put");
    assert_eq!(p.flush(), Status::Ok);
    assert!(region() == &data[..], "{what}: put bytes");

    let mut back = vec![0u8; len - 5];
    // SAFETY: `back` outlives the request.
    let r = unsafe {
        p.a.get_nb(
            p.ep,
            Buf::contig(back.as_mut_ptr(), back.len()),
            base + 5,
            rk,
            None,
        )
        .unwrap()
    };
    assert_eq!(p.wait(r), Status::Ok, "{what}: get");
    assert!(back[..] == data[5..], "{what}: get bytes");
    let mut implicit = vec![0u8; 4096];
    // SAFETY: `implicit` outlives the flush that completes the get.
    unsafe {
        p.a.get_nbi(
            p.ep,
            Buf::contig(implicit.as_mut_ptr(), 4096),
            base + 100,
            rk,
        )
        .unwrap()
    };
    assert_eq!(p.flush(), Status::Ok);
    assert!(
        implicit[..] == data[100..4196],
        "{what}: implicit get bytes"
    );

    // Atomics on the first aligned words.
    let a = base.next_multiple_of(8);
    let word =
        |at: u64| u64::from_ne_bytes(region()[(at - base) as usize..][..8].try_into().unwrap());
    let old = word(a);
    p.a.atomic_post(p.ep, AtomicOp::Add, AtomicSize::B64, 5, a, rk)
        .unwrap();
    assert_eq!(p.flush(), Status::Ok);
    assert_eq!(word(a), old.wrapping_add(5), "{what}: posted add");
    let prev = p.fetch(
        AtomicOp::Swap,
        AtomicSize::B64,
        0x1122_3344_5566_7788,
        0,
        a,
        rk,
    );
    assert_eq!(prev, old.wrapping_add(5), "{what}: swap");
    let prev = p.fetch(
        AtomicOp::Cswap,
        AtomicSize::B64,
        42,
        0x1122_3344_5566_7788,
        a,
        rk,
    );
    assert_eq!(prev, 0x1122_3344_5566_7788, "{what}: cswap");
    assert_eq!(word(a), 42, "{what}: cswap result");
    let w32 = u32::from_ne_bytes(region()[(a + 8 - base) as usize..][..4].try_into().unwrap());
    let prev = p.fetch(AtomicOp::Add, AtomicSize::B32, 3, 0, a + 8, rk);
    assert_eq!(prev, u64::from(w32), "{what}: 32-bit fetch-add");
    let after = u32::from_ne_bytes(region()[(a + 8 - base) as usize..][..4].try_into().unwrap());
    assert_eq!(
        after,
        w32.wrapping_add(3),
        "{what}: 32-bit fetch-add result"
    );
    // Everything but the words the atomics changed is still the pattern.
    let (lo, hi) = ((a - base) as usize, (a - base) as usize + 12);
    assert!(
        region()[..lo] == data[..lo] && region()[hi..] == data[hi..],
        "{what}: bytes"
    );

    // Outside the region: refused, at once or when the target answers.
    let src = [1u8, 2];
    // SAFETY: `src` outlives the request.
    let r = unsafe {
        p.a.put_nb(
            p.ep,
            Buf::contig(src.as_ptr().cast_mut(), 2),
            base + len as u64 - 1,
            rk,
            None,
        )
    };
    assert!(
        r.is_err() || p.wait(r.unwrap()) != Status::Ok,
        "{what}: put across the end"
    );
    let mut two = [0u8; 2];
    // SAFETY: `two` outlives the request.
    let r = unsafe {
        p.a.get_nb(
            p.ep,
            Buf::contig(two.as_mut_ptr(), 2),
            base.wrapping_sub(1),
            rk,
            None,
        )
    };
    assert!(
        r.is_err() || p.wait(r.unwrap()) != Status::Ok,
        "{what}: get before the start"
    );
}

/// Allocated and registered memory of `target_ctx`, reached from `a` over `ep`.
fn both_kinds(p: &mut Pair<'_>, target_ctx: &Context, alloc: RmaPath, reg: RmaPath, what: &str) {
    let mem = target_ctx.mem_alloc(LEN).unwrap();
    exercise(p, &mem, alloc, &format!("{what}, allocated"));
    let mut own = vec![0u8; LEN + 1];
    // SAFETY: one byte into `own` (an odd address), which outlives the mapping.
    let mem = unsafe { target_ctx.mem_map(Some(own.as_mut_ptr().add(1)), LEN) }.unwrap();
    exercise(p, &mem, reg, &format!("{what}, registered"));
    drop(mem);
    drop(own);
}

fn two_workers(t: Transport, path: RmaPath, alloc: RmaPath, reg: RmaPath, what: &str) {
    let c = ctx(t, path);
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    let mut p = Pair {
        a: &mut a,
        b: Some(&mut b),
        ep,
    };
    both_kinds(&mut p, &c, alloc, reg, what);
    assert_eq!(a.ep_transport(ep).unwrap(), Some(t));
}

#[test]
fn self_by_pointer() {
    let c = ctx(Transport::SelfTl, RmaPath::Auto);
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let addr = a.address();
    let ep = a.ep_create(&addr).unwrap();
    let mut p = Pair {
        a: &mut a,
        b: None,
        ep,
    };
    both_kinds(&mut p, &c, RmaPath::Direct, RmaPath::Direct, "self");
    assert_eq!(a.ep_transport(ep).unwrap(), Some(Transport::SelfTl));
}

#[test]
fn shm_mapped_segment_and_cma() {
    two_workers(
        Transport::Shm,
        RmaPath::Auto,
        RmaPath::Direct,
        RmaPath::Cma,
        "shm",
    );
}

#[test]
fn shm_cma_forced() {
    two_workers(
        Transport::Shm,
        RmaPath::Cma,
        RmaPath::Cma,
        RmaPath::Cma,
        "shm (cma)",
    );
}

#[test]
fn shm_emulated_forced() {
    two_workers(
        Transport::Shm,
        RmaPath::Emulated,
        RmaPath::Emulated,
        RmaPath::Emulated,
        "shm (emulated)",
    );
}

#[test]
fn tcp_emulated() {
    two_workers(
        Transport::Tcp,
        RmaPath::Auto,
        RmaPath::Emulated,
        RmaPath::Emulated,
        "tcp",
    );
}

#[test]
fn udp_emulated() {
    two_workers(
        Transport::Udp,
        RmaPath::Auto,
        RmaPath::Emulated,
        RmaPath::Emulated,
        "udp",
    );
}

/// The empty key (one zero byte, as UCX's key of unregistered memory begins): emulated,
/// and the target accepts exactly the accesses that fall in one of its mapped regions.
#[test]
fn empty_key_reaches_any_mapped_region_only() {
    let c = ctx(Transport::Shm, RmaPath::Auto);
    let mut a = Worker::new(&c, ThreadMode::Single).unwrap();
    let mut b = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = a.ep_create(&b.address()).unwrap();
    let mut p = Pair {
        a: &mut a,
        b: Some(&mut b),
        ep,
    };
    let rk = p.a.rkey_unpack(ep, &[0]).unwrap();
    assert_eq!(rk.rma_path(), RmaPath::Emulated);
    assert_eq!(rk.amo_path(), RmaPath::Emulated);
    for bad in [&[0u8, 0][..], &[0, 1], &[]] {
        assert_eq!(p.a.rkey_unpack(ep, bad).err(), Some(Status::InvalidParam));
    }
    let mem = c.mem_alloc(LEN).unwrap();
    access(&mut p, &mem, &rk, "empty key on an allocation");
    let mut own = vec![0u8; LEN];
    // SAFETY: `own` outlives the mapping.
    let reg = unsafe { c.mem_map(Some(own.as_mut_ptr()), LEN) }.unwrap();
    access(&mut p, &reg, &rk, "empty key on a registration");
    // Memory that is not mapped (any more): refused.
    let gone = reg.address() as u64;
    drop(reg);
    let seven = [7u8; 8];
    let before = own.clone();
    // SAFETY: `seven` outlives the request.
    let r = unsafe {
        p.a.put_nb(
            ep,
            Buf::contig(seven.as_ptr().cast_mut(), 8),
            gone,
            &rk,
            None,
        )
        .unwrap()
    };
    assert_ne!(p.wait(r), Status::Ok, "a put into unmapped memory");
    assert!(own == before, "a put into unmapped memory wrote");
    let stack = [0u8; 64];
    // SAFETY: as above.
    let r = unsafe {
        p.a.put_nb(
            ep,
            Buf::contig(seven.as_ptr().cast_mut(), 8),
            stack.as_ptr() as u64,
            &rk,
            None,
        )
        .unwrap()
    };
    assert_ne!(p.wait(r), Status::Ok, "a put into never-mapped memory");
    assert_eq!(std::hint::black_box(stack), [0u8; 64]);
}
