//! Completion queues: a place where operations report their completion as entries, for
//! runtimes that pre-post many operations and poll one queue instead of writing
//! callbacks.
//!
//! A [`Cq`] is a cheap handle (`Arc`) to a queue that any number of threads may poll and
//! any number of workers may report into. It is independent of every worker: polling
//! never takes a worker's lock and never blocks.
//!
//! Two ways in:
//! - A worker the queue is attached to (`Worker::cq_attach`) gets a lane of its own
//!   ([`lane`]): a ring that only that worker writes (it reports from one thread at a
//!   time), so a completion is a 48-byte record written with no read-modify-write, and
//!   a poll takes a run of records with one compare-and-swap. Up to [`MAX_LANES`] workers
//!   hold a lane at once; a worker beyond them uses the shared ring.
//! - Everything else (a queue held by the operation, active-message arrivals, entries
//!   pushed by any thread) goes through the shared ring: a bounded lock-free ring
//!   (`ArrayQueue`) that overflows into an unbounded lock-free list (`SegQueue`).
//!
//! Capacity: every lane and the shared ring hold `capacity` entries (a lane rounds it up
//! to a power of two); beyond that entries go to the ring's overflow list, which
//! allocates a block per 31 entries. A completion is never lost and never waits for a
//! consumer. [`Cq::poll`] takes the lanes first, then the shared ring, then its overflow
//! list; one consumer sees the entries of one producer (a worker's lane, or the shared
//! ring) in completion order.
//!
//! Active-message arrivals reported into a queue carry their header and data in an
//! [`AmPayload`], a buffer recycled through the queue: dropping the payload (or the entry
//! holding it, or overwriting that entry in the next poll) gives the buffer back, so a
//! steady stream of arrivals allocates nothing once the buffers have grown.
//!
//! Invariant: an entry is pushed exactly once per operation that named the queue (see
//! `Core::settle` for requests and `worker::posted` for operations completed in the call).

// The per-worker completion ring: slots written by one producer and claimed by any
// consumer, published with release/acquire (the crate's third module with `unsafe`).
#[allow(unsafe_code)]
mod lane;

use super::ids::{AmDesc, Ep};
use crossbeam_queue::{ArrayQueue, SegQueue};
use lane::{Lane, Producer};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use ucs::{Result, Status};

/// The operation an entry reports. The values are those of `rucx_cq_op_t` in C.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum CqOp {
    /// Nothing (an entry not written by a poll).
    #[default]
    None = 0,
    TagSend = 1,
    TagRecv = 2,
    AmSend = 3,
    /// An active message arrived (a handler registered with `am_set_handler_cq`).
    AmArrival = 4,
    /// The data of a rendezvous active message was received (`am_recv_data_nb`).
    AmRecvData = 5,
    StreamSend = 6,
    StreamRecv = 7,
    Put = 8,
    Get = 9,
    Atomic = 10,
    Flush = 11,
}

/// Header and data of an active message that arrived into a queue, in a buffer that goes
/// back to the queue when this is dropped.
pub struct AmPayload {
    buf: Option<Box<AmBuf>>,
    home: Arc<Inner>,
}

/// The recycled part of a payload.
struct AmBuf {
    /// Header followed by data.
    bytes: Vec<u8>,
    header_len: usize,
    id: u16,
    /// Set for a rendezvous message: the data is still at the sender, to be pulled with
    /// `am_recv_data_nb(desc, ...)` or dropped with `am_data_release(desc)`.
    rndv: Option<(AmDesc, usize)>,
}

impl AmPayload {
    fn inner(&self) -> &AmBuf {
        // Only `Drop` takes the box out.
        self.buf
            .as_deref()
            .expect("payload buffer present until drop")
    }

    /// The active-message id.
    pub fn id(&self) -> u16 {
        self.inner().id
    }

    /// The user header.
    pub fn header(&self) -> &[u8] {
        let b = self.inner();
        &b.bytes[..b.header_len]
    }

    /// The data (empty for a rendezvous message, see [`AmPayload::rndv`]).
    pub fn data(&self) -> &[u8] {
        let b = self.inner();
        &b.bytes[b.header_len..]
    }

    /// For a rendezvous message: the descriptor to pull the data with
    /// (`Worker::am_recv_data_nb`, or release it with `Worker::am_data_release`) and its
    /// length. `None` for an eager message, whose data is in [`AmPayload::data`].
    pub fn rndv(&self) -> Option<(AmDesc, usize)> {
        self.inner().rndv
    }
}

impl Drop for AmPayload {
    fn drop(&mut self) {
        if let Some(mut b) = self.buf.take() {
            b.bytes.clear();
            // A full free list means enough buffers are around: this one is freed.
            let _ = self.home.free.push(b);
        }
    }
}

impl std::fmt::Debug for AmPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.inner();
        write!(
            f,
            "AmPayload(id {}, {} header bytes, {} data bytes)",
            b.id,
            b.header_len,
            b.bytes.len() - b.header_len
        )
    }
}

/// One completion.
#[derive(Debug)]
pub struct Entry {
    /// The context the operation was started with.
    pub user: u64,
    pub op: CqOp,
    pub status: Status,
    /// Bytes: of the message sent or received (as sent: more than the buffer when the
    /// receive was truncated), of the remote access, of an arrived message's data.
    pub length: usize,
    /// The tag of a tag send, the sender's tag of a tag receive; 0 otherwise.
    pub tag: u64,
    /// The endpoint of a send, remote access or endpoint flush; the reply endpoint of an
    /// arrived active message that asked for one; `None` where no endpoint is known (a
    /// tag receive, a worker flush).
    pub ep: Option<Ep>,
    /// An arrived active message's header and data.
    pub am: Option<AmPayload>,
}

impl Default for Entry {
    fn default() -> Entry {
        Entry {
            user: 0,
            op: CqOp::None,
            status: Status::Ok,
            length: 0,
            tag: 0,
            ep: None,
            am: None,
        }
    }
}

/// An entry as a lane carries it: everything but the active-message payload (arrivals
/// never go through a lane), in 48 bytes.
struct Rec {
    user: u64,
    tag: u64,
    length: usize,
    ep: Option<Ep>,
    op: CqOp,
    status: Status,
}

const _: () = assert!(std::mem::size_of::<Rec>() <= 48);

impl Rec {
    #[inline]
    fn entry(self) -> Entry {
        Entry {
            user: self.user,
            op: self.op,
            status: self.status,
            length: self.length,
            tag: self.tag,
            ep: self.ep,
            am: None,
        }
    }
}

/// Workers that may hold a lane of one queue at the same time.
pub const MAX_LANES: usize = 16;

struct Inner {
    /// Lanes made so far: `lanes[..made]` are set.
    lanes: [OnceLock<Arc<Lane<Rec>>>; MAX_LANES],
    made: AtomicUsize,
    ring: ArrayQueue<Entry>,
    overflow: SegQueue<Entry>,
    free: ArrayQueue<Box<AmBuf>>,
}

/// A completion queue (a shared handle: clones name the same queue).
#[derive(Clone)]
pub struct Cq(Arc<Inner>);

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Cq(capacity {}, {} queued)",
            self.0.ring.capacity(),
            self.len()
        )
    }
}

/// Active-message buffers kept for reuse, at most.
const FREE_BUFS: usize = 256;

impl Cq {
    /// A queue whose ring holds `capacity` entries (at least 1) before entries overflow
    /// into the (allocating) overflow list.
    pub fn new(capacity: usize) -> Result<Cq> {
        if capacity == 0 {
            return Err(Status::InvalidParam);
        }
        Ok(Cq(Arc::new(Inner {
            lanes: std::array::from_fn(|_| OnceLock::new()),
            made: AtomicUsize::new(0),
            ring: ArrayQueue::new(capacity),
            overflow: SegQueue::new(),
            free: ArrayQueue::new(FREE_BUFS),
        })))
    }

    /// True when `other` names the same queue.
    pub fn same(&self, other: &Cq) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Capacity of the ring.
    pub fn capacity(&self) -> usize {
        self.0.ring.capacity()
    }

    /// Entries waiting (a snapshot: other threads may push or poll meanwhile).
    pub fn len(&self) -> usize {
        self.lanes().map(|l| l.len()).sum::<usize>() + self.0.ring.len() + self.0.overflow.len()
    }

    /// The lanes made so far.
    #[inline]
    fn lanes(&self) -> impl Iterator<Item = &Lane<Rec>> {
        let made = self.0.made.load(Ordering::Acquire);
        self.0.lanes[..made]
            .iter()
            .filter_map(|l| l.get().map(|l| &**l))
    }

    /// A lane for one more producer (a worker attaching the queue): a free one, or a new
    /// one while fewer than [`MAX_LANES`] exist.
    fn producer(&self) -> Option<Producer<Rec>> {
        let cap = self.0.ring.capacity();
        for (i, slot) in self.0.lanes.iter().enumerate() {
            let lane = slot.get_or_init(|| Arc::new(Lane::new(cap)));
            self.0.made.fetch_max(i + 1, Ordering::Release);
            if let Some(p) = lane.claim() {
                return Some(p);
            }
        }
        None
    }

    /// True when no entry waits (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Moves up to `out.len()` entries into `out` (overwriting, and so dropping, what was
    /// there); returns how many. Never blocks.
    #[inline]
    pub fn poll(&self, out: &mut [Entry]) -> usize {
        let mut n = 0;
        for lane in self.lanes() {
            let max = out.len() - n;
            let mut slots = out[n..].iter_mut();
            n += lane.pop_into(max, |r| {
                if let Some(o) = slots.next() {
                    *o = r.entry();
                }
            });
        }
        while n < out.len() {
            match self.0.ring.pop().or_else(|| self.0.overflow.pop()) {
                Some(e) => {
                    out[n] = e;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// Adds an entry. Entries go to the overflow list while it holds any, so a single
    /// consumer sees them in order.
    #[inline]
    pub(crate) fn push(&self, e: Entry) {
        let q = &self.0;
        let e = if q.overflow.is_empty() {
            match q.ring.push(e) {
                Ok(()) => return,
                Err(e) => e,
            }
        } else {
            e
        };
        q.overflow.push(e);
    }

    /// A payload holding `header` and `data` of active message `id`, in a recycled
    /// buffer when one is free.
    pub(crate) fn payload(
        &self,
        id: u16,
        header: &[u8],
        data: &[u8],
        rndv: Option<(AmDesc, usize)>,
    ) -> AmPayload {
        let mut b = self.0.free.pop().unwrap_or_else(|| {
            Box::new(AmBuf {
                bytes: Vec::new(),
                header_len: 0,
                id: 0,
                rndv: None,
            })
        });
        b.bytes.extend_from_slice(header);
        b.bytes.extend_from_slice(data);
        b.header_len = header.len();
        b.id = id;
        b.rndv = rndv;
        AmPayload {
            buf: Some(b),
            home: self.0.clone(),
        }
    }
}

/// A queue attached to one worker (`Worker::cq_attach`): operations of that worker name it
/// by index, so starting and completing one touches no reference count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqId {
    /// The worker's id (`Worker::uuid`): another worker refuses the handle.
    pub(crate) worker: u64,
    pub(crate) idx: u32,
}

/// A queue as a worker holds it once attached: with the worker's lane when it got one.
pub(crate) struct Attached {
    pub cq: Cq,
    lane: Option<Producer<Rec>>,
}

impl Attached {
    pub(crate) fn new(cq: &Cq) -> Attached {
        Attached {
            lane: cq.producer(),
            cq: cq.clone(),
        }
    }
}

/// Where an operation's entry goes.
#[derive(Clone, Debug)]
pub(crate) enum Dest {
    /// A queue held by the operation (an `Arc` count while it is in flight).
    Shared(Cq),
    /// A queue attached to the operation's worker (checked when the operation starts).
    Attached { idx: u32, worker: u64 },
}

/// What an operation reports into a queue: the queue, the caller's context, and the kind
/// of operation (set by the worker's API call that starts it).
#[derive(Clone, Debug)]
pub struct CqTarget {
    pub(crate) dest: Dest,
    pub(crate) user: u64,
    pub(crate) op: CqOp,
}

impl CqTarget {
    /// Reports one completion; `attached` are the queues of the worker that ran the
    /// operation.
    #[inline]
    pub(crate) fn report(
        self,
        attached: &mut [Attached],
        status: Status,
        length: usize,
        tag: u64,
        ep: Option<Ep>,
    ) {
        self.report_ref(attached, status, length, tag, ep);
    }

    /// [`CqTarget::report`] for a target that stays where it is (in a request about to be
    /// dropped in place).
    #[inline]
    pub(crate) fn report_ref(
        &self,
        attached: &mut [Attached],
        status: Status,
        length: usize,
        tag: u64,
        ep: Option<Ep>,
    ) {
        let cq = match &self.dest {
            Dest::Shared(cq) => cq,
            // Checked when the operation started; queues are never detached.
            Dest::Attached { idx, .. } => match attached.get_mut(*idx as usize) {
                Some(Attached {
                    lane: Some(lane), ..
                }) => {
                    lane.push(Rec {
                        user: self.user,
                        tag,
                        length,
                        ep,
                        op: self.op,
                        status,
                    });
                    return;
                }
                Some(a) => &a.cq,
                None => return,
            },
        };
        cq.push(Entry {
            user: self.user,
            op: self.op,
            status,
            length,
            tag,
            ep,
            am: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(user: u64) -> Entry {
        Entry {
            user,
            op: CqOp::TagSend,
            ..Default::default()
        }
    }

    #[test]
    fn overflow_keeps_order_and_loses_nothing() {
        let cq = Cq::new(4).unwrap();
        for i in 0..10 {
            cq.push(entry(i));
        }
        assert_eq!(cq.len(), 10);
        let mut out: Vec<Entry> = (0..3).map(|_| Entry::default()).collect();
        let mut seen = Vec::new();
        loop {
            let n = cq.poll(&mut out);
            if n == 0 {
                break;
            }
            seen.extend(out[..n].iter().map(|e| e.user));
            // Pushes while the overflow list is non-empty go behind it.
            if seen.len() == 3 {
                cq.push(entry(10));
            }
        }
        assert_eq!(seen, (0..11).collect::<Vec<_>>());
        assert!(cq.is_empty());
    }

    fn report(a: &mut [Attached], idx: u32, user: u64) {
        CqTarget {
            dest: Dest::Attached { idx, worker: 1 },
            user,
            op: CqOp::TagRecv,
        }
        .report(a, Status::MessageTruncated, 3, 77, Some(Ep(2, 5)));
    }

    #[test]
    fn producers_beyond_the_lanes_use_the_shared_ring_and_lanes_are_reused() {
        let cq = Cq::new(2).unwrap();
        let mut a: Vec<Attached> = (0..MAX_LANES + 1).map(|_| Attached::new(&cq)).collect();
        assert!(a[..MAX_LANES].iter().all(|x| x.lane.is_some()));
        assert!(a[MAX_LANES].lane.is_none());
        for (i, user) in (0..a.len() as u32).zip(100..) {
            // Three each: one more than a lane's ring holds.
            for k in 0..3 {
                report(&mut a, i, user * 10 + k);
            }
        }
        assert_eq!(cq.len(), 3 * (MAX_LANES + 1));
        let mut out: Vec<Entry> = (0..7).map(|_| Entry::default()).collect();
        let mut seen = Vec::new();
        loop {
            let n = cq.poll(&mut out);
            if n == 0 {
                break;
            }
            for e in &out[..n] {
                assert_eq!(
                    (e.op, e.status, e.length, e.tag, e.ep),
                    (
                        CqOp::TagRecv,
                        Status::MessageTruncated,
                        3,
                        77,
                        Some(Ep(2, 5))
                    )
                );
                seen.push(e.user);
            }
        }
        // Each producer's entries in order, every entry once.
        for user in 100..100 + a.len() as u64 {
            let mine: Vec<u64> = seen.iter().copied().filter(|u| u / 10 == user).collect();
            assert_eq!(mine, vec![user * 10, user * 10 + 1, user * 10 + 2]);
        }
        assert_eq!(seen.len(), 3 * (MAX_LANES + 1));
        // A worker that goes gives its lane back.
        a.remove(3);
        assert!(Attached::new(&cq).lane.is_some());
    }

    #[test]
    fn zero_capacity_is_refused() {
        assert_eq!(Cq::new(0).unwrap_err(), Status::InvalidParam);
    }

    #[test]
    fn payload_buffers_are_recycled() {
        let cq = Cq::new(2).unwrap();
        let p = cq.payload(7, b"hd", b"data", None);
        assert_eq!(
            (p.id(), p.header(), p.data()),
            (7, &b"hd"[..], &b"data"[..])
        );
        let addr = p.inner() as *const AmBuf;
        drop(p);
        let q = cq.payload(8, b"", b"x", None);
        assert_eq!(q.inner() as *const AmBuf, addr);
        assert_eq!((q.id(), q.header(), q.data()), (8, &b""[..], &b"x"[..]));
    }

    #[test]
    fn many_producers_and_consumers_see_each_entry_once() {
        let cq = Cq::new(64).unwrap();
        let per = 20_000u64;
        let producers: Vec<_> = (0..2)
            .map(|p| {
                let cq = cq.clone();
                std::thread::spawn(move || {
                    for i in 0..per {
                        cq.push(entry(p * per + i));
                    }
                })
            })
            .collect();
        let taken = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (cq, taken) = (cq.clone(), taken.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    let mut out: Vec<Entry> = (0..16).map(|_| Entry::default()).collect();
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                    while taken.load(std::sync::atomic::Ordering::Relaxed) < 2 * per
                        && std::time::Instant::now() < deadline
                    {
                        let n = cq.poll(&mut out);
                        got.extend(out[..n].iter().map(|e| e.user));
                        taken.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                        if n == 0 {
                            std::thread::yield_now();
                        }
                    }
                    got
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let mut all: Vec<u64> = consumers
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..2 * per).collect::<Vec<_>>());
    }
}
