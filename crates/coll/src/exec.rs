//! The executor: runs one rank's [`Schedule`] over ucp's tag API, step by step, driven by
//! progress. The only module of the crate with `unsafe` code.
//!
//! Why `unsafe` is needed: a collective runs on the application's memory (a borrowed
//! slice, or raw memory from the C API), keeps sends and receives on it in flight across
//! calls, and reduces into it between them; so it hands ucp [`ucp::Buf::contig`]s of that
//! memory (whose memory must stay valid until the request completes), maps it for peers
//! (`mem_map`), and builds slices of it from raw parts. Messages of its own (key messages,
//! the abort notice and its receive) are owned by their requests and need none of this.
//! The rules that make the rest sound, kept here and nowhere else:
//! - every buffer a task addresses is a [`Buffer`] (owned by the task, borrowed for the
//!   task's lifetime, or raw with the caller's promise) or the task's own scratch `Vec`,
//!   whose heap memory does not move while the task lives;
//! - a task never finishes, fails or is dropped with a request in flight: it waits for
//!   completion or aborts the request first (after `abort_for_good` ucp touches the
//!   memory no more: it waits out a receive the peer still writes into);
//! - local copies and reductions build slices only between calls into ucp, which accesses
//!   the memory only inside those calls (the worker is single-threaded), and only on
//!   regions whose transfers of the current step have completed;
//! - `Src` is never written (the schedule validator refuses such schedules).
//!
//! Tags: see [`tag`]. Every message of a collective is named by (team, sequence number,
//! step, sender); an extra wildcard receive per collective catches an abort notice from
//! any member.

use crate::dtype::{DataType, Op};
use crate::schedule::{BufId, Bufs, Comm, Region, Schedule};
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::sync::Arc;
use ucp::{Buf, Ep, MemH, RemoteKey, Request, Worker};
use ucs::{Result, Status};

/// The tag layout of collective traffic (bits, high to low):
///
/// ```text
///  63..60  59........40  39....28  27....16  15.......0
///  0b1101  team id (20)  seq (12)  step (12) sender (16)
/// ```
///
/// User traffic must not use tags whose top four bits are `0b1101` (with a mask covering
/// them); step `0xfff` is the abort notice.
pub mod tag {
    /// The reserved value of the top four bits.
    pub const MARK: u64 = 0xd << 60;
    /// Mask of the reserved bits.
    pub const MARK_MASK: u64 = 0xf << 60;
    /// Team ids are this many bits.
    pub const TEAM_BITS: u32 = 20;
    /// Steps per collective at most (the last value is the abort notice).
    pub const MAX_STEPS: usize = 0xfff;
    /// Largest team.
    pub const MAX_RANKS: usize = 1 << 16;
    pub const ABORT_STEP: u64 = 0xfff;

    /// The tag of the message from `src` in `step` of collective `seq` of `team`.
    pub const fn make(team: u32, seq: u32, step: u64, src: usize) -> u64 {
        MARK | ((team as u64 & 0xf_ffff) << 40)
            | ((seq as u64 & 0xfff) << 28)
            | ((step & 0xfff) << 16)
            | (src as u64 & 0xffff)
    }
}

enum Kind<'a> {
    Owned(Vec<u8>),
    Shared(PhantomData<&'a [u8]>),
    Borrowed(PhantomData<&'a mut [u8]>),
    Raw,
}

/// Memory of a collective: an owned vector, a borrowed slice, or raw memory.
pub struct Buffer<'a> {
    ptr: *mut u8,
    len: usize,
    writable: bool,
    kind: Kind<'a>,
}

impl std::fmt::Debug for Buffer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = match self.kind {
            Kind::Owned(_) => "owned",
            Kind::Shared(_) => "shared",
            Kind::Borrowed(_) => "borrowed",
            Kind::Raw => "raw",
        };
        write!(f, "Buffer({k}, {} bytes)", self.len)
    }
}

// SAFETY: a Buffer is an owned Vec, a borrow (whose referent is Send/Sync as [u8] is), or
// raw memory that the creator promised stays valid and unaliased for the buffer's use,
// from whatever thread completes the collective.
unsafe impl Send for Buffer<'_> {}

impl Buffer<'static> {
    /// Owned memory (given back by [`Buffer::into_vec`]).
    pub fn from_vec(mut v: Vec<u8>) -> Buffer<'static> {
        Buffer {
            ptr: v.as_mut_ptr(),
            len: v.len(),
            writable: true,
            kind: Kind::Owned(v),
        }
    }

    /// Raw memory (for C callers).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads (and for writes if used as a destination)
    /// until the collective using the buffer is finalized, and not be accessed otherwise
    /// meanwhile (except for reading a source); source and destination must not overlap.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Buffer<'static> {
        Buffer {
            ptr,
            len,
            writable: true,
            kind: Kind::Raw,
        }
    }
}

impl<'a> Buffer<'a> {
    /// A read-only borrowed source.
    pub fn from_slice(s: &'a [u8]) -> Buffer<'a> {
        Buffer {
            ptr: s.as_ptr().cast_mut(),
            len: s.len(),
            writable: false,
            kind: Kind::Shared(PhantomData),
        }
    }

    /// A borrowed destination (or source).
    pub fn from_mut(s: &'a mut [u8]) -> Buffer<'a> {
        Buffer {
            ptr: s.as_mut_ptr(),
            len: s.len(),
            writable: true,
            kind: Kind::Borrowed(PhantomData),
        }
    }

    /// Bytes of the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// False for a read-only source.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// The address (as given, or of the owned vector).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The owned vector back (`None` for borrowed or raw memory).
    pub fn into_vec(self) -> Option<Vec<u8>> {
        match self.kind {
            Kind::Owned(v) => Some(v),
            _ => None,
        }
    }

    /// The contents (a copy), for any kind of buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        if self.len == 0 {
            return Vec::new();
        }
        // SAFETY: every constructor guarantees ptr..ptr+len readable while the buffer
        // lives; no collective writes it during this call (we hold &self, and a running
        // collective owns its buffers).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }.to_vec()
    }
}

/// Registrations of destination buffers and the remote keys of peers' buffers, for the
/// zero-copy RMA algorithms. A buffer is registered once per (address, length) and gets
/// an id; a peer is sent the packed key the first time it sees that id, afterwards only
/// the id and address, and keeps the unpacked key per (endpoint, id).
#[derive(Default)]
pub(crate) struct KeyCache {
    mems: Vec<Registration>,
    next_id: u64,
    remote: HashMap<(Ep, u64), RemoteKey>,
    sent: HashSet<(Ep, u64)>,
}

/// A registered destination: (address, length), id, handle, packed key.
type Registration = ((usize, usize), u64, MemH, Vec<u8>);

/// Registrations kept at most (the oldest goes first; its id is never reused).
const MAX_MEMS: usize = 64;

/// Bytes of a key message at most (id, address, packed key).
const KEY_MSG: usize = 4096;

/// Marks a receive of a key message in `Task::inflight`.
const KEY_RECV: usize = usize::MAX - 1;

impl KeyCache {
    /// The id and packed key of the registration of `ptr..ptr+len`.
    fn local(&mut self, w: &Worker, ptr: *mut u8, len: usize) -> Result<(u64, Vec<u8>)> {
        let k = (ptr as usize, len);
        if let Some(i) = self.mems.iter().position(|m| m.0 == k) {
            let m = self.mems.remove(i);
            let out = (m.1, m.3.clone());
            self.mems.push(m);
            return Ok(out);
        }
        // SAFETY: `ptr..ptr+len` is the destination of the collective being run (valid
        // for its whole run by the caller's contract of `Buffer`); peers write it only
        // inside a collective that names this buffer again, after the synchronisation
        // step, so a cached registration of memory the application reused is written
        // only when that memory is again a live destination.
        let mh = unsafe { w.context().mem_map(Some(ptr), len) }?;
        let packed = mh.rkey_pack();
        if packed.len() + 16 > KEY_MSG {
            return Err(Status::Unsupported);
        }
        self.next_id += 1;
        if self.mems.len() >= MAX_MEMS {
            self.mems.remove(0);
        }
        self.mems.push((k, self.next_id, mh, packed.clone()));
        Ok((self.next_id, packed))
    }
}

/// A schedule running at one rank.
pub(crate) struct Task {
    sched: Arc<Schedule>,
    dt: DataType,
    op: Op,
    src: (*mut u8, usize),
    dst: (*mut u8, usize),
    tmp: Vec<u8>,
    tmp_ptr: *mut u8,
    step: usize,
    posted: bool,
    inflight: Vec<(Request, usize, usize)>,
    team: u32,
    seq: u32,
    me: usize,
    eps: Arc<[Option<Ep>]>,
    abort: Option<Request>,
    /// The segment path: the collective runs as rounds over the team's segment instead
    /// of the (empty) schedule.
    shm: Option<crate::shm::run::Run>,
    /// The hierarchical form: phases over the group's segment and the leaders' network.
    hier: Option<Box<crate::shm::hier::Hier>>,
    /// Leader index of each team rank's group (hierarchical form).
    group_of: Option<Arc<[usize]>>,
    /// Zero-copy RMA: each peer's (address, key id). (Key messages, in and out, are
    /// owned by their requests.)
    remote: Vec<Option<(u64, u64)>>,
    /// (endpoint, key id) pairs whose key this task sent for the first time.
    announced: Vec<(Ep, u64)>,
    /// The task was seen blocked on a member that is gone.
    pub(crate) lost_seen: bool,
}

// SAFETY: the raw pointers are into buffers the owning request keeps alive (see the
// module documentation); the task moves between threads only with its request.
unsafe impl Send for Task {}

/// What a task needs to start.
pub(crate) struct TaskSpec<'s> {
    pub sched: Arc<Schedule>,
    pub dt: DataType,
    pub op: Op,
    pub src: Option<&'s Buffer<'s>>,
    pub dst: Option<&'s Buffer<'s>>,
    pub team: u32,
    pub seq: u32,
    pub me: usize,
    pub eps: Arc<[Option<Ep>]>,
    pub shm: Option<crate::shm::run::Job>,
    pub hier: Option<(crate::shm::hier::HierJob, Arc<[usize]>)>,
}

fn raw(b: Option<&Buffer<'_>>) -> (*mut u8, usize) {
    b.map_or((std::ptr::NonNull::dangling().as_ptr(), 0), |b| {
        (b.ptr, b.len)
    })
}

impl Task {
    pub(crate) fn new(s: TaskSpec<'_>) -> Task {
        let mut tmp = vec![0u8; s.sched.tmp_len];
        let tmp_ptr = tmp.as_mut_ptr();
        Task {
            dt: s.dt,
            op: s.op,
            src: raw(s.src),
            dst: raw(s.dst),
            tmp,
            tmp_ptr,
            step: 0,
            posted: false,
            inflight: Vec::new(),
            team: s.team,
            seq: s.seq,
            me: s.me,
            eps: s.eps,
            abort: None,
            shm: s.shm.map(|job| {
                crate::shm::run::Run::new(crate::shm::run::RunSpec {
                    job,
                    dt: s.dt,
                    op: s.op,
                    src: raw(s.src).0,
                    dst: raw(s.dst).0,
                })
            }),
            group_of: s.hier.as_ref().map(|h| h.1.clone()),
            hier: s.hier.map(|(job, _)| {
                Box::new(crate::shm::hier::Hier::new(
                    job,
                    s.dt,
                    s.op,
                    raw(s.src),
                    raw(s.dst),
                    s.seq,
                ))
            }),
            remote: Vec::new(),
            announced: Vec::new(),
            lost_seen: false,
            sched: s.sched,
        }
    }

    /// Makes a completed task of the segment path ready to be started again as
    /// collective `seq` of its team, on the same buffers (a persistent request's repost).
    pub(crate) fn restart(&mut self, seq: u32) {
        debug_assert!(self.reusable());
        self.seq = seq;
        self.step = 0;
        self.posted = false;
        self.lost_seen = false;
    }

    /// Whether [`Task::restart`] applies: the whole collective runs on the segment, which
    /// keeps no state in the task between posts but the run's geometry.
    pub(crate) fn reusable(&self) -> bool {
        self.shm.is_some() && self.abort.is_none() && self.inflight.is_empty()
    }

    fn bufs(&mut self) -> Bufs<'_> {
        let mk = |(p, l): (*mut u8, usize)| -> &mut [u8] {
            if l == 0 {
                &mut []
            } else {
                // SAFETY: see the module documentation: valid, not accessed by ucp while
                // this slice lives, and distinct from the other two buffers.
                unsafe { std::slice::from_raw_parts_mut(p, l) }
            }
        };
        let src: &[u8] = if self.src.1 == 0 {
            &[]
        } else {
            // SAFETY: as above; the source is only read.
            unsafe { std::slice::from_raw_parts(self.src.0, self.src.1) }
        };
        Bufs {
            src,
            dst: mk(self.dst),
            tmp: mk((self.tmp_ptr, self.tmp.len())),
        }
    }

    /// Region `r` of this task's buffers, as ucp takes it.
    fn region_buf(&self, r: &Region) -> Buf {
        let base = match r.buf {
            BufId::Src => self.src.0,
            BufId::Dst => self.dst.0,
            BufId::Tmp => self.tmp_ptr,
        };
        // SAFETY: the region lies in a buffer of this task (the schedule was validated
        // against the buffers' lengths), which waits for or aborts the request before
        // the memory goes or is reused (the module documentation's rules).
        unsafe { Buf::contig(base.wrapping_add(r.off), r.len) }
    }

    /// The sequence number of this collective in its team.
    pub(crate) fn seq(&self) -> u32 {
        self.seq
    }

    /// The index of the step running now (for the segment path, a mark that grows with
    /// each half-round).
    pub(crate) fn step_index(&self) -> usize {
        match (&self.shm, &self.hier) {
            (Some(run), _) => run.progress_mark(),
            (_, Some(h)) => h.progress_mark(),
            _ => self.step,
        }
    }

    /// The segment run, if the collective takes the shared-memory path.
    pub(crate) fn shm(&self) -> Option<&crate::shm::run::Run> {
        self.shm
            .as_ref()
            .or_else(|| self.hier.as_ref().and_then(|h| h.shm()))
    }

    /// True when the whole collective runs on the segment (no network phase).
    pub(crate) fn flat_shm(&self) -> bool {
        self.shm.is_some()
    }

    /// Advances the segment path alone (no network progress): for tight waits.
    pub(crate) fn shm_advance(&mut self) -> Result<bool> {
        match self.shm.as_mut() {
            Some(run) => run.advance(),
            None => Ok(false),
        }
    }

    /// True when the running step waits for a transfer with `rank`. (Later steps do not
    /// count: the messages of a member that finished and left may already be here,
    /// unexpected, and match when their receive is posted.)
    pub(crate) fn blocked_on(&self, w: &Worker, rank: usize) -> bool {
        if let Some(run) = &self.shm {
            return run
                .waiting()
                .is_some_and(|(j, _)| run.team().ranks.get(j) == Some(&rank));
        }
        if let Some(h) = &self.hier {
            let g = self.group_of.clone();
            return h.blocked_on(w, rank, |r| g.as_ref()?.get(r).copied());
        }
        self.posted
            && self
                .inflight
                .iter()
                .any(|&(r, _, p)| p == rank && !matches!(w.request_test(r), Ok(Some(_))))
    }

    /// Posts the abort-notice receive, then runs as far as possible. `Ok(true)`: done.
    pub(crate) fn start(&mut self, w: &mut Worker, keys: &mut KeyCache) -> Result<bool> {
        if let Some(run) = self.shm.as_mut() {
            // Aborts travel through the segment's abort word.
            run.start();
            return self.advance(w, keys);
        }
        if let Some(h) = self.hier.as_mut() {
            return h.start(w, keys);
        }
        let t = tag::make(self.team, self.seq, tag::ABORT_STEP, 0);
        // Owned by the request: only its completion matters.
        self.abort = Some(w.tag_recv_nb(Buf::from(vec![0u8; 8]), t, !0xffff, None)?);
        self.advance(w, keys)
    }

    /// True when a member told us it gave this collective up.
    pub(crate) fn aborted_remotely(&self, w: &Worker) -> bool {
        if let Some(run) = &self.shm {
            return run.team().seg.aborted();
        }
        if let Some(h) = &self.hier {
            return h.aborted_remotely(w);
        }
        self.abort
            .is_some_and(|r| matches!(w.request_test(r), Ok(Some(Status::Ok))))
    }

    /// Runs completed steps and posts the next; `Ok(true)` when the schedule finished.
    pub(crate) fn advance(&mut self, w: &mut Worker, keys: &mut KeyCache) -> Result<bool> {
        if let Some(run) = self.shm.as_mut() {
            return run.advance();
        }
        if let Some(h) = self.hier.as_mut() {
            return h.advance(w, keys);
        }
        loop {
            if self.posted {
                for &(r, want, _) in &self.inflight {
                    match w.request_test(r)? {
                        None => return Ok(false),
                        Some(Status::Ok) => {
                            if want < KEY_RECV && w.request_info(r)?.length != want {
                                tracing::error!("coll: a message has the wrong length");
                                return Err(Status::MessageTruncated);
                            }
                        }
                        Some(s) => return Err(s),
                    }
                }
                let got: Vec<(Request, usize)> = self
                    .inflight
                    .iter()
                    .filter(|x| x.1 == KEY_RECV)
                    .map(|x| (x.0, x.2))
                    .collect();
                for (r, peer) in got {
                    // The request owns the message: taking it frees the request.
                    self.inflight.retain(|x| x.0 != r);
                    let m = w.request_take_owned(r)?.ok_or(Status::InvalidParam)?;
                    self.take_key(w, keys, peer, &m.buf, m.info.length)?;
                }
                for (r, _, _) in self.inflight.drain(..) {
                    w.request_free(r)?;
                }
                let (sched, dt, op, i) = (self.sched.clone(), self.dt, self.op, self.step);
                let mut b = self.bufs();
                for l in &sched.steps[i].after {
                    b.apply(l, dt, op)?;
                }
                self.step += 1;
                self.posted = false;
            }
            if self.step == self.sched.steps.len() {
                self.finish(w);
                return Ok(true);
            }
            let (sched, dt, op) = (self.sched.clone(), self.dt, self.op);
            let step = &sched.steps[self.step];
            let mut b = self.bufs();
            for l in &step.before {
                b.apply(l, dt, op)?;
            }
            self.posted = true;
            // Receives first, so that data finds its buffer.
            let recv_first = |c: &&Comm| matches!(c, Comm::Recv { .. } | Comm::RecvKey { .. });
            for c in step.comms.iter().filter(recv_first) {
                self.post(w, keys, c)?;
            }
            for c in step.comms.iter().filter(|c| !recv_first(c)) {
                self.post(w, keys, c)?;
            }
        }
    }

    /// Takes the key message `m` of `peer` (`n` bytes): its destination address, key id
    /// and, the first time, the packed key.
    fn take_key(
        &mut self,
        w: &mut Worker,
        keys: &mut KeyCache,
        peer: usize,
        m: &[u8],
        n: usize,
    ) -> Result<()> {
        if n < 16 || n > m.len() {
            return Err(Status::InvalidParam);
        }
        let id = u64::from_le_bytes(m[..8].try_into().map_err(|_| Status::InvalidParam)?);
        let addr = u64::from_le_bytes(m[8..16].try_into().map_err(|_| Status::InvalidParam)?);
        let ep = self.eps[peer].ok_or(Status::InvalidParam)?;
        if n > 16 {
            let rk = w.rkey_unpack(ep, &m[16..n])?;
            keys.remote.insert((ep, id), rk);
        }
        if self.remote.len() < self.eps.len() {
            self.remote.resize(self.eps.len(), None);
        }
        self.remote[peer] = Some((addr, id));
        Ok(())
    }

    fn post(&mut self, w: &mut Worker, keys: &mut KeyCache, c: &Comm) -> Result<()> {
        let st = self.step as u64;
        match *c {
            Comm::SendKey { peer } => {
                let ep = self.eps[peer].ok_or(Status::InvalidParam)?;
                let (id, packed) = if self.dst.1 == 0 {
                    (0, Vec::new())
                } else {
                    keys.local(w, self.dst.0, self.dst.1)?
                };
                let mut m = Vec::with_capacity(16 + packed.len());
                m.extend_from_slice(&id.to_le_bytes());
                m.extend_from_slice(&(self.dst.0 as u64).to_le_bytes());
                if id != 0 && keys.sent.insert((ep, id)) {
                    m.extend_from_slice(&packed);
                    self.announced.push((ep, id));
                }
                let t = tag::make(self.team, self.seq, st, self.me);
                if let Some(r) = w.tag_send_nb(ep, Buf::from(m), t, false, None)? {
                    self.inflight.push((r, usize::MAX, peer));
                }
            }
            Comm::RecvKey { peer } => {
                let t = tag::make(self.team, self.seq, st, peer);
                let r = w.tag_recv_nb(Buf::from(vec![0; KEY_MSG]), t, u64::MAX, None)?;
                self.inflight.push((r, KEY_RECV, peer));
            }
            Comm::Put {
                peer,
                from,
                remote_off,
            } => {
                if from.len == 0 {
                    return Ok(());
                }
                let ep = self.eps[peer].ok_or(Status::InvalidParam)?;
                let (addr, id) = self
                    .remote
                    .get(peer)
                    .copied()
                    .flatten()
                    .ok_or(Status::InvalidParam)?;
                let rk = keys.remote.get(&(ep, id)).ok_or(Status::InvalidParam)?;
                let data = self.bufs();
                let data = data.read(from);
                w.put_nbi(ep, data, addr + remote_off as u64, rk)?;
                if let Some(r) = w.ep_flush_nb(ep, None)? {
                    self.inflight.push((r, usize::MAX, peer));
                }
            }
            Comm::Recv { peer, into } => {
                let t = tag::make(self.team, self.seq, st, peer);
                let r = w.tag_recv_nb(self.region_buf(&into), t, u64::MAX, None)?;
                self.inflight.push((r, into.len, peer));
            }
            Comm::Send { peer, from } => {
                let ep = self.eps[peer].ok_or(Status::InvalidParam)?;
                let t = tag::make(self.team, self.seq, st, self.me);
                // The region is not written during this step.
                if let Some(r) = w.tag_send_nb(ep, self.region_buf(&from), t, false, None)? {
                    self.inflight.push((r, usize::MAX, peer));
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self, w: &mut Worker) {
        if let Some(r) = self.abort.take() {
            let _ = w.abort_for_good(r);
            let _ = w.request_free(r);
        }
    }

    /// Stops the task: every request in flight is aborted, so ucp touches its memory no
    /// more.
    ///
    /// Keys this task announced are forgotten as announced: the peer may not have got
    /// them, and must be sent them again next time.
    pub(crate) fn cancel(&mut self, w: &mut Worker, keys: &mut KeyCache) {
        if let Some(h) = self.hier.as_mut() {
            h.cancel(w, keys);
        }
        for a in self.announced.drain(..) {
            keys.sent.remove(&a);
        }
        for (r, _, _) in self.inflight.drain(..) {
            let _ = w.abort_for_good(r);
            let _ = w.request_free(r);
        }
        self.finish(w);
        self.step = self.sched.steps.len();
        self.posted = false;
    }

    /// Tells every other member that this collective failed here (best effort: the
    /// notices are not tracked).
    pub(crate) fn notify_abort(&self, w: &mut Worker, dead: impl Fn(Ep) -> bool) {
        if let Some(run) = &self.shm {
            run.team().seg.set_abort();
            return;
        }
        if let Some(h) = &self.hier {
            return h.notify_abort(w, dead);
        }
        send_abort(w, self.team, self.seq, self.me, &self.eps, dead);
    }
}

/// Sends the abort notice of collective `seq` of `team` from member `me` to every live
/// endpoint of `eps` (best effort: the notices are not tracked).
pub(crate) fn send_abort(
    w: &mut Worker,
    team: u32,
    seq: u32,
    me: usize,
    eps: &[Option<Ep>],
    dead: impl Fn(Ep) -> bool,
) {
    let t = tag::make(team, seq, tag::ABORT_STEP, me);
    for ep in eps.iter().flatten().filter(|&&e| !dead(e)) {
        // One byte, owned by the request (freed with it).
        if let Ok(Some(r)) = w.tag_send_nb(*ep, Buf::from(vec![0u8]), t, false, None) {
            let _ = w.request_free(r);
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // A task is canceled or finished by its owner before it goes (it needs the
        // worker for that); reaching here with requests in flight is a bug of this crate.
        debug_assert!(
            self.inflight.is_empty(),
            "collective task dropped in flight"
        );
    }
}
