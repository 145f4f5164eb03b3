//! Rendezvous over shared memory with the copy split between the two sides.
//!
//! A rendezvous by get leaves the whole copy to the receiver while the sender's CPU waits
//! for the Ats. From `UCX_RUCX_RNDV_SPLIT` bytes up, on a shared-memory lane, the receiver
//! instead registers the first part of its buffer and answers the Rts with an RtrPart
//! naming it, then reads the rest itself; the sender, on the RtrPart, writes the first
//! part (cross-memory attach) and sends RndvFin behind it. Both copies run at once, on
//! the two processes' CPUs. The receive completes when its own read ended and the fin
//! came; only then does the receiver send the Ats, on which the send completes (so the
//! sender's buffer is read by nobody once its send completed).
//!
//! Invariants: the receiver never completes a split receive before the sender's fin (or
//! the sender's failure): the sender writes into the buffer until then, so an abort is
//! refused meanwhile ([`super::RndvState::splitting`]). Owned buffers (which a request
//! frees with itself) and non-contiguous ones are never split, nor are the receives of
//! blocking calls (which abort what they give up on: `RecvState::no_split`), nor any of
//! a worker that turned splitting off (`Worker::set_rndv_split`: the collectives, which
//! cancel a whole schedule when a member fails).
//!
//! A split pays only when the sender copies while the receiver does: when both processes
//! share a CPU, the receiver's wait for the fin costs more than the copy it saved
//! (measured: 64 KiB ping-pong on one CPU, 46 µs by get, 122 µs split). So a peer with
//! which this process is pinned to one CPU is never split with, and the receiver times
//! each split that runs alone ([`judge`]), reading whole the next rendezvous from a peer
//! whose part came late several times in a row.

use super::put::{send_rtr, Part, RndvRx};
use super::{RndvState, Work};
use crate::core::request::Request;
use crate::core::{connect, lane_owner, Core, Tl};
use std::time::Instant;
use ucs::{Result, Status};

/// The first part, which the sender puts: half of `n` rounded down to whole pages, so
/// that each side's copy starts on a page. Zero when `n` is too short to split.
pub(crate) fn sender_part(n: usize) -> usize {
    (n / 2) & !4095
}

/// Receiver: tries to split the rendezvous of receive `req`, which matched an Rts of
/// `len` bytes at `addr` (key `rkey`) from request `sreq` of worker `uuid`. `Ok(None)`:
/// it does not apply (the caller gets the data as usual). `Ok(Some(retry))`: started,
/// with the Rtr still to be sent when `retry` is `Some`; this side's part is read.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start(
    tls: &mut [Tl],
    core: &mut Core,
    st: &mut RndvState,
    req: Request,
    uuid: u64,
    sreq: u64,
    len: u64,
    addr: u64,
    rkey: &[u8],
) -> Result<Option<Option<Work>>> {
    if core.split_off || core.lending {
        return Ok(None);
    }
    let min = core.cfg.rndv_split;
    let want = usize::try_from(len).map_err(|_| Status::InvalidParam)?;
    if want < min {
        return Ok(None);
    }
    let ep = core.ep_of(uuid).ok_or(Status::Unreachable)?;
    let e = core.ep_mut(ep)?;
    if e.split_skip > 0 {
        e.split_skip -= 1;
        return Ok(None);
    }
    let lane = connect(tls, core, ep)?;
    if tls[lane.tl].transport != uct::Transport::Shm || tls[lane.tl].iface.attr().max_put_zcopy == 0
    {
        return Ok(None);
    }
    let owner = lane_owner(tls, core, ep, lane);
    let e = core.ep_mut(ep)?;
    // Both pinned to one CPU: the sender could copy only while this side does not.
    let two_cpus = *e
        .split_two_cpus
        .get_or_insert_with(|| !owner.is_some_and(ucs::sys::host::confined_to_one_cpu_with));
    if !two_cpus {
        return Ok(None);
    }
    let md = tls[lane.tl].md.clone();
    let rk = md.rkey_unpack_from(rkey, owner)?;
    let rs = core.recv_state(req).ok_or(Status::InvalidParam)?;
    if rs.no_split || rs.buf.is_owned() || rs.buf.is_generic() || rs.buf.contig_ptr().is_none() {
        return Ok(None);
    }
    let n = want.min(rs.buf.len());
    let k = sender_part(n);
    if n < min || k == 0 {
        return Ok(None);
    }
    let mem = rs.buf.mem_reg(&md, k)?;
    let rreq = req.to_u64();
    core.splits += 1;
    st.rx.insert(
        rreq,
        RndvRx {
            req,
            uuid,
            sreq,
            len: k as u64,
            truncated: want > n,
            mem,
            bounce: None,
            part: Some(Part::Reading),
        },
    );
    // The sender starts on its part first, then this side reads the rest.
    let retry = match send_rtr(tls, core, st, rreq) {
        Ok(r) => r,
        Err(s) => {
            st.rx.remove(&rreq);
            return Err(s);
        }
    };
    let t0 = Instant::now();
    let status = read_rest(tls, core, lane, req, k, n, addr, &rk);
    let end = Instant::now();
    if let Some(x) = st.rx.get_mut(&rreq) {
        x.part = Some(Part::Read {
            status,
            end,
            took: end - t0,
            seq: core.splits,
        });
    }
    Ok(Some(retry.then_some(Work::Rtr { rreq })))
}

/// Reads bytes `k..n` of the message at `addr` into the same bytes of receive `req`'s
/// buffer; returns how that went.
#[allow(clippy::too_many_arguments)]
fn read_rest(
    tls: &mut [Tl],
    core: &mut Core,
    lane: crate::core::ep::Lane,
    req: Request,
    k: usize,
    n: usize,
    addr: u64,
    rk: &uct::Rkey,
) -> Status {
    let Some(rs) = core.recv_state(req) else {
        return Status::InvalidParam;
    };
    // The sender writes only bytes `..k` (its RtrPart's length), so this slice is this
    // side's alone. Only contiguous buffers split (`start`): one slice, nothing allocated.
    let Some(dst) = rs.buf.as_bytes_mut().and_then(|s| s.get_mut(k..n)) else {
        return Status::InvalidParam;
    };
    // The sender's address comes off the wire: a range past the end of memory is refused.
    let Some(from) = addr.checked_add(k as u64) else {
        return Status::InvalidParam;
    };
    match tls[lane.tl]
        .iface
        .get_zcopy(lane.ep, &mut [dst], from, rk, 0)
    {
        Ok(uct::Outcome::Done(())) => Status::Ok,
        // Shared-memory reads complete in the call; anything else is a failure here.
        Ok(_) => Status::IoError,
        Err(s) => s,
    }
}

/// Splits in a row whose sender's part came late, after which a peer's rendezvous skip
/// the split (a single late one is a preemption or a page fault, not a shared CPU: about
/// 3 in 100 on this host with both processes on their own CPU).
pub(crate) const LATE_IN_A_ROW: u8 = 3;

/// Rendezvous receives from a peer that skip the split after [`LATE_IN_A_ROW`] late ones
/// (then it is tried again): on one shared CPU, 3 slow splits in 256 cost about 2% of
/// 64 KiB messages.
pub(crate) const SKIP_AFTER_LATE: u16 = 256;

/// Receiver, at the fin of a split from `uuid` whose own part is `part` (its read ended at
/// `end` after taking `took`, when the worker had started `seq` splits). A sender running beside us on
/// another CPU finishes its part about when we finish ours; one whose fin comes later
/// than our whole read took did not run at the same time (the two processes share a CPU
/// that their affinity did not tell, or the sender was not progressing), and the split
/// then costs a round trip and a wait for nothing. After [`LATE_IN_A_ROW`] such splits,
/// the next [`SKIP_AFTER_LATE`] rendezvous from that peer are read whole by this side.
/// Only a split alone in its time is judged: when others started since (a stream of
/// large messages), the sender's fin waits behind its parts of those, whatever the CPUs.
pub(crate) fn judge(core: &mut Core, uuid: u64, part: Option<Part>) {
    let Some(Part::Read { end, took, seq, .. }) = part else {
        return;
    };
    if core.splits != seq {
        return;
    }
    let late = end.elapsed() > took;
    let Some(e) = core.ep_of(uuid).and_then(|ep| core.ep_mut(ep).ok()) else {
        return;
    };
    if !late {
        e.split_late = 0;
        return;
    }
    e.split_late += 1;
    if e.split_late >= LATE_IN_A_ROW {
        e.split_late = 0;
        e.split_skip = SKIP_AFTER_LATE;
    }
}

impl RndvState {
    /// True while receive `r` is in a split rendezvous whose sender may still write into
    /// its buffer (no fin yet): it must not complete, nor be aborted, before that.
    pub(crate) fn splitting(&self, r: Request) -> bool {
        self.rx
            .get(&r.to_u64())
            .is_some_and(|x| x.req == r && x.part.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::sender_part;

    #[test]
    fn the_sender_part_is_whole_pages_and_at_most_half() {
        assert_eq!(sender_part(0), 0);
        assert_eq!(sender_part(8191), 0);
        assert_eq!(sender_part(8192), 4096);
        assert_eq!(sender_part(65536), 32768);
        assert_eq!(sender_part(65536 + 100), 32768);
        for n in [1usize, 4096, 10_000, 1 << 20, (1 << 20) + 12345] {
            let k = sender_part(n);
            assert!(k <= n / 2 && k % 4096 == 0);
        }
    }
}
