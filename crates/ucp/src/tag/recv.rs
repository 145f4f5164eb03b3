//! The receiving side of the tag protocols: each arriving protocol message is matched
//! (or kept as unexpected) and delivered; matched rendezvous announcements go to `rndv`.

use super::{FragDest, Partial, PostedRecv, RtsHeld, TagState, Unexp};
use crate::core::cq::CqTarget;
use crate::core::request::*;
use crate::core::Core;
use crate::matcher::Arrived;
use crate::proto::header::*;
use crate::rndv::RndvState;
use ucs::{Result, Status};
use uct::rkey::KeyBytes;

/// A whole message (EagerOnly, or EagerSync with `sync` = (sender, its request)).
#[inline(always)]
pub(crate) fn eager(
    core: &mut Core,
    st: &mut TagState,
    tag: u64,
    p: &[u8],
    sync: Option<(u64, u64)>,
) {
    match st.matcher.match_posted(tag) {
        Some((_, posted)) => {
            match posted {
                PostedRecv::Req(r) => core.recv_whole(r, tag, p),
                PostedRecv::Word { buf, word } => core.recv_whole_word(&buf, word, tag, p),
            }
            if let Some(ack) = sync {
                st.acks.push_back(ack);
            }
        }
        None => {
            let u = Unexp::whole(st, p, sync);
            st.matcher.add_unexpected(tag, (tag, u));
        }
    }
}

/// The first fragment of a message.
pub(crate) fn first(core: &mut Core, st: &mut TagState, h: EagerFirst, p: &[u8]) -> Result<()> {
    let total = usize::try_from(h.total).map_err(|_| Status::InvalidParam)?;
    if p.len() > total {
        // A first fragment longer than its message: malformed.
        return Err(Status::InvalidParam);
    }
    if p.len() < total && core.peer_gone(h.uuid) {
        // The rest can never come: a message that cannot complete is not matched.
        return Err(Status::ConnectionReset);
    }
    let key = (h.uuid, h.msg_id);
    let sync = (h.sreq != 0).then_some((h.uuid, h.sreq));
    let u = Unexp::Partial(Box::new(Partial {
        data: Vec::new(),
        received: 0,
        total,
        sync,
        key,
    }));
    match st.matcher.arrive(h.tag, (h.tag, u)) {
        Arrived::Matched(_, posted, _) => {
            let r = posted.into_req(core);
            core.recv_set_info(r, h.tag, total);
            core.recv_write(r, 0, p);
            if let Some(ack) = sync {
                st.acks.push_back(ack);
            }
            if p.len() == total {
                core.recv_finish(r);
            } else {
                st.frags.insert(key, FragDest::Req(r));
            }
        }
        Arrived::Unexpected(m) => {
            if let Some((_, Unexp::Partial(u))) = st.matcher.unexpected_mut(m) {
                // The whole message is kept, so what a header makes us reserve is asked
                // for fallibly; a spare buffer of the pool serves when it is large enough.
                let mut data = st.bufs.take(0);
                data.try_reserve_exact(total)
                    .map_err(|_| Status::NoMemory)?;
                ucs::sys::copy::extend(&mut data, p);
                u.data = data;
                u.received = p.len();
            }
            if p.len() == total {
                settle_partial(st, FragDest::Unexp(m));
            } else {
                st.frags.insert(key, FragDest::Unexp(m));
            }
        }
    }
    Ok(())
}

/// A later fragment of a message.
pub(crate) fn middle(core: &mut Core, st: &mut TagState, h: EagerMiddle, p: &[u8]) -> Result<()> {
    let key = (h.uuid, h.msg_id);
    let dest = *st.frags.get(&key).ok_or(Status::InvalidParam)?;
    let off = usize::try_from(h.offset).map_err(|_| Status::InvalidParam)?;
    match dest {
        FragDest::Req(r) => {
            let total = core.reqs.get_ref(r.0).map_or(0, |q| q.info.length);
            let received = core.recv_state(r).map_or(0, |rs| rs.received);
            if off != received || off + p.len() > total {
                return Err(Status::InvalidParam);
            }
            core.recv_write(r, off, p);
            if off + p.len() == total {
                st.frags.remove(&key);
                core.recv_finish(r);
            }
        }
        FragDest::Unexp(_) | FragDest::Probed(_) => {
            let u = match dest {
                FragDest::Unexp(m) => st.matcher.unexpected_mut(m).map(|x| &mut x.1),
                FragDest::Probed(id) => st.probed.get_mut(&id).map(|x| &mut x.1),
                FragDest::Req(_) => None,
            };
            let Some(Unexp::Partial(u)) = u else {
                return Err(Status::InvalidParam);
            };
            if off != u.received || off + p.len() > u.total {
                return Err(Status::InvalidParam);
            }
            // Within the room reserved for `total` bytes: no reallocation.
            ucs::sys::copy::extend(&mut u.data, p);
            u.received += p.len();
            if u.received == u.total {
                st.frags.remove(&key);
                settle_partial(st, dest);
            }
        }
    }
    Ok(())
}

/// A fragmented unexpected message is complete: it becomes an ordinary eager one.
fn settle_partial(st: &mut TagState, dest: FragDest) {
    let u = match dest {
        FragDest::Unexp(m) => st.matcher.unexpected_mut(m).map(|x| &mut x.1),
        FragDest::Probed(id) => st.probed.get_mut(&id).map(|x| &mut x.1),
        FragDest::Req(_) => None,
    };
    if let Some(u) = u {
        if let Unexp::Partial(p) = u {
            let data = std::mem::take(&mut p.data);
            let sync = p.sync;
            *u = Unexp::Eager { data, sync };
        }
    }
}

/// A rendezvous announcement. A posted receive takes it at once; only an unexpected one
/// is kept (boxed: the unexpected queue's entries stay small).
pub(crate) fn rts(
    core: &mut Core,
    st: &mut TagState,
    rndv: &mut RndvState,
    h: Rts<'_>,
) -> Result<()> {
    let rkey = KeyBytes::from_slice(h.rkey)?;
    match st.matcher.match_posted(h.tag) {
        Some((_, posted)) => {
            let r = posted.into_req(core);
            core.recv_set_info(r, h.tag, h.len as usize);
            rndv.accept(r, h.uuid, h.sreq, h.len, h.addr, rkey);
        }
        None => {
            let u = Unexp::Rts(Box::new(RtsHeld {
                uuid: h.uuid,
                sreq: h.sreq,
                len: h.len,
                addr: h.addr,
                rkey,
            }));
            st.matcher.add_unexpected(h.tag, (h.tag, u));
        }
    }
    Ok(())
}

/// A receive that names a completion queue completed in the call: the queue gets its
/// entry. Off the common path.
#[cold]
#[inline(never)]
pub(crate) fn report_in_call(core: &mut Core, t: CqTarget, status: Status, info: RecvInfo) {
    t.report(&mut core.cqs, status, info.length, info.sender_tag, None);
}

/// Hands an unexpected message to the receive `r` that matched it.
#[inline]
pub(crate) fn consume_unexp(
    core: &mut Core,
    st: &mut TagState,
    rndv: &mut RndvState,
    r: Request,
    tag: u64,
    u: Unexp,
) {
    match u {
        Unexp::Small { len, bytes } => core.recv_whole(r, tag, &bytes.0[..usize::from(len)]),
        Unexp::Eager { data, sync } => {
            core.recv_whole(r, tag, &data);
            st.bufs.give(data);
            if let Some(ack) = sync {
                st.acks.push_back(ack);
            }
        }
        Unexp::Partial(p) => {
            let Partial {
                data,
                received,
                total,
                sync,
                key,
            } = *p;
            core.recv_set_info(r, tag, total);
            core.recv_write(r, 0, &data[..received]);
            st.bufs.give(data);
            st.frags.insert(key, FragDest::Req(r));
            if let Some(ack) = sync {
                st.acks.push_back(ack);
            }
        }
        Unexp::Rts(h) => {
            let RtsHeld {
                uuid,
                sreq,
                len,
                addr,
                rkey,
            } = *h;
            core.recv_set_info(r, tag, len as usize);
            rndv.accept(r, uuid, sreq, len, addr, rkey);
        }
    }
}
