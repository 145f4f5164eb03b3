//! The worker: its transport interfaces, its core (requests, endpoints) and protocol
//! state, progress, flush and close, and the wakeup descriptor. The public API of each
//! protocol is in a file of its own here (`tag`, `am`, `stream`, `rma`, `listener`); the
//! work is done by the protocol modules and the engine below.
//!
//! Structure. `Worker` keeps its interfaces (`tls`) apart from the rest of its state, so
//! progress can lend the core and the protocols to an interface's receive callback
//! without boxed handlers. Anything a receive callback would need an interface for (a
//! reply, a rendezvous read) is queued by the protocol and done right after; user
//! callbacks are collected and run last, when the worker is consistent again.
//!
//! Endpoints connect lazily: creating one only decodes the address; the first operation
//! picks the lane, creates the transport endpoint and queues a wireup message that tells
//! the peer who we are (so it can answer synchronous sends and rendezvous).
//!
//! `serve.rs` holds the progress a progress thread takes on the application's behalf
//! (`crate::progress_thread`): the same work as [`Worker::progress`] minus user code.

mod am;
mod listener;
mod owned;
mod rma;
mod serve;
mod stream;
mod tag;

use crate::address::{tl_id, WorkerAddress};
use crate::context::Context;
pub use crate::core::ep::{Ep, EpStatus, ErrHandler};
use crate::core::ep::{EpState, Thresholds};
use crate::core::request::*;
use crate::core::{connect, fail_ep, Core, Post, Tl};
use crate::engine::{self, destroy_ep, Protocols};
pub use crate::tag::Message;
pub use owned::{Sent, Taken};
use std::os::fd::{AsFd, BorrowedFd};
use ucs::sys::EventFd;
use ucs::{EventSet, Events, Removal, Result, Status};
use uct::{Iface, Transport};

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

/// The least time between two full turns of [`Worker::progress`] (see
/// `Worker::full_turn_now`): 200 µs, so a system call per full turn costs a polling loop
/// well under 1% of its time, while a new connection or a dead peer waits at most this
/// long beyond its event.
const FULL_TURN_PERIOD_NS: u64 = 200_000;

/// The least time between two looks at which endpoints await an answer from their peer
/// (`Worker::tell_awaiting`): the probes this arms are a second apart.
const AWAIT_SWEEP_NS: u64 = 100_000_000;

/// A worker.
pub struct Worker {
    ctx: Context,
    tick: u32,
    /// When the last full turn ran ([`Worker::progress`]), in `ucs::now_ns` time.
    full_turn_at: u64,
    /// The next progress call whose `tick` comes round makes a full turn whatever the
    /// time (after a sleep, or when a progress thread held active messages back).
    full_turn_due: bool,
    /// When the endpoints were last looked at for `tell_awaiting`, in `ucs::now_ns` time.
    await_sweep_at: u64,
    /// Listeners and their pending connection requests.
    pub(crate) cm: crate::cm::CmState,
    mode: ThreadMode,
    pub(crate) tls: Vec<Tl>,
    pub(crate) core: Core,
    pub(crate) p: Protocols,
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
            let attr = iface.attr();
            let rma = attr.caps.contains(uct::Caps::GET_ZCOPY);
            let th = crate::proto::select::thresholds(attr, ctx.config(), rma);
            tls.push(Tl {
                transport: r.transport,
                iface,
                md: ctx.md(i).clone(),
                th,
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
            full_turn_at: 0,
            full_turn_due: false,
            await_sweep_at: 0,
            cm: crate::cm::CmState::default(),
            mode,
            tls,
            core: Core::new(ctx, uuid, my_address),
            p: Protocols::default(),
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
        self.core.uuid
    }

    /// Malformed protocol messages dropped so far.
    pub fn dropped(&self) -> u64 {
        self.core.dropped
    }

    /// How many rendezvous receives of this worker had their copy split with the sender
    /// (shared memory, from `UCX_RUCX_RNDV_SPLIT` bytes).
    pub fn rndv_splits(&self) -> u64 {
        self.core.splits
    }

    /// Turns the split rendezvous on or off for this worker's receives from now on (on by
    /// default above `UCX_RUCX_RNDV_SPLIT`). A receive in a split cannot be aborted until
    /// its sender's fin: an owner that aborts receives it gave up on, and cannot wait for
    /// that, turns it off.
    pub fn set_rndv_split(&mut self, on: bool) {
        self.core.split_off = !on;
    }

    /// Runs `post` (a blocking call posting its receive) with the split rendezvous off,
    /// and marks the receive it made so that it never splits later: the call aborts the
    /// receive if it gives up, which a split would not allow.
    pub(crate) fn posting_lent(
        &mut self,
        post: impl FnOnce(&mut Worker) -> Result<Request>,
    ) -> Result<Request> {
        self.core.lending = true;
        let r = post(self);
        self.core.lending = false;
        let r = r?;
        if let Some(rs) = self.core.recv_state(r) {
            rs.no_split = true;
        }
        Ok(r)
    }

    /// The worker's address. Handing it out means peers may send at any time, so every
    /// interface that can receive from another process is progressed from now on.
    pub fn address(&mut self) -> Vec<u8> {
        for (i, t) in self.tls.iter_mut().enumerate() {
            if t.transport != Transport::SelfTl {
                t.live = true;
                if !t.iface.is_idle() && !self.core.hot.contains(&i) {
                    self.core.hot.push(i);
                }
            }
        }
        self.core.my_address.clone()
    }

    // ----- endpoints -------------------------------------------------------------------

    /// Creates an endpoint to the worker at `address`. Nothing is sent and no transport
    /// resource is taken until the first operation.
    pub fn ep_create(&mut self, address: &[u8]) -> Result<Ep> {
        let remote = WorkerAddress::decode(address)?;
        let uuid = remote.uuid;
        // A peer that connected to us first already has an endpoint (made on its wireup,
        // holding whatever it sent, e.g. stream bytes): that one becomes the application's.
        if let Some(&idx) = self.core.by_uuid.get(&uuid) {
            if let Ok(e) = self.core.ep_mut(idx) {
                if e.implicit {
                    e.implicit = false;
                    return Ok(self.core.handle(idx));
                }
            }
        }
        let idx = self.core.insert_ep(remote);
        self.core.by_uuid.entry(uuid).or_insert(idx);
        Ok(self.core.handle(idx))
    }

    /// The endpoint's state.
    pub fn ep_status(&self, ep: Ep) -> Result<EpStatus> {
        self.core.check(ep)?;
        self.core.ep(ep.0).map(|e| e.status)
    }

    /// The transport an endpoint uses once connected.
    pub fn ep_transport(&self, ep: Ep) -> Result<Option<Transport>> {
        self.core.check(ep)?;
        let e = self.core.ep(ep.0)?;
        Ok(e.lane.map(|l| self.tls[l.tl].transport))
    }

    /// The protocol thresholds of a connected endpoint (`None` before it connects).
    pub fn ep_thresholds(&self, ep: Ep) -> Result<Option<Thresholds>> {
        self.core.check(ep)?;
        Ok(self.core.ep(ep.0)?.lane.map(|l| self.tls[l.tl].th))
    }

    /// Progresses until `ep` is no longer waiting for its server's answer (endpoints made
    /// from a socket address), or `timeout` passes (`TimedOut`).
    pub fn wait_connecting(&mut self, ep: Ep, timeout: std::time::Duration) -> Result<()> {
        self.core.check(ep)?;
        let deadline = std::time::Instant::now() + timeout;
        while self.core.ep(ep.0)?.status == EpStatus::Connecting {
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
        self.core.check(ep)?;
        connect(&mut self.tls, &mut self.core, ep.0).map(|_| ())
    }

    // ----- progress --------------------------------------------------------------------

    /// Whether this progress call (one in 256) makes a full turn: polling every
    /// interface, also those that only wait for new peers, and checking that peers live.
    /// A full turn costs system calls (an `epoll_wait` per shared-memory interface and per
    /// socket-based one without connections), so it is also spaced in time: at most one
    /// per [`FULL_TURN_PERIOD_NS`], unless one is due at once. A tight polling loop (a
    /// ping-pong) then pays a clock read per 256 calls, not a system call.
    #[inline(never)]
    fn full_turn_now(&mut self) -> bool {
        let now = ucs::now_ns();
        if self.full_turn_due || now.wrapping_sub(self.full_turn_at) >= FULL_TURN_PERIOD_NS {
            self.full_turn_due = false;
            self.full_turn_at = now;
            return true;
        }
        false
    }

    /// Makes the next progress call whose tick comes round a full turn.
    pub(crate) fn full_turn_next(&mut self) {
        self.tick |= 0xff;
        self.full_turn_due = true;
    }

    /// A diagnostic dump of what the worker holds (outstanding protocol state and every
    /// interface's own state, see [`uct::Iface::describe`]), for the report of a run
    /// that stalled. Slow; not for the data path.
    pub fn describe(&self) -> String {
        let t = &self.p.tag;
        let mut s = format!(
            "worker {:#x}: active {} completed {} flushes {} failed ops {} dropped {}; \
             tag posted {} unexpected {} frags {} acks {}; rndv work {} rx {}; rma replies {}\n",
            self.core.uuid,
            self.core.active.len(),
            self.core.completed.len(),
            self.core.flushes.len(),
            self.core.failed_ops.len(),
            self.core.dropped,
            t.matcher.posted_len(),
            t.matcher.unexpected_len(),
            t.frags.len(),
            t.acks.len(),
            self.p.rndv.work.len(),
            self.p.rndv.rx.len(),
            self.p.rma.replies.len(),
        );
        for tl in &self.tls {
            s.push_str(&tl.iface.describe());
            s.push('\n');
        }
        s
    }

    /// Makes progress on everything outstanding; returns the number of events handled.
    ///
    /// Kept small for the polling loop of an idle or waiting application: an interface
    /// with nothing to read and no sends waiting is skipped without a call into it
    /// ([`uct::Iface::needs_poll`]), and the work queues are looked at together, with the
    /// rest of the turn out of line.
    pub fn progress(&mut self) -> usize {
        self.tick = self.tick.wrapping_add(1);
        if self.tick % 256 == 0 {
            return self.progress_turn();
        }
        // Looked at without a call, so that a loop polling an idle worker pays only this.
        let first = self.first_due();
        if first < self.core.hot.len() || self.work_due() {
            return self.progress_hot(first);
        }
        0
    }

    /// The position in the hot list of the first interface that may have something for
    /// [`Self::progress_hot`], or the list's length when none has.
    #[inline(always)]
    fn first_due(&self) -> usize {
        let hot = &self.core.hot;
        for (k, &i) in hot.iter().enumerate() {
            if self.tls.get(i).is_some_and(|t| t.iface.needs_poll()) {
                return k;
            }
        }
        hot.len()
    }

    /// Polls the hot interfaces that need it from position `first` of the hot list on
    /// (the one there was seen to need it: it is not looked at again), then does the rest
    /// of the turn if due.
    #[inline(never)]
    fn progress_hot(&mut self, first: usize) -> usize {
        // `first` is the list's length when only the work queues called.
        let (mut n, mut events) = match self.core.hot.get(first) {
            Some(&i) => self.poll_iface(i),
            None => (0, false),
        };
        // Usually the only hot interface: the rest of the list is then empty.
        for k in first + 1..self.core.hot.len() {
            let i = self.core.hot[k];
            if self.tls.get(i).is_some_and(|t| t.iface.needs_poll()) {
                let (m, e) = self.poll_iface(i);
                n += m;
                events |= e;
            }
        }
        if events || self.work_due() {
            n += self.progress_rest(false, events);
        }
        n
    }

    /// Polls interface `i` (an index into `tls`), dispatching what arrived; returns the
    /// number of events and whether the interface reports events.
    #[inline(always)]
    fn poll_iface(&mut self, i: usize) -> (usize, bool) {
        let (core, p) = (&mut self.core, &mut self.p);
        self.tls[i].iface.progress_with_events(
            #[inline(always)]
            |id, d| engine::dispatch(core, p, id, d),
        )
    }

    /// True when a queue that the rest of a progress turn serves is not empty. The
    /// checks are or-ed without branching: in a polling loop they are all false.
    #[inline(always)]
    fn work_due(&self) -> bool {
        let c = &self.core;
        !self.cm.connecting.is_empty()
            | !self.p.idle()
            | !c.active.is_empty()
            | !c.flushes.is_empty()
            | !c.completed.is_empty()
            | !c.ep_errors.is_empty()
            | !c.failed_ops.is_empty()
            | !self.cm.new_requests.is_empty()
    }

    /// One progress call in 256: the full turn when one is due ([`Self::full_turn_now`]),
    /// else the hot interfaces as [`Self::progress`] polls them.
    #[inline(never)]
    fn progress_turn(&mut self) -> usize {
        let idle_turn = self.full_turn_now();
        let mut n = 0;
        let mut events = false;
        let (core, p) = (&mut self.core, &mut self.p);
        if idle_turn {
            // Every live interface, and the list of those to poll on every call: a
            // connection-based interface without connections only waits for new ones, so
            // it is polled on these turns only. Active messages a progress thread held
            // back are older than anything still in the transports: they go first (the
            // thread makes the turn after it holds one a full turn).
            if !p.am.held.is_empty() {
                engine::replay_held(core, p);
            }
            core.hot.clear();
            for (i, t) in self.tls.iter_mut().enumerate() {
                if t.live {
                    n += t
                        .iface
                        .progress_with(|id, d| engine::dispatch(core, p, id, d));
                    t.iface.check_peers();
                    events |= t.iface.has_events();
                    if !t.iface.is_idle() {
                        core.hot.push(i);
                    }
                }
            }
        } else {
            for k in 0..core.hot.len() {
                let t = &mut self.tls[core.hot[k]];
                n += t
                    .iface
                    .progress_with(|id, d| engine::dispatch(core, p, id, d));
                events |= t.iface.has_events();
            }
        }
        if idle_turn {
            self.tell_awaiting();
        }
        n + self.progress_rest(idle_turn, events)
    }

    /// Tells each udp lane whether its endpoint awaits an answer from the peer (emulated
    /// RMA and atomics, synchronous sends: `EpState::outstanding`), so that udp probes a
    /// silent peer meanwhile and finds it dead after `UCX_UDP_TIMEOUT` even when the
    /// peer acknowledged the request before it died. Other transports find dead peers by
    /// themselves. Done on full turns, at most every [`AWAIT_SWEEP_NS`].
    fn tell_awaiting(&mut self) {
        let now = self.full_turn_at;
        if now.wrapping_sub(self.await_sweep_at) < AWAIT_SWEEP_NS
            || !self.tls.iter().any(|t| t.transport == Transport::Udp)
        {
            return;
        }
        self.await_sweep_at = now;
        for e in self.core.eps.iter().flatten() {
            if let Some(l) = e.lane {
                if let Some(t) = self.tls.get_mut(l.tl) {
                    if t.transport == Transport::Udp {
                        let _ = t.iface.set_awaiting(l.ep, e.outstanding > 0);
                    }
                }
            }
        }
    }

    /// The rest of a progress turn, after the interfaces were polled: broken
    /// connections, connections under way, listeners (on full turns), protocol work,
    /// queued sends, flushes, and last the user callbacks.
    #[inline(never)]
    fn progress_rest(&mut self, idle_turn: bool, events: bool) -> usize {
        let mut n = 0;
        if events {
            self.handle_iface_events();
        }
        if !self.cm.connecting.is_empty() {
            n += self.poll_connecting();
        }
        if idle_turn && !self.cm.listeners.is_empty() && self.cm.poll() {
            n += 1;
        }
        if !self.p.idle() {
            n += engine::run_work(&mut self.tls, &mut self.core, &mut self.p);
        }
        if !self.core.active.is_empty() {
            n += engine::run_queues(&mut self.tls, &mut self.core);
        }
        if !self.core.flushes.is_empty() {
            self.check_flushes();
        }
        if !self.core.completed.is_empty()
            || !self.core.ep_errors.is_empty()
            || !self.core.failed_ops.is_empty()
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
                    .core
                    .eps
                    .iter()
                    .enumerate()
                    .filter_map(|(i, e)| {
                        let e = e.as_ref()?;
                        let hit = match (&ev, e.lane) {
                            (uct::IfaceEvent::EpFailed(uep, _), Some(l)) => {
                                l.tl == tl && l.ep == *uep
                            }
                            (uct::IfaceEvent::EpFailed(..), None) => false,
                            // A peer that is gone fails every endpoint to it, also one
                            // that never connected (it may have received from the peer:
                            // what is half received from it must be released). Not so
                            // over tcp, where the event means that a connection closed:
                            // a peer closes connections it no longer needs without dying.
                            (uct::IfaceEvent::PeerClosed(addr), lane) => {
                                let transport = self.tls[tl].transport;
                                match lane {
                                    Some(l) => {
                                        l.tl == tl
                                            && e.remote
                                                .ifaces
                                                .get(l.entry)
                                                .is_some_and(|x| x.addr == *addr)
                                    }
                                    None => {
                                        transport != Transport::Tcp
                                            && e.remote.ifaces.iter().any(|x| {
                                                x.transport == Some(transport) && x.addr == *addr
                                            })
                                    }
                                }
                            }
                        };
                        hit.then_some(i as u32)
                    })
                    .collect();
                let status = match ev {
                    uct::IfaceEvent::EpFailed(_, s) => s,
                    uct::IfaceEvent::PeerClosed(_) => Status::ConnectionReset,
                };
                for ep in victims {
                    fail_ep(&mut self.core, ep, status);
                }
            }
        }
    }

    /// Installs the handler called once if `ep` fails (UCP's error handling mode "peer").
    pub fn ep_set_err_handler(&mut self, ep: Ep, h: Option<ErrHandler>) -> Result<()> {
        self.core.check(ep)?;
        self.core.ep_mut(ep.0)?.err_handler = h;
        Ok(())
    }

    fn check_flushes(&mut self) {
        let mut i = 0;
        while i < self.core.flushes.len() {
            let r = self.core.flushes[i];
            let target = match self.core.reqs.get_ref(r.0).map(|q| &q.kind) {
                Some(ReqKind::Flush(t)) => (*t, false),
                Some(ReqKind::Close(e)) => (Some(*e), true),
                _ => {
                    self.core.flushes.swap_remove(i);
                    continue;
                }
            };
            if self.drained(target.0) && self.lanes_flushed(target.0) {
                self.core.flushes.swap_remove(i);
                self.core.release_idle_queues(target.0);
                if let (Some(e), true) = target {
                    destroy_ep(
                        &mut self.tls,
                        &mut self.core,
                        &mut self.p,
                        e,
                        Status::Canceled,
                    );
                }
                self.core.complete(r, Status::Ok);
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
            Some(i) => self.core.ep(i).map_or(true, flushed),
            None => self.core.eps.iter().flatten().all(flushed),
        }
    }

    fn run_callbacks(&mut self) {
        if !self.core.failed_peers.is_empty() {
            engine::forget_failed_peers(&mut self.core, &mut self.p);
        }
        for (l, id, client) in std::mem::take(&mut self.cm.new_requests) {
            if let Some(Some(slot)) = self.cm.listeners.get_mut(l as usize) {
                (slot.handler)(crate::cm::ConnReqId(id), client);
            }
        }
        for (ep, s) in std::mem::take(&mut self.core.ep_errors) {
            let h = self.core.ep_mut(ep).ok().and_then(|e| e.err_handler.take());
            if let Some(mut h) = h {
                h(self.core.handle(ep), s);
            }
        }
        engine::run_completions(&mut self.core);
    }

    /// True when `ep` (or every endpoint) has nothing queued or unacknowledged, and (for
    /// the whole worker) no protocol has work waiting.
    fn drained(&self, ep: Option<u32>) -> bool {
        self.core.is_drained(ep) && (ep.is_some() || self.p.idle())
    }

    // ----- requests --------------------------------------------------------------------

    /// Hands the completions of requests started with [`Callback::Word`] to `f`, in
    /// completion order; returns how many. They are collected by [`Worker::progress`] (and
    /// the calls that progress); a released request is already freed when `f` sees it.
    pub fn drain_completed(&mut self, mut f: impl FnMut(Completed)) -> usize {
        let n = self.core.words.len();
        for c in self.core.words.drain(..) {
            f(c);
        }
        n
    }

    /// Attaches completion queue `cq` to this worker, for [`Callback::cq_attached`]:
    /// operations of this worker then name it by index and count no reference per
    /// operation. The worker keeps it until the worker goes; attaching it again gives
    /// the same id.
    pub fn cq_attach(&mut self, cq: &crate::core::cq::Cq) -> crate::core::cq::CqId {
        self.core.cq_attach(cq)
    }

    /// True when [`Worker::drain_completed`] has something to hand out.
    pub fn has_completed(&self) -> bool {
        !self.core.words.is_empty()
    }

    /// The status of a request: `None` while in progress.
    pub fn request_test(&self, r: Request) -> Result<Option<Status>> {
        self.core
            .reqs
            .get_ref(r.0)
            .map(|q| q.status)
            .ok_or(Status::InvalidParam)
    }

    /// The receive information of a completed receive request.
    pub fn request_info(&self, r: Request) -> Result<RecvInfo> {
        self.core
            .reqs
            .get_ref(r.0)
            .map(|q| q.info)
            .ok_or(Status::InvalidParam)
    }

    /// If `r` completed: its status and receive information, and the request is released
    /// (as [`Worker::request_free`]); `None` while it is in progress. One look at the
    /// request instead of the three of test, info and free.
    #[inline(always)]
    pub fn request_take(&mut self, r: Request) -> Result<Option<(Status, RecvInfo)>> {
        let mut out = None;
        // One lookup, as in `request_free`.
        self.core
            .reqs
            .remove_with(r.0, |q| {
                let Some(status) = q.status else {
                    return Removal::Keep;
                };
                out = Some((status, q.info));
                if q.cb.is_some() {
                    q.released = true;
                    Removal::Keep
                } else if q.owns_nothing() {
                    Removal::Forget
                } else {
                    Removal::Drop
                }
            })
            .ok_or(Status::InvalidParam)?;
        Ok(out)
    }

    /// Reports the completion of an operation that has no request (it completed, or failed
    /// to start, where nobody could be told in the call) into its completion queue.
    pub(crate) fn report_now(&mut self, cb: Callback, op: crate::core::cq::CqOp, status: Status) {
        if let Callback::Cq(mut t) = cb {
            if t.op == crate::core::cq::CqOp::None {
                t.op = op;
            }
            t.report(&mut self.core.cqs, status, 0, 0, None);
        }
    }

    /// Hands request `r` (started without a callback) to the word-completion path: its
    /// completion is reported through [`Worker::drain_completed`] with `word` and the
    /// request freed then. If it already completed, it is freed now and its outcome
    /// returned instead.
    pub fn request_adopt(&mut self, r: Request, word: u64) -> Option<(Status, RecvInfo)> {
        let Some(q) = self.core.reqs.get_mut(r.0) else {
            // Not a live request: nothing will ever report it.
            return Some((Status::NoElem, RecvInfo::default()));
        };
        if let Some(status) = q.status {
            let info = q.info;
            self.core.reqs.remove(r.0);
            return Some((status, info));
        }
        q.cb = Some(Callback::Word(word));
        q.released = true;
        None
    }

    /// Releases a request: now if it completed, else when it completes (its callback
    /// still runs).
    pub fn request_free(&mut self, r: Request) -> Result<()> {
        // One lookup: a completed request with no callback to report goes now, any other
        // is marked released and goes when it completes.
        self.core
            .reqs
            .remove_with(r.0, |q| {
                if q.status.is_none() || q.cb.is_some() {
                    q.released = true;
                    Removal::Keep
                } else if q.owns_nothing() {
                    Removal::Forget
                } else {
                    Removal::Drop
                }
            })
            .map(|_| ())
            .ok_or(Status::InvalidParam)
    }

    /// Cancels a posted receive that has not matched: it completes with `Canceled`.
    /// Other requests cannot be canceled; that is not an error (as in UCX).
    pub fn request_cancel(&mut self, r: Request) -> Result<()> {
        engine::cancel(&mut self.core, &mut self.p, r)
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
        self.core.check(ep)?;
        self.core.ep(ep.0)?;
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
        let mut cb = cb;
        self.core.stamp(&mut cb, crate::core::cq::CqOp::Flush)?;
        self.progress();
        if self.drained(target) && self.lanes_flushed(target) {
            self.core.release_idle_queues(target);
            if let Some(Callback::Cq(t)) = cb {
                let ep = target.map(|e| self.core.handle(e));
                t.report(&mut self.core.cqs, Status::Ok, 0, 0, ep);
            }
            return Ok(None);
        }
        let r = self.core.new_req(kind, cb);
        self.core.flushes.push(r);
        Ok(Some(r))
    }

    /// Closes `ep`. With `force`, outstanding operations complete with `Canceled` and the
    /// endpoint is gone at once; otherwise it is flushed first and the returned request
    /// completes when it is gone.
    pub fn ep_close_nb(&mut self, ep: Ep, force: bool) -> Result<Option<Request>> {
        self.core.check(ep)?;
        self.core.ep(ep.0)?;
        self.cm.sockaddrs.remove(&ep.0);
        if let Some(i) = self.cm.connecting.iter().position(|c| c.ep == ep.0) {
            // Still waiting for its server: closing gives the connection up, whatever
            // was queued on the endpoint completes with Canceled.
            let c = self.cm.connecting.swap_remove(i);
            self.remove_wakeup_fd(c.client.fd());
            destroy_ep(
                &mut self.tls,
                &mut self.core,
                &mut self.p,
                ep.0,
                Status::Canceled,
            );
            self.run_callbacks();
            return Ok(None);
        }
        if force {
            destroy_ep(
                &mut self.tls,
                &mut self.core,
                &mut self.p,
                ep.0,
                Status::Canceled,
            );
            self.run_callbacks();
            return Ok(None);
        }
        self.progress();
        if self.core.is_drained(Some(ep.0)) {
            destroy_ep(
                &mut self.tls,
                &mut self.core,
                &mut self.p,
                ep.0,
                Status::Canceled,
            );
            return Ok(None);
        }
        let r = self.core.new_req(ReqKind::Close(ep.0), None);
        self.core.flushes.push(r);
        Ok(Some(r))
    }

    // ----- wakeup ----------------------------------------------------------------------

    /// A descriptor that becomes readable when the worker has events after [`Worker::arm`].
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.events.as_fd()
    }

    /// Prepares to sleep on the event descriptor. `Busy` means there is work now.
    pub fn arm(&mut self) -> Result<()> {
        // Whatever wakes the caller may be on an interface polled only in full turns (a
        // new connection, a first datagram from a new peer): the next progress makes one.
        self.full_turn_next();
        if !self.p.idle()
            || !self.p.am.held.is_empty()
            || !self.core.completed.is_empty()
            || !self.core.active.is_empty()
            || !self.core.ep_errors.is_empty()
            || !self.core.failed_ops.is_empty()
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
        for (_, posted) in self.p.tag.matcher.drain_posted() {
            match posted {
                crate::tag::PostedRecv::Req(r) => self.core.complete(r, Status::Canceled),
                crate::tag::PostedRecv::Word { word, .. } => {
                    self.core
                        .report_word(word, Status::Canceled, RecvInfo::default())
                }
            }
        }
        for ep in 0..self.core.eps.len() as u32 {
            if self.core.eps[ep as usize].is_some() {
                destroy_ep(
                    &mut self.tls,
                    &mut self.core,
                    &mut self.p,
                    ep,
                    Status::Canceled,
                );
            }
        }
        self.run_callbacks();
    }
}

/// Queues what a protocol call could not finish and returns the request to the caller.
#[inline]
fn posted(
    tls: &mut [Tl],
    core: &mut Core,
    ep: u32,
    post: Post,
    rma: bool,
    imm: Imm,
) -> Result<Option<Request>> {
    match post {
        Post::Done(None) => Ok(None),
        Post::Done(Some(cb)) => {
            cb.done_in_call(|t| report_in_call(core, ep, t, imm));
            Ok(None)
        }
        Post::Started(r) => Ok(Some(r)),
        Post::Queue(r) => {
            let q = if rma {
                crate::core::ep::Queued::Rma(r)
            } else {
                crate::core::ep::Queued::Send(r)
            };
            engine::enqueue(tls, core, ep, q)?;
            Ok(Some(r))
        }
    }
}

/// An operation that names a completion queue completed in the call: the queue gets its
/// entry. Off the common path.
#[cold]
#[inline(never)]
fn report_in_call(core: &mut Core, ep: u32, t: crate::core::cq::CqTarget, imm: Imm) {
    let ep = Some(core.handle(ep));
    t.report(&mut core.cqs, Status::Ok, imm.length, imm.tag, ep);
}

/// What a completion-queue entry of an operation that completed in the call reports.
#[derive(Clone, Copy, Default)]
pub(crate) struct Imm {
    pub length: usize,
    pub tag: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker over the self transport with an endpoint to itself.
    fn self_worker() -> (Worker, Ep) {
        let ctx = crate::Context::with_config(
            crate::Features::TAG,
            crate::Config {
                transports: vec![Transport::SelfTl],
                ..crate::Config::from_env().unwrap()
            },
            uct::IfaceConfig::from_env().unwrap(),
        )
        .unwrap();
        let mut w = Worker::new(&ctx, crate::ThreadMode::Single).unwrap();
        let addr = w.address();
        let ep = w.ep_create(&addr).unwrap();
        (w, ep)
    }

    #[test]
    fn a_flushed_endpoint_keeps_no_queue_storage() {
        let (mut w, ep) = self_worker();
        let msg = *b"queued behind the wireup";
        w.tag_send(ep, &msg, 5).unwrap();
        let mut got = [0u8; 24];
        let info = w.tag_recv(&mut got, 5, u64::MAX).unwrap();
        assert_eq!((info.length, got), (msg.len(), msg));
        // Connecting queued the wireup: the queue has storage until a flush finds it
        // empty.
        assert!(w.core.ep(ep.0).unwrap().queue.capacity() > 0);
        w.flush_ep_blocking(ep).unwrap();
        assert_eq!(w.core.ep(ep.0).unwrap().queue.capacity(), 0);
        // It still sends.
        w.tag_send(ep, &msg[..4], 6).unwrap();
        let info = w.tag_recv(&mut got, 6, u64::MAX).unwrap();
        assert_eq!((info.length, &got[..4]), (4, &msg[..4]));
    }

    /// `rndv::split::judge`: three late splits in a row from a peer turn its splits off
    /// for `SKIP_AFTER_LATE` rendezvous; one on time in between starts the count again;
    /// a split that did not run alone (others started since) is not judged.
    #[test]
    fn late_splits_in_a_row_turn_splitting_off_for_a_while() {
        use crate::rndv::put::Part;
        use crate::rndv::split::{judge, LATE_IN_A_ROW, SKIP_AFTER_LATE};
        use std::time::{Duration, Instant};
        let (mut w, ep) = self_worker();
        w.tag_send(ep, b"connect", 1).unwrap();
        let mut got = [0u8; 7];
        w.tag_recv(&mut got, 1, u64::MAX).unwrap();
        let uuid = w.core.uuid;
        let i = w
            .core
            .ep_of(uuid)
            .expect("the endpoint to this worker by its id");
        let seq = w.core.splits;
        // The peer's fin came a second after this side's 1 ms read ended: late.
        let late = Some(Part::Read {
            status: Status::Ok,
            end: Instant::now() - Duration::from_secs(1),
            took: Duration::from_millis(1),
            seq,
        });
        // It came at once after a read of a second: on time.
        let on_time = Some(Part::Read {
            status: Status::Ok,
            end: Instant::now(),
            took: Duration::from_secs(1),
            seq,
        });
        let skip = |w: &Worker| w.core.ep(i).unwrap().split_skip;
        for _ in 1..LATE_IN_A_ROW {
            judge(&mut w.core, uuid, late);
        }
        judge(&mut w.core, uuid, on_time);
        judge(&mut w.core, uuid, late);
        assert_eq!(
            skip(&w),
            0,
            "an on-time split in between restarts the count"
        );
        // Not alone: the worker's count of splits moved on since this one's read (any
        // other value than the count now).
        let mut crowded = late;
        if let Some(Part::Read { seq, .. }) = crowded.as_mut() {
            *seq += 1;
        }
        for _ in 0..2 * LATE_IN_A_ROW {
            judge(&mut w.core, uuid, crowded);
        }
        assert_eq!(skip(&w), 0, "splits that overlapped others are not judged");
        for _ in 1..LATE_IN_A_ROW {
            judge(&mut w.core, uuid, late);
        }
        assert_eq!(skip(&w), SKIP_AFTER_LATE);
        // A fin of a receive that did not split judges nothing.
        judge(&mut w.core, uuid, None);
        assert_eq!(skip(&w), SKIP_AFTER_LATE);
    }
}
