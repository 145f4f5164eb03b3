//! The hierarchical form (`Alg::Hier`): for a team that spans hosts, the segment inside
//! each host group and a network algorithm among the groups' leaders (each group's lowest
//! team rank). Barrier, bcast and allreduce:
//!
//! | collective | in the group | among leaders | in the group |
//! |---|---|---|---|
//! | barrier | fan-in to the leader (empty reduce) | barrier | fan-out (empty bcast) |
//! | bcast | from the root, in the root's group only | bcast from the root's leader | from the leader, other groups |
//! | allreduce | reduce to the leader | allreduce in place | bcast from the leader |
//!
//! A collective is a list of phases run one after the other at each member; the network
//! phase is an ordinary [`Task`] over the leaders' endpoints, with its own team id (so its
//! tags never meet the whole team's) and the sequence number of the whole collective.
//! `Op::Avg` is summed through the phases and divided by the team size at the leader
//! before the last phase.

use super::run::{Job, Run, RunSpec};
use super::ShmTeam;
use crate::alg::Shape;
use crate::args::{plan, Args};
use crate::dtype::{self, DataType, Op};
use crate::exec::{Buffer, KeyCache, Task, TaskSpec};
use crate::schedule::Schedule;
use crate::select::CollType;
use std::sync::Arc;
use ucp::{Ep, Worker};
use ucs::{Result, Status};

/// Whether the hierarchical form implements `coll`.
pub fn supports(coll: CollType) -> bool {
    matches!(
        coll,
        CollType::Barrier | CollType::Bcast | CollType::Allreduce
    )
}

/// The leaders of a team's host groups, as seen by one leader.
pub(crate) struct Leaders {
    /// Team id of the leaders' traffic.
    pub id: u32,
    /// This leader's index among the leaders.
    pub me: usize,
    /// Endpoints to the other leaders, by leader index.
    pub eps: Arc<[Option<Ep>]>,
}

/// Where a phase of the segment takes its input from.
#[derive(Clone, Copy)]
enum From {
    Src,
    Dst,
}

#[derive(Clone)]
enum PhaseJob {
    Shm(Job, From),
    /// The leaders' part: its schedule and the operation it reduces with.
    Net(Arc<Schedule>, Op),
    /// Divides the first `len` bytes of the destination by the team size (Op::Avg).
    Scale(usize),
}

/// A hierarchical collective, before its buffers are known.
#[derive(Clone)]
pub(crate) struct HierJob {
    phases: Arc<[PhaseJob]>,
    leaders: Option<Arc<Leaders>>,
    team_size: usize,
}

/// What the hierarchical job of one member needs to know about its team.
pub(crate) struct HierSpec<'a> {
    pub group: &'a Arc<ShmTeam>,
    pub leaders: Option<&'a Arc<Leaders>>,
    /// Leader index of each team rank's group.
    pub group_of: &'a [usize],
    pub team_size: usize,
    pub radix: usize,
}

fn local_shape(g: &ShmTeam, root: usize, esize: usize, count: usize, in_place: bool) -> Shape {
    let n = g.members();
    Shape {
        rank: g.me,
        size: n,
        root,
        esize,
        in_place,
        count,
        src_blocks: vec![(0, 0); n],
        dst_blocks: vec![(0, 0); n],
        radix: 2,
    }
}

impl HierJob {
    /// Plans `args` (barrier, bcast or allreduce) at this member.
    pub(crate) fn new(h: &HierSpec<'_>, args: &Args<'_>) -> Result<HierJob> {
        let g = h.group;
        let es = args.dt.size();
        let sum_op = if args.op == Op::Avg { Op::Sum } else { args.op };
        // A barrier moves nothing, whatever its count says.
        let count = if args.coll == CollType::Barrier {
            0
        } else {
            args.count
        };
        let shm = |coll, root, in_place, from| {
            PhaseJob::Shm(
                Job {
                    team: g.clone(),
                    coll,
                    shape: Arc::new(local_shape(g, root, es, count, in_place)),
                    avg_over: 0,
                },
                from,
            )
        };
        let net = |a: Args<'_>| -> Result<PhaseJob> {
            let l = h.leaders.ok_or(Status::InvalidParam)?;
            let p = plan(&a, l.me, l.eps.len(), None, h.radix)?;
            Ok(PhaseJob::Net(Arc::new(p.schedule), a.op))
        };
        let leader = g.me == 0;
        let nl = h.group_of.iter().copied().max().map_or(1, |m| m + 1);
        let mut phases = Vec::with_capacity(4);
        match args.coll {
            CollType::Barrier => {
                phases.push(shm(CollType::Reduce, 0, false, From::Src));
                if leader {
                    phases.push(net(Args::new(CollType::Barrier))?);
                }
                phases.push(shm(CollType::Bcast, 0, false, From::Dst));
            }
            CollType::Bcast => {
                let root_group = h.group_of[args.root];
                let mine = g.ranks.contains(&args.root);
                if mine {
                    let r = g.ranks.iter().position(|&x| x == args.root).unwrap_or(0);
                    phases.push(shm(CollType::Bcast, r, false, From::Dst));
                }
                if leader && nl > 1 {
                    let len = args.count * es;
                    // SAFETY: a placeholder of the right length for planning only; the
                    // schedule addresses buffers by offset, never through this pointer.
                    let d =
                        unsafe { Buffer::from_raw(std::ptr::NonNull::dangling().as_ptr(), len) };
                    phases.push(net(Args::new(CollType::Bcast)
                        .dst(d)
                        .dtype(args.dt)
                        .count(args.count)
                        .root(root_group))?);
                }
                if !mine {
                    phases.push(shm(CollType::Bcast, 0, false, From::Dst));
                }
            }
            CollType::Allreduce => {
                let len = args.count * es;
                // A member's input is in its destination in place.
                let from = if args.in_place { From::Dst } else { From::Src };
                phases.push(shm(CollType::Reduce, 0, args.in_place && leader, from));
                if leader && nl > 1 {
                    // SAFETY: as above, for planning only.
                    let d =
                        unsafe { Buffer::from_raw(std::ptr::NonNull::dangling().as_ptr(), len) };
                    phases.push(net(Args::new(CollType::Allreduce)
                        .dst(d)
                        .in_place(true)
                        .dtype(args.dt)
                        .op(sum_op)
                        .count(args.count))?);
                }
                if leader && args.op == Op::Avg {
                    phases.push(PhaseJob::Scale(len));
                }
                phases.push(shm(CollType::Bcast, 0, false, From::Dst));
            }
            _ => return Err(Status::Unsupported),
        }
        Ok(HierJob {
            phases: phases.into(),
            leaders: h.leaders.cloned(),
            team_size: h.team_size,
        })
    }
}

enum Phase {
    Shm(Run),
    Net(Option<Box<Task>>),
    Done,
}

/// A hierarchical collective running at one member.
pub(crate) struct Hier {
    job: HierJob,
    dt: DataType,
    op: Op,
    src: (*mut u8, usize),
    dst: (*mut u8, usize),
    seq: u32,
    i: usize,
    cur: Phase,
    /// Grows with every step made (for the no-progress timeout).
    mark: usize,
}

// SAFETY: the raw pointers are the request's buffers, which move with the request.
unsafe impl Send for Hier {}

impl Hier {
    pub(crate) fn new(
        job: HierJob,
        dt: DataType,
        op: Op,
        src: (*mut u8, usize),
        dst: (*mut u8, usize),
        seq: u32,
    ) -> Hier {
        Hier {
            job,
            dt,
            op,
            src,
            dst,
            seq,
            i: 0,
            cur: Phase::Done,
            mark: 0,
        }
    }

    pub(crate) fn progress_mark(&self) -> usize {
        let inner = match &self.cur {
            Phase::Shm(r) => r.progress_mark(),
            Phase::Net(Some(t)) => t.step_index(),
            _ => 0,
        };
        self.mark + inner
    }

    /// Starts phase `i`; `Ok(true)` when it finished at once.
    fn begin(&mut self, w: &mut Worker, keys: &mut KeyCache) -> Result<bool> {
        let op = if self.op == Op::Avg { Op::Sum } else { self.op };
        match self.job.phases[self.i].clone() {
            PhaseJob::Shm(job, from) => {
                let src = match from {
                    From::Src => self.src.0,
                    From::Dst => self.dst.0,
                };
                let mut run = Run::new(RunSpec {
                    job,
                    dt: self.dt,
                    op,
                    src,
                    dst: self.dst.0,
                });
                run.start();
                let done = run.advance()?;
                self.cur = Phase::Shm(run);
                Ok(done)
            }
            PhaseJob::Net(sched, nop) => {
                let l = self.job.leaders.clone().ok_or(Status::InvalidParam)?;
                // SAFETY: the destination of the request, valid while it runs.
                let d = unsafe { Buffer::from_raw(self.dst.0, self.dst.1) };
                let mut t = Task::new(TaskSpec {
                    sched,
                    dt: self.dt,
                    op: nop,
                    src: None,
                    dst: Some(&d),
                    team: l.id,
                    seq: self.seq,
                    me: l.me,
                    eps: l.eps.clone(),
                    shm: None,
                    hier: None,
                });
                let done = t.start(w, keys)?;
                self.cur = Phase::Net(Some(Box::new(t)));
                Ok(done)
            }
            PhaseJob::Scale(len) => {
                if len > 0 {
                    // SAFETY: the first `len` bytes of the destination (checked by the
                    // plan); nothing else accesses them during this call.
                    let d = unsafe { std::slice::from_raw_parts_mut(self.dst.0, len) };
                    dtype::scale(self.dt, d, self.job.team_size)?;
                }
                self.cur = Phase::Done;
                Ok(true)
            }
        }
    }

    /// Starts the first phase and runs as far as possible; `Ok(true)`: completed.
    pub(crate) fn start(&mut self, w: &mut Worker, keys: &mut KeyCache) -> Result<bool> {
        self.i = 0;
        if self.job.phases.is_empty() || self.begin(w, keys)? {
            return self.advance(w, keys);
        }
        Ok(false)
    }

    /// Runs phases until one must wait; `Ok(true)` when the collective completed.
    pub(crate) fn advance(&mut self, w: &mut Worker, keys: &mut KeyCache) -> Result<bool> {
        loop {
            if self.i >= self.job.phases.len() {
                return Ok(true);
            }
            let done = match &mut self.cur {
                Phase::Shm(r) => r.advance()?,
                Phase::Net(Some(t)) => t.advance(w, keys)?,
                Phase::Net(None) | Phase::Done => true,
            };
            if !done {
                return Ok(false);
            }
            // A finished task has nothing in flight: it may go.
            self.cur = Phase::Done;
            self.i += 1;
            self.mark += 1;
            if self.i < self.job.phases.len() && !self.begin(w, keys)? {
                return Ok(false);
            }
        }
    }

    /// The segment run, when the running phase is one.
    pub(crate) fn shm(&self) -> Option<&Run> {
        match &self.cur {
            Phase::Shm(r) => Some(r),
            _ => None,
        }
    }

    /// The group's segment.
    pub(crate) fn group(&self) -> Option<&Arc<ShmTeam>> {
        self.job.phases.iter().find_map(|p| match p {
            PhaseJob::Shm(j, _) => Some(&j.team),
            _ => None,
        })
    }

    /// True when the running phase waits for team rank `rank`.
    pub(crate) fn blocked_on(
        &self,
        w: &Worker,
        rank: usize,
        group_of: impl Fn(usize) -> Option<usize>,
    ) -> bool {
        match &self.cur {
            Phase::Shm(r) => r
                .waiting()
                .is_some_and(|(j, _)| r.team().ranks.get(j) == Some(&rank)),
            Phase::Net(Some(t)) => group_of(rank).is_some_and(|l| t.blocked_on(w, l)),
            _ => false,
        }
    }

    pub(crate) fn aborted_remotely(&self, w: &Worker) -> bool {
        self.group().is_some_and(|g| g.seg.aborted())
            || matches!(&self.cur, Phase::Net(Some(t)) if t.aborted_remotely(w))
    }

    pub(crate) fn cancel(&mut self, w: &mut Worker, keys: &mut KeyCache) {
        if let Phase::Net(Some(t)) = &mut self.cur {
            t.cancel(w, keys);
        }
        self.cur = Phase::Done;
        self.i = self.job.phases.len();
    }

    /// Tells the group (segment) and, at a leader, the other leaders.
    pub(crate) fn notify_abort(&self, w: &mut Worker, dead: impl Fn(Ep) -> bool) {
        if let Some(g) = self.group() {
            g.seg.set_abort();
        }
        if let Some(l) = &self.job.leaders {
            crate::exec::send_abort(w, l.id, self.seq, l.me, &l.eps, dead);
        }
    }
}
