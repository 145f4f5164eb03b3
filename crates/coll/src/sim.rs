//! The in-memory simulator: runs every rank's schedule of one collective without a
//! network, for tests of the algorithms (sans-IO, deterministic, fast).
//!
//! Sends copy their region into a mailbox keyed by (sender, receiver, step) when their
//! step is posted; a rank's step completes once every receive of it finds its message
//! (whose length must match). A pass over all ranks without progress is a deadlock and an
//! error; so is a message nobody received.

use crate::dtype::{DataType, Op};
use crate::schedule::{Bufs, Comm, Schedule};
use std::collections::HashMap;
use ucs::{Result, Status};

/// One rank's part: its schedule, its source bytes and its destination buffer.
pub struct Rank {
    pub schedule: Schedule,
    pub src: Vec<u8>,
    pub dst: Vec<u8>,
}

/// Runs all ranks to completion; their `dst` then hold the results.
pub fn run(ranks: &mut [Rank], dt: DataType, op: Op) -> Result<()> {
    let p = ranks.len();
    let mut tmp: Vec<Vec<u8>> = ranks
        .iter()
        .map(|r| vec![0u8; r.schedule.tmp_len])
        .collect();
    let mut step = vec![0usize; p];
    let mut posted = vec![false; p];
    let mut mail: HashMap<(usize, usize, usize), Vec<u8>> = HashMap::new();
    loop {
        let mut moved = false;
        let mut all_done = true;
        for me in 0..p {
            let Rank { schedule, src, dst } = &mut ranks[me];
            let mut b = Bufs {
                src,
                dst,
                tmp: &mut tmp[me],
            };
            while step[me] < schedule.steps.len() {
                let st = &schedule.steps[step[me]];
                if !posted[me] {
                    for l in &st.before {
                        b.apply(l, dt, op)?;
                    }
                    for c in &st.comms {
                        if let Comm::Send { peer, from } = c {
                            let key = (me, *peer, step[me]);
                            if mail.insert(key, b.read(*from).to_vec()).is_some() {
                                tracing::error!("sim: two messages {key:?}");
                                return Err(Status::InvalidParam);
                            }
                        }
                    }
                    posted[me] = true;
                    moved = true;
                }
                let ready = st.comms.iter().all(|c| match c {
                    Comm::Recv { peer, .. } => mail.contains_key(&(*peer, me, step[me])),
                    Comm::Send { .. } => true,
                });
                if !ready {
                    break;
                }
                for c in &st.comms {
                    if let Comm::Recv { peer, into } = c {
                        let m = mail.remove(&(*peer, me, step[me])).unwrap_or_default();
                        if m.len() != into.len {
                            tracing::error!(
                                "sim: rank {me} step {} expects {} bytes from {peer}, got {}",
                                step[me],
                                into.len,
                                m.len()
                            );
                            return Err(Status::MessageTruncated);
                        }
                        b.write(*into, &m)?;
                    }
                }
                for l in &st.after {
                    b.apply(l, dt, op)?;
                }
                step[me] += 1;
                posted[me] = false;
                moved = true;
            }
            all_done &= step[me] == schedule.steps.len();
        }
        if all_done {
            break;
        }
        if !moved {
            tracing::error!("sim: deadlock at steps {step:?}");
            return Err(Status::TimedOut);
        }
    }
    if !mail.is_empty() {
        tracing::error!("sim: {} messages were never received", mail.len());
        return Err(Status::InvalidParam);
    }
    Ok(())
}
