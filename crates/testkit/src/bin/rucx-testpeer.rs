//! `rucx-testpeer`: the peer process of testkit's multi-process tests.
//!
//! The first argument picks a role; the test drives it over stdin and reads its answers on
//! stdout, one line per message, first word a keyword, binary values in hex (see
//! `testkit::hex`). On a failed check a peer prints `fail <reason>` and exits with status
//! 1; at end of input it exits with status 0. Every loop is bounded by [`DEADLINE`], and
//! the peer asks the kernel to kill it if the test process dies, so no peer outlives its
//! test.
//!
//! Roles (`>` test to peer, `<` peer to test):
//!
//! - `am-node <id> <nodes> <reps> [corrupt]`: one of `nodes` shm processes that all send
//!   to each other. `< addr <hex>`, `> peers <hex>...` (every node's address, by id), then
//!   it sends `reps` rounds of the size plan of every AM flavour to every other node and
//!   checks every byte of what it receives; `< done <messages> <bytes>`, exit.
//! - `stress-producer <id> <count> [skip=<seq>]`: `> addr <hex>` (the receiver), `< ready`,
//!   `> go`, then `count` messages carrying (id, sequence), retrying on `NoResource`;
//!   `< done <count> <no-resource events>`, exit.
//! - `rma-target`: `< addr <hex>`, then commands: `> new <reg|alloc> <len> <seed>` (memory
//!   filled with the seed's pattern) `< buf <rkey hex>`; `> verify <outer> <off> <len>
//!   <inner>` (bytes `off..off+len` hold `inner`'s pattern, all others `outer`'s) `< ok`;
//!   `> fill <seed>` `< ok`; `> free` `< ok`.
//! - `atomic-worker <0|1>`: `> target <iface hex> <rkey hex>` `< ready <direct 0|1>`; then
//!   `> run <op> <32|64> <addr> <n> <arg> <sync addr>`, which meets the other worker at
//!   the barrier word at `sync` and runs `n` operations (see [`atomic_run`]) in lockstep
//!   with it through the chunk counters at `sync + 8` and `sync + 16`, `< done <a> <b>`.
//! - `wait-recv <rounds>`: `< addr <hex>`; per round `< waiting <r>`, blocks in
//!   `iface.wait`, `< woke <r> <true|false>`, receives one message `< got <r> <hex>`.
//! - `fifo-recv <fifo_size> <am id>`: an interface with that FIFO size; `< addr <hex>`,
//!   then it does not progress until `> drain <n>`; `< got <n>` once `n` messages arrived
//!   in order.
//! - `hold-segment <mem len>`: `< iface <hex address>`, `< mem <hex rkey>`, then waits;
//!   `> exit` makes it exit normally.
//! - `stale-rkey <self|shm>`: uses a key after its allocation was freed; `< survived ...`
//!   unless that faults.
//! - `sleeper`: `< ready`; `> echo <w>` `< <w>`; `> exit <code>`; `> panic`.
//!
//! `corrupt` and `skip=` inject a fault, for the tests that prove the checkers notice.

#![deny(unsafe_code)]

use std::io::{BufRead, StdinLock};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::proto::{self, BCOPY, SHORT, ZCOPY};
use testkit::{hex, pattern};
use uct::{AtomicOp, AtomicSize, EpId, Iface, IfaceConfig, Md, MemHandle, Outcome, Transport};

/// Bound on every loop of a peer: far above what a test needs, only there so that a bug
/// cannot leave a spinning process behind.
const DEADLINE: Duration = Duration::from_secs(300);

type R<T = ()> = Result<T, String>;

/// Prints one protocol line (stdout is line-buffered, so it leaves at once).
macro_rules! say {
    ($($a:tt)*) => {{
        println!($($a)*);
    }};
}

fn main() {
    die_with_parent();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(role) = args.first() else {
        say!("fail no role given");
        std::process::exit(2);
    };
    let rest = &args[1..];
    let mut input = Input::new();
    let res = match role.as_str() {
        "am-node" => am_node(rest, &mut input),
        "stress-producer" => stress_producer(rest, &mut input),
        "rma-target" => rma_target(&mut input),
        "atomic-worker" => atomic_worker(rest, &mut input),
        "wait-recv" => wait_recv(rest),
        "fifo-recv" => fifo_recv(rest, &mut input),
        "hold-segment" => hold_segment(rest, &mut input),
        "sleeper" => sleeper(&mut input),
        "stale-rkey" => stale_rkey(rest),
        other => Err(format!("unknown role {other}")),
    };
    if let Err(e) = res {
        say!("fail {e}");
        std::process::exit(1);
    }
}

/// Makes the kernel SIGKILL this process when the process that spawned it goes away, so a
/// test that is itself killed cannot leave peers behind.
fn die_with_parent() {
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::Kill));
    // The parent may have died before the call above took effect.
    if rustix::process::getppid().is_none() {
        std::process::exit(3);
    }
}

/// Lines from stdin, split into words.
struct Input {
    lines: std::io::Lines<StdinLock<'static>>,
}

impl Input {
    fn new() -> Input {
        Input {
            lines: std::io::stdin().lock().lines(),
        }
    }

    /// The words of the next line; `None` at end of input.
    fn next(&mut self) -> R<Option<Vec<String>>> {
        match self.lines.next() {
            None => Ok(None),
            Some(Err(e)) => Err(format!("reading stdin: {e}")),
            Some(Ok(l)) => Ok(Some(l.split_whitespace().map(str::to_owned).collect())),
        }
    }

    /// The words after `keyword` of the next line, which must start with it.
    fn expect(&mut self, keyword: &str) -> R<Vec<String>> {
        let words = self
            .next()?
            .ok_or_else(|| format!("stdin closed while waiting for `{keyword}`"))?;
        if words.first().map(String::as_str) != Some(keyword) {
            return Err(format!("expected `{keyword}`, got {words:?}"));
        }
        Ok(words[1..].to_vec())
    }
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> R<T> {
    args.get(i)
        .ok_or_else(|| format!("missing argument {what}"))?
        .parse()
        .map_err(|_| format!("bad argument {what}: {:?}", args[i]))
}

fn unhex(s: &str, what: &str) -> R<Vec<u8>> {
    hex::decode(s).ok_or_else(|| format!("bad hex for {what}"))
}

fn st<T>(r: ucs::Result<T>, what: &str) -> R<T> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Fails once the deadline has passed.
fn check_deadline(start: Instant, what: &str) -> R {
    if start.elapsed() > DEADLINE {
        Err(format!("deadline passed while {what}"))
    } else {
        Ok(())
    }
}

/// The first failure seen by a handler (handlers cannot return errors).
type Failure = Arc<Mutex<Option<String>>>;

fn record(f: &Failure, msg: String) {
    let mut g = f.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        *g = Some(msg);
    }
}

fn failed(f: &Failure) -> R {
    match f.lock().unwrap_or_else(|p| p.into_inner()).clone() {
        Some(m) => Err(m),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------
// am-node

fn am_node(args: &[String], input: &mut Input) -> R {
    let me: u32 = arg(args, 0, "id")?;
    let nodes: u32 = arg(args, 1, "nodes")?;
    let reps: u64 = arg(args, 2, "reps")?;
    // Fault injection for the test of the checker itself: flip the first byte of bcopy
    // message 1 (1 byte long) to every peer.
    let corrupt = args.get(3).map(String::as_str) == Some("corrupt");
    if nodes > 8 || me >= nodes {
        return Err("at most 8 nodes".into());
    }
    let cfg = st(IfaceConfig::from_env(), "config")?;
    let mut iface = st(Iface::open(Transport::Shm, &cfg), "iface open")?;
    let attr = iface.attr().clone();
    let plans: Vec<Vec<usize>> = (0..3).map(|k| proto::am_size_plan(&attr, k)).collect();
    let per_kind: Vec<u64> = plans.iter().map(|p| reps * p.len() as u64).collect();

    // Handlers go in before the address is published: nobody can send earlier.
    let failure = Failure::default();
    let received = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    for s in (0..nodes).filter(|&s| s != me) {
        for kind in [SHORT, BCOPY, ZCOPY] {
            let plan = plans[kind as usize].clone();
            let total = per_kind[kind as usize];
            let (failure, received, bytes) = (failure.clone(), received.clone(), bytes.clone());
            let mut next = 0u64;
            let h = move |data: &[u8]| {
                let m = next;
                next += 1;
                let what = format!("message {m} of flavour {kind} from node {s}");
                if m >= total {
                    return record(&failure, format!("{what}: more than the {total} sent"));
                }
                let len = plan[(m % plan.len() as u64) as usize];
                let payload = if kind == SHORT {
                    if data.len() != 8 + len {
                        return record(
                            &failure,
                            format!("{what}: {} bytes, want 8 + {len}", data.len()),
                        );
                    }
                    if data[..8] != pattern::am_header(m, s).to_ne_bytes() {
                        return record(&failure, format!("{what}: wrong header"));
                    }
                    &data[8..]
                } else {
                    data
                };
                if payload.len() != len {
                    return record(
                        &failure,
                        format!("{what}: {} bytes, want {len}", payload.len()),
                    );
                }
                if let Some(i) = pattern::check_am(payload, m, s, kind) {
                    return record(&failure, format!("{what} ({len} B): byte {i} wrong"));
                }
                received.fetch_add(1, Ordering::Relaxed);
                bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
            };
            st(
                iface.set_am_handler(proto::am_stream_id(kind, s), Box::new(h)),
                "set_am_handler",
            )?;
        }
    }
    say!("addr {}", hex::encode(&iface.address()));

    let words = input.expect("peers")?;
    if words.len() != nodes as usize {
        return Err(format!("{} addresses for {nodes} nodes", words.len()));
    }
    let mut eps: Vec<(u32, EpId)> = Vec::new();
    for (j, w) in words.iter().enumerate() {
        if j as u32 != me {
            let a = unhex(w, "peer address")?;
            eps.push((j as u32, st(iface.ep_create(&a), "ep_create")?));
        }
    }

    let start = Instant::now();
    let rounds = *per_kind.iter().max().unwrap_or(&0);
    let mut data = Vec::new();
    for m in 0..rounds {
        for kind in [SHORT, BCOPY, ZCOPY] {
            if m >= per_kind[kind as usize] {
                continue;
            }
            let plan = &plans[kind as usize];
            let len = plan[(m % plan.len() as u64) as usize];
            data.resize(len, 0);
            pattern::fill_am(&mut data, m, me, kind);
            let id = proto::am_stream_id(kind, me);
            for &(_, ep) in &eps {
                loop {
                    let r = match kind {
                        SHORT => iface.am_short(ep, id, pattern::am_header(m, me), &data),
                        BCOPY => iface
                            .am_bcopy(ep, id, |b| {
                                b[..len].copy_from_slice(&data);
                                if corrupt && m == 1 {
                                    b[0] ^= 0x10;
                                }
                                len
                            })
                            .map(|o| match o {
                                Outcome::Done(_) => Outcome::Done(()),
                                Outcome::InProgress => Outcome::InProgress,
                                Outcome::NoResource => Outcome::NoResource,
                            }),
                        _ => {
                            // Header of 0, 1, 8 or max_am_hdr bytes, the rest in 1 to 3
                            // iov pieces.
                            let h = [0, 1, 8, attr.max_am_hdr][(m % 4) as usize].min(len);
                            let (hdr, rest) = data.split_at(h);
                            let cut1 = rest.len() / 3;
                            let cut2 = rest.len() * 2 / 3;
                            let iov: Vec<&[u8]> = match m % 3 {
                                0 => vec![rest],
                                1 => vec![&rest[..cut1], &rest[cut1..]],
                                _ => vec![&rest[..cut1], &rest[cut1..cut2], &rest[cut2..]],
                            };
                            iface.am_zcopy(ep, id, hdr, &iov, m)
                        }
                    };
                    match st(r, "send")? {
                        Outcome::NoResource => {
                            // The peer's FIFO is full: drain our own meanwhile (the peer
                            // may be waiting for room in ours).
                            if iface.progress() == 0 {
                                std::thread::yield_now();
                            }
                            check_deadline(start, "sending")?;
                        }
                        _ => break,
                    }
                }
            }
            failed(&failure)?;
        }
        iface.progress();
    }

    let expected = u64::from(nodes - 1) * per_kind.iter().sum::<u64>();
    while received.load(Ordering::Relaxed) < expected {
        failed(&failure)?;
        if iface.progress() == 0 {
            // Nothing to send any more: sleep until a message comes instead of spinning.
            st(iface.wait(100), "wait")?;
        }
        check_deadline(start, "receiving")?;
    }
    failed(&failure)?;
    say!(
        "done {} {}",
        received.load(Ordering::Relaxed),
        bytes.load(Ordering::Relaxed)
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// stress-producer

fn stress_producer(args: &[String], input: &mut Input) -> R {
    let id: u32 = arg(args, 0, "id")?;
    let count: u64 = arg(args, 1, "count")?;
    // Fault injection for the test of the receiver's checker: never send this sequence.
    let skip: Option<u64> = match args.get(2) {
        Some(a) => Some(
            a.strip_prefix("skip=")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("bad fault {a}"))?,
        ),
        None => None,
    };
    let cfg = st(IfaceConfig::from_env(), "config")?;
    let mut iface = st(Iface::open(Transport::Shm, &cfg), "iface open")?;
    let addr = unhex(&input.expect("addr")?.concat(), "receiver address")?;
    let ep = st(iface.ep_create(&addr), "ep_create")?;
    say!("ready");
    input.expect("go")?;
    let start = Instant::now();
    let mut full = 0u64;
    let mut payload = [0u8; 16];
    for seq in (0..count).filter(|&s| Some(s) != skip) {
        let hdr = proto::stress_header(id, seq);
        let mut spins = 0u32;
        loop {
            // Every 8th message is a bcopy with a header and up to 96 pattern bytes; the
            // others are short with up to 16.
            let plen = proto::stress_payload_len(seq);
            let r = if proto::stress_is_bcopy(seq) {
                iface
                    .am_bcopy(ep, 2, |b| {
                        b[..8].copy_from_slice(&hdr.to_ne_bytes());
                        pattern::fill_am(&mut b[8..8 + plen], seq, id, 1);
                        8 + plen
                    })
                    .map(|o| o.is_done())
            } else {
                pattern::fill_am(&mut payload[..plen], seq, id, 0);
                iface
                    .am_short(ep, 1, hdr, &payload[..plen])
                    .map(|o| o.is_done())
            };
            if st(r, "send")? {
                break;
            }
            // Full: spin a little, then give the CPU to the receiver.
            full += 1;
            spins += 1;
            if spins < 32 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            if spins % 1024 == 0 {
                check_deadline(start, "waiting for FIFO room")?;
            }
        }
    }
    say!("done {count} {full}");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// rma-target

/// Memory the rma-target offers: registered user memory or an allocation.
struct TargetMem {
    ptr: *mut u8,
    len: usize,
    handle: MemHandle,
    /// Owner of registered memory (u64 for alignment); dropped after the handle.
    _buf: Option<Box<[u64]>>,
}

// Views of memory registered with `mem_reg`, whose remote writes happen between commands.
#[allow(unsafe_code)]
impl TargetMem {
    fn bytes(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is the registered buffer or the allocation, alive as long as
        // self; the test writes it remotely only between our commands, never while we read.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in bytes(); &mut self is the only local view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

fn rma_target(input: &mut Input) -> R {
    let md = Md::open(Transport::Shm);
    let cfg = st(IfaceConfig::from_env(), "config")?;
    let iface = st(Iface::open(Transport::Shm, &cfg), "iface open")?;
    say!("addr {}", hex::encode(&iface.address()));
    let mut mem: Option<TargetMem> = None;
    while let Some(w) = input.next()? {
        match w.first().map(String::as_str) {
            Some("new") => {
                // Free the previous memory first: targets go up to 16 MiB.
                drop(mem.take());
                let len: usize = arg(&w, 2, "len")?;
                let seed: u64 = arg(&w, 3, "seed")?;
                let mut m = match w.get(1).map(String::as_str) {
                    Some("reg") => {
                        let mut buf = vec![0u64; len.div_ceil(8).max(1)].into_boxed_slice();
                        let ptr = buf.as_mut_ptr().cast::<u8>();
                        #[allow(unsafe_code)] // registering memory is unsafe
                        // SAFETY: `buf` moves into the TargetMem beside the handle, which
                        // is dropped first; the memory is used through `ptr` only.
                        let handle = st(unsafe { md.mem_reg(ptr, len) }, "mem_reg")?;
                        TargetMem {
                            ptr,
                            len,
                            handle,
                            _buf: Some(buf),
                        }
                    }
                    Some("alloc") => {
                        let handle = st(md.mem_alloc(len), "mem_alloc")?;
                        TargetMem {
                            ptr: handle.address(),
                            len,
                            handle,
                            _buf: None,
                        }
                    }
                    other => return Err(format!("unknown memory kind {other:?}")),
                };
                pattern::fill_mem(m.bytes_mut(), seed, 0);
                say!("buf {}", hex::encode(&m.handle.pack_rkey()));
                mem = Some(m);
            }
            Some("verify") => {
                let m = mem.as_ref().ok_or("verify without memory")?;
                let outer: u64 = arg(&w, 1, "outer seed")?;
                let off: usize = arg(&w, 2, "offset")?;
                let len: usize = arg(&w, 3, "length")?;
                let inner: u64 = arg(&w, 4, "inner seed")?;
                let b = m.bytes();
                let end = off
                    .checked_add(len)
                    .filter(|&e| e <= b.len())
                    .ok_or("range")?;
                if let Some(i) = pattern::check_mem(&b[..off], outer, 0) {
                    return Err(format!("byte {i} before the range changed"));
                }
                if let Some(i) = pattern::check_mem(&b[off..end], inner, off as u64) {
                    return Err(format!("byte {} (range byte {i} of {len}) wrong", off + i));
                }
                if let Some(i) = pattern::check_mem(&b[end..], outer, end as u64) {
                    return Err(format!("byte {} after the range changed", end + i));
                }
                say!("ok");
            }
            Some("fill") => {
                let seed: u64 = arg(&w, 1, "seed")?;
                let m = mem.as_mut().ok_or("fill without memory")?;
                pattern::fill_mem(m.bytes_mut(), seed, 0);
                say!("ok");
            }
            Some("free") => {
                mem = None;
                say!("ok");
            }
            other => return Err(format!("unknown command {other:?}")),
        }
    }
    drop(mem);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// atomic-worker

fn parse_op(s: &str) -> R<AtomicOp> {
    Ok(match s {
        "add" => AtomicOp::Add,
        "and" => AtomicOp::And,
        "or" => AtomicOp::Or,
        "xor" => AtomicOp::Xor,
        "swap" => AtomicOp::Swap,
        "cswap" => AtomicOp::Cswap,
        _ => return Err(format!("unknown op {s}")),
    })
}

fn atomic_worker(args: &[String], input: &mut Input) -> R {
    let me: u64 = arg(args, 0, "id")?;
    if me > 1 {
        return Err("worker ids are 0 and 1".into());
    }
    let md = Md::open(Transport::Shm);
    let cfg = st(IfaceConfig::from_env(), "config")?;
    let mut iface = st(Iface::open(Transport::Shm, &cfg), "iface open")?;
    let w = input.expect("target")?;
    let addr = unhex(w.first().ok_or("no address")?, "iface address")?;
    let rkey = st(
        md.rkey_unpack(&unhex(w.get(1).ok_or("no rkey")?, "rkey")?),
        "rkey_unpack",
    )?;
    let ep = st(iface.ep_create(&addr), "ep_create")?;
    say!("ready {}", u8::from(rkey.is_direct()));
    let mut w = Worker {
        iface: &mut iface,
        ep,
        rkey: &rkey,
        me,
        sync: 0,
        chunks: 0,
    };
    while let Some(cmd) = input.next()? {
        match cmd.first().map(String::as_str) {
            Some("run") => {
                let op = parse_op(cmd.get(1).ok_or("no op")?)?;
                let size = match arg::<u32>(&cmd, 2, "width")? {
                    32 => AtomicSize::B32,
                    64 => AtomicSize::B64,
                    x => return Err(format!("width {x}")),
                };
                let addr: u64 = arg(&cmd, 3, "addr")?;
                let n: u64 = arg(&cmd, 4, "n")?;
                let a: u64 = arg(&cmd, 5, "arg")?;
                let barrier: u64 = arg(&cmd, 6, "barrier")?;
                w.sync = barrier;
                w.chunks = 0;
                w.barrier()?;
                let (x, y) = atomic_run(&mut w, op, size, addr, n, a)?;
                say!("done {x} {y}");
            }
            other => return Err(format!("unknown command {other:?}")),
        }
    }
    Ok(())
}

struct Worker<'a> {
    iface: &'a mut Iface,
    ep: EpId,
    rkey: &'a uct::Rkey,
    /// This worker's id (0 or 1).
    me: u64,
    /// Remote address of the synchronisation words: the start barrier, then one chunk
    /// counter per worker (all 64-bit, zeroed by the test before each run).
    sync: u64,
    /// Chunks of operations this worker has finished in the current run.
    chunks: u64,
}

/// Operations between two lockstep points.
const CHUNK: u64 = 128;

impl Worker<'_> {
    fn post(&mut self, op: AtomicOp, size: AtomicSize, v: u64, addr: u64) -> R {
        match st(
            self.iface
                .atomic_post(self.ep, op, size, v, addr, self.rkey),
            "atomic_post",
        )? {
            Outcome::Done(()) => Ok(()),
            o => Err(format!("atomic_post returned {o:?}")),
        }
    }

    fn fetch(&mut self, op: AtomicOp, size: AtomicSize, v: u64, cmp: u64, addr: u64) -> R<u64> {
        match st(
            self.iface
                .atomic_fetch(self.ep, op, size, v, cmp, addr, self.rkey, 0),
            "atomic_fetch",
        )? {
            Outcome::Done(x) => Ok(x),
            o => Err(format!("atomic_fetch returned {o:?}")),
        }
    }

    /// Spins (yielding now and then) until the 64-bit word at `addr` is at least `v`.
    fn wait_for(&mut self, addr: u64, v: u64, what: &str) -> R {
        let start = Instant::now();
        let mut k = 0u32;
        while self.fetch(AtomicOp::Add, AtomicSize::B64, 0, 0, addr)? < v {
            k += 1;
            if k % 64 == 0 {
                // The other worker may share this CPU: let it run.
                std::thread::yield_now();
                check_deadline(start, what)?;
            }
        }
        Ok(())
    }

    /// Both workers add one to the barrier word and start once it reads 2.
    fn barrier(&mut self) -> R {
        self.post(AtomicOp::Add, AtomicSize::B64, 1, self.sync)?;
        self.wait_for(self.sync, 2, "at the barrier")
    }

    /// Called every [`CHUNK`] operations: counts this worker's chunk and waits until the
    /// other worker is at most one chunk behind. The two streams of operations are thus
    /// interleaved on the word whatever the scheduler does (on one CPU they alternate by
    /// chunks; on two they also run at the same time).
    fn lockstep(&mut self) -> R {
        self.chunks += 1;
        let mine = self.sync + 8 * (1 + self.me);
        let other = self.sync + 8 * (2 - self.me);
        self.post(AtomicOp::Add, AtomicSize::B64, 1, mine)?;
        self.wait_for(other, self.chunks - 1, "in lockstep")
    }
}

/// Runs `n` operations of `op` on the word at `addr`, alternating post and fetch where
/// both exist. What `arg` means and what comes back, per op:
/// - add: adds `arg` each time; returns (0, 0).
/// - and/or: clears/sets, one per operation, the bits of `arg` in turn; returns (0, 0).
/// - xor: xors `mix64(arg ^ j)` for j in 0..n; returns (xor of those values, 0).
/// - swap: swaps in `arg + j`; returns (sum, xor) of the values it got back.
/// - cswap: `n` increments by compare-and-swap loops; returns (retries, 0). The first
///   compare of a run misses unless the word is 0 (it learns the value from the miss).
///
/// Values are truncated to the width before they are summed or xored.
fn atomic_run(
    w: &mut Worker<'_>,
    op: AtomicOp,
    size: AtomicSize,
    addr: u64,
    n: u64,
    arg: u64,
) -> R<(u64, u64)> {
    let mask = match size {
        AtomicSize::B32 => u64::from(u32::MAX),
        AtomicSize::B64 => u64::MAX,
    };
    let start = Instant::now();
    let bits: Vec<u32> = (0..64).filter(|b| (arg & mask) >> b & 1 == 1).collect();
    let (mut x, mut y) = (0u64, 0u64);
    // cswap: the value this worker expects in the word (what it last wrote or saw).
    let mut guess = 0u64;
    for j in 0..n {
        if j > 0 && j % CHUNK == 0 {
            w.lockstep()?;
            check_deadline(start, "running atomics")?;
        }
        let v = match op {
            AtomicOp::Add => arg,
            AtomicOp::And => {
                !(1u64
                    << bits
                        .get((j as usize) % bits.len().max(1))
                        .copied()
                        .unwrap_or(0))
            }
            AtomicOp::Or => {
                1u64 << bits
                    .get((j as usize) % bits.len().max(1))
                    .copied()
                    .unwrap_or(0)
            }
            AtomicOp::Xor => pattern::mix64(arg ^ j) & mask,
            AtomicOp::Swap => arg.wrapping_add(j) & mask,
            AtomicOp::Cswap => {
                // Increment by compare-and-swap: guess, and on a miss (the other worker
                // got there first) retry with what the word held.
                loop {
                    let got = w.fetch(
                        AtomicOp::Cswap,
                        size,
                        guess.wrapping_add(1) & mask,
                        guess,
                        addr,
                    )?;
                    if got == guess {
                        guess = guess.wrapping_add(1) & mask;
                        break;
                    }
                    if got & !mask != 0 {
                        return Err(format!("cswap returned {got:#x}, wider than {size:?}"));
                    }
                    guess = got;
                    x += 1;
                }
                continue;
            }
        };
        match op {
            AtomicOp::Swap => {
                let got = w.fetch(op, size, v, 0, addr)?;
                if got & !mask != 0 {
                    return Err(format!("swap returned {got:#x}, wider than {size:?}"));
                }
                x = x.wrapping_add(got);
                y ^= got;
            }
            _ => {
                if j % 2 == 0 {
                    w.post(op, size, v, addr)?;
                } else {
                    let got = w.fetch(op, size, v, 0, addr)?;
                    if got & !mask != 0 {
                        return Err(format!("{op:?} returned {got:#x}, wider than {size:?}"));
                    }
                }
                if op == AtomicOp::Xor {
                    x ^= v;
                }
            }
        }
    }
    Ok((x, y))
}

// ---------------------------------------------------------------------------------------
// wait-recv

fn wait_recv(args: &[String]) -> R {
    let rounds: u32 = arg(args, 0, "rounds")?;
    let cfg = st(IfaceConfig::from_env(), "config")?;
    let mut iface = st(Iface::open(Transport::Shm, &cfg), "iface open")?;
    let inbox: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let sink = inbox.clone();
    st(
        iface.set_am_handler(
            5,
            Box::new(move |d: &[u8]| {
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(d.to_vec())
            }),
        ),
        "set_am_handler",
    )?;
    say!("addr {}", hex::encode(&iface.address()));
    for r in 0..rounds {
        say!("waiting {r}");
        // Generous: the test sends as soon as it sees us asleep.
        let woke = st(iface.wait(60_000), "wait")?;
        say!("woke {r} {woke}");
        let start = Instant::now();
        let msg = loop {
            iface.progress();
            if let Some(m) = inbox.lock().unwrap_or_else(|p| p.into_inner()).pop() {
                break m;
            }
            st(iface.wait(100), "wait")?;
            check_deadline(start, "receiving after the wakeup")?;
        };
        say!("got {r} {}", hex::encode(&msg));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// fifo-recv

fn fifo_recv(args: &[String], input: &mut Input) -> R {
    let fifo_size: u32 = arg(args, 0, "fifo size")?;
    let id: u8 = arg(args, 1, "am id")?;
    let mut cfg = IfaceConfig::default();
    cfg.fifo.fifo_size = fifo_size;
    let mut iface = st(Iface::open(Transport::Shm, &cfg), "iface open")?;
    let failure = Failure::default();
    let count = Arc::new(AtomicU64::new(0));
    let (f2, c2) = (failure.clone(), count.clone());
    st(
        iface.set_am_handler(
            id,
            Box::new(move |d: &[u8]| {
                let want = c2.load(Ordering::Relaxed);
                let ok = d.len() == 16
                    && d[..8] == want.to_ne_bytes()
                    && d[8..] == pattern::mix64(want).to_le_bytes();
                if !ok {
                    record(&f2, format!("message {want}: got {}", hex::encode(d)));
                }
                c2.store(want + 1, Ordering::Relaxed);
            }),
        ),
        "set_am_handler",
    )?;
    say!("addr {}", hex::encode(&iface.address()));
    // Not progressing until told: the sender fills the FIFO meanwhile.
    let n: u64 = arg(&input.expect("drain")?, 0, "count")?;
    let start = Instant::now();
    while count.load(Ordering::Relaxed) < n {
        failed(&failure)?;
        if iface.progress() == 0 {
            st(iface.wait(100), "wait")?;
        }
        check_deadline(start, "draining")?;
    }
    failed(&failure)?;
    say!("got {}", count.load(Ordering::Relaxed));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// hold-segment, sleeper

fn hold_segment(args: &[String], input: &mut Input) -> R {
    let len: usize = arg(args, 0, "mem len")?;
    let md = Md::open(Transport::Shm);
    let cfg = st(IfaceConfig::from_env(), "config")?;
    let iface = st(Iface::open(Transport::Shm, &cfg), "iface open")?;
    let mem = st(md.mem_alloc(len), "mem_alloc")?;
    say!("iface {}", hex::encode(&iface.address()));
    say!("mem {}", hex::encode(&mem.pack_rkey()));
    while let Some(w) = input.next()? {
        if w.first().map(String::as_str) == Some("exit") {
            break;
        }
    }
    drop(mem);
    drop(iface);
    Ok(())
}

/// Uses a key unpacked by the allocating domain after the allocation's handle was
/// dropped. Each operation must either still work (the key keeps the memory alive) or
/// fail; it must not fault. Runs in a peer because a fault kills the process.
fn stale_rkey(args: &[String]) -> R {
    let t = match args.first().map(String::as_str) {
        Some("self") => Transport::SelfTl,
        Some("shm") => Transport::Shm,
        other => return Err(format!("unknown transport {other:?}")),
    };
    let md = Md::open(t);
    let mut iface = st(Iface::open(t, &IfaceConfig::default()), "iface open")?;
    let own = iface.address();
    let ep = st(iface.ep_create(&own), "ep_create")?;
    let h = st(md.mem_alloc(1 << 20), "mem_alloc")?;
    let rkey = st(md.rkey_unpack(&h.pack_rkey()), "rkey_unpack")?;
    let addr = h.address() as u64;
    drop(h);
    let mut out = Vec::new();
    let r = iface.put_short(ep, b"stale", addr + 4096, &rkey);
    out.push(format!("put_short={r:?}"));
    let mut buf = [0u8; 64];
    let r = iface.get_zcopy(ep, &mut [&mut buf[..]], addr + 8192, &rkey, 0);
    out.push(format!("get_zcopy={r:?}"));
    let r = iface.atomic_fetch(ep, AtomicOp::Add, AtomicSize::B64, 1, 0, addr, &rkey, 0);
    out.push(format!("atomic_fetch={r:?}"));
    say!("survived {}", out.join(" "));
    Ok(())
}

fn sleeper(input: &mut Input) -> R {
    say!("ready");
    while let Some(w) = input.next()? {
        match w.first().map(String::as_str) {
            Some("echo") => say!("{}", w[1..].join(" ")),
            Some("exit") => std::process::exit(arg(&w, 1, "code")?),
            Some("panic") => panic!("asked to panic"),
            other => return Err(format!("unknown command {other:?}")),
        }
    }
    Ok(())
}
