//! The sending side of the tag protocols: the in-call fast path (a whole message in one
//! transport operation) and the queued send step (bcopy, fragments, rendezvous
//! announcement).

use super::TagState;
use crate::core::ep::{Lane, Proto};
use crate::core::request::*;
use crate::core::{route, Core, Post, Route, Tl};
use crate::proto::header::*;
use crate::proto::select::tag_proto;
use crate::proto::AmId;
use ucs::{Result, Status};

/// The tag as the 8 header bytes of `am_short` (little endian on the wire).
#[inline]
fn tag_hdr(tag: u64) -> u64 {
    u64::from_ne_bytes(tag.to_le_bytes())
}

/// Sends `buf` with `tag` on `ep`: in the call when the message fits one transport
/// operation and nothing is queued before it, else as a request for the queue. `tried`:
/// the caller already made the in-call attempt ([`eager_in_call`]) and it did not go, so
/// it is not made again.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn send_nb(
    tls: &mut [Tl],
    core: &mut Core,
    st: &mut TagState,
    ep: u32,
    buf: Buf,
    tag: u64,
    sync: bool,
    cb: Option<Callback>,
    tried: bool,
) -> Result<Post> {
    let lane = match route(tls, core, ep)? {
        Route::Lane(l) => Some(l),
        Route::Queue => None,
        Route::Fail(s) => {
            let r = core.new_req(ReqKind::Send(SendState::new(SendKind::Tag, ep, buf)), cb);
            core.failed_ops.push((r, s));
            return Ok(Post::Started(r));
        }
    };
    if let Some(lane) = lane.filter(|_| !sync && !tried) {
        if let (Some(data), true) = (buf.as_bytes(), core.ep(ep)?.queue.is_empty()) {
            if eager_in_call(tls, core, st, lane, tag, data)? {
                return Ok(Post::Done(cb));
            }
        }
    }
    let mut s = SendState::new(SendKind::Tag, ep, buf);
    s.tag = tag;
    s.sync = sync;
    match lane {
        Some(l) => s.proto = tag_proto(&tls[l.tl].th, &s.buf, sync),
        None => s.select = true,
    }
    Ok(Post::Queue(core.new_req(ReqKind::Send(s), cb)))
}

/// A whole message to this very worker with nothing queued before it: the receive side
/// takes it now (it never calls a transport, so this is safe). Out of line, so that the
/// sends that inline [`eager_in_call`] carry the receive path only as a call.
#[inline(never)]
fn loopback(core: &mut Core, st: &mut TagState, tag: u64, data: &[u8]) {
    super::recv::eager(core, st, tag, data, None);
}

/// Sends the whole message `data` with `tag` on `lane` in the call, when it fits one
/// transport operation (short or bcopy). `Ok(false)`: it did not go (too long, or the
/// transport has no room now); the caller queues it. The caller has checked that nothing
/// is queued on the endpoint before it.
#[inline(always)]
pub(crate) fn eager_in_call(
    tls: &mut [Tl],
    core: &mut Core,
    st: &mut TagState,
    lane: Lane,
    tag: u64,
    data: &[u8],
) -> Result<bool> {
    let len = data.len();
    let t = &mut tls[lane.tl];
    let proto = t.th.select(len, false);
    if matches!(proto, Proto::Short | Proto::Bcopy) && t.iface.loopback_idle() {
        loopback(core, st, tag, data);
        return Ok(true);
    }
    Ok(match proto {
        Proto::Short => t
            .iface
            .am_short(lane.ep, AmId::EagerOnly.id(), tag_hdr(tag), data)?
            .is_done(),
        Proto::Bcopy => t
            .iface
            .am_bcopy(lane.ep, AmId::EagerOnly.id(), |b| {
                b[..8].copy_from_slice(&tag.to_le_bytes());
                ucs::sys::copy::copy(&mut b[8..], data);
                8 + len
            })?
            .is_done(),
        Proto::Multi | Proto::Rndv => false,
    })
}

/// Advances one queued tag send. `Ok(true)`: nothing more to send for it.
pub(crate) fn send_step(tls: &mut [Tl], core: &mut Core, lane: Lane, r: Request) -> Result<bool> {
    let uuid = core.uuid;
    let Some(q) = core.reqs.get_mut(r.0) else {
        return Ok(true);
    };
    if q.status.is_some() {
        return Ok(true);
    }
    let ReqKind::Send(s) = &mut q.kind else {
        return Ok(true);
    };
    let t = &mut tls[lane.tl];
    let th = t.th;
    if s.select {
        // Queued before the endpoint had a lane: the protocol is chosen now.
        s.select = false;
        s.proto = tag_proto(&th, &s.buf, s.sync);
    }
    let iface = &mut t.iface;
    let len = s.buf.len();
    let sreq = r.to_u64();
    let waits_for_peer;
    match s.proto {
        Proto::Short | Proto::Bcopy => {
            let sync = s.sync;
            let (tag, buf) = (s.tag, &s.buf);
            let id = if sync {
                AmId::EagerSync
            } else {
                AmId::EagerOnly
            };
            let out = iface.am_bcopy(lane.ep, id.id(), |b| {
                let h = if sync {
                    EagerSync { tag, uuid, sreq }.encode_into(b)
                } else {
                    b[..8].copy_from_slice(&tag.to_le_bytes());
                    EAGER_ONLY_LEN
                };
                h + buf.read_at(0, &mut b[h..h + len])
            })?;
            if !out.is_done() {
                return Ok(false);
            }
            waits_for_peer = sync;
        }
        Proto::Multi => {
            if s.msg_id == 0 {
                s.msg_id = core.next_msg_id;
                core.next_msg_id += 1;
            }
            let zcopy = len >= th.zcopy && s.buf.as_bytes().is_some();
            while s.offset < len {
                let off = s.offset;
                let first = off == 0;
                let chunk = if first { th.first_frag } else { th.mid_frag }.min(len - off);
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
                    AmId::EagerFirst
                } else {
                    AmId::EagerMiddle
                }
                .id();
                let done = if let (true, Some(all)) = (zcopy, s.buf.as_bytes()) {
                    let data = &all[off..off + chunk];
                    iface
                        .am_zcopy(lane.ep, id, &hdr[..h], &[data], 0)?
                        .is_done()
                } else {
                    let buf = &s.buf;
                    iface
                        .am_bcopy(lane.ep, id, |b| {
                            b[..h].copy_from_slice(&hdr[..h]);
                            h + buf.read_at(off, &mut b[h..h + chunk])
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
            if s.mem.is_none() && !th.put {
                // The registration (s.mem) is dropped with the request.
                s.mem = Some(Box::new(s.buf.mem_reg(&t.md, len)?));
            }
            let iface = &mut t.iface;
            let (rkey, addr) = match &s.mem {
                Some(m) => (m.pack_rkey_compact(), m.address() as u64),
                None if th.put => (uct::rkey::KeyBytes::EMPTY, 0),
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
            let out = iface.am_bcopy(lane.ep, AmId::Rts.id(), |b| {
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
    if waits_for_peer && s.early_ack {
        core.complete(r, Status::Ok);
    } else if waits_for_peer {
        s.remote_pending = true;
        let ep = s.ep;
        if let Ok(e) = core.ep_mut(ep) {
            e.outstanding += 1;
        }
    } else {
        core.complete(r, Status::Ok);
    }
    Ok(true)
}
