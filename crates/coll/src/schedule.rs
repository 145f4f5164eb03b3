//! Schedules: what one rank does in one collective, as data.
//!
//! An algorithm is a pure function from the shape of a collective (rank, team size, sizes,
//! root, in place or not) to a [`Schedule`]: a list of [`Step`]s, each a set of sends and
//! receives that run concurrently between local copies and reductions. Nothing here
//! touches the network: the executor in [`crate::exec`] runs a schedule over ucp, and
//! [`crate::sim`] runs every rank's schedule in memory (the sans-IO test driver).
//!
//! Rules every builder keeps (the simulator checks them):
//! - the message from rank `a` to rank `b` in step `s` is unique (so the tag, which holds
//!   the collective's sequence number, the step and the sender, names it);
//! - a step's receive regions overlap neither each other nor the step's send regions, and
//!   its local operations run only when all its transfers completed;
//! - both sides agree on the length of every message.

use crate::dtype::{self, DataType, Op};
use ucs::{Result, Status};

/// The buffers a schedule addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufId {
    /// The caller's source buffer (absent in place).
    Src,
    /// The caller's destination buffer.
    Dst,
    /// Scratch memory of the collective, `Schedule::tmp_len` bytes.
    Tmp,
}

/// A byte range of one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub buf: BufId,
    pub off: usize,
    pub len: usize,
}

impl Region {
    pub const fn new(buf: BufId, off: usize, len: usize) -> Region {
        Region { buf, off, len }
    }

    /// True when the two ranges share a byte.
    pub fn overlaps(&self, o: &Region) -> bool {
        self.buf == o.buf
            && self.len > 0
            && o.len > 0
            && self.off < o.off + o.len
            && o.off < self.off + self.len
    }
}

/// A transfer with a peer (a team rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comm {
    Send {
        peer: usize,
        from: Region,
    },
    Recv {
        peer: usize,
        into: Region,
    },
    /// Sends this rank's destination buffer's address and remote key (zero-copy RMA).
    SendKey {
        peer: usize,
    },
    /// Receives the peer's destination address and key.
    RecvKey {
        peer: usize,
    },
    /// Writes `from` into the peer's destination buffer at byte `remote_off` (its key
    /// arrived in an earlier step); the step completes when the data is in place.
    Put {
        peer: usize,
        from: Region,
        remote_off: usize,
    },
}

impl Comm {
    /// The peer of the transfer.
    pub fn peer(&self) -> usize {
        match *self {
            Comm::Send { peer, .. }
            | Comm::Recv { peer, .. }
            | Comm::SendKey { peer }
            | Comm::RecvKey { peer }
            | Comm::Put { peer, .. } => peer,
        }
    }

    /// Whether the transfer is a tagged send (`Some(true)`), receive (`Some(false)`).
    fn tagged(&self) -> Option<bool> {
        match self {
            Comm::Send { .. } | Comm::SendKey { .. } => Some(true),
            Comm::Recv { .. } | Comm::RecvKey { .. } => Some(false),
            Comm::Put { .. } => None,
        }
    }

    /// The local region read or written.
    fn region(&self) -> Option<&Region> {
        match self {
            Comm::Send { from, .. } | Comm::Put { from, .. } => Some(from),
            Comm::Recv { into, .. } => Some(into),
            _ => None,
        }
    }
}

/// A local operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    Copy {
        from: Region,
        to: Region,
    },
    /// `into = op(into, from)`, element-wise.
    Reduce {
        from: Region,
        into: Region,
    },
    /// `into /= by`, element-wise (the end of an average).
    Scale {
        into: Region,
        by: usize,
    },
}

/// One step: local work, then transfers that run concurrently, then local work.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    pub before: Vec<Local>,
    pub comms: Vec<Comm>,
    pub after: Vec<Local>,
}

/// What one rank does in one collective.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    pub steps: Vec<Step>,
    /// Bytes of scratch memory (`BufId::Tmp`).
    pub tmp_len: usize,
}

impl Schedule {
    /// An empty schedule with `tmp_len` bytes of scratch memory.
    pub fn new(tmp_len: usize) -> Schedule {
        Schedule {
            steps: Vec::new(),
            tmp_len,
        }
    }

    /// The step with index `i`, created (with the ones before it) when missing: builders
    /// number steps globally, so that both sides of a message use the same index.
    pub fn step(&mut self, i: usize) -> &mut Step {
        while self.steps.len() <= i {
            self.steps.push(Step::default());
        }
        &mut self.steps[i]
    }

    /// Appends a step; returns its index.
    pub fn push(&mut self, s: Step) -> usize {
        self.steps.push(s);
        self.steps.len() - 1
    }

    pub fn send(&mut self, step: usize, peer: usize, from: Region) {
        self.step(step).comms.push(Comm::Send { peer, from });
    }

    pub fn comm(&mut self, step: usize, c: Comm) {
        self.step(step).comms.push(c);
    }

    pub fn recv(&mut self, step: usize, peer: usize, into: Region) {
        self.step(step).comms.push(Comm::Recv { peer, into });
    }

    /// A copy run before the transfers of `step` (skipped when empty or a no-op).
    pub fn copy_before(&mut self, step: usize, from: Region, to: Region) {
        if from.len > 0 && from != to {
            self.step(step).before.push(Local::Copy { from, to });
        }
    }

    /// A copy run after the transfers of `step`.
    pub fn copy_after(&mut self, step: usize, from: Region, to: Region) {
        if from.len > 0 && from != to {
            self.step(step).after.push(Local::Copy { from, to });
        }
    }

    /// A reduction run after the transfers of `step`.
    pub fn reduce_after(&mut self, step: usize, from: Region, into: Region) {
        if from.len > 0 {
            self.step(step).after.push(Local::Reduce { from, into });
        }
    }

    /// Checks the rules of the module documentation that one rank can check alone:
    /// regions inside their buffers, no overlapping transfers in a step, one message per
    /// peer and direction in a step, no transfer with oneself.
    pub fn validate(&self, me: usize, src_len: usize, dst_len: usize) -> Result<()> {
        let inside = |r: &Region| {
            let cap = match r.buf {
                BufId::Src => src_len,
                BufId::Dst => dst_len,
                BufId::Tmp => self.tmp_len,
            };
            r.off.checked_add(r.len).is_some_and(|e| e <= cap) || r.len == 0
        };
        let bad = |what: &str| {
            tracing::error!("coll: invalid schedule: {what}");
            Err(Status::InvalidParam)
        };
        for (i, s) in self.steps.iter().enumerate() {
            for l in s.before.iter().chain(&s.after) {
                let (from, into) = match l {
                    Local::Copy { from, to } => (from, to),
                    Local::Reduce { from, into } => (from, into),
                    Local::Scale { into, .. } => (into, into),
                };
                if let Local::Scale { into, .. } = l {
                    if !inside(into) || into.buf == BufId::Src {
                        return bad(&format!("step {i}: local {l:?}"));
                    }
                    continue;
                }
                if !inside(from) || !inside(into) || from.len != into.len {
                    return bad(&format!("step {i}: local {l:?}"));
                }
                if from.overlaps(into) || into.buf == BufId::Src {
                    return bad(&format!("step {i}: overlapping local {l:?}"));
                }
            }
            for (j, c) in s.comms.iter().enumerate() {
                let peer = c.peer();
                let into_src = matches!(c, Comm::Recv { into, .. } if into.buf == BufId::Src);
                if c.region().is_some_and(|r| !inside(r)) || peer == me || into_src {
                    return bad(&format!("step {i}: {c:?}"));
                }
                let writes = |c: &Comm| matches!(c, Comm::Recv { .. });
                for d in &s.comms[..j] {
                    let same_msg =
                        c.tagged().is_some() && c.tagged() == d.tagged() && peer == d.peer();
                    let overlap = match (c.region(), d.region()) {
                        (Some(x), Some(y)) => (writes(c) || writes(d)) && x.overlaps(y),
                        _ => false,
                    };
                    if same_msg || overlap {
                        return bad(&format!("step {i}: {c:?} clashes with {d:?}"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// The three buffers of a running collective, as slices for local work.
pub struct Bufs<'a> {
    pub src: &'a [u8],
    pub dst: &'a mut [u8],
    pub tmp: &'a mut [u8],
}

impl Bufs<'_> {
    fn get_mut(&mut self, b: BufId) -> Result<&mut [u8]> {
        match b {
            BufId::Src => Err(Status::InvalidParam),
            BufId::Dst => Ok(self.dst),
            BufId::Tmp => Ok(self.tmp),
        }
    }

    /// Two non-overlapping ranges (validated): the first read, the second written.
    fn pair(&mut self, a: Region, b: Region) -> Result<(&[u8], &mut [u8])> {
        let (ar, br) = (a.off..a.off + a.len, b.off..b.off + b.len);
        match (a.buf, b.buf) {
            (_, BufId::Src) => Err(Status::InvalidParam),
            (BufId::Src, _) => {
                let src: &[u8] = self.src;
                Ok((&src[ar], &mut self.get_mut(b.buf)?[br]))
            }
            (BufId::Dst, BufId::Tmp) => Ok((&self.dst[ar], &mut self.tmp[br])),
            (BufId::Tmp, BufId::Dst) => Ok((&self.tmp[ar], &mut self.dst[br])),
            (x, _) => {
                let buf = self.get_mut(x)?;
                if a.off < b.off {
                    let (lo, hi) = buf.split_at_mut(b.off);
                    Ok((&lo[ar], &mut hi[..b.len]))
                } else {
                    let (lo, hi) = buf.split_at_mut(a.off);
                    Ok((&hi[..a.len], &mut lo[br]))
                }
            }
        }
    }

    /// The bytes of a region.
    pub fn read(&self, r: Region) -> &[u8] {
        let b: &[u8] = match r.buf {
            BufId::Src => self.src,
            BufId::Dst => self.dst,
            BufId::Tmp => self.tmp,
        };
        &b[r.off..r.off + r.len]
    }

    /// Writes `data` (of the region's length) into a region of `Dst` or `Tmp`.
    pub fn write(&mut self, r: Region, data: &[u8]) -> Result<()> {
        if data.len() != r.len {
            return Err(Status::MessageTruncated);
        }
        self.get_mut(r.buf)?[r.off..r.off + r.len].copy_from_slice(data);
        Ok(())
    }

    /// Runs one local operation (regions were validated).
    pub fn apply(&mut self, l: &Local, dt: DataType, op: Op) -> Result<()> {
        match *l {
            Local::Copy { from, to } => {
                let (f, t) = self.pair(from, to)?;
                t.copy_from_slice(f);
                Ok(())
            }
            Local::Reduce { from, into } => {
                let (f, t) = self.pair(from, into)?;
                dtype::reduce(dt, op, t, f)
            }
            Local::Scale { into, by } => {
                let b = self.get_mut(into.buf)?;
                dtype::scale(dt, &mut b[into.off..into.off + into.len], by)
            }
        }
    }
}

/// Byte ranges of `p` blocks that split `n` elements of `esize` bytes as evenly as
/// possible (the first `n % p` blocks one element longer).
pub fn even_blocks(n: usize, p: usize, esize: usize) -> Vec<(usize, usize)> {
    let (q, r) = (n / p, n % p);
    let mut off = 0;
    (0..p)
        .map(|i| {
            let len = (q + usize::from(i < r)) * esize;
            let b = (off, len);
            off += len;
            b
        })
        .collect()
}

/// Byte ranges of blocks of `counts[i]` elements laid out back to back.
pub fn packed_blocks(counts: &[usize], esize: usize) -> Vec<(usize, usize)> {
    let mut off = 0;
    counts
        .iter()
        .map(|&c| {
            let b = (off, c * esize);
            off += c * esize;
            b
        })
        .collect()
}
