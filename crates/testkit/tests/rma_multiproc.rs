//! put and get between processes over shm, from 1 byte to 16 MiB, every byte checked on
//! both sides: through cross-memory attach into memory the target registered
//! (`md.mem_reg`, a CMA key) and through a direct mapping of memory it allocated
//! (`md.mem_alloc`, a segment key).
//!
//! The target (`rma-target` peer) fills its memory with a seed's pattern. This process
//! gets it and checks it (the origin's side), then puts other patterns into whole and
//! partial ranges with each put flavour, flushes, and has the target check every byte of
//! its memory: the range holds the new pattern and everything around it the old one
//! (the target's side).

use testkit::{hex, pattern, Peer, STEP_TIMEOUT};
use uct::{EpId, Iface, IfaceConfig, Md, Outcome, Rkey, Transport};

const PEER: &str = env!("CARGO_BIN_EXE_rucx-testpeer");

const SIZES: [usize; 8] = [1, 7, 64, 4095, 4096, 65537, (1 << 20) + 3, 16 << 20];

fn done<T: std::fmt::Debug>(r: ucs::Result<Outcome<T>>, what: &str) -> T {
    match r {
        Ok(Outcome::Done(v)) => v,
        other => panic!("{what}: {other:?}"),
    }
}

struct Origin {
    iface: Iface,
    ep: EpId,
    md: Md,
    target: Peer,
}

impl Origin {
    fn flush(&mut self) {
        done(self.iface.ep_flush(self.ep, 0), "ep_flush");
    }

    /// Has the target check that `[off, off+len)` holds `inner` and the rest `outer`.
    fn verify(&mut self, outer: u64, off: usize, len: usize, inner: u64, what: &str) {
        self.target
            .send(format!("verify {outer} {off} {len} {inner}"))
            .unwrap();
        if let Err(e) = self.target.expect("ok", STEP_TIMEOUT) {
            panic!("{what}: the target found: {e}");
        }
    }

    fn fill(&mut self, seed: u64) {
        self.target.send(format!("fill {seed}")).unwrap();
        self.target.expect("ok", STEP_TIMEOUT).unwrap();
    }

    fn get_zcopy(&mut self, rkey: &Rkey, off: usize, len: usize) -> Vec<u8> {
        let mut dst = vec![0u8; len];
        let (a, rest) = dst.split_at_mut(len / 3);
        let (b, c) = rest.split_at_mut(rest.len() / 2);
        let addr = rkey.range().0 + off as u64;
        done(
            self.iface.get_zcopy(self.ep, &mut [a, b, c], addr, rkey, 0),
            "get_zcopy",
        );
        self.flush();
        dst
    }

    fn get_bcopy(&mut self, rkey: &Rkey, off: usize, len: usize) -> Vec<u8> {
        let chunk = self.iface.attr().max_get_bcopy;
        let mut got = Vec::with_capacity(len);
        for c in (off..off + len).step_by(chunk) {
            let n = chunk.min(off + len - c);
            let addr = rkey.range().0 + c as u64;
            done(
                self.iface
                    .get_bcopy(self.ep, n, addr, rkey, |d| got.extend_from_slice(d), 0),
                "get_bcopy",
            );
        }
        self.flush();
        got
    }
}

fn put_get(kind: &str) {
    let _serial = testkit::heavy_test();
    let mut target = Peer::spawn(PEER, &["rma-target"]).unwrap();
    let taddr = hex::decode(&target.expect("addr", STEP_TIMEOUT).unwrap().concat()).unwrap();
    let mut iface = Iface::open(Transport::Shm, &IfaceConfig::from_env().unwrap()).unwrap();
    let ep = iface.ep_create(&taddr).unwrap();
    let mut o = Origin {
        iface,
        ep,
        md: Md::open(Transport::Shm),
        target,
    };
    let attr = o.iface.attr().clone();

    for size in SIZES {
        let what = |op: &str| format!("{kind} {size} B: {op}");
        o.target.send(format!("new {kind} {size} 1")).unwrap();
        let packed = hex::decode(&o.target.expect("buf", STEP_TIMEOUT).unwrap().concat()).unwrap();
        let rkey = o.md.rkey_unpack(&packed).unwrap();
        assert_eq!(
            rkey.is_direct(),
            kind == "alloc",
            "{}",
            what("access path of the key")
        );
        assert_eq!(rkey.range().1, size as u64);
        let base = rkey.range().0;

        // The origin reads what the target wrote.
        let got = o.get_zcopy(&rkey, 0, size);
        assert_eq!(
            pattern::check_mem(&got, 1, 0),
            None,
            "{}",
            what("get_zcopy of the whole")
        );
        let got = o.get_bcopy(&rkey, 0, size);
        assert_eq!(
            pattern::check_mem(&got, 1, 0),
            None,
            "{}",
            what("get_bcopy of the whole")
        );

        // put_zcopy of the whole region in three pieces (the middle one empty for size 1).
        let src = pattern::mem_vec(size, 2, 0);
        let (a, rest) = src.split_at(size / 2);
        let (b, c) = rest.split_at(rest.len() / 2);
        done(
            o.iface.put_zcopy(o.ep, &[a, b, c], base, &rkey, 0),
            "put_zcopy",
        );
        o.flush();
        o.verify(1, 0, size, 2, &what("put_zcopy of the whole"));

        // Partial ranges: all but the first and last byte, so that a write one byte too
        // long or too early shows.
        let (off, len) = if size > 2 { (1, size - 2) } else { (0, size) };
        let src = pattern::mem_vec(len, 3, off as u64);
        o.fill(1);
        for c in (0..len).step_by(attr.max_put_bcopy) {
            let part = &src[c..len.min(c + attr.max_put_bcopy)];
            let n = done(
                o.iface.put_bcopy(
                    o.ep,
                    |buf| {
                        buf[..part.len()].copy_from_slice(part);
                        part.len()
                    },
                    base + (off + c) as u64,
                    &rkey,
                ),
                "put_bcopy",
            );
            assert_eq!(n, part.len());
        }
        o.flush();
        o.verify(1, off, len, 3, &what("put_bcopy of the inner range"));

        if size <= 65537 {
            let src = pattern::mem_vec(len, 4, off as u64);
            o.fill(1);
            for c in (0..len).step_by(attr.max_put_short) {
                let part = &src[c..len.min(c + attr.max_put_short)];
                done(
                    o.iface
                        .put_short(o.ep, part, base + (off + c) as u64, &rkey),
                    "put_short",
                );
            }
            o.flush();
            o.verify(1, off, len, 4, &what("put_short of the inner range"));
        }

        // The target rewrites its memory; the origin reads an inner range at an offset.
        o.fill(5);
        let got = o.get_zcopy(&rkey, off, len);
        assert_eq!(
            pattern::check_mem(&got, 5, off as u64),
            None,
            "{}",
            what("get_zcopy of the inner range")
        );
    }
    o.target.send("free").unwrap();
    o.target.expect("ok", STEP_TIMEOUT).unwrap();
    o.target.close_stdin();
    assert!(o.target.expect_exit(STEP_TIMEOUT).unwrap().success());
}

/// CMA: the target registers ordinary memory; the origin's key is a CMA key.
#[test]
fn put_get_cma_registered_memory_1b_to_16mib() {
    put_get("reg");
}

/// Direct mapping: the target allocates from its memory domain; the origin maps it.
#[test]
fn put_get_direct_mapped_memory_1b_to_16mib() {
    put_get("alloc");
}
