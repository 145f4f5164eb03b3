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
//! Receives and messages are numbered by two counters (their *sequence numbers*), which
//! only grow, so a number is never reused. A handle ([`RecvId`], [`MsgId`]) is the
//! sequence number together with the tag, which names the bucket the entry lives in.
//!
//! The entries themselves live in **buckets, one per tag**, found through one hash map
//! from tag to the bucket's slot in a vector. The slot of the tag looked up last is
//! remembered, so a tag used again and again (a ping-pong, a loop on one communicator)
//! finds its bucket without hashing. A bucket holds, in two queues sorted by sequence
//! number and with the payloads inline,
//!
//! - the receives posted for exactly that tag (full mask, [`FULL_MASK`], the usual case
//!   once MPI packs source, tag and communicator into the tag), oldest first, and
//! - the unexpected messages that carry that tag, oldest first.
//!
//! Each queue is a `SeqQueue` (module `seq_queue`): its first entry lives in the
//! bucket itself, so a tag with one receive or one message waiting at a time (the steady
//! state of a ping-pong or a rate loop) posts and matches without ring arithmetic.
//!
//! There is no second map beside the buckets: finding the bucket is finding the entry, so
//! an exact receive, an arriving message and the match between them each cost at most
//! one lookup.
//!
//! Order across buckets matters in two places only, and each has its own queue:
//!
//! - **Wildcard receives** (any mask but the full one) wait in one queue in posting order,
//!   each as `(seq, want, mask, payload)`. A message takes the older of its bucket's first
//!   receive and the first matching wildcard receive, so it scans the wildcard queue only
//!   as far as the bucket head's sequence number, and not at all when the queue is empty.
//! - **Arrival order** of unexpected messages, for wildcard receives and probes: a queue of
//!   `(seq, tag)` for every unexpected message, payloads staying in the buckets. The first
//!   entry that matches is the oldest matching message, and it is always the *head* of its
//!   bucket (all messages of a bucket have the same tag, so an older one in the same bucket
//!   would have matched first): taking it is one lookup and a pop.
//!
//! # Invariants
//!
//! 1. Every queue is sorted by strictly increasing sequence number, which is what lets a
//!    handle find its entry by binary search and lets the wildcard scan stop early.
//! 2. No posted receive matches an unexpected message: every operation matches before it
//!    stores. In particular a bucket never holds receives and messages at the same time.
//!    (This relies on callers of [`Matcher::match_posted`] following it with
//!    [`Matcher::add_unexpected`], as documented there.)
//! 3. Buckets and the wildcard queue remove entries for real, so they hold no dead
//!    entries. The arrival queue is the one place with lazy deletion: when a message that
//!    is not the oldest of all leaves its bucket (taken by an exact receive or probe, by
//!    `take_unexpected`, or by a wildcard receive that skipped older messages), its
//!    arrival entry is marked dead in place, found by binary search or already known from
//!    the scan — never through the map. The queue keeps its front live (dead entries reaching the front
//!    are popped) and compacts itself when dead entries outnumber live ones, so it never
//!    holds more than twice the unexpected messages, at an amortised O(1) per removal.
//! 4. A bucket that becomes empty is kept, so that a tag used again neither hashes into a
//!    new slot nor allocates its queues anew; but once more than `EMPTY_BUCKETS_KEPT`
//!    (256) buckets are empty and they are the majority, the empty ones are swept, so the
//!    number of buckets follows the peak number of live entries rather than the number of
//!    tags ever seen. A swept bucket's slot is emptied (its queues' memory freed) and
//!    waits for the next new tag; the remembered slot is forgotten.
//! 5. Every slot is either named by exactly one tag in the index or free, and the
//!    remembered `(tag, slot)` pair, when there is one, is in the index.
//!
//! # Cost
//!
//! `w` is the number of wildcard receives scanned (none when none is posted; otherwise
//! those posted before the match, or all of them), `u` the number of unexpected messages,
//! `b` the length of one bucket or of the wildcard queue. "Lookups" are hash-map lookups,
//! none when the tag is the one looked up last; everything else is work on queues that
//! are already at hand.
//!
//! | operation                           | lookups       | other work                      |
//! |-------------------------------------|---------------|---------------------------------|
//! | `post`, full mask                   | 1             | O(1); + O(log u) when it takes a message that is not the oldest of all |
//! | `post`, other mask                  | 1 if it takes a message, else 0 | scan of the arrival order up to the match |
//! | `arrive`                            | 1             | O(1) + O(w)                     |
//! | `match_posted`                      | 1, or 0 when nothing is posted | O(1) + O(w)    |
//! | `add_unexpected`                    | 1             | O(1)                            |
//! | `probe`/`probe_remove`, full mask   | 1, or 0 when nothing is unexpected | O(1); removal as `post` |
//! | `probe`/`probe_remove`, other mask  | 1 if found    | scan as `post`                  |
//! | `unexpected_mut`                    | 1             | O(1) for the newest or oldest message of its tag, else O(log b) |
//! | `cancel`                            | 1, or 0 for a wildcard receive | O(log b) search + O(b) removal |
//! | `take_unexpected`                   | 1             | O(b) removal + O(log u)         |
//! | `drain_posted`                      | none          | O(buckets + n log n)            |
//!
//! The arrival queue's compaction and the sweep of empty buckets add an amortised O(1) to
//! the removals that trigger them.
//!
//! # Memory
//!
//! No queue shrinks, and an empty bucket is kept with its queues, so steady traffic on a
//! set of tags neither allocates nor frees. The price is that a bucket holds on to the
//! capacity of its tag's peak until it is swept; the number of buckets is bounded as
//! invariant 4 says, and no queue holds dead entries beyond invariant 3's bound.

use crate::seq_queue::SeqQueue;
use std::collections::hash_map::{HashMap, RandomState};
use std::collections::VecDeque;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use ucs::Removal;

/// A message tag. Matching compares `tag & mask` with `want & mask`.
pub type Tag = u64;

/// The mask that makes a receive match exactly one tag.
pub const FULL_MASK: Tag = Tag::MAX;

/// Handle of a posted receive that has not matched yet, for [`Matcher::cancel`].
///
/// Handles are never reused within one matcher, so a handle of a receive that has since
/// matched or been cancelled is simply unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvId {
    /// Posting sequence number, unique within the matcher.
    seq: u64,
    /// The tag the receive was posted with: its bucket if it has the full mask.
    tag: Tag,
}

impl RecvId {
    /// The handle as two words (sequence number, tag), for a layer above to keep.
    pub fn to_raw(self) -> [u64; 2] {
        [self.seq, self.tag]
    }

    /// The handle from [`RecvId::to_raw`]. Any value is accepted: one never handed out
    /// names no receive.
    pub fn from_raw(v: [u64; 2]) -> RecvId {
        RecvId {
            seq: v[0],
            tag: v[1],
        }
    }
}

/// Handle of an unexpected message, for receiving it after a probe and for updating a
/// message whose fragments are still arriving.
///
/// Handles are never reused within one matcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MsgId {
    /// Arrival sequence number, unique within the matcher.
    seq: u64,
    /// The message's tag, which names its bucket.
    tag: Tag,
}

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

/// More empty buckets than this (when they are also the majority) are swept.
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

/// Hasher state for integer keys (the matcher's tags; descriptors and addresses elsewhere).
///
/// SipHash would cost more than the rest of a match; the keys are single integers, so one
/// folded multiply suffices. The seed is random per map so that a set of keys that
/// happens to collide does not collide in every process.
pub struct KeyHasher(u64);

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
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The seeded hash of integer keys (tags here; worker ids in the endpoint table; the
/// descriptors of kept active messages; the C layer's kept-data addresses). For keys
/// that are `u64` or `usize`; other key types are hashed correctly but slowly.
#[derive(Clone, Copy)]
pub struct KeyHash {
    seed: u64,
}

impl Default for KeyHash {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyHash {
    /// A hash with a fresh random seed.
    pub fn new() -> Self {
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

/// Everything stored under one tag. By invariant 2 at most one of the queues is
/// non-empty; both are kept so that a tag used in both directions keeps both capacities.
struct Bucket<R, U> {
    /// Full-mask receives posted for this tag: `(seq, payload)` in posting order.
    recvs: SeqQueue<R>,
    /// Unexpected messages with this tag: `(seq, payload)` in arrival order.
    msgs: SeqQueue<U>,
}

impl<R, U> Bucket<R, U> {
    fn new() -> Self {
        Self {
            recvs: SeqQueue::new(),
            msgs: SeqQueue::new(),
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.recvs.is_empty() && self.msgs.is_empty()
    }
}

/// A posted receive with a mask other than the full one.
struct WildRecv<R> {
    seq: u64,
    want: Tag,
    mask: Tag,
    payload: R,
}

/// Takes the oldest wildcard receive that matches `tag` and was posted before `bound`.
///
/// A free function over the fields it needs, so that callers can hold a bucket meanwhile.
/// Callers test `wild.is_empty()` first, so that the common case costs no call.
fn take_wild<R>(
    wild: &mut VecDeque<WildRecv<R>>,
    posted: &mut usize,
    tag: Tag,
    bound: u64,
) -> Option<(RecvId, R)> {
    let i = wild
        .iter()
        .take_while(|w| w.seq < bound)
        .position(|w| tag_matches(tag, w.want, w.mask))?;
    let w = wild.remove(i)?;
    *posted -= 1;
    Some((
        RecvId {
            seq: w.seq,
            tag: w.want,
        },
        w.payload,
    ))
}

/// Marks a dead entry of [`Arrivals`] in its sequence number (which stays below 2^63).
const DEAD: u64 = 1 << 63;

/// `(seq, tag)` of every unexpected message in arrival order, with lazy deletion (the
/// module docs, invariant 3): an entry whose message has left its bucket has [`DEAD`] set
/// in its sequence number; the front entry is live; `dead` counts the dead entries and
/// is at most half of them after every call.
struct Arrivals {
    entries: VecDeque<(u64, Tag)>,
    dead: usize,
}

impl Arrivals {
    fn new() -> Self {
        Self {
            entries: VecDeque::new(),
            dead: 0,
        }
    }

    /// The number of unexpected messages.
    #[inline]
    fn live(&self) -> usize {
        self.entries.len() - self.dead
    }

    #[inline]
    fn push(&mut self, seq: u64, tag: Tag) {
        debug_assert!(seq < DEAD);
        debug_assert!(self
            .entries
            .back()
            .map_or(true, |&(last, _)| last & !DEAD < seq));
        self.entries.push_back((seq, tag));
    }

    /// The oldest live entry whose tag a receive posted with `(want, mask)` takes: its
    /// index, sequence number and tag.
    #[inline]
    fn find(&self, want: Tag, mask: Tag) -> Option<(usize, u64, Tag)> {
        self.entries
            .iter()
            .position(|&(seq, tag)| seq & DEAD == 0 && tag_matches(tag, want, mask))
            .map(|i| (i, self.entries[i].0, self.entries[i].1))
    }

    /// Records that the message `seq` has left its bucket.
    #[inline(always)]
    fn remove(&mut self, seq: u64) {
        // The usual case, the oldest message of all with no dead entry behind it: a pop,
        // and the front stays live, and no compaction is due.
        if self.dead == 0 && self.entries.front().is_some_and(|&(s, _)| s == seq) {
            self.entries.pop_front();
            return;
        }
        self.remove_slow(seq);
    }

    #[inline(never)]
    fn remove_slow(&mut self, seq: u64) {
        let at = match self.entries.front() {
            Some(&(first, _)) if first == seq => Some(0),
            _ => self
                .entries
                .binary_search_by_key(&seq, |&(s, _)| s & !DEAD)
                .ok(),
        };
        debug_assert!(at.is_some(), "message missing from the arrival order");
        if let Some(i) = at {
            self.remove_at(i);
        }
    }

    /// Records that the message of the live entry at index `i` has left its bucket.
    #[inline]
    fn remove_at(&mut self, i: usize) {
        debug_assert_eq!(self.entries[i].0 & DEAD, 0, "entry removed twice");
        if i == 0 {
            self.entries.pop_front();
            // Keep the front live. With no dead entry the new front is live already.
            if self.dead > 0 {
                while self.entries.front().is_some_and(|&(s, _)| s & DEAD != 0) {
                    self.entries.pop_front();
                    self.dead -= 1;
                }
            }
        } else {
            self.entries[i].0 |= DEAD;
            self.dead += 1;
        }
        // Either branch can leave dead entries in the majority (the first removes a live
        // one). Compacting costs O(len) < O(2 * dead) and drops those dead entries for
        // good, so each dead entry pays for it at most twice over.
        if self.dead * 2 > self.entries.len() {
            self.compact();
        }
    }

    #[cold]
    fn compact(&mut self) {
        self.entries.retain(|&(s, _)| s & DEAD == 0);
        self.dead = 0;
    }
}

/// The tag matcher: posted receives and unexpected messages. See the module docs.
pub struct Matcher<R, U> {
    /// Tag to the slot of its bucket in `slots`.
    index: HashMap<Tag, usize, KeyHash>,
    /// The buckets of full-mask receives and unexpected messages. A slot on `free` holds
    /// an empty bucket that no tag names.
    slots: Vec<Bucket<R, U>>,
    /// Slots of swept buckets, for the next new tag.
    free: Vec<usize>,
    /// The tag looked up last and its slot: the same tag again (a ping-pong, a loop on one
    /// communicator and tag) finds its bucket without hashing. Cleared when buckets go.
    last: Option<(Tag, usize)>,
    /// How many buckets are empty.
    empty: usize,
    /// Receives with any other mask, in posting order.
    wild: VecDeque<WildRecv<R>>,
    /// All unexpected messages in arrival order.
    arrivals: Arrivals,
    /// Number of posted receives, in buckets and in `wild`.
    posted: usize,
    /// Next posting sequence number.
    next_recv: u64,
    /// Next arrival sequence number.
    next_msg: u64,
}

impl<R, U> Default for Matcher<R, U> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R, U> fmt::Debug for Matcher<R, U> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Matcher")
            .field("posted", &self.posted_len())
            .field("unexpected", &self.unexpected_len())
            .finish()
    }
}

impl<R, U> Matcher<R, U> {
    /// An empty matcher. Allocates nothing until the first entry is stored.
    pub fn new() -> Self {
        Self {
            index: HashMap::with_hasher(KeyHash::new()),
            slots: Vec::new(),
            free: Vec::new(),
            last: None,
            empty: 0,
            wild: VecDeque::new(),
            arrivals: Arrivals::new(),
            posted: 0,
            next_recv: 0,
            next_msg: 0,
        }
    }

    /// Posts a receive for tags `t` with `t & mask == tag & mask`.
    ///
    /// If an unexpected message matches, the oldest such one is removed and returned with
    /// `r`; otherwise the receive is queued behind all earlier ones.
    pub fn post(&mut self, tag: Tag, mask: Tag, r: R) -> Posted<R, U> {
        match self.post_with(tag, mask, r, |r, id| (r, id)) {
            Ok(id) => Posted::Queued(id),
            Err((m, u, r)) => Posted::Matched(m, u, r),
        }
    }

    /// [`Matcher::post`] for a caller that builds the receive's payload only when it is
    /// queued: `make(t, id)` runs only if no unexpected message matches, and gives the
    /// payload to store and a value to return. A match hands `t` back with the message,
    /// so a receive that completes at once costs no payload (for the worker: no request).
    #[inline]
    pub fn post_with<T, X>(
        &mut self,
        tag: Tag,
        mask: Tag,
        t: T,
        make: impl FnOnce(T, RecvId) -> (R, X),
    ) -> Result<X, (MsgId, U, T)> {
        if mask != FULL_MASK {
            return self.post_wild(tag, mask, t, make);
        }
        let seq = self.next_recv;
        let id = RecvId { seq, tag };
        let i = self.find_or_make(tag);
        let b = &mut self.slots[i];
        // The oldest message with this tag is the oldest one this receive matches.
        if let Some((m, u)) = b.msgs.pop_front() {
            let emptied = b.is_empty();
            self.arrivals.remove(m);
            if emptied {
                self.emptied();
            }
            return Err((MsgId { seq: m, tag }, u, t));
        }
        let (r, x) = make(t, id);
        if b.is_empty() {
            self.empty -= 1;
        }
        b.recvs.push_back(seq, r);
        self.next_recv += 1;
        self.posted += 1;
        Ok(x)
    }

    /// [`Matcher::post_with`] with a mask other than the full one.
    fn post_wild<T, X>(
        &mut self,
        want: Tag,
        mask: Tag,
        t: T,
        make: impl FnOnce(T, RecvId) -> (R, X),
    ) -> Result<X, (MsgId, U, T)> {
        if let Some((i, seq, tag)) = self.arrivals.find(want, mask) {
            let u = self.take_msg(tag, seq, Some(i));
            debug_assert!(u.is_some(), "arrival entry without its message");
            if let Some(u) = u {
                return Err((MsgId { seq, tag }, u, t));
            }
        }
        let seq = self.next_recv;
        let (payload, x) = make(t, RecvId { seq, tag: want });
        self.next_recv += 1;
        self.posted += 1;
        self.wild.push_back(WildRecv {
            seq,
            want,
            mask,
            payload,
        });
        Ok(x)
    }

    /// A message with `tag` arrives.
    ///
    /// If a posted receive matches, the oldest such one (by posting order) is removed and
    /// returned with `u`; otherwise `u` is stored as unexpected, behind all earlier
    /// messages.
    pub fn arrive(&mut self, tag: Tag, u: U) -> Arrived<R, U> {
        let seq = self.next_msg;
        match self.find(tag) {
            Some(i) => {
                let b = &mut self.slots[i];
                if self.posted != 0 {
                    // A wildcard receive wins only if posted before the bucket's head.
                    let bound = b.recvs.front().map_or(u64::MAX, |&(s, _)| s);
                    if !self.wild.is_empty() {
                        let posted = &mut self.posted;
                        if let Some((id, r)) = take_wild(&mut self.wild, posted, tag, bound) {
                            return Arrived::Matched(id, r, u);
                        }
                    }
                    if let Some((s, r)) = b.recvs.pop_front() {
                        let emptied = b.is_empty();
                        self.posted -= 1;
                        if emptied {
                            self.emptied();
                        }
                        return Arrived::Matched(RecvId { seq: s, tag }, r, u);
                    }
                }
                if b.is_empty() {
                    self.empty -= 1;
                }
                b.msgs.push_back(seq, u);
            }
            None => {
                if !self.wild.is_empty() {
                    let posted = &mut self.posted;
                    if let Some((id, r)) = take_wild(&mut self.wild, posted, tag, u64::MAX) {
                        return Arrived::Matched(id, r, u);
                    }
                }
                let i = self.make(tag);
                self.empty -= 1;
                self.slots[i].msgs.push_back(seq, u);
            }
        }
        self.next_msg += 1;
        self.arrivals.push(seq, tag);
        Arrived::Unexpected(MsgId { seq, tag })
    }

    /// The first half of [`Matcher::arrive`]: takes the oldest posted receive that
    /// matches `tag`, if any. A caller that gets `None` must store the message with
    /// [`Matcher::add_unexpected`] before anything else arrives, or order breaks; the
    /// split lets it build the unexpected payload only when it is needed. Always inline:
    /// the eager arrival's path is most of its callers' cost (out of line it cost 33
    /// more instructions per 8-byte message).
    #[inline(always)]
    pub fn match_posted(&mut self, tag: Tag) -> Option<(RecvId, R)> {
        if self.posted == 0 {
            return None;
        }
        let i = self.find(tag);
        let bound = i
            .and_then(|i| self.slots[i].recvs.front())
            .map_or(u64::MAX, |&(s, _)| s);
        if !self.wild.is_empty() {
            if let Some(found) = take_wild(&mut self.wild, &mut self.posted, tag, bound) {
                return Some(found);
            }
        }
        let b = &mut self.slots[i?];
        let (seq, r) = b.recvs.pop_front()?;
        let emptied = b.is_empty();
        self.posted -= 1;
        if emptied {
            self.emptied();
        }
        Some((RecvId { seq, tag }, r))
    }

    /// The second half of [`Matcher::arrive`]: stores an unexpected message behind all
    /// earlier ones.
    #[inline]
    pub fn add_unexpected(&mut self, tag: Tag, u: U) -> MsgId {
        let seq = self.next_msg;
        self.next_msg += 1;
        let i = self.find_or_make(tag);
        let b = &mut self.slots[i];
        if b.is_empty() {
            self.empty -= 1;
        }
        b.msgs.push_back(seq, u);
        self.arrivals.push(seq, tag);
        MsgId { seq, tag }
    }

    /// The part of [`Matcher::post`] with the full mask that finds a message: the oldest
    /// unexpected message with exactly `tag` (the one such a receive would take) is shown
    /// to `take`, which may consume it where it lies and says what becomes of it: kept
    /// ([`Removal::Keep`]), or removed as if a receive had taken it, dropped or, when
    /// `take` saw that it owns nothing, forgotten where it lies (no move, no drop). No
    /// receive is queued either way: a caller that gets false (kept, or no such message)
    /// posts its receive as usual.
    #[inline(always)]
    pub fn take_exact(&mut self, tag: Tag, take: impl FnOnce(&mut U) -> Removal) -> bool {
        if self.arrivals.live() == 0 {
            return false;
        }
        let Some(i) = self.find(tag) else {
            return false;
        };
        let b = &mut self.slots[i];
        let Some((seq, u)) = b.msgs.front_mut() else {
            return false;
        };
        let seq = *seq;
        match take(u) {
            Removal::Keep => return false,
            Removal::Drop => drop(b.msgs.pop_front()),
            Removal::Forget => b.msgs.forget_front(),
        }
        let emptied = b.is_empty();
        self.arrivals.remove(seq);
        if emptied {
            self.emptied();
        }
        true
    }

    /// The unexpected message that a receive posted with `(tag, mask)` would take now,
    /// without removing it.
    pub fn probe(&self, tag: Tag, mask: Tag) -> Option<(MsgId, Tag, &U)> {
        if self.arrivals.live() == 0 {
            return None;
        }
        let (seq, tag) = if mask == FULL_MASK {
            (self.find_ref(tag)?.msgs.front()?.0, tag)
        } else {
            let (_, seq, tag) = self.arrivals.find(tag, mask)?;
            (seq, tag)
        };
        let u = self.find_ref(tag)?.msgs.get(seq)?;
        Some((MsgId { seq, tag }, tag, u))
    }

    /// Like [`Matcher::probe`], but removes the message (MPI's `mprobe`): the caller
    /// receives it later through the returned handle, and no posted receive can take it.
    pub fn probe_remove(&mut self, tag: Tag, mask: Tag) -> Option<(MsgId, Tag, U)> {
        if mask == FULL_MASK {
            let i = self.find(tag)?;
            let b = &mut self.slots[i];
            let (seq, u) = b.msgs.pop_front()?;
            let emptied = b.is_empty();
            self.arrivals.remove(seq);
            if emptied {
                self.emptied();
            }
            return Some((MsgId { seq, tag }, tag, u));
        }
        let (i, seq, tag) = self.arrivals.find(tag, mask)?;
        let u = self.take_msg(tag, seq, Some(i))?;
        Some((MsgId { seq, tag }, tag, u))
    }

    /// The payload of an unexpected message still stored, to update it in place (e.g. as
    /// more fragments of it arrive).
    pub fn unexpected_mut(&mut self, id: MsgId) -> Option<&mut U> {
        let i = self.find(id.tag)?;
        self.slots[i].msgs.get_mut(id.seq)
    }

    /// Removes an unexpected message by handle; `None` if it was already taken.
    pub fn take_unexpected(&mut self, id: MsgId) -> Option<(Tag, U)> {
        let u = self.take_msg(id.tag, id.seq, None)?;
        Some((id.tag, u))
    }

    /// Cancels a posted receive that has not matched and returns its payload; `None` if the
    /// handle is unknown, already matched or already cancelled.
    pub fn cancel(&mut self, id: RecvId) -> Option<R> {
        // Sequence numbers are unique across both places, so looking in the wrong one
        // finds nothing.
        if let Ok(i) = self.wild.binary_search_by_key(&id.seq, |w| w.seq) {
            let w = self.wild.remove(i)?;
            self.posted -= 1;
            return Some(w.payload);
        }
        let i = self.find(id.tag)?;
        let b = &mut self.slots[i];
        let r = b.recvs.remove(id.seq)?;
        let emptied = b.is_empty();
        self.posted -= 1;
        if emptied {
            self.emptied();
        }
        Some(r)
    }

    /// Removes all unmatched receives and returns them in posting order (for destroying a
    /// worker, which completes them as cancelled). Unexpected messages are kept.
    pub fn drain_posted(&mut self) -> Vec<(RecvId, R)> {
        let mut all: Vec<(RecvId, R)> = Vec::with_capacity(self.posted);
        all.extend(self.wild.drain(..).map(|w| {
            let id = RecvId {
                seq: w.seq,
                tag: w.want,
            };
            (id, w.payload)
        }));
        let slots = &mut self.slots;
        let mut gone = Vec::new();
        self.index.retain(|&tag, &mut i| {
            let b = &mut slots[i];
            all.extend(b.recvs.drain().map(|(seq, r)| (RecvId { seq, tag }, r)));
            if b.is_empty() {
                gone.push(i);
            }
            !b.is_empty()
        });
        self.release(gone);
        self.empty = 0;
        self.posted = 0;
        all.sort_unstable_by_key(|(id, _)| id.seq);
        all
    }

    /// Number of posted receives waiting for a message.
    pub fn posted_len(&self) -> usize {
        self.posted
    }

    /// Number of unexpected messages waiting for a receive.
    pub fn unexpected_len(&self) -> usize {
        self.arrivals.live()
    }

    /// Removes the unexpected message `seq` from bucket `tag` and from the arrival order,
    /// where it is at index `at` if the caller knows.
    fn take_msg(&mut self, tag: Tag, seq: u64, at: Option<usize>) -> Option<U> {
        let i = self.find(tag)?;
        let b = &mut self.slots[i];
        let u = b.msgs.remove(seq)?;
        let emptied = b.is_empty();
        match at {
            Some(i) => self.arrivals.remove_at(i),
            None => self.arrivals.remove(seq),
        }
        if emptied {
            self.emptied();
        }
        Some(u)
    }

    /// A bucket has just become empty.
    #[inline]
    fn emptied(&mut self) {
        self.empty += 1;
        if self.empty > EMPTY_BUCKETS_KEPT && self.empty * 2 > self.index.len() {
            self.sweep();
        }
    }

    /// Drops the empty buckets. Costs O(buckets) < O(2 * empty); each empty bucket was made
    /// so by one removal since the last sweep, which pays for it.
    #[cold]
    fn sweep(&mut self) {
        let slots = &self.slots;
        let mut gone = Vec::new();
        self.index.retain(|_, &mut i| {
            let keep = !slots[i].is_empty();
            if !keep {
                gone.push(i);
            }
            keep
        });
        self.release(gone);
        self.empty = 0;
    }

    /// Frees the slots of buckets just taken out of the index: their queues' memory goes
    /// (as a dropped bucket's would), the slots wait for new tags.
    fn release(&mut self, gone: Vec<usize>) {
        for &i in &gone {
            self.slots[i] = Bucket::new();
        }
        self.free.extend(gone);
        self.last = None;
    }

    /// The slot of `tag`'s bucket, if it has one; remembered as the last one found.
    #[inline(always)]
    fn find(&mut self, tag: Tag) -> Option<usize> {
        if let Some((t, i)) = self.last {
            if t == tag {
                return Some(i);
            }
        }
        let i = *self.index.get(&tag)?;
        self.last = Some((tag, i));
        Some(i)
    }

    /// [`Matcher::find`] without remembering: the bucket of `tag`, if it has one.
    #[inline]
    fn find_ref(&self, tag: Tag) -> Option<&Bucket<R, U>> {
        let i = match self.last {
            Some((t, i)) if t == tag => i,
            _ => *self.index.get(&tag)?,
        };
        self.slots.get(i)
    }

    /// The slot of `tag`'s bucket, made (empty, and counted so) when it has none.
    #[inline(always)]
    fn find_or_make(&mut self, tag: Tag) -> usize {
        match self.find(tag) {
            Some(i) => i,
            None => self.make(tag),
        }
    }

    /// Gives `tag` an empty bucket (a free slot's, or a new one) and counts it as empty.
    #[inline(never)]
    fn make(&mut self, tag: Tag) -> usize {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = self.slots.len();
                self.slots.push(Bucket::new());
                i
            }
        };
        self.index.insert(tag, i);
        self.last = Some((tag, i));
        self.empty += 1;
        i
    }

    /// The bucket of `tag`; panics when it has none.
    #[cfg(test)]
    fn bucket(&self, tag: Tag) -> &Bucket<R, U> {
        &self.slots[self.index[&tag]]
    }

    /// Checks every structural invariant; panics on violation.
    #[cfg(test)]
    fn check_invariants(&self) {
        fn increasing(seqs: impl Iterator<Item = u64>, below: u64) -> Vec<u64> {
            let seqs: Vec<u64> = seqs.collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "queue out of order");
            assert!(
                seqs.iter().all(|&s| s < below),
                "sequence number from the future"
            );
            seqs
        }

        let mut recvs = Vec::new();
        let mut msgs = Vec::new();
        let mut empty = 0;
        let mut named = vec![false; self.slots.len()];
        for (&tag, &i) in &self.index {
            assert!(!named[i], "two tags name one slot");
            named[i] = true;
            let b = &self.slots[i];
            empty += usize::from(b.is_empty());
            assert!(
                b.recvs.is_empty() || b.msgs.is_empty(),
                "a bucket holds a receive and a message that match"
            );
            recvs.extend(increasing(b.recvs.iter().map(|e| e.0), self.next_recv));
            let seqs = increasing(b.msgs.iter().map(|e| e.0), self.next_msg);
            msgs.extend(seqs.into_iter().map(|s| (s, tag)));
        }
        assert_eq!(empty, self.empty, "empty bucket count");
        for &i in &self.free {
            assert!(!named[i], "a free slot is named by a tag");
            assert!(self.slots[i].is_empty(), "a free slot holds entries");
        }
        assert_eq!(
            self.free.len() + self.index.len(),
            self.slots.len(),
            "a slot neither free nor named"
        );
        if let Some((t, i)) = self.last {
            assert_eq!(
                self.index.get(&t),
                Some(&i),
                "the remembered slot is not the tag's"
            );
        }

        assert!(
            self.wild.iter().all(|w| w.mask != FULL_MASK),
            "exact receive in wild"
        );
        recvs.extend(increasing(self.wild.iter().map(|w| w.seq), self.next_recv));
        assert_eq!(recvs.len(), self.posted, "posted count");
        recvs.sort_unstable();
        recvs.dedup();
        assert_eq!(
            recvs.len(),
            self.posted,
            "receive sequence number used twice"
        );

        let a = &self.arrivals;
        increasing(a.entries.iter().map(|e| e.0 & !DEAD), self.next_msg);
        if let Some(&(first, _)) = a.entries.front() {
            assert_eq!(first & DEAD, 0, "dead front");
        }
        let dead = a.entries.iter().filter(|e| e.0 & DEAD != 0).count();
        assert_eq!(dead, a.dead, "dead count");
        assert!(dead * 2 <= a.entries.len(), "too many dead entries");
        let live: Vec<(u64, Tag)> = a
            .entries
            .iter()
            .copied()
            .filter(|e| e.0 & DEAD == 0)
            .collect();
        msgs.sort_unstable();
        assert_eq!(live, msgs, "arrival order and buckets disagree");

        for &(_, tag) in &msgs {
            assert!(
                !self.wild.iter().any(|w| tag_matches(tag, w.want, w.mask)),
                "a wildcard receive and a message that match"
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
        assert_eq!(m.bucket(5).recvs.len(), 1);
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
        assert!(m.arrivals.entries.len() <= 3);
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
        assert!(m.index.len() <= 2 * EMPTY_BUCKETS_KEPT + 2);
        assert!(m.slots.len() <= 2 * EMPTY_BUCKETS_KEPT + 2);
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
        assert_eq!(m.index.len(), 2);
        m.check_invariants();

        // Nothing grows any more: the steady path does not allocate.
        let caps = |m: &M| {
            let b = |t: Tag| (m.bucket(t).recvs.capacity(), m.bucket(t).msgs.capacity());
            (
                (m.index.capacity(), m.slots.capacity(), m.free.capacity()),
                b(3),
                b(4),
                m.arrivals.entries.capacity(),
            )
        };
        let before = caps(&m);
        for i in 0..1000 {
            let id = queued(m.post(3, FULL_MASK, i));
            assert_eq!(m.arrive(3, i), Arrived::Matched(id, i, i));
            let msg = unexpected(m.arrive(4, i));
            assert_eq!(m.post(4, FULL_MASK, i), Posted::Matched(msg, i, i));
        }
        assert_eq!(caps(&m), before);
    }

    // ---- property test against a linear-scan reference model ----

    #[derive(Clone, Debug)]
    enum Op {
        Post {
            tag: usize,
            mask: usize,
        },
        Arrive {
            tag: usize,
        },
        Probe {
            tag: usize,
            mask: usize,
        },
        ProbeRemove {
            tag: usize,
            mask: usize,
        },
        Cancel(Index),
        Take(Index),
        Update(Index),
        /// `match_posted`, then `add_unexpected` on a miss (the worker's eager path).
        ArriveSplit {
            tag: usize,
        },
        /// `drain_posted` in the middle of the traffic.
        Drain,
        /// `take_exact`, its `take` accepting payloads of one parity only (so that it also
        /// declines).
        TakeExact {
            tag: usize,
            odd: bool,
        },
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

    /// [`ops`] plus the split arrival and draining, and more handle operations, so that
    /// removals by handle interleave densely with wildcard matching.
    fn ops_ext(n_tags: usize, max_len: usize) -> impl Strategy<Value = Vec<Op>> {
        let tag = 0..n_tags;
        let mask = 0..MASKS.len();
        let op = prop_oneof![
            4 => (tag.clone(), mask.clone()).prop_map(|(tag, mask)| Op::Post { tag, mask }),
            2 => tag.clone().prop_map(|tag| Op::Arrive { tag }),
            2 => tag.clone().prop_map(|tag| Op::ArriveSplit { tag }),
            1 => (tag.clone(), mask.clone()).prop_map(|(tag, mask)| Op::Probe { tag, mask }),
            2 => (tag.clone(), mask).prop_map(|(tag, mask)| Op::ProbeRemove { tag, mask }),
            2 => any::<Index>().prop_map(Op::Cancel),
            2 => any::<Index>().prop_map(Op::Take),
            2 => any::<Index>().prop_map(Op::Update),
            1 => Just(Op::Drain),
            2 => (tag, any::<bool>()).prop_map(|(tag, odd)| Op::TakeExact { tag, odd }),
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
                Op::ArriveSplit { tag } => {
                    let tag = tag_of(tag);
                    let u = fresh();
                    let want = posted
                        .iter()
                        .position(|&(_, w, mask, _)| tag_matches(tag, w, mask));
                    match (m.match_posted(tag), want) {
                        (Some((id, r)), Some(i)) => {
                            let (eid, _, _, er) = posted.remove(i);
                            prop_assert_eq!((id, r), (eid, er));
                        }
                        (None, None) => {
                            let id = m.add_unexpected(tag, u);
                            prop_assert!(!msg_ids.contains(&id), "MsgId reused");
                            msg_ids.push(id);
                            unexp.push((id, tag, u));
                        }
                        (got, want) => {
                            prop_assert!(false, "match_posted: got {:?}, model {:?}", got, want)
                        }
                    }
                }
                Op::Drain => {
                    let want: Vec<(RecvId, u32)> =
                        posted.drain(..).map(|(id, _, _, r)| (id, r)).collect();
                    prop_assert_eq!(m.drain_posted(), want);
                }
                Op::TakeExact { tag, odd } => {
                    let tag = tag_of(tag);
                    let accept = |u: u32| (u % 2 == 1) == odd;
                    // The oldest message with exactly this tag, taken only if accepted.
                    let want = unexp
                        .iter()
                        .position(|&(_, t, _)| t == tag)
                        .filter(|&i| accept(unexp[i].2))
                        .map(|i| unexp.remove(i).2);
                    let mut seen = None;
                    let took = m.take_exact(tag, |u| {
                        seen = Some(*u);
                        match (accept(*u), *u % 4 < 2) {
                            (false, _) => Removal::Keep,
                            (true, true) => Removal::Drop,
                            (true, false) => Removal::Forget,
                        }
                    });
                    prop_assert_eq!(took, want.is_some());
                    if took {
                        prop_assert_eq!(seen, want);
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Few tags, with split arrivals, drains and dense removals by handle.
        #[test]
        fn matches_reference_model_ext(ops in ops_ext(TAGS.len(), 300)) {
            run(&ops, |i| TAGS[i])?;
        }

        /// Many tags, with split arrivals, drains and dense removals by handle.
        #[test]
        fn matches_reference_model_ext_many_tags(ops in ops_ext(40, 400)) {
            run(&ops, |i| ((i as u64 % 8) << 60) | (i as u64 / 8))?;
        }
    }
}
