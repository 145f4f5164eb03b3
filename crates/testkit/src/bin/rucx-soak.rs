//! rucx-soak: N processes run random ucp operations against each other for a given time,
//! and every byte is checked.
//!
//! ```text
//! rucx-soak [--time SECS] [--procs N] [--transport shm|tcp|udp] [--netns-loss PCT]
//!           [--kill] [--seed S] [--max-size BYTES]
//! ```
//!
//! The parent starts N ranks (this binary again, with `RUCX_SOAK_RANK` set and `UCX_TLS`
//! naming the transport), gathers each rank's worker address, region base and packed
//! remote key from its stdout, and hands the list to all of them on stdin. Each rank then
//! picks random operations against random peers until its time is up:
//!
//! - tag sends of 1 B to `--max-size` (4 MiB; sizes skewed small, a tenth synchronous),
//!   received by wildcard receives (tag mask 0 on the sender, length and sequence fields).
//!   The tag carries sender, length and sequence; messages of 32 bytes and more also
//!   carry a header (magic, sender, sequence, length, seed); every byte is checked
//!   against a pattern of (sender, receiver, sequence), and the sequence per sender must
//!   be exactly the next one (messages of one sender match in order);
//! - active messages (eager and rendezvous) with a header (sender, sequence, length),
//!   checked the same way, in order per sender;
//! - stream bytes: each ordered pair has one byte stream whose byte at offset k is a
//!   pattern of (sender, receiver, k), so whatever chunks arrive, each byte is checked;
//! - put then get of a random range of the slot this rank owns in the peer's region
//!   (`mem_map`), the read-back checked (and at the end each rank finds every live
//!   peer's last put in place in its own memory);
//! - 64-bit fetch-add on the peer's counter for this rank (the fetched value must be the
//!   sum of this rank's earlier adds: exact), and on the peer's shared counter (its final
//!   value must be the sum of everyone's adds, checked by its owner when nobody died).
//!
//! At the end each rank stops, waits for its operations, and sends every peer a FIN
//! message with the counts it sent; a rank is done when it has received and checked all
//! of every live peer's data. The parent then says bye. With `--kill` the parent SIGKILLs
//! one rank at a random moment (between 20% and 60% of the time) and tells the others;
//! survivors keep using the dead rank until they see an error (error handler or request
//! status), then leave it, and must see errors on no other endpoint.
//!
//! With `--netns-loss PCT` every rank runs in its own network namespace (root needed),
//! joined by a bridge, each device losing PCT% of what it sends (`tc netem`).
//!
//! The parent prints per run: operations done, bytes verified, errors by kind and peer,
//! and each process's memory high-water mark (VmHWM). It exits non-zero on a
//! verification failure, a rank that makes no progress for 30 s, an unexpected error, or
//! a crash of a rank that was not killed. Children are killed and namespaces removed on
//! every exit path of the parent, SIGINT, SIGTERM and SIGHUP included (and a rank exits
//! when the parent's pipe closes).
//!
//! Blocking calls the ranks make (get, fetch-add, pulling a rendezvous AM) wait only for
//! the peer's progress, never for the peer's application: a blocking flush would also
//! wait for this rank's rendezvous sends, which need the peer to post receives, and a
//! peer in the same flush posts none (a deadlock of the harness, not of ucp).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::hex;
use testkit::pattern::{check_mem, fill_mem, mix64};
use ucp::{
    AmAction, AmData, AmDesc, AmSendFlags, AtomicOp, AtomicSize, Context, Ep, Features, RemoteKey,
    Request, Sent, ThreadMode, Worker,
};
use ucs::Status;

/// A rank that shows no progress for this long hangs.
const HANG: Duration = Duration::from_secs(30);
/// Region every rank maps: counters in the first page, then one data slot per rank.
const REGION: usize = 8 << 20;
const COUNTERS: usize = 4096;
/// Most sends (tag, AM, stream, FIN) of a rank in flight at once.
const MAX_OUT: usize = 16;
/// Wildcard tag receives kept posted.
const RECVS: usize = 4;
const AM_ID: u16 = 11;
const MAGIC: u32 = 0x4b41_4f53; // "SOAK"

// Tag layout: class 4 bits | sender 6 | length 23 | sequence 31.
const CLASS_DATA: u64 = 1;
const CLASS_FIN: u64 = 2;
const CLASS_MASK: u64 = 0xf << 60;

fn tag_of(class: u64, sender: usize, len: usize, seq: u64) -> u64 {
    class << 60 | (sender as u64 & 0x3f) << 54 | (len as u64 & 0x7f_ffff) << 31 | seq & 0x7fff_ffff
}

fn tag_fields(tag: u64) -> (u64, usize, usize, u64) {
    (
        tag >> 60,
        (tag >> 54 & 0x3f) as usize,
        (tag >> 31 & 0x7f_ffff) as usize,
        tag & 0x7fff_ffff,
    )
}

fn seed_of(kind: u64, sender: usize, receiver: usize, seq: u64) -> u64 {
    mix64(kind << 56 ^ (sender as u64) << 48 ^ (receiver as u64) << 40 ^ seq)
}

/// xorshift64*: a small seeded generator (the run is reproducible up to timing).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(mix64(seed) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// A size in 1..=max skewed small: a power-of-two range chosen by the square of a
    /// uniform draw, then uniform inside it.
    fn size(&mut self, max: usize) -> usize {
        let bits = 64 - (max as u64).leading_zeros() as u64;
        let u = self.below(1 << 16) as f64 / 65536.0;
        let e = (u * u * bits as f64) as u32;
        let top = (1u64 << e).min(max as u64);
        1 + self.below(top) as usize
    }
}

fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn main() {
    let code = match std::env::var("RUCX_SOAK_RANK") {
        Ok(r) => rank::run(r.parse().expect("RUCX_SOAK_RANK")),
        Err(_) => parent::run(),
    };
    std::process::exit(code);
}

// ======================================================================================
// The ranks.
// ======================================================================================

mod rank {
    use super::*;

    /// What a FIN message carries: what the sender sent to its receiver in all.
    #[derive(Clone, Copy, Default, Debug)]
    struct Fin {
        tag: u64,
        am: u64,
        stream: u64,
        shared_sum: u64,
        /// The last put into this rank's region: offset, length, pattern seed.
        last_put: (u64, u64, u64),
    }

    struct PeerState {
        ep: Ep,
        base: u64,
        rk: Option<RemoteKey>,
        /// Gone: an error was seen on it (or, at the end, the parent said so).
        dead: bool,
        /// The parent says it was killed.
        killed: bool,
        // Sent to the peer.
        tag_seq: u64,
        am_seq: u64,
        stream_sent: u64,
        private_sum: u64,
        shared_sum: u64,
        last_put: (u64, u64, u64),
        // Received from the peer.
        tag_next: u64,
        /// Sequences received above `tag_next`.
        tag_ahead: std::collections::BTreeSet<u64>,
        stream_got: u64,
        fin: Option<Fin>,
    }

    /// What the active-message handler records (it runs inside progress).
    #[derive(Default)]
    struct AmRx {
        next: Vec<u64>,
        done: u64,
        bytes: u64,
        fails: Vec<String>,
        /// Rendezvous messages to pull: descriptor, sender, sequence, length.
        kept: Vec<(AmDesc, usize, u64, usize)>,
    }

    enum Op {
        Tag,
        Am,
        Stream,
        Fin,
    }

    struct Out {
        r: Request,
        op: Op,
        peer: usize,
    }

    struct Rank {
        me: usize,
        n: usize,
        w: Worker,
        peers: Vec<Option<PeerState>>,
        am: Arc<Mutex<AmRx>>,
        ep_errs: Arc<Mutex<Vec<(usize, Status)>>>,
        out: Vec<Out>,
        recvs: Vec<Request>,
        fins: Vec<Request>,
        rng: Rng,
        max: usize,
        stats: BTreeMap<String, u64>,
        fails: Vec<String>,
        /// When the parent said a peer was killed (for the detection time).
        told_dead: Option<(usize, Instant)>,
        lines: Receiver<String>,
        bye: bool,
        mem: ucp::MemH,
    }

    /// A status as one word (for the `key=value` stats line).
    fn kind(s: Status) -> String {
        format!("{s:?}")
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '-')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join("_")
    }

    fn stdin_lines() -> Receiver<String> {
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for l in std::io::stdin().lock().lines().map_while(Result::ok) {
                if tx.send(l.trim().to_string()).is_err() {
                    return;
                }
            }
            let _ = tx.send("eof".into());
        });
        rx
    }

    fn say(s: &str) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "@@ {s}");
        let _ = o.flush();
    }

    pub fn run(me: usize) -> i32 {
        let n: usize = std::env::var("RUCX_SOAK_PROCS").unwrap().parse().unwrap();
        let secs: f64 = std::env::var("RUCX_SOAK_TIME").unwrap().parse().unwrap();
        let seed: u64 = std::env::var("RUCX_SOAK_SEED").unwrap().parse().unwrap();
        let max: usize = std::env::var("RUCX_SOAK_MAX").unwrap().parse().unwrap();
        let lines = stdin_lines();
        let features = Features::TAG
            | Features::RMA
            | Features::AMO64
            | Features::AMO32
            | Features::AM
            | Features::STREAM;
        let ctx = match Context::new(features) {
            Ok(c) => c,
            Err(s) => {
                say(&format!("fail context: {s:?}"));
                return 2;
            }
        };
        let mut w = Worker::new(&ctx, ThreadMode::Single).expect("worker");
        let mem = ctx.mem_alloc(REGION).expect("mem_alloc");
        say(&format!(
            "addr {} {} {}",
            hex::encode(&w.address()),
            mem.address() as u64,
            hex::encode(&mem.rkey_pack())
        ));
        let Ok(list) = lines.recv_timeout(Duration::from_secs(120)) else {
            say("fail no peer list");
            return 2;
        };
        let entries: Vec<&str> = list
            .strip_prefix("peers ")
            .expect("peers line")
            .split(' ')
            .collect();
        assert_eq!(entries.len(), n, "peer list");
        let ep_errs: Arc<Mutex<Vec<(usize, Status)>>> = Arc::default();
        let mut peers = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            if i == me {
                peers.push(None);
                continue;
            }
            let mut f = e.split(':');
            let addr = hex::decode(f.next().unwrap()).unwrap();
            let base: u64 = f.next().unwrap().parse().unwrap();
            let ep = w.ep_create(&addr).expect("ep_create");
            let errs = ep_errs.clone();
            w.ep_set_err_handler(
                ep,
                Some(Box::new(move |_, s| errs.lock().unwrap().push((i, s)))),
            )
            .unwrap();
            peers.push(Some(PeerState {
                ep,
                base,
                rk: None,
                dead: false,
                killed: false,
                tag_seq: 0,
                am_seq: 0,
                stream_sent: 0,
                private_sum: 0,
                shared_sum: 0,
                last_put: (0, 0, 0),
                tag_next: 0,
                tag_ahead: Default::default(),
                stream_got: 0,
                fin: None,
            }));
            let _ = f;
        }
        // Keys are unpacked per endpoint (this connects it); keep the packed ones aside.
        let keys: Vec<Vec<u8>> = entries
            .iter()
            .map(|e| hex::decode(e.split(':').nth(2).unwrap()).unwrap())
            .collect();
        let am: Arc<Mutex<AmRx>> = Arc::new(Mutex::new(AmRx {
            next: vec![0; n],
            ..AmRx::default()
        }));
        let a2 = am.clone();
        w.am_set_handler(AM_ID, Some(Box::new(move |m| am_handler(&a2, me, m))));
        let mut r = Rank {
            me,
            n,
            w,
            peers,
            am,
            ep_errs,
            out: Vec::new(),
            recvs: Vec::new(),
            fins: Vec::new(),
            rng: Rng::new(seed ^ (me as u64) << 32),
            max,
            stats: BTreeMap::new(),
            fails: Vec::new(),
            told_dead: None,
            lines,
            bye: false,
            mem,
        };
        for _ in 0..RECVS {
            let req =
                r.w.tag_recv_owned(vec![0; max], CLASS_DATA << 60, CLASS_MASK)
                    .expect("tag_recv");
            r.recvs.push(req);
        }
        for _ in 0..n - 1 {
            let req =
                r.w.tag_recv_owned(vec![0; 64], CLASS_FIN << 60, CLASS_MASK)
                    .expect("tag_recv");
            r.fins.push(req);
        }
        for (i, k) in keys.iter().enumerate() {
            if let Some(p) = r.peers[i].as_mut() {
                match r.w.rkey_unpack(p.ep, k) {
                    Ok(rk) => p.rk = Some(rk),
                    Err(s) => r.fails.push(format!("rkey_unpack for rank {i}: {s:?}")),
                }
            }
        }
        r.main_loop(Duration::from_secs_f64(secs))
    }

    fn am_handler(st: &Mutex<AmRx>, me: usize, m: &ucp::AmMsg<'_>) -> AmAction {
        let mut st = st.lock().unwrap();
        if m.header.len() != 24 {
            st.fails
                .push(format!("AM header of {} bytes", m.header.len()));
            return AmAction::Done;
        }
        let word = |i: usize| u64::from_le_bytes(m.header[i * 8..i * 8 + 8].try_into().unwrap());
        let (sender, seq, len) = (word(0) as usize, word(1), word(2) as usize);
        if sender >= st.next.len() || sender == me {
            st.fails.push(format!("AM from rank {sender}"));
            return AmAction::Done;
        }
        if seq != st.next[sender] {
            let want = st.next[sender];
            st.fails.push(format!(
                "AM from rank {sender}: sequence {seq}, expected {want}"
            ));
        }
        st.next[sender] = seq + 1;
        match m.data {
            AmData::Eager(d) => {
                if d.len() != len {
                    st.fails.push(format!(
                        "AM {seq} from rank {sender}: {} bytes, header says {len}",
                        d.len()
                    ));
                } else if let Some(i) = check_mem(d, seed_of(2, sender, me, seq), 0) {
                    st.fails.push(format!(
                        "AM {seq} from rank {sender} ({len} B): byte {i} differs"
                    ));
                } else {
                    st.done += 1;
                    st.bytes += len as u64;
                }
                AmAction::Done
            }
            AmData::Rndv { length } => {
                if length != len {
                    st.fails.push(format!(
                        "AM {seq} from rank {sender}: rendezvous of {length} bytes, header says {len}"
                    ));
                    return AmAction::Done;
                }
                st.kept.push((m.desc, sender, seq, len));
                AmAction::Keep
            }
        }
    }

    #[derive(PartialEq, Eq, Clone, Copy, Debug)]
    enum Phase {
        Run,
        Drain,
        Fin,
        Done,
    }

    impl Rank {
        fn bump(&mut self, k: &str, v: u64) {
            *self.stats.entry(k.to_string()).or_default() += v;
        }

        fn ops(&self) -> u64 {
            self.stats
                .iter()
                .filter(|(k, _)| k.starts_with("op."))
                .map(|(_, v)| v)
                .sum()
        }

        /// An operation on `peer` failed with `s`: counted by peer and kind; the peer is
        /// left from now on.
        fn error(&mut self, peer: usize, what: &str, s: Status) {
            self.bump(&format!("err.{peer}.{what}.{}", kind(s)), 1);
            self.mark_dead(peer);
        }

        fn mark_dead(&mut self, peer: usize) {
            let Some(p) = self.peers.get_mut(peer).and_then(Option::as_mut) else {
                return;
            };
            if p.dead {
                return;
            }
            p.dead = true;
            if let Some((d, t)) = self.told_dead {
                if d == peer {
                    let ms = t.elapsed().as_millis() as u64;
                    self.bump("detect_ms", ms);
                }
            }
        }

        fn live_peers(&self) -> Vec<usize> {
            (0..self.n)
                .filter(|&i| self.peers[i].as_ref().is_some_and(|p| !p.dead))
                .collect()
        }

        fn main_loop(&mut self, time: Duration) -> i32 {
            let start = Instant::now();
            let end = start + time;
            let mut phase = Phase::Run;
            let mut beat = Instant::now();
            let mut last_ops = 0;
            while !self.bye {
                let mut busy = self.w.progress() > 0;
                busy |= self.stdin();
                busy |= self.reap_recvs();
                busy |= self.reap_fins();
                busy |= self.reap_sends();
                busy |= self.pull_kept_ams();
                busy |= self.streams();
                self.take_ep_errors();
                {
                    let mut am = self.am.lock().unwrap();
                    let fails: Vec<String> = am.fails.drain(..).collect();
                    let (done, bytes) =
                        (std::mem::take(&mut am.done), std::mem::take(&mut am.bytes));
                    drop(am);
                    self.fails.extend(fails);
                    self.bump("op.am_rx", done);
                    self.bump("bytes", bytes);
                }
                if !self.fails.is_empty() {
                    for f in &self.fails {
                        say(&format!("fail rank {}: {f}", self.me));
                    }
                    self.report();
                    return 2;
                }
                match phase {
                    Phase::Run if Instant::now() >= end => phase = Phase::Drain,
                    Phase::Run if self.out.len() < MAX_OUT => {
                        self.random_op();
                        busy = true;
                    }
                    Phase::Drain if self.out.is_empty() => {
                        self.send_fins();
                        phase = Phase::Fin;
                    }
                    Phase::Fin if self.out.is_empty() && self.all_received() => {
                        self.final_checks();
                        if !self.fails.is_empty() {
                            continue;
                        }
                        self.report();
                        say("done");
                        phase = Phase::Done;
                    }
                    _ => {}
                }
                if phase != Phase::Run && phase != Phase::Done {
                    self.leave_killed();
                    if Instant::now() > end + Duration::from_secs(90) {
                        self.fails.push(format!(
                            "still in phase {phase:?} 90 s after the end: {}",
                            self.waiting_for()
                        ));
                    }
                }
                if beat.elapsed() >= Duration::from_secs(1) {
                    beat = Instant::now();
                    let ops = self.ops();
                    say(&format!("hb {ops}"));
                    if ops == last_ops && phase != Phase::Done {
                        // Nothing moved for a second: say what we wait for (stderr).
                        eprintln!("rank {} ({phase:?}) waits: {}", self.me, self.waiting_for());
                    }
                    last_ops = ops;
                }
                if !busy {
                    let _ = self.w.wait(1);
                }
            }
            0
        }

        fn waiting_for(&self) -> String {
            let mut s = format!("{} sends out;", self.out.len());
            for (i, p) in self.peers.iter().enumerate() {
                if let Some(p) = p {
                    s += &format!(
                        " rank {i}{}: tag {}/{:?} am {} stream {};",
                        if p.dead { " (dead)" } else { "" },
                        p.tag_next,
                        p.fin.map(|f| (f.tag, f.am, f.stream)),
                        self.am.lock().unwrap().next[i],
                        p.stream_got
                    );
                }
            }
            s
        }

        fn stdin(&mut self) -> bool {
            let mut any = false;
            loop {
                match self.lines.try_recv() {
                    Ok(l) => {
                        any = true;
                        if l == "bye" {
                            self.bye = true;
                        } else if l == "eof" {
                            // The parent is gone: nobody to report to.
                            std::process::exit(3);
                        } else if let Some(d) = l.strip_prefix("dead ") {
                            let d: usize = d.parse().unwrap();
                            self.told_dead = Some((d, Instant::now()));
                            if let Some(p) = self.peers[d].as_mut() {
                                p.killed = true;
                            }
                        }
                    }
                    Err(TryRecvError::Empty) => return any,
                    Err(TryRecvError::Disconnected) => std::process::exit(3),
                }
            }
        }

        fn take_ep_errors(&mut self) {
            let errs: Vec<(usize, Status)> = self.ep_errs.lock().unwrap().drain(..).collect();
            for (i, s) in errs {
                self.bump(&format!("err.{i}.ep.{}", kind(s)), 1);
                self.mark_dead(i);
            }
        }

        /// After the run: a peer the parent killed whose endpoint showed no error yet is
        /// closed by force (its operations end with Canceled), so nothing waits for it.
        fn leave_killed(&mut self) {
            for i in 0..self.n {
                let ep = match self.peers[i].as_mut() {
                    Some(p) if p.killed && !p.dead => {
                        p.dead = true;
                        p.ep
                    }
                    _ => continue,
                };
                self.bump("closed_killed_undetected", 1);
                let _ = self.w.ep_close_nb(ep, true);
            }
        }

        fn all_received(&self) -> bool {
            self.peers.iter().flatten().all(|p| {
                p.dead
                    || p.fin
                        .is_some_and(|f| p.tag_next == f.tag && p.stream_got == f.stream)
            }) && (0..self.n).all(|i| {
                let Some(p) = &self.peers[i] else { return true };
                p.dead
                    || p.fin
                        .is_some_and(|f| self.am.lock().unwrap().next[i] == f.am)
            })
        }

        fn final_checks(&mut self) {
            for (i, p) in self.peers.iter().enumerate() {
                let Some(p) = p else { continue };
                if let Some(f) = p.fin {
                    if p.tag_next > f.tag || p.stream_got > f.stream {
                        self.fails
                            .push(format!("rank {i} sent less than was received"));
                    }
                }
            }
            // What each live peer put last is still in its slot of this region.
            let lasts: Vec<(usize, (u64, u64, u64))> = self
                .peers
                .iter()
                .enumerate()
                .filter_map(|(i, p)| Some((i, p.as_ref()?)))
                .filter(|(_, p)| !p.dead)
                .filter_map(|(i, p)| Some((i, p.fin?.last_put)))
                .filter(|(_, l)| l.1 > 0)
                .collect();
            for (i, (at, len, seed)) in lasts {
                let slot = ((REGION - COUNTERS) / self.n) as u64;
                let lo = COUNTERS as u64 + i as u64 * slot;
                if at < lo || at + len > lo + slot {
                    self.fails.push(format!(
                        "rank {i} says it put {len} B at {at}, outside its slot"
                    ));
                    continue;
                }
                match self.region_check(at as usize, len as usize, seed) {
                    None => {
                        self.bump("checked_last_put", 1);
                        self.bump("bytes", len);
                    }
                    Some(k) => self.fails.push(format!(
                        "rank {i}'s last put ({len} B at {at}): byte {k} in this region differs"
                    )),
                }
            }
            if self.peers.iter().flatten().any(|p| p.dead) {
                return;
            }
            // Nobody died: the shared counter holds the sum of everyone's adds.
            let want: u64 = self
                .peers
                .iter()
                .flatten()
                .map(|p| p.fin.map_or(0, |f| f.shared_sum))
                .fold(0, u64::wrapping_add);
            let got = self.counter(self.n);
            if got != want {
                self.fails
                    .push(format!("shared counter is {got}, the peers added {want}"));
            } else {
                self.bump("checked_shared_counter", 1);
            }
        }

        /// Checks `len` bytes at offset `at` of this rank's region against `seed`'s
        /// pattern; the index of the first wrong byte.
        #[allow(unsafe_code)]
        fn region_check(&self, at: usize, len: usize, seed: u64) -> Option<usize> {
            assert!(at + len <= self.mem.len());
            // SAFETY: the range is inside the mapped region (checked above), which lives
            // as long as `self.mem`; it belongs to one peer's slot, and that peer sent
            // its FIN after its last access completed, so nobody writes it while the
            // slice lives.
            let b = unsafe { std::slice::from_raw_parts(self.mem.address().add(at), len) };
            check_mem(b, seed, at as u64)
        }

        /// Counter `i` of this rank's region.
        #[allow(unsafe_code)]
        fn counter(&self, i: usize) -> u64 {
            assert!(i * 8 + 8 <= COUNTERS && self.mem.len() >= COUNTERS);
            let p = self.mem.address().wrapping_add(i * 8).cast::<AtomicU64>();
            // SAFETY: the region is mapped (it lives in `self.mem`) and at least COUNTERS
            // bytes long; `p` is inside it and 8-byte aligned (the region is page
            // aligned); peers change it only with atomic operations, and an `AtomicU64`
            // may alias memory others update atomically.
            unsafe { (*p).load(Ordering::SeqCst) }
        }

        fn report(&mut self) {
            let hwm = vm_hwm_kb(std::process::id()).unwrap_or(0);
            self.stats.insert("hwm_kb".into(), hwm);
            let s: Vec<String> = self.stats.iter().map(|(k, v)| format!("{k}={v}")).collect();
            say(&format!("stats {}", s.join(" ")));
        }

        // ----- issuing ------------------------------------------------------------------

        fn random_op(&mut self) {
            let live = self.live_peers();
            if live.is_empty() {
                return;
            }
            let peer = live[self.rng.below(live.len() as u64) as usize];
            match self.rng.below(100) {
                0..=39 => self.send_tag(peer),
                40..=59 => self.send_am(peer),
                60..=74 => self.send_stream(peer),
                75..=89 => self.put_get(peer),
                _ => self.atomics(peer),
            }
        }

        fn track(&mut self, res: ucs::Result<Sent>, op: Op, peer: usize, what: &str) {
            match res {
                Ok(Sent::Done(_)) => self.sent(&op, peer),
                Ok(Sent::Pending(r)) => self.out.push(Out { r, op, peer }),
                Err(s) => self.error(peer, what, s),
            }
        }

        fn sent(&mut self, op: &Op, _peer: usize) {
            match op {
                Op::Tag => self.bump("op.tag_tx", 1),
                Op::Am => self.bump("op.am_tx", 1),
                Op::Stream => self.bump("op.stream_tx", 1),
                Op::Fin => {}
            }
        }

        fn send_tag(&mut self, peer: usize) {
            let len = self.rng.size(self.max);
            let sync = self.rng.below(10) == 0;
            let me = self.me;
            let p = self.peers[peer].as_mut().unwrap();
            let seq = p.tag_seq;
            p.tag_seq += 1;
            let seed = seed_of(1, me, peer, seq);
            let mut data = vec![0u8; len];
            if len >= 32 {
                data[..4].copy_from_slice(&MAGIC.to_le_bytes());
                data[4..8].copy_from_slice(&(me as u32).to_le_bytes());
                data[8..16].copy_from_slice(&seq.to_le_bytes());
                data[16..24].copy_from_slice(&(len as u64).to_le_bytes());
                data[24..32].copy_from_slice(&seed.to_le_bytes());
                fill_mem(&mut data[32..], seed, 32);
            } else {
                fill_mem(&mut data, seed, 0);
            }
            let tag = tag_of(CLASS_DATA, me, len, seq);
            let ep = p.ep;
            let res = self.w.tag_send_owned(ep, data, tag, sync);
            self.track(res, Op::Tag, peer, "tag_send");
        }

        fn send_am(&mut self, peer: usize) {
            // Rendezvous AMs are as long as 1 MiB; eager ones anything below.
            let len = self.rng.size(self.max.min(1 << 20)) - 1;
            let me = self.me;
            let p = self.peers[peer].as_mut().unwrap();
            let seq = p.am_seq;
            p.am_seq += 1;
            let mut data = vec![0u8; len];
            fill_mem(&mut data, seed_of(2, me, peer, seq), 0);
            let mut hdr = Vec::with_capacity(24);
            for x in [me as u64, seq, len as u64] {
                hdr.extend_from_slice(&x.to_le_bytes());
            }
            let ep = p.ep;
            let res = self
                .w
                .am_send_owned(ep, AM_ID, &hdr, data, AmSendFlags::default());
            self.track(res, Op::Am, peer, "am_send");
        }

        fn send_stream(&mut self, peer: usize) {
            let len = self.rng.size(256 << 10);
            let me = self.me;
            let p = self.peers[peer].as_mut().unwrap();
            let at = p.stream_sent;
            p.stream_sent += len as u64;
            let mut data = vec![0u8; len];
            fill_mem(&mut data, seed_of(3, me, peer, 0), at);
            let ep = p.ep;
            let res = self.w.stream_send_owned(ep, data);
            self.track(res, Op::Stream, peer, "stream_send");
        }

        fn put_get(&mut self, peer: usize) {
            let slot = (REGION - COUNTERS) / self.n;
            let len = self.rng.size(slot.min(1 << 20));
            let off = self.rng.below((slot - len + 1) as u64) as usize;
            let at = COUNTERS + self.me * slot + off;
            let seed = self.rng.next();
            let p = self.peers[peer].as_ref().unwrap();
            let (ep, addr) = (p.ep, p.base + at as u64);
            let Some(rk) = p.rk.as_ref() else { return };
            let mut data = vec![0u8; len];
            fill_mem(&mut data, seed, at as u64);
            // Not the blocking put: its flush would also wait for this rank's rendezvous
            // sends on the endpoint, which complete only when the peer posts receives,
            // and the peer may be in the same flush (both wait, neither reposts). A get
            // after a put on one endpoint sees the put (every path keeps issue order),
            // so the get's completion is the put's too.
            if let Err(s) = self.w.put_nbi(ep, &data, addr, rk) {
                return self.error(peer, "put", s);
            }
            self.bump("op.put", 1);
            data.fill(0);
            let p = self.peers[peer].as_ref().unwrap();
            let rk = p.rk.as_ref().unwrap();
            if let Err(s) = self.w.get(ep, &mut data, addr, rk) {
                return self.error(peer, "get", s);
            }
            if let Some(i) = check_mem(&data, seed, at as u64) {
                self.fails.push(format!(
                    "get of {len} B at {at} from rank {peer} after a put: byte {i} differs"
                ));
                return;
            }
            self.bump("op.get", 1);
            self.bump("bytes", len as u64);
            self.peers[peer].as_mut().unwrap().last_put = (at as u64, len as u64, seed);
        }

        fn atomics(&mut self, peer: usize) {
            let v = 1 + self.rng.below(1000);
            let me = self.me;
            let n = self.n;
            let p = self.peers[peer].as_ref().unwrap();
            let (ep, base, want) = (p.ep, p.base, p.private_sum);
            let Some(rk) = p.rk.as_ref() else { return };
            let fetched = self.w.atomic_fetch(
                ep,
                AtomicOp::Add,
                AtomicSize::B64,
                v,
                0,
                base + (me * 8) as u64,
                rk,
            );
            match fetched {
                Err(s) => return self.error(peer, "atomic", s),
                Ok(old) if old != want => self.fails.push(format!(
                    "fetch-add on my counter at rank {peer} fetched {old}, my adds sum to {want}"
                )),
                Ok(_) => {
                    self.peers[peer].as_mut().unwrap().private_sum = want.wrapping_add(v);
                    self.bump("op.amo", 1);
                    self.bump("bytes", 8);
                }
            }
            let p = self.peers[peer].as_ref().unwrap();
            let rk = p.rk.as_ref().unwrap();
            match self.w.atomic_fetch(
                ep,
                AtomicOp::Add,
                AtomicSize::B64,
                v,
                0,
                base + (n * 8) as u64,
                rk,
            ) {
                Err(s) => self.error(peer, "atomic", s),
                Ok(_) => {
                    let p = self.peers[peer].as_mut().unwrap();
                    p.shared_sum = p.shared_sum.wrapping_add(v);
                    self.bump("op.amo", 1);
                }
            }
        }

        fn send_fins(&mut self) {
            for i in self.live_peers() {
                let p = self.peers[i].as_ref().unwrap();
                let mut data = Vec::with_capacity(32);
                let (a, l, sd) = p.last_put;
                for x in [p.tag_seq, p.am_seq, p.stream_sent, p.shared_sum, a, l, sd] {
                    data.extend_from_slice(&x.to_le_bytes());
                }
                let ep = p.ep;
                let res = self
                    .w
                    .tag_send_owned(ep, data, tag_of(CLASS_FIN, self.me, 56, 0), false);
                self.track(res, Op::Fin, i, "fin_send");
            }
        }

        // ----- completing ---------------------------------------------------------------

        fn reap_sends(&mut self) -> bool {
            let mut any = false;
            let mut i = 0;
            while i < self.out.len() {
                match self.w.request_take_owned(self.out[i].r) {
                    Ok(None) => i += 1,
                    Ok(Some(t)) => {
                        any = true;
                        let o = self.out.swap_remove(i);
                        if t.status == Status::Ok {
                            self.sent(&o.op, o.peer);
                        } else {
                            let what = match o.op {
                                Op::Tag => "tag_send",
                                Op::Am => "am_send",
                                Op::Stream => "stream_send",
                                Op::Fin => "fin_send",
                            };
                            self.error(o.peer, what, t.status);
                        }
                    }
                    Err(s) => {
                        let o = self.out.swap_remove(i);
                        self.fails
                            .push(format!("request of a send to rank {}: {s:?}", o.peer));
                    }
                }
            }
            any
        }

        fn reap_recvs(&mut self) -> bool {
            let mut any = false;
            let mut i = 0;
            while i < self.recvs.len() {
                let t = match self.w.request_take_owned(self.recvs[i]) {
                    Ok(None) => {
                        i += 1;
                        continue;
                    }
                    Ok(Some(t)) => t,
                    Err(s) => {
                        self.fails.push(format!("tag receive request: {s:?}"));
                        return true;
                    }
                };
                any = true;
                let (class, sender, len, seq) = tag_fields(t.info.sender_tag);
                if t.status != Status::Ok && class != CLASS_DATA {
                    self.fails.push(format!(
                        "a tag receive failed ({:?}) with no sender (tag {:#x})",
                        t.status, t.info.sender_tag
                    ));
                } else if t.status != Status::Ok {
                    self.error(sender, "tag_recv", t.status);
                } else {
                    self.check_tag(class, sender, len, seq, t.info.length, &t.buf);
                }
                let mut buf = t.buf;
                buf.resize(self.max, 0);
                match self.w.tag_recv_owned(buf, CLASS_DATA << 60, CLASS_MASK) {
                    Ok(r) => self.recvs[i] = r,
                    Err(s) => {
                        self.fails.push(format!("tag_recv: {s:?}"));
                        return true;
                    }
                }
                i += 1;
            }
            any
        }

        fn check_tag(
            &mut self,
            class: u64,
            sender: usize,
            len: usize,
            seq: u64,
            got: usize,
            b: &[u8],
        ) {
            let me = self.me;
            let Some(p) = self.peers.get_mut(sender).and_then(Option::as_mut) else {
                self.fails.push(format!("tag message from rank {sender}"));
                return;
            };
            if class != CLASS_DATA || got != len || b.len() < len {
                self.fails.push(format!(
                    "tag message {seq} from rank {sender}: class {class}, {got} bytes, tag says {len}"
                ));
                return;
            }
            // Receives complete out of order (a small message overtakes a large one
            // matched before it), so a sequence may run ahead of the lowest missing
            // one; none may come twice, none may be older.
            let seq = seq | (p.tag_next & !0x7fff_ffff);
            if seq < p.tag_next || !p.tag_ahead.insert(seq) {
                let want = p.tag_next;
                self.fails.push(format!(
                    "tag message from rank {sender}: sequence {seq} again (lowest missing {want})"
                ));
                return;
            }
            while p.tag_ahead.remove(&p.tag_next) {
                p.tag_next += 1;
            }
            let seed = seed_of(1, sender, me, seq);
            let b = &b[..len];
            if len >= 32 {
                let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
                let head_ok = u32::from_le_bytes(b[..4].try_into().unwrap()) == MAGIC
                    && u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize == sender
                    && w(8) == seq
                    && w(16) == len as u64
                    && w(24) == seed;
                if !head_ok {
                    self.fails.push(format!(
                        "tag message {seq} from rank {sender}: bad header {:02x?}",
                        &b[..32]
                    ));
                    return;
                }
                if let Some(i) = check_mem(&b[32..], seed, 32) {
                    self.fails.push(format!(
                        "tag message {seq} from rank {sender} ({len} B): byte {} differs",
                        i + 32
                    ));
                    return;
                }
            } else if let Some(i) = check_mem(b, seed, 0) {
                self.fails.push(format!(
                    "tag message {seq} from rank {sender} ({len} B): byte {i} differs"
                ));
                return;
            }
            self.bump("op.tag_rx", 1);
            self.bump("bytes", len as u64);
        }

        fn reap_fins(&mut self) -> bool {
            let mut any = false;
            let mut i = 0;
            while i < self.fins.len() {
                let t = match self.w.request_take_owned(self.fins[i]) {
                    Ok(None) => {
                        i += 1;
                        continue;
                    }
                    Ok(Some(t)) => t,
                    Err(s) => {
                        self.fails.push(format!("FIN receive request: {s:?}"));
                        return true;
                    }
                };
                any = true;
                self.fins.swap_remove(i);
                let (_, sender, _, _) = tag_fields(t.info.sender_tag);
                if t.status != Status::Ok {
                    self.error(sender, "fin_recv", t.status);
                    continue;
                }
                let w = |k: usize| u64::from_le_bytes(t.buf[k * 8..k * 8 + 8].try_into().unwrap());
                if t.info.length != 56 {
                    self.fails.push(format!("FIN of {} bytes", t.info.length));
                    continue;
                }
                let fin = Fin {
                    tag: w(0),
                    am: w(1),
                    stream: w(2),
                    shared_sum: w(3),
                    last_put: (w(4), w(5), w(6)),
                };
                match self.peers.get_mut(sender).and_then(Option::as_mut) {
                    Some(p) if p.fin.is_none() => p.fin = Some(fin),
                    _ => self
                        .fails
                        .push(format!("unexpected FIN from rank {sender}")),
                }
            }
            any
        }

        fn pull_kept_ams(&mut self) -> bool {
            let kept: Vec<_> = self.am.lock().unwrap().kept.drain(..).collect();
            let any = !kept.is_empty();
            for (desc, sender, seq, len) in kept {
                let mut buf = vec![0u8; len];
                match self.w.am_recv_data(desc, &mut buf) {
                    Err(s) => self.error(sender, "am_recv_data", s),
                    Ok(got) if got != len => self.fails.push(format!(
                        "AM {seq} from rank {sender}: pulled {got} bytes of {len}"
                    )),
                    Ok(_) => {
                        if let Some(i) = check_mem(&buf, seed_of(2, sender, self.me, seq), 0) {
                            self.fails.push(format!(
                                "AM {seq} from rank {sender} ({len} B, rendezvous): byte {i} differs"
                            ));
                        } else {
                            self.bump("op.am_rx", 1);
                            self.bump("bytes", len as u64);
                        }
                    }
                }
            }
            any
        }

        fn streams(&mut self) -> bool {
            let mut any = false;
            for i in 0..self.n {
                let Some(p) = self.peers[i].as_ref() else {
                    continue;
                };
                if p.dead {
                    continue;
                }
                let ep = p.ep;
                match self.w.stream_recv_data(ep) {
                    Ok(None) => {}
                    Ok(Some(d)) => {
                        any = true;
                        let me = self.me;
                        let p = self.peers[i].as_mut().unwrap();
                        let at = p.stream_got;
                        p.stream_got += d.len() as u64;
                        if let Some(k) = check_mem(&d, seed_of(3, i, me, 0), at) {
                            self.fails.push(format!(
                                "stream from rank {i}: byte {} differs",
                                at + k as u64
                            ));
                        } else {
                            self.bump("op.stream_rx", 1);
                            self.bump("bytes", d.len() as u64);
                        }
                    }
                    Err(s) => self.error(i, "stream_recv", s),
                }
            }
            any
        }
    }
}

// ======================================================================================
// The parent.
// ======================================================================================

mod parent {
    use super::*;

    struct Opts {
        time: f64,
        procs: usize,
        transport: String,
        loss: Option<f64>,
        kill: bool,
        seed: u64,
        max: usize,
    }

    fn usage() -> ! {
        eprintln!(
            "usage: rucx-soak [--time SECS] [--procs N] [--transport shm|tcp|udp] \
             [--netns-loss PCT] [--kill] [--seed S] [--max-size BYTES]"
        );
        std::process::exit(64);
    }

    fn opts() -> Opts {
        let mut o = Opts {
            time: 30.0,
            procs: 4,
            transport: "shm".into(),
            loss: None,
            kill: false,
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64),
            max: 4 << 20,
        };
        let mut a = std::env::args().skip(1);
        while let Some(k) = a.next() {
            let mut val = || a.next().unwrap_or_else(|| usage());
            match k.as_str() {
                "--time" => o.time = val().parse().unwrap_or_else(|_| usage()),
                "--procs" => o.procs = val().parse().unwrap_or_else(|_| usage()),
                "--transport" => o.transport = val(),
                "--netns-loss" => o.loss = Some(val().parse().unwrap_or_else(|_| usage())),
                "--kill" => o.kill = true,
                "--seed" => o.seed = val().parse().unwrap_or_else(|_| usage()),
                "--max-size" => o.max = val().parse().unwrap_or_else(|_| usage()),
                _ => usage(),
            }
        }
        if !["shm", "tcp", "udp"].contains(&o.transport.as_str())
            || !(2..=60).contains(&o.procs)
            || o.max == 0
            || o.max > 4 << 20
            || (o.loss.is_some() && o.transport == "shm")
        {
            usage();
        }
        o
    }

    struct Rank {
        child: Child,
        stdin: Option<ChildStdin>,
        pid: u32,
        hwm_kb: u64,
        ops: u64,
        last_progress: Instant,
        stats: BTreeMap<String, u64>,
        done: bool,
        killed_at: Option<f64>,
        exit: Option<ExitStatus>,
    }

    impl Rank {
        fn send(&mut self, s: &str) {
            if let Some(i) = self.stdin.as_mut() {
                let _ = writeln!(i, "{s}").and_then(|_| i.flush());
            }
        }
    }

    /// The ranks; killed and reaped when dropped, whatever way the parent leaves.
    struct Ranks(Vec<Rank>);

    impl Drop for Ranks {
        fn drop(&mut self) {
            for r in &mut self.0 {
                if r.exit.is_none() {
                    let _ = r.child.kill();
                    let _ = r.child.wait();
                }
            }
        }
    }

    pub fn run() -> i32 {
        let o = opts();
        // Before any thread or child exists: SIGINT, SIGTERM and SIGHUP are taken by a
        // thread that tells the run loop, which then cleans up as on any failure. The
        // children inherit the mask (Ctrl-C reaches the whole process group, and the
        // parent, not each child, decides what happens).
        let (tx, rx) = channel::<(usize, Option<String>)>();
        let set = block_signals();
        let stx = tx.clone();
        std::thread::spawn(move || {
            let sig = wait_signal(&set);
            let _ = stx.send((usize::MAX, Some(format!("signal {sig}"))));
        });
        let hosts = match o.loss {
            Some(loss) => match netns::Hosts::new(o.procs, loss) {
                Ok(h) => Some(h),
                Err(e) => {
                    eprintln!("soak: cannot make network namespaces: {e}");
                    return 1;
                }
            },
            None => None,
        };
        let mode = format!(
            "{}{}{}",
            o.transport,
            o.loss
                .map_or(String::new(), |l| format!(" netns loss {l}%")),
            if o.kill { " kill" } else { "" }
        );
        println!(
            "soak {mode}: {} processes, {} s, max size {}, seed {}",
            o.procs, o.time, o.max, o.seed
        );
        let res = soak(&o, hosts.as_ref(), tx, rx);
        let dropped = hosts
            .as_ref()
            .map(|h| format!("\n  packets dropped by the impairment: {}", h.dropped()))
            .unwrap_or_default();
        drop(hosts);
        match res {
            Ok(report) => {
                println!("{report}{dropped}");
                println!("soak {mode}: PASS");
                0
            }
            Err(e) => {
                println!("{e}{dropped}");
                println!("soak {mode}: FAIL");
                1
            }
        }
    }

    #[allow(unsafe_code)]
    fn block_signals() -> libc::sigset_t {
        // SAFETY: sigemptyset and sigaddset write only the local set, which is a plain
        // C struct for which all-zero bytes are a valid value; pthread_sigmask changes
        // this thread's mask (threads started later inherit it) and reads `set`.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            set
        }
    }

    #[allow(unsafe_code)]
    fn wait_signal(set: &libc::sigset_t) -> i32 {
        let mut sig = 0;
        // SAFETY: `set` is a valid, initialised signal set and `sig` a valid place for
        // the result; sigwait only reads the one and writes the other.
        unsafe { libc::sigwait(set, &mut sig) };
        sig
    }

    fn soak(
        o: &Opts,
        hosts: Option<&netns::Hosts>,
        tx: Sender<(usize, Option<String>)>,
        rx: Receiver<(usize, Option<String>)>,
    ) -> Result<String, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut ranks = Ranks(Vec::new());
        for i in 0..o.procs {
            let mut cmd = match hosts {
                Some(h) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", &h.names[i]]).arg(&exe);
                    c
                }
                None => Command::new(&exe),
            };
            cmd.env("RUCX_SOAK_RANK", i.to_string())
                .env("RUCX_SOAK_PROCS", o.procs.to_string())
                .env("RUCX_SOAK_TIME", o.time.to_string())
                .env("RUCX_SOAK_SEED", o.seed.to_string())
                .env("RUCX_SOAK_MAX", o.max.to_string())
                .env("UCX_TLS", &o.transport)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped());
            if o.transport == "udp" {
                // Retransmit soon on a path without delay; a peer that acknowledges
                // nothing for 10 s is gone (how a killed rank is noticed). A survivor
                // that owes the dead rank nothing unacknowledged but waits for its
                // answer (a get's reply, a rendezvous the dead rank had accepted) finds
                // the death through udp's probes of awaited peers; no keepalive is set,
                // so the soak runs udp's default there.
                for (k, v) in [
                    ("UCX_UDP_RTO", "10ms"),
                    ("UCX_UDP_RTO_MAX", "100ms"),
                    ("UCX_UDP_NAK_INTERVAL", "2ms"),
                    ("UCX_UDP_TIMEOUT", "10s"),
                ] {
                    if std::env::var_os(k).is_none() {
                        cmd.env(k, v);
                    }
                }
            }
            let mut child = cmd.spawn().map_err(|e| format!("spawn rank {i}: {e}"))?;
            let out = child.stdout.take().unwrap();
            let tx = tx.clone();
            std::thread::spawn(move || reader(i, out, tx));
            ranks.0.push(Rank {
                pid: child.id(),
                stdin: child.stdin.take(),
                child,
                hwm_kb: 0,
                ops: 0,
                last_progress: Instant::now(),
                stats: BTreeMap::new(),
                done: false,
                killed_at: None,
                exit: None,
            });
        }
        drop(tx);
        // Addresses.
        let mut entries = vec![String::new(); o.procs];
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while got < o.procs {
            let left = deadline.saturating_duration_since(Instant::now());
            let (i, l) = rx
                .recv_timeout(left)
                .map_err(|_| "ranks did not give their addresses within 60 s".to_string())?;
            if i == usize::MAX {
                return Err(format!("interrupted ({})", l.unwrap_or_default()));
            }
            let Some(l) = l else {
                let st = ranks.0[i].child.wait().ok();
                return Err(format!("rank {i} exited at start: {st:?}"));
            };
            if let Some(a) = l.strip_prefix("addr ") {
                let f: Vec<&str> = a.split(' ').collect();
                entries[i] = format!("{}:{}:{}", f[0], f[1], f[2]);
                got += 1;
            } else if l.starts_with("fail") {
                return Err(format!("rank {i}: {l}"));
            }
        }
        let list = format!("peers {}", entries.join(" "));
        for r in &mut ranks.0 {
            r.send(&list);
            r.last_progress = Instant::now();
        }
        let start = Instant::now();
        let mut rng = Rng::new(o.seed ^ 0x5eed);
        let kill_at = o
            .kill
            .then(|| o.time * (0.2 + 0.4 * rng.below(1000) as f64 / 1000.0));
        let victim = rng.below(o.procs as u64) as usize;
        let mut fails: Vec<String> = Vec::new();
        let mut sampled = Instant::now();
        let mut bye_sent = false;
        let hard_end = Duration::from_secs_f64(o.time) + Duration::from_secs(150);
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok((usize::MAX, l)) => {
                    fails.push(format!("interrupted ({})", l.unwrap_or_default()));
                }
                Ok((i, Some(l))) => {
                    let r = &mut ranks.0[i];
                    if let Some(ops) = l.strip_prefix("hb ") {
                        let ops: u64 = ops.parse().unwrap_or(0);
                        if ops != r.ops {
                            r.ops = ops;
                            r.last_progress = Instant::now();
                        }
                    } else if let Some(s) = l.strip_prefix("stats ") {
                        if std::env::var_os("RUCX_SOAK_VERBOSE").is_some() {
                            eprintln!("rank {i}: {s}");
                        }
                        for kv in s.split(' ') {
                            if let Some((k, v)) = kv.split_once('=') {
                                r.stats.insert(k.into(), v.parse().unwrap_or(0));
                            }
                        }
                    } else if l == "done" {
                        r.done = true;
                    } else if l.starts_with("fail") {
                        fails.push(l.clone());
                    }
                }
                Ok((i, None)) => {
                    // Its stdout closed: it exited (or is about to).
                    let r = &mut ranks.0[i];
                    if r.exit.is_none() {
                        r.exit = r.child.wait().ok();
                    }
                    if r.killed_at.is_none() && !bye_sent {
                        fails.push(format!("rank {i} exited before the end: {:?}", r.exit));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            let now = start.elapsed();
            if sampled.elapsed() >= Duration::from_millis(500) {
                sampled = Instant::now();
                for r in &mut ranks.0 {
                    if r.exit.is_none() {
                        r.hwm_kb = r.hwm_kb.max(vm_hwm_kb(r.pid).unwrap_or(0));
                    }
                }
            }
            if let Some(t) = kill_at {
                if now.as_secs_f64() >= t && ranks.0[victim].killed_at.is_none() {
                    let r = &mut ranks.0[victim];
                    r.hwm_kb = r.hwm_kb.max(vm_hwm_kb(r.pid).unwrap_or(0));
                    let _ = r.child.kill();
                    r.exit = r.child.wait().ok();
                    r.killed_at = Some(now.as_secs_f64());
                    println!(
                        "killed rank {victim} (pid {}) at {:.1} s",
                        r.pid,
                        now.as_secs_f64()
                    );
                    for (j, r) in ranks.0.iter_mut().enumerate() {
                        if j != victim {
                            r.send(&format!("dead {victim}"));
                        }
                    }
                }
            }
            for (i, r) in ranks.0.iter().enumerate() {
                if r.exit.is_none() && !r.done && r.last_progress.elapsed() > HANG {
                    fails.push(format!(
                        "rank {i} made no progress for {} s (hang)",
                        HANG.as_secs()
                    ));
                }
            }
            if now > hard_end {
                fails.push(format!("the run did not end {} s after its time", 150));
            }
            if !fails.is_empty() {
                break;
            }
            let survivors_done = ranks.0.iter().all(|r| r.done || r.killed_at.is_some());
            if survivors_done
                && !bye_sent
                && kill_at.map_or(true, |_| ranks.0[victim].killed_at.is_some())
            {
                bye_sent = true;
                for r in &mut ranks.0 {
                    r.send("bye");
                }
            }
            if bye_sent && ranks.0.iter().all(|r| r.exit.is_some()) {
                break;
            }
        }
        // Exit statuses of ranks that were not killed.
        for (i, r) in ranks.0.iter().enumerate() {
            if r.killed_at.is_none() {
                match r.exit {
                    Some(s) if s.success() => {}
                    s if fails.is_empty() => fails.push(format!("rank {i} ended with {s:?}")),
                    _ => {}
                }
            }
        }
        let killed = ranks.0.iter().position(|r| r.killed_at.is_some());
        let report = summary(&ranks.0, killed, &mut fails, start.elapsed());
        if fails.is_empty() {
            Ok(report)
        } else {
            Err(format!("{report}\nFAILURES:\n  {}", fails.join("\n  ")))
        }
    }

    fn reader(i: usize, out: std::process::ChildStdout, tx: Sender<(usize, Option<String>)>) {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(m) = l.strip_prefix("@@ ") {
                if tx.send((i, Some(m.to_string()))).is_err() {
                    return;
                }
            }
        }
        let _ = tx.send((i, None));
    }

    fn summary(
        ranks: &[Rank],
        killed: Option<usize>,
        fails: &mut Vec<String>,
        took: Duration,
    ) -> String {
        let mut total: BTreeMap<String, u64> = BTreeMap::new();
        let mut errors: BTreeMap<String, u64> = BTreeMap::new();
        for (i, r) in ranks.iter().enumerate() {
            for (k, v) in &r.stats {
                if let Some(e) = k.strip_prefix("err.") {
                    // err.<peer>.<what>.<status>
                    let mut f = e.splitn(3, '.');
                    let peer: Option<usize> = f.next().and_then(|p| p.parse().ok());
                    let rest = format!("{}.{}", f.next().unwrap_or(""), f.next().unwrap_or(""));
                    let expected = peer.is_some() && peer == killed;
                    if !expected {
                        fails.push(format!(
                            "rank {i}: unexpected error {rest} on the endpoint to rank {peer:?} ({v} times)"
                        ));
                    }
                    let key = format!(
                        "{rest} ({})",
                        if expected {
                            "to the killed rank"
                        } else {
                            "UNEXPECTED"
                        }
                    );
                    *errors.entry(key).or_default() += v;
                } else if k != "hwm_kb" {
                    *total.entry(k.clone()).or_default() += v;
                }
            }
        }
        let g = |k: &str| total.get(k).copied().unwrap_or(0);
        let mut s = format!(
            "  {:.1} s; operations: {} in all (the per-kind counts are of the final reports) — tag {} sent / {} received, AM {} / {}, \
             stream {} sends / {} receives, put {}, get {}, atomics {}\n  bytes verified: {} ({:.1} MiB)",
            took.as_secs_f64(),
            // Ranks without a final report (killed, or the run failed) count with their
            // last heartbeat.
            ranks
                .iter()
                .map(|r| r
                    .stats
                    .iter()
                    .filter(|(k, _)| k.starts_with("op."))
                    .map(|(_, v)| v)
                    .sum::<u64>()
                    .max(r.ops))
                .sum::<u64>(),
            g("op.tag_tx"),
            g("op.tag_rx"),
            g("op.am_tx"),
            g("op.am_rx"),
            g("op.stream_tx"),
            g("op.stream_rx"),
            g("op.put"),
            g("op.get"),
            g("op.amo"),
            g("bytes"),
            g("bytes") as f64 / (1 << 20) as f64
        );
        s += &format!(
            "\n  final checks: {} shared counters (when nobody died), {} last puts found in place",
            g("checked_shared_counter"),
            g("checked_last_put")
        );
        if errors.is_empty() {
            s += "\n  errors: none";
        } else {
            for (k, v) in &errors {
                s += &format!("\n  errors: {k}: {v}");
            }
        }
        if let Some(k) = killed {
            let detected = ranks
                .iter()
                .enumerate()
                .filter(|(i, r)| {
                    *i != k && r.stats.keys().any(|x| x.starts_with(&format!("err.{k}.")))
                })
                .count();
            s += &format!(
                "\n  rank {k} killed at {:.1} s; {detected} of {} survivors saw errors on their endpoint to it; \
                 detection time summed {} ms; closed undetected {}",
                ranks[k].killed_at.unwrap_or(0.0),
                ranks.len() - 1,
                g("detect_ms"),
                g("closed_killed_undetected")
            );
        }
        for (i, r) in ranks.iter().enumerate() {
            let hwm = r.stats.get("hwm_kb").copied().unwrap_or(0).max(r.hwm_kb);
            s += &format!(
                "\n  rank {i}: pid {} VmHWM {:.1} MiB, {}",
                r.pid,
                hwm as f64 / 1024.0,
                match (r.killed_at, r.exit) {
                    (Some(_), _) => "killed".to_string(),
                    (None, Some(e)) => format!("{e}"),
                    (None, None) => "running (killed by the parent)".to_string(),
                }
            );
        }
        s
    }
}

// ======================================================================================
// Network namespaces.
// ======================================================================================

mod netns {
    use super::*;

    fn ip(args: &[&str]) -> Result<(), String> {
        let st = Command::new("ip")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("ip: {e}"))?;
        if st.success() {
            Ok(())
        } else {
            Err(format!("ip {}: {st}", args.join(" ")))
        }
    }

    /// One namespace per rank, joined by a bridge in a namespace of its own; each rank's
    /// device loses `loss`% of what it sends. Removed when dropped.
    pub struct Hosts {
        pub names: Vec<String>,
        switch: String,
    }

    impl Hosts {
        pub fn new(n: usize, loss: f64) -> Result<Hosts, String> {
            if !rustix::process::geteuid().is_root() {
                return Err("network namespaces need root".into());
            }
            let tag = std::process::id();
            let switch = format!("rucx-soak-sw-{tag}");
            let mut h = Hosts {
                names: Vec::new(),
                switch: switch.clone(),
            };
            ip(&["netns", "add", &switch])?;
            ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"])?;
            ip(&["-n", &switch, "link", "set", "br0", "up"])?;
            for i in 0..n {
                let ns = format!("rucx-soak-{i}-{tag}");
                ip(&["netns", "add", &ns])?;
                h.names.push(ns.clone());
                let (dev, peer) = (format!("sk{i}"), format!("sw{i}"));
                ip(&[
                    "link", "add", &dev, "netns", &ns, "type", "veth", "peer", "name", &peer,
                    "netns", &switch,
                ])?;
                ip(&["-n", &switch, "link", "set", &peer, "master", "br0", "up"])?;
                // TEST-NET-2 (RFC 5737): these addresses exist only in the namespaces.
                ip(&[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("198.51.100.{}/24", i + 1),
                    "dev",
                    &dev,
                ])?;
                ip(&["-n", &ns, "link", "set", &dev, "up"])?;
                ip(&["-n", &ns, "link", "set", "lo", "up"])?;
                if loss > 0.0 {
                    impair(&ns, &dev, loss)?;
                }
            }
            Ok(h)
        }
    }

    /// Makes `dev` in `ns` lose `loss`% of the packets it sends: `tc netem` where the
    /// kernel has it, else (a kernel without `CONFIG_NET_SCH_NETEM`) an htb root whose
    /// classic-BPF filter draws a random number per packet and sends `loss`% to a class
    /// whose pfifo holds nothing (the fallback of crates/ucp/tests/common's `Hosts`).
    fn impair(ns: &str, dev: &str, loss: f64) -> Result<&'static str, String> {
        let tc = |args: &[&str]| -> Result<(), String> {
            let mut a = vec!["netns", "exec", ns, "tc"];
            a.extend_from_slice(args);
            ip(&a)
        };
        let l = format!("{loss}%");
        if tc(&["qdisc", "add", "dev", dev, "root", "netem", "loss", &l]).is_ok() {
            return Ok("netem");
        }
        let t_loss = ((loss / 100.0) * 4_294_967_296.0).min(4_294_967_295.0) as u64;
        // A = random u32 (ancillary load SKF_AD_RANDOM); below t_loss: class 1:3 (drop),
        // else 1:1.
        let classify = format!("4,32 0 0 4294963256,53 1 0 {t_loss},6 0 0 65539,6 0 0 65537");
        tc(&[
            "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1",
        ])?;
        tc(&[
            "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit",
        ])?;
        tc(&[
            "class", "add", "dev", dev, "parent", "1:", "classid", "1:3", "htb", "rate", "1mbit",
        ])?;
        tc(&[
            "qdisc", "add", "dev", dev, "parent", "1:3", "handle", "30:", "pfifo", "limit", "0",
        ])?;
        tc(&[
            "filter", "add", "dev", dev, "parent", "1:", "prio", "1", "bpf", "bytecode", &classify,
        ])?;
        Ok("htb+bpf")
    }

    impl Hosts {
        /// Packets the impairment dropped, summed over the ranks' devices (per device
        /// the largest `dropped` count of its qdiscs, from `tc -s qdisc show`).
        pub fn dropped(&self) -> u64 {
            let mut sum = 0;
            for (i, ns) in self.names.iter().enumerate() {
                let out = Command::new("ip")
                    .args(["netns", "exec", ns, "tc", "-s", "qdisc", "show", "dev"])
                    .arg(format!("sk{i}"))
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                sum += out
                    .split("dropped ")
                    .skip(1)
                    .filter_map(|t| t.split([',', ' ', ')']).next()?.parse::<u64>().ok())
                    .max()
                    .unwrap_or(0);
            }
            sum
        }
    }

    impl Drop for Hosts {
        fn drop(&mut self) {
            for n in &self.names {
                let _ = ip(&["netns", "del", n]);
            }
            let _ = ip(&["netns", "del", &self.switch]);
        }
    }
}
