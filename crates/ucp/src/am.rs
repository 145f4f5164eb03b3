//! Active messages: handlers by id, sends of a user header plus data, eagerly in one
//! transport message or by rendezvous (the receiver pulls the data when the application
//! asks for it with [`Worker::am_recv_data_nb`]), an optional reply endpoint, and data a
//! handler keeps after it returns.
//!
//! ```text
//! id 15  AmEager: am id u16 | flags u16 | header length u32 | src uuid u64 | header | data
//! id 16  AmRts:   am id u16 | flags u16 | header length u32 | src uuid u64 | sender request u64
//!                 | length u64 | address u64 | rkey length u16 | header | rkey
//! id 18  AmFirst: am id u16 | flags u16 | header length u32 | src uuid u64 | msg id u64
//!                 | total length u64 | header | first data fragment
//! id 19  AmMiddle: src uuid u64 | msg id u64 | offset u64 | next data fragment
//! Lanes that cannot read remote memory (tcp, udp) send large messages as AmFirst and
//! AmMiddle fragments; the receiver calls the handler once the message is whole.
//! flags: bit 0 = the receiver may reply (reply endpoint given); other bits reserved (0)
//! ```
//! Handlers run inside progress and get the data in place; they may return
//! [`AmAction::Keep`], and the data (or the rendezvous descriptor) then stays available
//! under the message's [`AmDesc`] until released.

use crate::proto::header::AM_ATS;
use crate::proto::select::{Proto, Thresholds};
use crate::request::*;
use crate::worker::{enqueue, route, Deferred, Ep, Lane, Queued, Route, State, Tl, Worker};
use std::collections::HashMap;
use std::time::Duration;
use ucs::{Result, Status};
use uct::wire::Reader;

pub const AM_AM_EAGER: u8 = 15;
pub const AM_AM_RTS: u8 = 16;
pub const AM_AM_FIRST: u8 = 18;
pub const AM_AM_MIDDLE: u8 = 19;
/// AmFirst header before the user header: the AmEager fields, message id, total length.
const FIRST_HDR: usize = 32;
/// AmMiddle header: src uuid, message id, offset.
const MIDDLE_HDR: usize = 24;
const EAGER_HDR: usize = 16;
const RTS_HDR: usize = 42;
const FLAG_REPLY: u16 = 1;
/// Largest active message sent through the transports' inline (short) path.
const SHORT_MAX: usize = 256;

/// Names a received message's data for `am_data`, `am_data_release` and
/// `am_recv_data_nb`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AmDesc(pub u64);

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

/// How to send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AmSendFlags {
    /// Give the receiver an endpoint to reply on.
    pub reply: bool,
    /// Use the eager protocol (the message must fit one transport message).
    pub eager: bool,
    /// Use the rendezvous protocol.
    pub rndv: bool,
}

/// The protocol of an active message with a `hdr_len`-byte header and `data` on a lane
/// with thresholds `th`; `InvalidParam` when it cannot go as asked.
pub(crate) fn am_proto(
    th: &Thresholds,
    hdr_len: usize,
    data: &Buf,
    flags: AmSendFlags,
) -> Result<Proto> {
    let len = data.len();
    let fits = EAGER_HDR + hdr_len + len <= th.max_bcopy + 8;
    // Rendezvous needs a lane that reads remote memory and a contiguous buffer; other
    // large messages go in fragments.
    let can_rndv = th.rma && data.contig_ptr().is_some();
    let want_rndv = flags.rndv || (!flags.eager && (!fits || (len >= th.rndv && len > 0)));
    if flags.eager && !fits {
        return Err(Status::InvalidParam);
    }
    if want_rndv && can_rndv {
        return Ok(Proto::Rndv);
    }
    if fits {
        return Ok(Proto::Bcopy);
    }
    if FIRST_HDR + hdr_len > th.max_bcopy {
        return Err(Status::InvalidParam);
    }
    Ok(Proto::Multi)
}

enum Kept {
    Data(Vec<u8>),
    Rndv {
        uuid: u64,
        sreq: u64,
        len: u64,
        addr: u64,
        rkey: Vec<u8>,
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

#[derive(Default)]
pub(crate) struct AmState {
    /// Handlers indexed by id (ids are small and dense in practice; the table grows to the
    /// largest id registered).
    handlers: Vec<Option<AmHandler>>,
    kept: HashMap<u64, Kept>,
    next_desc: u64,
    partial: HashMap<(u64, u64), PartialAm>,
}

struct Fields {
    id: u16,
    flags: u16,
    hdr_len: usize,
    uuid: u64,
}

fn put_fields(b: &mut [u8], f: &Fields) -> usize {
    b[0..2].copy_from_slice(&f.id.to_le_bytes());
    b[2..4].copy_from_slice(&f.flags.to_le_bytes());
    b[4..8].copy_from_slice(&(f.hdr_len as u32).to_le_bytes());
    b[8..16].copy_from_slice(&f.uuid.to_le_bytes());
    16
}

fn get_fields(r: &mut Reader<'_>) -> Result<Fields> {
    let bad = Status::InvalidParam;
    let f = Fields {
        id: r.u16().ok_or(bad)?,
        flags: r.u16().ok_or(bad)?,
        hdr_len: r.u32().ok_or(bad)? as usize,
        uuid: r.u64().ok_or(bad)?,
    };
    if f.flags & !FLAG_REPLY != 0 {
        return Err(bad);
    }
    Ok(f)
}

/// Decodes an AmEager into (fields, header, data).
fn decode_eager(d: &[u8]) -> Result<(Fields, &[u8], &[u8])> {
    let mut r = Reader::new(d);
    let f = get_fields(&mut r)?;
    let header = r.bytes(f.hdr_len).ok_or(Status::InvalidParam)?;
    let data = &d[EAGER_HDR + f.hdr_len..];
    Ok((f, header, data))
}

/// A decoded AmRts.
struct Rts<'a> {
    f: Fields,
    sreq: u64,
    len: u64,
    addr: u64,
    header: &'a [u8],
    rkey: &'a [u8],
}

fn decode_rts(d: &[u8]) -> Result<Rts<'_>> {
    let bad = Status::InvalidParam;
    let mut r = Reader::new(d);
    let f = get_fields(&mut r)?;
    let (sreq, len, addr) = (
        r.u64().ok_or(bad)?,
        r.u64().ok_or(bad)?,
        r.u64().ok_or(bad)?,
    );
    let klen = r.u16().ok_or(bad)? as usize;
    let header = r.bytes(f.hdr_len).ok_or(bad)?;
    let rkey = r.bytes(klen).ok_or(bad)?;
    if !r.is_empty() {
        return Err(bad);
    }
    Ok(Rts {
        f,
        sreq,
        len,
        addr,
        header,
        rkey,
    })
}

impl Worker {
    /// Installs (or with `None` removes) the handler of active-message id `id`.
    pub fn am_set_handler(&mut self, id: u16, h: Option<AmHandler>) {
        let t = &mut self.st.am.handlers;
        let i = usize::from(id);
        if t.len() <= i {
            if h.is_none() {
                return;
            }
            t.resize_with(i + 1, || None);
        }
        t[i] = h;
    }

    /// Sends active message `id` with `header` and `data`. `None`: complete.
    ///
    /// # Safety
    /// `data` must stay readable and unchanged until the send completes.
    pub unsafe fn am_send_nb(
        &mut self,
        ep: Ep,
        id: u16,
        header: &[u8],
        data: Buf,
        flags: AmSendFlags,
        cb: Option<Callback>,
    ) -> Result<Option<Request>> {
        if flags.eager && flags.rndv {
            return Err(Status::InvalidParam);
        }
        let (tls, st) = (&mut self.tls, &mut self.st);
        let info = Box::new(AmInfo {
            id,
            header: header.to_vec(),
            flags,
        });
        let lane = match route(tls, st, ep.0)? {
            Route::Lane(l) => l,
            Route::Queue => {
                // Connecting: the protocol is chosen once the lane is known.
                let mut s = SendState::new(SendKind::Am(info), ep.0, data);
                s.select = true;
                let r = st.new_req(ReqKind::Send(s), cb);
                enqueue(tls, st, ep.0, Queued::Send(r))?;
                return Ok(Some(r));
            }
            Route::Fail(s) => {
                let r = st.new_req(
                    ReqKind::Send(SendState::new(SendKind::Am(info), ep.0, data)),
                    cb,
                );
                st.failed_ops.push((r, s));
                return Ok(Some(r));
            }
        };
        let len = data.len();
        let proto = am_proto(&lane.th, header.len(), &data, flags)?;
        let (rndv, multi) = (proto == Proto::Rndv, proto == Proto::Multi);
        let f = Fields {
            id,
            flags: if flags.reply { FLAG_REPLY } else { 0 },
            hdr_len: header.len(),
            uuid: st.uuid,
        };
        let total = EAGER_HDR + header.len() + len;
        if !rndv && st.ep(ep.0)?.queue.is_empty() && total <= (lane.th.max_short + 8).min(SHORT_MAX)
        {
            // Small enough for the transport's inline path: the first 8 header bytes are
            // its header word, the rest its payload.
            let mut b = [0u8; SHORT_MAX];
            let h = put_fields(&mut b, &f);
            b[h..h + header.len()].copy_from_slice(header);
            let o = h + header.len();
            // SAFETY: the caller promised `data` is readable until completion.
            let n = o + unsafe { data.read_at(0, &mut b[o..o + len]) };
            let word = u64::from_ne_bytes(b[..8].try_into().map_err(|_| Status::InvalidParam)?);
            if tls[lane.tl]
                .iface
                .am_short(lane.ep, AM_AM_EAGER, word, &b[8..n])?
                .is_done()
            {
                return Ok(None);
            }
        } else if !rndv && !multi && st.ep(ep.0)?.queue.is_empty() {
            let out = tls[lane.tl].iface.am_bcopy(lane.ep, AM_AM_EAGER, |b| {
                let h = put_fields(b, &f);
                b[h..h + header.len()].copy_from_slice(header);
                let o = h + header.len();
                // SAFETY: the caller promised `data` is readable until completion.
                o + unsafe { data.read_at(0, &mut b[o..o + len]) }
            })?;
            if out.is_done() {
                return Ok(None);
            }
        }
        let mut s = SendState::new(SendKind::Am(info), ep.0, data);
        s.proto = proto;
        let r = st.new_req(ReqKind::Send(s), cb);
        enqueue(tls, st, ep.0, Queued::Send(r))?;
        Ok(Some(r))
    }

    /// Sends and waits for completion.
    pub fn am_send(
        &mut self,
        ep: Ep,
        id: u16,
        header: &[u8],
        data: &[u8],
        flags: AmSendFlags,
    ) -> Result<()> {
        // SAFETY: `data` is borrowed for the whole call; the request completes or is
        // aborted before returning.
        let r = unsafe {
            self.am_send_nb(
                ep,
                id,
                header,
                Buf::contig(data.as_ptr().cast_mut(), data.len()),
                flags,
                None,
            )?
        };
        let Some(r) = r else { return Ok(()) };
        match self.wait_done(r, Duration::from_secs(120)) {
            Ok(s) => {
                self.request_free(r)?;
                if s == Status::Ok {
                    Ok(())
                } else {
                    Err(s)
                }
            }
            Err(e) => {
                self.request_abort(r)?;
                self.request_free(r)?;
                Err(e)
            }
        }
    }

    /// The data a handler kept (eager messages).
    pub fn am_data(&self, desc: AmDesc) -> Option<&[u8]> {
        match self.st.am.kept.get(&desc.0) {
            Some(Kept::Data(v)) => Some(v),
            _ => None,
        }
    }

    /// Releases kept data. For a kept rendezvous message that will not be received, the
    /// sender is told it is done.
    pub fn am_data_release(&mut self, desc: AmDesc) -> Result<()> {
        match self.st.am.kept.remove(&desc.0) {
            Some(Kept::Data(_)) => Ok(()),
            Some(Kept::Rndv { uuid, sreq, .. }) => {
                self.st.deferred.push_back(Deferred::Ats {
                    uuid,
                    sreq,
                    status: Status::Canceled,
                });
                Ok(())
            }
            None => Err(Status::InvalidParam),
        }
    }

    /// Pulls the data of a kept rendezvous message into `buf` (or copies kept eager
    /// data). Completes with `MessageTruncated` when `buf` is too small.
    ///
    /// # Safety
    /// `buf` must stay writable and unaliased until the request completes.
    pub unsafe fn am_recv_data_nb(
        &mut self,
        desc: AmDesc,
        buf: Buf,
        cb: Option<Callback>,
    ) -> Result<Request> {
        let kept = self
            .st
            .am
            .kept
            .remove(&desc.0)
            .ok_or(Status::InvalidParam)?;
        let r = self.st.new_req(
            ReqKind::Recv(RecvState {
                buf,
                recv_id: None,
                received: 0,
                truncated: false,
                waitall: false,
            }),
            cb,
        );
        match kept {
            Kept::Data(v) => self.st.consume_unexp(
                r,
                0,
                crate::worker::Unexp::Eager {
                    data: v,
                    sync: None,
                },
            ),
            Kept::Rndv {
                uuid,
                sreq,
                len,
                addr,
                rkey,
            } => {
                self.st.consume_unexp(
                    r,
                    0,
                    crate::worker::Unexp::Rts {
                        uuid,
                        sreq,
                        len,
                        addr,
                        rkey,
                    },
                );
            }
        }
        self.progress();
        Ok(r)
    }

    /// Blocking `am_recv_data_nb`; returns the message length.
    pub fn am_recv_data(&mut self, desc: AmDesc, buf: &mut [u8]) -> Result<usize> {
        // SAFETY: `buf` is borrowed for the whole call; the request completes or is
        // aborted before returning.
        let r =
            unsafe { self.am_recv_data_nb(desc, Buf::contig(buf.as_mut_ptr(), buf.len()), None)? };
        let s = match self.wait_done(r, Duration::from_secs(120)) {
            Ok(s) => s,
            Err(e) => {
                self.request_abort(r)?;
                self.request_free(r)?;
                return Err(e);
            }
        };
        let info = self.request_info(r)?;
        self.request_free(r)?;
        if s == Status::Ok {
            Ok(info.length)
        } else {
            Err(s)
        }
    }
}

/// Sends a queued active message (eager, or the rendezvous announcement).
pub(crate) fn am_send_step(tls: &mut [Tl], st: &mut State, lane: Lane, r: Request) -> Result<bool> {
    let uuid = st.uuid;
    let sreq = r.to_u64();
    let Some(Req {
        kind: ReqKind::Send(s),
        ..
    }) = st.reqs.get_mut(r.0)
    else {
        return Ok(true);
    };
    let SendKind::Am(am) = &s.kind else {
        return Ok(true);
    };
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
            s.msg_id = st.next_msg_id;
            st.next_msg_id += 1;
        }
        let room = lane.th.max_bcopy + 8;
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
            let out = tls[lane.tl].iface.am_bcopy(
                lane.ep,
                if first { AM_AM_FIRST } else { AM_AM_MIDDLE },
                |b| {
                    let mut o = if first { put_fields(b, &f) } else { 0 };
                    let words: &[u64] = if first {
                        &[msg_id, len as u64]
                    } else {
                        &[uuid, msg_id, off as u64]
                    };
                    for w in words {
                        b[o..o + 8].copy_from_slice(&w.to_le_bytes());
                        o += 8;
                    }
                    if first {
                        b[o..o + header.len()].copy_from_slice(header);
                        o += header.len();
                    }
                    // SAFETY: the sender promised the data stays readable until completion.
                    o + unsafe { buf.read_at(off, &mut b[o..o + n]) }
                },
            )?;
            if !out.is_done() {
                return Ok(false);
            }
            s.offset += n;
        }
        st.complete(r, Status::Ok);
        return Ok(true);
    }
    if s.proto != Proto::Rndv {
        let buf = &s.buf;
        let out = tls[lane.tl].iface.am_bcopy(lane.ep, AM_AM_EAGER, |b| {
            let h = put_fields(b, &f);
            b[h..h + header.len()].copy_from_slice(header);
            let o = h + header.len();
            // SAFETY: the sender promised the data stays readable until completion.
            o + unsafe { buf.read_at(0, &mut b[o..o + len]) }
        })?;
        if !out.is_done() {
            return Ok(false);
        }
        st.complete(r, Status::Ok);
        return Ok(true);
    }
    if s.mem.is_none() {
        let ptr = s.buf.contig_ptr().ok_or(Status::InvalidParam)?;
        // SAFETY: the sender promised the buffer stays valid until the send completes,
        // and the registration (s.mem) is dropped with the request.
        s.mem = Some(Box::new(unsafe {
            tls[lane.tl].md.mem_reg(ptr, len.max(1))
        }?));
    }
    let (rkey, addr) = match &s.mem {
        Some(m) => (m.pack_rkey_compact(), m.address() as u64),
        None => return Err(Status::NoMemory),
    };
    let out = tls[lane.tl].iface.am_bcopy(lane.ep, AM_AM_RTS, |b| {
        if b.len() < RTS_HDR + header.len() + rkey.len() {
            return usize::MAX;
        }
        let mut o = put_fields(b, &f);
        for v in [sreq, len as u64, addr] {
            b[o..o + 8].copy_from_slice(&v.to_le_bytes());
            o += 8;
        }
        b[o..o + 2].copy_from_slice(&(rkey.len() as u16).to_le_bytes());
        o += 2;
        b[o..o + header.len()].copy_from_slice(header);
        o += header.len();
        b[o..o + rkey.len()].copy_from_slice(&rkey);
        o + rkey.len()
    })?;
    if !out.is_done() {
        return Ok(false);
    }
    s.remote_pending = true;
    let ep = s.ep;
    if let Ok(e) = st.ep_mut(ep) {
        e.outstanding += 1;
    }
    Ok(true)
}

impl State {
    /// Delivers an active message (eager or rendezvous announcement) to its handler.
    pub(crate) fn on_am_msg(&mut self, id: u8, d: &[u8]) -> Result<()> {
        if id == AM_AM_FIRST || id == AM_AM_MIDDLE {
            return self.on_am_fragment(id, d);
        }
        let desc = AmDesc(self.am.next_desc);
        self.am.next_desc += 1;
        if id == AM_AM_EAGER {
            let (f, header, data) = decode_eager(d)?;
            let reply_ep = (f.flags & FLAG_REPLY != 0)
                .then(|| self.by_uuid.get(&f.uuid).map(|&e| Ep(e)))
                .flatten();
            let msg = AmMsg {
                id: f.id,
                header,
                data: AmData::Eager(data),
                reply_ep,
                desc,
            };
            let action = match self
                .am
                .handlers
                .get_mut(usize::from(f.id))
                .and_then(Option::as_mut)
            {
                Some(h) => h(&msg),
                None => {
                    tracing::debug!("active message id {} has no handler; dropped", f.id);
                    AmAction::Done
                }
            };
            if action == AmAction::Keep {
                self.am.kept.insert(desc.0, Kept::Data(data.to_vec()));
            }
            return Ok(());
        }
        let rts = decode_rts(d)?;
        let reply_ep = (rts.f.flags & FLAG_REPLY != 0)
            .then(|| self.by_uuid.get(&rts.f.uuid).map(|&e| Ep(e)))
            .flatten();
        let msg = AmMsg {
            id: rts.f.id,
            header: rts.header,
            data: AmData::Rndv {
                length: rts.len as usize,
            },
            reply_ep,
            desc,
        };
        let action = match self
            .am
            .handlers
            .get_mut(usize::from(rts.f.id))
            .and_then(Option::as_mut)
        {
            Some(h) => h(&msg),
            None => AmAction::Done,
        };
        match action {
            AmAction::Keep => {
                self.am.kept.insert(
                    desc.0,
                    Kept::Rndv {
                        uuid: rts.f.uuid,
                        sreq: rts.sreq,
                        len: rts.len,
                        addr: rts.addr,
                        rkey: rts.rkey.to_vec(),
                    },
                );
            }
            // Not wanted: the sender may let go of its buffer.
            AmAction::Done => self.deferred.push_back(Deferred::Ats {
                uuid: rts.f.uuid,
                sreq: rts.sreq,
                status: Status::Canceled,
            }),
        }
        let _ = AM_ATS;
        Ok(())
    }
}

impl AmState {
    /// Forgets the partly received messages of a peer that failed.
    pub(crate) fn drop_partial_from(&mut self, uuid: u64) {
        self.partial.retain(|k, _| k.0 != uuid);
    }
}

impl State {
    /// Reassembles a fragmented active message; the handler runs once it is whole.
    fn on_am_fragment(&mut self, id: u8, d: &[u8]) -> Result<()> {
        let bad = Status::InvalidParam;
        let mut r = Reader::new(d);
        let (key, done) = if id == AM_AM_FIRST {
            let f = get_fields(&mut r)?;
            let msg_id = r.u64().ok_or(bad)?;
            let total = usize::try_from(r.u64().ok_or(bad)?).map_err(|_| bad)?;
            let header = r.bytes(f.hdr_len).ok_or(bad)?.to_vec();
            let chunk = &d[FIRST_HDR + f.hdr_len..];
            if chunk.len() > total {
                return Err(bad);
            }
            let mut data = Vec::new();
            // The whole message is kept, so bound what a header may make us reserve.
            data.try_reserve_exact(total)
                .map_err(|_| Status::NoMemory)?;
            data.resize(total, 0);
            data[..chunk.len()].copy_from_slice(chunk);
            let p = PartialAm {
                id: f.id,
                flags: f.flags,
                header,
                data,
                received: chunk.len(),
            };
            let key = (f.uuid, msg_id);
            let done = p.received == total;
            self.am.partial.insert(key, p);
            (key, done)
        } else {
            let uuid = r.u64().ok_or(bad)?;
            let msg_id = r.u64().ok_or(bad)?;
            let off = usize::try_from(r.u64().ok_or(bad)?).map_err(|_| bad)?;
            let chunk = &d[MIDDLE_HDR..];
            let key = (uuid, msg_id);
            let p = self.am.partial.get_mut(&key).ok_or(bad)?;
            if off != p.received || off + chunk.len() > p.data.len() {
                return Err(bad);
            }
            p.data[off..off + chunk.len()].copy_from_slice(chunk);
            p.received += chunk.len();
            (key, p.received == p.data.len())
        };
        if !done {
            return Ok(());
        }
        let Some(p) = self.am.partial.remove(&key) else {
            return Ok(());
        };
        let desc = AmDesc(self.am.next_desc);
        self.am.next_desc += 1;
        let reply_ep = (p.flags & FLAG_REPLY != 0)
            .then(|| self.by_uuid.get(&key.0).map(|&e| Ep(e)))
            .flatten();
        let msg = AmMsg {
            id: p.id,
            header: &p.header,
            data: AmData::Eager(&p.data),
            reply_ep,
            desc,
        };
        let action = match self
            .am
            .handlers
            .get_mut(usize::from(p.id))
            .and_then(Option::as_mut)
        {
            Some(h) => h(&msg),
            None => AmAction::Done,
        };
        if action == AmAction::Keep {
            self.am.kept.insert(desc.0, Kept::Data(p.data));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = decode_eager(&b);
            let _ = decode_rts(&b);
        }

        #[test]
        fn eager_round_trip(id: u16, reply: bool, uuid: u64, header in proptest::collection::vec(any::<u8>(), 0..20), data in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut b = vec![0u8; 16 + header.len() + data.len()];
            let f = Fields { id, flags: if reply { FLAG_REPLY } else { 0 }, hdr_len: header.len(), uuid };
            let h = put_fields(&mut b, &f);
            b[h..h + header.len()].copy_from_slice(&header);
            b[h + header.len()..].copy_from_slice(&data);
            let (g, hd, dd) = decode_eager(&b).unwrap();
            prop_assert_eq!((g.id, g.flags, g.uuid), (id, f.flags, uuid));
            prop_assert_eq!(hd, &header[..]);
            prop_assert_eq!(dd, &data[..]);
        }
    }
}
