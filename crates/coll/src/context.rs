//! The collectives context: one per ucp worker. It owns the worker, caches endpoints by
//! peer address, holds teams and collective requests, drives them from [`Context::progress`]
//! and waits for them in a way that works when ranks outnumber cores.
//!
//! Lifecycle of a collective (UCC's): [`Context::init`] checks the arguments, picks the
//! algorithm and builds the schedule; [`Context::post`] starts it (again and again for a
//! persistent request); [`Context::test`] / [`Context::wait`] see it complete;
//! [`Context::finalize`] releases it and gives the buffers back. [`Context::run`] is the
//! blocking form on borrowed slices.
//!
//! Failure: every team endpoint is connected at team creation and has an error handler;
//! a member whose endpoint failed is marked gone in every team holding it. A collective
//! whose running step waits for a transfer with a member that is gone fails with
//! `ConnectionReset` (later steps do not count: a member that finished and left may have
//! sent what they need already). The failing rank sends an abort notice to the other
//! members, which fail theirs too (every posted collective has a wildcard receive for
//! it), and the team is marked failed: its later collectives fail at once. A collective
//! that makes no progress for `UCX_COLL_TIMEOUT` fails with `TimedOut`.
//!
//! Waiting: spin briefly on progress, then sleep on the worker's wakeup. A team whose
//! members on this machine's CPUs outnumber them (counted at team creation, network
//! namespaces included), or a host whose load average already reaches its cores, makes
//! waits sleep early.

use crate::args::{plan, Args};
use crate::exec::{tag, Buffer, KeyCache, Task, TaskSpec};
use crate::schedule::Schedule;
use crate::select::{Alg, CollType, Forced, COLL_VARS};
use crate::shm::hier::{HierJob, HierSpec, Leaders};
use crate::shm::{self, run::Job, ShmTeam};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ucp::{Ep, Worker};
use ucs::{Result, Status};

/// Settings of a context.
#[derive(Clone, Debug)]
pub struct Options {
    /// A collective that makes no progress this long fails with `TimedOut`.
    pub timeout: Duration,
    /// Wait by sleeping soon (`Some(true)`), by spinning longer (`Some(false)`), or decide
    /// from the members of a team on this member's CPUs against the cores (`None`; network
    /// namespaces of one machine share its CPUs). It also picks
    /// how a team's segment moves data: as for more members than cores (through its
    /// slots, the least copying in all) or not (single copy, the shortest path).
    pub oversubscribed: Option<bool>,
    /// Radix of the k-nomial trees.
    pub radix: usize,
    /// Algorithms forced per collective.
    pub forced: Forced,
    /// Set up a shared segment per team for the members on one host (`UCX_COLL_SHM`).
    pub shm: bool,
    /// Cut each host into groups of this many consecutive members, each taken as a host
    /// of its own (0: off; `UCX_COLL_HOST_GROUP_SIZE`, for tests of the hierarchical form).
    pub host_group_size: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_secs(120),
            oversubscribed: None,
            radix: 4,
            forced: Forced::default(),
            shm: true,
            host_group_size: 0,
        }
    }
}

impl Options {
    /// Reads the `UCX_COLL_*` variables (see `select::COLL_VARS`).
    pub fn from_env() -> Result<Options> {
        ucs::config::register(COLL_VARS);
        let var = |n: &str| COLL_VARS.iter().find(|v| v.name == n).copied();
        let mut o = Options {
            forced: Forced::from_env()?,
            ..Options::default()
        };
        if let Some(v) = var("COLL_TIMEOUT") {
            o.timeout = ucs::config::time(&v)?;
        }
        if let Some(v) = var("COLL_KNOMIAL_RADIX") {
            o.radix = (ucs::config::u64_value(&v)? as usize).max(2);
        }
        if let Some(v) = var("COLL_SHM") {
            o.shm = ucs::config::parse_bool(&ucs::config::raw(&v)).ok_or(Status::InvalidParam)?;
        }
        if let Some(v) = var("COLL_HOST_GROUP_SIZE") {
            o.host_group_size = ucs::config::u64_value(&v)? as usize;
        }
        if let Some(v) = var("COLL_OVERSUBSCRIBED") {
            let s = ucs::config::raw(&v);
            o.oversubscribed = if s.trim().eq_ignore_ascii_case("auto") {
                None
            } else {
                Some(ucs::config::parse_bool(&s).ok_or(Status::InvalidParam)?)
            };
        }
        Ok(o)
    }
}

/// A team of this context (a handle; [`Context::team_destroy`] releases it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Team(u32);

/// A collective request of this context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CollReq {
    idx: u32,
    gen: u32,
}

/// An out-of-band allgather, as the launcher provides it (UCC's `ucc_oob_coll`): each
/// member contributes the same number of bytes, and gets everyone's, in rank order.
pub trait Oob {
    /// This member's rank in the out-of-band group.
    fn rank(&self) -> usize;
    /// Members of the group.
    fn size(&self) -> usize;
    /// Starts an allgather of `data`.
    fn post(&mut self, data: &[u8]) -> Result<()>;
    /// The concatenated contributions once the allgather completed, else `None`.
    fn test(&mut self) -> Result<Option<Vec<u8>>>;
}

struct TeamState {
    rank: usize,
    size: usize,
    id: u32,
    seq: u32,
    eps: Arc<[Option<Ep>]>,
    addrs: Arc<[Vec<u8>]>,
    /// Members whose endpoint failed (they may just have left after their last
    /// collective: only a collective that still needs them fails).
    dead: Vec<bool>,
    /// Set once a collective of the team failed: the team is broken.
    failed: Option<Status>,
    /// The segment of this member's host group (see `shm`), if set up.
    shm: Option<Arc<ShmTeam>>,
    /// Leader index (group number) of each member's host group.
    group_of: Arc<[usize]>,
    /// Some host group has several members (the hierarchical form has a use).
    shared_hosts: bool,
    /// At a group leader of a team of several groups: the leaders.
    leaders: Option<Arc<Leaders>>,
    /// Members that run on this member's CPUs, itself included (the census at creation).
    sharing_cpus: usize,
}

impl TeamState {
    /// True when the whole team shares this member's segment.
    fn all_local(&self) -> bool {
        self.shm.as_ref().is_some_and(|s| s.members() == self.size)
    }
}

struct ReqState {
    gen: u32,
    team: u32,
    coll: CollType,
    args: Args<'static>,
    alg: Alg,
    sched: Arc<Schedule>,
    /// The segment path's description, when `alg` is `Shm`.
    shm: Option<Job>,
    /// The hierarchical form's, when `alg` is `Hier`.
    hier: Option<(HierJob, Arc<[usize]>)>,
    /// Boxed: a task is large, and it moves between these two fields on every post of a
    /// persistent request.
    task: Option<Box<Task>>,
    /// A completed segment task kept for the next post of this (persistent) request:
    /// restarting it costs a round reservation, building one costs allocations.
    spare: Option<Box<Task>>,
    /// `None` while running (or before the first post).
    status: Option<Status>,
    posted: bool,
    /// When the running collective last made progress; `None`: just now (read the
    /// clock at the next look, so that a post or a spin that completes never reads it).
    last: Option<Instant>,
}

/// The collectives context of one worker.
pub struct Context {
    worker: Worker,
    opts: Options,
    my_addr: Vec<u8>,
    eps: HashMap<Vec<u8>, Ep>,
    ep_errors: Arc<Mutex<Vec<(Ep, Status)>>>,
    dead: HashSet<Ep>,
    teams: Vec<Option<TeamState>>,
    reqs: Vec<Option<ReqState>>,
    next_gen: u32,
    running: Vec<u32>,
    created: HashMap<u64, u32>,
    oversubscribed: bool,
    /// More members of one team on this machine's CPUs than cores (or oversubscription
    /// set; network namespaces of one machine share its CPUs): the
    /// members a wait is for may be off the cores because of this very member, so spins
    /// on the segment are short.
    crowded: bool,
    keys: KeyCache,
    /// Spare list for `progress` (so that it does not allocate each call).
    still: Vec<u32>,
    /// Counts wait rounds, so that segment collectives that complete without the worker
    /// still let it progress now and then (keepalive, other traffic).
    rounds: u32,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "coll::Context({} teams)",
            self.teams.iter().flatten().count()
        )
    }
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

fn host_of(addr: &[u8]) -> Option<u64> {
    ucp::address::WorkerAddress::decode(addr)
        .ok()
        .map(|a| a.host_id)
}

/// Cores the processes of this host share (not this process's affinity mask: ranks
/// pinned one per core are not oversubscribed).
pub fn cores() -> usize {
    ucs::sys::host::host_cpus()
}

/// True when the host already has about as many runnable tasks as cores (the 1-minute
/// load average of /proc/loadavg): ranks that spin would then take cores from others.
fn busy_host() -> bool {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .is_some_and(|l| l >= cores() as f64)
}

/// The state of a team being created through an out-of-band allgather.
pub struct TeamCreate {
    oob: Box<dyn Oob + Send>,
    phase: u8,
    lens: Vec<usize>,
}

impl std::fmt::Debug for TeamCreate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TeamCreate(phase {})", self.phase)
    }
}

impl Context {
    /// A context over `worker`, with settings from the environment.
    pub fn new(worker: Worker) -> Result<Context> {
        Self::with_options(worker, Options::from_env()?)
    }

    /// A context with explicit settings.
    pub fn with_options(mut worker: Worker, opts: Options) -> Result<Context> {
        ucs::config::register(COLL_VARS);
        // A failed collective aborts its receives at once, whatever the peers do; a split
        // rendezvous, which the sender writes into until its fin, could not be aborted.
        worker.set_rndv_split(false);
        let my_addr = worker.address();
        Ok(Context {
            worker,
            oversubscribed: opts.oversubscribed.unwrap_or(false),
            crowded: opts.oversubscribed.unwrap_or(false),
            opts,
            my_addr,
            eps: HashMap::new(),
            ep_errors: Arc::default(),
            dead: HashSet::new(),
            teams: Vec::new(),
            reqs: Vec::new(),
            next_gen: 1,
            running: Vec::new(),
            created: HashMap::new(),
            keys: KeyCache::default(),
            still: Vec::new(),
            rounds: 0,
        })
    }

    /// The worker (for the application's own traffic).
    pub fn worker(&mut self) -> &mut Worker {
        &mut self.worker
    }

    /// This worker's address (what the other members need).
    pub fn address(&self) -> &[u8] {
        &self.my_addr
    }

    /// The settings in force.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Whether collectives of this context are still running.
    pub fn busy(&self) -> bool {
        !self.running.is_empty()
    }

    /// Whether waits sleep early (ranks outnumber cores, or set so).
    pub fn is_oversubscribed(&self) -> bool {
        self.oversubscribed
    }

    /// Members of `team` that run on this member's CPUs, itself included: those on this
    /// machine in the same CPU set, whatever their network namespace (counted at team
    /// creation; more of them than cores makes waits sleep early).
    pub fn sharing_cpus(&self, team: Team) -> Result<usize> {
        Ok(self.team_ref(team)?.sharing_cpus)
    }

    // ----- teams -------------------------------------------------------------------------

    fn ep_for(&mut self, addr: &[u8]) -> Result<Ep> {
        if let Some(&e) = self.eps.get(addr) {
            return Ok(e);
        }
        let ep = self.worker.ep_create(addr)?;
        let errs = self.ep_errors.clone();
        self.worker.ep_set_err_handler(
            ep,
            Some(Box::new(move |e, s| {
                if let Ok(mut v) = errs.lock() {
                    v.push((e, s));
                }
            })),
        )?;
        // Connect now: a failed member is then noticed even by ranks that only receive
        // from it.
        self.worker.ep_connect(ep)?;
        self.eps.insert(addr.to_vec(), ep);
        Ok(ep)
    }

    /// A team of the workers at `addrs` (in rank order; the same list at every member),
    /// where this worker is `addrs[rank]`. Blocks until the members have agreed on the team's
    /// shared segments (a few messages; see `shm::setup`).
    pub fn team_create(&mut self, addrs: Vec<Vec<u8>>, rank: usize) -> Result<Team> {
        let size = addrs.len();
        if rank >= size || size > tag::MAX_RANKS || addrs[rank] != self.my_addr {
            tracing::error!("coll: team_create: this worker is not member {rank} of {size}");
            return Err(Status::InvalidParam);
        }
        // Connect in the order rank+1, rank+2, ...: the order in which the pairwise and
        // direct alltoalls meet their peers, so that a budget of connected endpoints
        // (UCX_TCP_MAX_EPS=k, the rest over udp) goes to the first k steps: the seed's
        // hybrid alltoall.
        let mut eps = vec![None; size];
        for i in 1..size {
            let q = (rank + i) % size;
            eps[q] = Some(self.ep_for(&addrs[q])?);
        }
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for a in &addrs {
            fnv(&mut h, &(a.len() as u64).to_le_bytes());
            fnv(&mut h, a);
        }
        let n = self.created.entry(h).or_insert(0);
        *n += 1;
        fnv(&mut h, &n.to_le_bytes());
        let id = ((h >> 32) ^ h) as u32 & ((1 << tag::TEAM_BITS) - 1);
        let keys = self.group_keys(&addrs);
        // Groups are numbered by their lowest rank (the leader), in rank order.
        let mut leader_ranks: Vec<usize> = Vec::new();
        let group_of: Vec<usize> = (0..size)
            .map(|r| {
                let first = (0..=r).find(|&q| keys[q] == keys[r]).unwrap_or(r);
                match leader_ranks.iter().position(|&l| l == first) {
                    Some(i) => i,
                    None => {
                        leader_ranks.push(first);
                        leader_ranks.len() - 1
                    }
                }
            })
            .collect();
        let shared_hosts = leader_ranks.len() < size;
        // Every member takes part, with or without UCX_COLL_SHM, so that a mixed
        // setting ends without segments everywhere instead of a wait for an answer.
        let group: Vec<usize> = (0..size).filter(|&r| keys[r] == keys[rank]).collect();
        let setup = shm::setup(
            &mut self.worker,
            &shm::SetupSpec {
                team_id: id,
                me: rank,
                group: &group,
                eps: &eps,
                timeout: self.opts.timeout,
                crowded: self.opts.oversubscribed.unwrap_or(group.len() > cores()),
                want: self.opts.shm,
                size,
            },
        )?;
        // Members that share this member's CPUs, in network namespaces of this machine
        // too (they count as hosts of their own for the segments, not for the CPUs).
        let local = setup.sharing_cpus;
        if self.opts.oversubscribed.is_none() && (local > cores() || busy_host()) {
            self.oversubscribed = true;
            self.crowded |= local > cores();
        }
        let shm = setup.shm;
        let leaders = leader_ranks
            .iter()
            .position(|&l| l == rank)
            .filter(|_| leader_ranks.len() > 1)
            .map(|me| {
                Arc::new(Leaders {
                    // Another id than the whole team's (nonzero xor), so the leaders'
                    // tags never meet the team's.
                    id: (id ^ 0x5_a5a5) & ((1 << tag::TEAM_BITS) - 1),
                    me,
                    eps: leader_ranks.iter().map(|&l| eps[l]).collect(),
                })
            });
        let st = TeamState {
            rank,
            size,
            id,
            seq: 0,
            eps: eps.into(),
            addrs: addrs.into(),
            dead: vec![false; size],
            failed: None,
            shm,
            group_of: group_of.into(),
            shared_hosts,
            leaders,
            sharing_cpus: local,
        };
        let slot = self.teams.iter().position(Option::is_none);
        let i = match slot {
            Some(i) => {
                self.teams[i] = Some(st);
                i
            }
            None => {
                self.teams.push(Some(st));
                self.teams.len() - 1
            }
        };
        Ok(Team(i as u32))
    }

    /// The host group key of every member: its host id (an address without one is a
    /// host of its own), cut by `host_group_size`. The group's segment is set up at team
    /// creation, blocking the members that wait for the group's first member at most
    /// the collective timeout.
    fn group_keys(&self, addrs: &[Vec<u8>]) -> Vec<(u64, usize)> {
        let hosts: Vec<u64> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| host_of(a).unwrap_or(!(i as u64)))
            .collect();
        shm::group_keys(&hosts, self.opts.host_group_size)
    }

    /// The algorithm forced for `args` on team `t`, or the topology rule of the table;
    /// `None` leaves the choice to [`crate::select()`].
    fn choose(&self, t: &TeamState, args: &Args<'_>) -> Result<Option<Alg>> {
        let local = t.all_local();
        let spans = t.shm.is_some() && !local;
        let usable = |a: Alg| match a {
            Alg::Shm => local,
            Alg::Hier => spans,
            _ => true,
        };
        if let Some(a) = args.alg.filter(|&a| !usable(a)) {
            tracing::error!("coll: {a} needs the team's segments (shm: all members on one host; hier: several hosts)");
            return Err(Status::Unsupported);
        }
        Ok(match args.alg.or(self.opts.forced.get(args.coll)) {
            // Forced through the environment where the topology does not allow it: the
            // table.
            Some(a) if !usable(a) => None,
            Some(a) => Some(a),
            None => crate::select::select_local(args.coll, local, t.shared_hosts && spans),
        })
    }

    /// The hierarchical form's description of a planned collective.
    fn hier_job(
        &self,
        t: &TeamState,
        args: &Args<'_>,
        alg: Alg,
    ) -> Result<Option<(HierJob, Arc<[usize]>)>> {
        if alg != Alg::Hier {
            return Ok(None);
        }
        let group = t.shm.as_ref().ok_or(Status::Unsupported)?;
        let spec = HierSpec {
            group,
            leaders: t.leaders.as_ref(),
            group_of: &t.group_of,
            team_size: t.size,
            radix: self.opts.radix,
        };
        Ok(Some((HierJob::new(&spec, args)?, t.group_of.clone())))
    }

    /// The segment path's description of a planned collective.
    fn job(t: &TeamState, coll: CollType, p: &crate::Plan) -> Option<Job> {
        if p.alg != Alg::Shm {
            return None;
        }
        Some(Job {
            team: t.shm.clone()?,
            coll,
            shape: Arc::new(p.shape.clone()),
            avg_over: t.size,
        })
    }

    /// Starts creating a team through an out-of-band allgather of worker addresses.
    pub fn team_create_post(&mut self, mut oob: Box<dyn Oob + Send>) -> Result<TeamCreate> {
        oob.post(&(self.my_addr.len() as u64).to_le_bytes())?;
        Ok(TeamCreate {
            oob,
            phase: 0,
            lens: Vec::new(),
        })
    }

    /// Drives a team creation: the team once it exists, else `None`.
    pub fn team_create_test(&mut self, tc: &mut TeamCreate) -> Result<Option<Team>> {
        self.progress();
        let Some(all) = tc.oob.test()? else {
            return Ok(None);
        };
        let n = tc.oob.size();
        if tc.phase == 0 {
            if all.len() != 8 * n {
                return Err(Status::InvalidParam);
            }
            tc.lens = all
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as usize)
                .collect();
            let max = tc.lens.iter().copied().max().unwrap_or(0);
            let mut mine = self.my_addr.clone();
            mine.resize(max, 0);
            tc.oob.post(&mine)?;
            tc.phase = 1;
            return Ok(None);
        }
        let max = tc.lens.iter().copied().max().unwrap_or(0);
        if all.len() != max * n {
            return Err(Status::InvalidParam);
        }
        let addrs = (0..n)
            .map(|i| all[i * max..i * max + tc.lens[i]].to_vec())
            .collect();
        self.team_create(addrs, tc.oob.rank()).map(Some)
    }

    /// Creates a team through an out-of-band allgather, blocking.
    pub fn team_create_oob(&mut self, oob: Box<dyn Oob + Send>) -> Result<Team> {
        let mut tc = self.team_create_post(oob)?;
        let deadline = Instant::now() + self.opts.timeout;
        loop {
            if let Some(t) = self.team_create_test(&mut tc)? {
                return Ok(t);
            }
            if Instant::now() > deadline {
                return Err(Status::TimedOut);
            }
            std::thread::yield_now();
        }
    }

    /// Splits `team` (MPI_Comm_split, blocking, called by every member): members with the
    /// same `color` form a new team, ordered by `key` then by rank in `team`; `None` as
    /// color joins no team.
    pub fn team_split(&mut self, team: Team, color: Option<u32>, key: i64) -> Result<Option<Team>> {
        let (rank, size, addrs) = {
            let t = self.team_ref(team)?;
            (t.rank, t.size, t.addrs.clone())
        };
        let mut mine = Vec::with_capacity(16);
        mine.extend_from_slice(&color.map_or(u64::MAX, u64::from).to_le_bytes());
        mine.extend_from_slice(&key.to_le_bytes());
        let mut all = vec![0u8; 16 * size];
        self.run(
            team,
            Args::new(CollType::Allgather)
                .src(Buffer::from_slice(&mine))
                .dst(Buffer::from_mut(&mut all))
                .count(16),
        )?;
        let Some(c) = color else { return Ok(None) };
        let mut members: Vec<(i64, usize)> = (0..size)
            .filter_map(|r| {
                let e = &all[16 * r..16 * r + 16];
                let col = u64::from_le_bytes(e[..8].try_into().unwrap_or([0; 8]));
                let k = i64::from_le_bytes(e[8..].try_into().unwrap_or([0; 8]));
                (col == u64::from(c)).then_some((k, r))
            })
            .collect();
        members.sort();
        let me = members
            .iter()
            .position(|m| m.1 == rank)
            .ok_or(Status::InvalidParam)?;
        let list = members.iter().map(|m| addrs[m.1].clone()).collect();
        self.team_create(list, me).map(Some)
    }

    fn team_ref(&self, t: Team) -> Result<&TeamState> {
        self.teams
            .get(t.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(Status::InvalidParam)
    }

    /// This rank in `team`.
    pub fn rank(&self, team: Team) -> Result<usize> {
        self.team_ref(team).map(|t| t.rank)
    }

    /// Members of `team`.
    pub fn size(&self, team: Team) -> Result<usize> {
        self.team_ref(team).map(|t| t.size)
    }

    /// Worker addresses of the members of `team`, in rank order.
    pub fn addresses(&self, team: Team) -> Result<Vec<Vec<u8>>> {
        self.team_ref(team).map(|t| t.addrs.to_vec())
    }

    /// The endpoint to member `rank` of `team` (`None` for this rank itself).
    pub fn endpoint(&self, team: Team, rank: usize) -> Result<Option<Ep>> {
        self.team_ref(team)?
            .eps
            .get(rank)
            .copied()
            .ok_or(Status::InvalidParam)
    }

    /// The failure `team` saw, if any (its collectives then fail at once).
    pub fn team_failed(&self, team: Team) -> Result<Option<Status>> {
        self.team_ref(team).map(|t| t.failed)
    }

    /// Releases `team`. Its requests must have been finalized (else `Busy`).
    pub fn team_destroy(&mut self, team: Team) -> Result<()> {
        self.team_ref(team)?;
        if self.reqs.iter().flatten().any(|r| r.team == team.0) {
            return Err(Status::Busy);
        }
        self.teams[team.0 as usize] = None;
        Ok(())
    }

    // ----- collectives -------------------------------------------------------------------

    /// Prepares a collective (checks, algorithm, schedule); [`Context::post`] starts it.
    /// The request may be posted again once complete (persistent).
    pub fn init(&mut self, team: Team, args: Args<'static>) -> Result<CollReq> {
        let t = self.team_ref(team)?;
        let forced = self.choose(t, &args)?;
        let p = plan(&args, t.rank, t.size, forced, self.opts.radix)?;
        let job = Self::job(t, args.coll, &p);
        let hier = self.hier_job(t, &args, p.alg)?;
        check_buffers(&args, &p)?;
        if p.schedule.steps.len() >= tag::MAX_STEPS {
            return Err(Status::Unsupported);
        }
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        let st = ReqState {
            gen,
            team: team.0,
            coll: args.coll,
            args,
            alg: p.alg,
            sched: Arc::new(p.schedule),
            shm: job,
            hier,
            task: None,
            spare: None,
            status: Some(Status::Ok),
            posted: false,
            last: None,
        };
        let idx = match self.reqs.iter().position(Option::is_none) {
            Some(i) => {
                self.reqs[i] = Some(st);
                i
            }
            None => {
                self.reqs.push(Some(st));
                self.reqs.len() - 1
            }
        };
        Ok(CollReq {
            idx: idx as u32,
            gen,
        })
    }

    fn req_mut(&mut self, r: CollReq) -> Result<&mut ReqState> {
        self.reqs
            .get_mut(r.idx as usize)
            .and_then(Option::as_mut)
            .filter(|s| s.gen == r.gen)
            .ok_or(Status::InvalidParam)
    }

    /// The collective of a request.
    pub fn coll_type(&mut self, r: CollReq) -> Result<CollType> {
        self.req_mut(r).map(|s| s.coll)
    }

    /// The algorithm chosen for a request.
    pub fn algorithm(&mut self, r: CollReq) -> Result<Alg> {
        self.req_mut(r).map(|s| s.alg)
    }

    /// Starts (or restarts, when persistent and complete) a collective.
    pub fn post(&mut self, r: CollReq) -> Result<()> {
        let team_idx = self.req_mut(r)?.team as usize;
        let st = self.req_mut(r)?;
        if st.status.is_none() {
            return Err(Status::Busy);
        }
        let t = self.teams[team_idx].as_mut().ok_or(Status::InvalidParam)?;
        let seq = t.seq;
        t.seq = t.seq.wrapping_add(1);
        let failed = t.failed;
        let (id, me) = (t.id, t.rank);
        // Cloned only to build a task: a reused one has them (two atomic operations less
        // per post).
        let eps = &t.eps;
        let st = self
            .reqs
            .get_mut(r.idx as usize)
            .and_then(Option::as_mut)
            .ok_or(Status::InvalidParam)?;
        st.posted = true;
        st.last = None;
        if let Some(s) = failed {
            st.status = Some(s);
            return Ok(());
        }
        let spare = st.spare.take().map(|mut t| {
            t.restart(seq);
            t
        });
        let mut task = spare.unwrap_or_else(|| {
            Box::new(Task::new(TaskSpec {
                sched: st.sched.clone(),
                dt: st.args.dt,
                op: st.args.op,
                src: st.args.src.as_ref(),
                dst: st.args.dst.as_ref(),
                team: id,
                seq,
                me,
                eps: eps.clone(),
                shm: st.shm.clone(),
                hier: st.hier.clone(),
            }))
        });
        st.status = None;
        match task.start(&mut self.worker, &mut self.keys) {
            Ok(true) => {
                st.status = Some(Status::Ok);
                st.spare = task.reusable().then_some(task);
            }
            Ok(false) => {
                st.task = Some(task);
                self.running.push(r.idx);
            }
            Err(s) => {
                st.status = Some(s);
                self.fail_task(team_idx as u32, &mut task, s, None);
            }
        }
        Ok(())
    }

    /// `Ok(true)` once the collective completed, `Ok(false)` while it runs, the error if
    /// it failed (`InvalidParam` if it was never posted). Makes progress.
    pub fn test(&mut self, r: CollReq) -> Result<bool> {
        if !self.req_mut(r)?.posted {
            return Err(Status::InvalidParam);
        }
        if self.req_mut(r)?.status.is_none() {
            self.progress();
        }
        match self.req_mut(r)?.status {
            None => Ok(false),
            Some(Status::Ok) => Ok(true),
            Some(s) => Err(s),
        }
    }

    /// Waits for a collective (see the module documentation for how it waits).
    pub fn wait(&mut self, r: CollReq) -> Result<()> {
        if !self.req_mut(r)?.posted {
            return Err(Status::InvalidParam);
        }
        let mut waiter = Waiter::new(self.oversubscribed);
        let polls = self.shm_polls();
        loop {
            let fast = self.fast_path();
            let st = self.req_mut(r)?;
            if let Some(s) = st.status {
                return if s == Status::Ok { Ok(()) } else { Err(s) };
            }
            if let Some(task) = st.task.as_mut() {
                match shm_spin(task, polls) {
                    Spin::Done if fast => {
                        // Completed on the segment alone: nothing of it is left in the
                        // worker.
                        st.spare = st.task.take().filter(|t| t.reusable());
                        st.status = Some(Status::Ok);
                        self.running.retain(|&i| i != r.idx);
                        return Ok(());
                    }
                    Spin::Idle => {}
                    _ => st.last = None,
                }
            }
            let n = self.progress();
            let st = self.req_mut(r)?;
            if let Some(s) = st.status {
                return if s == Status::Ok { Ok(()) } else { Err(s) };
            }
            let target = st.task.as_deref().and_then(shm_target);
            self.idle(&mut waiter, n, target)?;
        }
    }

    /// Releases a request and gives its arguments back. A request still running is
    /// canceled: the other members are told and fail theirs, and the team is broken.
    pub fn finalize(&mut self, r: CollReq) -> Result<Args<'static>> {
        self.req_mut(r)?;
        let mut st = self.reqs[r.idx as usize]
            .take()
            .ok_or(Status::InvalidParam)?;
        if let Some(mut t) = st.task.take() {
            // Given up while running: the other members would wait for this rank's
            // messages, so they are told, and the team is broken (as after a failure).
            t.cancel(&mut self.worker, &mut self.keys);
            let dead = &self.dead;
            t.notify_abort(&mut self.worker, |e| dead.contains(&e));
            if let Some(team) = self
                .teams
                .get_mut(st.team as usize)
                .and_then(Option::as_mut)
            {
                team.failed.get_or_insert(Status::Canceled);
            }
        }
        self.running.retain(|&i| i != r.idx);
        Ok(st.args)
    }

    /// Init, post and wait, then finalize: a blocking collective on owned buffers.
    pub fn run_owned(&mut self, team: Team, args: Args<'static>) -> Result<Args<'static>> {
        let r = self.init(team, args)?;
        self.post(r)?;
        let res = self.wait(r);
        let args = self.finalize(r)?;
        res.map(|_| args)
    }

    /// A blocking collective on any buffers (borrowed slices included); returns the
    /// algorithm used.
    pub fn run(&mut self, team: Team, args: Args<'_>) -> Result<Alg> {
        let t = self.team_ref(team)?;
        let forced = self.choose(t, &args)?;
        let p = plan(&args, t.rank, t.size, forced, self.opts.radix)?;
        let job = Self::job(t, args.coll, &p);
        let hier = self.hier_job(t, &args, p.alg)?;
        check_buffers(&args, &p)?;
        if p.schedule.steps.len() >= tag::MAX_STEPS {
            return Err(Status::Unsupported);
        }
        let t = self.teams[team.0 as usize]
            .as_mut()
            .ok_or(Status::InvalidParam)?;
        if let Some(s) = t.failed {
            return Err(s);
        }
        let seq = t.seq;
        t.seq = t.seq.wrapping_add(1);
        let mut task = Task::new(TaskSpec {
            sched: Arc::new(p.schedule),
            dt: args.dt,
            op: args.op,
            src: args.src.as_ref(),
            dst: args.dst.as_ref(),
            team: t.id,
            seq,
            me: t.rank,
            eps: t.eps.clone(),
            shm: job,
            hier,
        });
        let res = self.drive(team.0, &mut task);
        if res.is_err() {
            task.cancel(&mut self.worker, &mut self.keys);
        }
        // `args` (and the borrows in it) outlive the task: it is done or canceled here.
        drop(task);
        res.map(|_| p.alg)
    }

    fn drive(&mut self, team: u32, task: &mut Task) -> Result<()> {
        match task.start(&mut self.worker, &mut self.keys) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(s) => {
                self.fail_task(team, task, s, None);
                return Err(s);
            }
        }
        let mut waiter = Waiter::new(self.oversubscribed);
        let mut last = Instant::now();
        loop {
            match shm_spin(task, self.shm_polls()) {
                Spin::Done if self.fast_path() => return Ok(()),
                Spin::Idle => {}
                _ => last = Instant::now(),
            }
            let n = self.progress();
            let step = task.step_index();
            if let Some(res) = self.check_task(team, task, &mut last) {
                return res;
            }
            if task.step_index() != step {
                continue;
            }
            self.idle(&mut waiter, n, shm_target(task))?;
        }
    }

    /// Advances a task and checks it for failure: `Some` once it finished or failed.
    fn check_task(&mut self, team: u32, task: &mut Task, last: &mut Instant) -> Option<Result<()>> {
        // Advance first: a collective whose messages all arrived completes even if a
        // member failed right after sending them.
        let before = task.step_index();
        let err = match task.advance(&mut self.worker, &mut self.keys) {
            Ok(true) => return Some(Ok(())),
            Ok(false) if task.step_index() != before => {
                *last = Instant::now();
                None
            }
            Ok(false) if last.elapsed() > self.opts.timeout => Some(Status::TimedOut),
            Ok(false) => None,
            Err(s) => Some(s),
        };
        let (failed, lost) = match self.teams[team as usize].as_ref() {
            Some(t) => (
                t.failed,
                t.dead
                    .iter()
                    .enumerate()
                    .any(|(r, &d)| d && task.blocked_on(&self.worker, r)),
            ),
            None => (Some(Status::InvalidParam), false),
        };
        // Blocked on a member that is gone: fail on the second look, after one more
        // progress round, so that data the member sent before it left is taken first.
        let lost = lost && std::mem::replace(&mut task.lost_seen, true);
        let err = err
            .or(failed)
            .or(lost.then_some(Status::ConnectionReset))
            .or_else(|| {
                task.aborted_remotely(&self.worker).then(|| {
                    if let Some(t) = self.teams[team as usize].as_mut() {
                        t.failed = Some(Status::ConnectionReset);
                    }
                    Status::ConnectionReset
                })
            });
        let s = err?;
        self.fail_task(team, task, s, failed);
        Some(Err(s))
    }

    /// A collective failed here with `s`: it stops, the team is marked failed and the
    /// other members are told.
    fn fail_task(&mut self, team: u32, task: &mut Task, s: Status, before: Option<Status>) {
        if let Some(t) = self.teams[team as usize].as_ref() {
            let dead: Vec<usize> = (0..t.size).filter(|&r| t.dead[r]).collect();
            tracing::warn!(
                "coll: collective {} of team {:#x} failed at rank {} in step {}: {s} \
                 (members gone: {dead:?}, team failed before: {:?}, aborted by a peer: {})",
                task.seq(),
                t.id,
                t.rank,
                task.step_index(),
                before,
                task.aborted_remotely(&self.worker)
            );
        }
        if let Some(t) = self.teams[team as usize].as_mut() {
            t.failed.get_or_insert(s);
        }
        task.cancel(&mut self.worker, &mut self.keys);
        let dead = &self.dead;
        task.notify_abort(&mut self.worker, |e| dead.contains(&e));
    }

    /// Progresses the worker and every running collective; returns the events handled.
    pub fn progress(&mut self) -> usize {
        let mut n = self.worker.progress();
        let errs: Vec<(Ep, Status)> = match self.ep_errors.lock() {
            Ok(mut v) => v.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        for (ep, s) in errs {
            tracing::info!("coll: the endpoint of a team member failed ({s})");
            self.dead.insert(ep);
            for t in self.teams.iter_mut().flatten() {
                for (r, e) in t.eps.iter().enumerate() {
                    if *e == Some(ep) {
                        t.dead[r] = true;
                    }
                }
            }
            n += 1;
        }
        let mut running = std::mem::take(&mut self.running);
        let mut still = std::mem::take(&mut self.still);
        for idx in running.drain(..) {
            let Some(Some(st)) = self.reqs.get_mut(idx as usize) else {
                continue;
            };
            let (Some(mut task), team) = (st.task.take(), st.team) else {
                continue;
            };
            let before = st.last.unwrap_or_else(Instant::now);
            let mut last = before;
            let res = self.check_task(team, &mut task, &mut last);
            let Some(Some(st)) = self.reqs.get_mut(idx as usize) else {
                continue;
            };
            if last != before {
                n += 1;
            }
            st.last = Some(last);
            match res {
                None => {
                    st.task = Some(task);
                    still.push(idx);
                }
                Some(r) => {
                    n += 1;
                    st.status = Some(r.err().unwrap_or(Status::Ok));
                    if r.is_ok() && task.reusable() {
                        st.spare = Some(task);
                    }
                }
            }
        }
        still.append(&mut self.running);
        self.running = still;
        self.still = running;
        n
    }

    /// Polls of a segment collective between two progress calls.
    fn shm_polls(&self) -> u32 {
        if self.crowded {
            SHM_SPIN_CROWDED
        } else {
            SHM_SPIN
        }
    }

    /// Whether a segment collective that completed during a spin may return without a
    /// progress call of the worker: 63 rounds of 64.
    fn fast_path(&mut self) -> bool {
        self.rounds = self.rounds.wrapping_add(1);
        self.rounds % 64 != 0
    }

    /// One idle round of a wait: after the spin limit, sleep on the flag a segment
    /// collective waits for (`target`, else any running one), or on the worker's wakeup.
    fn idle(
        &mut self,
        waiter: &mut Waiter,
        events: usize,
        target: Option<(Arc<ShmTeam>, usize, u32)>,
    ) -> Result<()> {
        if !waiter.tick(events) {
            return Ok(());
        }
        let target = target.or_else(|| {
            self.running.iter().find_map(|&i| {
                let st = self.reqs.get(i as usize)?.as_ref()?;
                shm_target(st.task.as_ref()?)
            })
        });
        match target {
            // Short: the worker is progressed between sleeps (failures, other traffic).
            Some((team, j, seen)) => {
                team.seg.sleep_on(j, seen, SHM_SLEEP);
                Ok(())
            }
            None => self.worker.wait(5).map(|_| ()),
        }
    }
}

/// Longest sleep on a segment flag before the worker is progressed again.
const SHM_SLEEP: Duration = Duration::from_millis(1);

/// Polls of a segment collective between two progress calls of the worker (a progress
/// call may make system calls for the network interfaces: a flag seen late costs more).
const SHM_SPIN: u32 = 1024;

/// The same when the team's members outnumber the cores: 1024 polls take tens of µs,
/// spent while the member waited for may need this core (measured at 4 ranks on 2
/// cores: about 100 µs per 8-byte allreduce or barrier with 1024, 2–10 µs with 4–32).
const SHM_SPIN_CROWDED: u32 = 16;

/// What a spin on a segment collective saw.
enum Spin {
    Idle,
    /// It moved on, or failed (the caller's progress round takes it from here).
    Moved,
    Done,
}

/// Spins on a segment collective alone (no network progress) a little: the flag a peer
/// stores is then seen within a few cache misses.
fn shm_spin(task: &mut Task, polls: u32) -> Spin {
    if !task.flat_shm() {
        return Spin::Idle;
    }
    let before = task.step_index();
    for _ in 0..polls {
        match task.shm_advance() {
            Ok(true) => return Spin::Done,
            Ok(false) if task.step_index() == before => std::hint::spin_loop(),
            _ => return Spin::Moved,
        }
    }
    Spin::Idle
}

/// The flag a segment collective waits for: (segment, member, value seen).
fn shm_target(task: &Task) -> Option<(Arc<ShmTeam>, usize, u32)> {
    let run = task.shm()?;
    let (j, seen) = run.waiting()?;
    Some((run.team().clone(), j, seen))
}

/// Checks that destinations are writable and that in place there is no source.
fn check_buffers(args: &Args<'_>, p: &crate::Plan) -> Result<()> {
    use crate::schedule::{BufId, Comm, Local};
    let s = &p.schedule;
    // The segment paths have no schedule: they write the destination wherever the
    // collective has a result at this rank.
    let segment_writes = matches!(p.alg, Alg::Shm | Alg::Hier)
        && match args.coll {
            CollType::Barrier => false,
            CollType::Reduce | CollType::Gather | CollType::Gatherv => p.shape.rank == p.shape.root,
            // The root of a bcast only reads; the root of a scatter in place has none.
            CollType::Bcast => p.shape.rank != p.shape.root,
            CollType::Scatter | CollType::Scatterv => {
                !(args.in_place && p.shape.rank == p.shape.root)
            }
            _ => true,
        };
    let writes_dst = segment_writes
        || s.steps.iter().any(|st| {
            st.comms
                .iter()
                .any(|c| matches!(c, Comm::Recv { into, .. } if into.buf == BufId::Dst))
                || st.before.iter().chain(&st.after).any(|l| {
                    let (Local::Copy { to: r, .. }
                    | Local::Reduce { into: r, .. }
                    | Local::Scale { into: r, .. }) = l;
                    r.buf == BufId::Dst
                })
        });
    if writes_dst && !args.dst.as_ref().is_some_and(Buffer::writable) {
        tracing::error!("coll: the destination must be writable");
        return Err(Status::InvalidParam);
    }
    Ok(())
}

/// How a rank waits: spin on progress a little, then sleep on the worker's wakeup
/// descriptor (armed by `Worker::wait`) for at most a few milliseconds. Oversubscribed,
/// the spin is short (and yields), so that the ranks that have work get the cores.
struct Waiter {
    spins: u32,
    limit: u32,
    yield_between: bool,
}

impl Waiter {
    fn new(oversubscribed: bool) -> Waiter {
        Waiter {
            spins: 0,
            limit: if oversubscribed { 4 } else { 2000 },
            yield_between: oversubscribed,
        }
    }

    /// Counts an idle round; true when the caller should block now.
    fn tick(&mut self, events: usize) -> bool {
        if events > 0 {
            self.spins = 0;
            return false;
        }
        self.spins += 1;
        if self.spins >= self.limit {
            self.spins = 0;
            return true;
        }
        if self.yield_between {
            std::thread::yield_now();
        }
        false
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        for st in self.reqs.iter_mut().flatten() {
            if let Some(mut t) = st.task.take() {
                // Still running: the other members are told not to wait for us.
                t.cancel(&mut self.worker, &mut self.keys);
                let dead = &self.dead;
                t.notify_abort(&mut self.worker, |e| dead.contains(&e));
            }
        }
        // Messages of completed collectives may still sit in send buffers: let them
        // reach their peers before the worker goes (bounded: a dead peer never answers).
        if let Ok(Some(r)) = self.worker.flush_nb(None) {
            let _ = self.worker.wait_request(r, Duration::from_secs(2));
        }
    }
}

/// Blocking conveniences on byte slices.
impl Context {
    /// Barrier.
    pub fn barrier(&mut self, team: Team) -> Result<()> {
        self.run(team, Args::new(CollType::Barrier)).map(|_| ())
    }
}

// A context and its requests' arguments may move to another thread (a C caller's).
const _: fn() = || {
    fn is_send<T: Send>() {}
    is_send::<Context>();
    is_send::<Args<'static>>();
};
