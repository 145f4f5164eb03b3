//! rucx collectives over ucp: teams, nonblocking and persistent collectives, algorithms
//! as schedules, selection by table or `UCX_COLL_<NAME>_ALG`, and waits that sleep when
//! ranks outnumber cores. docs/collectives.md has the algorithms, the selection table
//! and the reserved tag space.
//!
//! ```text
//!  Context ── owns the ucp Worker, endpoints by address, teams, requests
//!     │  init(team, Args) → CollReq ── post ── test / wait ── finalize → Args (buffers back)
//!     │  run(team, Args<'_>)           (blocking, on borrowed slices)
//!  args::plan  ── Args + rank/size → Shape → alg::build → Schedule (pure)
//!  exec::Task  ── runs a Schedule over tag_send_nb / tag_recv_nb   (the only unsafe code)
//!  sim::run    ── runs every rank's Schedule in memory             (tests)
//!  shm         ── members on one host: rounds over one segment per team (or per host
//!                 group, with the network among host leaders: the hierarchical form)
//! ```
//!
//! Ordering rule (as MPI's and UCC's): the members of a team post its collectives in the
//! same order. Each collective takes the next sequence number of its team, which goes
//! into the tag of all its messages, so successive collectives never mix messages.
//!
//! `unsafe` is denied in every module but [`exec`], which hands the application's memory
//! to ucp as raw buffers, maps it for peers and reduces into it, and [`shm`], which maps
//! the team segment; their documentation states the rules that keep that sound.
//! (`forbid` is not possible: a collective on raw C memory, kept in flight across calls,
//! cannot be expressed with borrows.)

#![deny(unsafe_code)]

pub mod alg;
pub mod args;
pub mod context;
pub mod dtype;
#[allow(unsafe_code)]
pub mod exec;
pub mod schedule;
pub mod select;
pub mod shm;
pub mod sim;

pub use args::{plan, Args, Plan};
pub use context::{cores, CollReq, Context, Oob, Options, Team, TeamCreate};
pub use dtype::{DataType, Op};
pub use exec::{tag, Buffer};
pub use select::{select, Alg, CollType, COLL_VARS};
