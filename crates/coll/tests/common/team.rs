//! Teams of threads in one process, each rank with its own ucp Context and Worker, joined
//! through an in-process out-of-band allgather.

use coll::{Context, Oob, Options};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use ucp::{Config, Features, ThreadMode, Worker};

/// Rounds of allgather contributions, by round then rank.
#[derive(Default)]
pub struct Board {
    rounds: Mutex<HashMap<u64, Vec<Option<Vec<u8>>>>>,
    cv: Condvar,
}

/// An in-process out-of-band allgather.
pub struct LocalOob {
    board: Arc<Board>,
    rank: usize,
    size: usize,
    round: u64,
}

impl LocalOob {
    pub fn group(size: usize) -> Vec<LocalOob> {
        let board = Arc::new(Board::default());
        (0..size)
            .map(|rank| LocalOob {
                board: board.clone(),
                rank,
                size,
                round: 0,
            })
            .collect()
    }
}

impl Oob for LocalOob {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn post(&mut self, data: &[u8]) -> ucs::Result<()> {
        self.round += 1;
        let mut r = self.board.rounds.lock().unwrap();
        let slots = r.entry(self.round).or_insert_with(|| vec![None; self.size]);
        slots[self.rank] = Some(data.to_vec());
        self.board.cv.notify_all();
        Ok(())
    }
    fn test(&mut self) -> ucs::Result<Option<Vec<u8>>> {
        let r = self.board.rounds.lock().unwrap();
        let slots = &r[&self.round];
        if slots.iter().all(Option::is_some) {
            Ok(Some(slots.iter().flatten().flatten().copied().collect()))
        } else {
            let _ = self
                .board
                .cv
                .wait_timeout(r, std::time::Duration::from_millis(1))
                .unwrap();
            Ok(None)
        }
    }
}

/// A worker over the transport `tl`.
pub fn worker(tl: uct::Transport) -> Worker {
    worker_with(Config {
        transports: vec![tl],
        ..Config::default()
    })
}

/// A worker with configuration `cfg`.
pub fn worker_with(cfg: Config) -> Worker {
    let ctx = ucp::Context::with_config(
        Features::TAG | Features::RMA,
        cfg,
        uct::IfaceConfig::default(),
    )
    .unwrap();
    Worker::new(&ctx, ThreadMode::Single).unwrap()
}

/// Runs `f(rank, context, team)` on `p` threads that form a team over `tl`; returns the
/// results in rank order.
pub fn with_team<T: Send>(
    p: usize,
    tl: uct::Transport,
    opts: Options,
    f: impl Fn(usize, &mut Context, coll::Team) -> T + Sync,
) -> Vec<T> {
    let cfg = Config {
        transports: vec![tl],
        ..Config::default()
    };
    with_team_cfg(p, cfg, opts, f)
}

/// As [`with_team`], with a ucp configuration.
pub fn with_team_cfg<T: Send>(
    p: usize,
    cfg: Config,
    opts: Options,
    f: impl Fn(usize, &mut Context, coll::Team) -> T + Sync,
) -> Vec<T> {
    with_team_each(p, cfg, |_| opts.clone(), f)
}

/// As [`with_team_cfg`], with each rank's options from `opts(rank)`.
pub fn with_team_each<T: Send>(
    p: usize,
    cfg: Config,
    opts: impl Fn(usize) -> Options + Sync,
    f: impl Fn(usize, &mut Context, coll::Team) -> T + Sync,
) -> Vec<T> {
    let oobs = LocalOob::group(p);
    std::thread::scope(|s| {
        let hs: Vec<_> = oobs
            .into_iter()
            .map(|oob| {
                let (f, opts, cfg) = (&f, opts(oob.rank), cfg.clone());
                s.spawn(move || {
                    let rank = oob.rank;
                    let mut cx = Context::with_options(worker_with(cfg), opts).unwrap();
                    let team = cx.team_create_oob(Box::new(oob)).unwrap();
                    assert_eq!(cx.rank(team).unwrap(), rank);
                    let out = f(rank, &mut cx, team);
                    // Nobody leaves while others may still need its messages (unless the
                    // test broke the team on purpose).
                    if cx.team_failed(team).unwrap().is_none() && !cx.busy() {
                        cx.barrier(team).unwrap();
                    }
                    out
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
