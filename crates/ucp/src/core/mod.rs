//! The core of a worker: its request pool, its endpoint table, the transports it opened,
//! and the completion lists. It knows no protocol: the protocol modules keep their own
//! state and use the core through the functions here.
//!
//! Invariants: a request completes once (`complete` ignores a second completion); a
//! request with a callback, or released by its owner, is listed in `completed` exactly
//! once, when it completes, except that one reporting into a completion queue pushes its
//! entry and is freed right then (`settle`); an endpoint's `by_uuid` entry names the endpoint that answers
//! for that peer.

// The one module of the core that touches the memory of a request's buffer.
#[allow(unsafe_code)]
pub mod buf;
pub mod cq;
pub mod ep;
pub mod ids;
pub mod lane;
pub mod request;

use crate::address::WorkerAddress;
use crate::context::Context;
use ep::{Ep, EpState, EpStatus, Lane, Queued, Thresholds};
use request::*;
use std::collections::{HashMap, VecDeque};
use ucs::{Pool, Result, Status};
use uct::{Iface, Md, Transport};

/// A transport interface of the worker.
pub(crate) struct Tl {
    pub transport: Transport,
    pub iface: Iface,
    pub md: std::sync::Arc<Md>,
    /// The thresholds of every lane on this interface.
    pub th: Thresholds,
    /// Progress this interface (it has endpoints, or peers may send to it).
    pub live: bool,
}

/// Active-message id of the wireup message (a core message: it creates endpoints).
pub(crate) const AM_WIREUP: u8 = 8;
/// Bytes of the wireup message in front of the sender's address.
pub const WIREUP_LEN: usize = 8;

pub(crate) struct Core {
    pub ctx: Context,
    pub uuid: u64,
    pub cfg: crate::config::Config,
    pub eps: Vec<Option<EpState>>,
    /// Generation of each endpoint slot: bumped when the slot is freed.
    pub ep_gens: Vec<u32>,
    /// The endpoint answering for each peer worker (a seeded one-multiply hash: the
    /// ids are random, and a lookup is on every control message's path).
    pub by_uuid: HashMap<u64, u32, crate::matcher::KeyHash>,
    /// This worker's encoded address (sent in wireup messages).
    pub my_address: Vec<u8>,
    pub reqs: Pool<Req>,
    /// Endpoints with a non-empty queue.
    pub active: VecDeque<u32>,
    pub completed: Vec<Request>,
    /// An empty list with capacity, swapped with `completed` when callbacks run.
    pub completed_spare: Vec<Request>,
    /// Completions reported by word, waiting for `Worker::drain_completed`.
    pub words: Vec<Completed>,
    /// Endpoints that failed since callbacks last ran.
    pub ep_errors: Vec<(u32, Status)>,
    /// Peers (endpoint, worker id) that failed since the protocols last forgot their
    /// state of them (partial messages, rendezvous, stream receives).
    pub failed_peers: Vec<(u32, u64, Status)>,
    /// Operations started on an endpoint that failed in the starting call: they complete
    /// with its error after its error handler ran.
    pub failed_ops: Vec<(Request, Status)>,
    /// Flush and close requests waiting for their endpoints to drain.
    pub flushes: Vec<Request>,
    pub next_msg_id: u64,
    pub dropped: u64,
    /// Rendezvous receives whose copy was split with the sender (`rndv::split`).
    pub splits: u64,
    /// No rendezvous of this worker splits (`Worker::set_rndv_split`).
    pub split_off: bool,
    /// A blocking call is posting its receive (no split meanwhile; see
    /// `RecvState::no_split`).
    pub lending: bool,
    /// Endpoints whose lane is tcp (bounded by the configured budget).
    pub tcp_eps: usize,
    /// Interfaces progressed on every call (live and not idle); refreshed on idle turns
    /// and when an endpoint connects.
    pub hot: Vec<usize>,
    /// Completion queues attached to this worker (`Worker::cq_attach`), by index; never
    /// removed, so an index stays valid for the worker's life.
    pub cqs: Vec<cq::Attached>,
}

impl Core {
    pub(crate) fn new(ctx: &Context, uuid: u64, my_address: Vec<u8>) -> Core {
        Core {
            ctx: ctx.clone(),
            uuid,
            cfg: ctx.config().clone(),
            eps: Vec::new(),
            ep_gens: Vec::new(),
            by_uuid: HashMap::with_hasher(crate::matcher::KeyHash::new()),
            my_address,
            reqs: Pool::new(),
            active: VecDeque::new(),
            completed: Vec::new(),
            completed_spare: Vec::new(),
            words: Vec::new(),
            ep_errors: Vec::new(),
            failed_peers: Vec::new(),
            failed_ops: Vec::new(),
            flushes: Vec::new(),
            next_msg_id: 1,
            dropped: 0,
            splits: 0,
            split_off: false,
            lending: false,
            tcp_eps: 0,
            hot: Vec::new(),
            cqs: Vec::new(),
        }
    }

    #[inline]
    pub(crate) fn ep(&self, ep: u32) -> Result<&EpState> {
        self.eps
            .get(ep as usize)
            .and_then(Option::as_ref)
            .ok_or(Status::InvalidParam)
    }

    #[inline]
    pub(crate) fn ep_mut(&mut self, ep: u32) -> Result<&mut EpState> {
        self.eps
            .get_mut(ep as usize)
            .and_then(Option::as_mut)
            .ok_or(Status::InvalidParam)
    }

    pub(crate) fn insert_ep(&mut self, remote: WorkerAddress) -> u32 {
        let e = EpState::new(remote);
        if let Some(i) = self.eps.iter().position(Option::is_none) {
            self.eps[i] = Some(e);
            i as u32
        } else {
            self.eps.push(Some(e));
            self.ep_gens.push(0);
            (self.eps.len() - 1) as u32
        }
    }

    /// Takes the endpoint out of slot `ep`; handles to it are stale from now on.
    pub(crate) fn take_ep(&mut self, ep: u32) -> Option<EpState> {
        let e = self.eps.get_mut(ep as usize).and_then(Option::take)?;
        if let Some(g) = self.ep_gens.get_mut(ep as usize) {
            *g = g.wrapping_add(1);
        }
        Some(e)
    }

    /// The handle of the endpoint in slot `ep`.
    #[inline]
    pub(crate) fn handle(&self, ep: u32) -> Ep {
        Ep(ep, self.ep_gens.get(ep as usize).copied().unwrap_or(0))
    }

    /// The slot of a live endpoint's handle; `InvalidParam` for a stale or foreign one.
    #[inline]
    pub(crate) fn check(&self, ep: Ep) -> Result<u32> {
        match (self.eps.get(ep.0 as usize), self.ep_gens.get(ep.0 as usize)) {
            (Some(Some(_)), Some(&g)) if g == ep.1 => Ok(ep.0),
            _ => Err(Status::InvalidParam),
        }
    }

    /// The lane of `ep` when an operation may go on it in the call: the handle is live,
    /// the endpoint connected, and nothing is queued on it before the operation. `None`
    /// sends the caller down the full path ([`Core::check`], [`route`], the queue), which
    /// also tells a stale handle from the rest.
    #[inline(always)]
    pub(crate) fn ready_lane(&self, ep: Ep) -> Option<Lane> {
        let i = ep.0 as usize;
        let e = self.eps.get(i)?.as_ref()?;
        if *self.ep_gens.get(i)? != ep.1 || e.status != EpStatus::Connected || !e.queue.is_empty() {
            return None;
        }
        e.lane
    }

    /// True when the endpoint answering for worker `uuid` failed: what still arrives
    /// from it (late packets of a dead peer) must not start anything that waits for it.
    pub(crate) fn peer_gone(&self, uuid: u64) -> bool {
        self.ep_of(uuid)
            .and_then(|e| self.ep(e).ok())
            .is_some_and(|e| matches!(e.status, EpStatus::Failed(_)))
    }

    /// The endpoint answering for worker `uuid`.
    #[inline]
    pub(crate) fn ep_of(&self, uuid: u64) -> Option<u32> {
        self.by_uuid.get(&uuid).copied()
    }

    #[inline]
    pub(crate) fn new_req(&mut self, kind: ReqKind, cb: Option<Callback>) -> Request {
        Request(self.reqs.get(Req {
            kind,
            status: None,
            info: RecvInfo::default(),
            cb,
            released: false,
        }))
    }

    /// A request that reports by `word` and is released from the start (no handle of it
    /// is given out): a receive posted by word that needs one after all.
    pub(crate) fn new_word_req(&mut self, kind: ReqKind, word: u64) -> Request {
        Request(self.reqs.get(Req {
            kind,
            status: None,
            info: RecvInfo::default(),
            cb: Some(Callback::Word(word)),
            released: true,
        }))
    }

    /// Reports the completion of an operation that has no request by its word.
    #[inline]
    pub(crate) fn report_word(&mut self, word: u64, status: Status, info: RecvInfo) {
        self.words.push(Completed {
            request: Request::NONE,
            word,
            status,
            info,
        });
    }

    /// Delivers a whole message to a receive posted by word and reports it.
    #[inline]
    pub(crate) fn recv_whole_word(&mut self, buf: &Buf, word: u64, tag: u64, data: &[u8]) {
        let n = buf.write_at(0, data);
        let status = if n < data.len() {
            Status::MessageTruncated
        } else {
            Status::Ok
        };
        self.report_word(
            word,
            status,
            RecvInfo {
                sender_tag: tag,
                length: data.len(),
            },
        );
    }

    /// Marks `r` complete with `status` and schedules its callback.
    #[inline]
    pub(crate) fn complete(&mut self, r: Request, status: Status) {
        if let Some(q) = self.reqs.get_mut(r.0) {
            if q.status.is_some() {
                return;
            }
            q.status = Some(status);
            if let ReqKind::Send(s) = &mut q.kind {
                // A registration of the caller's buffer must not outlive the send (see
                // core::buf): peers lose access to it now.
                s.mem = None;
            }
            let counted = match &q.kind {
                ReqKind::Send(s) if s.remote_pending => Some(s.ep),
                ReqKind::Rma(s) => Some(s.ep),
                _ => None,
            };
            let done = Self::settle_found(
                q,
                r,
                &mut self.words,
                &mut self.completed,
                &mut self.cqs,
                &self.ep_gens,
            );
            if let Some(Some(e)) = counted.and_then(|ep| self.eps.get_mut(ep as usize)) {
                e.outstanding = e.outstanding.saturating_sub(1);
            }
            if done {
                self.reqs.remove(r.0);
            }
        }
    }

    /// Reports or lists request `r` (looked up as `q`), which just got its status; true
    /// when it is done with and must be removed from the pool. A function over the fields
    /// it needs, so that a caller holding `q` settles it without a second lookup:
    /// a completion queue gets its entry from where the request lies; a released request
    /// reported by word is listed for `drain_completed` (nothing runs for it later); one
    /// with a closure or released otherwise waits for `engine::run_completions`.
    #[inline(always)]
    fn settle_found(
        q: &Req,
        r: Request,
        words: &mut Vec<Completed>,
        completed: &mut Vec<Request>,
        cqs: &mut [cq::Attached],
        ep_gens: &[u32],
    ) -> bool {
        match (&q.cb, q.released) {
            (Some(Callback::Cq(t)), _) => {
                let (length, tag, ep) = match &q.kind {
                    ReqKind::Send(s) => (s.buf.len(), s.tag, Some(s.ep)),
                    ReqKind::Recv(_) => (q.info.length, q.info.sender_tag, None),
                    ReqKind::Rma(s) => (s.len, 0, Some(s.ep)),
                    ReqKind::Flush(e) => (0, 0, *e),
                    ReqKind::Close(e) => (0, 0, Some(*e)),
                };
                let ep = ep.map(|e| ids::Ep(e, ep_gens.get(e as usize).copied().unwrap_or(0)));
                let status = q.status.unwrap_or(Status::Ok);
                t.report_ref(cqs, status, length, tag, ep);
                true
            }
            (Some(Callback::Word(word)), true) => {
                words.push(Completed {
                    request: r,
                    word: *word,
                    status: q.status.unwrap_or(Status::Ok),
                    info: q.info,
                });
                true
            }
            (Some(_), _) | (None, true) => {
                completed.push(r);
                false
            }
            (None, false) => false,
        }
    }

    /// Names the kind of operation a queue entry will report (the worker's API calls do
    /// this; other callbacks are left alone), and checks that a queue named by index is
    /// attached to this worker.
    #[inline]
    pub(crate) fn stamp(&self, cb: &mut Option<Callback>, op: cq::CqOp) -> Result<()> {
        if let Some(Callback::Cq(t)) = cb {
            if let cq::Dest::Attached { idx, worker } = t.dest {
                if worker != self.uuid || idx as usize >= self.cqs.len() {
                    return Err(Status::InvalidParam);
                }
            }
            t.op = op;
        }
        Ok(())
    }

    /// Attaches `q` (once: a queue attached before gets its index again).
    pub(crate) fn cq_attach(&mut self, q: &cq::Cq) -> cq::CqId {
        let idx = match self.cqs.iter().position(|c| c.cq.same(q)) {
            Some(i) => i,
            None => {
                self.cqs.push(cq::Attached::new(q));
                self.cqs.len() - 1
            }
        };
        cq::CqId {
            worker: self.uuid,
            idx: idx as u32,
        }
    }

    /// The state of receive `r` (`None` for another kind of request, or a stale one).
    #[inline]
    pub(crate) fn recv_state(&mut self, r: Request) -> Option<&mut RecvState> {
        match self.reqs.get_mut(r.0) {
            Some(Req {
                kind: ReqKind::Recv(rs),
                ..
            }) => Some(rs),
            _ => None,
        }
    }

    /// Sets the receive information of `r`.
    pub(crate) fn recv_set_info(&mut self, r: Request, tag: u64, length: usize) {
        if let Some(q) = self.reqs.get_mut(r.0) {
            q.info = RecvInfo {
                sender_tag: tag,
                length,
            };
        }
    }

    /// Copies `data` into receive `r` at `off`; notes truncation.
    pub(crate) fn recv_write(&mut self, r: Request, off: usize, data: &[u8]) {
        if let Some(rs) = self.recv_state(r) {
            let n = rs.buf.write_at(off, data);
            if n < data.len() {
                rs.truncated = true;
            }
            rs.received += data.len();
        }
    }

    /// Completes receive `r`: `MessageTruncated` if data did not fit.
    pub(crate) fn recv_finish(&mut self, r: Request) {
        let truncated = self.recv_state(r).is_some_and(|rs| rs.truncated);
        self.complete(
            r,
            if truncated {
                Status::MessageTruncated
            } else {
                Status::Ok
            },
        );
    }

    /// A receive request that is complete already, with `status` and `info`, and no buffer.
    #[cold]
    pub(crate) fn finished_recv(&mut self, status: Status, info: RecvInfo) -> Request {
        let buf = Buf::empty();
        let kind = ReqKind::Recv(RecvState {
            buf,
            recv_id: None,
            received: 0,
            truncated: false,
            waitall: false,
            no_split: false,
        });
        let r = self.new_req(kind, None);
        if let Some(q) = self.reqs.get_mut(r.0) {
            q.info = info;
            q.status = Some(status);
        }
        r
    }

    /// Delivers a whole message to receive `r` and completes it, with one look at the
    /// request: its information, the data, and its completion.
    #[inline]
    pub(crate) fn recv_whole(&mut self, r: Request, tag: u64, data: &[u8]) {
        let Some(q) = self.reqs.get_mut(r.0) else {
            return;
        };
        q.info = RecvInfo {
            sender_tag: tag,
            length: data.len(),
        };
        let mut status = Status::Ok;
        if let ReqKind::Recv(rs) = &mut q.kind {
            let n = rs.buf.write_at(0, data);
            rs.received += data.len();
            if n < data.len() {
                rs.truncated = true;
                status = Status::MessageTruncated;
            }
        }
        if q.status.is_none() {
            q.status = Some(status);
            let done = Self::settle_found(
                q,
                r,
                &mut self.words,
                &mut self.completed,
                &mut self.cqs,
                &self.ep_gens,
            );
            if done {
                self.reqs.remove(r.0);
            }
        }
    }

    /// The peer acknowledged send `sreq` (a synchronous send was matched, or a rendezvous
    /// finished): it completes. An acknowledgement of nothing we wait for is an error.
    pub(crate) fn remote_done(&mut self, sreq: u64) -> Result<()> {
        let r = Request::from_u64(sreq);
        match self.reqs.get_mut(r.0) {
            Some(Req {
                kind: ReqKind::Send(s),
                status: None,
                ..
            }) if s.remote_pending => {
                s.mem = None;
                self.complete(r, Status::Ok);
                Ok(())
            }
            Some(Req {
                kind: ReqKind::Send(s),
                status: None,
                ..
            }) if s.sync && s.offset > 0 && !s.early_ack => {
                // Matched by its first fragment while the rest is still being sent.
                s.early_ack = true;
                Ok(())
            }
            _ => {
                tracing::debug!("acknowledgement for unknown send request {sreq:#x}");
                Err(Status::InvalidParam)
            }
        }
    }

    /// True when `ep` (or every endpoint) has no queued or unacknowledged operation.
    pub(crate) fn is_drained(&self, ep: Option<u32>) -> bool {
        let one = |e: &EpState| e.queue.is_empty() && e.outstanding == 0;
        match ep {
            Some(i) => self.ep(i).map_or(true, one),
            None => self.eps.iter().flatten().all(one),
        }
    }

    /// Frees the storage of the queue of `ep` (of every endpoint with `None`) if it is
    /// empty, so that a flushed idle endpoint keeps no heap memory for it (memory per
    /// peer is what lets a job grow to many peers); it grows again when an operation has
    /// to wait. Called when a flush finds the endpoint drained, never per operation.
    pub(crate) fn release_idle_queues(&mut self, ep: Option<u32>) {
        let trim = |e: &mut EpState| {
            if e.queue.is_empty() && e.queue.capacity() > 0 {
                e.queue = VecDeque::new();
            }
        };
        match ep {
            Some(i) => {
                if let Ok(e) = self.ep_mut(i) {
                    trim(e);
                }
            }
            None => self.eps.iter_mut().flatten().for_each(trim),
        }
    }

    /// Completes, with `status`, the sends and accesses of `ep` still in progress
    /// (queued or waiting for the peer).
    pub(crate) fn fail_waiting(&mut self, ep: u32, status: Status) {
        let waiting: Vec<Request> = self
            .reqs
            .iter()
            .filter_map(|(i, q)| match &q.kind {
                ReqKind::Send(s) if s.ep == ep && q.status.is_none() => Some(Request(i)),
                ReqKind::Rma(s) if s.ep == ep && q.status.is_none() => Some(Request(i)),
                _ => None,
            })
            .collect();
        for r in waiting {
            self.complete(r, status);
        }
    }
}

/// What starting an operation did.
#[must_use]
pub(crate) enum Post {
    /// Completed inside the call: the callback is handed back (a closure is not called,
    /// as in UCX; a completion queue still gets its entry).
    Done(Option<Callback>),
    /// Needs the endpoint's queue: the caller queues it (behind what is queued) and
    /// drains the queue.
    Queue(Request),
    /// Started; completes later (or failed in the call: it completes with the error
    /// after the endpoint's error handler ran).
    Started(Request),
}

/// Where a new operation on an endpoint goes.
pub(crate) enum Route {
    /// Connected: send on this lane.
    Lane(Lane),
    /// Not connected yet (connecting through a server's socket address): queue it.
    Queue,
    /// The endpoint failed in this very call: the operation gets a request that completes
    /// with this status (the endpoint's error handler runs too), not an immediate error.
    Fail(Status),
}

/// The route of a new operation on `ep`. An endpoint that had failed before gives its
/// error at once.
#[inline]
pub(crate) fn route(tls: &mut [Tl], core: &mut Core, ep: u32) -> Result<Route> {
    let e = core.ep(ep)?;
    match (e.lane, e.status) {
        (Some(l), EpStatus::Connected) => Ok(Route::Lane(l)),
        (_, EpStatus::Failed(s)) => Err(s),
        (Some(l), _) => Ok(Route::Lane(l)),
        (None, EpStatus::Connecting) => Ok(Route::Queue),
        _ => match connect(tls, core, ep) {
            Ok(l) => Ok(Route::Lane(l)),
            Err(s) => Ok(Route::Fail(s)),
        },
    }
}

/// Picks the lane for `ep` and creates its transport endpoint; queues the wireup message.
/// A failure to find or create one fails the endpoint (see [`fail_ep`]).
pub(crate) fn connect(tls: &mut [Tl], core: &mut Core, ep: u32) -> Result<Lane> {
    let e = core.ep(ep)?;
    match (e.lane, e.status) {
        (_, EpStatus::Failed(s)) => return Err(s),
        (Some(l), _) => return Ok(l),
        (None, EpStatus::Connecting) => return Err(Status::InProgress),
        _ => {}
    }
    match pick_lane(tls, core, ep) {
        Ok(l) => Ok(l),
        Err(s) => {
            fail_ep(core, ep, s);
            Err(s)
        }
    }
}

fn pick_lane(tls: &mut [Tl], core: &mut Core, ep: u32) -> Result<Lane> {
    let e = core.ep(ep)?;
    let dev = uct::shm::address::encode_device_addr(e.remote.host_id);
    let mut best: Option<(usize, usize, f64)> = None;
    let has_self = tls.iter().any(|t| t.transport == Transport::SelfTl);
    let tcp_full = core.tcp_eps >= core.cfg.tcp_max_eps;
    for (i, t) in tls.iter().enumerate() {
        if t.transport == Transport::Tcp && tcp_full {
            continue;
        }
        if t.transport == Transport::SelfTl && e.remote.uuid != core.uuid {
            continue;
        }
        if t.transport != Transport::SelfTl && e.remote.uuid == core.uuid && has_self {
            continue;
        }
        for (j, entry) in e.remote.ifaces.iter().enumerate() {
            if entry.transport != Some(t.transport) || !t.iface.is_reachable(&dev, &entry.addr) {
                continue;
            }
            let cost = t.iface.attr().cost.time(8);
            if best.map_or(true, |(_, _, c)| cost < c) {
                best = Some((i, j, cost));
            }
        }
    }
    let Some((tl, entry, _)) = best else {
        tracing::debug!("no transport reaches worker {:#x}", e.remote.uuid);
        return Err(Status::Unreachable);
    };
    let addr = e.remote.ifaces[entry].addr.clone();
    let uct_ep = tls[tl].iface.ep_create(&addr)?;
    tls[tl].live = true;
    if !core.hot.contains(&tl) {
        core.hot.push(tl);
    }
    let lane = Lane {
        tl,
        ep: uct_ep,
        entry,
    };
    if tls[tl].transport == Transport::Tcp {
        core.tcp_eps += 1;
    }
    let e = core.ep_mut(ep)?;
    e.lane = Some(lane);
    e.status = EpStatus::Connected;
    e.queue.push_front(Queued::Wireup);
    core.active.push_back(ep);
    Ok(lane)
}

/// Sends the wireup message on `lane`. `Ok(false)`: no room now.
pub(crate) fn send_wireup(tls: &mut [Tl], core: &Core, lane: Lane) -> Result<bool> {
    let my = &core.my_address;
    let uuid = core.uuid;
    let out = tls[lane.tl].iface.am_bcopy(lane.ep, AM_WIREUP, |b| {
        if b.len() < WIREUP_LEN + my.len() {
            return usize::MAX;
        }
        b[..8].copy_from_slice(&uuid.to_le_bytes());
        b[8..8 + my.len()].copy_from_slice(my);
        8 + my.len()
    })?;
    Ok(out.is_done())
}

/// Sends a short control message (an acknowledgement) to the worker `uuid`. `msg` is at
/// least 8 bytes: its first 8 travel as the transport header. `Ok(false)`: no room now.
pub(crate) fn send_ctrl(
    tls: &mut [Tl],
    core: &mut Core,
    uuid: u64,
    id: u8,
    msg: &[u8],
) -> Result<bool> {
    let ep = core.ep_of(uuid).ok_or(Status::Unreachable)?;
    let lane = connect(tls, core, ep)?;
    let hdr = u64::from_ne_bytes(msg[..8].try_into().map_err(|_| Status::InvalidParam)?);
    Ok(tls[lane.tl]
        .iface
        .am_short(lane.ep, id, hdr, &msg[8..])?
        .is_done())
}

/// The process of the peer interface that `lane` of endpoint `ep` connects to, when its
/// transport reaches process memory (shm, self): the owner of the keys the peer packs.
pub(crate) fn lane_owner(tls: &[Tl], core: &Core, ep: u32, lane: Lane) -> Option<u32> {
    let entry = core.ep(ep).ok()?.remote.ifaces.get(lane.entry)?;
    uct::md::owner_pid(tls[lane.tl].transport, &entry.addr)
}

/// Decodes a wireup message into (the sender's worker id, its encoded address).
pub fn decode_wireup(d: &[u8]) -> Result<(u64, &[u8])> {
    let id: [u8; WIREUP_LEN] = d
        .get(..WIREUP_LEN)
        .and_then(|b| b.try_into().ok())
        .ok_or(Status::InvalidParam)?;
    Ok((u64::from_le_bytes(id), &d[WIREUP_LEN..]))
}

/// Handles a peer's wireup message: an endpoint to it is made (implicit: the application
/// has not asked for one) unless one exists.
pub(crate) fn on_wireup(core: &mut Core, d: &[u8]) -> Result<()> {
    let (uuid, addr) = decode_wireup(d)?;
    if core.by_uuid.contains_key(&uuid) {
        return Ok(());
    }
    let a = WorkerAddress::decode(addr)?;
    if a.uuid != uuid {
        return Err(Status::InvalidAddr);
    }
    let ep = core.insert_ep(a);
    if let Ok(e) = core.ep_mut(ep) {
        e.implicit = true;
    }
    core.by_uuid.insert(uuid, ep);
    Ok(())
}

/// Marks `ep` failed: everything queued or waiting on it completes with `status`, its
/// error handler is scheduled, later operations get `status`, and the protocols are told
/// to forget the peer (through `failed_peers`, before callbacks run).
pub(crate) fn fail_ep(core: &mut Core, ep: u32, status: Status) {
    let Ok(e) = core.ep_mut(ep) else { return };
    if matches!(e.status, EpStatus::Failed(_)) {
        return;
    }
    e.status = EpStatus::Failed(status);
    let queued: Vec<Queued> = e.queue.drain(..).collect();
    let uuid = e.remote.uuid;
    tracing::info!("endpoint to worker {uuid:#x} failed: {status}");
    for q in queued {
        if let Queued::Send(r) | Queued::Rma(r) = q {
            core.complete(r, status);
        }
    }
    core.fail_waiting(ep, status);
    core.active.retain(|&x| x != ep);
    core.ep_errors.push((ep, status));
    core.failed_peers.push((ep, uuid, status));
}
