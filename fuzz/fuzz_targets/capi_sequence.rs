//! Fuzz target: random sequences of `ucp_*` calls through the C ABI (the exported functions
//! of the capi crate, declared here as a C program declares them), with valid, stale
//! (destroyed), null, misaligned and wrong-kind handles and random parameters.
//!
//! Operations: context init/cleanup, worker create/destroy/progress/get and release
//! address, endpoint create (from a real or a garbage address) and destroy/close, tag
//! send and receive (`_nbx`, eager and rendezvous sizes, random request-parameter fields),
//! request test/check/free/cancel, mem map/unmap (allocated or the caller's memory), rkey
//! pack/release/unpack (real or garbage keys)/destroy, put and get (`_nbx`, to random
//! addresses or into memory this input made, random request-parameter fields).
//!
//! Asserted: nothing crashes or panics across the boundary; a call with a handle that is
//! certainly invalid here (null, misaligned, of another kind, or destroyed by this input)
//! returns an error status (or an error status pointer). What the C API leaves undefined
//! is not done: pointers that were never handles (or freed memory) are not passed, and
//! requests of a destroyed worker are not used again. A stale request pointer is used
//! only while its worker lives (its pooled block may then hold a new request, so only "no
//! crash" is checked for it). Every input ends by destroying what it made, the requests
//! of destroyed workers included: rucx keeps a request the application holds valid past
//! its worker (it reads as canceled) until `ucp_request_free`, so one never freed would
//! leak (UCX frees them with the worker).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rucx_capi::ffi::*;
use std::ffi::{c_uint, c_void};

// The C functions, as `ucp.h` declares them (handles are opaque pointers).
extern "C" {
    fn ucp_init_version(
        major: c_uint,
        minor: c_uint,
        params: *const ucp_params_t,
        config: *const c_void,
        context_p: *mut *mut c_void,
    ) -> ucs_status_t;
    fn ucp_cleanup(context: *mut c_void);
    fn ucp_worker_create(
        context: *mut c_void,
        params: *const ucp_worker_params_t,
        worker_p: *mut *mut c_void,
    ) -> ucs_status_t;
    fn ucp_worker_destroy(worker: *mut c_void);
    fn ucp_worker_progress(worker: *mut c_void) -> c_uint;
    fn ucp_worker_get_address(
        worker: *mut c_void,
        address_p: *mut *mut c_void,
        len_p: *mut usize,
    ) -> ucs_status_t;
    fn ucp_worker_release_address(worker: *mut c_void, address: *mut c_void);
    fn ucp_ep_create(
        worker: *mut c_void,
        params: *const ucp_ep_params_t,
        ep_p: *mut *mut c_void,
    ) -> ucs_status_t;
    fn ucp_ep_destroy(ep: *mut c_void);
    fn ucp_ep_close_nbx(ep: *mut c_void, param: *const ucp_request_param_t) -> *mut c_void;
    fn ucp_tag_send_nbx(
        ep: *mut c_void,
        buffer: *const c_void,
        count: usize,
        tag: u64,
        param: *const ucp_request_param_t,
    ) -> *mut c_void;
    fn ucp_tag_recv_nbx(
        worker: *mut c_void,
        buffer: *mut c_void,
        count: usize,
        tag: u64,
        mask: u64,
        param: *const ucp_request_param_t,
    ) -> *mut c_void;
    fn ucp_put_nbx(
        ep: *mut c_void,
        buffer: *const c_void,
        count: usize,
        remote_addr: u64,
        rkey: *mut c_void,
        param: *const ucp_request_param_t,
    ) -> *mut c_void;
    fn ucp_get_nbx(
        ep: *mut c_void,
        buffer: *mut c_void,
        count: usize,
        remote_addr: u64,
        rkey: *mut c_void,
        param: *const ucp_request_param_t,
    ) -> *mut c_void;
    fn ucp_request_test(request: *mut c_void, info: *mut ucp_tag_recv_info_t) -> ucs_status_t;
    fn ucp_request_check_status(request: *mut c_void) -> ucs_status_t;
    fn ucp_request_free(request: *mut c_void);
    fn ucp_request_cancel(worker: *mut c_void, request: *mut c_void);
    fn ucp_mem_map(
        context: *mut c_void,
        params: *const ucp_mem_map_params_t,
        memh_p: *mut *mut c_void,
    ) -> ucs_status_t;
    fn ucp_mem_unmap(context: *mut c_void, memh: *mut c_void) -> ucs_status_t;
    fn ucp_rkey_pack(
        context: *mut c_void,
        memh: *mut c_void,
        buf_p: *mut *mut c_void,
        size_p: *mut usize,
    ) -> ucs_status_t;
    fn ucp_rkey_buffer_release(buf: *mut c_void);
    fn ucp_ep_rkey_unpack(
        ep: *mut c_void,
        buf: *const c_void,
        rkey_p: *mut *mut c_void,
    ) -> ucs_status_t;
    fn ucp_rkey_destroy(rkey: *mut c_void);
}

/// Limits per input, so that one input stays cheap and handle cells are never reused
/// within it (capi keeps 256 dead cells of a kind out of reuse).
const MAX_CTX: usize = 3;
const MAX_WORKERS: usize = 4;
const MAX_EPS: usize = 8;
const MAX_MEMS: usize = 6;
const MAX_OPS: usize = 96;
const MAX_MSG: usize = 300_000;
/// rucx's extension bit of `op_attr_mask` (include/rucx/ucp_ext.h).
const RUCX_OP_ATTR_FIELD_CQ: u32 = 1 << 31;
/// Bytes a garbage address is given: rucx's 8-byte header and the longest address it
/// accepts (1 MiB), so that whatever length the garbage claims is inside the buffer.
const GARBAGE_ADDR_SPAN: usize = 8 + (1 << 20);

struct Input<'a> {
    d: &'a [u8],
}

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.d.split_first() {
            Some((&b, rest)) => {
                self.d = rest;
                b
            }
            None => 0,
        }
    }
    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |a, i| a | u64::from(self.u8()) << (8 * i))
    }
    fn u32(&mut self) -> u32 {
        (0..4).fold(0, |a, i| a | u32::from(self.u8()) << (8 * i))
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.d.len());
        let (b, rest) = self.d.split_at(n);
        self.d = rest;
        b.to_vec()
    }
}

/// A handle this input made, and whether it was destroyed since.
#[derive(Clone, Copy)]
struct H {
    p: *mut c_void,
    live: bool,
    /// The owner (context of a worker or memory, worker of an endpoint).
    owner: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Ctx,
    Worker,
    Ep,
    Mem,
    Rkey,
}

/// A handle argument and whether it is certainly invalid.
struct Arg {
    p: *mut c_void,
    bad: bool,
}

struct Req {
    p: *mut c_void,
    worker: usize,
    /// The endpoint that started it (sends and closes).
    ep: Option<usize>,
    freed: bool,
    /// Seen complete (test or check_status said so).
    done: bool,
}

#[derive(Default)]
struct World {
    ctx: Vec<H>,
    workers: Vec<H>,
    eps: Vec<H>,
    mems: Vec<H>,
    rkeys: Vec<H>,
    reqs: Vec<Req>,
    /// Requests not yet freed whose worker was destroyed: freed at the end only.
    orphans: Vec<*mut c_void>,
    /// Worker addresses not yet released: (worker, pointer, length).
    addrs: Vec<(usize, *mut c_void, usize)>,
    /// Packed keys not yet released.
    packed: Vec<(*mut c_void, usize)>,
    /// Message buffers and memory given to mem_map: kept until everything is destroyed.
    arena: Vec<Box<[u64]>>,
}

extern "C" fn send_cb(_req: *mut c_void, _status: ucs_status_t, _user: *mut c_void) {}
extern "C" fn recv_cb(
    _req: *mut c_void,
    _status: ucs_status_t,
    _info: *const ucp_tag_recv_info_t,
    _user: *mut c_void,
) {
}

/// `CAPI_FUZZ_TRACE=1` prints every call and its outcome (for reading a reproducer).
fn trace() -> bool {
    static T: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *T.get_or_init(|| std::env::var_os("CAPI_FUZZ_TRACE").is_some())
}

macro_rules! t {
    ($($a:tt)*) => {
        if trace() {
            eprintln!($($a)*);
        }
    };
}

fn is_err_ptr(p: *mut c_void) -> bool {
    let a = p as isize;
    a < 0 && a >= isize::from(UCS_ERR_LAST)
}

impl World {
    fn list(&self, k: Kind) -> &Vec<H> {
        match k {
            Kind::Ctx => &self.ctx,
            Kind::Worker => &self.workers,
            Kind::Ep => &self.eps,
            Kind::Mem => &self.mems,
            Kind::Rkey => &self.rkeys,
        }
    }

    /// A handle of kind `k`: one of the input's (live or destroyed), null, misaligned, or
    /// a handle of another kind.
    fn pick(&self, k: Kind, inp: &mut Input) -> (Arg, Option<usize>) {
        let sel = inp.u8();
        let l = self.list(k);
        match sel % 8 {
            0 => (
                Arg {
                    p: std::ptr::null_mut(),
                    bad: true,
                },
                None,
            ),
            1 if !l.is_empty() => {
                let h = l[usize::from(inp.u8()) % l.len()];
                (
                    Arg {
                        p: h.p
                            .cast::<u8>()
                            .wrapping_add(1 + usize::from(inp.u8() % 7))
                            .cast(),
                        bad: true,
                    },
                    None,
                )
            }
            2 => {
                let others = [Kind::Ctx, Kind::Worker, Kind::Ep, Kind::Mem, Kind::Rkey];
                let o = others[usize::from(inp.u8()) % others.len()];
                let ol = self.list(o);
                if o == k || ol.is_empty() {
                    return (
                        Arg {
                            p: std::ptr::null_mut(),
                            bad: true,
                        },
                        None,
                    );
                }
                let h = ol[usize::from(inp.u8()) % ol.len()];
                (Arg { p: h.p, bad: true }, None)
            }
            _ if !l.is_empty() => {
                let i = usize::from(inp.u8()) % l.len();
                (
                    Arg {
                        p: l[i].p,
                        bad: !l[i].live,
                    },
                    Some(i),
                )
            }
            _ => (
                Arg {
                    p: std::ptr::null_mut(),
                    bad: true,
                },
                None,
            ),
        }
    }

    /// A request argument: a request of a live worker (maybe freed), null, an error
    /// status pointer, or misaligned.
    fn pick_req(&self, inp: &mut Input) -> (*mut c_void, bool, Option<usize>) {
        let sel = inp.u8();
        let live: Vec<usize> = (0..self.reqs.len())
            .filter(|&i| self.workers[self.reqs[i].worker].live)
            .collect();
        match sel % 6 {
            0 => (std::ptr::null_mut(), true, None),
            1 => (
                (-(i64::from(inp.u8() % 100) + 1)) as isize as *mut c_void,
                true,
                None,
            ),
            2 if !live.is_empty() => {
                let r = &self.reqs[live[usize::from(inp.u8()) % live.len()]];
                (
                    r.p.cast::<u8>()
                        .wrapping_add(1 + usize::from(inp.u8() % 7))
                        .cast(),
                    true,
                    None,
                )
            }
            _ if !live.is_empty() => {
                let i = live[usize::from(inp.u8()) % live.len()];
                (self.reqs[i].p, false, Some(i))
            }
            _ => (std::ptr::null_mut(), true, None),
        }
    }

    /// A zeroed buffer of at least `len` bytes that lives until the input ends.
    fn buffer(&mut self, len: usize) -> *mut u8 {
        let b = vec![0u64; len.div_ceil(8).max(1)].into_boxed_slice();
        self.arena.push(b);
        self.arena.last_mut().unwrap().as_mut_ptr().cast()
    }

    /// Request parameters with random fields (never a callback that is not a function,
    /// a datatype that names memory, or request memory of the caller).
    fn param(&mut self, inp: &mut Input, recv: bool) -> (Option<Box<ucp_request_param_t>>, usize) {
        let sel = inp.u8();
        if sel % 4 == 0 {
            return (None, 1);
        }
        // SAFETY: a plain C struct; all zeroes is valid for every field.
        let mut p: Box<ucp_request_param_t> = Box::new(unsafe { std::mem::zeroed() });
        // Not RUCX_OP_ATTR_FIELD_CQ either: that bit promises the longer
        // `rucx_request_param_t` (with a queue handle after UCX's fields), as a caller
        // setting it vouches; this struct is only UCX's.
        p.op_attr_mask = inp.u32() & !UCP_OP_ATTR_FIELD_REQUEST & !RUCX_OP_ATTR_FIELD_CQ;
        p.flags = inp.u32();
        if inp.u8() % 2 == 0 {
            p.cb = if recv {
                recv_cb as *const () as usize
            } else {
                send_cb as *const () as usize
            };
        }
        // Contiguous datatypes of 1 to 16-byte elements (generic and iov datatypes
        // are pointers the caller vouches for).
        let elem = usize::from(inp.u8() % 16) + 1;
        p.datatype = (elem as u64) << UCP_DATATYPE_SHIFT | UCP_DATATYPE_CONTIG;
        p.user_data = inp.u64() as usize as *mut c_void;
        p.memory_type = c_uint::from(inp.u8() % 8);
        if recv && inp.u8() % 2 == 0 {
            p.recv_info = self
                .buffer(std::mem::size_of::<ucp_tag_recv_info_t>())
                .cast();
        }
        if p.op_attr_mask & UCP_OP_ATTR_FIELD_MEMH != 0 {
            p.memh = self.pick(Kind::Mem, inp).0.p;
        }
        let elem = if p.op_attr_mask & UCP_OP_ATTR_FIELD_DATATYPE != 0 {
            elem
        } else {
            1
        };
        (Some(p), elem)
    }

    fn op(&mut self, inp: &mut Input) {
        let code = inp.u8();
        // SAFETY (the whole match): every pointer handed to capi is null, an error
        // status value, a pointer into a handle cell of ours (cells are never freed), a
        // request of a live worker, or memory this input owns until its end.
        unsafe {
            match code % 24 {
                0 if self.ctx.len() < MAX_CTX => {
                    let mut params: ucp_params_t = std::mem::zeroed();
                    params.field_mask = inp.u64()
                        & 0x1ff
                        & !(UCP_PARAM_FIELD_REQUEST_INIT
                            | UCP_PARAM_FIELD_REQUEST_CLEANUP
                            | UCP_PARAM_FIELD_NAME);
                    params.features = inp.u64() & 0x7f;
                    params.request_size = usize::from(inp.u8());
                    params.mt_workers_shared = i32::from(inp.u8() % 2);
                    let (major, minor) = if inp.u8() % 8 == 0 {
                        (c_uint::from(inp.u8() % 3), c_uint::from(inp.u8()))
                    } else {
                        (1, 13)
                    };
                    let pp: *const ucp_params_t = if inp.u8() % 8 == 0 {
                        std::ptr::null()
                    } else {
                        &params
                    };
                    let mut c = std::ptr::null_mut();
                    let st = ucp_init_version(major, minor, pp, std::ptr::null(), &mut c);
                    t!(
                        "ucp_init_version({major}.{minor}, params {:?}) = {st} -> {c:?}",
                        pp.is_null()
                    );
                    if pp.is_null() {
                        assert!(st < 0, "ucp_init without params: {st}");
                    }
                    if st == UCS_OK {
                        assert!(!c.is_null());
                        self.ctx.push(H {
                            p: c,
                            live: true,
                            owner: 0,
                        });
                    }
                }
                1 => {
                    let (a, i) = self.pick(Kind::Ctx, inp);
                    // Only contexts whose workers and memory are gone (the API's order).
                    if let Some(i) = i {
                        let busy = self.workers.iter().any(|w| w.live && w.owner == i)
                            || self.mems.iter().any(|m| m.live && m.owner == i);
                        if busy && self.ctx[i].live {
                            return;
                        }
                        self.ctx[i].live = false;
                    }
                    t!("ucp_cleanup({:?} bad={})", a.p, a.bad);
                    ucp_cleanup(a.p);
                }
                2 if self.workers.len() < MAX_WORKERS => {
                    let (a, i) = self.pick(Kind::Ctx, inp);
                    let mut params: ucp_worker_params_t = std::mem::zeroed();
                    params.field_mask = inp.u64() & UCP_WORKER_PARAM_FIELD_THREAD_MODE;
                    params.thread_mode = c_uint::from(inp.u8() % 5);
                    let pp: *const ucp_worker_params_t = if inp.u8() % 8 == 0 {
                        std::ptr::null()
                    } else {
                        &params
                    };
                    let mut w = std::ptr::null_mut();
                    let st = ucp_worker_create(a.p, pp, &mut w);
                    t!("ucp_worker_create({:?} bad={}) = {st} -> {w:?}", a.p, a.bad);
                    if a.bad || pp.is_null() {
                        assert!(st < 0, "ucp_worker_create with a bad context/params: {st}");
                    }
                    if st == UCS_OK {
                        self.workers.push(H {
                            p: w,
                            live: true,
                            owner: i.unwrap_or(0),
                        });
                    }
                }
                3 => {
                    let (a, i) = self.pick(Kind::Worker, inp);
                    if let Some(i) = i {
                        if self.workers[i].live {
                            // Its addresses go first; its requests are not used again,
                            // only freed at the end.
                            for (_, p, _) in self.addrs.iter().filter(|x| x.0 == i) {
                                ucp_worker_release_address(a.p, *p);
                            }
                            self.addrs.retain(|x| x.0 != i);
                            self.orphans.extend(
                                self.reqs
                                    .iter()
                                    .filter(|r| r.worker == i && !r.freed)
                                    .map(|r| r.p),
                            );
                            self.reqs.retain(|r| r.worker != i);
                        }
                        self.workers[i].live = false;
                    }
                    t!("ucp_worker_destroy({:?} bad={})", a.p, a.bad);
                    ucp_worker_destroy(a.p);
                }
                4 => {
                    let (a, _) = self.pick(Kind::Worker, inp);
                    for _ in 0..=inp.u8() % 16 {
                        let n = ucp_worker_progress(a.p);
                        t!("ucp_worker_progress({:?} bad={}) = {n}", a.p, a.bad);
                        if a.bad {
                            assert_eq!(n, 0, "progress of a bad worker did something");
                        }
                    }
                }
                5 => {
                    let (a, i) = self.pick(Kind::Worker, inp);
                    let mut p = std::ptr::null_mut();
                    let mut len = 0usize;
                    let st = ucp_worker_get_address(a.p, &mut p, &mut len);
                    t!(
                        "ucp_worker_get_address({:?} bad={}) = {st} ({len} bytes)",
                        a.p,
                        a.bad
                    );
                    if a.bad {
                        assert!(st < 0, "address of a bad worker: {st}");
                    }
                    if st == UCS_OK {
                        assert!(!p.is_null() && len > 0);
                        match i {
                            Some(i) if inp.u8() % 4 != 0 => self.addrs.push((i, p, len)),
                            _ => ucp_worker_release_address(a.p, p),
                        }
                    }
                }
                6 if self.eps.len() < MAX_EPS => {
                    let (a, i) = self.pick(Kind::Worker, inp);
                    let mut params: ucp_ep_params_t = std::mem::zeroed();
                    params.field_mask = inp.u64() & 0x3ff;
                    params.err_mode = c_uint::from(inp.u8() % 3);
                    // A real address, garbage bytes, or none. The C API passes an address
                    // without its length, so ucp_ep_create reads as many bytes as the
                    // address says it has (rucx's header: at most 1 MiB); memory shorter
                    // than that is the caller's error, not a misuse to be refused. Damaged
                    // addresses therefore sit in a buffer of the full claim.
                    let sel = inp.u8() % 4;
                    let garbage;
                    if sel < 2 && !self.addrs.is_empty() {
                        let (_, p, len) = self.addrs[usize::from(inp.u8()) % self.addrs.len()];
                        params.address = p;
                        // A cut address (the rest lost: zeroes) must be refused or connect
                        // nowhere harmful; nothing past its length is read.
                        if sel == 1 {
                            let cut = len.saturating_sub(usize::from(inp.u8()) % len.max(1));
                            garbage = self.buffer(len);
                            std::ptr::copy_nonoverlapping(p.cast::<u8>(), garbage, cut);
                            params.address = garbage.cast();
                        }
                    } else if sel == 2 {
                        let n = usize::from(inp.u8());
                        let b = inp.bytes(n);
                        garbage = self.buffer(b.len().max(GARBAGE_ADDR_SPAN));
                        std::ptr::copy_nonoverlapping(b.as_ptr(), garbage, b.len());
                        params.address = garbage.cast();
                    }
                    // Client-server fields (socket addresses, connection requests) are
                    // pointers the caller vouches for: not set.
                    params.field_mask &= !(UCP_EP_PARAM_FIELD_SOCK_ADDR
                        | UCP_EP_PARAM_FIELD_CONN_REQUEST
                        | UCP_EP_PARAM_FIELD_NAME
                        | UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR
                        | UCP_EP_PARAM_FIELD_ERR_HANDLER
                        | UCP_EP_PARAM_FIELD_USER_DATA);
                    if params.address.is_null() {
                        params.field_mask &= !UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
                    }
                    let pp: *const ucp_ep_params_t = if inp.u8() % 8 == 0 {
                        std::ptr::null()
                    } else {
                        &params
                    };
                    let mut ep = std::ptr::null_mut();
                    let st = ucp_ep_create(a.p, pp, &mut ep);
                    t!(
                        "ucp_ep_create({:?} bad={}, mask {:#x}) = {st} -> {ep:?}",
                        a.p,
                        a.bad,
                        params.field_mask
                    );
                    if a.bad || pp.is_null() {
                        assert!(st < 0, "ucp_ep_create with a bad worker/params: {st}");
                    }
                    if st == UCS_OK {
                        self.eps.push(H {
                            p: ep,
                            live: true,
                            owner: i.unwrap_or(0),
                        });
                    }
                }
                7 => {
                    let (a, i) = self.pick(Kind::Ep, inp);
                    // ucp_ep_destroy blocks until the endpoint is flushed: with an
                    // operation still waiting for a peer worker of this thread (which
                    // cannot progress meanwhile) it would wait forever, in UCX as here.
                    // It is used on bad handles, and on endpoints whose operations all
                    // completed; the others are closed without blocking.
                    let blocking_ok = i.map_or(true, |i| self.ep_idle(i));
                    if let Some(i) = i {
                        self.eps[i].live = false;
                    }
                    if inp.u8() % 2 == 0 && blocking_ok {
                        t!("ucp_ep_destroy({:?} bad={})", a.p, a.bad);
                        ucp_ep_destroy(a.p);
                    } else {
                        let mut p: ucp_request_param_t = std::mem::zeroed();
                        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
                        p.flags = inp.u32() & UCP_EP_CLOSE_FLAG_FORCE;
                        let r = ucp_ep_close_nbx(a.p, &p);
                        t!("ucp_ep_close_nbx({:?} bad={}) = {r:?}", a.p, a.bad);
                        if a.bad {
                            assert!(is_err_ptr(r), "close of a bad endpoint: {r:?}");
                        }
                        let worker = i.map(|i| self.eps[i].owner);
                        self.keep_request(r, worker, i);
                    }
                }
                8 | 9 => {
                    let (a, i) = self.pick(Kind::Ep, inp);
                    let (param, elem) = self.param(inp, false);
                    let count = self.size(inp) / elem;
                    let buf = self.buffer(count * elem);
                    let pp = param.as_deref().map_or(std::ptr::null(), |p| p as *const _);
                    let r = ucp_tag_send_nbx(a.p, buf.cast(), count, inp.u64() % 4, pp);
                    t!("ucp_tag_send_nbx({:?} bad={}, {count}) = {r:?}", a.p, a.bad);
                    if a.bad {
                        assert!(is_err_ptr(r), "send on a bad endpoint: {r:?}");
                    }
                    let worker = i.map(|i| self.eps[i].owner);
                    self.keep_request(r, worker, i);
                }
                10 | 11 => {
                    let (a, i) = self.pick(Kind::Worker, inp);
                    let (param, elem) = self.param(inp, true);
                    let count = self.size(inp) / elem;
                    let buf = self.buffer(count * elem);
                    let pp = param.as_deref().map_or(std::ptr::null(), |p| p as *const _);
                    let r = ucp_tag_recv_nbx(a.p, buf.cast(), count, inp.u64() % 4, inp.u64(), pp);
                    t!("ucp_tag_recv_nbx({:?} bad={}, {count}) = {r:?}", a.p, a.bad);
                    if a.bad {
                        assert!(is_err_ptr(r), "receive on a bad worker: {r:?}");
                    }
                    self.keep_request(r, i, None);
                }
                12 => {
                    let (r, bad, ri) = self.pick_req(inp);
                    let info = self.buffer(16).cast::<ucp_tag_recv_info_t>();
                    let st = ucp_request_test(
                        r,
                        if inp.u8() % 2 == 0 {
                            info
                        } else {
                            std::ptr::null_mut()
                        },
                    );
                    t!("ucp_request_test({r:?} bad={bad}) = {st}");
                    if bad {
                        assert!(st < 0, "test of a bad request: {st}");
                    }
                    self.saw(ri, st);
                }
                13 => {
                    let (r, bad, ri) = self.pick_req(inp);
                    let st = ucp_request_check_status(r);
                    t!("ucp_request_check_status({r:?} bad={bad}) = {st}");
                    if bad {
                        assert!(st < 0, "check_status of a bad request: {st}");
                    }
                    self.saw(ri, st);
                }
                14 => {
                    let (r, _, i) = self.pick_req(inp);
                    if let Some(i) = i {
                        self.reqs[i].freed = true;
                    }
                    t!("ucp_request_free({r:?})");
                    ucp_request_free(r);
                }
                15 => {
                    let (w, _) = self.pick(Kind::Worker, inp);
                    let (r, _, _) = self.pick_req(inp);
                    t!("ucp_request_cancel({:?}, {r:?})", w.p);
                    ucp_request_cancel(w.p, r);
                }
                16 if self.mems.len() < MAX_MEMS => {
                    let (a, i) = self.pick(Kind::Ctx, inp);
                    let mut params: ucp_mem_map_params_t = std::mem::zeroed();
                    params.field_mask = inp.u64() & 0x1f;
                    params.length = self.size(inp);
                    params.flags = inp.u32() & 0x7;
                    params.prot = inp.u32() & 0x7;
                    params.memory_type = c_uint::from(inp.u8() % 8);
                    if inp.u8() % 2 == 0 {
                        // The caller's memory (valid for the whole length), not allocated.
                        params.address = self.buffer(params.length).cast();
                        params.flags &= !(UCP_MEM_MAP_ALLOCATE | UCP_MEM_MAP_FIXED);
                    } else {
                        params.field_mask &= !UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
                        params.flags |= UCP_MEM_MAP_ALLOCATE;
                        params.flags &= !UCP_MEM_MAP_FIXED;
                    }
                    let pp: *const ucp_mem_map_params_t = if inp.u8() % 8 == 0 {
                        std::ptr::null()
                    } else {
                        &params
                    };
                    let mut m = std::ptr::null_mut();
                    let st = ucp_mem_map(a.p, pp, &mut m);
                    t!(
                        "ucp_mem_map({:?} bad={}, {} bytes) = {st} -> {m:?}",
                        a.p,
                        a.bad,
                        params.length
                    );
                    if a.bad || pp.is_null() {
                        assert!(st < 0, "mem_map with a bad context/params: {st}");
                    }
                    if st == UCS_OK {
                        self.mems.push(H {
                            p: m,
                            live: true,
                            owner: i.unwrap_or(0),
                        });
                    }
                }
                17 => {
                    let (c, _) = self.pick(Kind::Ctx, inp);
                    let (m, i) = self.pick(Kind::Mem, inp);
                    let st = ucp_mem_unmap(c.p, m.p);
                    t!("ucp_mem_unmap({:?}, {:?}) = {st}", c.p, m.p);
                    if c.bad || m.bad {
                        assert!(st < 0, "mem_unmap with a bad handle: {st}");
                    }
                    if let (Some(i), UCS_OK) = (i, st) {
                        self.mems[i].live = false;
                    }
                }
                18 => {
                    let (c, _) = self.pick(Kind::Ctx, inp);
                    let (m, _) = self.pick(Kind::Mem, inp);
                    let mut b = std::ptr::null_mut();
                    let mut len = 0usize;
                    let st = ucp_rkey_pack(c.p, m.p, &mut b, &mut len);
                    t!("ucp_rkey_pack({:?}, {:?}) = {st} ({len} bytes)", c.p, m.p);
                    if c.bad || m.bad {
                        assert!(st < 0, "rkey_pack with a bad handle: {st}");
                    }
                    if st == UCS_OK {
                        self.packed.push((b, len));
                    }
                }
                19 => {
                    if self.packed.is_empty() || inp.u8() % 4 == 0 {
                        ucp_rkey_buffer_release(std::ptr::null_mut());
                    } else {
                        let i = usize::from(inp.u8()) % self.packed.len();
                        ucp_rkey_buffer_release(self.packed.swap_remove(i).0);
                    }
                }
                20 => {
                    let (ep, _) = self.pick(Kind::Ep, inp);
                    let sel = inp.u8() % 3;
                    let buf: *const c_void = if sel == 0 && !self.packed.is_empty() {
                        self.packed[usize::from(inp.u8()) % self.packed.len()].0
                    } else if sel == 1 {
                        // Garbage: the decoder must refuse it (room for any length it reads).
                        let n = usize::from(inp.u8() % 64);
                        let b = inp.bytes(n);
                        let g = self.buffer(256);
                        std::ptr::copy_nonoverlapping(b.as_ptr(), g, b.len());
                        g.cast()
                    } else {
                        std::ptr::null()
                    };
                    let mut rk = std::ptr::null_mut();
                    let st = ucp_ep_rkey_unpack(ep.p, buf, &mut rk);
                    t!("ucp_ep_rkey_unpack({:?}, {buf:?}) = {st} -> {rk:?}", ep.p);
                    if ep.bad || buf.is_null() {
                        assert!(st < 0, "rkey_unpack with a bad endpoint/key: {st}");
                    }
                    if st == UCS_OK && self.rkeys.len() < 64 {
                        self.rkeys.push(H {
                            p: rk,
                            live: true,
                            owner: 0,
                        });
                    } else if st == UCS_OK {
                        ucp_rkey_destroy(rk);
                    }
                }
                21 => {
                    let (a, i) = self.pick(Kind::Rkey, inp);
                    if let Some(i) = i {
                        self.rkeys[i].live = false;
                    }
                    t!("ucp_rkey_destroy({:?})", a.p);
                    ucp_rkey_destroy(a.p);
                }
                22 | 23 => {
                    let (a, i) = self.pick(Kind::Ep, inp);
                    let (k, _) = self.pick(Kind::Rkey, inp);
                    let (param, elem) = self.param(inp, false);
                    let count = self.size(inp) / elem;
                    let buf = self.buffer(count * elem);
                    let addr = self.remote_addr(inp);
                    let pp = param.as_deref().map_or(std::ptr::null(), |p| p as *const _);
                    let (name, r) = if code % 24 == 22 {
                        (
                            "ucp_put_nbx",
                            ucp_put_nbx(a.p, buf.cast(), count, addr, k.p, pp),
                        )
                    } else {
                        (
                            "ucp_get_nbx",
                            ucp_get_nbx(a.p, buf.cast(), count, addr, k.p, pp),
                        )
                    };
                    t!(
                        "{name}({:?} bad={}, {count}, {addr:#x}, {:?} bad={}) = {r:?}",
                        a.p,
                        a.bad,
                        k.p,
                        k.bad
                    );
                    if a.bad || k.bad {
                        assert!(is_err_ptr(r), "{name} with a bad endpoint or key: {r:?}");
                    }
                    let worker = i.map(|i| self.eps[i].owner);
                    self.keep_request(r, worker, i);
                }
                _ => {}
            }
        }
    }

    /// A remote address for put and get: random, or inside memory this input made (so
    /// that a key of the caller's memory can be hit).
    fn remote_addr(&self, inp: &mut Input) -> u64 {
        let sel = inp.u8();
        if sel % 2 == 0 || self.arena.is_empty() {
            return inp.u64();
        }
        let b = &self.arena[usize::from(inp.u8()) % self.arena.len()];
        b.as_ptr() as u64 + u64::from(inp.u8()) % (b.len() as u64 * 8)
    }

    /// A message size: mostly small, sometimes past the rendezvous threshold.
    fn size(&self, inp: &mut Input) -> usize {
        match inp.u8() % 8 {
            0 => 0,
            1 => (inp.u32() as usize) % MAX_MSG,
            _ => usize::from(inp.u8()) * 8,
        }
    }

    /// Records the request a nonblocking call returned (if it is one).
    fn keep_request(&mut self, r: *mut c_void, worker: Option<usize>, ep: Option<usize>) {
        if r.is_null() || is_err_ptr(r) {
            return;
        }
        match worker {
            Some(w) if self.workers[w].live => self.reqs.push(Req {
                p: r,
                worker: w,
                ep,
                freed: false,
                done: false,
            }),
            Some(_) => panic!("an endpoint of a destroyed worker started an operation"),
            None => panic!("an operation on a bad handle returned a request"),
        }
    }

    /// Request `i` (if known and not freed) reported status `st`.
    fn saw(&mut self, i: Option<usize>, st: ucs_status_t) {
        if let Some(r) = i.and_then(|i| self.reqs.get_mut(i)) {
            if !r.freed && st != UCS_INPROGRESS {
                r.done = true;
            }
        }
    }

    /// True when every operation endpoint `ep` started is known to be complete.
    fn ep_idle(&mut self, ep: usize) -> bool {
        for r in self.reqs.iter_mut().filter(|r| r.ep == Some(ep) && !r.done) {
            if r.freed {
                return false;
            }
            // SAFETY: a request of a live worker (requests of destroyed workers are
            // forgotten), not freed.
            if unsafe { ucp_request_check_status(r.p) } == UCS_INPROGRESS {
                return false;
            }
            r.done = true;
        }
        true
    }

    /// Destroys everything, in the API's order.
    fn teardown(&mut self) {
        // SAFETY: the handles and buffers this input made, each given back once.
        unsafe {
            for r in self.reqs.iter().filter(|r| !r.freed) {
                if self.workers[r.worker].live {
                    ucp_request_cancel(self.workers[r.worker].p, r.p);
                    ucp_request_free(r.p);
                }
            }
            for &p in &self.orphans {
                ucp_request_free(p);
            }
            for k in self.rkeys.iter().filter(|h| h.live) {
                ucp_rkey_destroy(k.p);
            }
            for (b, _) in self.packed.drain(..) {
                ucp_rkey_buffer_release(b);
            }
            for &(w, p, _) in &self.addrs {
                ucp_worker_release_address(self.workers[w].p, p);
            }
            for e in self.eps.iter().filter(|h| h.live) {
                if self.workers[e.owner].live {
                    let mut p: ucp_request_param_t = std::mem::zeroed();
                    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
                    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
                    let r = ucp_ep_close_nbx(e.p, &p);
                    if !r.is_null() && !is_err_ptr(r) {
                        ucp_request_free(r);
                    }
                }
            }
            for w in self.workers.iter().filter(|h| h.live) {
                ucp_worker_destroy(w.p);
            }
            for m in self.mems.iter().filter(|h| h.live) {
                let st = ucp_mem_unmap(self.ctx[m.owner].p, m.p);
                assert_eq!(st, UCS_OK, "unmap of live memory failed");
            }
            for c in self.ctx.iter().filter(|h| h.live) {
                ucp_cleanup(c.p);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Shared memory and loopback only: no sockets per context, fast to set up.
        std::env::set_var("UCX_TLS", "self,shm");
        // Every misuse is logged as an error; a subscriber installed first is kept by
        // the library, so this one silences them (unless tracing a reproducer).
        if !trace() {
            let _ = tracing::subscriber::set_global_default(
                tracing::subscriber::NoSubscriber::default(),
            );
        }
    });
    let mut inp = Input { d: data };
    let mut w = World::default();
    for _ in 0..MAX_OPS {
        if inp.d.is_empty() {
            break;
        }
        w.op(&mut inp);
    }
    w.teardown();
});
