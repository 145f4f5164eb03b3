//! The tag API (send, receive, probe, message receive) and the protocols behind it:
//! eager short, eager bcopy, multi-fragment eager, and rendezvous (the receiver pulls
//! the data in one copy, then tells the sender), plus synchronous sends.
//!
//! Per-sender order: an endpoint sends everything through one lane, in the order of its
//! queue, and the lanes deliver in order, so messages (and the fragments of each message)
//! of one sender arrive in sending order and are matched in that order. Fragments carry
//! the sender's worker id and a message id, so fragments of different senders may
//! interleave.

use super::matcher::{Arrived, Posted};
use crate::proto::header::*;
use crate::proto::select::{Proto, Thresholds};
use crate::request::*;
use crate::worker::{
    connect, enqueue, route, Deferred, Ep, FragDest, Lane, Message, Queued, Route, State, Tl,
    Unexp, Worker,
};
use std::time::Duration;
use ucs::{Result, Status};

/// How long the blocking conveniences wait before they give up.
const BLOCKING_TIMEOUT: Duration = Duration::from_secs(120);

/// The protocol of a tag send of `buf` on a lane with thresholds `th`.
pub(crate) fn tag_proto(th: &Thresholds, buf: &Buf, sync: bool) -> Proto {
    let proto = th.select(buf.len(), sync);
    if proto == Proto::Rndv && (buf.contig_ptr().is_none() || buf.is_empty()) {
        Proto::Multi
    } else {
        proto
    }
}

/// The tag as the 8 header bytes of `am_short` (little endian on the wire).
#[inline]
fn tag_hdr(tag: u64) -> u64 {
    u64::from_ne_bytes(tag.to_le_bytes())
}

impl Worker {
    /// Sends `buf` with `tag` on `ep`. Returns `None` when the send completed in the call
    /// (the callback is then not called), else a request.
    ///
    /// # Safety
    /// `buf` must stay valid for reads, and unmodified, until the send completes.
    pub unsafe fn tag_send_nb(
        &mut self,
        ep: Ep,
        buf: Buf,
        tag: u64,
        sync: bool,
        cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        let (tls, st) = (&mut self.tls, &mut self.st);
        let lane = match route(tls, st, ep.0)? {
            Route::Lane(l) => Some(l),
            Route::Queue => None,
            Route::Fail(s) => {
                let r = st.new_req(ReqKind::Send(SendState::new(SendKind::Tag, ep.0, buf)), cb);
                st.failed_ops.push((r, s));
                return Ok(Some(r));
            }
        };
        if let Some(lane) = lane.filter(|_| !sync) {
            if let (Buf::Contig { ptr, len }, true) = (&buf, st.ep(ep.0)?.queue.is_empty()) {
                let (ptr, len) = (*ptr, *len);
                let iface = &mut tls[lane.tl].iface;
                let data: &[u8] = if len == 0 {
                    &[]
                } else {
                    // SAFETY: the caller promised ptr..ptr+len is readable until completion.
                    unsafe { std::slice::from_raw_parts(ptr, len) }
                };
                let done = match lane.th.select(len, false) {
                    Proto::Short => iface
                        .am_short(lane.ep, AM_EAGER_ONLY, tag_hdr(tag), data)?
                        .is_done(),
                    Proto::Bcopy => iface
                        .am_bcopy(lane.ep, AM_EAGER_ONLY, |b| {
                            b[..8].copy_from_slice(&tag.to_le_bytes());
                            b[8..8 + len].copy_from_slice(data);
                            8 + len
                        })?
                        .is_done(),
                    Proto::Multi | Proto::Rndv => false,
                };
                if done {
                    return Ok(None);
                }
            }
        }
        let mut s = SendState::new(SendKind::Tag, ep.0, buf);
        s.tag = tag;
        s.sync = sync;
        match lane {
            Some(l) => s.proto = tag_proto(&l.th, &s.buf, sync),
            None => s.select = true,
        }
        let r = st.new_req(ReqKind::Send(s), cb);
        enqueue(tls, st, ep.0, Queued::Send(r))?;
        Ok(Some(r))
    }

    /// Posts a receive for a message whose tag matches `tag` under `mask`.
    ///
    /// # Safety
    /// `buf` must stay valid for writes, and not otherwise accessed, until the receive
    /// completes (or is canceled and its completion seen).
    pub unsafe fn tag_recv_nb(
        &mut self,
        buf: Buf,
        tag: u64,
        mask: u64,
        cb: Option<Callback>,
    ) -> Result<Request> {
        let st = &mut self.st;
        let r = st.new_req(
            ReqKind::Recv(RecvState {
                buf,
                recv_id: None,
                received: 0,
                truncated: false,
                waitall: false,
            }),
            cb,
        );
        match st.matcher.post(tag, mask, r) {
            Posted::Queued(id) => {
                if let Some(Req {
                    kind: ReqKind::Recv(rs),
                    ..
                }) = st.reqs.get_mut(r.0)
                {
                    rs.recv_id = Some(id);
                }
            }
            Posted::Matched(_, (mtag, u), r) => st.consume_unexp(r, mtag, u),
        }
        if !st.completed.is_empty() || !st.deferred.is_empty() {
            self.progress();
        }
        Ok(r)
    }

    /// Looks for an unexpected message matching `tag`/`mask`. With `remove`, the message
    /// is taken out of matching and returned as a [`Message`] for
    /// [`Worker::tag_msg_recv_nb`].
    pub fn tag_probe(
        &mut self,
        tag: u64,
        mask: u64,
        remove: bool,
    ) -> Option<(RecvInfo, Option<Message>)> {
        let st = &mut self.st;
        if !remove {
            return st.matcher.probe(tag, mask).map(|(_, _, (t, u))| {
                (
                    RecvInfo {
                        sender_tag: *t,
                        length: u.length(),
                    },
                    None,
                )
            });
        }
        let (_, _, (t, u)) = st.matcher.probe_remove(tag, mask)?;
        let info = RecvInfo {
            sender_tag: t,
            length: u.length(),
        };
        let id = st.next_probed;
        st.next_probed += 1;
        if let Unexp::Partial { key, .. } = &u {
            st.frags.insert(*key, FragDest::Probed(id));
        }
        st.probed.insert(id, (t, u));
        Some((info, Some(Message(id))))
    }

    /// Receives a message taken by a probe with remove.
    ///
    /// # Safety
    /// As for [`Worker::tag_recv_nb`].
    pub unsafe fn tag_msg_recv_nb(
        &mut self,
        msg: Message,
        buf: Buf,
        cb: Option<Callback>,
    ) -> Result<Request> {
        let st = &mut self.st;
        let (t, u) = st.probed.remove(&msg.0).ok_or(Status::InvalidParam)?;
        let r = st.new_req(
            ReqKind::Recv(RecvState {
                buf,
                recv_id: None,
                received: 0,
                truncated: false,
                waitall: false,
            }),
            cb,
        );
        st.consume_unexp(r, t, u);
        self.progress();
        Ok(r)
    }

    /// Stops a request this call's owner no longer waits for: a queued send is dropped, a
    /// receive leaves matching; both complete with `Canceled`. After this the request
    /// touches its buffer no more.
    pub fn request_abort(&mut self, r: Request) -> Result<()> {
        let st = &mut self.st;
        let q = st.reqs.get_mut(r.0).ok_or(Status::InvalidParam)?;
        if q.status.is_some() {
            return Ok(());
        }
        match &mut q.kind {
            ReqKind::Send(s) => {
                s.mem = None;
                let ep = s.ep;
                if let Ok(e) = st.ep_mut(ep) {
                    e.queue.retain(|x| !matches!(x, Queued::Send(y) if *y == r));
                }
            }
            ReqKind::Rma(s) => {
                let ep = s.ep;
                if let Ok(e) = st.ep_mut(ep) {
                    e.queue.retain(|x| !matches!(x, Queued::Rma(y) if *y == r));
                }
            }
            ReqKind::Recv(rs) => {
                if let Some(id) = rs.recv_id.take() {
                    st.matcher.cancel(id);
                }
                st.frags
                    .retain(|_, d| !matches!(d, FragDest::Req(x) if *x == r));
                st.deferred
                    .retain(|d| !matches!(d, Deferred::RndvGet { req, .. } if *req == r));
                // Its registration goes too: late puts are refused, not written.
                st.rndv_rx.retain(|_, x| x.req != r);
            }
            _ => {}
        }
        st.complete(r, Status::Canceled);
        Ok(())
    }

    fn block_on(&mut self, r: Option<Request>) -> Result<Status> {
        let Some(r) = r else { return Ok(Status::Ok) };
        match self.wait_request(r, BLOCKING_TIMEOUT) {
            Err(Status::TimedOut) => {
                self.request_abort(r)?;
                self.request_free(r)?;
                Err(Status::TimedOut)
            }
            other => other,
        }
    }

    /// Sends `data` and waits for completion.
    pub fn tag_send(&mut self, ep: Ep, data: &[u8], tag: u64) -> Result<()> {
        // SAFETY: `data` is borrowed for this whole call, and block_on either sees the
        // send complete or aborts it before returning.
        let r = unsafe {
            self.tag_send_nb(
                ep,
                Buf::contig(data.as_ptr().cast_mut(), data.len()),
                tag,
                false,
                None,
            )?
        };
        match self.block_on(r)? {
            Status::Ok => Ok(()),
            s => Err(s),
        }
    }

    /// Sends `data` synchronously (complete when the receiver matched it) and waits.
    pub fn tag_send_sync(&mut self, ep: Ep, data: &[u8], tag: u64) -> Result<()> {
        // SAFETY: as in tag_send.
        let r = unsafe {
            self.tag_send_nb(
                ep,
                Buf::contig(data.as_ptr().cast_mut(), data.len()),
                tag,
                true,
                None,
            )?
        };
        match self.block_on(r)? {
            Status::Ok => Ok(()),
            s => Err(s),
        }
    }

    /// Receives into `buf` and waits. Truncation is `Err(MessageTruncated)`.
    pub fn tag_recv(&mut self, buf: &mut [u8], tag: u64, mask: u64) -> Result<RecvInfo> {
        // SAFETY: `buf` is borrowed mutably for this whole call, and the request either
        // completes or is aborted before this returns.
        let r =
            unsafe { self.tag_recv_nb(Buf::contig(buf.as_mut_ptr(), buf.len()), tag, mask, None)? };
        let status = match self.wait_done(r, BLOCKING_TIMEOUT) {
            Err(Status::TimedOut) => {
                self.request_abort(r)?;
                self.request_free(r)?;
                return Err(Status::TimedOut);
            }
            other => other?,
        };
        let info = self.request_info(r)?;
        self.request_free(r)?;
        match status {
            Status::Ok => Ok(info),
            s => Err(s),
        }
    }
}

/// Sends what `ep`'s queue holds, in order, until it is empty or the lane is full.
pub(crate) fn drain_queue(tls: &mut [Tl], st: &mut State, ep: u32) -> usize {
    let mut n = 0;
    loop {
        let Ok(e) = st.ep(ep) else { return n };
        let (Some(&head), Some(lane)) = (e.queue.front(), e.lane) else {
            return n;
        };
        let sent = match head {
            Queued::Wireup => send_wireup(tls, st, lane),
            Queued::Send(r) => send_step(tls, st, lane, r),
            Queued::Rma(r) => crate::rma::rma_send_step(tls, st, lane, r),
        };
        match sent {
            Ok(true) => {
                if let Ok(e) = st.ep_mut(ep) {
                    e.queue.pop_front();
                }
                n += 1;
            }
            Ok(false) => return n,
            Err(s) => {
                if let Ok(e) = st.ep_mut(ep) {
                    e.queue.pop_front();
                }
                if let Queued::Send(r) | Queued::Rma(r) = head {
                    st.complete(r, s);
                }
            }
        }
    }
}

fn send_wireup(tls: &mut [Tl], st: &mut State, lane: Lane) -> Result<bool> {
    let my = &st.my_address;
    let uuid = st.uuid;
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

/// Advances one queued send. `Ok(true)`: nothing more to send for it.
pub(crate) fn send_step(tls: &mut [Tl], st: &mut State, lane: Lane, r: Request) -> Result<bool> {
    let uuid = st.uuid;
    let Some(q) = st.reqs.get_mut(r.0) else {
        return Ok(true);
    };
    if q.status.is_some() {
        return Ok(true);
    }
    let ReqKind::Send(s) = &mut q.kind else {
        return Ok(true);
    };
    match s.kind {
        SendKind::Tag => {}
        SendKind::Am(_) => return crate::am::am_send_step(tls, st, lane, r),
        SendKind::Stream => return crate::stream::stream_send_step(tls, st, lane, r),
    }
    let iface = &mut tls[lane.tl].iface;
    let len = s.buf.len();
    let sreq = r.to_u64();
    let waits_for_peer;
    match s.proto {
        Proto::Short | Proto::Bcopy => {
            let sync = s.sync;
            let (tag, buf) = (s.tag, &s.buf);
            let out = iface.am_bcopy(
                lane.ep,
                if sync { AM_EAGER_SYNC } else { AM_EAGER_ONLY },
                |b| {
                    let h = if sync {
                        EagerSync { tag, uuid, sreq }.encode_into(b)
                    } else {
                        b[..8].copy_from_slice(&tag.to_le_bytes());
                        EAGER_ONLY_LEN
                    };
                    // SAFETY: the sender promised the buffer stays readable until completion.
                    h + unsafe { buf.read_at(0, &mut b[h..h + len]) }
                },
            )?;
            if !out.is_done() {
                return Ok(false);
            }
            waits_for_peer = sync;
        }
        Proto::Multi => {
            if s.msg_id == 0 {
                s.msg_id = st.next_msg_id;
                st.next_msg_id += 1;
            }
            let zcopy = len >= lane.th.zcopy && s.buf.contig_ptr().is_some();
            while s.offset < len {
                let off = s.offset;
                let first = off == 0;
                let chunk = if first {
                    lane.th.first_frag
                } else {
                    lane.th.mid_frag
                }
                .min(len - off);
                let mut hdr = [0u8; EAGER_FIRST_LEN];
                let h = if first {
                    EagerFirst {
                        tag: s.tag,
                        uuid,
                        msg_id: s.msg_id,
                        total: len as u64,
                        sreq: if s.sync { sreq } else { 0 },
                    }
                    .encode_into(&mut hdr)
                } else {
                    EagerMiddle {
                        uuid,
                        msg_id: s.msg_id,
                        offset: off as u64,
                    }
                    .encode_into(&mut hdr)
                };
                let id = if first {
                    AM_EAGER_FIRST
                } else {
                    AM_EAGER_MIDDLE
                };
                let done = if let (true, Some(p)) = (zcopy, s.buf.contig_ptr()) {
                    // SAFETY: off + chunk <= len, inside the sender's buffer, which stays
                    // readable until completion (the caller's contract).
                    let data = unsafe { std::slice::from_raw_parts(p.add(off), chunk) };
                    iface
                        .am_zcopy(lane.ep, id, &hdr[..h], &[data], 0)?
                        .is_done()
                } else {
                    let buf = &s.buf;
                    iface
                        .am_bcopy(lane.ep, id, |b| {
                            b[..h].copy_from_slice(&hdr[..h]);
                            // SAFETY: as above.
                            h + unsafe { buf.read_at(off, &mut b[h..h + chunk]) }
                        })?
                        .is_done()
                };
                if !done {
                    return Ok(false);
                }
                s.offset += chunk;
            }
            waits_for_peer = s.sync;
        }
        Proto::Rndv => {
            // A lane that puts sends no key: the receiver answers with an Rtr.
            if s.mem.is_none() && !lane.th.put {
                let ptr = s.buf.contig_ptr().ok_or(Status::InvalidParam)?;
                // SAFETY: the sender promised the buffer stays valid until the send
                // completes; the registration (s.mem) is dropped with the request.
                s.mem = Some(Box::new(unsafe { tls[lane.tl].md.mem_reg(ptr, len) }?));
            }
            let iface = &mut tls[lane.tl].iface;
            let (rkey, addr) = match &s.mem {
                Some(m) => (m.pack_rkey_compact(), m.address() as u64),
                None if lane.th.put => (Vec::new(), 0),
                None => return Err(Status::NoMemory),
            };
            let rts = Rts {
                tag: s.tag,
                uuid,
                sreq,
                len: len as u64,
                addr,
                rkey: &rkey,
            };
            let out = iface.am_bcopy(lane.ep, AM_RTS, |b| {
                if b.len() < rts.encoded_len() {
                    return usize::MAX;
                }
                rts.encode_into(b)
            })?;
            if !out.is_done() {
                return Ok(false);
            }
            waits_for_peer = true;
        }
    }
    if waits_for_peer {
        s.remote_pending = true;
        let ep = s.ep;
        if let Ok(e) = st.ep_mut(ep) {
            e.outstanding += 1;
        }
    } else {
        st.complete(r, Status::Ok);
    }
    Ok(true)
}

/// Sends a control message (acknowledgement) to the worker `uuid`.
fn send_ctrl(tls: &mut [Tl], st: &mut State, uuid: u64, id: u8, msg: &[u8]) -> Result<bool> {
    let ep = *st.by_uuid.get(&uuid).ok_or(Status::Unreachable)?;
    let lane = connect(tls, st, ep)?;
    let hdr = u64::from_ne_bytes(msg[..8].try_into().map_err(|_| Status::InvalidParam)?);
    Ok(tls[lane.tl]
        .iface
        .am_short(lane.ep, id, hdr, &msg[8..])?
        .is_done())
}

/// Performs work found while receiving. `Ok(Some(d))`: not possible yet, retry later.
pub(crate) fn deferred(tls: &mut [Tl], st: &mut State, d: Deferred) -> Result<Option<Deferred>> {
    match d {
        Deferred::SyncAck { uuid, sreq } => {
            let sent = send_ctrl(tls, st, uuid, AM_SYNC_ACK, &sreq.to_le_bytes())?;
            Ok((!sent).then_some(Deferred::SyncAck { uuid, sreq }))
        }
        Deferred::Ats { uuid, sreq, status } => {
            let mut b = [0u8; ATS_LEN];
            encode_ats(&mut b, sreq, status);
            let sent = send_ctrl(tls, st, uuid, AM_ATS, &b)?;
            Ok((!sent).then_some(Deferred::Ats { uuid, sreq, status }))
        }
        Deferred::Rtr { rreq } => {
            Ok(super::rndv_put::send_rtr(tls, st, rreq)?.then_some(Deferred::Rtr { rreq }))
        }
        d @ Deferred::RndvPut { .. } => super::rndv_put::put_data(tls, st, d),
        Deferred::RndvGet {
            req,
            uuid,
            sreq,
            len,
            addr,
            rkey,
        } => {
            // A receive aborted meanwhile must not be written; the sender still gets its
            // completion.
            let live = st.reqs.get_ref(req.0).is_some_and(|q| q.status.is_none());
            if live && rkey.is_empty() {
                match super::rndv_put::start(tls, st, req, uuid, sreq, len) {
                    Ok(None) => return Ok(None),
                    Ok(Some(again)) => return deferred(tls, st, again),
                    Err(s) => {
                        tracing::debug!("rendezvous receive by put failed: {s}");
                        st.complete(req, s);
                        return deferred(
                            tls,
                            st,
                            Deferred::Ats {
                                uuid,
                                sreq,
                                status: Status::IoError,
                            },
                        );
                    }
                }
            }
            let status = if live {
                rndv_get(tls, st, req, uuid, len, addr, &rkey)
            } else {
                Err(Status::Canceled)
            };
            if live {
                st.complete(req, status.unwrap_or_else(|s| s));
            }
            let ats = if status.is_ok() {
                Status::Ok
            } else {
                Status::IoError
            };
            deferred(
                tls,
                st,
                Deferred::Ats {
                    uuid,
                    sreq,
                    status: ats,
                },
            )
        }
    }
}

/// Pulls a rendezvous message into the receive buffer of `req`; returns the receive's
/// final status.
fn rndv_get(
    tls: &mut [Tl],
    st: &mut State,
    req: Request,
    uuid: u64,
    len: u64,
    addr: u64,
    rkey: &[u8],
) -> Result<Status> {
    let ep = *st.by_uuid.get(&uuid).ok_or(Status::Unreachable)?;
    let lane = connect(tls, st, ep)?;
    let owner = crate::rma::lane_owner(tls, st, ep, lane);
    let rk = tls[lane.tl].md.rkey_unpack_from(rkey, owner)?;
    let Some(Req {
        kind: ReqKind::Recv(rs),
        ..
    }) = st.reqs.get_mut(req.0)
    else {
        return Err(Status::InvalidParam);
    };
    let mut want = usize::try_from(len).map_err(|_| Status::InvalidParam)?;
    let truncated = want > rs.buf.len();
    if let Buf::Generic(_) = rs.buf {
        // The application unpacks: pull into a bounce buffer, then hand it over.
        let n = want.min(rs.buf.len());
        let mut tmp = vec![0u8; n];
        let out = tls[lane.tl]
            .iface
            .get_zcopy(lane.ep, &mut [&mut tmp[..]], addr, &rk, 0)?;
        if !out.is_done() {
            return Err(Status::IoError);
        }
        // SAFETY: a generic buffer has no memory of ours to be valid; unpack is safe.
        if unsafe { rs.buf.write_at(0, &tmp) } < n {
            return Err(Status::IoError);
        }
        return Ok(if truncated {
            Status::MessageTruncated
        } else {
            Status::Ok
        });
    }
    // SAFETY: the receiver promised the buffer is writable and ours until completion;
    // the slices are dropped before the request completes.
    let mut slices = unsafe { rs.buf.slices_mut() };
    let mut iov: Vec<&mut [u8]> = Vec::with_capacity(slices.len());
    for s in slices.iter_mut() {
        if want == 0 {
            break;
        }
        let n = s.len().min(want);
        want -= n;
        iov.push(&mut s[..n]);
    }
    let out = tls[lane.tl]
        .iface
        .get_zcopy(lane.ep, &mut iov, addr, &rk, 0)?;
    if !out.is_done() {
        return Err(Status::IoError);
    }
    Ok(if truncated {
        Status::MessageTruncated
    } else {
        Status::Ok
    })
}

impl State {
    /// Handles one protocol message from a transport. Malformed messages are counted
    /// and dropped.
    pub(crate) fn on_am(&mut self, id: u8, d: &[u8]) {
        let r = match id {
            AM_EAGER_ONLY => decode_eager_only(d).map(|(tag, p)| self.eager(tag, p, None)),
            AM_EAGER_SYNC => {
                EagerSync::decode(d).map(|(h, p)| self.eager(h.tag, p, Some((h.uuid, h.sreq))))
            }
            AM_EAGER_FIRST => EagerFirst::decode(d).and_then(|(h, p)| self.first(h, p)),
            AM_EAGER_MIDDLE => EagerMiddle::decode(d).and_then(|(h, p)| self.middle(h, p)),
            AM_RTS => Rts::decode(d).map(|h| self.rts(h)),
            AM_ATS => decode_ats(d).map(|(sreq, _)| self.remote_done(sreq)),
            AM_RTR => Rtr::decode(d).and_then(|h| self.on_rtr(h)),
            AM_RNDV_FIN => decode_rndv_fin(d).and_then(|(rreq, uuid)| self.on_rndv_fin(rreq, uuid)),
            AM_SYNC_ACK => decode_sync_ack(d).map(|sreq| self.remote_done(sreq)),
            AM_WIREUP => decode_wireup(d).and_then(|(uuid, a)| self.wireup(uuid, a)),
            crate::am::AM_AM_EAGER
            | crate::am::AM_AM_RTS
            | crate::am::AM_AM_FIRST
            | crate::am::AM_AM_MIDDLE => self.on_am_msg(id, d),
            crate::stream::AM_STREAM => self.on_stream(d),
            crate::proto::rma::AM_PUT..=crate::proto::rma::AM_ACK => {
                let ctx = self.ctx.clone();
                self.on_rma(&ctx, id, d)
            }
            _ => Err(Status::InvalidParam),
        };
        if let Err(s) = r {
            self.dropped += 1;
            tracing::debug!("dropped protocol message id {id} ({} bytes): {s}", d.len());
        }
    }

    fn recv_state(&mut self, r: Request) -> Option<&mut RecvState> {
        match self.reqs.get_mut(r.0) {
            Some(Req {
                kind: ReqKind::Recv(rs),
                ..
            }) => Some(rs),
            _ => None,
        }
    }

    fn set_info(&mut self, r: Request, tag: u64, length: usize) {
        if let Some(q) = self.reqs.get_mut(r.0) {
            q.info = RecvInfo {
                sender_tag: tag,
                length,
            };
        }
    }

    /// Copies `data` into the receive at `off`; notes truncation.
    fn deliver(&mut self, r: Request, off: usize, data: &[u8]) {
        if let Some(rs) = self.recv_state(r) {
            // SAFETY: the receiver promised the buffer is writable until completion.
            let n = unsafe { rs.buf.write_at(off, data) };
            if n < data.len() {
                rs.truncated = true;
            }
            rs.received += data.len();
        }
    }

    fn finish_recv(&mut self, r: Request) {
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

    fn eager(&mut self, tag: u64, p: &[u8], sync: Option<(u64, u64)>) {
        match self.matcher.match_posted(tag) {
            Some((_, r)) => {
                // The whole message in one step, with one look at the request: its
                // information, the data, and its completion.
                if let Some(q) = self.reqs.get_mut(r.0) {
                    q.info = RecvInfo {
                        sender_tag: tag,
                        length: p.len(),
                    };
                    let mut status = Status::Ok;
                    if let ReqKind::Recv(rs) = &mut q.kind {
                        // SAFETY: the receiver promised the buffer is writable until
                        // completion.
                        let n = unsafe { rs.buf.write_at(0, p) };
                        rs.received += p.len();
                        if n < p.len() {
                            rs.truncated = true;
                            status = Status::MessageTruncated;
                        }
                    }
                    if q.status.is_none() {
                        q.status = Some(status);
                        if q.cb.is_some() || q.released {
                            self.completed.push(r);
                        }
                    }
                }
                if let Some((uuid, sreq)) = sync {
                    self.deferred.push_back(Deferred::SyncAck { uuid, sreq });
                }
            }
            None => {
                let u = Unexp::Eager {
                    data: p.to_vec(),
                    sync,
                };
                self.matcher.add_unexpected(tag, (tag, u));
            }
        }
    }

    fn first(&mut self, h: EagerFirst, p: &[u8]) -> Result<()> {
        let total = usize::try_from(h.total).map_err(|_| Status::InvalidParam)?;
        let key = (h.uuid, h.msg_id);
        let sync = (h.sreq != 0).then_some((h.uuid, h.sreq));
        let u = Unexp::Partial {
            data: Vec::new(),
            received: 0,
            sync,
            key,
        };
        match self.matcher.arrive(h.tag, (h.tag, u)) {
            Arrived::Matched(_, r, _) => {
                self.set_info(r, h.tag, total);
                self.deliver(r, 0, p);
                if let Some((uuid, sreq)) = sync {
                    self.deferred.push_back(Deferred::SyncAck { uuid, sreq });
                }
                if p.len() == total {
                    self.finish_recv(r);
                } else {
                    self.frags.insert(key, FragDest::Req(r));
                }
            }
            Arrived::Unexpected(m) => {
                if let Some((_, Unexp::Partial { data, received, .. })) =
                    self.matcher.unexpected_mut(m)
                {
                    // The whole message is kept, so bound what a header may make us reserve.
                    data.try_reserve_exact(total)
                        .map_err(|_| Status::NoMemory)?;
                    data.resize(total, 0);
                    data[..p.len()].copy_from_slice(p);
                    *received = p.len();
                }
                if p.len() == total {
                    self.settle_partial(FragDest::Unexp(m));
                } else {
                    self.frags.insert(key, FragDest::Unexp(m));
                }
            }
        }
        Ok(())
    }

    fn middle(&mut self, h: EagerMiddle, p: &[u8]) -> Result<()> {
        let key = (h.uuid, h.msg_id);
        let dest = *self.frags.get(&key).ok_or(Status::InvalidParam)?;
        let off = usize::try_from(h.offset).map_err(|_| Status::InvalidParam)?;
        match dest {
            FragDest::Req(r) => {
                let total = self.reqs.get_ref(r.0).map_or(0, |q| q.info.length);
                let received = self.recv_state(r).map_or(0, |rs| rs.received);
                if off != received || off + p.len() > total {
                    return Err(Status::InvalidParam);
                }
                self.deliver(r, off, p);
                if off + p.len() == total {
                    self.frags.remove(&key);
                    self.finish_recv(r);
                }
            }
            FragDest::Unexp(_) | FragDest::Probed(_) => {
                let u = match dest {
                    FragDest::Unexp(m) => self.matcher.unexpected_mut(m).map(|x| &mut x.1),
                    FragDest::Probed(id) => self.probed.get_mut(&id).map(|x| &mut x.1),
                    FragDest::Req(_) => None,
                };
                let Some(Unexp::Partial { data, received, .. }) = u else {
                    return Err(Status::InvalidParam);
                };
                if off != *received || off + p.len() > data.len() {
                    return Err(Status::InvalidParam);
                }
                data[off..off + p.len()].copy_from_slice(p);
                *received += p.len();
                if *received == data.len() {
                    self.frags.remove(&key);
                    self.settle_partial(dest);
                }
            }
        }
        Ok(())
    }

    /// A fragmented unexpected message is complete: it becomes an ordinary eager one.
    fn settle_partial(&mut self, dest: FragDest) {
        let u = match dest {
            FragDest::Unexp(m) => self.matcher.unexpected_mut(m).map(|x| &mut x.1),
            FragDest::Probed(id) => self.probed.get_mut(&id).map(|x| &mut x.1),
            FragDest::Req(_) => None,
        };
        if let Some(u) = u {
            if let Unexp::Partial { data, sync, .. } = u {
                let data = std::mem::take(data);
                *u = Unexp::Eager { data, sync: *sync };
            }
        }
    }

    fn rts(&mut self, h: Rts<'_>) {
        let u = Unexp::Rts {
            uuid: h.uuid,
            sreq: h.sreq,
            len: h.len,
            addr: h.addr,
            rkey: Vec::new(),
        };
        match self.matcher.arrive(h.tag, (h.tag, u)) {
            Arrived::Matched(_, r, _) => {
                self.set_info(r, h.tag, h.len as usize);
                self.deferred.push_back(Deferred::RndvGet {
                    req: r,
                    uuid: h.uuid,
                    sreq: h.sreq,
                    len: h.len,
                    addr: h.addr,
                    rkey: h.rkey.to_vec(),
                });
            }
            Arrived::Unexpected(m) => {
                if let Some((_, Unexp::Rts { rkey, .. })) = self.matcher.unexpected_mut(m) {
                    rkey.extend_from_slice(h.rkey);
                }
            }
        }
    }

    /// The peer acknowledged a synchronous send or finished a rendezvous.
    fn remote_done(&mut self, sreq: u64) {
        let r = Request::from_u64(sreq);
        let ok = matches!(
            self.reqs.get_mut(r.0),
            Some(Req { kind: ReqKind::Send(s), status: None, .. }) if s.remote_pending
        );
        if ok {
            if let Some(Req {
                kind: ReqKind::Send(s),
                ..
            }) = self.reqs.get_mut(r.0)
            {
                s.mem = None;
            }
            self.complete(r, Status::Ok);
        } else {
            self.dropped += 1;
            tracing::debug!("acknowledgement for unknown send request {sreq:#x}");
        }
    }

    fn wireup(&mut self, uuid: u64, addr: &[u8]) -> Result<()> {
        if self.by_uuid.contains_key(&uuid) {
            return Ok(());
        }
        let a = crate::address::WorkerAddress::decode(addr)?;
        if a.uuid != uuid {
            return Err(Status::InvalidAddr);
        }
        let ep = self.insert_ep(a);
        if let Ok(e) = self.ep_mut(ep) {
            e.implicit = true;
        }
        self.by_uuid.insert(uuid, ep);
        Ok(())
    }

    /// Hands an unexpected message to the receive `r` that matched it.
    pub(crate) fn consume_unexp(&mut self, r: Request, tag: u64, u: Unexp) {
        self.set_info(r, tag, u.length());
        match u {
            Unexp::Eager { data, sync } => {
                self.deliver(r, 0, &data);
                self.finish_recv(r);
                if let Some((uuid, sreq)) = sync {
                    self.deferred.push_back(Deferred::SyncAck { uuid, sreq });
                }
            }
            Unexp::Partial {
                data,
                received,
                sync,
                key,
            } => {
                self.deliver(r, 0, &data[..received]);
                self.frags.insert(key, FragDest::Req(r));
                if let Some((uuid, sreq)) = sync {
                    self.deferred.push_back(Deferred::SyncAck { uuid, sreq });
                }
            }
            Unexp::Rts {
                uuid,
                sreq,
                len,
                addr,
                rkey,
            } => {
                self.deferred.push_back(Deferred::RndvGet {
                    req: r,
                    uuid,
                    sreq,
                    len,
                    addr,
                    rkey,
                });
            }
        }
    }
}
