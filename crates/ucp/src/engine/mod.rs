//! The protocol engine: the send queues of endpoints, the receive dispatch (one `match`
//! on the message id), the work the protocols found while receiving and that needs a
//! transport, completions, and the endpoint events that concern every protocol
//! (failure, destruction, adoption of an implicit endpoint).
//!
//! Invariants: an endpoint is listed in `Core::active` while its queue is non-empty and it
//! has a lane; a receive handler never calls a transport (it queues work that `run_work`
//! does), so handlers can run inside an interface's progress.

use crate::am::AmState;
use crate::core::ep::Queued;
use crate::core::request::*;
use crate::core::{send_wireup, Core, Tl};
use crate::proto::header::*;
use crate::proto::AmId;
use crate::rma::RmaTarget;
use crate::rndv::RndvState;
use crate::stream::StreamState;
use crate::tag::TagState;
use ucs::{Result, Status};

/// The protocols' state in a worker.
#[derive(Default)]
pub(crate) struct Protocols {
    pub tag: TagState,
    pub am: AmState,
    pub stream: StreamState,
    pub rma: RmaTarget,
    pub rndv: RndvState,
}

impl Protocols {
    /// True when no protocol has work waiting for a transport.
    #[inline]
    pub(crate) fn idle(&self) -> bool {
        self.tag.acks.is_empty() && self.rndv.work.is_empty() && self.rma.replies.is_empty()
    }
}

/// Handles one protocol message from a transport. Malformed messages are counted and
/// dropped.
#[inline(always)]
pub(crate) fn dispatch(core: &mut Core, p: &mut Protocols, id: u8, d: &[u8]) {
    if id == AmId::EagerOnly.id() {
        // The most frequent message, first, without the table and in the transport's
        // poll loop.
        match decode_eager_only(d) {
            Ok((tag, data)) => crate::tag::recv::eager(core, &mut p.tag, tag, data, None),
            Err(s) => dropped(core, id, d, s),
        }
        return;
    }
    dispatch_rest(core, p, id, d);
}

/// [`dispatch`] for every message but the eager-only one: out of line, so that the poll
/// loops that inline [`dispatch`] stay small.
#[inline(never)]
fn dispatch_rest(core: &mut Core, p: &mut Protocols, id: u8, d: &[u8]) {
    let r = if id == AmId::AmEager.id() {
        // Small active messages, second: their handler call is the application's.
        crate::am::on_eager(core, &mut p.am, d)
    } else {
        match AmId::from_u8(id) {
            Some(a) => dispatch_other(core, p, a, d),
            None => Err(Status::InvalidParam),
        }
    };
    if let Err(s) = r {
        dropped(core, id, d, s);
    }
}

/// [`dispatch`] for a progress thread: active messages, whose handlers are the
/// application's, are held for its next progress ([`replay_held`]); the rest (tag
/// matching, rendezvous, emulated RMA, acknowledgements) is handled now.
pub(crate) fn dispatch_serving(core: &mut Core, p: &mut Protocols, id: u8, d: &[u8]) {
    let user = matches!(
        AmId::from_u8(id),
        Some(AmId::AmEager | AmId::AmRts | AmId::AmFirst | AmId::AmMiddle)
    );
    if user {
        p.am.held.push_back((id, d.to_vec()));
    } else {
        dispatch(core, p, id, d);
    }
}

/// Handles the active messages a progress thread held back, in arrival order.
#[cold]
pub(crate) fn replay_held(core: &mut Core, p: &mut Protocols) {
    while let Some((id, d)) = p.am.held.pop_front() {
        dispatch(core, p, id, &d);
    }
}

#[cold]
fn dropped(core: &mut Core, id: u8, d: &[u8], s: Status) {
    core.dropped += 1;
    tracing::debug!("dropped protocol message id {id} ({} bytes): {s}", d.len());
}

fn dispatch_other(core: &mut Core, p: &mut Protocols, id: AmId, d: &[u8]) -> Result<()> {
    use crate::tag::recv;
    match id {
        AmId::EagerOnly => {
            decode_eager_only(d).map(|(tag, data)| recv::eager(core, &mut p.tag, tag, data, None))
        }
        AmId::EagerSync => EagerSync::decode(d)
            .map(|(h, data)| recv::eager(core, &mut p.tag, h.tag, data, Some((h.uuid, h.sreq)))),
        AmId::EagerFirst => {
            EagerFirst::decode(d).and_then(|(h, data)| recv::first(core, &mut p.tag, h, data))
        }
        AmId::EagerMiddle => {
            EagerMiddle::decode(d).and_then(|(h, data)| recv::middle(core, &mut p.tag, h, data))
        }
        AmId::Rts => Rts::decode(d).and_then(|h| recv::rts(core, &mut p.tag, &mut p.rndv, h)),
        AmId::Ats => decode_ats(d).and_then(|(sreq, _)| core.remote_done(sreq)),
        AmId::SyncAck => decode_sync_ack(d).and_then(|sreq| core.remote_done(sreq)),
        AmId::Rtr => Rtr::decode(d).and_then(|h| p.rndv.on_rtr(core, h, false)),
        AmId::RtrPart => Rtr::decode(d).and_then(|h| p.rndv.on_rtr(core, h, true)),
        AmId::RndvFin => decode_rndv_fin(d).and_then(|(rreq, uuid)| {
            let part = p.rndv.on_rndv_fin(core, rreq, uuid)?;
            crate::rndv::split::judge(core, uuid, part);
            Ok(())
        }),
        AmId::Wireup => crate::core::on_wireup(core, d),
        AmId::AmEager => crate::am::on_eager(core, &mut p.am, d),
        AmId::AmRts => crate::am::on_rts(core, &mut p.am, &mut p.rndv, d),
        AmId::AmFirst => crate::am::on_fragment(core, &mut p.am, true, d),
        AmId::AmMiddle => crate::am::on_fragment(core, &mut p.am, false, d),
        AmId::Stream => crate::stream::on_stream(core, &mut p.stream, d),
        AmId::Put
        | AmId::GetReq
        | AmId::GetRep
        | AmId::AmoReq
        | AmId::AmoRep
        | AmId::Ack
        | AmId::PutSignal => p.rma.on_rma(core, id, d),
    }
}

/// Queues request `r` on `ep` (behind whatever is queued) and sends what can go now.
pub(crate) fn enqueue(tls: &mut [Tl], core: &mut Core, ep: u32, q: Queued) -> Result<()> {
    let e = core.ep_mut(ep)?;
    e.queue.push_back(q);
    // An endpoint still waiting for its server has nothing to drain: it becomes active
    // when it connects. (Listing it now would keep the worker busy: `arm` refuses to
    // sleep while endpoints are active.)
    if e.queue.len() == 1 && e.lane.is_some() {
        core.active.push_back(ep);
    }
    drain_queue(tls, core, ep);
    Ok(())
}

/// Sends what `ep`'s queue holds, in order, until it is empty or the lane is full.
pub(crate) fn drain_queue(tls: &mut [Tl], core: &mut Core, ep: u32) -> usize {
    let mut n = 0;
    loop {
        let Ok(e) = core.ep(ep) else { return n };
        let (Some(&head), Some(lane)) = (e.queue.front(), e.lane) else {
            return n;
        };
        let sent = match head {
            Queued::Wireup => send_wireup(tls, core, lane),
            Queued::Send(r) => match core.reqs.get_ref(r.0).map(|q| &q.kind) {
                Some(ReqKind::Send(s)) => match s.kind {
                    SendKind::Tag => crate::tag::send::send_step(tls, core, lane, r),
                    SendKind::Am => crate::am::send_step(tls, core, lane, r),
                    SendKind::Stream => crate::stream::send_step(tls, core, lane, r),
                },
                _ => Ok(true),
            },
            Queued::Rma(r) => crate::rma::send_step(tls, core, lane, r),
        };
        match sent {
            Ok(true) => {
                if let Ok(e) = core.ep_mut(ep) {
                    e.queue.pop_front();
                }
                n += 1;
            }
            Ok(false) => return n,
            Err(s) => {
                if let Ok(e) = core.ep_mut(ep) {
                    e.queue.pop_front();
                }
                if let Queued::Send(r) | Queued::Rma(r) = head {
                    core.complete(r, s);
                }
            }
        }
    }
}

/// Drains the queues of the active endpoints; returns how many operations went.
pub(crate) fn run_queues(tls: &mut [Tl], core: &mut Core) -> usize {
    let mut n = 0;
    for _ in 0..core.active.len() {
        let Some(ep) = core.active.pop_front() else {
            break;
        };
        n += drain_queue(tls, core, ep);
        if core.ep(ep).is_ok_and(|e| !e.queue.is_empty()) {
            core.active.push_back(ep);
        }
    }
    n
}

/// Does the work the protocols found while receiving; returns how many items finished.
pub(crate) fn run_work(tls: &mut [Tl], core: &mut Core, p: &mut Protocols) -> usize {
    let mut n = 0;
    if !p.tag.acks.is_empty() {
        n += crate::tag::run_acks(tls, core, &mut p.tag);
    }
    if !p.rndv.work.is_empty() {
        n += crate::rndv::run(tls, core, &mut p.rndv);
    }
    if !p.rma.replies.is_empty() {
        n += crate::rma::run_replies(tls, core, &mut p.rma);
    }
    n
}

/// Lets every protocol forget the peers that failed since the last call.
pub(crate) fn forget_failed_peers(core: &mut Core, p: &mut Protocols) {
    for (ep, uuid, status) in std::mem::take(&mut core.failed_peers) {
        crate::tag::peer_failed(core, &mut p.tag, uuid, status);
        p.am.peer_failed(uuid);
        p.rndv.fail_from(core, uuid, status);
        p.stream.peer_failed(core, ep, status);
    }
}

/// Stops request `r`: a queued send is dropped, a receive leaves matching; both complete
/// with `Canceled`. After this the request touches its buffer no more. `Busy`: a receive
/// in a split rendezvous, whose sender still writes into its buffer, cannot be stopped;
/// it completes once the sender finished or failed.
pub(crate) fn abort(core: &mut Core, p: &mut Protocols, r: Request) -> Result<()> {
    let q = core.reqs.get_mut(r.0).ok_or(Status::InvalidParam)?;
    if q.status.is_some() {
        return Ok(());
    }
    match &mut q.kind {
        ReqKind::Send(s) => {
            s.mem = None;
            let ep = s.ep;
            if let Ok(e) = core.ep_mut(ep) {
                e.queue.retain(|x| *x != Queued::Send(r));
            }
        }
        ReqKind::Rma(s) => {
            let ep = s.ep;
            if let Ok(e) = core.ep_mut(ep) {
                e.queue.retain(|x| *x != Queued::Rma(r));
            }
        }
        // The sender of a split rendezvous writes into the buffer until its fin: the
        // receive cannot be stopped before that (it ends then, or when the sender fails).
        ReqKind::Recv(_) if p.rndv.splitting(r) => return Err(Status::Busy),
        ReqKind::Recv(rs) => {
            crate::tag::forget_recv(&mut p.tag, rs, r);
            // Its registration goes too: late puts are refused, not written.
            p.rndv.forget_recv(r);
        }
        _ => {}
    }
    core.complete(r, Status::Canceled);
    Ok(())
}

/// Cancels a posted receive that has not matched: it completes with `Canceled`. Other
/// requests cannot be canceled; that is not an error (as in UCX).
pub(crate) fn cancel(core: &mut Core, p: &mut Protocols, r: Request) -> Result<()> {
    let q = core.reqs.get_mut(r.0).ok_or(Status::InvalidParam)?;
    if let ReqKind::Recv(rs) = &mut q.kind {
        if let Some(id) = rs.recv_id.take() {
            if p.tag.matcher.cancel(id).is_some() {
                core.complete(r, Status::Canceled);
            }
        }
    }
    Ok(())
}

/// Endpoint `ep` (made from a server's socket address, still without a lane) takes over
/// `other`, an endpoint the peer's wireup created before `ep` learned who the peer is:
/// its connection, queue and received stream bytes move to `ep`, and everything that
/// named `other` names `ep`. An endpoint the application made itself is left alone.
pub(crate) fn adopt_implicit(core: &mut Core, p: &mut Protocols, ep: u32, other: u32) {
    if ep == other || !core.ep(other).is_ok_and(|o| o.implicit) || core.ep(ep).is_err() {
        return;
    }
    let Some(o) = core.take_ep(other) else {
        return;
    };
    let Ok(e) = core.ep_mut(ep) else { return };
    e.lane = o.lane;
    if o.lane.is_some() {
        e.status = o.status;
    }
    e.outstanding += o.outstanding;
    let mine = std::mem::take(&mut e.queue);
    e.queue = o.queue;
    e.queue.extend(mine);
    for x in core.active.iter_mut().filter(|x| **x == other) {
        *x = ep;
    }
    for q in core.reqs.iter_mut() {
        match &mut q.kind {
            ReqKind::Send(s) if s.ep == other => s.ep = ep,
            ReqKind::Rma(s) if s.ep == other => s.ep = ep,
            ReqKind::Flush(Some(x)) | ReqKind::Close(x) if *x == other => *x = ep,
            _ => {}
        }
    }
    // Stream receives posted while connecting take the bytes that came first.
    p.stream.adopt(core, ep, other);
}

/// Fails or cancels everything of `ep` and removes it.
pub(crate) fn destroy_ep(
    tls: &mut [Tl],
    core: &mut Core,
    p: &mut Protocols,
    ep: u32,
    status: Status,
) {
    let Some(e) = core.take_ep(ep) else {
        return;
    };
    if let Some(l) = e.lane {
        let _ = tls[l.tl].iface.ep_destroy(l.ep);
        if tls[l.tl].transport == uct::Transport::Tcp {
            core.tcp_eps = core.tcp_eps.saturating_sub(1);
        }
    }
    if core.by_uuid.get(&e.remote.uuid) == Some(&ep) {
        core.by_uuid.remove(&e.remote.uuid);
        // No endpoint answers for that peer any more: what the protocols hold of it
        // (messages half received, rendezvous receives) ends now, as for a failure.
        let uuid = e.remote.uuid;
        crate::tag::peer_failed(core, &mut p.tag, uuid, status);
        p.am.peer_failed(uuid);
        p.rndv.fail_from(core, uuid, status);
    }
    for q in e.queue {
        if let Queued::Send(r) | Queued::Rma(r) = q {
            core.complete(r, status);
        }
    }
    p.stream.forget(core, ep, status);
    // Sends waiting for an acknowledgement from this peer will never get one.
    core.fail_waiting(ep, status);
    core.active.retain(|&x| x != ep);
}

/// Runs the callbacks of completed requests and frees released ones; completions by word
/// are listed for `Worker::drain_completed`.
pub(crate) fn run_completions(core: &mut Core) {
    for (r, s) in std::mem::take(&mut core.failed_ops) {
        core.complete(r, s);
    }
    // The list is swapped with a spare one that keeps its capacity, so completing
    // requests does not allocate once both have grown.
    let mut done = std::mem::take(&mut core.completed_spare);
    std::mem::swap(&mut done, &mut core.completed);
    for r in done.drain(..) {
        let Some(q) = core.reqs.get_mut(r.0) else {
            continue;
        };
        let cb = q.cb.take();
        let (status, info, released) = (q.status.unwrap_or(Status::Ok), q.info, q.released);
        if released {
            core.reqs.remove(r.0);
        }
        match cb {
            Some(Callback::Fn(f)) => f(r, status, info),
            Some(Callback::Word(word)) => core.words.push(Completed {
                request: r,
                word,
                status,
                info,
            }),
            // Reported when it completed (`Core::settle`); kept for completeness.
            Some(Callback::Cq(t)) => {
                t.report(&mut core.cqs, status, info.length, info.sender_tag, None)
            }
            None => {}
        }
    }
    core.completed_spare = done;
}
