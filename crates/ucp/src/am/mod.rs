//! Active messages: handlers by id, sends of a user header plus data, eagerly in one
//! transport message, in fragments, or by rendezvous (the receiver pulls the data when
//! the application asks for it with [`crate::Worker::am_recv_data_nb`]), an optional reply
//! endpoint, and data a handler keeps after it returns. The wire format is in
//! `proto::am`.
//!
//! Lanes that cannot read remote memory (tcp, udp) send large messages as AmFirst and
//! AmMiddle fragments; the receiver calls the handler once the message is whole.
//! Handlers run inside progress and get the data in place; they may return
//! [`AmAction::Keep`], and the data (or the rendezvous descriptor) then stays available
//! under the message's [`AmDesc`] until released.

use crate::core::cq::{Cq, CqOp, Entry};
use crate::core::ep::{Ep, Lane, Proto};
use crate::core::request::*;
pub use crate::core::request::{AmDesc, AmSendFlags};
use crate::core::{route, Core, Post, Route, Tl};
use crate::matcher::KeyHash;
use crate::proto::am::*;
use crate::proto::select::am_proto;
use crate::proto::AmId;
use crate::rndv::RndvState;
use std::collections::HashMap;
use ucs::{Result, Status};

/// Largest active message sent through the transports' inline (short) path. The message
/// is packed in a stack buffer of this size, zeroed on every send, so it is no larger
/// than the shm FIFO's inline area needs (112 bytes with the default 128-byte elements);
/// longer messages go by bcopy. (At 256 the zeroing alone cost 12 more instructions per
/// message.)
const SHORT_MAX: usize = 128;

/// The data of a received active message.
#[derive(Debug)]
pub enum AmData<'a> {
    /// All of it, in place.
    Eager(&'a [u8]),
    /// Announced by rendezvous: `length` bytes to pull with `am_recv_data_nb` (return
    /// `Keep` to do so after the handler).
    Rndv { length: usize },
}

/// A received active message, as its handler sees it.
#[derive(Debug)]
pub struct AmMsg<'a> {
    pub id: u16,
    pub header: &'a [u8],
    pub data: AmData<'a>,
    /// The endpoint to the sender, when it asked for replies.
    pub reply_ep: Option<Ep>,
    pub desc: AmDesc,
}

/// What a handler does with the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmAction {
    /// Done with it: the data may go.
    Done,
    /// Keep it under the message's descriptor until `am_data_release` (eager) or
    /// `am_recv_data_nb` (rendezvous).
    Keep,
}

/// A handler. It runs inside progress, so it cannot call the worker; it records what it
/// needs and the application acts after progress returns.
pub type AmHandler = Box<dyn FnMut(&AmMsg<'_>) -> AmAction + Send>;

/// Where the arrivals of one active-message id go.
pub(crate) enum Handler {
    /// A closure of the application.
    Fn(AmHandler),
    /// Entries of a completion queue, with this context: an eager message's header and
    /// data are copied into the entry's payload; a rendezvous message is kept under its
    /// descriptor (in the payload) for `am_recv_data_nb` or `am_data_release`.
    Cq(Cq, u64),
}

enum Kept {
    Data(Vec<u8>),
    Rndv {
        uuid: u64,
        sreq: u64,
        len: u64,
        addr: u64,
        rkey: uct::rkey::KeyBytes,
    },
}

/// A fragmented active message being reassembled.
struct PartialAm {
    id: u16,
    flags: u16,
    header: Vec<u8>,
    data: Vec<u8>,
    received: usize,
}

/// The active-message protocol's state in a worker.
#[derive(Default)]
pub(crate) struct AmState {
    /// Handlers indexed by id (ids are small and dense in practice; the table grows to the
    /// largest id registered).
    handlers: Vec<Option<Handler>>,
    kept: HashMap<u64, Kept, KeyHash>,
    next_desc: u64,
    partial: HashMap<(u64, u64), PartialAm, KeyHash>,
    /// Messages (id, bytes) a progress thread received and held back, oldest first: their
    /// handlers are the application's, so they run in its next progress, before anything
    /// newer is read from the transports.
    pub(crate) held: std::collections::VecDeque<(u8, Vec<u8>)>,
}

impl AmState {
    /// Installs (or with `None` removes) the handler of active-message id `id`.
    pub(crate) fn set_handler(&mut self, id: u16, h: Option<Handler>) {
        let t = &mut self.handlers;
        let i = usize::from(id);
        if t.len() <= i {
            if h.is_none() {
                return;
            }
            t.resize_with(i + 1, || None);
        }
        t[i] = h;
    }

    /// The data a handler kept (eager messages).
    pub(crate) fn data(&self, desc: AmDesc) -> Option<&[u8]> {
        match self.kept.get(&desc.0) {
            Some(Kept::Data(v)) => Some(v),
            _ => None,
        }
    }

    /// Keeps `data` as if a handler had kept an eager message with these bytes: under a
    /// new descriptor, for `data`, `data_release` and `am_recv_data_nb`. The bytes do not
    /// move (the vector's buffer is kept as it is).
    pub(crate) fn keep(&mut self, data: Vec<u8>) -> AmDesc {
        let desc = self.next_desc();
        self.kept.insert(desc.0, Kept::Data(data));
        desc
    }

    /// Releases kept data. For a kept rendezvous message that will not be received, the
    /// sender is told it is done.
    pub(crate) fn data_release(&mut self, rndv: &mut RndvState, desc: AmDesc) -> Result<()> {
        match self.kept.remove(&desc.0) {
            Some(Kept::Data(_)) => Ok(()),
            Some(Kept::Rndv { uuid, sreq, .. }) => {
                rndv.decline(uuid, sreq);
                Ok(())
            }
            None => Err(Status::InvalidParam),
        }
    }

    /// Forgets the partly received messages of a peer that failed.
    pub(crate) fn peer_failed(&mut self, uuid: u64) {
        self.partial.retain(|k, _| k.0 != uuid);
    }

    fn next_desc(&mut self) -> AmDesc {
        let d = AmDesc(self.next_desc);
        self.next_desc += 1;
        d
    }

    /// Runs the handler of `msg`'s id: a function in the call; a completion queue's
    /// entry and a missing handler out of line.
    #[inline(always)]
    fn call(&mut self, msg: &AmMsg<'_>) -> AmAction {
        match self
            .handlers
            .get_mut(usize::from(msg.id))
            .and_then(Option::as_mut)
        {
            Some(Handler::Fn(h)) => h(msg),
            other => call_other(other, msg),
        }
    }
}

/// [`AmState::call`] for an id whose handler is a completion queue, or that has none.
#[inline(never)]
fn call_other(h: Option<&mut Handler>, msg: &AmMsg<'_>) -> AmAction {
    let Some(Handler::Cq(cq, user)) = h else {
        tracing::debug!("active message id {} has no handler; dropped", msg.id);
        return AmAction::Done;
    };
    let (data, rndv, length) = match msg.data {
        AmData::Eager(d) => (d, None, d.len()),
        AmData::Rndv { length } => (&[][..], Some((msg.desc, length)), length),
    };
    let am = cq.payload(msg.id, msg.header, data, rndv);
    cq.push(Entry {
        user: *user,
        op: CqOp::AmArrival,
        status: Status::Ok,
        length,
        tag: 0,
        ep: msg.reply_ep,
        am: Some(am),
    });
    if rndv.is_some() {
        AmAction::Keep
    } else {
        AmAction::Done
    }
}

/// Pulls the data of a kept rendezvous message into `buf` (or copies kept eager data).
/// Completes with `MessageTruncated` when `buf` is too small.
pub(crate) fn recv_data_nb(
    core: &mut Core,
    st: &mut AmState,
    rndv: &mut RndvState,
    desc: AmDesc,
    buf: Buf,
    cb: Option<Callback>,
) -> Result<Request> {
    let kept = st.kept.remove(&desc.0).ok_or(Status::InvalidParam)?;
    let r = core.new_req(
        ReqKind::Recv(RecvState {
            buf,
            recv_id: None,
            received: 0,
            truncated: false,
            waitall: false,
            no_split: false,
        }),
        cb,
    );
    match kept {
        Kept::Data(v) => core.recv_whole(r, 0, &v),
        Kept::Rndv {
            uuid,
            sreq,
            len,
            addr,
            rkey,
        } => {
            core.recv_set_info(r, 0, len as usize);
            rndv.accept(r, uuid, sreq, len, addr, rkey);
        }
    }
    Ok(r)
}

/// Sends active message `id` with `header` and `data`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn send_nb(
    tls: &mut [Tl],
    core: &mut Core,
    st: &mut AmState,
    ep: u32,
    id: u16,
    header: &[u8],
    data: Buf,
    flags: AmSendFlags,
    cb: Option<Callback>,
    tried: bool,
) -> Result<Post> {
    if flags.eager && flags.rndv {
        return Err(Status::InvalidParam);
    }
    // Made only when a request is (a message sent in the call allocates nothing).
    let info = || {
        Box::new(AmInfo {
            id,
            header: header.to_vec(),
            flags,
        })
    };
    let lane = match route(tls, core, ep)? {
        Route::Lane(l) => l,
        Route::Queue => {
            // Connecting: the protocol is chosen once the lane is known.
            let mut s = SendState::am(info(), ep, data);
            s.select = true;
            return Ok(Post::Queue(core.new_req(ReqKind::Send(s), cb)));
        }
        Route::Fail(s) => {
            let r = core.new_req(ReqKind::Send(SendState::am(info(), ep, data)), cb);
            core.failed_ops.push((r, s));
            return Ok(Post::Started(r));
        }
    };
    let proto = am_proto(&tls[lane.tl].th, header.len(), &data, flags)?;
    if !tried
        && core.ep(ep)?.queue.is_empty()
        && send_in_call(tls, core, st, lane, proto, id, header, &data, flags)?
    {
        return Ok(Post::Done(cb));
    }
    let mut s = SendState::am(info(), ep, data);
    s.proto = proto;
    Ok(Post::Queue(core.new_req(ReqKind::Send(s), cb)))
}

/// Sends a whole active message in the call when `proto` (chosen by [`am_proto`]) lets
/// it go in one transport operation: to this very worker, by the transport's short path,
/// or by bcopy. `Ok(false)`: it did not go (rendezvous, fragments, or no room in the
/// transport now); the caller queues it. The caller has checked that nothing is queued
/// on the endpoint before it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn send_in_call(
    tls: &mut [Tl],
    core: &mut Core,
    st: &mut AmState,
    lane: Lane,
    proto: Proto,
    id: u16,
    header: &[u8],
    data: &Buf,
    flags: AmSendFlags,
) -> Result<bool> {
    let th = &tls[lane.tl].th;
    let (max_short, len) = (th.max_short, data.len());
    let (rndv, multi) = (proto == Proto::Rndv, proto == Proto::Multi);
    let f = Fields {
        id,
        flags: if flags.reply { FLAG_REPLY } else { 0 },
        hdr_len: header.len(),
        uuid: core.uuid,
    };
    let total = EAGER_HDR + header.len() + len;
    if !rndv && total <= (max_short + 8).min(SHORT_MAX) {
        if let (true, Some(d)) = (tls[lane.tl].iface.loopback_idle(), data.as_bytes()) {
            // To this very worker with nothing queued before it: the handler runs now, as
            // it would in progress, on the caller's bytes (nothing encoded or copied).
            deliver(core, st, &f, header, d);
            return Ok(true);
        }
        // Small enough for the transport's inline path: the first 8 header bytes are
        // its header word, the rest its payload.
        let mut b = [0u8; SHORT_MAX];
        let h = put_fields(&mut b, &f);
        b[h..h + header.len()].copy_from_slice(header);
        let o = h + header.len();
        let n = o + data.read_at(0, &mut b[o..o + len]);
        if tls[lane.tl].iface.loopback_idle() {
            // To this very worker with nothing queued before it: the handler runs now, as
            // it would in progress.
            on_eager(core, st, &b[..n])?;
            return Ok(true);
        }
        let word = u64::from_ne_bytes(b[..8].try_into().map_err(|_| Status::InvalidParam)?);
        if tls[lane.tl]
            .iface
            .am_short(lane.ep, AmId::AmEager.id(), word, &b[8..n])?
            .is_done()
        {
            return Ok(true);
        }
    } else if !rndv && !multi {
        let out = tls[lane.tl]
            .iface
            .am_bcopy(lane.ep, AmId::AmEager.id(), |b| {
                let h = put_fields(b, &f);
                b[h..h + header.len()].copy_from_slice(header);
                let o = h + header.len();
                o + data.read_at(0, &mut b[o..o + len])
            })?;
        if out.is_done() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Sends a queued active message (eager, fragments, or the rendezvous announcement).
/// `Ok(true)`: nothing more to send for it.
pub(crate) fn send_step(tls: &mut [Tl], core: &mut Core, lane: Lane, r: Request) -> Result<bool> {
    let uuid = core.uuid;
    let sreq = r.to_u64();
    let Some(Req {
        kind: ReqKind::Send(s),
        ..
    }) = core.reqs.get_mut(r.0)
    else {
        return Ok(true);
    };
    let Some(am) = &s.am else {
        return Ok(true);
    };
    let t = &mut tls[lane.tl];
    let th = t.th;
    if s.select {
        // Queued before the endpoint had a lane: the protocol is chosen now; a message
        // that cannot go on this lane fails as the call would have.
        s.select = false;
        s.proto = am_proto(&th, am.header.len(), &s.buf, am.flags)?;
    }
    let header = &am.header;
    let f = Fields {
        id: am.id,
        flags: if am.flags.reply { FLAG_REPLY } else { 0 },
        hdr_len: header.len(),
        uuid,
    };
    let len = s.buf.len();
    if s.proto == Proto::Multi {
        if s.msg_id == 0 {
            s.msg_id = core.next_msg_id;
            core.next_msg_id += 1;
        }
        let room = th.max_bcopy + 8;
        while s.offset < len {
            let off = s.offset;
            let first = off == 0;
            let (buf, msg_id) = (&s.buf, s.msg_id);
            let n = if first {
                room - FIRST_HDR - header.len()
            } else {
                room - MIDDLE_HDR
            }
            .min(len - off);
            let id = if first { AmId::AmFirst } else { AmId::AmMiddle };
            let out = t.iface.am_bcopy(lane.ep, id.id(), |b| {
                let o = if first {
                    First::encode_header(&f, msg_id, len as u64, header, b)
                } else {
                    Middle::encode_header(uuid, msg_id, off as u64, b)
                };
                o + buf.read_at(off, &mut b[o..o + n])
            })?;
            if !out.is_done() {
                return Ok(false);
            }
            s.offset += n;
        }
        core.complete(r, Status::Ok);
        return Ok(true);
    }
    if s.proto != Proto::Rndv {
        let buf = &s.buf;
        let out = t.iface.am_bcopy(lane.ep, AmId::AmEager.id(), |b| {
            let h = put_fields(b, &f);
            b[h..h + header.len()].copy_from_slice(header);
            let o = h + header.len();
            o + buf.read_at(0, &mut b[o..o + len])
        })?;
        if !out.is_done() {
            return Ok(false);
        }
        core.complete(r, Status::Ok);
        return Ok(true);
    }
    if s.mem.is_none() {
        // The registration (s.mem) is dropped with the request.
        s.mem = Some(Box::new(s.buf.mem_reg(&t.md, len.max(1))?));
    }
    let (rkey, addr) = match &s.mem {
        Some(m) => (m.pack_rkey_compact(), m.address() as u64),
        None => return Err(Status::NoMemory),
    };
    let rts = Rts {
        f,
        sreq,
        len: len as u64,
        addr,
        header,
        rkey: &rkey,
    };
    let out = t.iface.am_bcopy(lane.ep, AmId::AmRts.id(), |b| {
        if b.len() < rts.encoded_len() {
            return usize::MAX;
        }
        rts.encode_into(b)
    })?;
    if !out.is_done() {
        return Ok(false);
    }
    s.remote_pending = true;
    let ep = s.ep;
    if let Ok(e) = core.ep_mut(ep) {
        e.outstanding += 1;
    }
    Ok(true)
}

fn reply_ep(core: &Core, flags: u16, uuid: u64) -> Option<Ep> {
    (flags & FLAG_REPLY != 0)
        .then(|| core.ep_of(uuid).map(|e| core.handle(e)))
        .flatten()
}

/// An AmEager arrived: its handler runs.
pub(crate) fn on_eager(core: &Core, st: &mut AmState, d: &[u8]) -> Result<()> {
    let (f, header, data) = decode_eager(d)?;
    deliver(core, st, &f, header, data);
    Ok(())
}

/// A whole eager message (decoded, or straight from a sender in this worker): its handler
/// runs; data it keeps is copied.
#[inline(always)]
fn deliver(core: &Core, st: &mut AmState, f: &Fields, header: &[u8], data: &[u8]) {
    let desc = st.next_desc();
    let msg = AmMsg {
        id: f.id,
        header,
        data: AmData::Eager(data),
        reply_ep: reply_ep(core, f.flags, f.uuid),
        desc,
    };
    if st.call(&msg) == AmAction::Keep {
        st.kept.insert(desc.0, Kept::Data(data.to_vec()));
    }
}

/// An AmRts arrived: its handler runs; a message it does not keep is declined.
pub(crate) fn on_rts(core: &Core, st: &mut AmState, rndv: &mut RndvState, d: &[u8]) -> Result<()> {
    let rts = Rts::decode(d)?;
    let desc = st.next_desc();
    let msg = AmMsg {
        id: rts.f.id,
        header: rts.header,
        data: AmData::Rndv {
            length: rts.len as usize,
        },
        reply_ep: reply_ep(core, rts.f.flags, rts.f.uuid),
        desc,
    };
    match st.call(&msg) {
        AmAction::Keep => {
            st.kept.insert(
                desc.0,
                Kept::Rndv {
                    uuid: rts.f.uuid,
                    sreq: rts.sreq,
                    len: rts.len,
                    addr: rts.addr,
                    rkey: uct::rkey::KeyBytes::from_slice(rts.rkey)?,
                },
            );
        }
        // Not wanted: the sender may let go of its buffer.
        AmAction::Done => rndv.decline(rts.f.uuid, rts.sreq),
    }
    Ok(())
}

/// Reassembles a fragmented active message; the handler runs once it is whole.
pub(crate) fn on_fragment(core: &Core, st: &mut AmState, first: bool, d: &[u8]) -> Result<()> {
    let bad = Status::InvalidParam;
    let (key, done) = if first {
        let m = First::decode(d)?;
        let total = usize::try_from(m.total).map_err(|_| bad)?;
        if m.data.len() > total {
            return Err(bad);
        }
        let mut data = Vec::new();
        // The whole message is kept, so bound what a header may make us reserve.
        data.try_reserve_exact(total)
            .map_err(|_| Status::NoMemory)?;
        data.resize(total, 0);
        ucs::sys::copy::copy(&mut data, m.data);
        let p = PartialAm {
            id: m.f.id,
            flags: m.f.flags,
            header: m.header.to_vec(),
            data,
            received: m.data.len(),
        };
        let key = (m.f.uuid, m.msg_id);
        let done = p.received == total;
        st.partial.insert(key, p);
        (key, done)
    } else {
        let m = Middle::decode(d)?;
        let off = usize::try_from(m.offset).map_err(|_| bad)?;
        let key = (m.uuid, m.msg_id);
        let p = st.partial.get_mut(&key).ok_or(bad)?;
        if off != p.received || off + m.data.len() > p.data.len() {
            return Err(bad);
        }
        ucs::sys::copy::copy(&mut p.data[off..], m.data);
        p.received += m.data.len();
        (key, p.received == p.data.len())
    };
    if !done {
        return Ok(());
    }
    let Some(p) = st.partial.remove(&key) else {
        return Ok(());
    };
    let desc = st.next_desc();
    let msg = AmMsg {
        id: p.id,
        header: &p.header,
        data: AmData::Eager(&p.data),
        reply_ep: reply_ep(core, p.flags, key.0),
        desc,
    };
    if st.call(&msg) == AmAction::Keep {
        st.kept.insert(desc.0, Kept::Data(p.data));
    }
    Ok(())
}
