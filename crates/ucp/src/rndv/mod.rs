//! The rendezvous data movers shared by the tag and active-message protocols: once a
//! receive accepted an announced message, the receiver pulls the data in one copy
//! (`get`), or, on lanes that cannot read the peer's memory, asks the sender to put it
//! (`put`); then the sender hears that it may let go of its buffer (Ats / RndvFin).
//!
//! The protocols hand their matched announcements here as [`Work`]; everything that needs
//! a transport runs from [`run`] in the worker's progress, never inside a receive
//! handler. Invariant: every announcement handed here ends with exactly one answer to the
//! sender (Ats, or the puts and RndvFin) unless the sender's endpoint failed.

pub(crate) mod put;
pub(crate) mod split;

use crate::core::request::{Req, ReqKind, Request};
use crate::core::{connect, lane_owner, send_ctrl, Core, Tl};
use crate::proto::header::{encode_ats, ATS_LEN};
use crate::proto::AmId;
use std::collections::{HashMap, VecDeque};
use ucs::{Result, Status};
use uct::rkey::KeyBytes;

/// Rendezvous work found while receiving.
pub(crate) enum Work {
    /// Tell the sender `uuid` that its send `sreq` finished with `status`.
    Ats {
        uuid: u64,
        sreq: u64,
        status: Status,
    },
    /// A rendezvous matched receive `req`: read the data (get), or ask for it (Rtr) when
    /// the announcement carries no key.
    Get {
        req: Request,
        uuid: u64,
        sreq: u64,
        len: u64,
        addr: u64,
        rkey: KeyBytes,
    },
    /// Send (again) the Rtr of this rendezvous receive.
    Rtr { rreq: u64 },
    /// Put the data of send `sreq` from `off` on into the receiver's buffer; `fin`: the
    /// RndvFin was sent, the send completes once the transport's send buffer is empty, up
    /// to `mark` where the transport gives one (`uct::Iface::ep_flush_mark`).
    Put {
        sreq: u64,
        rreq: u64,
        addr: u64,
        len: usize,
        rkey: KeyBytes,
        off: usize,
        fin: bool,
        mark: Option<u64>,
        /// `rkey` unpacked, once a piece was tried (a piece that finds no room is retried
        /// on every progress: unpacking once is enough).
        key: Option<uct::Rkey>,
        /// A split rendezvous's part ([`split`]): the send completes on the Ats, not
        /// once the fin is out.
        part: bool,
    },
}

/// The rendezvous state of a worker.
#[derive(Default)]
pub(crate) struct RndvState {
    /// Work waiting for a transport, in order.
    pub work: VecDeque<Work>,
    /// Rendezvous receives waiting for the sender's puts, by receive request.
    pub rx: HashMap<u64, put::RndvRx>,
}

impl RndvState {
    /// Receive `req` accepted an announcement: its data is fetched in progress.
    pub(crate) fn accept(
        &mut self,
        req: Request,
        uuid: u64,
        sreq: u64,
        len: u64,
        addr: u64,
        rkey: KeyBytes,
    ) {
        self.work.push_back(Work::Get {
            req,
            uuid,
            sreq,
            len,
            addr,
            rkey,
        });
    }

    /// The sender `uuid` is told its send `sreq` is over (the receiver declined it).
    pub(crate) fn decline(&mut self, uuid: u64, sreq: u64) {
        self.work.push_back(Work::Ats {
            uuid,
            sreq,
            status: Status::Canceled,
        });
    }

    /// Forgets a receive that was aborted: late puts are refused, not written.
    pub(crate) fn forget_recv(&mut self, r: Request) {
        self.work
            .retain(|d| !matches!(d, Work::Get { req, .. } if *req == r));
        self.rx.retain(|_, x| x.req != r);
    }

    /// The sender `uuid` is gone: its rendezvous receives fail with `status`.
    pub(crate) fn fail_from(&mut self, core: &mut Core, uuid: u64, status: Status) {
        let gone: Vec<u64> = self
            .rx
            .iter()
            .filter(|(_, x)| x.uuid == uuid)
            .map(|(&k, _)| k)
            .collect();
        for k in gone {
            if let Some(rx) = self.rx.remove(&k) {
                core.complete(rx.req, status);
            }
        }
    }
}

/// Runs the queued work; returns how many items finished.
pub(crate) fn run(tls: &mut [Tl], core: &mut Core, st: &mut RndvState) -> usize {
    let mut n = 0;
    for _ in 0..st.work.len() {
        let Some(d) = st.work.pop_front() else {
            break;
        };
        match step(tls, core, st, d) {
            Ok(None) => n += 1,
            Ok(Some(again)) => st.work.push_back(again),
            Err(s) => tracing::debug!("rendezvous work failed: {s}"),
        }
    }
    n
}

/// Performs one item. `Ok(Some(d))`: not possible yet, retry later.
fn step(tls: &mut [Tl], core: &mut Core, st: &mut RndvState, d: Work) -> Result<Option<Work>> {
    match d {
        Work::Ats { uuid, sreq, status } => {
            let mut b = [0u8; ATS_LEN];
            encode_ats(&mut b, sreq, status);
            let sent = send_ctrl(tls, core, uuid, AmId::Ats.id(), &b)?;
            Ok((!sent).then_some(Work::Ats { uuid, sreq, status }))
        }
        Work::Rtr { rreq } => Ok(put::send_rtr(tls, core, st, rreq)?.then_some(Work::Rtr { rreq })),
        d @ Work::Put { .. } => put::put_data(tls, core, d),
        Work::Get {
            req,
            uuid,
            sreq,
            len,
            addr,
            rkey,
        } => {
            // A receive aborted meanwhile must not be written; the sender still gets its
            // completion.
            let live = core.reqs.get_ref(req.0).is_some_and(|q| q.status.is_none());
            if live && rkey.is_empty() {
                match put::start(tls, core, st, req, uuid, sreq, len) {
                    Ok(None) => return Ok(None),
                    Ok(Some(again)) => return step(tls, core, st, again),
                    Err(s) => {
                        tracing::debug!("rendezvous receive by put failed: {s}");
                        return fail_recv(tls, core, st, req, uuid, sreq, s);
                    }
                }
            }
            if live {
                match split::start(tls, core, st, req, uuid, sreq, len, addr, &rkey) {
                    Ok(None) => {}
                    // Split: the receive completes with the sender's fin.
                    Ok(Some(retry)) => return Ok(retry),
                    Err(s) => {
                        tracing::debug!("split rendezvous failed: {s}");
                        return fail_recv(tls, core, st, req, uuid, sreq, s);
                    }
                }
            }
            let status = if live {
                match get(tls, core, req, uuid, len, addr, &rkey) {
                    // The lane has no room for the read now: the same work, later.
                    Ok(None) => {
                        return Ok(Some(Work::Get {
                            req,
                            uuid,
                            sreq,
                            len,
                            addr,
                            rkey,
                        }))
                    }
                    Ok(Some(s)) => Ok(s),
                    Err(s) => Err(s),
                }
            } else {
                Err(Status::Canceled)
            };
            if live {
                core.complete(req, status.unwrap_or_else(|s| s));
            }
            let ats = if status.is_ok() {
                Status::Ok
            } else {
                Status::IoError
            };
            answer(tls, core, st, uuid, sreq, ats)
        }
    }
}

/// Receive `req` of the rendezvous of send `sreq` from worker `uuid` could not start: it
/// completes with `s`, and the sender hears that its send failed.
fn fail_recv(
    tls: &mut [Tl],
    core: &mut Core,
    st: &mut RndvState,
    req: Request,
    uuid: u64,
    sreq: u64,
    s: Status,
) -> Result<Option<Work>> {
    core.complete(req, s);
    answer(tls, core, st, uuid, sreq, Status::IoError)
}

/// Tells the sender `uuid` that its send `sreq` is over, with `status` (now, or later when
/// the lane has no room).
fn answer(
    tls: &mut [Tl],
    core: &mut Core,
    st: &mut RndvState,
    uuid: u64,
    sreq: u64,
    status: Status,
) -> Result<Option<Work>> {
    step(tls, core, st, Work::Ats { uuid, sreq, status })
}

/// Pulls a rendezvous message into the receive buffer of `req`; returns the receive's
/// final status, or `None` when the lane has no room for the read now (nothing was
/// read; try again).
fn get(
    tls: &mut [Tl],
    core: &mut Core,
    req: Request,
    uuid: u64,
    len: u64,
    addr: u64,
    rkey: &[u8],
) -> Result<Option<Status>> {
    let ep = core.ep_of(uuid).ok_or(Status::Unreachable)?;
    let lane = connect(tls, core, ep)?;
    let owner = lane_owner(tls, core, ep, lane);
    let rk = tls[lane.tl].md.rkey_unpack_from(rkey, owner)?;
    let Some(Req {
        kind: ReqKind::Recv(rs),
        ..
    }) = core.reqs.get_mut(req.0)
    else {
        return Err(Status::InvalidParam);
    };
    let mut want = usize::try_from(len).map_err(|_| Status::InvalidParam)?;
    let truncated = want > rs.buf.len();
    if rs.buf.is_generic() {
        // The application unpacks: pull into a bounce buffer, then hand it over.
        let n = want.min(rs.buf.len());
        let mut tmp = vec![0u8; n];
        match tls[lane.tl]
            .iface
            .get_zcopy(lane.ep, &mut [&mut tmp[..]], addr, &rk, 0)?
        {
            uct::Outcome::Done(()) => {}
            uct::Outcome::NoResource => return Ok(None),
            uct::Outcome::InProgress => return Err(Status::IoError),
        }
        if rs.buf.write_at(0, &tmp) < n {
            return Err(Status::IoError);
        }
        return Ok(Some(if truncated {
            Status::MessageTruncated
        } else {
            Status::Ok
        }));
    }
    if let Some(whole) = rs.buf.as_bytes_mut() {
        // A contiguous buffer (nearly every receive): one slice, nothing allocated.
        let n = want.min(whole.len());
        let iface = &mut tls[lane.tl].iface;
        return read_into(iface, lane.ep, &mut [&mut whole[..n]], addr, &rk, truncated);
    }
    // The slices are dropped before the request completes.
    let mut slices = rs.buf.slices_mut();
    let mut iov: Vec<&mut [u8]> = Vec::with_capacity(slices.len());
    for s in slices.iter_mut() {
        if want == 0 {
            break;
        }
        let n = s.len().min(want);
        want -= n;
        iov.push(&mut s[..n]);
    }
    read_into(
        &mut tls[lane.tl].iface,
        lane.ep,
        &mut iov,
        addr,
        &rk,
        truncated,
    )
}

/// The one read of [`get`]: `iov` from the peer's `addr` on; the receive's status, or
/// `None` when the lane has no room now.
fn read_into(
    iface: &mut uct::Iface,
    ep: uct::EpId,
    iov: &mut [&mut [u8]],
    addr: u64,
    rk: &uct::Rkey,
    truncated: bool,
) -> Result<Option<Status>> {
    match iface.get_zcopy(ep, iov, addr, rk, 0)? {
        uct::Outcome::Done(()) => {}
        uct::Outcome::NoResource => return Ok(None),
        // No transport here completes a read later; one that did would need a
        // completion path this mover does not have.
        uct::Outcome::InProgress => return Err(Status::IoError),
    }
    Ok(Some(if truncated {
        Status::MessageTruncated
    } else {
        Status::Ok
    }))
}
