//! The shared-memory path: collectives among the members of a team that share a host,
//! through one segment per team (or per host group of a team), with flag
//! synchronisation and reductions done from the segment into the destination.
//!
//! - [`seg`]: the segment's layout, its flags (acquire/release, futex sleep/wake) and the
//!   only raw access to it;
//! - [`run`]: one collective as rounds over the segment, a non-blocking state machine;
//! - [`split`]: the split allreduce of large vectors (each member reduces its part);
//! - this module: a team's segment ([`ShmTeam`]), its set-up, and the grouping of a
//!   team's members by host.
//!
//! Set-up (at team creation, when a host group has at least one member): the group's
//! lowest team rank creates the segment (a memfd, mode 0600, so it has no name to unlink
//! and disappears with its last mapping, also when a member is killed) and sends its
//! identity to every other member of the group with a tagged message of the team's
//! reserved tag space (step [`SETUP_STEP`]); they attach it through `pidfd_getfd`, as the
//! shm transport does, and answer whether they could; the creator waits for every answer
//! (so it never closes the segment before all attached). Then the team takes a census
//! through rank 0 (step [`VERDICT_STEP`]): if any member has no segment (it could not
//! attach, its group's could not be created, or `UCX_COLL_SHM=n` there), nobody keeps
//! one; and each member learns how many members share its CPUs (the waits of an
//! oversubscribed team differ). Every wait is bounded by the collective timeout.
//!
//! Invariant: every member of a group runs the same collectives on the segment in the
//! same order (the team's ordering rule), so the round ids it reserves ([`ShmTeam::reserve`])
//! agree across members.

#![allow(unsafe_code)]

pub mod hier;
pub mod run;
pub(crate) mod seg;
pub(crate) mod split;

use crate::exec::tag;
use seg::Seg;
pub use seg::{mid_ring_len, ring_len, slot_bytes, INLINE, MID, MID_MEMBERS};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use ucp::{Buf, Ep, Worker};
use ucs::sys::shm::SegmentId;
use ucs::{Result, Status};

/// The tag step of the set-up messages (below the abort notice; collective 0's steps
/// never reach it while the team is being created).
pub const SETUP_STEP: u64 = 0xffe;

/// The tag step of the team's census: its verdict on the segments and who shares CPUs
/// (as [`SETUP_STEP`]).
pub const VERDICT_STEP: u64 = 0xffd;

/// A member's answer to the segment's offer: attached; could not attach (or nothing was
/// offered); does not want one (`UCX_COLL_SHM=n`).
const ACK_FAILED: u8 = 0;
const ACK_ATTACHED: u8 = 1;
const ACK_DECLINED: u8 = 2;

/// Members of a host group at most for the segment path.
pub const MAX_MEMBERS: usize = 256;

/// A team's segment as seen by one member.
///
/// Round ids are 64-bit here (they never wrap) and 32-bit in the segment; a 32-bit
/// value read from the segment is widened against a nearby local round ([`widen`]):
/// members are never more than a ring's length apart.
pub(crate) struct ShmTeam {
    pub(crate) seg: Seg,
    /// Team ranks of the segment's members, by member index.
    pub(crate) ranks: Vec<usize>,
    /// This member's index.
    pub(crate) me: usize,
    /// Next round id to reserve (local to this member; the same sequence everywhere).
    next: AtomicU64,
    /// The last round this member completed.
    done: AtomicU64,
    /// For each member, a round it is known to have entered (read from its flag or its
    /// cells): a wait that this already satisfies reads nothing shared.
    known: Box<[AtomicU64]>,
    /// This process's id, for single-copy descriptors (read once: a system call).
    pub(crate) pid: u32,
    /// The members do not outnumber the host's CPUs (the segment is not crowded): a
    /// bcast root may push its share (`run::bcast_split`).
    pub(crate) root_pushes: bool,
}

/// The 64-bit round whose low 32 bits are `v`, nearest to `near`.
#[inline]
pub(crate) fn widen(v: u32, near: u64) -> u64 {
    near.wrapping_add(i64::from(v.wrapping_sub(near as u32) as i32) as u64)
}

impl ShmTeam {
    fn new(seg: Seg, ranks: &[usize], me: usize) -> ShmTeam {
        let known = (0..seg.members()).map(|_| AtomicU64::new(0)).collect();
        let root_pushes = seg.members() >= 2 && !seg.crowded();
        ShmTeam {
            seg,
            ranks: ranks.to_vec(),
            me,
            next: AtomicU64::new(1),
            done: AtomicU64::new(0),
            known,
            pid: std::process::id(),
            root_pushes,
        }
    }

    /// Reserves `n` rounds; returns the first round id.
    ///
    /// Only the thread that drives this member's context calls it (posting takes the
    /// context by `&mut`), so a load and a store do: a locked read-modify-write would
    /// wait here for this member's earlier stores to the segment, each a cache line its
    /// readers hold, to leave the store buffer.
    pub(crate) fn reserve(&self, n: u32) -> u64 {
        let k = self.next.load(Ordering::Relaxed);
        self.next.store(k + u64::from(n), Ordering::Relaxed);
        k
    }

    pub(crate) fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    pub(crate) fn set_done(&self, k: u64) {
        self.done.store(k, Ordering::Relaxed);
    }

    /// A round member `j` is known to have entered.
    #[inline]
    pub(crate) fn known(&self, j: usize) -> u64 {
        // Acquire: pairs with `learn`, so that what the load that taught it made visible
        // is visible here too.
        self.known[j].load(Ordering::Acquire)
    }

    /// Records that member `j` entered round `k` (read from the segment with acquire).
    #[inline]
    pub(crate) fn learn(&self, j: usize, k: u64) {
        if k > self.known[j].load(Ordering::Relaxed) {
            self.known[j].store(k, Ordering::Release);
        }
    }

    /// Members of the segment.
    pub fn members(&self) -> usize {
        self.seg.members()
    }
}

fn encode(id: &SegmentId) -> [u8; 24] {
    let mut m = [0u8; 24];
    m[..4].copy_from_slice(&id.pid.to_le_bytes());
    m[4..8].copy_from_slice(&id.fd.to_le_bytes());
    m[8..16].copy_from_slice(&id.ino.to_le_bytes());
    m[16..].copy_from_slice(&id.len.to_le_bytes());
    m
}

fn decode(m: &[u8; 24]) -> SegmentId {
    let u32_at = |i: usize| u32::from_le_bytes([m[i], m[i + 1], m[i + 2], m[i + 3]]);
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&m[i..i + 8]);
        u64::from_le_bytes(b)
    };
    SegmentId {
        pid: u32_at(0),
        fd: u32_at(4) as i32,
        ino: u64_at(8),
        len: u64_at(16),
    }
}

/// Where a team's segment set-up happens: its tag coordinates and the group.
pub(crate) struct SetupSpec<'a> {
    pub team_id: u32,
    pub me: usize,
    /// Team ranks of the group, ascending; `me` is one of them.
    pub group: &'a [usize],
    pub eps: &'a [Option<Ep>],
    pub timeout: Duration,
    /// The group outnumbers the host's CPUs (the creator's answer is the segment's).
    pub crowded: bool,
    /// This member wants a segment (`UCX_COLL_SHM`); one that does not still answers.
    pub want: bool,
    /// Members of the team (rank 0 gathers the team's verdict).
    pub size: usize,
}

/// Waits for `req` at most `timeout`; aborts it on timeout.
fn finish(w: &mut Worker, req: ucp::Request, timeout: Duration) -> Result<()> {
    match w.wait_request(req, timeout) {
        Ok(Status::Ok) => Ok(()),
        Ok(e) => Err(e),
        Err(e) => {
            let _ = w.abort_for_good(req);
            let _ = w.request_free(req);
            Err(e)
        }
    }
}

/// Sends `msg` to `ep` with tag `t` and waits for the send to complete.
fn send(w: &mut Worker, ep: Ep, t: u64, msg: &[u8], timeout: Duration) -> Result<()> {
    // SAFETY: `msg` outlives the request: it completes or is aborted in `finish`.
    let b = unsafe { Buf::contig(msg.as_ptr().cast_mut(), msg.len()) };
    match w.tag_send_nb(ep, b, t, false, None)? {
        Some(req) => finish(w, req, timeout),
        None => Ok(()),
    }
}

/// Receives exactly `msg.len()` bytes with tag `t`.
fn recv(w: &mut Worker, t: u64, msg: &mut [u8], timeout: Duration) -> Result<()> {
    // SAFETY: `msg` outlives the receive: it completes or is aborted in `finish`.
    let b = unsafe { Buf::contig(msg.as_mut_ptr(), msg.len()) };
    let req = w.tag_recv_nb(b, t, u64::MAX, None)?;
    finish(w, req, timeout)
}

/// What team creation learns from [`setup`].
pub(crate) struct Setup {
    /// The segment, at every member or at none.
    pub shm: Option<Arc<ShmTeam>>,
    /// Members of the team that run on the CPUs this member runs on (its CPU domain,
    /// [`ucs::sys::host::cpu_domain_id`]: network namespaces of one machine share it),
    /// this member included.
    pub sharing_cpus: usize,
}

/// Sets up the group's segment at team creation: `Some` at every member of the team, or
/// `None` at every member (the team then runs the network algorithms). Every member of a
/// group of two or more takes part, whether it wants a segment or not
/// ([`SetupSpec::want`]): the group's first member offers one (or none) and waits for
/// every member's answer (attached or not), so that it never closes the segment while a
/// member still has to reach it; then the whole team takes a census ([`census`]): one
/// group without its segment, or one member without it, and nobody keeps one, so that
/// every member picks the same algorithms. Only a failed exchange (a member gone, the
/// timeout) is an error.
pub(crate) fn setup(w: &mut Worker, s: &SetupSpec<'_>) -> Result<Setup> {
    let idx = s
        .group
        .iter()
        .position(|&r| r == s.me)
        .ok_or(Status::InvalidParam)?;
    let seg = group_setup(w, s, idx)?;
    let c = census(w, s, seg.is_some(), ucs::sys::host::cpu_domain_id())?;
    if !c.all_segments && seg.is_some() {
        tracing::warn!("coll: a team member has no shared segment; the team runs without them");
    }
    Ok(Setup {
        shm: seg
            .filter(|_| c.all_segments)
            .map(|seg| Arc::new(ShmTeam::new(seg, s.group, idx))),
        sharing_cpus: c.sharing_cpus,
    })
}

/// The group's part of [`setup`]: the segment this member holds once every member of
/// its group answered (`None`: this member, or for the first member any member of the
/// group, has none).
fn group_setup(w: &mut Worker, s: &SetupSpec<'_>, idx: usize) -> Result<Option<Seg>> {
    let n = s.group.len();
    let usable = s.want && n <= MAX_MEMBERS;
    let leader = s.group[0];
    let ep = |r: usize| s.eps.get(r).copied().flatten().ok_or(Status::InvalidParam);
    if idx == 0 {
        let seg = if usable {
            Seg::create(n, s.crowded)
                .inspect_err(|e| tracing::warn!("coll: cannot create a team segment: {e}"))
                .ok()
        } else {
            None
        };
        // No segment is offered as an identity of length 0.
        let msg = seg.as_ref().map_or([0u8; 24], |g| encode(g.id()));
        let t = tag::make(s.team_id, 0, SETUP_STEP, leader);
        for &r in &s.group[1..] {
            send(w, ep(r)?, t, &msg, s.timeout)?;
        }
        let mut all = true;
        for &r in &s.group[1..] {
            let mut ack = [0u8; 1];
            recv(
                w,
                tag::make(s.team_id, 0, SETUP_STEP, r),
                &mut ack,
                s.timeout,
            )?;
            if ack[0] == ACK_FAILED && seg.is_some() {
                tracing::warn!("coll: team rank {r} could not attach the team segment");
            }
            all &= ack[0] == ACK_ATTACHED;
        }
        return Ok(seg.filter(|_| all));
    }
    let mut msg = [0u8; 24];
    if let Err(e) = recv(
        w,
        tag::make(s.team_id, 0, SETUP_STEP, leader),
        &mut msg,
        s.timeout,
    ) {
        tracing::error!("coll: no answer about a shared segment from team rank {leader}: {e}");
        return Err(e);
    }
    let id = decode(&msg);
    let seg = if usable && id.len > 0 {
        Seg::attach(&id, n)
            .inspect_err(|e| tracing::warn!("coll: cannot attach the team segment: {e}"))
            .ok()
    } else {
        None
    };
    let ack = [match (&seg, s.want) {
        (Some(_), _) => ACK_ATTACHED,
        (None, false) => ACK_DECLINED,
        (None, true) => ACK_FAILED,
    }];
    send(
        w,
        ep(leader)?,
        tag::make(s.team_id, 0, SETUP_STEP, s.me),
        &ack,
        s.timeout,
    )?;
    Ok(seg)
}

/// A member's part of the census, to team rank 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CensusIn {
    /// This member holds its group's segment.
    segment: bool,
    /// Its CPU domain ([`ucs::sys::host::cpu_domain_id`]).
    domain: u64,
}

/// Rank 0's answer to one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CensusOut {
    /// Every member holds its segment.
    all_segments: bool,
    /// Members in the addressee's CPU domain, itself included.
    sharing_cpus: usize,
}

const CENSUS_IN_LEN: usize = 9;
const CENSUS_OUT_LEN: usize = 5;

fn encode_census_in(c: CensusIn) -> [u8; CENSUS_IN_LEN] {
    let mut m = [0u8; CENSUS_IN_LEN];
    m[0] = u8::from(c.segment);
    m[1..].copy_from_slice(&c.domain.to_le_bytes());
    m
}

/// A byte other than 1 is "no segment": a peer's garbage takes the team off its segments,
/// never onto one.
fn decode_census_in(m: &[u8; CENSUS_IN_LEN]) -> CensusIn {
    let mut d = [0u8; 8];
    d.copy_from_slice(&m[1..]);
    CensusIn {
        segment: m[0] == 1,
        domain: u64::from_le_bytes(d),
    }
}

fn encode_census_out(c: CensusOut) -> [u8; CENSUS_OUT_LEN] {
    let mut m = [0u8; CENSUS_OUT_LEN];
    m[0] = u8::from(c.all_segments);
    let n = u32::try_from(c.sharing_cpus).unwrap_or(u32::MAX);
    m[1..].copy_from_slice(&n.to_le_bytes());
    m
}

/// `size`: the team's; a count outside 1..=size is clamped into it.
fn decode_census_out(m: &[u8; CENSUS_OUT_LEN], size: usize) -> CensusOut {
    let mut n = [0u8; 4];
    n.copy_from_slice(&m[1..]);
    CensusOut {
        all_segments: m[0] == 1,
        sharing_cpus: (u32::from_le_bytes(n) as usize).clamp(1, size.max(1)),
    }
}

/// Rank 0's answers to the census, member by member: whether every member holds its
/// segment, and how many share each one's CPU domain.
fn tally(ins: &[CensusIn]) -> Vec<CensusOut> {
    let every = ins.iter().all(|c| c.segment);
    ins.iter()
        .map(|c| CensusOut {
            all_segments: every,
            sharing_cpus: ins.iter().filter(|d| d.domain == c.domain).count(),
        })
        .collect()
}

/// The team's census at creation: each member tells team rank 0 whether it holds its
/// segment (`segment`) and its CPU domain (`domain`); rank 0 answers each whether all do
/// and how many members share its domain (2 (size − 1) short messages, at team creation
/// only).
fn census(w: &mut Worker, s: &SetupSpec<'_>, segment: bool, domain: u64) -> Result<CensusOut> {
    let mine = CensusIn { segment, domain };
    if s.size <= 1 {
        return Ok(CensusOut {
            all_segments: segment,
            sharing_cpus: 1,
        });
    }
    let t = |r: usize| tag::make(s.team_id, 0, VERDICT_STEP, r);
    let ep = |r: usize| s.eps.get(r).copied().flatten().ok_or(Status::InvalidParam);
    if s.me == 0 {
        let mut all = vec![mine; s.size];
        for (r, c) in all.iter_mut().enumerate().skip(1) {
            let mut m = [0u8; CENSUS_IN_LEN];
            recv(w, t(r), &mut m, s.timeout)?;
            *c = decode_census_in(&m);
        }
        let outs = tally(&all);
        for (r, out) in outs.iter().enumerate().skip(1) {
            send(w, ep(r)?, t(0), &encode_census_out(*out), s.timeout)?;
        }
        return Ok(outs[0]);
    }
    send(w, ep(0)?, t(s.me), &encode_census_in(mine), s.timeout)?;
    let mut m = [0u8; CENSUS_OUT_LEN];
    recv(w, t(0), &mut m, s.timeout)?;
    Ok(decode_census_out(&m, s.size))
}

/// The host groups of a team: for each member, a key; members with equal keys share a
/// host. `split` > 0 further cuts each host into groups of consecutive ranks of that
/// size (`UCX_COLL_HOST_GROUP_SIZE`, to test the hierarchical form on one machine).
pub(crate) fn group_keys(hosts: &[u64], split: usize) -> Vec<(u64, usize)> {
    let mut seen: Vec<(u64, usize)> = Vec::new();
    hosts
        .iter()
        .map(|&h| {
            let i = match seen.iter().position(|x| x.0 == h) {
                Some(i) => i,
                None => {
                    seen.push((h, 0));
                    seen.len() - 1
                }
            };
            let k = seen[i].1;
            seen[i].1 += 1;
            (h, k.checked_div(split).unwrap_or(0))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_widen_to_the_nearest() {
        assert_eq!(widen(5, 3), 5);
        assert_eq!(widen(1, 3), 1);
        assert_eq!(widen(2, (1 << 32) + 7), (1 << 32) + 2);
        assert_eq!(widen(u32::MAX, 1 << 32), (1 << 32) - 1);
        assert_eq!(widen(3, (1 << 32) - 2), (1 << 32) + 3);
    }

    #[test]
    fn rings_are_powers_of_two_and_bounded() {
        assert_eq!(ring_len(1), 256);
        assert_eq!(ring_len(2), 256);
        assert_eq!(ring_len(8), 256);
        assert_eq!(ring_len(9), 128);
        assert_eq!(ring_len(16), 128);
        assert_eq!(ring_len(256), 16);
        for n in 1..=MAX_MEMBERS {
            let r = ring_len(n);
            assert!(r.is_power_of_two() && (16..=256).contains(&r));
            assert!(n * r * 64 <= 256 << 10, "{n}");
            assert!((seg::write_ahead(r) as usize) < r);
        }
    }

    proptest::proptest! {
        #[test]
        fn census_messages_round_trip(segment: bool, domain: u64, all: bool, n in 1usize..=4096) {
            let i = CensusIn { segment, domain };
            proptest::prop_assert_eq!(decode_census_in(&encode_census_in(i)), i);
            let o = CensusOut { all_segments: all, sharing_cpus: n };
            proptest::prop_assert_eq!(decode_census_out(&encode_census_out(o), 4096), o);
        }

        /// Any bytes decode, to "no segment" unless the byte is exactly 1, and to a count
        /// within the team.
        #[test]
        fn census_messages_decode_any_bytes(a: [u8; CENSUS_IN_LEN], b: [u8; CENSUS_OUT_LEN], size in 1usize..100) {
            let i = decode_census_in(&a);
            proptest::prop_assert_eq!(i.segment, a[0] == 1);
            let o = decode_census_out(&b, size);
            proptest::prop_assert_eq!(o.all_segments, b[0] == 1);
            proptest::prop_assert!((1..=size).contains(&o.sharing_cpus));
        }
    }

    /// Members in two CPU domains (say, two machines, or namespaces of one machine
    /// count as one domain): each learns its own domain's count; one member without a
    /// segment takes everybody off theirs.
    #[test]
    fn census_tally_counts_per_domain() {
        let m = |segment, domain| CensusIn { segment, domain };
        let out = tally(&[m(true, 7), m(true, 7), m(true, 9), m(true, 7), m(true, 9)]);
        let counts: Vec<usize> = out.iter().map(|o| o.sharing_cpus).collect();
        assert_eq!(counts, [3, 3, 2, 3, 2]);
        assert!(out.iter().all(|o| o.all_segments));
        let out = tally(&[m(true, 1), m(false, 1), m(true, 2)]);
        assert!(out.iter().all(|o| !o.all_segments));
        assert_eq!(tally(&[m(true, 5)])[0].sharing_cpus, 1);
    }

    #[test]
    fn segment_id_round_trips() {
        let id = SegmentId {
            pid: 77,
            fd: 9,
            ino: 1 << 40 | 3,
            len: 65536,
        };
        assert_eq!(decode(&encode(&id)), id);
    }

    #[test]
    fn groups_follow_hosts_and_split() {
        let hosts = [1, 1, 2, 1, 2, 1];
        assert_eq!(
            group_keys(&hosts, 0),
            vec![(1, 0), (1, 0), (2, 0), (1, 0), (2, 0), (1, 0)]
        );
        assert_eq!(
            group_keys(&hosts, 2),
            vec![(1, 0), (1, 0), (2, 0), (1, 1), (2, 0), (1, 1)]
        );
    }

    #[test]
    fn segment_is_owner_only_with_two_slots_per_member() {
        let s = Seg::create(3, false).unwrap();
        assert_eq!(s.members(), 3);
        let a = s.slot_ptr(0, 0) as usize;
        let b = s.slot_ptr(0, 1) as usize;
        let c = s.slot_ptr(1, 0) as usize;
        assert_eq!(b - a, s.slot());
        assert_eq!(c - a, 2 * s.slot());
        let t = Seg::attach(s.id(), 3).unwrap();
        t.set_flag(2, 5);
        assert_eq!(s.flag(2), 5);
        assert!(Seg::attach(s.id(), 4).is_err());
        // The cells of a ring: one line each, ring_len of them per member, wrapping.
        use seg::Ring;
        let c0 = s.cell_ptr(Ring::Inline, 1, 0) as usize;
        assert_eq!(s.cell_ptr(Ring::Inline, 1, 1) as usize - c0, 64);
        let ring = s.ring(Ring::Inline);
        assert_eq!(ring, ring_len(3));
        assert_eq!(
            s.cell_ptr(Ring::Inline, 1, ring as u32),
            s.cell_ptr(Ring::Inline, 1, 0)
        );
        assert_eq!(
            s.cell_ptr(Ring::Inline, 1, u32::MAX) as usize - c0,
            (ring - 1) * 64
        );
        assert_eq!(s.cell_ptr(Ring::Inline, 2, 0) as usize - c0, ring * 64);
        t.set_cell_round(Ring::Inline, 1, 3 + ring as u32);
        assert_eq!(s.cell_round(Ring::Inline, 1, 3), 3 + ring as u32);
        assert_eq!(s.cell_round(Ring::Inline, 1, 4), 0);
        // Mid cells: a line then MID bytes, mid_ring_len(3) per member, between the inline
        // cells and the data slots; no overlap with either ring's neighbours.
        let m0 = s.cell_ptr(Ring::Mid, 0, 0) as usize;
        let mid = s.ring(Ring::Mid);
        assert_eq!(mid, mid_ring_len(3));
        assert!(s.cell_ptr(Ring::Inline, 2, ring as u32 - 1) as usize + INLINE < m0);
        assert_eq!(s.cell_ptr(Ring::Mid, 0, 1) as usize - m0, MID + 64);
        assert_eq!(s.cell_ptr(Ring::Mid, 1, 0) as usize - m0, mid * (MID + 64));
        assert_eq!(
            s.cell_ptr(Ring::Mid, 1, mid as u32),
            s.cell_ptr(Ring::Mid, 1, 0)
        );
        assert!(s.cell_ptr(Ring::Mid, 2, mid as u32 - 1) as usize + MID <= a);
        t.set_cell_round(Ring::Mid, 2, 7);
        assert_eq!(s.cell_round(Ring::Mid, 2, 7 + mid as u32), 7);
        assert_eq!(
            Seg::create(MID_MEMBERS + 1, false).unwrap().ring(Ring::Mid),
            0
        );
    }
}
