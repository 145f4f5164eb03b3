//! Tag matching with MPI semantics: the tag API (send, receive, probe, message receive)
//! and the protocols behind it: eager short, eager bcopy, multi-fragment eager and
//! rendezvous (handed to `rndv`), plus synchronous sends.
//!
//! Per-sender order: an endpoint sends everything through one lane, in the order of its
//! queue, and the lanes deliver in order, so messages (and the fragments of each message)
//! of one sender arrive in sending order and are matched in that order. Fragments carry
//! the sender's worker id and a message id, so fragments of different senders may
//! interleave.

pub(crate) mod recv;
pub(crate) mod send;

use crate::core::request::*;
use crate::core::Core;
use crate::matcher::{Matcher, MsgId, Posted};
use crate::rndv::RndvState;
use std::collections::{HashMap, VecDeque};
use ucs::{Result, Status};

/// A message taken out of the matcher by a probe with remove, waiting for
/// [`crate::Worker::tag_msg_recv_nb`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message(pub(crate) u64);

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

/// The tag protocol's state in a worker.
pub(crate) struct TagState {
    pub matcher: Matcher<Request, (u64, Unexp)>,
    /// Fragmented messages being received, by (sender, message id).
    pub frags: HashMap<(u64, u64), FragDest>,
    /// Messages taken by a probe with remove.
    pub probed: HashMap<u64, (u64, Unexp)>,
    pub next_probed: u64,
    /// Synchronous sends matched here, to acknowledge: (sender, its request).
    pub acks: VecDeque<(u64, u64)>,
    /// Spare buffers for unexpected payloads, by size class (`CLASSES`), so that a
    /// steady stream of unexpected messages does not allocate.
    spare: [Vec<Vec<u8>>; CLASSES.len()],
}

/// Capacities of the pooled buffers of unexpected payloads; larger ones are allocated.
const CLASSES: [usize; 3] = [256, 4096, 16384];
/// Spare buffers kept per class.
const SPARE_MAX: usize = 32;

impl TagState {
    /// A buffer holding `data`, from the pool when a class fits it.
    #[inline]
    pub(crate) fn keep(&mut self, data: &[u8]) -> Vec<u8> {
        match CLASSES.iter().position(|&c| data.len() <= c) {
            Some(k) => {
                let mut v = self.spare[k]
                    .pop()
                    .unwrap_or_else(|| Vec::with_capacity(CLASSES[k]));
                v.clear();
                v.extend_from_slice(data);
                v
            }
            None => data.to_vec(),
        }
    }

    /// Gives a buffer made by `keep` back to the pool.
    #[inline]
    pub(crate) fn recycle(&mut self, v: Vec<u8>) {
        if let Some(k) = CLASSES.iter().position(|&c| c == v.capacity()) {
            if self.spare[k].len() < SPARE_MAX {
                self.spare[k].push(v);
            }
        }
    }
}

impl Default for TagState {
    fn default() -> TagState {
        TagState {
            matcher: Matcher::new(),
            frags: HashMap::new(),
            probed: HashMap::new(),
            next_probed: 1,
            acks: VecDeque::new(),
            spare: Default::default(),
        }
    }
}

/// A receive's state with nothing received yet.
#[inline]
pub(crate) fn recv_state(buf: Buf, waitall: bool) -> ReqKind {
    ReqKind::Recv(RecvState {
        buf,
        recv_id: None,
        received: 0,
        truncated: false,
        waitall,
    })
}

/// Posts a receive for a message whose tag matches `tag` under `mask`.
#[inline]
pub(crate) fn recv_nb(
    core: &mut Core,
    st: &mut TagState,
    rndv: &mut RndvState,
    buf: Buf,
    tag: u64,
    mask: u64,
    cb: Option<Callback>,
) -> Request {
    let r = core.new_req(recv_state(buf, false), cb);
    match st.matcher.post(tag, mask, r) {
        Posted::Queued(id) => {
            if let Some(Req {
                kind: ReqKind::Recv(rs),
                ..
            }) = core.reqs.get_mut(r.0)
            {
                rs.recv_id = Some(id);
            }
        }
        Posted::Matched(_, (mtag, u), r) => recv::consume_unexp(core, st, rndv, r, mtag, u),
    }
    r
}

/// Looks for an unexpected message matching `tag`/`mask`. With `remove`, the message
/// is taken out of matching and returned as a [`Message`].
pub(crate) fn probe(
    st: &mut TagState,
    tag: u64,
    mask: u64,
    remove: bool,
) -> Option<(RecvInfo, Option<Message>)> {
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
pub(crate) fn msg_recv_nb(
    core: &mut Core,
    st: &mut TagState,
    rndv: &mut RndvState,
    msg: Message,
    buf: Buf,
    cb: Option<Callback>,
) -> Result<Request> {
    let (t, u) = st.probed.remove(&msg.0).ok_or(Status::InvalidParam)?;
    let r = core.new_req(recv_state(buf, false), cb);
    recv::consume_unexp(core, st, rndv, r, t, u);
    Ok(r)
}

/// A receive `r` is aborted or canceled: it leaves matching and fragment reassembly.
/// True when it was still waiting for a match.
pub(crate) fn forget_recv(st: &mut TagState, rs: &mut RecvState, r: Request) -> bool {
    let waiting = match rs.recv_id.take() {
        Some(id) => st.matcher.cancel(id).is_some(),
        None => false,
    };
    st.frags
        .retain(|_, d| !matches!(d, FragDest::Req(x) if *x == r));
    waiting
}

/// Sends the acknowledgements of matched synchronous sends; returns how many went.
pub(crate) fn run_acks(tls: &mut [crate::core::Tl], core: &mut Core, st: &mut TagState) -> usize {
    let mut n = 0;
    while let Some(&(uuid, sreq)) = st.acks.front() {
        match crate::core::send_ctrl(
            tls,
            core,
            uuid,
            crate::proto::AmId::SyncAck.id(),
            &sreq.to_le_bytes(),
        ) {
            Ok(true) => {
                st.acks.pop_front();
                n += 1;
            }
            Ok(false) => break,
            Err(s) => {
                tracing::debug!("acknowledging a synchronous send failed: {s}");
                st.acks.pop_front();
            }
        }
    }
    n
}

/// The peer `uuid` failed: messages of it still being reassembled will never finish. A
/// receive that took one completes with `status`; one still unexpected (or taken by a
/// probe) is dropped, so that no later receive matches a message that cannot complete.
pub(crate) fn peer_failed(core: &mut Core, st: &mut TagState, uuid: u64, status: Status) {
    let dests: Vec<FragDest> = st
        .frags
        .iter()
        .filter(|(k, _)| k.0 == uuid)
        .map(|(_, d)| *d)
        .collect();
    st.frags.retain(|k, _| k.0 != uuid);
    for d in dests {
        match d {
            FragDest::Req(r) => core.complete(r, status),
            FragDest::Unexp(m) => {
                st.matcher.take_unexpected(m);
            }
            FragDest::Probed(id) => {
                st.probed.remove(&id);
            }
        }
    }
}
