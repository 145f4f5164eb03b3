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

use crate::core::buf::copy_into;
use crate::core::request::*;
use crate::core::Core;
use crate::matcher::{Matcher, MsgId, RecvId};
use crate::rndv::RndvState;
use std::collections::{HashMap, VecDeque};
use ucs::{BufPool, Result, Status};

/// A message taken out of the matcher by a probe with remove, waiting for
/// [`crate::Worker::tag_msg_recv_nb`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message(pub(crate) u64);

/// An unexpected message (arrived before its receive was posted). Small so that storing
/// and taking it moves little: the rare kinds are boxed.
pub(crate) enum Unexp {
    /// A whole message of at most [`INLINE`] bytes, not synchronous, kept in place.
    Small { len: u8, bytes: InlineBytes },
    /// A whole message, and the synchronous send to acknowledge, if any.
    Eager {
        data: Vec<u8>,
        sync: Option<(u64, u64)>,
    },
    /// A fragmented message still arriving.
    Partial(Box<Partial>),
    /// A rendezvous announcement.
    Rts(Box<RtsHeld>),
}

/// Messages up to this size wait inline in the matcher (no buffer to take or give back).
pub(crate) const INLINE: usize = 40;

/// The inline bytes of [`Unexp::Small`], 8-byte aligned: the message moves into its
/// bucket (and out again) by whole words, not by the odd-offset pieces an unaligned
/// array after the enum's tag would take.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct InlineBytes(pub [u8; INLINE]);

/// A fragmented unexpected message still arriving: `data` holds the `received` bytes so
/// far (fragments come in order) and has room for all `total` of them, reserved when the
/// first came (never zero-filled).
pub(crate) struct Partial {
    pub data: Vec<u8>,
    pub received: usize,
    pub total: usize,
    pub sync: Option<(u64, u64)>,
    pub key: (u64, u64),
}

/// An unexpected rendezvous announcement.
pub(crate) struct RtsHeld {
    pub uuid: u64,
    pub sreq: u64,
    pub len: u64,
    pub addr: u64,
    pub rkey: uct::rkey::KeyBytes,
}

impl Unexp {
    pub(crate) fn length(&self) -> usize {
        match self {
            Unexp::Small { len, .. } => usize::from(*len),
            Unexp::Eager { data, .. } => data.len(),
            Unexp::Partial(p) => p.total,
            Unexp::Rts(r) => r.len as usize,
        }
    }

    /// A whole message that is not synchronous: inline when it fits.
    #[inline(always)]
    pub(crate) fn whole(st: &mut TagState, p: &[u8], sync: Option<(u64, u64)>) -> Unexp {
        if sync.is_none() && p.len() <= INLINE {
            let mut bytes = InlineBytes([0u8; INLINE]);
            copy_into(&mut bytes.0, p);
            return Unexp::Small {
                len: p.len() as u8,
                bytes,
            };
        }
        Unexp::Eager {
            data: st.bufs.keep(p),
            sync,
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

/// A receive waiting in the matcher.
pub(crate) enum PostedRecv {
    /// One with a request (the Rust API's receives, and any with a closure or a queue).
    Req(Request),
    /// One reported by word that has no request while it waits ([`recv_word`]): the
    /// buffer and the word travel in the matcher's entry, and a whole eager message
    /// completes it with no request at all. Anything longer (fragments, rendezvous)
    /// gives it a request when it matches ([`PostedRecv::into_req`]).
    Word { buf: Buf, word: u64 },
}

impl PostedRecv {
    /// The request of a receive that matched a message needing one: a word receive gets
    /// it now, released, reporting by its word.
    #[inline]
    pub(crate) fn into_req(self, core: &mut Core) -> Request {
        match self {
            PostedRecv::Req(r) => r,
            PostedRecv::Word { buf, word } => core.new_word_req(recv_state(buf, false), word),
        }
    }
}

/// The tag protocol's state in a worker.
pub(crate) struct TagState {
    pub matcher: Matcher<PostedRecv, (u64, Unexp)>,
    /// Fragmented messages being received, by (sender, message id).
    pub frags: HashMap<(u64, u64), FragDest>,
    /// Messages taken by a probe with remove.
    pub probed: HashMap<u64, (u64, Unexp)>,
    pub next_probed: u64,
    /// Synchronous sends matched here, to acknowledge: (sender, its request).
    pub acks: VecDeque<(u64, u64)>,
    /// Buffers for unexpected payloads too long to be inline, so that a steady stream of
    /// unexpected messages neither allocates nor frees.
    pub bufs: BufPool,
}

/// The unexpected payloads' pool: buffers up to 16 KiB (beyond that a message is rare
/// and large enough that its allocation is not what it costs), 96 of them, at most 1 MiB
/// in all.
fn tag_bufs() -> BufPool {
    BufPool::new(16 << 10, 96, 1 << 20)
}

impl Default for TagState {
    fn default() -> TagState {
        TagState {
            matcher: Matcher::new(),
            frags: HashMap::new(),
            probed: HashMap::new(),
            next_probed: 1,
            acks: VecDeque::new(),
            bufs: tag_bufs(),
        }
    }
}

/// What posting a receive gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvPosted {
    /// The receive took a whole unexpected message in the call: its status and
    /// information. No request exists, and no callback runs (a completion queue named
    /// instead of a callback gets its entry).
    Done(Status, RecvInfo),
    /// The receive waits for its message (or for the rest of it): its request.
    Pending(Request),
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
        no_split: false,
    })
}

/// Posts a receive for a message whose tag matches `tag` under `mask`. With `imm`, a
/// whole unexpected message that matches is copied out in the call and no request is
/// made ([`RecvPosted::Done`]); without it the result is always a request.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn recv_nb(
    core: &mut Core,
    st: &mut TagState,
    rndv: &mut RndvState,
    buf: Buf,
    tag: u64,
    mask: u64,
    cb: Option<Callback>,
    imm: bool,
) -> RecvPosted {
    let posted = st.matcher.post_with(tag, mask, (buf, cb), |(buf, cb), id| {
        let mut kind = recv_state(buf, false);
        if let ReqKind::Recv(rs) = &mut kind {
            rs.recv_id = Some(id);
        }
        let r = core.new_req(kind, cb);
        (PostedRecv::Req(r), r)
    });
    match posted {
        Ok(r) => RecvPosted::Pending(r),
        // An owned buffer goes back through its request, so it always gets one.
        Err((_, (mtag, u), (buf, cb))) => match u {
            Unexp::Small { len, bytes } if imm && !buf.is_owned() => {
                let (status, info) = take_small(&buf, mtag, len, &bytes);
                if let Some(cb) = cb {
                    cb.done_in_call(|t| recv::report_in_call(core, t, status, info));
                }
                RecvPosted::Done(status, info)
            }
            Unexp::Eager { data, sync } if imm && !buf.is_owned() => {
                let (status, info) = take_eager(st, &buf, mtag, data, sync);
                if let Some(cb) = cb {
                    cb.done_in_call(|t| recv::report_in_call(core, t, status, info));
                }
                RecvPosted::Done(status, info)
            }
            u => {
                let r = core.new_req(recv_state(buf, false), cb);
                recv::consume_unexp(core, st, rndv, r, mtag, u);
                RecvPosted::Pending(r)
            }
        },
    }
}

/// The receive of a whole small message that is already here (`Unexp::Small`), taken in
/// the call with a full mask: its status and information, or `None` when no such message
/// is the oldest with `tag` (the caller then posts the receive as usual). `buf` must not
/// be owned (those go back through a request).
#[inline(always)]
pub(crate) fn recv_small_now(st: &mut TagState, buf: &Buf, tag: u64) -> Option<(Status, RecvInfo)> {
    let mut out = None;
    st.matcher.take_exact(
        tag,
        // Only a small message is taken, and it holds nothing to drop.
        #[inline(always)]
        |(mtag, u)| match u {
            Unexp::Small { len, bytes } => {
                out = Some(take_small(buf, *mtag, *len, bytes));
                ucs::Removal::Forget
            }
            _ => ucs::Removal::Keep,
        },
    );
    out
}

/// What posting a receive reported by word gave ([`crate::Worker::tag_recv_word`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WordRecv {
    /// It took a whole unexpected message in the call; nothing is reported by word.
    Done(Status, RecvInfo),
    /// It waits for its message, with no request; the ticket cancels it.
    Waiting(RecvTicket),
    /// It took the start of a message whose rest is still to come (fragments, a
    /// rendezvous); its completion is reported by word, and it can no longer be canceled.
    Matched,
}

/// Names a receive posted by word while it waits, for
/// [`crate::Worker::tag_recv_word_cancel`]. Tickets are never reused within a worker, so
/// a stale one (its receive matched or was canceled) names nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvTicket(pub(crate) RecvId);

impl RecvTicket {
    /// The ticket as two words (for a layer above that keeps it in its own request).
    pub fn to_raw(self) -> [u64; 2] {
        self.0.to_raw()
    }

    /// The ticket from [`RecvTicket::to_raw`]; any value is accepted (one never handed
    /// out names nothing).
    pub fn from_raw(v: [u64; 2]) -> RecvTicket {
        RecvTicket(RecvId::from_raw(v))
    }
}

/// Posts a receive reported by `word` (see [`PostedRecv::Word`]); `buf` must not be an
/// owned buffer (those go back through a request). A whole unexpected message that
/// matches is received in the call and reported by the result, not by word.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(crate) fn recv_word(
    core: &mut Core,
    st: &mut TagState,
    rndv: &mut RndvState,
    buf: Buf,
    tag: u64,
    mask: u64,
    word: u64,
) -> WordRecv {
    let posted = st.matcher.post_with(tag, mask, buf, |buf, id| {
        (PostedRecv::Word { buf, word }, id)
    });
    match posted {
        Ok(id) => WordRecv::Waiting(RecvTicket(id)),
        Err((_, (mtag, u), buf)) => match u {
            Unexp::Small { len, bytes } => {
                let (status, info) = take_small(&buf, mtag, len, &bytes);
                WordRecv::Done(status, info)
            }
            Unexp::Eager { data, sync } => {
                let (status, info) = take_eager(st, &buf, mtag, data, sync);
                WordRecv::Done(status, info)
            }
            u => {
                let r = core.new_word_req(recv_state(buf, false), word);
                recv::consume_unexp(core, st, rndv, r, mtag, u);
                WordRecv::Matched
            }
        },
    }
}

/// Cancels a receive posted by word that still waits: its word reports `Canceled`.
/// False when the ticket names no waiting receive.
pub(crate) fn cancel_word(core: &mut Core, st: &mut TagState, t: RecvTicket) -> bool {
    match st.matcher.cancel(t.0) {
        Some(PostedRecv::Word { buf, word }) => {
            drop(buf);
            core.report_word(word, Status::Canceled, RecvInfo::default());
            true
        }
        // Tickets are only made for word receives; a request's receive goes back as it
        // was found (cannot happen: ids are unique).
        Some(PostedRecv::Req(r)) => {
            core.complete(r, Status::Canceled);
            true
        }
        None => false,
    }
}

/// Receives an unexpected message kept inline (`Unexp::Small`) into `buf`.
#[inline(always)]
fn take_small(buf: &Buf, mtag: u64, len: u8, bytes: &InlineBytes) -> (Status, RecvInfo) {
    let data = &bytes.0[..usize::from(len)];
    let info = RecvInfo {
        sender_tag: mtag,
        length: data.len(),
    };
    (take_whole(buf, data), info)
}

/// Receives a whole unexpected message kept in a pooled buffer (`Unexp::Eager`) into
/// `buf`: the buffer goes back to the pool and a synchronous sender is acknowledged.
#[inline(always)]
fn take_eager(
    st: &mut TagState,
    buf: &Buf,
    mtag: u64,
    data: Vec<u8>,
    sync: Option<(u64, u64)>,
) -> (Status, RecvInfo) {
    let status = take_whole(buf, &data);
    let info = RecvInfo {
        sender_tag: mtag,
        length: data.len(),
    };
    st.bufs.give(data);
    if let Some(ack) = sync {
        st.acks.push_back(ack);
    }
    (status, info)
}

/// Copies a whole message into a receive buffer: `MessageTruncated` when it does not fit.
#[inline]
fn take_whole(buf: &Buf, data: &[u8]) -> Status {
    let n = buf.write_at(0, data);
    if n < data.len() {
        Status::MessageTruncated
    } else {
        Status::Ok
    }
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
    if let Unexp::Partial(p) = &u {
        st.frags.insert(p.key, FragDest::Probed(id));
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
