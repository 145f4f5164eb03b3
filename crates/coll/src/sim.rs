//! The in-memory simulator: runs every rank's schedule of one collective without a
//! network, for tests of the algorithms (sans-IO, deterministic, fast).
//!
//! Sends copy their region into a mailbox keyed by (sender, receiver, step) when their
//! step is posted; a rank's step completes once every receive of it finds its message
//! (whose length must match). A pass over all ranks without progress is a deadlock and an
//! error; so is a message nobody received. Zero-copy puts write into the target's
//! destination when their step is posted (the target exposed it in an earlier step by
//! sending its key, which the putter had to receive first).

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
    let mut puts: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    loop {
        let mut moved = false;
        let mut all_done = true;
        for me in 0..p {
            for (peer, off, data) in puts.drain(..) {
                let d = &mut ranks[peer].dst;
                if off + data.len() > d.len() {
                    tracing::error!("sim: a put beyond the destination of {peer}");
                    return Err(Status::InvalidParam);
                }
                d[off..off + data.len()].copy_from_slice(&data);
            }
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
                        let msg = match c {
                            Comm::Send { from, .. } => b.read(*from).to_vec(),
                            Comm::SendKey { .. } => Vec::new(),
                            Comm::Put {
                                peer,
                                from,
                                remote_off,
                            } => {
                                puts.push((*peer, *remote_off, b.read(*from).to_vec()));
                                continue;
                            }
                            _ => continue,
                        };
                        let key = (me, c.peer(), step[me]);
                        if mail.insert(key, msg).is_some() {
                            tracing::error!("sim: two messages {key:?}");
                            return Err(Status::InvalidParam);
                        }
                    }
                    posted[me] = true;
                    moved = true;
                }
                let ready = st.comms.iter().all(|c| match c {
                    Comm::Recv { peer, .. } | Comm::RecvKey { peer } => {
                        mail.contains_key(&(*peer, me, step[me]))
                    }
                    _ => true,
                });
                if !ready {
                    break;
                }
                for c in &st.comms {
                    if let Comm::RecvKey { peer } = c {
                        mail.remove(&(*peer, me, step[me]));
                    }
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
        if all_done && puts.is_empty() {
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
