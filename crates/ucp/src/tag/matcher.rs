//! Sans-IO tag matching with MPI semantics.
//!
//! The [`Matcher`] pairs posted receives (payload `R`, e.g. a request) with arriving
//! messages (payload `U`, e.g. an eager descriptor or a rendezvous header). It does no
//! I/O, knows nothing of requests or buffers, and is driven directly by the worker and by
//! tests.
//!
//! # Semantics
//!
//! A receive posted with `(want, mask)` matches a message with `tag` when
//! `tag & mask == want & mask`; a mask of `0` matches everything.
//!
//! - An arriving message is matched with the **oldest posted** receive that matches it
//!   (receives match in posting order, even when a wildcard receive competes with exact
//!   ones).
//! - A posted receive is matched with the **oldest unexpected** message that matches it
//!   (messages match in arrival order; since a transport delivers one sender's messages in
//!   sending order, that gives MPI's non-overtaking rule per sender).
//! - Probe looks at the same message a receive would take, without taking it
//!   ([`Matcher::probe`]) or taking it for a later message receive
//!   ([`Matcher::probe_remove`]).
//!
//! # Structure
//!
//! Both sides number their entries with a global, strictly increasing sequence number that
//! is never reused; the handles [`RecvId`] and [`MsgId`] are these numbers. Each side
//! keeps:
//!
//! - a **store**: a hash map from sequence number to entry (payload, tag, mask), which is
//!   the single source of truth — an entry is *live* iff its number is in the store;
//! - **order queues** (`SeqQueue`) of sequence numbers in increasing order, which only
//!   index the store.
//!
//! Posted receives with the full mask (`u64::MAX`, the usual case once MPI encodes
//! source, tag and communicator into the tag) go to a per-tag bucket; any other mask goes
//! to one wildcard queue which carries `(want, mask)` inline for scanning. An arriving
//! message looks at the head of its tag's bucket and at the wildcard queue, scanning the
//! latter only up to the bucket head's sequence number, and takes whichever matching
//! receive has the lower number. With no wildcard receives posted this is one hash lookup
//! and a queue pop.
//!
//! Unexpected messages are in one arrival-order queue (carrying the tag inline, scanned by
//! wildcard receives and wildcard probes) and in a per-tag bucket (so that a full-mask
//! receive finds its message without scanning).
//!
//! # Lazy deletion and its invariants
//!
//! Removing an entry from the middle of a queue (cancel, a wildcard match, a message taken
//! by id) would cost O(n), so the store entry is removed and the queue entry is left behind
//! as *dead*. To keep that safe and bounded, every queue maintains:
//!
//! 1. **Its front entry is live** (or the queue is empty): when the front is removed, the
//!    dead entries behind it are popped too. So the head of an exact bucket is always the
//!    oldest live entry for that tag, with no liveness check on the fast path.
//! 2. **It counts its dead entries** and compacts itself when they outnumber the live
//!    ones, so a queue never holds more than twice its live entries and the compaction
//!    is amortised O(1) per removal.
//! 3. **Scans check liveness** in the store before accepting a match. Sequence numbers are
//!    never reused, so a dead entry can never alias a newer entry: the worst a stale index
//!    entry can do is be skipped.
//!
//! Per-tag buckets that become empty are kept, so that a tag used again does not allocate;
//! but if there are more than `EMPTY_BUCKETS_KEPT` (256) of them and they are the majority,
//! they are swept, so memory follows the peak number of live entries rather than the
//! number of distinct tags ever seen.
//!
//! # Cost
//!
//! | operation                          | cost                                          |
//! |------------------------------------|-----------------------------------------------|
//! | `post`, full mask                  | O(1)                                          |
//! | `post`, other mask                 | O(unexpected messages scanned)                |
//! | `arrive`                           | O(1) + wildcard receives older than the match |
//! | `probe`/`probe_remove`, full mask  | O(1)                                          |
//! | `cancel`, `take_unexpected`        | O(1) amortised                                |
//! | `drain_posted`                     | O(n log n)                                    |
//!
//! Capacity of queues and maps is kept once reached, so steady traffic on a set of tags
//! does not allocate on the exact-match path.

use std::collections::hash_map::{Entry, HashMap, RandomState};
use std::collections::VecDeque;
use std::fmt;
use std::hash::{BuildHasher, Hasher};

/// A message tag. Matching compares `tag & mask` with `want & mask`.
pub type Tag = u64;

/// The mask that makes a receive match exactly one tag.
pub const FULL_MASK: Tag = Tag::MAX;

/// Handle of a posted receive that has not matched yet, for [`Matcher::cancel`].
///
/// Handles are never reused within one matcher, so a handle of a receive that has since
/// matched or been cancelled is simply unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvId(u64);

/// Handle of an unexpected message, for receiving it after a probe and for updating a
/// message whose fragments are still arriving.
///
/// Handles are never reused within one matcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MsgId(u64);

/// Outcome of [`Matcher::post`].
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub enum Posted<R, U> {
    /// The oldest matching unexpected message was removed and is handed back with the
    /// receive's own payload.
    Matched(MsgId, U, R),
    /// No unexpected message matched; the receive is queued.
    Queued(RecvId),
}

/// Outcome of [`Matcher::arrive`].
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub enum Arrived<R, U> {
    /// The oldest matching posted receive was removed and is handed back with the
    /// message's payload.
    Matched(RecvId, R, U),
    /// No posted receive matched; the message is stored as unexpected.
    Unexpected(MsgId),
}

/// More empty per-tag buckets than this (when they are also the majority) are swept.
///
/// Small in tests so that the property tests exercise the sweep.
const EMPTY_BUCKETS_KEPT: usize = if cfg!(test) { 4 } else { 256 };

#[inline]
fn tag_matches(tag: Tag, want: Tag, mask: Tag) -> bool {
    (tag ^ want) & mask == 0
}

/// Multiplies and folds the 128-bit product: every input bit influences the low bits,
/// which the hash table uses for its index (tags often differ only in their high bits,
/// where MPI puts the communicator).
#[inline]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Hasher state for the matcher's `u64` keys (tags and sequence numbers).
///
/// SipHash would cost more than the rest of a match; the keys are single integers, so one
/// folded multiply suffices. The seed is random per matcher so that a set of tags that
/// happens to collide does not collide in every process.
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Not used by `u64` keys; kept correct for any other key type.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = fold_mul(self.0 ^ n, 0x9e37_79b9_7f4a_7c15);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

#[derive(Clone, Copy)]
struct KeyHash {
    seed: u64,
}

impl KeyHash {
    fn new() -> Self {
        Self {
            seed: RandomState::new().hash_one(0x7461_675f_6d61_7463_u64),
        }
    }
}

impl BuildHasher for KeyHash {
    type Hasher = KeyHasher;

    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(self.seed)
    }
}

type KeyMap<V> = HashMap<u64, V, KeyHash>;

/// Sequence numbers in increasing order with lazy deletion, plus a small `Copy` key per
/// entry that scans can test without touching the store.
///
/// The queue does not know which entries are live; the owner removes an entry from its
/// store first and then calls [`SeqQueue::remove`] with a liveness test over the store.
/// Invariants (see the module docs): the front entry is live, `dead` is the number of
/// dead entries, and `dead <= live` after every call.
struct SeqQueue<K> {
    entries: VecDeque<(u64, K)>,
    dead: usize,
}

impl<K: Copy> SeqQueue<K> {
    fn new() -> Self {
        Self {
            entries: VecDeque::new(),
            dead: 0,
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The oldest live entry's sequence number.
    #[inline]
    fn front(&self) -> Option<u64> {
        self.entries.front().map(|&(seq, _)| seq)
    }

    #[inline]
    fn push(&mut self, seq: u64, key: K) {
        debug_assert!(self.entries.back().map_or(true, |&(last, _)| last < seq));
        self.entries.push_back((seq, key));
    }

    /// All entries in order, dead ones included: the caller checks liveness.
    #[inline]
    fn iter(&self) -> impl Iterator<Item = (u64, K)> + '_ {
        self.entries.iter().copied()
    }

    /// Records that `seq`, an entry of this queue, has just left the store. `live` tells
    /// whether the store still holds a sequence number.
    #[inline]
    fn remove(&mut self, seq: u64, live: impl Fn(u64) -> bool) {
        if self.front() == Some(seq) {
            // Keep invariant 1: uncover the next live entry. With no dead entry in the
            // queue the new front is live already: no store lookup on the common path.
            self.entries.pop_front();
            while let Some(&(next, _)) = self.entries.front().filter(|_| self.dead > 0) {
                if live(next) {
                    break;
                }
                self.entries.pop_front();
                debug_assert!(self.dead > 0);
                self.dead = self.dead.saturating_sub(1);
            }
        } else {
            self.dead += 1;
        }
        // Invariant 2: compact once dead entries outnumber live ones (either branch can get
        // there: the first adds a dead entry, the second removes a live one). Compaction
        // costs O(len) < O(2 * dead) and removes those dead entries for good, so each dead
        // entry pays for it at most twice over.
        if self.dead * 2 > self.entries.len() {
            self.entries.retain(|&(s, _)| live(s));
            self.dead = 0;
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.dead = 0;
    }
}

/// Per-tag [`SeqQueue`]s, keeping empty buckets for reuse up to a bound.
struct TagBuckets {
    map: HashMap<Tag, SeqQueue<()>, KeyHash>,
    /// How many buckets in `map` are empty.
    empty: usize,
}

impl TagBuckets {
    fn new(hash: KeyHash) -> Self {
        Self {
            map: HashMap::with_hasher(hash),
            empty: 0,
        }
    }

    /// The oldest live sequence number with this tag.
    #[inline]
    fn front(&self, tag: Tag) -> Option<u64> {
        self.map.get(&tag).and_then(SeqQueue::front)
    }

    #[inline]
    fn push(&mut self, tag: Tag, seq: u64) {
        let bucket = match self.map.entry(tag) {
            Entry::Occupied(e) => {
                let bucket = e.into_mut();
                if bucket.is_empty() {
                    // A kept empty bucket comes back into use.
                    self.empty -= 1;
                }
                bucket
            }
            Entry::Vacant(e) => e.insert(SeqQueue::new()),
        };
        bucket.push(seq, ());
    }

    #[inline]
    fn remove(&mut self, tag: Tag, seq: u64, live: impl Fn(u64) -> bool) {
        let Some(bucket) = self.map.get_mut(&tag) else {
            debug_assert!(false, "entry without its tag bucket");
            return;
        };
        bucket.remove(seq, live);
        if bucket.is_empty() {
            self.empty += 1;
            // Sweeping costs O(map.len()) < O(2 * empty); each empty bucket was made so by
            // one removal since the last sweep, which pays for it.
            if self.empty > EMPTY_BUCKETS_KEPT && self.empty * 2 > self.map.len() {
                self.map.retain(|_, b| !b.is_empty());
                self.empty = 0;
            }
        }
    }

    fn clear(&mut self) {
        self.map.clear();
        self.empty = 0;
    }
}

struct PostedRecv<R> {
    want: Tag,
    mask: Tag,
    payload: R,
}

struct Unexpected<U> {
    tag: Tag,
    payload: U,
}

/// The tag matcher: posted receives and unexpected messages. See the module docs.
pub struct Matcher<R, U> {
    /// Next posting sequence number, which is also the next [`RecvId`].
    next_recv: u64,
    /// Live posted receives by sequence number.
    recvs: KeyMap<PostedRecv<R>>,
    /// Full-mask receives by tag, in posting order.
    posted_exact: TagBuckets,
    /// Receives with any other mask, in posting order, with `(want, mask)` inline.
    posted_wild: SeqQueue<(Tag, Tag)>,

    /// Next arrival sequence number, which is also the next [`MsgId`].
    next_msg: u64,
    /// Live unexpected messages by sequence number.
    msgs: KeyMap<Unexpected<U>>,
    /// Unexpected messages by tag, in arrival order.
    unexp_by_tag: TagBuckets,
    /// All unexpected messages in arrival order, with their tag inline.
    unexp_order: SeqQueue<Tag>,
}

impl<R, U> Default for Matcher<R, U> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R, U> fmt::Debug for Matcher<R, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Matcher")
            .field("posted", &self.recvs.len())
            .field("unexpected", &self.msgs.len())
            .finish()
    }
}

impl<R, U> Matcher<R, U> {
    /// An empty matcher. Allocates nothing until the first entry is stored.
    pub fn new() -> Self {
        let hash = KeyHash::new();
        Self {
            next_recv: 0,
            recvs: HashMap::with_hasher(hash),
            posted_exact: TagBuckets::new(hash),
            posted_wild: SeqQueue::new(),
            next_msg: 0,
            msgs: HashMap::with_hasher(hash),
            unexp_by_tag: TagBuckets::new(hash),
            unexp_order: SeqQueue::new(),
        }
    }

    /// Posts a receive for tags `t` with `t & mask == tag & mask`.
    ///
    /// If an unexpected message matches, the oldest such one is removed and returned with
    /// `r`; otherwise the receive is queued behind all earlier ones.
    pub fn post(&mut self, tag: Tag, mask: Tag, r: R) -> Posted<R, U> {
        if let Some(seq) = self.find_unexpected(tag, mask) {
            let found = self.remove_unexpected(seq);
            debug_assert!(found.is_some(), "matched a message missing from the store");
            if let Some((_, u)) = found {
                return Posted::Matched(MsgId(seq), u, r);
            }
        }
        let seq = self.next_recv;
        self.next_recv += 1;
        if mask == FULL_MASK {
            self.posted_exact.push(tag, seq);
        } else {
            self.posted_wild.push(seq, (tag, mask));
        }
        self.recvs.insert(
            seq,
            PostedRecv {
                want: tag,
                mask,
                payload: r,
            },
        );
        Posted::Queued(RecvId(seq))
    }

    /// A message with `tag` arrives.
    ///
    /// If a posted receive matches, the oldest such one (by posting order) is removed and
    /// returned with `u`; otherwise `u` is stored as unexpected, behind all earlier
    /// messages.
    pub fn arrive(&mut self, tag: Tag, u: U) -> Arrived<R, U> {
        match self.match_posted(tag) {
            Some((id, r)) => Arrived::Matched(id, r, u),
            None => Arrived::Unexpected(self.add_unexpected(tag, u)),
        }
    }

    /// The first half of [`Matcher::arrive`]: takes the oldest posted receive that
    /// matches `tag`, if any. A caller that gets `None` must store the message with
    /// [`Matcher::add_unexpected`] before anything else arrives, or order breaks; the
    /// split lets it build the unexpected payload only when it is needed.
    #[inline]
    pub fn match_posted(&mut self, tag: Tag) -> Option<(RecvId, R)> {
        let seq = self.find_posted(tag)?;
        let found = self.remove_posted(seq);
        debug_assert!(found.is_some(), "matched a receive missing from the store");
        found.map(|p| (RecvId(seq), p.payload))
    }

    /// The second half of [`Matcher::arrive`]: stores an unexpected message behind all
    /// earlier ones.
    pub fn add_unexpected(&mut self, tag: Tag, u: U) -> MsgId {
        let seq = self.next_msg;
        self.next_msg += 1;
        self.unexp_by_tag.push(tag, seq);
        self.unexp_order.push(seq, tag);
        self.msgs.insert(seq, Unexpected { tag, payload: u });
        MsgId(seq)
    }

    /// The unexpected message that a receive posted with `(tag, mask)` would take now,
    /// without removing it.
    pub fn probe(&self, tag: Tag, mask: Tag) -> Option<(MsgId, Tag, &U)> {
        let seq = self.find_unexpected(tag, mask)?;
        let m = self.msgs.get(&seq)?;
        Some((MsgId(seq), m.tag, &m.payload))
    }

    /// Like [`Matcher::probe`], but removes the message (MPI's `mprobe`): the caller
    /// receives it later through the returned handle, and no posted receive can take it.
    pub fn probe_remove(&mut self, tag: Tag, mask: Tag) -> Option<(MsgId, Tag, U)> {
        let seq = self.find_unexpected(tag, mask)?;
        let (tag, u) = self.remove_unexpected(seq)?;
        Some((MsgId(seq), tag, u))
    }

    /// The payload of an unexpected message still stored, to update it in place (e.g. as
    /// more fragments of it arrive).
    pub fn unexpected_mut(&mut self, id: MsgId) -> Option<&mut U> {
        self.msgs.get_mut(&id.0).map(|m| &mut m.payload)
    }

    /// Removes an unexpected message by handle; `None` if it was already taken.
    pub fn take_unexpected(&mut self, id: MsgId) -> Option<(Tag, U)> {
        self.remove_unexpected(id.0)
    }

    /// Cancels a posted receive that has not matched and returns its payload; `None` if the
    /// handle is unknown, already matched or already cancelled.
    pub fn cancel(&mut self, id: RecvId) -> Option<R> {
        self.remove_posted(id.0).map(|p| p.payload)
    }

    /// Removes all unmatched receives and returns them in posting order (for destroying a
    /// worker, which completes them as cancelled). Unexpected messages are kept.
    pub fn drain_posted(&mut self) -> Vec<(RecvId, R)> {
        let mut all: Vec<(RecvId, R)> = self
            .recvs
            .drain()
            .map(|(seq, p)| (RecvId(seq), p.payload))
            .collect();
        all.sort_unstable_by_key(|(id, _)| id.0);
        self.posted_exact.clear();
        self.posted_wild.clear();
        all
    }

    /// Number of posted receives waiting for a message.
    pub fn posted_len(&self) -> usize {
        self.recvs.len()
    }

    /// Number of unexpected messages waiting for a receive.
    pub fn unexpected_len(&self) -> usize {
        self.msgs.len()
    }

    /// The oldest live posted receive matching `tag`.
    #[inline]
    fn find_posted(&self, tag: Tag) -> Option<u64> {
        let exact = self.posted_exact.front(tag);
        // A wildcard receive wins only if posted before the exact bucket's head, so the
        // scan stops there; with no wildcard receives posted this is free.
        let bound = exact.unwrap_or(u64::MAX);
        let recvs = &self.recvs;
        let wild = self
            .posted_wild
            .iter()
            .take_while(|&(seq, _)| seq < bound)
            .find(|&(seq, (want, mask))| tag_matches(tag, want, mask) && recvs.contains_key(&seq))
            .map(|(seq, _)| seq);
        wild.or(exact)
    }

    /// The oldest live unexpected message matching `(want, mask)`.
    #[inline]
    fn find_unexpected(&self, want: Tag, mask: Tag) -> Option<u64> {
        if mask == FULL_MASK {
            return self.unexp_by_tag.front(want);
        }
        let msgs = &self.msgs;
        self.unexp_order
            .iter()
            .find(|&(seq, tag)| tag_matches(tag, want, mask) && msgs.contains_key(&seq))
            .map(|(seq, _)| seq)
    }

    fn remove_posted(&mut self, seq: u64) -> Option<PostedRecv<R>> {
        // Store first, then the index, whose liveness test reads the store.
        let p = self.recvs.remove(&seq)?;
        let recvs = &self.recvs;
        let live = |s: u64| recvs.contains_key(&s);
        if p.mask == FULL_MASK {
            self.posted_exact.remove(p.want, seq, live);
        } else {
            self.posted_wild.remove(seq, live);
        }
        Some(p)
    }

    fn remove_unexpected(&mut self, seq: u64) -> Option<(Tag, U)> {
        let m = self.msgs.remove(&seq)?;
        let msgs = &self.msgs;
        let live = |s: u64| msgs.contains_key(&s);
        self.unexp_by_tag.remove(m.tag, seq, live);
        self.unexp_order.remove(seq, live);
        Some((m.tag, m.payload))
    }

    /// Checks every structural invariant; panics on violation.
    #[cfg(test)]
    fn check_invariants(&self) {
        fn check_queue<K: Copy>(q: &SeqQueue<K>, live: impl Fn(u64) -> bool) -> usize {
            let seqs: Vec<u64> = q.iter().map(|(s, _)| s).collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "queue out of order");
            if let Some(front) = q.front() {
                assert!(live(front), "dead front");
            }
            let dead = seqs.iter().filter(|&&s| !live(s)).count();
            assert_eq!(dead, q.dead, "dead count");
            assert!(dead * 2 <= seqs.len(), "too many dead entries");
            seqs.len() - dead
        }
        fn check_buckets(b: &TagBuckets, live: impl Fn(u64) -> bool + Copy) -> usize {
            let empty = b.map.values().filter(|q| q.is_empty()).count();
            assert_eq!(empty, b.empty, "empty bucket count");
            b.map.values().map(|q| check_queue(q, live)).sum()
        }

        let recv_live = |s: u64| self.recvs.contains_key(&s);
        let exact = check_buckets(&self.posted_exact, recv_live);
        let wild = check_queue(&self.posted_wild, recv_live);
        assert_eq!(exact + wild, self.recvs.len(), "posted index size");
        for (&seq, p) in &self.recvs {
            assert!(seq < self.next_recv);
            if p.mask == FULL_MASK {
                let q = &self.posted_exact.map[&p.want];
                assert!(q.iter().any(|(s, _)| s == seq), "exact receive not indexed");
            } else {
                assert!(
                    self.posted_wild
                        .iter()
                        .any(|(s, k)| s == seq && k == (p.want, p.mask)),
                    "wildcard receive not indexed"
                );
            }
        }

        let msg_live = |s: u64| self.msgs.contains_key(&s);
        assert_eq!(check_buckets(&self.unexp_by_tag, msg_live), self.msgs.len());
        assert_eq!(check_queue(&self.unexp_order, msg_live), self.msgs.len());
        for (&seq, m) in &self.msgs {
            assert!(seq < self.next_msg);
            let q = &self.unexp_by_tag.map[&m.tag];
            assert!(q.iter().any(|(s, _)| s == seq), "message not in its bucket");
            assert!(
                self.unexp_order.iter().any(|(s, t)| s == seq && t == m.tag),
                "message not in arrival order"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::sample::Index;

    type M = Matcher<u32, u32>;

    fn queued(p: Posted<u32, u32>) -> RecvId {
        match p {
            Posted::Queued(id) => id,
            other => panic!("expected Queued, got {other:?}"),
        }
    }

    fn unexpected(a: Arrived<u32, u32>) -> MsgId {
        match a {
            Arrived::Unexpected(id) => id,
            other => panic!("expected Unexpected, got {other:?}"),
        }
    }

    #[test]
    fn same_tag_receives_match_in_posting_order() {
        let mut m = M::new();
        let a = queued(m.post(7, FULL_MASK, 1));
        let b = queued(m.post(7, FULL_MASK, 2));
        assert_eq!(m.arrive(7, 10), Arrived::Matched(a, 1, 10));
        assert_eq!(m.arrive(7, 11), Arrived::Matched(b, 2, 11));
        assert_eq!(m.posted_len(), 0);
        m.check_invariants();
    }

    #[test]
    fn wildcard_posted_before_exact_wins() {
        let mut m = M::new();
        let any = queued(m.post(0, 0, 1));
        let exact = queued(m.post(7, FULL_MASK, 2));
        assert_eq!(m.arrive(7, 10), Arrived::Matched(any, 1, 10));
        assert_eq!(m.arrive(7, 11), Arrived::Matched(exact, 2, 11));
        m.check_invariants();
    }

    #[test]
    fn exact_posted_before_wildcard_wins() {
        let mut m = M::new();
        let exact = queued(m.post(7, FULL_MASK, 1));
        let any = queued(m.post(0, 0, 2));
        assert_eq!(m.arrive(7, 10), Arrived::Matched(exact, 1, 10));
        assert_eq!(m.arrive(7, 11), Arrived::Matched(any, 2, 11));
        m.check_invariants();
    }

    #[test]
    fn non_matching_wildcard_is_skipped() {
        let mut m = M::new();
        // Matches only tags with low byte 0x05.
        let low5 = queued(m.post(0x05, 0xff, 1));
        let exact = queued(m.post(0x106, FULL_MASK, 2));
        assert_eq!(m.arrive(0x106, 10), Arrived::Matched(exact, 2, 10));
        assert_eq!(m.arrive(0x205, 11), Arrived::Matched(low5, 1, 11));
        m.check_invariants();
    }

    #[test]
    fn messages_match_in_arrival_order() {
        let mut m = M::new();
        let a = unexpected(m.arrive(7, 10));
        let b = unexpected(m.arrive(8, 11));
        let c = unexpected(m.arrive(7, 12));
        // Exact receives take the oldest message with their tag.
        assert_eq!(m.post(7, FULL_MASK, 1), Posted::Matched(a, 10, 1));
        // A wildcard receive takes the oldest message of all.
        assert_eq!(m.post(0, 0, 2), Posted::Matched(b, 11, 2));
        assert_eq!(m.post(7, FULL_MASK, 3), Posted::Matched(c, 12, 3));
        assert_eq!(m.unexpected_len(), 0);
        m.check_invariants();
    }

    #[test]
    fn cancel_after_match_returns_none() {
        let mut m = M::new();
        let a = queued(m.post(7, FULL_MASK, 1));
        assert_eq!(m.arrive(7, 10), Arrived::Matched(a, 1, 10));
        assert_eq!(m.cancel(a), None);

        let b = queued(m.post(7, FULL_MASK, 2));
        assert_eq!(m.cancel(b), Some(2));
        assert_eq!(m.cancel(b), None);
        // A cancelled receive does not match.
        let id = unexpected(m.arrive(7, 11));
        assert_eq!(m.take_unexpected(id), Some((7, 11)));
        m.check_invariants();
    }

    #[test]
    fn probe_does_not_remove() {
        let mut m = M::new();
        let id = unexpected(m.arrive(7, 10));
        assert_eq!(m.probe(7, FULL_MASK), Some((id, 7, &10)));
        assert_eq!(m.probe(0, 0), Some((id, 7, &10)));
        assert_eq!(m.probe(8, FULL_MASK), None);
        assert_eq!(m.unexpected_len(), 1);
        assert_eq!(m.post(7, FULL_MASK, 1), Posted::Matched(id, 10, 1));
        m.check_invariants();
    }

    #[test]
    fn probe_remove_hides_message_from_receives() {
        let mut m = M::new();
        let id = unexpected(m.arrive(7, 10));
        assert_eq!(m.probe_remove(0, 0), Some((id, 7, 10)));
        assert_eq!(m.probe(7, FULL_MASK), None);
        assert!(matches!(m.post(7, FULL_MASK, 1), Posted::Queued(_)));
        assert_eq!(m.take_unexpected(id), None);
        m.check_invariants();
    }

    #[test]
    fn update_and_take_unexpected() {
        let mut m = M::new();
        let id = unexpected(m.arrive(7, 10));
        *m.unexpected_mut(id).unwrap() += 5;
        assert_eq!(m.probe(7, FULL_MASK), Some((id, 7, &15)));
        assert_eq!(m.take_unexpected(id), Some((7, 15)));
        assert!(m.unexpected_mut(id).is_none());
        assert_eq!(m.take_unexpected(id), None);
        m.check_invariants();
    }

    #[test]
    fn drain_posted_in_posting_order() {
        let mut m = M::new();
        let a = queued(m.post(1, FULL_MASK, 1));
        let b = queued(m.post(0, 0, 2));
        let c = queued(m.post(2, FULL_MASK, 3));
        let d = queued(m.post(1, FULL_MASK, 4));
        assert_eq!(m.cancel(c), Some(3));
        assert_eq!(m.drain_posted(), vec![(a, 1), (b, 2), (d, 4)]);
        assert_eq!(m.posted_len(), 0);
        assert_eq!(m.cancel(a), None);
        // Handles stay unique after a drain.
        let e = queued(m.post(1, FULL_MASK, 5));
        assert!(![a, b, c, d].contains(&e));
        m.check_invariants();
    }

    #[test]
    fn cancelled_entries_behind_a_long_lived_receive_stay_bounded() {
        let mut m = M::new();
        let old = queued(m.post(5, FULL_MASK, 0));
        for i in 0..10_000 {
            let id = queued(m.post(5, FULL_MASK, i));
            assert_eq!(m.cancel(id), Some(i));
        }
        assert!(m.posted_exact.map[&5].entries.len() <= 3);
        m.check_invariants();
        assert_eq!(m.arrive(5, 1), Arrived::Matched(old, 0, 1));
    }

    #[test]
    fn messages_taken_out_of_order_stay_bounded() {
        let mut m = M::new();
        let old = unexpected(m.arrive(5, 0));
        for i in 0..10_000 {
            let id = unexpected(m.arrive(6, i));
            assert_eq!(m.post(0, 0x1, 9), Posted::Matched(id, i, 9));
        }
        assert!(m.unexp_order.entries.len() <= 3);
        m.check_invariants();
        assert_eq!(m.take_unexpected(old), Some((5, 0)));
    }

    #[test]
    fn empty_buckets_are_swept() {
        let mut m = M::new();
        for t in 0..10_000u64 {
            let tag = t << 40;
            let id = queued(m.post(tag, FULL_MASK, 1));
            assert_eq!(m.arrive(tag, 2), Arrived::Matched(id, 1, 2));
            let msg = unexpected(m.arrive(tag | 1, 3));
            assert_eq!(m.post(tag | 1, FULL_MASK, 4), Posted::Matched(msg, 3, 4));
        }
        assert!(m.posted_exact.map.len() <= 2 * EMPTY_BUCKETS_KEPT + 2);
        assert!(m.unexp_by_tag.map.len() <= 2 * EMPTY_BUCKETS_KEPT + 2);
        m.check_invariants();
    }

    #[test]
    fn exact_fast_path_reuses_buckets() {
        let mut m = M::new();
        for i in 0..1000 {
            let id = queued(m.post(3, FULL_MASK, i));
            assert_eq!(m.arrive(3, i), Arrived::Matched(id, i, i));
            let msg = unexpected(m.arrive(4, i));
            assert_eq!(m.post(4, FULL_MASK, i), Posted::Matched(msg, i, i));
        }
        assert_eq!(m.posted_exact.map.len(), 1);
        assert_eq!(m.unexp_by_tag.map.len(), 1);
        m.check_invariants();
    }

    // ---- property test against a linear-scan reference model ----

    #[derive(Clone, Debug)]
    enum Op {
        Post { tag: usize, mask: usize },
        Arrive { tag: usize },
        Probe { tag: usize, mask: usize },
        ProbeRemove { tag: usize, mask: usize },
        Cancel(Index),
        Take(Index),
        Update(Index),
    }

    /// Tags that differ in low bits, high bits and both, so that the partial masks below
    /// group them in different ways.
    const TAGS: [Tag; 8] = [
        0,
        1,
        2,
        0x11,
        0x8000_0000_0000_0000,
        0x8000_0000_0000_0001,
        0x4000_0000_0000_0011,
        0xffff_ffff_ffff_ffff,
    ];

    /// Full mask weighted as the common case; 0 is MPI_ANY_TAG-and-source.
    const MASKS: [Tag; 9] = [
        FULL_MASK,
        FULL_MASK,
        FULL_MASK,
        0,
        1,
        0xf,
        !0xf,
        0x8000_0000_0000_0000,
        !1,
    ];

    fn ops(n_tags: usize, max_len: usize) -> impl Strategy<Value = Vec<Op>> {
        let tag = 0..n_tags;
        let mask = 0..MASKS.len();
        let op = prop_oneof![
            4 => (tag.clone(), mask.clone()).prop_map(|(tag, mask)| Op::Post { tag, mask }),
            4 => tag.clone().prop_map(|tag| Op::Arrive { tag }),
            1 => (tag.clone(), mask.clone()).prop_map(|(tag, mask)| Op::Probe { tag, mask }),
            1 => (tag, mask).prop_map(|(tag, mask)| Op::ProbeRemove { tag, mask }),
            1 => any::<Index>().prop_map(Op::Cancel),
            1 => any::<Index>().prop_map(Op::Take),
            1 => any::<Index>().prop_map(Op::Update),
        ];
        prop::collection::vec(op, 0..max_len)
    }

    /// Runs `ops` on a matcher and on the reference model, comparing every result.
    fn run(ops: &[Op], tag_of: impl Fn(usize) -> Tag) -> Result<(), TestCaseError> {
        let mut m = M::new();
        // Reference: plain vectors in posting / arrival order, matched by linear scan.
        let mut posted: Vec<(RecvId, Tag, Tag, u32)> = Vec::new();
        let mut unexp: Vec<(MsgId, Tag, u32)> = Vec::new();
        // Every handle ever returned, to cancel / take stale ones too.
        let mut recv_ids: Vec<RecvId> = Vec::new();
        let mut msg_ids: Vec<MsgId> = Vec::new();
        let mut next_payload = 0u32;
        let mut fresh = || {
            next_payload += 1;
            next_payload
        };

        for op in ops {
            match *op {
                Op::Post { tag, mask } => {
                    let (tag, mask) = (tag_of(tag), MASKS[mask]);
                    let r = fresh();
                    let want = unexp
                        .iter()
                        .position(|&(_, t, _)| tag_matches(t, tag, mask));
                    match (m.post(tag, mask, r), want) {
                        (Posted::Matched(id, u, r2), Some(i)) => {
                            let (eid, _, eu) = unexp.remove(i);
                            prop_assert_eq!((id, u, r2), (eid, eu, r));
                        }
                        (Posted::Queued(id), None) => {
                            prop_assert!(!recv_ids.contains(&id), "RecvId reused");
                            recv_ids.push(id);
                            posted.push((id, tag, mask, r));
                        }
                        (got, want) => {
                            prop_assert!(false, "post: got {:?}, model {:?}", got, want)
                        }
                    }
                }
                Op::Arrive { tag } => {
                    let tag = tag_of(tag);
                    let u = fresh();
                    let want = posted
                        .iter()
                        .position(|&(_, w, mask, _)| tag_matches(tag, w, mask));
                    match (m.arrive(tag, u), want) {
                        (Arrived::Matched(id, r, u2), Some(i)) => {
                            let (eid, _, _, er) = posted.remove(i);
                            prop_assert_eq!((id, r, u2), (eid, er, u));
                        }
                        (Arrived::Unexpected(id), None) => {
                            prop_assert!(!msg_ids.contains(&id), "MsgId reused");
                            msg_ids.push(id);
                            unexp.push((id, tag, u));
                        }
                        (got, want) => {
                            prop_assert!(false, "arrive: got {:?}, model {:?}", got, want)
                        }
                    }
                }
                Op::Probe { tag, mask } => {
                    let (tag, mask) = (tag_of(tag), MASKS[mask]);
                    let want = unexp.iter().find(|&&(_, t, _)| tag_matches(t, tag, mask));
                    let got = m.probe(tag, mask).map(|(id, t, &u)| (id, t, u));
                    prop_assert_eq!(got, want.copied());
                }
                Op::ProbeRemove { tag, mask } => {
                    let (tag, mask) = (tag_of(tag), MASKS[mask]);
                    let want = unexp
                        .iter()
                        .position(|&(_, t, _)| tag_matches(t, tag, mask))
                        .map(|i| unexp.remove(i));
                    prop_assert_eq!(m.probe_remove(tag, mask), want);
                }
                Op::Cancel(pick) => {
                    if recv_ids.is_empty() {
                        continue;
                    }
                    let id = recv_ids[pick.index(recv_ids.len())];
                    let want = posted
                        .iter()
                        .position(|&(pid, ..)| pid == id)
                        .map(|i| posted.remove(i).3);
                    prop_assert_eq!(m.cancel(id), want);
                }
                Op::Take(pick) => {
                    if msg_ids.is_empty() {
                        continue;
                    }
                    let id = msg_ids[pick.index(msg_ids.len())];
                    let want = unexp
                        .iter()
                        .position(|&(mid, ..)| mid == id)
                        .map(|i| unexp.remove(i))
                        .map(|(_, t, u)| (t, u));
                    prop_assert_eq!(m.take_unexpected(id), want);
                }
                Op::Update(pick) => {
                    if msg_ids.is_empty() {
                        continue;
                    }
                    let id = msg_ids[pick.index(msg_ids.len())];
                    let new = fresh();
                    let want = unexp.iter_mut().find(|(mid, ..)| *mid == id);
                    match (m.unexpected_mut(id), want) {
                        (Some(u), Some(e)) => {
                            prop_assert_eq!(*u, e.2);
                            *u = new;
                            e.2 = new;
                        }
                        (None, None) => {}
                        (got, want) => {
                            prop_assert!(false, "unexpected_mut: got {:?}, model {:?}", got, want)
                        }
                    }
                }
            }
            prop_assert_eq!(m.posted_len(), posted.len());
            prop_assert_eq!(m.unexpected_len(), unexp.len());
            m.check_invariants();
        }

        let want: Vec<(RecvId, u32)> = posted.iter().map(|&(id, _, _, r)| (id, r)).collect();
        prop_assert_eq!(m.drain_posted(), want);
        prop_assert_eq!(m.posted_len(), 0);
        m.check_invariants();
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Few tags, many masks: wildcard and exact receives compete constantly.
        #[test]
        fn matches_reference_model(ops in ops(TAGS.len(), 200)) {
            run(&ops, |i| TAGS[i])?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Many tags, mostly exact: buckets come and go, so their reuse and sweeping is
        /// exercised.
        #[test]
        fn matches_reference_model_many_tags(ops in ops(64, 600)) {
            // Spread the index over high and low bits, as MPI's tag encoding does.
            run(&ops, |i| ((i as u64 % 8) << 60) | (i as u64 / 8))?;
        }
    }
}
