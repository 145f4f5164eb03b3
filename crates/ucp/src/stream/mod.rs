//! Streams: an ordered byte stream per endpoint. Sends are cut into transport messages
//! that carry the sender's worker id; the receiver appends them to the endpoint's stream
//! and hands bytes to receives in posting order, either "whatever is there" or "exactly
//! this many" (`waitall`). The wire format is in `proto::header` (Stream).
//!
//! Invariant: an endpoint's received bytes wait in `rx` only while no receive is posted
//! that could take them.

use crate::core::ep::{Lane, Proto};
use crate::core::request::*;
use crate::core::{route, Core, Post, Route, Tl};
use crate::proto::header::STREAM_HDR;
use crate::proto::AmId;
use piece::Piece;
use std::collections::VecDeque;
use ucs::{BufPool, Result, Status};

mod piece;

/// Outcome of a stream receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamRecv {
    /// Completed in the call with this many bytes.
    Done(usize),
    /// Waiting for data.
    Pending(Request),
}

/// The stream of one endpoint.
#[derive(Default)]
pub(crate) struct StreamEp {
    /// Bytes received and not yet consumed, in order, a piece per arrived message.
    rx: VecDeque<Piece>,
    /// Bytes already consumed from the front piece of `rx`.
    off: usize,
    /// Receives waiting for data, in posting order.
    reqs: VecDeque<Request>,
}

/// The stream protocol's state in a worker: one stream per endpoint index.
pub(crate) struct StreamState {
    eps: Vec<StreamEp>,
    /// Buffers for received bytes waiting for a receive, so that steady traffic
    /// neither allocates nor frees.
    bufs: BufPool,
}

impl Default for StreamState {
    fn default() -> StreamState {
        // Pieces up to 4 KiB pooled, 32 buffers, 128 KiB at most in all; a larger piece
        // is allocated (its copy costs more than the allocation).
        StreamState {
            eps: Vec::new(),
            bufs: BufPool::new(4096, 32, 128 << 10),
        }
    }
}

impl StreamState {
    fn at(&mut self, ep: u32) -> &mut StreamEp {
        let i = ep as usize;
        if self.eps.len() <= i {
            self.eps.resize_with(i + 1, StreamEp::default);
        }
        &mut self.eps[i]
    }

    /// True when `ep` has received bytes not yet consumed.
    pub(crate) fn has_data(&self, ep: u32) -> bool {
        self.eps.get(ep as usize).is_some_and(|s| !s.rx.is_empty())
    }

    /// The endpoint's slot is reused or gone: its stream is dropped, and receives still
    /// waiting complete with `status`.
    pub(crate) fn forget(&mut self, core: &mut Core, ep: u32, status: Status) {
        if let Some(s) = self.eps.get_mut(ep as usize) {
            let s = std::mem::take(s);
            for r in s.reqs {
                core.complete(r, status);
            }
        }
    }

    /// The endpoint failed: receives waiting on it complete with `status` (its bytes stay
    /// readable).
    pub(crate) fn peer_failed(&mut self, core: &mut Core, ep: u32, status: Status) {
        if let Some(s) = self.eps.get_mut(ep as usize) {
            for r in s.reqs.drain(..) {
                core.complete(r, status);
            }
        }
    }

    /// Endpoint `ep` takes over `other`'s stream (see `engine::adopt_implicit`): bytes
    /// received on `other` come first, then receives posted on `ep` take them.
    pub(crate) fn adopt(&mut self, core: &mut Core, ep: u32, other: u32) {
        let o = std::mem::take(self.at(other));
        let e = self.at(ep);
        e.rx = o.rx;
        e.off = o.off;
        e.reqs.extend(o.reqs);
        satisfy(core, self, ep);
    }
}

/// Sends `buf` on `ep`'s stream.
pub(crate) fn send_nb(
    tls: &mut [Tl],
    core: &mut Core,
    st: &mut StreamState,
    ep: u32,
    buf: Buf,
    cb: Option<Callback>,
    tried: Option<usize>,
) -> Result<Post> {
    let lane = match route(tls, core, ep)? {
        Route::Lane(l) => Some(l),
        Route::Queue => None,
        Route::Fail(s) => {
            let r = core.new_req(ReqKind::Send(SendState::new(SendKind::Stream, ep, buf)), cb);
            core.failed_ops.push((r, s));
            return Ok(Post::Started(r));
        }
    };
    // Straight from the caller's buffer while the endpoint has nothing queued: no
    // request unless something is left over.
    let mut sent = tried.unwrap_or(0);
    if let (None, Some(lane), Some(all)) = (tried, lane, buf.as_bytes()) {
        if core.ep(ep)?.queue.is_empty() {
            sent = send_in_call(tls, core, st, lane, all)?;
            if sent == all.len() {
                return Ok(Post::Done(cb));
            }
        }
    }
    let mut s = SendState::new(SendKind::Stream, ep, buf);
    s.offset = sent;
    s.proto = Proto::Multi;
    Ok(Post::Queue(core.new_req(ReqKind::Send(s), cb)))
}

/// Sends what it can of `all` on `lane` in the call and returns how many bytes went (all
/// of them when the endpoint is to this very worker). The caller has checked that
/// nothing is queued on the endpoint before it, and queues the rest.
#[inline]
pub(crate) fn send_in_call(
    tls: &mut [Tl],
    core: &mut Core,
    st: &mut StreamState,
    lane: Lane,
    all: &[u8],
) -> Result<usize> {
    let len = all.len();
    let hdr = core.uuid.to_le_bytes();
    let t = &mut tls[lane.tl];
    if t.iface.loopback_idle() {
        if let Some(me) = core.ep_of(core.uuid) {
            // To this very worker with nothing queued before it: the bytes join the
            // stream now, as they would in progress.
            append(core, st, me, all)?;
            return Ok(len);
        }
    }
    let chunk_max = t.th.max_bcopy.max(1);
    let mut sent = 0;
    while sent < len {
        let n = chunk_max.min(len - sent);
        let piece = &all[sent..sent + n];
        if !t
            .iface
            .am_zcopy(lane.ep, AmId::Stream.id(), &hdr, &[piece], 0)?
            .is_done()
        {
            break;
        }
        sent += n;
    }
    Ok(sent)
}

/// Receives from `ep`'s stream into `buf`: with `waitall`, exactly `buf.len()` bytes;
/// otherwise whatever is there (at least one byte).
pub(crate) fn recv_nb(
    core: &mut Core,
    st: &mut StreamState,
    ep: u32,
    buf: Buf,
    waitall: bool,
    cb: Option<Callback>,
) -> Result<StreamRecv> {
    core.ep(ep)?;
    if buf.is_empty() {
        return Err(Status::InvalidParam);
    }
    if cb.is_none() {
        if let Some(n) = take_now(st, ep, &buf, waitall) {
            return Ok(StreamRecv::Done(n));
        }
    }
    let r = core.new_req(
        ReqKind::Recv(RecvState {
            buf,
            recv_id: None,
            received: 0,
            truncated: false,
            waitall,
            no_split: false,
        }),
        cb,
    );
    st.at(ep).reqs.push_back(r);
    satisfy(core, st, ep);
    // Completed in the call: report the length and drop the request. One that reports
    // into a completion queue was freed when its entry went there.
    let Some(q) = core.reqs.get_ref(r.0) else {
        return Ok(StreamRecv::Pending(r));
    };
    if q.status == Some(Status::Ok) && !core.completed.contains(&r) {
        let n = q.info.length;
        core.reqs.remove(r.0);
        return Ok(StreamRecv::Done(n));
    }
    Ok(StreamRecv::Pending(r))
}

/// A receive with no callback and no receive before it, that the first piece of received
/// bytes satisfies: copied into `buf` in the call, with no request. The count, or `None`
/// when it has to wait (or span pieces).
#[inline]
fn take_now(st: &mut StreamState, ep: u32, buf: &Buf, waitall: bool) -> Option<usize> {
    let StreamState { eps, bufs } = st;
    let e = eps.get_mut(ep as usize)?;
    if !e.reqs.is_empty() {
        return None;
    }
    let front = e.rx.front()?;
    let avail = front.len() - e.off;
    if avail < buf.len() && (waitall || e.rx.len() > 1) {
        return None;
    }
    let n = buf.write_at(0, &front[e.off..]);
    e.off += n;
    if e.off == front.len() {
        consumed_front(e, bufs);
    }
    Some(n)
}

/// The front piece of `e`'s received bytes is used up (its buffer, if it has one, goes
/// back to the pool).
#[inline]
fn consumed_front(e: &mut StreamEp, bufs: &mut BufPool) {
    if let Some(p) = e.rx.pop_front() {
        p.release(bufs);
    }
    e.off = 0;
}

/// Takes whatever stream bytes `ep` has received (in one piece as they arrived), if any;
/// no receive buffer involved.
pub(crate) fn recv_data(st: &mut StreamState, ep: u32) -> Option<Vec<u8>> {
    let e = st.at(ep);
    if !e.reqs.is_empty() {
        return None;
    }
    let mut v = e.rx.pop_front()?.into_vec();
    if e.off > 0 {
        v.drain(..e.off);
        e.off = 0;
    }
    Some(v)
}

/// Sends the next pieces of a queued stream send. `Ok(true)`: all sent.
pub(crate) fn send_step(tls: &mut [Tl], core: &mut Core, lane: Lane, r: Request) -> Result<bool> {
    let uuid = core.uuid;
    let Some(Req {
        kind: ReqKind::Send(s),
        ..
    }) = core.reqs.get_mut(r.0)
    else {
        return Ok(true);
    };
    s.select = false;
    let len = s.buf.len();
    let t = &mut tls[lane.tl];
    let chunk_max = t.th.max_bcopy.max(1);
    while s.offset < len {
        let off = s.offset;
        let n = chunk_max.min(len - off);
        let buf = &s.buf;
        let out = t.iface.am_bcopy(lane.ep, AmId::Stream.id(), |b| {
            b[..STREAM_HDR].copy_from_slice(&uuid.to_le_bytes());
            STREAM_HDR + buf.read_at(off, &mut b[STREAM_HDR..STREAM_HDR + n])
        })?;
        if !out.is_done() {
            return Ok(false);
        }
        s.offset += n;
    }
    core.complete(r, Status::Ok);
    Ok(true)
}

/// Appends arrived stream bytes to the sender's endpoint.
pub(crate) fn on_stream(core: &mut Core, st: &mut StreamState, d: &[u8]) -> Result<()> {
    if d.len() < STREAM_HDR {
        return Err(Status::InvalidParam);
    }
    let uuid = u64::from_le_bytes(
        d[..STREAM_HDR]
            .try_into()
            .map_err(|_| Status::InvalidParam)?,
    );
    let ep = core.ep_of(uuid).ok_or(Status::InvalidParam)?;
    append(core, st, ep, &d[STREAM_HDR..])
}

/// Appends `data` to `ep`'s stream: waiting receives take it first.
fn append(core: &mut Core, st: &mut StreamState, ep: u32, mut data: &[u8]) -> Result<()> {
    core.ep(ep)?;
    // Receives already waiting take the bytes straight from the message (nothing older
    // can be queued then); only what is left is kept.
    while !data.is_empty() {
        let e = st.at(ep);
        if !e.rx.is_empty() {
            break;
        }
        let Some(&r) = e.reqs.front() else {
            break;
        };
        let done = match core.reqs.get_mut(r.0) {
            Some(Req {
                kind: ReqKind::Recv(rs),
                info,
                status: None,
                ..
            }) => {
                let n = rs.buf.write_at(rs.received, data);
                rs.received += n;
                info.length = rs.received;
                data = &data[n..];
                rs.received == rs.buf.len() || !rs.waitall
            }
            _ => true,
        };
        if !done {
            break;
        }
        st.at(ep).reqs.pop_front();
        core.complete(r, Status::Ok);
    }
    if !data.is_empty() {
        let p = Piece::new(&mut st.bufs, data);
        st.at(ep).rx.push_back(p);
        satisfy(core, st, ep);
    }
    Ok(())
}

/// Moves received stream bytes into waiting receives, in order.
pub(crate) fn satisfy(core: &mut Core, st: &mut StreamState, ep: u32) {
    st.at(ep);
    let StreamState { eps, bufs } = st;
    let e = &mut eps[ep as usize];
    loop {
        let Some(&r) = e.reqs.front() else {
            return;
        };
        if e.rx.is_empty() {
            return;
        }
        let Some(Req {
            kind: ReqKind::Recv(rs),
            info,
            status: None,
            ..
        }) = core.reqs.get_mut(r.0)
        else {
            e.reqs.pop_front();
            continue;
        };
        let want = rs.buf.len();
        while rs.received < want {
            let Some(front) = e.rx.front() else {
                break;
            };
            let avail = &front[e.off..];
            let n = rs.buf.write_at(rs.received, avail);
            rs.received += n;
            e.off += n;
            if e.off == front.len() {
                consumed_front(e, bufs);
            }
        }
        let done = rs.received == want || (!rs.waitall && rs.received > 0);
        info.length = rs.received;
        if !done {
            return;
        }
        e.reqs.pop_front();
        core.complete(r, Status::Ok);
    }
}
