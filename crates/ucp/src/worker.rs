//! The worker: its transport interfaces, the progress engine, endpoints, requests, and
//! the receive side of the tag protocols.
//!
//! Structure. `Worker` keeps its interfaces (`tls`) apart from the rest of its state
//! (`State`), so progress can lend the state to an interface's receive callback without
//! boxed handlers. Anything a receive callback would need an interface for (a reply, a
//! rendezvous read) is queued as `Deferred` work and done right after; user callbacks are
//! collected and run last, when the worker is consistent again.
//!
//! Endpoints connect lazily: creating one only decodes the address; the first operation
//! picks the lane, creates the transport endpoint and queues a wireup message that tells
//! the peer who we are (so it can answer synchronous sends and rendezvous).

use crate::address::{tl_id, WorkerAddress};
use crate::context::Context;
use crate::proto::select::Thresholds;
use crate::request::*;
use crate::tag::api::{deferred, drain_queue};
use crate::tag::matcher::{Matcher, MsgId};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd};
use ucs::sys::EventFd;
use ucs::{EventSet, Events, Pool, Result, Status};
use uct::{EpId, Iface, Md, Transport};

/// How the application will call the worker (UCS_THREAD_MODE_* of UCX).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadMode {
    /// Only the thread that created the worker uses it.
    Single,
    /// Several threads, never at the same time.
    Serialized,
    /// Several threads at once: use [`crate::SharedWorker`].
    Multi,
}

/// An endpoint handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ep(pub(crate) u32);

/// State of an endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpStatus {
    Created,
    /// Made from a server's socket address: waiting for the server's worker address.
    /// Operations queue until it arrives.
    Connecting,
    Connected,
    Failed(Status),
}

/// The transport path of a connected endpoint.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lane {
    pub tl: usize,
    pub ep: EpId,
    pub th: Thresholds,
    /// Index of the peer's interface entry this lane connects to.
    pub entry: usize,
}

/// A queued operation of an endpoint, sent in order.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Queued {
    Wireup,
    Send(Request),
    Rma(Request),
}

pub(crate) struct EpState {
    pub remote: WorkerAddress,
    pub lane: Option<Lane>,
    pub status: EpStatus,
    pub queue: VecDeque<Queued>,
    /// Sends waiting for the peer's acknowledgement.
    pub outstanding: usize,
    /// Created by the worker on a peer's wireup, not by the application (yet).
    pub implicit: bool,
    /// Stream bytes received and not yet consumed, in order.
    pub stream_rx: VecDeque<Vec<u8>>,
    /// Bytes already consumed from the front chunk of `stream_rx`.
    pub stream_off: usize,
    /// Stream receives waiting for data, in posting order.
    pub stream_reqs: VecDeque<Request>,
    /// Called once when the endpoint fails (error handling mode "peer").
    pub err_handler: Option<ErrHandler>,
}

/// Called when an endpoint fails: the peer died, reset or closed its connection.
pub type ErrHandler = Box<dyn FnMut(Ep, Status) + Send>;

/// An unexpected message (arrived before its receive was posted).
pub(crate) enum Unexp {
    Eager {
        data: Vec<u8>,
        sync: Option<(u64, u64)>,
    },
    /// A fragmented message still arriving: `data` has room for all of it.
    Partial {
        data: Vec<u8>,
        received: usize,
        sync: Option<(u64, u64)>,
        key: (u64, u64),
    },
    Rts {
        uuid: u64,
        sreq: u64,
        len: u64,
        addr: u64,
        rkey: Vec<u8>,
    },
}

impl Unexp {
    pub(crate) fn length(&self) -> usize {
        match self {
            Unexp::Eager { data, .. } | Unexp::Partial { data, .. } => data.len(),
            Unexp::Rts { len, .. } => *len as usize,
        }
    }
}

/// Where the next fragments of a message go.
#[derive(Clone, Copy, Debug)]
pub(crate) enum FragDest {
    Req(Request),
    Unexp(MsgId),
    Probed(u64),
}

/// Work that needs an interface, found while receiving.
pub(crate) enum Deferred {
    SyncAck {
        uuid: u64,
        sreq: u64,
    },
    Ats {
        uuid: u64,
        sreq: u64,
        status: Status,
    },
    /// A rendezvous matched: read the data (get), or ask for it (Rtr) when the Rts
    /// carries no key.
    RndvGet {
        req: Request,
        uuid: u64,
        sreq: u64,
        len: u64,
        addr: u64,
        rkey: Vec<u8>,
    },
    /// Send (again) the Rtr of this rendezvous receive.
    Rtr {
        rreq: u64,
    },
    /// Put the data of send `sreq` from `off` on into the receiver's buffer; `fin`: the
    /// RndvFin was sent, the send completes once the transport's send buffer is empty.
    RndvPut {
        sreq: u64,
        rreq: u64,
        addr: u64,
        len: usize,
        rkey: Vec<u8>,
        off: usize,
        fin: bool,
    },
}

/// A message taken out of the matcher by a probe with remove, waiting for
/// [`Worker::tag_msg_recv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message(pub(crate) u64);

pub(crate) struct State {
    pub ctx: Context,
    pub uuid: u64,
    pub cfg: crate::config::Config,
    pub eps: Vec<Option<EpState>>,
    pub by_uuid: HashMap<u64, u32>,
    pub matcher: Matcher<Request, (u64, Unexp)>,
    /// This worker's encoded address (sent in wireup messages).
    pub my_address: Vec<u8>,
    pub reqs: Pool<Req>,
    pub frags: HashMap<(u64, u64), FragDest>,
    pub probed: HashMap<u64, (u64, Unexp)>,
    pub next_probed: u64,
    pub deferred: VecDeque<Deferred>,
    /// Rendezvous receives waiting for the sender's puts, by receive request.
    pub rndv_rx: HashMap<u64, crate::tag::rndv_put::RndvRx>,
    /// Replies to emulated remote accesses, waiting for room on their lane.
    pub rma_replies: VecDeque<crate::rma::RmaReply>,
    /// Endpoints with a non-empty queue.
    pub active: VecDeque<u32>,
    pub completed: Vec<Request>,
    /// An empty list with capacity, swapped with `completed` when callbacks run.
    pub completed_spare: Vec<Request>,
    /// Endpoints that failed since callbacks last ran.
    pub ep_errors: Vec<(u32, Status)>,
    /// Operations started on an endpoint that failed in the starting call: they complete
    /// with its error after its error handler ran.
    pub failed_ops: Vec<(Request, Status)>,
    /// Active-message handlers and data kept by them.
    pub am: crate::am::AmState,
    /// Flush and close requests waiting for their endpoints to drain.
    pub flushes: Vec<Request>,
    pub next_msg_id: u64,
    pub dropped: u64,
    /// Endpoints whose lane is tcp (bounded by the configured budget).
    pub tcp_eps: usize,
    /// Interfaces progressed on every call (live and not idle); refreshed on idle turns
    /// and when an endpoint connects.
    pub hot: Vec<usize>,
}

pub(crate) struct Tl {
    pub transport: Transport,
    pub iface: Iface,
    pub md: std::sync::Arc<Md>,
    /// Progress this interface (it has endpoints, or peers may send to it).
    pub live: bool,
}

/// A worker.
pub struct Worker {
    ctx: Context,
    tick: u32,
    /// Listeners and their pending connection requests.
    pub(crate) cm: crate::listener::CmState,
    mode: ThreadMode,
    pub(crate) tls: Vec<Tl>,
    pub(crate) st: State,
    events: EventSet,
    signal: EventFd,
}

/// Event-set token of the descriptors that report dead peers.
const PEERS_TOKEN: u64 = u64::MAX - 2;

fn new_uuid() -> u64 {
    // Odd, so that no worker has id 0 (0 means "no request" in some headers).
    ucs::sys::host::random_u64() | 1
}

impl Worker {
    /// Creates a worker with an interface for each transport of the context.
    pub fn new(ctx: &Context, mode: ThreadMode) -> Result<Worker> {
        let mut tls = Vec::new();
        for (i, r) in ctx.resources().iter().enumerate() {
            let iface = Iface::open_device(r.transport, &r.device, ctx.iface_config())?;
            tls.push(Tl {
                transport: r.transport,
                iface,
                md: ctx.md(i).clone(),
                live: false,
            });
        }
        let events = EventSet::new()?;
        let signal = EventFd::new()?;
        events.add(&signal, Events::READABLE, u64::MAX)?;
        for (i, t) in tls.iter().enumerate() {
            if let Some(fd) = t.iface.event_fd() {
                events.add(fd, Events::READABLE, i as u64)?;
            }
            if let Some(fd) = t.iface.peers_fd() {
                events.add(fd, Events::READABLE, PEERS_TOKEN)?;
            }
        }
        let uuid = new_uuid();
        let my_address = WorkerAddress {
            uuid,
            host_id: ucs::sys::host::host_id(),
            ifaces: tls
                .iter()
                .map(|t| crate::address::IfaceEntry {
                    transport: Some(t.transport),
                    tl_id: tl_id(t.transport),
                    caps: t.iface.attr().caps,
                    addr: t.iface.address(),
                })
                .collect(),
        }
        .encode();
        tracing::debug!("worker {uuid:#x} created with {} transports", tls.len());
        Ok(Worker {
            ctx: ctx.clone(),
            tick: 0,
            cm: crate::listener::CmState::default(),
            mode,
            tls,
            st: State {
                ctx: ctx.clone(),
                uuid,
                cfg: ctx.config().clone(),
                eps: Vec::new(),
                by_uuid: HashMap::new(),
                matcher: Matcher::new(),
                my_address,
                reqs: Pool::new(),
                frags: HashMap::new(),
                probed: HashMap::new(),
                next_probed: 1,
                deferred: VecDeque::new(),
                rndv_rx: HashMap::new(),
                rma_replies: VecDeque::new(),
                active: VecDeque::new(),
                completed: Vec::new(),
                completed_spare: Vec::new(),
                ep_errors: Vec::new(),
                failed_ops: Vec::new(),
                am: crate::am::AmState::default(),
                flushes: Vec::new(),
                next_msg_id: 1,
                dropped: 0,
                tcp_eps: 0,
                hot: Vec::new(),
            },
            events,
            signal,
        })
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    pub fn thread_mode(&self) -> ThreadMode {
        self.mode
    }

    /// This worker's unique id.
    pub fn uuid(&self) -> u64 {
        self.st.uuid
    }

    /// Malformed protocol messages dropped so far.
    pub fn dropped(&self) -> u64 {
        self.st.dropped
    }

    /// The worker's address. Handing it out means peers may send at any time, so every
    /// interface that can receive from another process is progressed from now on.
    pub fn address(&mut self) -> Vec<u8> {
        for (i, t) in self.tls.iter_mut().enumerate() {
            if t.transport != Transport::SelfTl {
                t.live = true;
                if !t.iface.is_idle() && !self.st.hot.contains(&i) {
                    self.st.hot.push(i);
                }
            }
        }
        self.st.my_address.clone()
    }

    // ----- endpoints -------------------------------------------------------------------

    /// Creates an endpoint to the worker at `address`. Nothing is sent and no transport
    /// resource is taken until the first operation.
    pub fn ep_create(&mut self, address: &[u8]) -> Result<Ep> {
        let remote = WorkerAddress::decode(address)?;
        let uuid = remote.uuid;
        // A peer that connected to us first already has an endpoint (made on its wireup,
        // holding whatever it sent, e.g. stream bytes): that one becomes the application's.
        if let Some(&idx) = self.st.by_uuid.get(&uuid) {
            if let Ok(e) = self.st.ep_mut(idx) {
                if e.implicit {
                    e.implicit = false;
                    return Ok(Ep(idx));
                }
            }
        }
        let idx = self.st.insert_ep(remote);
        self.st.by_uuid.entry(uuid).or_insert(idx);
        Ok(Ep(idx))
    }

    /// The endpoint's state.
    pub fn ep_status(&self, ep: Ep) -> Result<EpStatus> {
        self.st.ep(ep.0).map(|e| e.status)
    }

    /// The transport an endpoint uses once connected.
    pub fn ep_transport(&self, ep: Ep) -> Result<Option<Transport>> {
        let e = self.st.ep(ep.0)?;
        Ok(e.lane.map(|l| self.tls[l.tl].transport))
    }

    /// The protocol thresholds of a connected endpoint (`None` before it connects).
    pub fn ep_thresholds(&self, ep: Ep) -> Result<Option<Thresholds>> {
        Ok(self.st.ep(ep.0)?.lane.map(|l| l.th))
    }

    /// Progresses until `ep` is no longer waiting for its server's answer (endpoints made
    /// from a socket address), or `timeout` passes (`TimedOut`).
    pub fn wait_connecting(&mut self, ep: Ep, timeout: std::time::Duration) -> Result<()> {
        let deadline = std::time::Instant::now() + timeout;
        while self.st.ep(ep.0)?.status == EpStatus::Connecting {
            if std::time::Instant::now() > deadline {
                return Err(Status::TimedOut);
            }
            if self.progress() == 0 {
                self.wait(1)?;
            }
        }
        Ok(())
    }

    /// Connects `ep` now (normally done by the first operation).
    pub fn ep_connect(&mut self, ep: Ep) -> Result<()> {
        connect(&mut self.tls, &mut self.st, ep.0).map(|_| ())
    }

    // ----- progress --------------------------------------------------------------------

    /// Makes progress on everything outstanding; returns the number of events handled.
    pub fn progress(&mut self) -> usize {
        let mut n = 0;
        let st = &mut self.st;
        self.tick = self.tick.wrapping_add(1);
        let idle_turn = self.tick % 256 == 0;
        let mut events = false;
        if idle_turn {
            // Every live interface, and the list of those to poll on every call: a
            // connection-based interface without connections only waits for new ones, so
            // it is polled on these turns only.
            st.hot.clear();
            for (i, t) in self.tls.iter_mut().enumerate() {
                if t.live {
                    n += t.iface.progress_with(|id, d| st.on_am(id, d));
                    t.iface.check_peers();
                    events |= t.iface.has_events();
                    if !t.iface.is_idle() {
                        st.hot.push(i);
                    }
                }
            }
        } else {
            for k in 0..st.hot.len() {
                let t = &mut self.tls[st.hot[k]];
                n += t.iface.progress_with(|id, d| st.on_am(id, d));
                events |= t.iface.has_events();
            }
        }
        if events {
            self.handle_iface_events();
        }
        if !self.cm.connecting.is_empty() {
            n += self.poll_connecting();
        }
        if idle_turn && !self.cm.listeners.is_empty() && self.cm.poll() {
            n += 1;
        }
        if !self.st.deferred.is_empty() {
            n += self.run_deferred();
        }
        if !self.st.rma_replies.is_empty() {
            n += self.run_rma_replies();
        }
        if !self.st.active.is_empty() {
            n += self.run_queues();
        }
        if !self.st.flushes.is_empty() {
            self.check_flushes();
        }
        if !self.st.completed.is_empty()
            || !self.st.ep_errors.is_empty()
            || !self.st.failed_ops.is_empty()
            || !self.cm.new_requests.is_empty()
        {
            self.run_callbacks();
        }
        n
    }

    /// Fails the endpoints whose connections broke.
    #[cold]
    fn handle_iface_events(&mut self) {
        for tl in 0..self.tls.len() {
            for ev in self.tls[tl].iface.take_events() {
                let victims: Vec<u32> = self
                    .st
                    .eps
                    .iter()
                    .enumerate()
                    .filter_map(|(i, e)| {
                        let e = e.as_ref()?;
                        let l = e.lane?;
                        let hit = l.tl == tl
                            && match &ev {
                                uct::IfaceEvent::EpFailed(uep, _) => l.ep == *uep,
                                uct::IfaceEvent::PeerClosed(addr) => e
                                    .remote
                                    .ifaces
                                    .get(l.entry)
                                    .is_some_and(|x| x.addr == *addr),
                            };
                        hit.then_some(i as u32)
                    })
                    .collect();
                let status = match ev {
                    uct::IfaceEvent::EpFailed(_, s) => s,
                    uct::IfaceEvent::PeerClosed(_) => Status::ConnectionReset,
                };
                for ep in victims {
                    fail_ep(&mut self.st, ep, status);
                }
            }
        }
    }

    /// Installs the handler called once if `ep` fails (UCP's error handling mode "peer").
    pub fn ep_set_err_handler(&mut self, ep: Ep, h: Option<ErrHandler>) -> Result<()> {
        self.st.ep_mut(ep.0)?.err_handler = h;
        Ok(())
    }

    fn run_deferred(&mut self) -> usize {
        let mut n = 0;
        for _ in 0..self.st.deferred.len() {
            let Some(d) = self.st.deferred.pop_front() else {
                break;
            };
            match deferred(&mut self.tls, &mut self.st, d) {
                Ok(None) => n += 1,
                Ok(Some(again)) => self.st.deferred.push_back(again),
                Err(s) => tracing::debug!("deferred protocol work failed: {s}"),
            }
        }
        n
    }

    fn run_rma_replies(&mut self) -> usize {
        let mut n = 0;
        for _ in 0..self.st.rma_replies.len() {
            let Some(r) = self.st.rma_replies.pop_front() else {
                break;
            };
            match crate::rma::send_reply(&mut self.tls, &mut self.st, r) {
                Ok(None) => n += 1,
                Ok(Some(rest)) => {
                    self.st.rma_replies.push_front(rest);
                    break;
                }
                Err(s) => tracing::debug!("reply to an emulated access failed: {s}"),
            }
        }
        n
    }

    fn run_queues(&mut self) -> usize {
        let mut n = 0;
        for _ in 0..self.st.active.len() {
            let Some(ep) = self.st.active.pop_front() else {
                break;
            };
            n += drain_queue(&mut self.tls, &mut self.st, ep);
            if self
                .st
                .eps
                .get(ep as usize)
                .and_then(Option::as_ref)
                .is_some_and(|e| !e.queue.is_empty())
            {
                self.st.active.push_back(ep);
            }
        }
        n
    }

    fn check_flushes(&mut self) {
        let mut i = 0;
        while i < self.st.flushes.len() {
            let r = self.st.flushes[i];
            let target = match self.st.reqs.get_ref(r.0).map(|q| &q.kind) {
                Some(ReqKind::Flush(t)) => (*t, false),
                Some(ReqKind::Close(e)) => (Some(*e), true),
                _ => {
                    self.st.flushes.swap_remove(i);
                    continue;
                }
            };
            if self.st.is_drained(target.0) && self.lanes_flushed(target.0) {
                self.st.flushes.swap_remove(i);
                if let (Some(e), true) = target {
                    destroy_ep(&mut self.tls, &mut self.st, e, Status::Canceled);
                }
                self.st.complete(r, Status::Ok);
            } else {
                i += 1;
            }
        }
    }

    /// True when the transports hold nothing of `ep` (or any endpoint) that has not left.
    fn lanes_flushed(&self, ep: Option<u32>) -> bool {
        let flushed = |e: &EpState| {
            e.lane.map_or(true, |l| {
                self.tls[l.tl].iface.ep_is_flushed(l.ep).unwrap_or(true)
            })
        };
        match ep {
            Some(i) => self.st.ep(i).map_or(true, flushed),
            None => self.st.eps.iter().flatten().all(flushed),
        }
    }

    fn run_callbacks(&mut self) {
        for (l, id, client) in std::mem::take(&mut self.cm.new_requests) {
            if let Some(Some(slot)) = self.cm.listeners.get_mut(l as usize) {
                (slot.handler)(crate::listener::ConnReqId(id), client);
            }
        }
        for (ep, s) in std::mem::take(&mut self.st.ep_errors) {
            let h = self.st.ep_mut(ep).ok().and_then(|e| e.err_handler.take());
            if let Some(mut h) = h {
                h(Ep(ep), s);
            }
        }
        for (r, s) in std::mem::take(&mut self.st.failed_ops) {
            self.st.complete(r, s);
        }
        // The list is swapped with a spare one that keeps its capacity, so completing
        // requests does not allocate once both have grown.
        let mut done = std::mem::take(&mut self.st.completed_spare);
        std::mem::swap(&mut done, &mut self.st.completed);
        for r in done.drain(..) {
            let Some(q) = self.st.reqs.get_mut(r.0) else {
                continue;
            };
            let cb = q.cb.take();
            let (status, info, released) = (q.status.unwrap_or(Status::Ok), q.info, q.released);
            if released {
                self.st.reqs.remove(r.0);
            }
            if let Some(cb) = cb {
                cb(r, status, info);
            }
        }
        self.st.completed_spare = done;
    }

    // ----- requests --------------------------------------------------------------------

    /// The status of a request: `None` while in progress.
    pub fn request_test(&self, r: Request) -> Result<Option<Status>> {
        self.st
            .reqs
            .get_ref(r.0)
            .map(|q| q.status)
            .ok_or(Status::InvalidParam)
    }

    /// The receive information of a completed receive request.
    pub fn request_info(&self, r: Request) -> Result<RecvInfo> {
        self.st
            .reqs
            .get_ref(r.0)
            .map(|q| q.info)
            .ok_or(Status::InvalidParam)
    }

    /// Releases a request: now if it completed, else when it completes (its callback
    /// still runs).
    pub fn request_free(&mut self, r: Request) -> Result<()> {
        let q = self.st.reqs.get_mut(r.0).ok_or(Status::InvalidParam)?;
        if q.status.is_some() && q.cb.is_none() {
            self.st.reqs.remove(r.0);
        } else {
            q.released = true;
        }
        Ok(())
    }

    /// Cancels a posted receive that has not matched: it completes with `Canceled`.
    /// Other requests cannot be canceled; that is not an error (as in UCX).
    pub fn request_cancel(&mut self, r: Request) -> Result<()> {
        let q = self.st.reqs.get_mut(r.0).ok_or(Status::InvalidParam)?;
        if let ReqKind::Recv(rs) = &mut q.kind {
            if let Some(id) = rs.recv_id.take() {
                if self.st.matcher.cancel(id).is_some() {
                    self.st.complete(r, Status::Canceled);
                }
            }
        }
        Ok(())
    }

    /// Progresses until `r` completes or `timeout` passes; returns its status and frees
    /// it. On timeout the request is left as it is (abort it before its buffer goes).
    pub fn wait_request(&mut self, r: Request, timeout: std::time::Duration) -> Result<Status> {
        let s = self.wait_done(r, timeout)?;
        self.request_free(r)?;
        Ok(s)
    }

    /// Progresses until `r` completes or `timeout` passes; returns its status.
    pub fn wait_done(&mut self, r: Request, timeout: std::time::Duration) -> Result<Status> {
        let deadline = std::time::Instant::now() + timeout;
        let mut spins = 0u32;
        loop {
            if let Some(s) = self.request_test(r)? {
                return Ok(s);
            }
            if self.progress() == 0 {
                spins += 1;
                if spins > 1000 {
                    if std::time::Instant::now() > deadline {
                        return Err(Status::TimedOut);
                    }
                    spins = 0;
                    self.wait(1)?;
                }
            }
        }
    }

    // ----- flush and close -------------------------------------------------------------

    /// Flushes `ep`: completes when every operation issued on it so far has completed at
    /// the peer. `None` when that is already so.
    pub fn ep_flush_nb(&mut self, ep: Ep, cb: Option<Callback>) -> Result<Option<Request>> {
        self.st.ep(ep.0)?;
        self.flush_req(ReqKind::Flush(Some(ep.0)), Some(ep.0), cb)
    }

    /// Flushes every endpoint of the worker.
    pub fn flush_nb(&mut self, cb: Option<Callback>) -> Result<Option<Request>> {
        self.flush_req(ReqKind::Flush(None), None, cb)
    }

    fn flush_req(
        &mut self,
        kind: ReqKind,
        target: Option<u32>,
        cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        self.progress();
        if self.st.is_drained(target) && self.lanes_flushed(target) {
            return Ok(None);
        }
        let r = self.st.new_req(kind, cb);
        self.st.flushes.push(r);
        Ok(Some(r))
    }

    /// Closes `ep`. With `force`, outstanding operations complete with `Canceled` and the
    /// endpoint is gone at once; otherwise it is flushed first and the returned request
    /// completes when it is gone.
    pub fn ep_close_nb(&mut self, ep: Ep, force: bool) -> Result<Option<Request>> {
        self.st.ep(ep.0)?;
        self.cm.sockaddrs.remove(&ep.0);
        if let Some(i) = self.cm.connecting.iter().position(|c| c.ep == ep.0) {
            // Still waiting for its server: closing gives the connection up, whatever
            // was queued on the endpoint completes with Canceled.
            let c = self.cm.connecting.swap_remove(i);
            self.remove_wakeup_fd(c.client.fd());
            destroy_ep(&mut self.tls, &mut self.st, ep.0, Status::Canceled);
            self.run_callbacks();
            return Ok(None);
        }
        if force {
            destroy_ep(&mut self.tls, &mut self.st, ep.0, Status::Canceled);
            self.run_callbacks();
            return Ok(None);
        }
        self.progress();
        if self.st.is_drained(Some(ep.0)) {
            destroy_ep(&mut self.tls, &mut self.st, ep.0, Status::Canceled);
            return Ok(None);
        }
        let r = self.st.new_req(ReqKind::Close(ep.0), None);
        self.st.flushes.push(r);
        Ok(Some(r))
    }

    // ----- wakeup ----------------------------------------------------------------------

    /// A descriptor that becomes readable when the worker has events after [`Worker::arm`].
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.events.as_fd()
    }

    /// Prepares to sleep on the event descriptor. `Busy` means there is work now.
    pub fn arm(&mut self) -> Result<()> {
        if !self.st.deferred.is_empty()
            || !self.st.completed.is_empty()
            || !self.st.active.is_empty()
            || !self.st.ep_errors.is_empty()
            || !self.st.failed_ops.is_empty()
        {
            return Err(Status::Busy);
        }
        for t in self.tls.iter_mut().filter(|t| t.live) {
            t.iface.arm()?;
        }
        Ok(())
    }

    /// Sleeps until an event or `timeout_ms` (-1: forever), unless there is work now.
    pub fn wait(&mut self, timeout_ms: i32) -> Result<()> {
        if self.arm().is_err() {
            return Ok(());
        }
        let mut peers = false;
        self.events
            .wait(timeout_ms, |tok, _| peers |= tok == PEERS_TOKEN)?;
        self.signal.drain();
        if peers {
            // A peer died while we slept: its endpoints fail now, so that the next
            // progress runs their error handlers.
            for t in self.tls.iter_mut().filter(|t| t.live) {
                t.iface.check_peers();
            }
            self.handle_iface_events();
        }
        if !self.cm.listeners.is_empty() && self.cm.poll() {
            self.run_callbacks();
        }
        Ok(())
    }

    /// Adds a descriptor whose readiness should end [`Worker::wait`].
    pub(crate) fn add_wakeup_fd(&self, fd: BorrowedFd<'_>) -> Result<()> {
        self.events.add(fd, Events::READABLE, u64::MAX - 1)
    }

    pub(crate) fn remove_wakeup_fd(&self, fd: BorrowedFd<'_>) {
        let _ = self.events.remove(fd);
    }

    /// Wakes a thread sleeping in [`Worker::wait`] (callable through a shared handle).
    pub fn signal(&self) -> Result<()> {
        self.signal.signal()
    }

    /// The waker of this worker: signals it from any thread.
    pub fn waker(&self) -> Result<EventFd> {
        let fd = self
            .signal
            .as_fd()
            .try_clone_to_owned()
            .map_err(Status::from)?;
        Ok(EventFd::from_owned(fd))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Unmatched receives complete with Canceled, as do sends still in flight.
        for (_, r) in self.st.matcher.drain_posted() {
            self.st.complete(r, Status::Canceled);
        }
        for ep in 0..self.st.eps.len() as u32 {
            if self.st.eps[ep as usize].is_some() {
                destroy_ep(&mut self.tls, &mut self.st, ep, Status::Canceled);
            }
        }
        self.run_callbacks();
    }
}

// ----- state helpers ---------------------------------------------------------------------

impl State {
    pub(crate) fn ep(&self, ep: u32) -> Result<&EpState> {
        self.eps
            .get(ep as usize)
            .and_then(Option::as_ref)
            .ok_or(Status::InvalidParam)
    }

    pub(crate) fn ep_mut(&mut self, ep: u32) -> Result<&mut EpState> {
        self.eps
            .get_mut(ep as usize)
            .and_then(Option::as_mut)
            .ok_or(Status::InvalidParam)
    }

    pub(crate) fn insert_ep(&mut self, remote: WorkerAddress) -> u32 {
        let e = EpState {
            remote,
            lane: None,
            status: EpStatus::Created,
            queue: VecDeque::new(),
            outstanding: 0,
            implicit: false,
            stream_rx: VecDeque::new(),
            stream_off: 0,
            stream_reqs: VecDeque::new(),
            err_handler: None,
        };
        if let Some(i) = self.eps.iter().position(Option::is_none) {
            self.eps[i] = Some(e);
            i as u32
        } else {
            self.eps.push(Some(e));
            (self.eps.len() - 1) as u32
        }
    }

    /// Endpoint `ep` (made from a server's socket address, still without a lane) takes
    /// over `other`, an endpoint the peer's wireup created before `ep` learned who the
    /// peer is: its connection, queue and received stream bytes move to `ep`, and
    /// everything that named `other` names `ep`. An endpoint the application made itself
    /// is left alone.
    pub(crate) fn adopt_implicit(&mut self, ep: u32, other: u32) {
        if ep == other || !self.ep(other).is_ok_and(|o| o.implicit) || self.ep(ep).is_err() {
            return;
        }
        let Some(o) = self.eps.get_mut(other as usize).and_then(Option::take) else {
            return;
        };
        let Ok(e) = self.ep_mut(ep) else { return };
        e.lane = o.lane;
        if o.lane.is_some() {
            e.status = o.status;
        }
        e.outstanding += o.outstanding;
        e.stream_rx = o.stream_rx;
        e.stream_off = o.stream_off;
        let mine = std::mem::take(&mut e.queue);
        e.queue = o.queue;
        e.queue.extend(mine);
        e.stream_reqs.extend(o.stream_reqs);
        for x in self.active.iter_mut().filter(|x| **x == other) {
            *x = ep;
        }
        for q in self.reqs.iter_mut() {
            match &mut q.kind {
                ReqKind::Send(s) if s.ep == other => s.ep = ep,
                ReqKind::Rma(s) if s.ep == other => s.ep = ep,
                ReqKind::Flush(Some(x)) | ReqKind::Close(x) if *x == other => *x = ep,
                _ => {}
            }
        }
        // Stream receives posted while connecting take the bytes that came first.
        self.stream_satisfy(ep);
    }

    pub(crate) fn new_req(&mut self, kind: ReqKind, cb: Option<Callback>) -> Request {
        Request(self.reqs.get(Req {
            kind,
            status: None,
            info: RecvInfo::default(),
            cb,
            released: false,
        }))
    }

    /// Marks `r` complete with `status` and schedules its callback.
    pub(crate) fn complete(&mut self, r: Request, status: Status) {
        if let Some(q) = self.reqs.get_mut(r.0) {
            if q.status.is_some() {
                return;
            }
            q.status = Some(status);
            let counted = match &q.kind {
                ReqKind::Send(s) if s.remote_pending => Some(s.ep),
                ReqKind::Rma(s) => Some(s.ep),
                _ => None,
            };
            if let Some(Some(e)) = counted.and_then(|ep| self.eps.get_mut(ep as usize)) {
                e.outstanding = e.outstanding.saturating_sub(1);
            }
            if q.cb.is_some() || q.released {
                self.completed.push(r);
            }
        }
    }

    /// True when `ep` (or every endpoint) has no queued or unacknowledged operation.
    fn is_drained(&self, ep: Option<u32>) -> bool {
        let one = |e: &EpState| e.queue.is_empty() && e.outstanding == 0;
        match ep {
            Some(i) => self.ep(i).map_or(true, one),
            None => self.eps.iter().flatten().all(one) && self.deferred.is_empty(),
        }
    }
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
pub(crate) fn route(tls: &mut [Tl], st: &mut State, ep: u32) -> Result<Route> {
    let e = st.ep(ep)?;
    match (e.lane, e.status) {
        (_, EpStatus::Failed(s)) => Err(s),
        (Some(l), _) => Ok(Route::Lane(l)),
        (None, EpStatus::Connecting) => Ok(Route::Queue),
        _ => match connect(tls, st, ep) {
            Ok(l) => Ok(Route::Lane(l)),
            Err(s) => Ok(Route::Fail(s)),
        },
    }
}

/// Queues request `r` on `ep` (behind whatever is queued) and sends what can go now.
pub(crate) fn enqueue(tls: &mut [Tl], st: &mut State, ep: u32, q: Queued) -> Result<()> {
    let e = st.ep_mut(ep)?;
    e.queue.push_back(q);
    // An endpoint still waiting for its server has nothing to drain: it becomes active
    // when it connects. (Listing it now would keep the worker busy: `arm` refuses to
    // sleep while endpoints are active.)
    if e.queue.len() == 1 && e.lane.is_some() {
        st.active.push_back(ep);
    }
    crate::tag::api::drain_queue(tls, st, ep);
    Ok(())
}

/// Picks the lane for `ep` and creates its transport endpoint; queues the wireup message.
/// A failure to find or create one fails the endpoint (its error handler runs).
pub(crate) fn connect(tls: &mut [Tl], st: &mut State, ep: u32) -> Result<Lane> {
    let e = st.ep(ep)?;
    match (e.lane, e.status) {
        (_, EpStatus::Failed(s)) => return Err(s),
        (Some(l), _) => return Ok(l),
        (None, EpStatus::Connecting) => return Err(Status::InProgress),
        _ => {}
    }
    match pick_lane(tls, st, ep) {
        Ok(l) => Ok(l),
        Err(s) => {
            fail_ep(st, ep, s);
            Err(s)
        }
    }
}

fn pick_lane(tls: &mut [Tl], st: &mut State, ep: u32) -> Result<Lane> {
    let e = st.ep(ep)?;
    let dev = uct::shm::address::encode_device_addr(e.remote.host_id);
    let mut best: Option<(usize, usize, f64)> = None;
    let has_self = tls.iter().any(|t| t.transport == Transport::SelfTl);
    let tcp_full = st.tcp_eps >= st.cfg.tcp_max_eps;
    for (i, t) in tls.iter().enumerate() {
        if t.transport == Transport::Tcp && tcp_full {
            continue;
        }
        if t.transport == Transport::SelfTl && e.remote.uuid != st.uuid {
            continue;
        }
        if t.transport != Transport::SelfTl && e.remote.uuid == st.uuid && has_self {
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
    if !st.hot.contains(&tl) {
        st.hot.push(tl);
    }
    let attr = tls[tl].iface.attr();
    let rma = attr.caps.contains(uct::Caps::GET_ZCOPY);
    let lane = Lane {
        tl,
        ep: uct_ep,
        th: Thresholds::new(attr, &st.cfg, rma),
        entry,
    };
    if tls[tl].transport == Transport::Tcp {
        st.tcp_eps += 1;
    }
    let e = st.ep_mut(ep)?;
    e.lane = Some(lane);
    e.status = EpStatus::Connected;
    e.queue.push_front(Queued::Wireup);
    st.active.push_back(ep);
    select_queued(st, ep, &lane.th);
    Ok(lane)
}

/// Chooses the protocol of the sends queued before `ep` had a lane (it was connecting
/// through a server's socket address). A send that cannot go on this lane completes with
/// the error it would have got from the call.
pub(crate) fn select_queued(st: &mut State, ep: u32, th: &Thresholds) {
    let Ok(e) = st.ep(ep) else { return };
    let queued: Vec<Request> = e
        .queue
        .iter()
        .filter_map(|q| match q {
            Queued::Send(r) => Some(*r),
            _ => None,
        })
        .collect();
    let mut refused = Vec::new();
    for r in queued {
        let Some(q) = st.reqs.get_mut(r.0) else {
            continue;
        };
        let ReqKind::Send(s) = &mut q.kind else {
            continue;
        };
        if !s.select {
            continue;
        }
        s.select = false;
        let chosen = match &s.kind {
            SendKind::Tag => Ok(crate::tag::api::tag_proto(th, &s.buf, s.sync)),
            SendKind::Am(info) => crate::am::am_proto(th, info.header.len(), &s.buf, info.flags),
            SendKind::Stream => Ok(crate::proto::select::Proto::Multi),
        };
        match chosen {
            Ok(p) => s.proto = p,
            Err(x) => refused.push((r, x)),
        }
    }
    for (r, x) in refused {
        if let Ok(e) = st.ep_mut(ep) {
            e.queue.retain(|q| !matches!(q, Queued::Send(y) if *y == r));
        }
        st.complete(r, x);
    }
}

/// Marks `ep` failed: everything queued or waiting on it completes with `status`, the
/// application's error handler is scheduled, and later operations get `status`.
pub(crate) fn fail_ep(st: &mut State, ep: u32, status: Status) {
    let Ok(e) = st.ep_mut(ep) else { return };
    if matches!(e.status, EpStatus::Failed(_)) {
        return;
    }
    e.status = EpStatus::Failed(status);
    let queued: Vec<Queued> = e.queue.drain(..).collect();
    let streams: Vec<Request> = e.stream_reqs.drain(..).collect();
    let uuid = e.remote.uuid;
    tracing::info!("endpoint to worker {uuid:#x} failed: {status}");
    for q in queued {
        if let Queued::Send(r) | Queued::Rma(r) = q {
            st.complete(r, status);
        }
    }
    for r in streams {
        st.complete(r, status);
    }
    fail_waiting(st, ep, status);
    // Messages of that peer still being reassembled will never finish.
    let partial: Vec<Request> = st
        .frags
        .iter()
        .filter(|(k, _)| k.0 == uuid)
        .filter_map(|(_, d)| match d {
            FragDest::Req(r) => Some(*r),
            _ => None,
        })
        .collect();
    st.frags.retain(|k, _| k.0 != uuid);
    st.am.drop_partial_from(uuid);
    st.fail_rndv_from(uuid, status);
    for r in partial {
        st.complete(r, status);
    }
    st.active.retain(|&x| x != ep);
    st.ep_errors.push((ep, status));
}

/// Completes the sends of `ep` that wait for the peer's acknowledgement.
fn fail_waiting(st: &mut State, ep: u32, status: Status) {
    let waiting: Vec<Request> = st
        .reqs
        .iter()
        .filter_map(|(i, q)| match &q.kind {
            ReqKind::Send(s) if s.ep == ep && q.status.is_none() => Some(Request(i)),
            ReqKind::Rma(s) if s.ep == ep && q.status.is_none() => Some(Request(i)),
            _ => None,
        })
        .collect();
    for r in waiting {
        st.complete(r, status);
    }
}

/// Fails or cancels everything of `ep` and removes it.
fn destroy_ep(tls: &mut [Tl], st: &mut State, ep: u32, status: Status) {
    let Some(e) = st.eps.get_mut(ep as usize).and_then(Option::take) else {
        return;
    };
    if let Some(l) = e.lane {
        let _ = tls[l.tl].iface.ep_destroy(l.ep);
        if tls[l.tl].transport == Transport::Tcp {
            st.tcp_eps = st.tcp_eps.saturating_sub(1);
        }
    }
    if st.by_uuid.get(&e.remote.uuid) == Some(&ep) {
        st.by_uuid.remove(&e.remote.uuid);
    }
    for q in e.queue {
        if let Queued::Send(r) | Queued::Rma(r) = q {
            st.complete(r, status);
        }
    }
    for r in e.stream_reqs {
        st.complete(r, status);
    }
    // Sends waiting for an acknowledgement from this peer will never get one.
    fail_waiting(st, ep, status);
    st.active.retain(|&x| x != ep);
}
