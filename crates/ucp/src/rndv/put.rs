//! Rendezvous where the sender puts the data (lanes without a one-copy read: tcp, udp).
//!
//! The sender's Rts carries no key. The receiver, once the message matched, registers its
//! buffer with the lane's domain (a bounce buffer when the receive is not contiguous) and
//! answers with an Rtr naming it; the sender puts the data there in `put_zcopy` pieces —
//! the receiving transport reads them from the socket straight into the buffer — and sends
//! RndvFin behind them on the same connection, so that the receiver completes only after
//! every byte was written.
//!
//! Invariants: the receiver's registration lives exactly as long as its entry in
//! `RndvState::rx`, so once a receive completed or was aborted, late puts to it are
//! refused by the transport instead of writing freed memory. The sender puts a piece only
//! when its endpoint's send buffer is empty, so that pieces go from the user's buffer to
//! the socket without a copy (only a piece the socket took partly is copied, its rest).
//! It completes the send only once the last piece and the RndvFin are out of the send
//! buffer, so that a sender that stops progressing after its send completed does not keep
//! them (and the receiver waits for them forever).
//!
//! udp differs in two ways: its puts go from the user's buffer to the kernel whatever is
//! queued (nothing is copied), so pieces and fin do not wait for an empty queue; and they
//! read the buffer until the receiver acknowledged them, so the send completes once the
//! peer acknowledged everything up to its fin (a mark taken after the fin, not the whole
//! endpoint, which later sends could keep from ever draining).

use super::{RndvState, Work};
use crate::core::request::{Buf, Req, ReqKind, Request};
use crate::core::{connect, Core, Tl};
use crate::proto::header::{encode_rndv_fin, Rtr};
use crate::proto::AmId;
use ucs::{Result, Status};
use uct::rkey::KeyBytes;
use uct::Outcome;

/// A matched rendezvous receive waiting for the sender's data.
pub(crate) struct RndvRx {
    pub req: Request,
    /// The sender's worker and request.
    pub uuid: u64,
    pub sreq: u64,
    /// Bytes the sender is asked to put (the message, cut to the receive buffer).
    pub len: u64,
    pub truncated: bool,
    /// Where the data lands: the receive buffer itself, or `bounce`. Declared before
    /// `bounce`, so that it is dropped first.
    pub mem: uct::MemHandle,
    /// For receives that are not contiguous (owned memory): copied into the buffer at
    /// the end.
    pub bounce: Option<Buf>,
    /// A split rendezvous ([`super::split`]): the sender puts the first `len` bytes while
    /// this side reads the rest; `Some` once that read ended, with its outcome.
    pub part: Option<Part>,
}

/// The receiver's own read of a split rendezvous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// Not finished yet (the RndvFin may not complete the receive).
    Reading,
    /// Finished with this status, at `end`, after taking `took`, when the worker had
    /// started `seq` splits.
    Read {
        status: Status,
        end: std::time::Instant,
        took: std::time::Duration,
        seq: u64,
    },
}

/// Receiver: `req` matched an Rts of `len` bytes from request `sreq` of worker `uuid`.
/// Registers the destination, records it and asks the sender for the data. Returns the
/// retry of the Rtr when the lane has no room now.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    tls: &mut [Tl],
    core: &mut Core,
    st: &mut RndvState,
    req: Request,
    uuid: u64,
    sreq: u64,
    len: u64,
) -> Result<Option<Work>> {
    // The buffer is registered with the domain of the lane the sender's puts come on.
    let ep = core.ep_of(uuid).ok_or(Status::Unreachable)?;
    let lane = connect(tls, core, ep)?;
    let md = tls[lane.tl].md.clone();
    let Some(Req {
        kind: ReqKind::Recv(rs),
        ..
    }) = core.reqs.get_mut(req.0)
    else {
        return Err(Status::InvalidParam);
    };
    let want = usize::try_from(len).map_err(|_| Status::InvalidParam)?;
    let n = want.min(rs.buf.len());
    if n == 0 {
        // Nothing to put: the receive is done (truncated unless the message is empty,
        // which never goes by rendezvous) and the sender is told so.
        let status = if want > 0 {
            Status::MessageTruncated
        } else {
            Status::Ok
        };
        core.complete(req, status);
        return Ok(Some(Work::Ats {
            uuid,
            sreq,
            status: Status::Ok,
        }));
    }
    // The registrations below: the receive buffer stays valid until the receive
    // completes (its owner's contract, or owned by the request), and the bounce buffer
    // moves into the RndvRx entry with its registration; the registration lives exactly
    // as long as that entry, which is removed before the receive completes.
    let (mem, bounce) = if rs.buf.contig_ptr().is_some() {
        (rs.buf.mem_reg(&md, n)?, None)
    } else {
        let b = Buf::from(vec![0u8; n]);
        (b.mem_reg(&md, n)?, Some(b))
    };
    let rreq = req.to_u64();
    st.rx.insert(
        rreq,
        RndvRx {
            req,
            uuid,
            sreq,
            len: n as u64,
            truncated: want > n,
            mem,
            bounce,
            part: None,
        },
    );
    Ok(send_rtr(tls, core, st, rreq)?.then_some(Work::Rtr { rreq }))
}

/// Sends the Rtr of receive `rreq`; `Ok(true)` when the lane had no room (retry).
pub(crate) fn send_rtr(tls: &mut [Tl], core: &mut Core, st: &RndvState, rreq: u64) -> Result<bool> {
    let Some(rx) = st.rx.get(&rreq) else {
        // Completed or aborted meanwhile.
        return Ok(false);
    };
    let uuid = rx.uuid;
    let rkey = rx.mem.pack_rkey_compact();
    let rtr = Rtr {
        sreq: rx.sreq,
        rreq,
        addr: rx.mem.address() as u64,
        len: rx.len,
        rkey: &rkey,
    };
    let ep = core.ep_of(uuid).ok_or(Status::Unreachable)?;
    let lane = connect(tls, core, ep)?;
    let id = if rx.part.is_some() {
        AmId::RtrPart
    } else {
        AmId::Rtr
    };
    let out = tls[lane.tl].iface.am_bcopy(lane.ep, id.id(), |b| {
        if b.len() < rtr.encoded_len() {
            return usize::MAX;
        }
        rtr.encode_into(b)
    })?;
    Ok(!out.is_done())
}

/// The bytes of send `r` while it is in progress (a contiguous buffer).
fn send_bytes(core: &Core, r: Request) -> Option<&[u8]> {
    match core.reqs.get_ref(r.0) {
        Some(Req {
            kind: ReqKind::Send(s),
            status: None,
            ..
        }) => s.buf.as_bytes(),
        _ => None,
    }
}

/// Sender: puts what is left of the data an Rtr asked for, then the RndvFin, then
/// completes the send. Returns itself while the lane has no room.
// udp's puts are sent from the send's own buffer (`put_zcopy_lent`, whose contract the
// completion rule below keeps).
#[allow(unsafe_code)]
pub(crate) fn put_data(tls: &mut [Tl], core: &mut Core, d: Work) -> Result<Option<Work>> {
    let Work::Put {
        sreq,
        rreq,
        addr,
        len,
        rkey,
        mut off,
        mut fin,
        mut mark,
        mut key,
        part,
    } = d
    else {
        return Err(Status::InvalidParam);
    };
    let r = Request::from_u64(sreq);
    let (ep, ptr) = match core.reqs.get_ref(r.0) {
        Some(Req {
            kind: ReqKind::Send(s),
            status: None,
            ..
        }) if s.remote_pending => (s.ep, s.buf.contig_ptr()),
        // Completed meanwhile (its endpoint failed): nothing to send.
        _ => return Ok(None),
    };
    let res = (|| -> Result<bool> {
        ptr.ok_or(Status::InvalidParam)?;
        let lane = connect(tls, core, ep)?;
        // A split's key is a shared-memory key without the receiver's process id, which
        // the endpoint names.
        let owner = if part {
            crate::core::lane_owner(tls, core, ep, lane)
        } else {
            None
        };
        let t = &mut tls[lane.tl];
        // udp's puts are sent from the buffer whatever else is queued (nothing is copied),
        // so they need not wait for an empty send queue; its flush is the peer's
        // acknowledgement, a round trip, which the completion below waits for once.
        let wait_empty = t.transport != uct::Transport::Udp;
        if off < len {
            let rk = match key.take() {
                Some(k) => k,
                None if part => t.md.rkey_unpack_from(&rkey, owner)?,
                None => t.md.rkey_unpack(&rkey)?,
            };
            let rk = &*key.insert(rk);
            let max = t.iface.attr().max_put_zcopy;
            if max == 0 {
                return Err(Status::Unsupported);
            }
            while off < len {
                if wait_empty && !t.iface.ep_is_flushed(lane.ep)? {
                    return Ok(false);
                }
                let n = max.min(len - off);
                // off + n <= len <= the send buffer's length (checked when the Rtr arrived).
                let data = send_bytes(core, r)
                    .and_then(|b| b.get(off..off + n))
                    .ok_or(Status::InvalidParam)?;
                // SAFETY: the send's buffer stays readable until the send completes (the
                // contract of its `Buf`), and the send completes, so the buffer may go, only
                // once the endpoint is flushed past this put (the mark below) or failed.
                let out = unsafe {
                    t.iface
                        .put_zcopy_lent(lane.ep, &[data], addr + off as u64, rk, 0)?
                };
                match out {
                    // InProgress: the transport reads the buffer until the endpoint is
                    // flushed, which completion waits for.
                    Outcome::Done(()) | Outcome::InProgress => off += n,
                    Outcome::NoResource => return Ok(false),
                }
            }
        }
        // The send completes only once its last piece and the RndvFin left this process
        // (the transport's send buffer is empty): a sender may stop progressing once its
        // send completed, and bytes still in the send buffer would then never leave.
        if !fin {
            if wait_empty && !t.iface.ep_is_flushed(lane.ep)? {
                return Ok(false);
            }
            // am_short's header travels in native order: its bytes are the message's first 8.
            let msg = encode_rndv_fin(rreq, core.uuid);
            let (hdr, rest) = msg.split_at(8);
            let hdr = u64::from_ne_bytes(hdr.try_into().map_err(|_| Status::InvalidParam)?);
            fin = t
                .iface
                .am_short(lane.ep, AmId::RndvFin.id(), hdr, rest)?
                .is_done();
            if fin {
                // udp: the send waits for the acknowledgement of its own pieces and fin
                // only, which later sends on the endpoint cannot put off forever.
                mark = t.iface.ep_flush_mark(lane.ep)?;
            }
        }
        Ok(fin && t.iface.ep_flushed_to(lane.ep, mark)?)
    })();
    match res {
        Ok(false) => Ok(Some(Work::Put {
            sreq,
            rreq,
            addr,
            len,
            rkey,
            off,
            fin,
            mark,
            key,
            part,
        })),
        // A split send completes on the receiver's Ats, which comes after the receiver
        // saw this side's RndvFin and read its own part.
        Ok(true) if part => Ok(None),
        Ok(true) => {
            core.complete(r, Status::Ok);
            Ok(None)
        }
        Err(s) => {
            tracing::debug!("rendezvous put failed: {s}");
            core.complete(r, s);
            Ok(None)
        }
    }
}

impl RndvState {
    /// Sender: the receiver is ready for the data of request `h.sreq` (with `part`: for
    /// its first `h.len` bytes, while it reads the rest).
    pub(crate) fn on_rtr(&mut self, core: &Core, h: Rtr<'_>, part: bool) -> Result<()> {
        let r = Request::from_u64(h.sreq);
        let fits = match core.reqs.get_ref(r.0) {
            Some(Req {
                kind: ReqKind::Send(s),
                status: None,
                ..
            }) => s.remote_pending && s.buf.contig_ptr().is_some() && h.len <= s.buf.len() as u64,
            _ => false,
        };
        if !fits {
            return Err(Status::InvalidParam);
        }
        self.work.push_back(Work::Put {
            sreq: h.sreq,
            rreq: h.rreq,
            addr: h.addr,
            len: h.len as usize,
            rkey: KeyBytes::from_slice(h.rkey)?,
            off: 0,
            fin: false,
            mark: None,
            key: None,
            part,
        });
        Ok(())
    }

    /// Receiver: every byte of receive `rreq` was written; `uuid` is the sender. Returns
    /// the receiver's own part when the receive was a split (for `split::judge`).
    pub(crate) fn on_rndv_fin(
        &mut self,
        core: &mut Core,
        rreq: u64,
        uuid: u64,
    ) -> Result<Option<Part>> {
        let Some(x) = self.rx.get(&rreq) else {
            return Err(Status::InvalidParam);
        };
        if x.uuid != uuid || x.part == Some(Part::Reading) {
            // Not from this receive's sender, or a split's fin before this side's own read
            // ended (the read runs before the Rtr's answer can be seen: a fin now is not
            // the sender's).
            return Err(Status::InvalidParam);
        }
        let Some(rx) = self.rx.remove(&rreq) else {
            return Err(Status::InvalidParam);
        };
        let mut status = match rx.part {
            Some(Part::Read { status: s, .. }) if s != Status::Ok => s,
            _ if rx.truncated => Status::MessageTruncated,
            _ => Status::Ok,
        };
        if let Some(Req {
            kind: ReqKind::Recv(rs),
            status: None,
            ..
        }) = core.reqs.get_mut(rx.req.0)
        {
            if let Some(b) = rx.bounce.as_ref().and_then(Buf::as_bytes) {
                if rs.buf.write_at(0, b) < b.len() {
                    status = Status::IoError;
                }
            }
            core.complete(rx.req, status);
        }
        if rx.part.is_some() {
            // The sender's buffer is free now: both parts are in.
            self.work.push_back(Work::Ats {
                uuid,
                sreq: rx.sreq,
                status: if matches!(status, Status::Ok | Status::MessageTruncated) {
                    Status::Ok
                } else {
                    Status::IoError
                },
            });
        }
        Ok(rx.part)
    }
}
