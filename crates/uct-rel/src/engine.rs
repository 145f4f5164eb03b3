//! The reliability engine: reliable, ordered, exactly-once delivery of messages over a
//! datagram service that may lose, duplicate, reorder and delay packets.
//!
//! # Driving it
//!
//! The engine does no I/O and reads no clock. Its owner (the udp transport, or a test's
//! simulated network) feeds it datagrams with [`Engine::on_packet`] and the time with
//! [`Engine::on_timeout`], and after any call drains [`Engine::poll_transmit`] (packets to
//! put on the wire) and [`Engine::poll_event`] (messages to hand up, failed peers). It
//! sleeps until [`Engine::next_timeout`] or the next datagram. Time is a `u64` of
//! nanoseconds from any origin, never decreasing.
//!
//! # Protocol
//!
//! - Each direction of each peer pair numbers its messages from [`Config::initial_seq`]
//!   (both ends must agree) with 32-bit sequence numbers that wrap ([`crate::seq`]).
//! - Every packet carries a cumulative acknowledgement (the next sequence number expected).
//!   A receiver owes one after accepting a message and sends it standalone when no data
//!   packet carried it within [`Config::ack_delay`], or at once after
//!   [`Config::ack_every`] messages, a duplicate, or a packet with ACK_REQ.
//! - Out-of-order messages within the window are **buffered** (in the shared receive pool)
//!   and delivered when the gap fills: dropping them would turn every loss into a
//!   go-back-N retransmission of the whole window, which at 30% loss never finishes.
//!   Seeing a gap, the receiver sends a NAK: the first missing number plus a bitmap of what
//!   it holds beyond it, so one NAK names every hole. NAKs are rate-limited to one per
//!   [`Config::nak_interval`] unless the first hole moved, and repeated every
//!   `nak_interval` while a hole persists.
//! - Out-of-order packets are buffered only while less than 7/8 of the receive pool is in
//!   use: the last eighth is kept for in-order packets, because if the out-of-order
//!   packets of many peers could take every buffer, none would be left for the packets
//!   that fill their holes and no peer would progress again. A packet not buffered is
//!   recovered by retransmission; and a NAK names no more holes than there are free
//!   buffers (shared among the peers with holes), so that under pressure the sender does
//!   not resend a window of packets only to have most of them dropped again.
//! - The sender retransmits what a NAK names, except packets it (re)sent less than
//!   `nak_interval` ago (their copy may still be in flight). When nothing was acknowledged
//!   for the retransmission timeout it resends the oldest packet with ACK_REQ, whose answer
//!   (an ACK or a NAK) tells it what else to resend; until everything sent before the
//!   timeout is acknowledged, each partial acknowledgement resends the next oldest packet
//!   at once (losses at the tail of a burst leave nothing behind them to trigger a NAK,
//!   and one timeout per lost packet would be slow). Before the timeout, once two smoothed
//!   round trips plus four deviations pass without an acknowledgement, the same resend
//!   goes once as a tail probe, without backoff (a loss at the tail of a burst leaves
//!   nothing behind it for the receiver to notice). The timeout is the larger of
//!   [`Config::initial_rto`] and the measured round trip plus four deviations (RFC 6298's
//!   smoothing, sampled only from packets sent once), doubles on each expiry up to
//!   [`Config::max_rto`], and resets when the acknowledgement moves.
//! - At most [`Config::window`] messages per peer are unacknowledged, and at most 64 KiB
//!   of messages (less if the send window, below, is smaller; at least one packet) wait
//!   behind those in flight; beyond that, and when the shared send pool is empty,
//!   [`Engine::send`] returns [`SendError::WindowFull`]. Packing far ahead of the wire
//!   would only let the packed bytes leave the CPU's cache before the kernel reads them.
//! - A peer we have unacknowledged data for (or an unanswered probe: keepalive, if
//!   [`Config::keepalive`] is set, or one sent because its owner awaits an answer from
//!   it, [`Engine::set_awaiting`]) that sends nothing valid for [`Config::peer_timeout`] is
//!   declared failed: [`Event::PeerFailed`] is queued after the messages already received
//!   from it, its state and buffers are dropped, and sends to it return
//!   [`SendError::Failed`] until it is removed or added again.
//! - Every datagram is decoded by [`crate::packet`] and then range-checked: an
//!   acknowledgement of something never sent or a sequence number beyond the window drops
//!   the whole packet. Such drops are counted in [`Counters`], never trusted.
//!
//! # Flow and congestion control
//!
//! What is on the wire is bounded in bytes, not only in messages: a new data packet goes
//! out only while the bytes in flight to its peer (transmitted, not acknowledged, headers
//! included) stay within the smaller of two windows (one packet may always be in flight,
//! so no peer stalls for good):
//!
//! - **Credit (flow control).** Every packet carries the receive space its sender offers
//!   (see [`crate::packet`]): [`Config::rcv_buf`] (the owner's socket receive buffer)
//!   divided among the peers that sent it data in the current or the previous
//!   [`Config::credit_epoch`], never below one packet. The newest credit heard holds, so a
//!   shrinking buffer ([`Engine::set_rcv_buf`]) or a new sender takes effect within a
//!   round trip. This is what keeps a window of large datagrams from overflowing a
//!   receiver's socket.
//! - **Congestion window.** It starts at [`Config::initial_window`] packets, doubles per
//!   round trip (slow start) up to a threshold, then grows by the larger of one packet and
//!   1/16 of the window per round trip, and never far past the peer's credit. The holes
//!   a NAK names are resent at once (fast recovery); when they are more than 4 and more
//!   than a quarter of the packets in flight (an overflowing queue drops everything until
//!   it drains, where random loss, or a GSO batch dropped whole, leaves holes that say
//!   little about the rate; a receiver's own overflow is prevented by its credit) the
//!   window is halved, once per window of packets (losses of packets sent before the last
//!   cut belong to the same event). A retransmission timeout, the last resort, halves it
//!   each time it fires. Cuts stop at 16 packets (the credit alone can go lower).
//!
//! - **Pacing.** A window's worth of packets released at once arrives at a queue on the
//!   path as one burst; a shallow queue drops the tail of it even when the average rate
//!   fits. So after a loss event of the overflowing kind above (the one that halves the
//!   window on a NAK), new data to that peer is paced for 64 smoothed round trips (at
//!   least 50 ms, extended by every further such event): after a pause up to 4 packets
//!   leave together, then one every `len * srtt / (1.25 * window)` ns, so the window is
//!   spread over a round trip instead of leaving in one batch. A packet held back arms the
//!   peer's timer for its release time: the engine has no clock of its own, so the owner's
//!   timer (the time it passes in) drives pacing as it drives retransmission.
//!   Retransmissions, acknowledgements and NAKs are never paced. Random loss and timeouts
//!   do not start pacing, so a clean or lossy-but-uncongested path never pays for it.
//!   [`Config::pacing`] turns it off.
//!
//! # Memory
//!
//! Per peer the engine keeps a fixed-size record in a table indexed by [`PeerId`] and a
//! 4-byte position in the timer heap: [`Engine::IDLE_PEER_BYTES`] in all (156 bytes on
//! 64-bit targets with the flow- and congestion-control state, checked at compile time to
//! stay within 160), with no heap allocation of its own. A number below the highest one
//! added costs the same, used or not, so owners number their peers densely. Packet storage is two pools shared by all peers
//! (rather than a ring per peer, which would cost a window of buffers per idle peer, or a
//! vector of slot indices per peer): the send pool keeps each unacknowledged packet
//! (encoded, ready to resend), the receive pool keeps messages received out of order or
//! not yet polled. Both grow on demand up to [`Config::tx_pool_packets`] and
//! [`Config::rx_pool_packets`] and are then recycled, so a warmed-up engine does not
//! allocate per packet. Per-peer lists through the pools are intrusive (a `next` index per
//! slot). An idle peer (nothing in flight, nothing owed) is in no queue and no timer: the
//! engine never visits it.
//!
//! Invariants (per active peer): `snd_una <= snd_sent <= snd_nxt` in serial order, with
//! `snd_nxt - snd_una <= window`; `flight_bytes` and `unacked_bytes` are the encoded
//! sizes of `snd_una..snd_sent` and `snd_una..snd_nxt`; the send list holds exactly the packets
//! `snd_una..snd_nxt` in order, `tx_cursor` is the one numbered `snd_sent`; the
//! out-of-order list holds distinct numbers in `rcv_nxt+1 .. rcv_nxt+window`, ascending.

use std::collections::VecDeque;
use std::fmt;

use crate::packet::{self, Body, Packet, HEADER_LEN, MAX_SACK_BYTES};
use crate::pool::{Pool, NIL};
use crate::seq;
use crate::timers::TimerHeap;

/// Largest allowed [`Config::window`]: keeps every live sequence number far inside the
/// 2^31 range in which serial comparison is defined.
pub const MAX_WINDOW: u32 = 1 << 15;

const NEVER: u64 = u64::MAX;

// Peer flags.
const F_READY: u8 = 1 << 0; // in the ready queue
const F_ACK_NOW: u8 = 1 << 1; // an acknowledgement must go out without waiting
const F_NAK_OWED: u8 = 1 << 2; // a NAK must go out
const F_PROBE_OWED: u8 = 1 << 3; // a keepalive probe must go out
const F_PROBE_OUT: u8 = 1 << 4; // a probe is unanswered
const F_SESSION: u8 = 1 << 5; // remote_session is pinned
const F_RECOVERY: u8 = 1 << 6; // recovering from a timeout until `recover` is acknowledged
const F_TAIL_PROBED: u8 = 1 << 7; // the tail probe went since the acknowledgement last moved

// Send-slot flags.
const S_RTX: u8 = 1 << 0; // queued for retransmission
const S_ACK_REQ: u8 = 1 << 1; // send the retransmission with ACK_REQ
const S_RESENT: u8 = 1 << 2; // transmitted more than once (no round-trip sample from it)

/// A peer, as numbered by the engine's owner. The engine keeps a table indexed by this
/// number, so owners should use small dense numbers (the index in their own peer table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u32);

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "peer {}", self.0)
    }
}

/// Engine parameters. Times are nanoseconds. Both ends of a pair must use the same
/// `initial_seq` and `window`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// This engine's session (incarnation) id, sent in every packet. Pick a fresh random
    /// value per process so that a restarted peer's packets are not taken for the old one's.
    pub session: u32,
    /// First sequence number of every direction.
    pub initial_seq: u32,
    /// Unacknowledged messages per peer, 1..=[`MAX_WINDOW`].
    pub window: u32,
    /// Largest message, in bytes: at most 65515, so that a stored packet with its header
    /// fits 64 KiB. The default fills a 1500-byte MTU IPv4 UDP datagram:
    /// 1500 - 20 (IP) - 8 (UDP) - 20 (our header).
    pub max_payload: usize,
    /// How long an acknowledgement may be held back waiting for a data packet to carry it.
    pub ack_delay: u64,
    /// Acknowledge at once after this many messages received since the last ack (>= 1).
    pub ack_every: u32,
    /// Retransmission timeout before any backoff (> 0).
    pub initial_rto: u64,
    /// Ceiling of the doubled retransmission timeout (>= `initial_rto`).
    pub max_rto: u64,
    /// Minimum spacing of NAKs for the same hole, and the age a packet must have before a
    /// NAK makes us resend it. About one round trip.
    pub nak_interval: u64,
    /// Silence after which a peer we wait for is declared failed (> 0).
    pub peer_timeout: u64,
    /// If set, probe a peer we have not heard from for this long even when nothing is in
    /// flight, so that its failure is noticed without traffic. Off by default: an idle peer
    /// then costs no timer and no packet.
    pub keepalive: Option<u64>,
    /// Probe interval for a peer its owner awaits an answer from ([`Engine::set_awaiting`])
    /// while nothing is in flight to it (> 0). With keepalive off, this is what finds a
    /// peer that died after acknowledging a request whose answer never comes.
    pub await_probe: u64,
    /// Packets kept for retransmission, over all peers (>= 1).
    pub tx_pool_packets: u32,
    /// Messages buffered on the receive side (out of order, or not yet polled), over all
    /// peers (>= 1).
    pub rx_pool_packets: u32,
    /// Peer numbers must be below this; bounds the peer table.
    pub max_peers: u32,
    /// Bytes of datagrams this engine's owner can hold before it reads them (the socket's
    /// receive buffer, or the simulated network's): shared among the peers that send to
    /// us, it is the flow-control credit advertised in every packet (>= 1).
    pub rcv_buf: u32,
    /// Congestion window of a new peer, and the credit assumed before the peer's first
    /// packet tells us its own, in packets of `max_payload` (>= 1).
    pub initial_window: u32,
    /// Length of the period over which the peers sending to us are counted to share
    /// `rcv_buf` among them (> 0).
    pub credit_epoch: u64,
    /// Pace new data to a peer for a while after a loss event that looked like an
    /// overflowing queue (see "Pacing" in the module docs).
    pub pacing: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            session: 0,
            initial_seq: 0,
            window: 256,
            max_payload: 1500 - 20 - 8 - HEADER_LEN,
            ack_delay: 200_000,
            ack_every: 32,
            initial_rto: 2_000_000,
            max_rto: 500_000_000,
            nak_interval: 500_000,
            peer_timeout: 10_000_000_000,
            keepalive: None,
            await_probe: 1_000_000_000,
            tx_pool_packets: 8192,
            rx_pool_packets: 8192,
            max_peers: 1 << 20,
            rcv_buf: 4 << 20,
            initial_window: 8,
            credit_epoch: 1_000_000,
            pacing: true,
        }
    }
}

/// A [`Config`] field out of range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigError(pub &'static str);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid reliability config: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Checks every field's range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let checks: [(bool, &'static str); 14] = [
            (
                (1..=MAX_WINDOW).contains(&self.window),
                "window must be 1..=32768",
            ),
            (
                self.max_payload <= packet::MAX_PAYLOAD - HEADER_LEN,
                "max_payload must be <= 65515",
            ),
            (self.ack_every >= 1, "ack_every must be >= 1"),
            (self.initial_rto > 0, "initial_rto must be > 0"),
            (
                self.max_rto >= self.initial_rto,
                "max_rto must be >= initial_rto",
            ),
            (self.peer_timeout > 0, "peer_timeout must be > 0"),
            (self.keepalive != Some(0), "keepalive must be > 0"),
            (self.await_probe > 0, "await_probe must be > 0"),
            (self.tx_pool_packets >= 1, "tx_pool_packets must be >= 1"),
            (self.rx_pool_packets >= 1, "rx_pool_packets must be >= 1"),
            (
                self.tx_pool_packets < NIL && self.rx_pool_packets < NIL && self.max_peers < NIL,
                "pool sizes and max_peers must be < 2^32-1",
            ),
            (self.rcv_buf >= 1, "rcv_buf must be >= 1"),
            (self.initial_window >= 1, "initial_window must be >= 1"),
            (self.credit_epoch > 0, "credit_epoch must be > 0"),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, why)) => Err(ConfigError(why)),
            None => Ok(()),
        }
    }
}

/// Why [`Engine::send`] did not take a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// No resource right now: the peer's window or the shared send pool is full. Retry after
    /// the engine has received acknowledgements (the "no resource" of uct).
    WindowFull,
    /// The peer was never added, or was removed.
    UnknownPeer,
    /// The peer was declared unreachable.
    Failed,
    /// The message is longer than [`Config::max_payload`].
    TooLarge,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::WindowFull => "send window full",
            Self::UnknownPeer => "unknown peer",
            Self::Failed => "peer unreachable",
            Self::TooLarge => "message larger than max_payload",
        })
    }
}

impl std::error::Error for SendError {}

/// Why [`Engine::add_peer`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddPeerError {
    /// The peer is already active.
    Exists,
    /// The number is not below [`Config::max_peers`].
    IdTooLarge,
}

impl fmt::Display for AddPeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Exists => "peer already active",
            Self::IdTooLarge => "peer id not below max_peers",
        })
    }
}

impl std::error::Error for AddPeerError {}

/// Something for the engine's owner.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// The next message from `peer`, in order, exactly once. The bytes are lent until the
    /// next call on the engine.
    Deliver {
        /// Who sent it.
        peer: PeerId,
        /// The message.
        payload: &'a [u8],
    },
    /// The peer stayed silent past [`Config::peer_timeout`]; its state is gone.
    PeerFailed(PeerId),
}

/// A datagram to send to `peer`, lent until the next call on the engine.
#[derive(Debug, PartialEq, Eq)]
pub struct Transmit<'a> {
    /// Destination.
    pub peer: PeerId,
    /// The datagram, or its first part when `ext` is set.
    pub bytes: &'a [u8],
    /// The rest of the datagram, outside the engine (a packet queued by
    /// [`Engine::send_ext`]): the datagram is `bytes` followed by the `ext.len` bytes
    /// that `ext.token` names.
    pub ext: Option<ExtPayload>,
}

/// The tail of a data packet's payload that the engine does not store: it stays in
/// memory of the owner's caller, named by an opaque `token` (for the udp transport, the
/// bytes' address), from [`Engine::send_ext`] until the packet is acknowledged or its
/// peer dropped. The engine never reads it; every (re)transmission of the packet hands it
/// back in [`Transmit::ext`], and [`Engine::materialize`] copies it into the engine when
/// the memory is about to go away. This is what lets a large message go from its
/// sender's buffer to the kernel without a copy into the send pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtPayload {
    /// The owner's name for the bytes.
    pub token: u64,
    /// How many there are.
    pub len: u32,
}

/// Bytes of a stored packet on the wire: what the slot holds and its external tail.
fn packet_len(m: &crate::pool::SlotMeta) -> u32 {
    u32::from(m.len) + m.ext_len
}

fn ext_of(m: &crate::pool::SlotMeta) -> Option<ExtPayload> {
    (m.ext_len > 0).then_some(ExtPayload {
        token: m.ext_token,
        len: m.ext_len,
    })
}

/// Where a datagram of a [`TxBatch`] lives.
#[derive(Clone, Copy, Debug)]
enum Loc {
    /// A send-pool slot (a data packet).
    Pool(u32),
    /// Offset and length in the batch's control buffer.
    Ctl(u32, u32),
}

/// Datagrams taken from the engine together by [`Engine::poll_transmit_batch`]. Reused
/// from call to call, so that a warmed-up owner does not allocate per batch.
#[derive(Debug, Default)]
pub struct TxBatch {
    items: Vec<(u32, Loc)>,
    ctl: Vec<u8>,
}

impl TxBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Datagrams in the batch.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the batch holds no datagram.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// What a peer's entry says, for flush and diagnostics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerStatus {
    /// Never added, or removed.
    Unknown,
    /// Declared unreachable.
    Failed,
    /// Active.
    Active {
        /// Messages sent and not yet acknowledged (including those not yet transmitted);
        /// zero means everything sent so far was received (a completed flush).
        unacked: u32,
    },
}

/// Event counters, cumulative since the engine was created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Data packets transmitted for the first time.
    pub tx_data: u64,
    /// Data packets transmitted again (after a NAK or a timeout).
    pub tx_retransmits: u64,
    /// Standalone acknowledgements sent.
    pub tx_acks: u64,
    /// NAKs sent.
    pub tx_naks: u64,
    /// Keepalive probes sent.
    pub tx_probes: u64,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    /// Tail probes sent (the oldest packet resent after a few silent round trips, before
    /// the retransmission timeout and without backing off).
    pub tail_probes: u64,
    /// Messages accepted in order (each is delivered once).
    pub rx_delivered: u64,
    /// Data packets dropped as duplicates.
    pub rx_duplicates: u64,
    /// Data packets buffered out of order.
    pub rx_out_of_order: u64,
    /// Data packets dropped because they lie beyond the receive window.
    pub rx_out_of_window: u64,
    /// Datagrams the decoder rejected.
    pub rx_malformed: u64,
    /// Well-formed packets with impossible contents (acknowledging what was never sent,
    /// an oversized message), dropped.
    pub rx_invalid: u64,
    /// Packets from peers that are not active.
    pub rx_unknown_peer: u64,
    /// Packets carrying another session id than the one pinned for the peer.
    pub rx_stale_session: u64,
    /// Data packets dropped because the receive pool was exhausted (recovered by resend).
    pub rx_no_buffer: u64,
    /// NAKs received.
    pub rx_naks: u64,
    /// Sends refused because the peer's window was full.
    pub window_full: u64,
    /// Sends refused because the shared send pool was exhausted.
    pub tx_pool_exhausted: u64,
    /// Peers declared failed.
    pub peers_failed: u64,
    /// Congestion-window reductions after a loss named by a NAK (at most one per window
    /// of packets).
    pub cwnd_reductions: u64,
    /// Messages queued while the send window (congestion window or the peer's credit) was
    /// full: they wait for acknowledgements before their first transmission.
    pub window_limited: u64,
    /// Times pacing held a new data packet back (see [`Config::pacing`]).
    pub pace_waits: u64,
}

/// Per-peer state: fixed size, no heap allocation of its own.
#[derive(Clone, Debug)]
struct Peer {
    // Send direction.
    /// Oldest unacknowledged sequence number.
    snd_una: u32,
    /// Next sequence number to transmit for the first time.
    snd_sent: u32,
    /// Next sequence number to assign.
    snd_nxt: u32,
    /// Send list (send-pool slots of `snd_una..snd_nxt`).
    tx_head: u32,
    tx_tail: u32,
    /// Slot of `snd_sent`, or NIL.
    tx_cursor: u32,
    /// Where to look for the next slot flagged for retransmission.
    rtx_cursor: u32,
    /// Slots flagged for retransmission.
    rtx_pending: u16,
    /// `snd_sent` when the last retransmission timeout fired (see F_RECOVERY).
    recover: u32,
    /// Backoff exponent of the retransmission timeout.
    rto_shift: u8,
    flags: u8,
    /// Congestion window, bytes of packets (headers included) in flight.
    cwnd: u32,
    /// Slow-start threshold: below it the window doubles per round trip, above it grows
    /// by the larger of one packet and 1/16 of the window per round trip.
    ssthresh: u32,
    /// The receive space the peer last advertised (its credit), bytes.
    peer_credit: u32,
    /// Bytes of the packets `snd_una..snd_sent` (transmitted, not acknowledged).
    flight_bytes: u32,
    /// Bytes of the packets `snd_una..snd_nxt` (queued, not acknowledged).
    unacked_bytes: u32,
    /// `snd_sent` at the last window reduction: a loss of a packet sent before it belongs
    /// to the same congestion event and does not reduce the window again.
    cc_mark: u32,
    /// Credit epoch in which this peer last sent us data (low 16 bits).
    rx_epoch: u16,
    /// Smoothed round trip and its mean deviation, ns (0: no sample yet).
    srtt: u32,
    rttvar: u32,
    // Receive direction.
    /// Next sequence number to deliver; also the acknowledgement we send.
    rcv_nxt: u32,
    /// Out-of-order list (receive-pool slots, ascending sequence).
    ooo_head: u32,
    ooo_tail: u32,
    /// `rcv_nxt` when the last NAK went out.
    last_nak_rcv: u32,
    remote_session: u32,
    /// Messages accepted since the last acknowledgement we sent.
    unacked_rx: u16,
    // Times.
    rto_at: u64,
    ack_at: u64,
    last_nak_at: u64,
    last_heard: u64,
    /// When we last started waiting for this peer (data or a probe outstanding).
    outstanding_since: u64,
    /// Pacing: no new data packet before this time (see [`Peer::paced`]).
    pace_at: u64,
    /// Pacing: new data is paced until this time (0: never paced).
    pace_end: u64,
    /// Pacing held a new data packet back; a timer at `pace_at` releases it.
    pace_wait: bool,
    /// The owner awaits an answer from this peer ([`Engine::set_awaiting`]).
    awaiting: bool,
}

impl Peer {
    fn new(cfg: &Config, now: u64) -> Self {
        Self {
            snd_una: cfg.initial_seq,
            snd_sent: cfg.initial_seq,
            snd_nxt: cfg.initial_seq,
            tx_head: NIL,
            tx_tail: NIL,
            tx_cursor: NIL,
            rtx_cursor: NIL,
            rtx_pending: 0,
            recover: cfg.initial_seq,
            rto_shift: 0,
            flags: 0,
            cwnd: cfg.initial_window.saturating_mul(mss(cfg)),
            ssthresh: u32::MAX,
            peer_credit: cfg.initial_window.saturating_mul(mss(cfg)),
            flight_bytes: 0,
            unacked_bytes: 0,
            cc_mark: cfg.initial_seq,
            rx_epoch: u16::MAX,
            srtt: 0,
            rttvar: 0,
            rcv_nxt: cfg.initial_seq,
            ooo_head: NIL,
            ooo_tail: NIL,
            last_nak_rcv: 0,
            remote_session: 0,
            unacked_rx: 0,
            rto_at: NEVER,
            ack_at: NEVER,
            last_nak_at: NEVER,
            last_heard: now,
            outstanding_since: now,
            pace_at: 0,
            pace_end: 0,
            pace_wait: false,
            awaiting: false,
        }
    }

    /// Transmitted and not yet acknowledged.
    fn in_flight(&self) -> u32 {
        seq::dist(self.snd_una, self.snd_sent)
    }

    /// Assigned and not yet acknowledged.
    fn unacked(&self) -> u32 {
        seq::dist(self.snd_una, self.snd_nxt)
    }

    /// Whether we are waiting to hear from this peer.
    /// How long the peer may stay silent, with nothing in flight, before it is probed.
    fn probe_after(&self, cfg: &Config) -> Option<u64> {
        cfg.keepalive.or(self.awaiting.then_some(cfg.await_probe))
    }

    fn outstanding(&self) -> bool {
        self.unacked() > 0 || self.flags & F_PROBE_OUT != 0
    }

    fn fail_at(&self, cfg: &Config) -> u64 {
        self.last_heard
            .max(self.outstanding_since)
            .saturating_add(cfg.peer_timeout)
    }

    fn rto(&self, cfg: &Config) -> u64 {
        let measured = u64::from(self.srtt) + 4 * u64::from(self.rttvar);
        let mut r = cfg.initial_rto.max(measured);
        for _ in 0..self.rto_shift {
            r = r.saturating_mul(2);
        }
        r.min(cfg.max_rto)
    }

    /// When to probe the tail once nothing was acknowledged for a while: two smoothed
    /// round trips plus four deviations (at least `nak_interval`), well before the
    /// retransmission timeout. Without a round-trip sample, the timeout itself.
    fn probe_timeout(&self, cfg: &Config) -> u64 {
        let rto = self.rto(cfg);
        if self.srtt == 0 || self.flags & F_TAIL_PROBED != 0 {
            return rto;
        }
        let pto = 2 * u64::from(self.srtt) + 4 * u64::from(self.rttvar);
        pto.max(cfg.nak_interval).min(rto)
    }

    fn backoff(&mut self, cfg: &Config) {
        if self.rto(cfg) < cfg.max_rto {
            self.rto_shift += 1;
        }
    }

    /// Whether a packet would go out now; `new_len` is the size of the next new data
    /// packet, if there is one.
    fn has_work(&self, new_len: Option<u32>) -> bool {
        self.flags & (F_NAK_OWED | F_PROBE_OWED | F_ACK_NOW) != 0
            || self.rtx_pending > 0
            || new_len.is_some_and(|n| !self.pace_wait && self.may_send(n))
    }

    /// Whether new data to this peer is paced at `now`: for a while after a loss event
    /// that looked like an overflowing queue, once a round trip is known.
    fn paced(&self, now: u64) -> bool {
        now < self.pace_end && self.srtt > 0
    }

    /// The pacing interval after a new data packet of `len` bytes: the send window spread
    /// over a smoothed round trip, with a quarter more so that pacing itself never holds
    /// the window back.
    fn pace_gap(&self, len: u32) -> u64 {
        let rate_window = u64::from(self.wnd().max(1)) * 5 / 4;
        u64::from(len) * u64::from(self.srtt) / rate_window.max(1)
    }

    /// Starts (or extends) pacing after a loss event at `now`.
    fn start_pacing(&mut self, now: u64) {
        let hold = (u64::from(self.srtt) * PACE_HOLD_RTTS).max(PACE_HOLD_MIN_NS);
        if self.pace_end <= now {
            self.pace_at = now;
        }
        self.pace_end = now.saturating_add(hold);
    }

    /// Whether [`Engine::send`] takes another message: fewer than `window` unacknowledged,
    /// and less than [`QUEUE_AHEAD`] bytes (at most a send window, at least a packet)
    /// waiting behind those in flight, so that a slow receiver pushes back on the
    /// sender's caller instead of filling the shared send pool with data that cannot go
    /// yet, and a message is packed shortly before the kernel copies it again.
    fn has_room(&self, cfg: &Config) -> bool {
        let queued = self.unacked_bytes.saturating_sub(self.flight_bytes);
        self.unacked() < cfg.window && queued < QUEUE_AHEAD.min(self.wnd()).max(mss(cfg))
    }

    /// The send window: the smaller of the congestion window and the peer's credit.
    fn wnd(&self) -> u32 {
        self.cwnd.min(self.peer_credit)
    }

    /// Whether a new data packet of `len` bytes fits the window. One packet may always be
    /// in flight, whatever the window says, so that a peer can never stall for good.
    fn may_send(&self, len: u32) -> bool {
        self.snd_una == self.snd_sent || self.flight_bytes.saturating_add(len) <= self.wnd()
    }

    /// Loss: halve the window (once per window of packets), as TCP's fast recovery.
    fn on_loss(&mut self, cfg: &Config, timeout: bool) -> bool {
        if !timeout && seq::lt(self.snd_una, self.cc_mark) {
            return false;
        }
        let m = mss(cfg);
        let w = self.wnd().min(self.flight_bytes.max(m));
        self.ssthresh = (w / 2).max(MIN_CWND_PACKETS * m);
        // A timeout halves the window too (each further timeout halves it again) rather
        // than restarting from one packet: on a host path a timeout is as often a peer
        // that was not scheduled for a while as a congested link.
        self.cwnd = self.ssthresh;
        self.cc_mark = self.snd_sent;
        true
    }

    /// A round-trip sample (RFC 6298's smoothing, in ns).
    fn rtt_sample(&mut self, sample: u64) {
        let r = sample.min(u64::from(u32::MAX / 8)) as u32;
        if self.srtt == 0 {
            self.srtt = r.max(1);
            self.rttvar = r / 2;
        } else {
            self.rttvar = self.rttvar - self.rttvar / 4 + self.srtt.abs_diff(r) / 4;
            self.srtt = (self.srtt - self.srtt / 8 + r / 8).max(1);
        }
    }

    /// `bytes` of packets were acknowledged: grow the window (slow start below
    /// `ssthresh`, by the larger of one packet and 1/16 of the window per round trip
    /// above), never far past the peer's credit.
    fn on_acked_bytes(&mut self, cfg: &Config, bytes: u32) {
        let m = mss(cfg);
        let inc = if self.cwnd < self.ssthresh {
            bytes
        } else {
            // One packet per round trip (TCP's additive increase), or 1/16 of the window
            // per round trip when that is more (scalable increase: after a cut, a large
            // window on a short host or LAN path comes back within tens of round trips,
            // not thousands).
            let additive = u64::from(m) * u64::from(bytes) / u64::from(self.cwnd.max(1));
            additive.max(u64::from(bytes / 16)).max(1) as u32
        };
        let cap = self.peer_credit.saturating_add(m);
        if self.cwnd < cap {
            self.cwnd = self.cwnd.saturating_add(inc).min(cap);
        }
    }

    /// The earliest time at which a timer of this peer must run, if any.
    fn deadline(&self, cfg: &Config) -> Option<u64> {
        let mut d = NEVER;
        if self.in_flight() > 0 || self.flags & F_PROBE_OUT != 0 {
            d = d.min(self.rto_at);
        }
        if self.unacked_rx > 0 && self.flags & F_ACK_NOW == 0 {
            d = d.min(self.ack_at);
        }
        if self.pace_wait {
            d = d.min(self.pace_at);
        }
        if self.ooo_head != NIL && self.flags & F_NAK_OWED == 0 {
            d = d.min(self.nak_retry_at(cfg));
        }
        if self.outstanding() {
            d = d.min(self.fail_at(cfg));
        } else if let Some(k) = self.probe_after(cfg) {
            d = d.min(self.last_heard.saturating_add(k));
        }
        (d != NEVER).then_some(d)
    }

    /// While a hole persists, its NAK is repeated every `nak_interval`: the NAK or the
    /// retransmissions it asked for may have been lost, and the sender may have nothing
    /// new to send that would make us notice.
    fn nak_retry_at(&self, cfg: &Config) -> u64 {
        match self.last_nak_at {
            NEVER => 0,
            t => t.saturating_add(cfg.nak_interval),
        }
    }

    fn clear_ack_owed(&mut self) {
        self.flags &= !F_ACK_NOW;
        self.unacked_rx = 0;
        self.ack_at = NEVER;
    }
}

#[derive(Clone, Debug)]
enum PeerSlot {
    Vacant,
    Failed,
    Active(Peer),
}

#[derive(Clone, Copy, Debug)]
enum Queued {
    /// Peer index, receive-pool slot.
    Deliver(u32, u32),
    Failed(u32),
}

/// Where the datagram returned by `poll_transmit` lives.
enum Out {
    Scratch(usize),
    Tx(u32),
}

/// The reliability engine for all peers of one datagram endpoint. See the module docs.
pub struct Engine {
    peers: Vec<PeerSlot>,
    core: Core,
}

/// Everything but the peer table, kept apart so that one peer's record and the shared
/// state can be borrowed mutably at the same time.
struct Core {
    cfg: Config,
    tx: Pool,
    rx: Pool,
    timers: TimerHeap,
    /// Peers with something to transmit, served round-robin one packet at a time.
    ready: VecDeque<u32>,
    events: VecDeque<Queued>,
    /// Receive slot whose bytes the last `poll_event` lent out; freed on the next call.
    lent: u32,
    /// Peers with a non-empty out-of-order list (they share the free receive buffers).
    ooo_peers: u32,
    scratch: [u8; HEADER_LEN + MAX_SACK_BYTES],
    counters: Counters,
    /// The current credit epoch (see [`Config::credit_epoch`]) and when it started.
    epoch: u16,
    epoch_start: u64,
    /// Peers that sent us data in the current and in the previous epoch.
    epoch_senders: u32,
    prev_senders: u32,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("cfg", &self.core.cfg)
            .field("peers", &self.peers.len())
            .field("tx_in_use", &self.core.tx.in_use())
            .field("rx_in_use", &self.core.rx.in_use())
            .field("counters", &self.core.counters)
            .finish_non_exhaustive()
    }
}

// Per-peer state must stay small and fixed: the point of a connectionless transport.
const _: () = assert!(Engine::IDLE_PEER_BYTES <= 160);

/// Where an in-order message goes when it is delivered without being stored (see
/// [`Engine::on_packet_with`]).
type Direct<'a> = &'a mut dyn FnMut(PeerId, &[u8]);

/// A NAK halves the congestion window when it names more than 1/this of the packets in
/// flight as missing (see `on_nak`), and more than `LOSS_BACKOFF_MIN` of them (so that a
/// small window is not cut further and further by the same few random losses).
const LOSS_BACKOFF_FRACTION: u32 = 4;
const LOSS_BACKOFF_MIN: u32 = 4;
/// Packets that may leave back to back while pacing, after a pause.
const PACE_BURST: u64 = 4;
/// Pacing lasts this many smoothed round trips after the loss event that started it...
const PACE_HOLD_RTTS: u64 = 64;
/// ...and at least this long (ns).
const PACE_HOLD_MIN_NS: u64 = 50_000_000;
/// The congestion window is never cut below this many packets: at heavy random loss
/// (20%) a window of two packets would spend most of its time waiting out timeouts. The
/// receiver's own overflow is kept away by its credit, which has no such floor (one
/// packet).
const MIN_CWND_PACKETS: u32 = 16;

/// Bytes of the largest packet: the unit of the congestion window.
/// Bytes a peer's queue may hold beyond what its windows let go (see `has_room`): about
/// one batch of the owner's. More would be packed long before it leaves: on a fast host
/// path the packed bytes are out of the CPU's cache by the time the kernel reads them,
/// which costs more than the caller's retry.
const QUEUE_AHEAD: u32 = 64 << 10;

fn mss(cfg: &Config) -> u32 {
    (HEADER_LEN + cfg.max_payload) as u32
}

fn store(rx: &mut Pool, slot: u32, seq: u32, payload: &[u8]) {
    rx.buf_mut(slot)[..payload.len()].copy_from_slice(payload);
    let m = rx.meta_mut(slot);
    m.seq = seq;
    // Fits: checked against max_payload <= 65535 before.
    m.len = payload.len() as u16;
}

impl Engine {
    /// Bytes the engine holds for a peer that has nothing in flight: its table entry plus
    /// its timer-heap position. Constant, whatever the traffic history.
    pub const IDLE_PEER_BYTES: usize = std::mem::size_of::<PeerSlot>() + std::mem::size_of::<u32>();

    /// An engine with no peers. Allocates nothing per packet until traffic starts.
    pub fn new(cfg: Config) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            peers: Vec::new(),
            core: Core {
                tx: Pool::new(HEADER_LEN + cfg.max_payload, cfg.tx_pool_packets),
                rx: Pool::new(cfg.max_payload, cfg.rx_pool_packets),
                cfg,
                timers: TimerHeap::new(),
                ready: VecDeque::new(),
                events: VecDeque::new(),
                lent: NIL,
                ooo_peers: 0,
                scratch: [0; HEADER_LEN + MAX_SACK_BYTES],
                counters: Counters::default(),
                epoch: 0,
                epoch_start: 0,
                epoch_senders: 0,
                prev_senders: 0,
            },
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.core.cfg
    }

    /// Counters so far.
    pub fn counters(&self) -> &Counters {
        &self.core.counters
    }

    /// Packets currently held in the send and receive pools.
    pub fn pool_in_use(&self) -> (u32, u32) {
        (self.core.tx.in_use(), self.core.rx.in_use())
    }

    /// Bytes of packet storage allocated so far (both pools; grows up to the configured
    /// capacities and is then reused).
    pub fn pool_bytes(&self) -> usize {
        self.core.tx.allocated_bytes() + self.core.rx.allocated_bytes()
    }

    /// Peers with an armed timer (idle peers have none).
    pub fn armed_timers(&self) -> usize {
        self.core.timers.len()
    }

    /// A diagnostic dump for a stalled run: counters, pools, timers, and the state of every
    /// peer that is not idle (something in flight, queued, owed or buffered). Slow; for
    /// error reports, not for the data path.
    pub fn describe(&self) -> String {
        use std::fmt::Write;
        let (tx, rx) = self.pool_in_use();
        let mut s = format!(
            "pools in use tx {tx} rx {rx}, timers {}, next timeout {:?}, events queued {}\n{:?}\n",
            self.armed_timers(),
            self.next_timeout(),
            self.has_events(),
            self.core.counters
        );
        for (i, slot) in self.peers.iter().enumerate() {
            if let PeerSlot::Active(p) = slot {
                let idle = p.snd_una == p.snd_nxt && p.ooo_head == NIL && p.unacked_rx == 0;
                if !idle || p.awaiting {
                    let _ = writeln!(s, "peer {i}: {p:?}");
                }
            } else if let PeerSlot::Failed = slot {
                let _ = writeln!(s, "peer {i}: failed");
            }
        }
        s
    }

    /// Starts a fresh state for `peer` (sequence numbers from `initial_seq`). A peer that
    /// had failed may be added again; queued events of its previous incarnation are
    /// dropped.
    pub fn add_peer(&mut self, peer: PeerId, now: u64) -> Result<(), AddPeerError> {
        let core = &mut self.core;
        if peer.0 >= core.cfg.max_peers {
            return Err(AddPeerError::IdTooLarge);
        }
        let idx = peer.0 as usize;
        if self.peers.len() <= idx {
            self.peers.resize_with(idx + 1, || PeerSlot::Vacant);
            core.timers.grow(idx + 1);
        }
        match self.peers[idx] {
            PeerSlot::Active(_) => return Err(AddPeerError::Exists),
            PeerSlot::Failed => core.purge_events(peer.0),
            PeerSlot::Vacant => {}
        }
        let p = Peer::new(&core.cfg, now);
        core.rearm(&p, peer.0);
        self.peers[idx] = PeerSlot::Active(p);
        Ok(())
    }

    /// Forgets `peer`: drops its buffers, unacknowledged messages and queued events.
    /// Returns whether it was known (active or failed).
    pub fn remove_peer(&mut self, peer: PeerId) -> bool {
        let idx = peer.0;
        let Some(slot) = self.peers.get_mut(idx as usize) else {
            return false;
        };
        match slot {
            PeerSlot::Vacant => return false,
            PeerSlot::Failed => {}
            PeerSlot::Active(p) => {
                self.core.free_buffers(p);
                self.core.timers.set(idx, None);
            }
        }
        *slot = PeerSlot::Vacant;
        self.core.purge_events(idx);
        true
    }

    /// The state of `peer`.
    pub fn peer_status(&self, peer: PeerId) -> PeerStatus {
        match self.peers.get(peer.0 as usize) {
            Some(PeerSlot::Active(p)) => PeerStatus::Active {
                unacked: p.unacked(),
            },
            Some(PeerSlot::Failed) => PeerStatus::Failed,
            _ => PeerStatus::Unknown,
        }
    }

    /// Queues `payload` for reliable, ordered delivery to `peer`. The bytes are copied:
    /// the caller's buffer is free on return. The packet goes out through
    /// [`Engine::poll_transmit`].
    pub fn send(&mut self, peer: PeerId, payload: &[u8], now: u64) -> Result<(), SendError> {
        if payload.len() > self.core.cfg.max_payload {
            return Err(SendError::TooLarge);
        }
        self.send_with(peer, now, |buf| {
            buf[..payload.len()].copy_from_slice(payload);
            payload.len()
        })
    }

    /// Queues a message that `pack` writes straight into the packet buffer it is lent
    /// ([`Config::max_payload`] bytes), returning its length: the one copy of the message
    /// on the send path before the kernel's. `pack` runs only when the message is taken
    /// (the peer is active and has room); a returned length above the buffer's is
    /// refused with [`SendError::TooLarge`] and nothing is queued.
    pub fn send_with(
        &mut self,
        peer: PeerId,
        now: u64,
        pack: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<(), SendError> {
        self.enqueue(peer, now, None, pack)
    }

    /// Queues a message whose first part `pack` writes into the packet buffer (returning
    /// its length) and whose rest, `ext`, stays where it is (see [`ExtPayload`]): the
    /// caller keeps those bytes unchanged and readable until the peer acknowledged the
    /// message (its [`PeerStatus::Active`] `unacked` count says so), the peer failed or
    /// was removed, or [`Engine::materialize`] copied them. Not bounded by the bytes
    /// waiting behind the flight, as [`Engine::send_with`] is (nothing is packed ahead):
    /// callers bound that with [`Engine::room_for_ext`].
    pub fn send_ext(
        &mut self,
        peer: PeerId,
        now: u64,
        ext: ExtPayload,
        pack: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<(), SendError> {
        self.enqueue(peer, now, Some(ext), pack)
    }

    /// Whether `packets` messages of `bytes` in all, queued with [`Engine::send_ext`],
    /// would all be taken by `peer` now: the message window and the send pool have room
    /// for them, and what waits behind the packets in flight (them included) stays within
    /// one send window, or nothing waits yet.
    pub fn room_for_ext(&self, peer: PeerId, packets: u32, bytes: u64) -> bool {
        let Some(PeerSlot::Active(p)) = self.peers.get(peer.0 as usize) else {
            return false;
        };
        let cfg = &self.core.cfg;
        let queued = u64::from(p.unacked_bytes.saturating_sub(p.flight_bytes));
        p.unacked().saturating_add(packets) <= cfg.window
            && self.core.tx.in_use().saturating_add(packets) <= cfg.tx_pool_packets
            && (queued == 0 || queued + bytes <= u64::from(p.wnd()))
    }

    /// Copies the external payloads of `peer`'s unacknowledged messages into the engine:
    /// `fill(ext, buf)` writes the `ext.len` bytes that `ext` names into `buf`. Afterwards
    /// no packet of the peer refers to memory outside the engine. For an owner whose
    /// caller's memory may go away before the peer acknowledged it (an endpoint closed
    /// while its messages are still delivered).
    pub fn materialize(&mut self, peer: PeerId, mut fill: impl FnMut(ExtPayload, &mut [u8])) {
        let Some(PeerSlot::Active(p)) = self.peers.get(peer.0 as usize) else {
            return;
        };
        let tx = &mut self.core.tx;
        let mut s = p.tx_head;
        while s != NIL {
            let m = *tx.meta(s);
            if let Some(ext) = ext_of(&m) {
                let at = usize::from(m.len);
                fill(ext, &mut tx.buf_mut(s)[at..at + ext.len as usize]);
                let m = tx.meta_mut(s);
                // Fits: enqueue checked the whole packet against the slot.
                m.len += ext.len as u16;
                m.ext_len = 0;
                m.ext_token = 0;
            }
            s = m.next;
        }
    }

    fn enqueue(
        &mut self,
        peer: PeerId,
        now: u64,
        ext: Option<ExtPayload>,
        pack: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<(), SendError> {
        let idx = peer.0;
        let core = &mut self.core;
        let p = match self.peers.get_mut(idx as usize) {
            Some(PeerSlot::Active(p)) => p,
            Some(PeerSlot::Failed) => return Err(SendError::Failed),
            _ => return Err(SendError::UnknownPeer),
        };
        let room = match ext {
            None => p.has_room(&core.cfg),
            Some(_) => p.unacked() < core.cfg.window,
        };
        if !room {
            core.counters.window_full += 1;
            return Err(SendError::WindowFull);
        }
        let max = core.cfg.max_payload;
        let ext_len = ext.map_or(0, |e| e.len as usize);
        if ext_len > max {
            return Err(SendError::TooLarge);
        }
        let Some(slot) = core.tx.alloc() else {
            core.counters.tx_pool_exhausted += 1;
            return Err(SendError::WindowFull);
        };
        let buf = core.tx.buf_mut(slot);
        let head = pack(&mut buf[HEADER_LEN..HEADER_LEN + max - ext_len]);
        if head > max - ext_len {
            core.tx.free(slot);
            return Err(SendError::TooLarge);
        }
        let n = head + ext_len;
        // The acknowledgement and credit are filled in when the packet is transmitted.
        packet::encode_data_header(buf, core.cfg.session, p.snd_nxt, n);
        let m = core.tx.meta_mut(slot);
        m.seq = p.snd_nxt;
        m.len = (HEADER_LEN + head) as u16; // <= 65535: max_payload checked by validate
        m.ext_token = ext.map_or(0, |e| e.token);
        m.ext_len = ext_len as u32;
        m.flags = 0;
        m.next = NIL;
        if p.tx_tail == NIL {
            p.tx_head = slot;
        } else {
            core.tx.meta_mut(p.tx_tail).next = slot;
        }
        p.tx_tail = slot;
        if p.tx_cursor == NIL {
            p.tx_cursor = slot;
        }
        if !p.outstanding() {
            p.outstanding_since = now;
        }
        // It waits if what is queued before it, and it, exceed the window.
        if p.unacked() > 0 && p.unacked_bytes + (HEADER_LEN + n) as u32 > p.wnd() {
            core.counters.window_limited += 1;
        }
        p.snd_nxt = p.snd_nxt.wrapping_add(1);
        p.unacked_bytes = p.unacked_bytes.saturating_add((HEADER_LEN + n) as u32);
        core.mark_ready(p, idx);
        core.rearm(p, idx);
        Ok(())
    }

    /// A mark of what was queued to `peer` so far (the number the next message will
    /// get), for [`Engine::acked_to`]; `None` unless the peer is active.
    pub fn queued_mark(&self, peer: PeerId) -> Option<u32> {
        match self.peers.get(peer.0 as usize) {
            Some(PeerSlot::Active(p)) => Some(p.snd_nxt),
            _ => None,
        }
    }

    /// Whether `peer` acknowledged every message queued before `mark` was taken
    /// ([`Engine::queued_mark`]), whatever was queued since; `None` unless the peer is
    /// active. Lets one message's sender wait for its own acknowledgement, not for a
    /// queue that later messages keep from ever draining.
    pub fn acked_to(&self, peer: PeerId, mark: u32) -> Option<bool> {
        match self.peers.get(peer.0 as usize) {
            Some(PeerSlot::Active(p)) => Some(!seq::lt(p.snd_una, mark)),
            _ => None,
        }
    }

    /// Tells the engine whether its owner awaits an answer from `peer` (a reply to a
    /// request the peer acknowledged). While it does and nothing is in flight, a silent
    /// peer is probed every [`Config::await_probe`] and fails after
    /// [`Config::peer_timeout`] without an answer, as with keepalive on. Unknown or failed
    /// peers are ignored.
    pub fn set_awaiting(&mut self, peer: PeerId, on: bool) {
        let idx = peer.0;
        if let Some(PeerSlot::Active(p)) = self.peers.get_mut(idx as usize) {
            if p.awaiting != on {
                p.awaiting = on;
                self.core.rearm(p, idx);
            }
        }
    }

    /// Tells the engine how many bytes of datagrams its owner can now hold unread (see
    /// [`Config::rcv_buf`]); the credit advertised from the next packet on follows.
    pub fn set_rcv_buf(&mut self, bytes: u32) {
        self.core.cfg.rcv_buf = bytes.max(1);
    }

    /// Whether [`Engine::send`] to `peer` would take a message now (an active peer with
    /// room in its window and a free slot in the send pool).
    pub fn can_send(&self, peer: PeerId) -> bool {
        match self.peers.get(peer.0 as usize) {
            Some(PeerSlot::Active(p)) => {
                p.has_room(&self.core.cfg) && self.core.tx.in_use() < self.core.cfg.tx_pool_packets
            }
            _ => false,
        }
    }

    /// The congestion window and the peer's credit, in bytes, of an active peer.
    pub fn peer_window(&self, peer: PeerId) -> Option<(u32, u32)> {
        match self.peers.get(peer.0 as usize) {
            Some(PeerSlot::Active(p)) => Some((p.cwnd, p.peer_credit)),
            _ => None,
        }
    }

    /// Processes one datagram received from `from`. Malformed, invalid and stale packets
    /// are counted and dropped; nothing in `bytes` is trusted.
    pub fn on_packet(&mut self, from: PeerId, bytes: &[u8], now: u64) {
        self.on_packet_inner(from, bytes, now, None);
    }

    /// [`Engine::on_packet`], except that a message that is next in order, when nothing
    /// else waits to be delivered (no queued event, no out-of-order message of its peer),
    /// is handed to `deliver` at once, straight from `bytes`, instead of being copied into
    /// the receive pool and queued: what [`Engine::poll_event`] would have returned next,
    /// one copy earlier. Everything else is as with `on_packet` (queued events must still
    /// be drained, and before the next datagram, to keep the direct path open).
    pub fn on_packet_with(
        &mut self,
        from: PeerId,
        bytes: &[u8],
        now: u64,
        deliver: &mut dyn FnMut(PeerId, &[u8]),
    ) {
        self.on_packet_inner(from, bytes, now, Some(deliver));
    }

    fn on_packet_inner(
        &mut self,
        from: PeerId,
        bytes: &[u8],
        now: u64,
        direct: Option<Direct<'_>>,
    ) {
        let core = &mut self.core;
        core.reclaim();
        let Ok(pkt) = Packet::decode(bytes) else {
            core.counters.rx_malformed += 1;
            return;
        };
        let idx = from.0;
        let Some(PeerSlot::Active(p)) = self.peers.get_mut(idx as usize) else {
            core.counters.rx_unknown_peer += 1;
            return;
        };
        if p.flags & F_SESSION != 0 && p.remote_session != pkt.session {
            core.counters.rx_stale_session += 1;
            return;
        }
        // Validate everything before changing any state.
        let acked = seq::dist(p.snd_una, pkt.ack);
        let advance = if acked <= p.in_flight() {
            acked
        } else if seq::lt(pkt.ack, p.snd_una) {
            0 // an old acknowledgement, overtaken by a newer one
        } else {
            core.counters.rx_invalid += 1; // acknowledges what we never sent
            return;
        };
        if let Body::Data { seq, payload, .. } = pkt.body {
            if payload.len() > core.cfg.max_payload {
                core.counters.rx_invalid += 1;
                return;
            }
            if !seq::lt(seq, p.rcv_nxt) && seq::dist(p.rcv_nxt, seq) >= core.cfg.window {
                core.counters.rx_out_of_window += 1;
                return;
            }
        }

        p.flags |= F_SESSION;
        p.remote_session = pkt.session;
        p.peer_credit = pkt.credit;
        p.last_heard = now;
        if matches!(pkt.body, Body::Data { .. }) {
            core.count_sender(p, now);
        }
        p.flags &= !(F_PROBE_OUT | F_PROBE_OWED);
        if advance > 0 {
            core.on_ack(p, advance, now);
        }
        match pkt.body {
            Body::Data {
                seq,
                ack_req,
                payload,
            } => core.on_data(p, idx, seq, ack_req, payload, now, direct),
            Body::Ack { ack_req } => {
                if ack_req {
                    p.flags |= F_ACK_NOW;
                }
            }
            Body::Nak { sack } => {
                core.counters.rx_naks += 1;
                if pkt.ack == p.snd_una {
                    core.on_nak(p, sack, now);
                }
            }
        }
        core.mark_ready(p, idx);
        core.rearm(p, idx);
    }

    /// The next datagram to put on the wire, if any: NAKs first, then retransmissions,
    /// then new data, then probes and standalone acknowledgements; peers take turns one
    /// packet at a time. Call until it returns `None` after every other call.
    pub fn poll_transmit(&mut self, now: u64) -> Option<Transmit<'_>> {
        let core = &mut self.core;
        while let Some(idx) = core.ready.pop_front() {
            let Some(PeerSlot::Active(p)) = self.peers.get_mut(idx as usize) else {
                continue;
            };
            p.flags &= !F_READY;
            let out = core.build_packet(p, now);
            core.mark_ready(p, idx);
            core.rearm(p, idx);
            let (bytes, ext) = match out {
                None => continue,
                Some(Out::Scratch(n)) => (&core.scratch[..n], None),
                Some(Out::Tx(slot)) => (core.tx.data(slot), ext_of(core.tx.meta(slot))),
            };
            return Some(Transmit {
                peer: PeerId(idx),
                bytes,
                ext,
            });
        }
        None
    }

    /// Takes up to `max` datagrams at once, in the order [`Engine::poll_transmit`] would
    /// return them, into `batch` (cleared first), so that the owner can hand them to the
    /// kernel in one call (sendmmsg, UDP GSO). Read them with [`Engine::batch_item`]: they
    /// stay valid until the next `&mut` call on the engine. Data packets are not copied
    /// (the batch names their send-pool slots); control packets (acks, NAKs, probes) are
    /// copied into the batch's own small buffer. Returns the number taken.
    pub fn poll_transmit_batch(&mut self, now: u64, batch: &mut TxBatch, max: usize) -> usize {
        batch.items.clear();
        batch.ctl.clear();
        let core = &mut self.core;
        while batch.items.len() < max {
            let Some(idx) = core.ready.pop_front() else {
                break;
            };
            let Some(PeerSlot::Active(p)) = self.peers.get_mut(idx as usize) else {
                continue;
            };
            p.flags &= !F_READY;
            let out = core.build_packet(p, now);
            core.mark_ready(p, idx);
            core.rearm(p, idx);
            let loc = match out {
                None => continue,
                Some(Out::Scratch(n)) => {
                    let off = batch.ctl.len() as u32;
                    batch.ctl.extend_from_slice(&core.scratch[..n]);
                    Loc::Ctl(off, n as u32)
                }
                Some(Out::Tx(slot)) => Loc::Pool(slot),
            };
            batch.items.push((idx, loc));
        }
        batch.items.len()
    }

    /// Datagram `i` of a batch filled by [`Engine::poll_transmit_batch`] since the last
    /// `&mut` call on the engine. Panics if `i >= batch.len()`.
    pub fn batch_item<'a>(&'a self, batch: &'a TxBatch, i: usize) -> Transmit<'a> {
        let (peer, loc) = batch.items[i];
        let (bytes, ext) = match loc {
            Loc::Pool(slot) => (self.core.tx.data(slot), ext_of(self.core.tx.meta(slot))),
            Loc::Ctl(off, n) => (&batch.ctl[off as usize..(off + n) as usize], None),
        };
        Transmit {
            peer: PeerId(peer),
            bytes,
            ext,
        }
    }

    /// The next event, if any. A delivered message's bytes are lent until the next call
    /// on the engine.
    pub fn poll_event(&mut self) -> Option<Event<'_>> {
        let core = &mut self.core;
        core.reclaim();
        match core.events.pop_front()? {
            Queued::Deliver(idx, slot) => {
                core.lent = slot;
                Some(Event::Deliver {
                    peer: PeerId(idx),
                    payload: core.rx.data(slot),
                })
            }
            Queued::Failed(idx) => Some(Event::PeerFailed(PeerId(idx))),
        }
    }

    /// Whether [`Engine::poll_event`] has something.
    pub fn has_events(&self) -> bool {
        !self.core.events.is_empty()
    }

    /// When [`Engine::on_timeout`] must next be called, if any timer is armed. Exact: no
    /// spurious wake-ups.
    pub fn next_timeout(&self) -> Option<u64> {
        self.core.timers.peek().map(|(t, _)| t)
    }

    /// Runs every timer due at `now`: retransmissions, delayed acknowledgements, NAK
    /// repeats, keepalive probes and failure detection.
    pub fn on_timeout(&mut self, now: u64) {
        while let Some((t, idx)) = self.core.timers.peek() {
            if t > now {
                break;
            }
            self.service(idx, now);
            if self.core.timers.get(idx).is_some_and(|next| next <= now) {
                // A timer that stays due would spin here; every path of `service` moves
                // it into the future, so this is a bug guard, not a code path.
                debug_assert!(false, "peer {idx} timer not advanced");
                self.core.timers.set(idx, now.checked_add(1));
            }
        }
    }

    fn service(&mut self, idx: u32, now: u64) {
        let core = &mut self.core;
        let Some(slot @ PeerSlot::Active(_)) = self.peers.get_mut(idx as usize) else {
            core.timers.set(idx, None);
            return;
        };
        let PeerSlot::Active(p) = slot else {
            return;
        };
        let cfg = &core.cfg;
        if p.outstanding() && now >= p.fail_at(cfg) {
            core.free_buffers(p);
            *slot = PeerSlot::Failed;
            core.timers.set(idx, None);
            core.events.push_back(Queued::Failed(idx));
            core.counters.peers_failed += 1;
            return;
        }
        if now >= p.rto_at {
            if p.in_flight() > 0 && p.flags & F_TAIL_PROBED == 0 && p.srtt > 0 {
                // Tail probe: nothing was acknowledged for a few round trips, most likely
                // because the last packets of a burst were lost and nothing behind them
                // makes the receiver notice. Resend the oldest asking for an immediate
                // answer (an ACK, or a NAK naming the holes), without backing off; the
                // full timeout follows if that stays unanswered too.
                let head = p.tx_head;
                let m = core.tx.meta_mut(head);
                if m.flags & S_RTX == 0 {
                    m.flags |= S_RTX;
                    p.rtx_pending += 1;
                }
                m.flags |= S_ACK_REQ;
                p.rtx_cursor = head;
                p.flags |= F_TAIL_PROBED | F_RECOVERY;
                p.recover = p.snd_sent;
                core.counters.tail_probes += 1;
                let rto = p.rto(cfg);
                p.rto_at = now.saturating_add(rto);
            } else if p.in_flight() > 0 {
                // Resend the oldest packet asking for an immediate answer; the answer (an
                // ACK, or a NAK naming the holes) drives the rest of the recovery.
                let head = p.tx_head;
                let m = core.tx.meta_mut(head);
                if m.flags & S_RTX == 0 {
                    m.flags |= S_RTX;
                    p.rtx_pending += 1;
                }
                m.flags |= S_ACK_REQ;
                p.rtx_cursor = head;
                p.flags |= F_RECOVERY;
                p.recover = p.snd_sent;
                p.on_loss(cfg, true);
                core.counters.timeouts += 1;
                p.backoff(cfg);
                p.rto_at = now.saturating_add(p.rto(cfg));
            } else if p.flags & F_PROBE_OUT != 0 {
                p.flags |= F_PROBE_OWED;
                core.counters.timeouts += 1;
                p.backoff(cfg);
                p.rto_at = now.saturating_add(p.rto(cfg));
            } else {
                p.rto_at = NEVER;
            }
        }
        if p.unacked_rx > 0 && now >= p.ack_at {
            p.flags |= F_ACK_NOW;
        }
        if p.pace_wait && now >= p.pace_at {
            p.pace_wait = false;
        }
        if p.ooo_head != NIL && now >= p.nak_retry_at(cfg) {
            p.flags |= F_NAK_OWED;
        }
        if !p.outstanding() {
            if let Some(k) = p.probe_after(cfg) {
                if now >= p.last_heard.saturating_add(k) {
                    p.flags |= F_PROBE_OUT | F_PROBE_OWED;
                    p.outstanding_since = now;
                    p.rto_shift = 0;
                    p.rto_at = now.saturating_add(p.rto(cfg));
                }
            }
        }
        core.mark_ready(p, idx);
        core.rearm(p, idx);
    }
}

impl Core {
    fn reclaim(&mut self) {
        if self.lent != NIL {
            self.rx.free(self.lent);
            self.lent = NIL;
        }
    }

    fn mark_ready(&mut self, p: &mut Peer, idx: u32) {
        if p.flags & F_READY == 0 && p.has_work(self.next_new_len(p)) {
            p.flags |= F_READY;
            self.ready.push_back(idx);
        }
    }

    /// Bytes of the peer's next new data packet, if it has one.
    fn next_new_len(&self, p: &Peer) -> Option<u32> {
        (p.tx_cursor != NIL).then(|| packet_len(self.tx.meta(p.tx_cursor)))
    }

    /// The credit we advertise to each peer: our receive space shared among the peers that
    /// sent us data lately (this epoch or the last), never below one packet.
    fn credit(&self) -> u32 {
        let senders = self.epoch_senders.max(self.prev_senders).max(1);
        (self.cfg.rcv_buf / senders).max(mss(&self.cfg))
    }

    /// Counts `p` among this epoch's senders, starting a new epoch when the last one ended.
    fn count_sender(&mut self, p: &mut Peer, now: u64) {
        if now.saturating_sub(self.epoch_start) >= self.cfg.credit_epoch {
            let elapsed = now.saturating_sub(self.epoch_start);
            // An epoch with no data at all in between leaves no senders to remember.
            self.prev_senders = if elapsed >= 2 * self.cfg.credit_epoch {
                0
            } else {
                self.epoch_senders
            };
            self.epoch_senders = 0;
            self.epoch = self.epoch.wrapping_add(1);
            self.epoch_start = now;
        }
        if p.rx_epoch != self.epoch {
            p.rx_epoch = self.epoch;
            self.epoch_senders += 1;
        }
    }

    fn rearm(&mut self, p: &Peer, idx: u32) {
        self.timers.set(idx, p.deadline(&self.cfg));
    }

    /// Returns all pool slots the peer holds.
    fn free_buffers(&mut self, p: &mut Peer) {
        if p.ooo_head != NIL {
            self.ooo_peers -= 1;
        }
        let mut s = p.tx_head;
        while s != NIL {
            let next = self.tx.meta(s).next;
            self.tx.free(s);
            s = next;
        }
        let mut s = p.ooo_head;
        while s != NIL {
            let next = self.rx.meta(s).next;
            self.rx.free(s);
            s = next;
        }
        p.tx_head = NIL;
        p.tx_tail = NIL;
        p.tx_cursor = NIL;
        p.ooo_head = NIL;
        p.ooo_tail = NIL;
    }

    /// Drops the queued events of one peer, returning their buffers.
    fn purge_events(&mut self, idx: u32) {
        let rx = &mut self.rx;
        self.events.retain(|e| match *e {
            Queued::Deliver(i, s) if i == idx => {
                rx.free(s);
                false
            }
            Queued::Failed(i) => i != idx,
            _ => true,
        });
    }

    /// How many receive buffers may be in use for an out-of-order packet to be buffered.
    /// The rest is reserved for in-order packets: if out-of-order packets of many peers
    /// could take every buffer, none would be left for the packets that fill their holes,
    /// and no peer would ever make progress again.
    fn ooo_limit(&self) -> u32 {
        self.cfg.rx_pool_packets - (self.cfg.rx_pool_packets / 8).max(1)
    }

    /// The cumulative acknowledgement moved forward by `advance` (<= in flight).
    fn on_ack(&mut self, p: &mut Peer, advance: u32, now: u64) {
        let tx = &mut self.tx;
        let mut cursor_freed = false;
        let mut bytes: u32 = 0;
        let mut sample = None;
        let mut repaired = false;
        for _ in 0..advance {
            let s = p.tx_head;
            let m = *tx.meta(s);
            bytes += packet_len(&m);
            // Karn: only a packet sent once gives an unambiguous round trip; and when a
            // resent packet filled a hole, the packets after it waited for the repair,
            // not for the path: no sample from this acknowledgement at all.
            repaired |= m.flags & S_RESENT != 0;
            sample = (!repaired).then(|| now.saturating_sub(m.sent_at));
            if m.flags & S_RTX != 0 {
                p.rtx_pending -= 1;
            }
            cursor_freed |= s == p.rtx_cursor;
            p.tx_head = m.next;
            tx.free(s);
        }
        if p.tx_head == NIL {
            p.tx_tail = NIL;
        }
        if p.rtx_pending == 0 {
            p.rtx_cursor = NIL;
        } else if cursor_freed {
            p.rtx_cursor = p.tx_head;
        }
        p.snd_una = p.snd_una.wrapping_add(advance);
        p.flight_bytes = p.flight_bytes.saturating_sub(bytes);
        p.unacked_bytes = p.unacked_bytes.saturating_sub(bytes);
        if p.snd_una == p.snd_sent {
            p.flight_bytes = 0;
        }
        p.on_acked_bytes(&self.cfg, bytes);
        if let Some(r) = sample {
            p.rtt_sample(r);
        }
        if p.flags & F_RECOVERY != 0 {
            if seq::lt(p.snd_una, p.recover) {
                // A partial acknowledgement after a timeout: the next packet was most
                // likely lost too (a tail loss no NAK can name). Resend it now, asking for
                // an immediate answer, instead of waiting for another timeout per packet.
                let head = p.tx_head;
                let m = tx.meta_mut(head);
                if m.flags & S_RTX == 0 && now.saturating_sub(m.sent_at) >= self.cfg.nak_interval {
                    m.flags |= S_RTX | S_ACK_REQ;
                    p.rtx_pending += 1;
                    p.rtx_cursor = head;
                }
            } else {
                p.flags &= !F_RECOVERY;
            }
        }
        p.rto_shift = 0;
        p.flags &= !F_TAIL_PROBED;
        p.rto_at = if p.in_flight() > 0 {
            now.saturating_add(p.probe_timeout(&self.cfg))
        } else {
            NEVER
        };
    }

    /// The peer misses `snd_una` and holds what `sack` says beyond it: flag the holes
    /// below the highest packet it holds for retransmission, unless resent too recently.
    fn on_nak(&mut self, p: &mut Peer, sack: &[u8], now: u64) {
        let in_flight = p.in_flight();
        if in_flight == 0 {
            return;
        }
        let highest = sack
            .iter()
            .enumerate()
            .rev()
            .find(|(_, &b)| b != 0)
            .map(|(i, &b)| i as u32 * 8 + 7 - b.leading_zeros());
        // Index 0 is snd_una itself; index i >= 1 is snd_una + i, held if bit i - 1 is set.
        let n = highest.map_or(1, |h| h + 1).min(in_flight);
        let held = |i: u32| -> bool {
            let b = (i - 1) as usize;
            sack.get(b / 8).is_some_and(|&x| x & (1 << (b % 8)) != 0)
        };
        let mut s = p.tx_head;
        let mut holes = 0u32;
        let mut marked = false;
        for i in 0..n {
            let m = self.tx.meta_mut(s);
            if i == 0 || !held(i) {
                holes += 1;
                if m.flags & S_RTX == 0 && now.saturating_sub(m.sent_at) >= self.cfg.nak_interval {
                    m.flags |= S_RTX;
                    p.rtx_pending += 1;
                    marked = true;
                }
            }
            s = m.next;
        }
        if marked {
            p.rtx_cursor = p.tx_head;
            // A receiver's overflowing socket is kept away by its credit; what is left to
            // react to is an overflowing queue on the path, which drops everything that
            // arrives until it drains: a large share of the flight. Holes here and there
            // (random loss; or one GSO batch dropped whole, which is a run of datagrams
            // but one loss event) are resent without halving the rate. Back off when more
            // than a quarter of what is in flight is missing.
            let runs = holes > LOSS_BACKOFF_MIN && holes * LOSS_BACKOFF_FRACTION > in_flight;
            if runs && p.on_loss(&self.cfg, false) {
                self.counters.cwnd_reductions += 1;
                if self.cfg.pacing {
                    p.start_pacing(now);
                }
            }
        }
    }

    /// A data packet within the window (checked by the caller).
    #[allow(clippy::too_many_arguments)]
    fn on_data(
        &mut self,
        p: &mut Peer,
        idx: u32,
        seq: u32,
        ack_req: bool,
        payload: &[u8],
        now: u64,
        direct: Option<Direct<'_>>,
    ) {
        if ack_req {
            p.flags |= F_ACK_NOW;
        }
        if seq::lt(seq, p.rcv_nxt) {
            // Our acknowledgement was probably lost: repeat it now.
            self.counters.rx_duplicates += 1;
            p.flags |= F_ACK_NOW;
            return;
        }
        let off = seq::dist(p.rcv_nxt, seq);
        if off == 0 {
            self.on_in_order(p, idx, seq, payload, now, direct);
        } else {
            self.on_out_of_order(p, off, seq, payload, now);
        }
    }

    fn on_in_order(
        &mut self,
        p: &mut Peer,
        idx: u32,
        seq: u32,
        payload: &[u8],
        now: u64,
        direct: Option<Direct<'_>>,
    ) {
        let rx = &mut self.rx;
        match direct {
            // Next in order and nothing ahead of it: deliver without storing.
            Some(deliver) if self.events.is_empty() && p.ooo_head == NIL => {
                deliver(PeerId(idx), payload);
            }
            _ => {
                let Some(s) = rx.alloc() else {
                    self.counters.rx_no_buffer += 1;
                    return;
                };
                store(rx, s, seq, payload);
                self.events.push_back(Queued::Deliver(idx, s));
            }
        }
        p.rcv_nxt = p.rcv_nxt.wrapping_add(1);
        let mut n: u32 = 1;
        let had_ooo = p.ooo_head != NIL;
        while p.ooo_head != NIL && rx.meta(p.ooo_head).seq == p.rcv_nxt {
            let s = p.ooo_head;
            p.ooo_head = rx.meta(s).next;
            self.events.push_back(Queued::Deliver(idx, s));
            p.rcv_nxt = p.rcv_nxt.wrapping_add(1);
            n += 1;
        }
        if p.ooo_head == NIL {
            p.ooo_tail = NIL;
            p.flags &= !F_NAK_OWED; // no hole any more
            if had_ooo {
                self.ooo_peers -= 1;
            }
        }
        self.counters.rx_delivered += u64::from(n);
        if p.unacked_rx == 0 {
            p.ack_at = now.saturating_add(self.cfg.ack_delay);
        }
        let owed = u32::from(p.unacked_rx) + n;
        p.unacked_rx = owed.min(u32::from(u16::MAX)) as u16;
        if owed >= self.cfg.ack_every {
            p.flags |= F_ACK_NOW;
        }
        if p.ooo_head != NIL {
            self.maybe_nak(p, now); // the next hole is known already
        }
    }

    /// Inserts into the ascending out-of-order list unless already held.
    fn on_out_of_order(&mut self, p: &mut Peer, off: u32, seq: u32, payload: &[u8], now: u64) {
        let limit = self.ooo_limit();
        let rx = &mut self.rx;
        let rel = |rx: &Pool, s: u32| seq::dist(p.rcv_nxt, rx.meta(s).seq);
        // Most arrivals extend the list (the next packets after a hole): check the tail.
        let (prev, cur) = if p.ooo_tail != NIL && rel(rx, p.ooo_tail) < off {
            (p.ooo_tail, NIL)
        } else {
            let (mut prev, mut cur) = (NIL, p.ooo_head);
            while cur != NIL && rel(rx, cur) < off {
                prev = cur;
                cur = rx.meta(cur).next;
            }
            (prev, cur)
        };
        if cur != NIL && rel(rx, cur) == off {
            self.counters.rx_duplicates += 1;
        } else if let Some(s) = (rx.in_use() < limit).then(|| rx.alloc()).flatten() {
            store(rx, s, seq, payload);
            rx.meta_mut(s).next = cur;
            if p.ooo_head == NIL {
                self.ooo_peers += 1;
            }
            if prev == NIL {
                p.ooo_head = s;
            } else {
                rx.meta_mut(prev).next = s;
            }
            if cur == NIL {
                p.ooo_tail = s;
            }
            self.counters.rx_out_of_order += 1;
        } else {
            self.counters.rx_no_buffer += 1;
        }
        self.maybe_nak(p, now);
    }

    fn maybe_nak(&self, p: &mut Peer, now: u64) {
        if p.last_nak_at == NEVER
            || p.last_nak_rcv != p.rcv_nxt
            || now.saturating_sub(p.last_nak_at) >= self.cfg.nak_interval
        {
            p.flags |= F_NAK_OWED;
        }
    }

    /// Encodes a control packet (carrying our acknowledgement) into the scratch buffer.
    fn control(&mut self, p: &mut Peer, body: Body<'_>) -> Out {
        let pkt = Packet {
            session: self.cfg.session,
            ack: p.rcv_nxt,
            credit: self.credit(),
            body,
        };
        p.clear_ack_owed();
        // Cannot fail: scratch holds a header and the largest bitmap.
        Out::Scratch(pkt.encode_into(&mut self.scratch).unwrap_or(0))
    }

    /// Picks and prepares the peer's next packet.
    fn build_packet(&mut self, p: &mut Peer, now: u64) -> Option<Out> {
        if p.flags & F_NAK_OWED != 0 {
            p.flags &= !F_NAK_OWED;
            return Some(self.build_nak(p, now));
        }
        if p.rtx_pending > 0 {
            if let Some(out) = self.build_retransmit(p, now) {
                return Some(out);
            }
        }
        if let Some(len) = self.next_new_len(p) {
            if !p.may_send(len) {
                return self.build_control(p);
            }
            let paced = p.paced(now);
            if paced && now < p.pace_at {
                p.pace_wait = true;
                self.counters.pace_waits += 1;
                return self.build_control(p);
            }
            if paced {
                // Up to PACE_BURST packets may leave together after a pause; beyond that
                // one per gap.
                let gap = p.pace_gap(len);
                let floor = now.saturating_sub(gap.saturating_mul(PACE_BURST));
                p.pace_at = p.pace_at.max(floor).saturating_add(gap);
            }
            let s = p.tx_cursor;
            if p.in_flight() == 0 {
                p.rto_shift = 0;
                p.flags &= !F_TAIL_PROBED;
                p.rto_at = now.saturating_add(p.probe_timeout(&self.cfg));
            }
            p.snd_sent = p.snd_sent.wrapping_add(1);
            p.flight_bytes = p.flight_bytes.saturating_add(len);
            // The packet that fills the window asks for an acknowledgement at once: the
            // sender is stalled until one comes, so waiting out the ack delay is waste.
            let ack_req = p.in_flight() >= self.cfg.window;
            let m = self.tx.meta_mut(s);
            m.sent_at = now;
            p.tx_cursor = m.next;
            let credit = self.credit();
            packet::patch_data(self.tx.buf_mut(s), p.rcv_nxt, credit, ack_req);
            p.clear_ack_owed();
            self.counters.tx_data += 1;
            return Some(Out::Tx(s));
        }
        self.build_control(p)
    }

    /// A probe or a standalone acknowledgement, if one is owed.
    fn build_control(&mut self, p: &mut Peer) -> Option<Out> {
        if p.flags & F_PROBE_OWED != 0 {
            p.flags &= !F_PROBE_OWED;
            self.counters.tx_probes += 1;
            return Some(self.control(p, Body::Ack { ack_req: true }));
        }
        if p.flags & F_ACK_NOW != 0 {
            self.counters.tx_acks += 1;
            return Some(self.control(p, Body::Ack { ack_req: false }));
        }
        None
    }

    fn build_nak(&mut self, p: &mut Peer, now: u64) -> Out {
        // The out-of-order list is at most one window long and exists only while a hole
        // does; walking it per NAK is cheaper than a bitmap in every idle peer. It may be
        // empty when the packets past the hole could not be buffered: the NAK then names
        // the hole alone.
        //
        // The sender resends every hole below the highest packet the bitmap shows, so the
        // bitmap stops before it names more holes than we have buffers left for: when the
        // receive pool is under pressure (many peers sending at once), a NAK naming a whole
        // window of holes would bring back a window of packets only for most of them to be
        // dropped again, over and over. The free buffers are shared among the peers that
        // have holes.
        let free = self.ooo_limit().saturating_sub(self.rx.in_use());
        let budget = (free / self.ooo_peers.max(1)).max(1);
        let mut sack = [0u8; MAX_SACK_BYTES];
        let mut len = 0;
        let mut holes = 1; // rcv_nxt itself
        let mut prev = 0; // offset of the previous packet held
        let mut s = p.ooo_head;
        while s != NIL {
            let m = self.rx.meta(s);
            let off = seq::dist(p.rcv_nxt, m.seq);
            holes += off - prev - 1;
            if holes > budget || off as usize > MAX_SACK_BYTES * 8 {
                break; // ascending: the rest would name more holes, or not fit
            }
            let bit = off as usize - 1;
            sack[bit / 8] |= 1 << (bit % 8);
            len = bit / 8 + 1;
            prev = off;
            s = m.next;
        }
        let out = self.control(p, Body::Nak { sack: &sack[..len] });
        p.last_nak_at = now;
        p.last_nak_rcv = p.rcv_nxt;
        self.counters.tx_naks += 1;
        out
    }

    /// The next packet flagged for retransmission, from the cursor on.
    fn build_retransmit(&mut self, p: &mut Peer, now: u64) -> Option<Out> {
        let tx = &mut self.tx;
        let mut s = if p.rtx_cursor != NIL {
            p.rtx_cursor
        } else {
            p.tx_head
        };
        while s != NIL && tx.meta(s).flags & S_RTX == 0 {
            s = tx.meta(s).next;
        }
        if s == NIL {
            // Cannot happen (rtx_pending counts flagged slots of the list); recover.
            debug_assert!(false, "rtx_pending without a flagged slot");
            p.rtx_pending = 0;
            p.rtx_cursor = NIL;
            return None;
        }
        let m = tx.meta_mut(s);
        let ack_req = m.flags & S_ACK_REQ != 0;
        m.flags &= !(S_RTX | S_ACK_REQ);
        m.flags |= S_RESENT;
        m.sent_at = now;
        p.rtx_pending -= 1;
        p.rtx_cursor = if p.rtx_pending > 0 { m.next } else { NIL };
        let credit = self.credit();
        packet::patch_data(self.tx.buf_mut(s), p.rcv_nxt, credit, ack_req);
        p.clear_ack_owed();
        self.counters.tx_retransmits += 1;
        Some(Out::Tx(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: PeerId = PeerId(0);
    const B: PeerId = PeerId(1);
    const MS: u64 = 1_000_000;

    fn cfg() -> Config {
        Config {
            window: 8,
            ack_every: 4,
            ack_delay: MS,
            initial_rto: 10 * MS,
            max_rto: 80 * MS,
            nak_interval: 2 * MS,
            peer_timeout: 1000 * MS,
            ..Config::default()
        }
    }

    /// While pacing, new data leaves one packet per gap, the peer's timer releasing the
    /// next; after a pause a few packets go back to back; pacing ends on its own.
    #[test]
    fn pacing_spreads_new_data_and_its_timer_releases_it() {
        let (mut a, _b) = pair(cfg());
        let m = mss(a.config());
        if let Some(PeerSlot::Active(p)) = a.peers.get_mut(B.0 as usize) {
            // A round trip is known, and a loss event of the overflowing kind started
            // pacing (what `on_nak` does).
            p.srtt = 100_000;
            p.cwnd = 8 * m;
            p.start_pacing(0);
        }
        for i in 0..8u8 {
            a.send(B, &[i; 1000], 0).unwrap();
        }
        assert_eq!(out(&mut a, 0).len(), 1, "one packet, then the gap");
        assert_eq!(a.counters().pace_waits, 1);
        let t1 = a.next_timeout().unwrap();
        assert!(t1 > 0 && t1 < 100_000, "released within a round trip: {t1}");
        assert!(out(&mut a, t1).is_empty(), "held until its timer runs");
        a.on_timeout(t1);
        assert_eq!(out(&mut a, t1).len(), 1);
        // A pause of several gaps lets a short burst go, then pacing holds again.
        let t2 = t1 + 100_000;
        a.on_timeout(t2);
        let burst = out(&mut a, t2).len() as u64;
        assert!((2..=PACE_BURST + 1).contains(&burst), "burst of {burst}");
        assert_eq!(a.counters().pace_waits, 3);
        // Pacing lasts PACE_HOLD_MIN_NS here (64 round trips are less): after it the
        // rest leaves at once (with the tail probe's resend of the oldest).
        let t3 = PACE_HOLD_MIN_NS;
        a.on_timeout(t3);
        let new = out(&mut a, t3)
            .iter()
            .filter_map(|d| match Packet::decode(d).map(|p| p.body) {
                Ok(Body::Data { seq, .. }) => Some(seq),
                _ => None,
            })
            .filter(|&seq| seq >= 2 + burst as u32)
            .count() as u64;
        assert_eq!(new, 8 - 2 - burst, "the rest after pacing ended");
    }

    /// Two engines, `a` (peer 0) and `b` (peer 1), each knowing the other.
    fn pair(cfg: Config) -> (Engine, Engine) {
        let mut a = Engine::new(Config {
            session: 100,
            ..cfg.clone()
        })
        .unwrap();
        let mut b = Engine::new(Config {
            session: 200,
            ..cfg
        })
        .unwrap();
        a.add_peer(B, 0).unwrap();
        b.add_peer(A, 0).unwrap();
        (a, b)
    }

    fn out(e: &mut Engine, now: u64) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        while let Some(t) = e.poll_transmit(now) {
            v.push(t.bytes.to_vec());
        }
        v
    }

    fn feed(e: &mut Engine, from: PeerId, pkts: &[Vec<u8>], now: u64) {
        for p in pkts {
            e.on_packet(from, p, now);
        }
    }

    fn delivered(e: &mut Engine) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        while let Some(ev) = e.poll_event() {
            match ev {
                Event::Deliver { payload, .. } => v.push(payload.to_vec()),
                Event::PeerFailed(p) => panic!("unexpected failure of {p}"),
            }
        }
        v
    }

    fn kind(bytes: &[u8]) -> Body<'_> {
        Packet::decode(bytes).unwrap().body
    }

    fn msgs(r: std::ops::Range<u32>) -> Vec<Vec<u8>> {
        r.map(|i| i.to_le_bytes().to_vec()).collect()
    }

    /// Moves packets both ways without loss until both are quiet, running timers.
    fn settle(a: &mut Engine, b: &mut Engine, now: &mut u64) {
        for _ in 0..10_000 {
            let pa = out(a, *now);
            let pb = out(b, *now);
            feed(b, A, &pa, *now);
            feed(a, B, &pb, *now);
            if pa.is_empty() && pb.is_empty() {
                let next = [a.next_timeout(), b.next_timeout()]
                    .into_iter()
                    .flatten()
                    .min();
                match next {
                    Some(t) if t < *now + 10_000 * MS => {
                        *now = (*now).max(t);
                        a.on_timeout(*now);
                        b.on_timeout(*now);
                    }
                    _ => return,
                }
            }
        }
        panic!("did not settle");
    }

    /// Datagrams of `e`, each with its external tail resolved from `mem` (token =
    /// index in `mem`, the tail starts at the front of that buffer).
    fn out_ext(e: &mut Engine, now: u64, mem: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        while let Some(t) = e.poll_transmit(now) {
            let mut d = t.bytes.to_vec();
            if let Some(x) = t.ext {
                d.extend_from_slice(&mem[x.token as usize][..x.len as usize]);
            }
            v.push(d);
        }
        v
    }

    fn send_tails(a: &mut Engine, mem: &[Vec<u8>]) {
        for (i, m) in mem.iter().enumerate() {
            let ext = ExtPayload {
                token: i as u64,
                len: m.len() as u32,
            };
            a.send_ext(B, 0, ext, |buf| {
                buf[..2].copy_from_slice(b"h:");
                2
            })
            .unwrap();
        }
    }

    #[test]
    fn external_payloads_are_sent_and_resent_from_their_owner() {
        let (mut a, mut b) = pair(cfg());
        let mem = vec![b"first tail".to_vec(), b"second".to_vec(), vec![7; 300]];
        send_tails(&mut a, &mem);
        let p = out_ext(&mut a, 0, &mem);
        assert_eq!(p.len(), 3);
        assert_eq!(
            kind(&p[1]),
            Body::Data {
                seq: 1,
                ack_req: false,
                payload: b"h:second"
            }
        );
        // The first is lost: b NAKs it, a resends it with its tail.
        feed(&mut b, A, &p[1..], 0);
        let mut now = 3 * MS;
        for _ in 0..100 {
            a.on_timeout(now);
            b.on_timeout(now);
            let pa = out_ext(&mut a, now, &mem);
            let pb = out(&mut b, now);
            feed(&mut b, A, &pa, now);
            feed(&mut a, B, &pb, now);
            if a.peer_status(B) == (PeerStatus::Active { unacked: 0 }) {
                break;
            }
            now += MS;
        }
        assert_eq!(a.peer_status(B), PeerStatus::Active { unacked: 0 });
        assert!(a.counters().tx_retransmits >= 1);
        let mut want: Vec<Vec<u8>> = Vec::new();
        for m in &mem {
            want.push([&b"h:"[..], m].concat());
        }
        assert_eq!(delivered(&mut b), want);
    }

    #[test]
    fn materialized_payloads_no_longer_need_their_owner() {
        let (mut a, mut b) = pair(cfg());
        let mem = vec![b"abc".to_vec(), vec![9; 1000]];
        send_tails(&mut a, &mem);
        a.materialize(B, |x, buf| {
            buf.copy_from_slice(&mem[x.token as usize][..x.len as usize]);
        });
        let mut now = 0;
        // From here on the plain `out` would lose any tail still external.
        let p = out(&mut a, now);
        assert_eq!(p.len(), 2);
        feed(&mut b, A, &p, now);
        settle(&mut a, &mut b, &mut now);
        assert_eq!(
            delivered(&mut b),
            [b"h:abc".to_vec(), [&b"h:"[..], &[9; 1000][..]].concat()]
        );
    }

    #[test]
    fn a_mark_is_acknowledged_whatever_follows_it() {
        let (mut a, mut b) = pair(cfg());
        a.send(B, b"m0", 0).unwrap();
        a.send(B, b"m1", 0).unwrap();
        let mark = a.queued_mark(B).unwrap();
        assert_eq!(a.acked_to(B, mark), Some(false));
        let first = out(&mut a, 0);
        a.send(B, b"m2", 0).unwrap(); // queued after the mark, never sent here
        feed(&mut b, A, &first, 0);
        b.on_timeout(2 * MS); // the delayed acknowledgement
        let acks = out(&mut b, 2 * MS);
        feed(&mut a, B, &acks, 2 * MS);
        assert_eq!(a.acked_to(B, mark), Some(true));
        assert_eq!(a.peer_status(B), PeerStatus::Active { unacked: 1 });
        assert_eq!(a.acked_to(PeerId(9), mark), None);
    }

    #[test]
    fn room_for_external_payloads_is_all_or_nothing() {
        let (mut a, _b) = pair(cfg());
        assert!(a.room_for_ext(B, 8, 8000));
        assert!(!a.room_for_ext(B, 9, 9000), "beyond the message window");
        assert!(!a.room_for_ext(PeerId(7), 1, 10), "unknown peer");
        let mem = vec![vec![1; 100]; 3];
        send_tails(&mut a, &mem);
        assert!(a.room_for_ext(B, 5, 500));
        assert!(!a.room_for_ext(B, 6, 600));
        // Nothing is in flight yet: what waits may not grow past one send window.
        let wnd = a.peer_window(B).map(|(c, k)| c.min(k)).unwrap();
        assert!(!a.room_for_ext(B, 1, u64::from(wnd)));
        let too_long = ExtPayload {
            token: 0,
            len: a.config().max_payload as u32 - 1,
        };
        assert_eq!(
            // One byte is lent for the head; claiming two is refused.
            a.send_ext(B, 0, too_long, |b| b.len() + 1),
            Err(SendError::TooLarge)
        );
    }

    #[test]
    fn delivers_in_order_and_frees_the_window() {
        let (mut a, mut b) = pair(cfg());
        let mut now = 0;
        for m in msgs(0..5) {
            a.send(B, &m, now).unwrap();
        }
        assert_eq!(a.peer_status(B), PeerStatus::Active { unacked: 5 });
        settle(&mut a, &mut b, &mut now);
        assert_eq!(a.peer_status(B), PeerStatus::Active { unacked: 0 });
        assert_eq!(a.pool_in_use(), (0, 0));
        assert_eq!(b.pool_in_use(), (0, 5));
        assert!(b.poll_event().is_some());
        assert_eq!(b.pool_in_use(), (0, 5), "the delivered message is lent");
        assert!(b.poll_event().is_some());
        assert_eq!(b.pool_in_use(), (0, 4));
        assert_eq!(delivered(&mut b), msgs(2..5));
        assert_eq!(b.pool_in_use(), (0, 0));
        assert_eq!(a.counters().tx_retransmits, 0);
        // Both are idle again: no timers armed.
        assert_eq!((a.armed_timers(), b.armed_timers()), (0, 0));
    }

    #[test]
    fn acks_are_piggybacked_then_delayed_then_counted() {
        let (mut a, mut b) = pair(cfg());
        a.send(B, b"x", 0).unwrap();
        let p = out(&mut a, 0);
        feed(&mut b, A, &p, 1);
        // b owes an ack but waits for ack_delay (or for data to carry it).
        assert!(out(&mut b, 1).is_empty());
        b.send(A, b"y", 2).unwrap();
        let p = out(&mut b, 2);
        assert_eq!(p.len(), 1);
        assert_eq!(Packet::decode(&p[0]).unwrap().ack, 1, "piggybacked");
        feed(&mut a, B, &p, 3);
        assert_eq!(a.peer_status(B), PeerStatus::Active { unacked: 0 });
        // Now a owes b an ack: it goes out standalone after ack_delay.
        assert!(out(&mut a, 3).is_empty());
        assert_eq!(a.next_timeout(), Some(3 + MS));
        a.on_timeout(3 + MS);
        let p = out(&mut a, 3 + MS);
        assert_eq!(p.len(), 1);
        assert_eq!(kind(&p[0]), Body::Ack { ack_req: false });
        // ack_every: the 4th message is acknowledged at once.
        for m in msgs(0..4) {
            a.send(B, &m, 10 * MS).unwrap();
        }
        let p = out(&mut a, 10 * MS);
        feed(&mut b, A, &p, 10 * MS);
        let p = out(&mut b, 10 * MS);
        assert_eq!(p.len(), 1);
        assert_eq!(Packet::decode(&p[0]).unwrap().ack, 5);
    }

    #[test]
    fn a_gap_is_naked_and_filled_in_order() {
        let (mut a, mut b) = pair(cfg());
        for m in msgs(0..6) {
            a.send(B, &m, 0).unwrap();
        }
        let mut p = out(&mut a, 0);
        assert_eq!(p.len(), 6);
        p.remove(3);
        p.remove(1);
        feed(&mut b, A, &p, 5 * MS);
        assert_eq!(delivered(&mut b), msgs(0..1));
        let naks = out(&mut b, 5 * MS);
        assert_eq!(naks.len(), 1);
        let nak = Packet::decode(&naks[0]).unwrap();
        assert_eq!(nak.ack, 1);
        // holds 2 (bit 0), 4 (bit 2), 5 (bit 3)
        assert_eq!(nak.body, Body::Nak { sack: &[0b1101] });
        assert_eq!(b.counters().tx_naks, 1);
        feed(&mut a, B, &naks, 6 * MS);
        let r = out(&mut a, 6 * MS);
        let seqs: Vec<u32> = r
            .iter()
            .map(|x| match kind(x) {
                Body::Data { seq, .. } => seq,
                k => panic!("{k:?}"),
            })
            .collect();
        assert_eq!(seqs, [1, 3], "only the holes are resent");
        assert_eq!(a.counters().tx_retransmits, 2);
        feed(&mut b, A, &r, 7 * MS);
        assert_eq!(delivered(&mut b), msgs(1..6));
    }

    #[test]
    fn nak_does_not_resend_what_was_just_sent() {
        let (mut a, mut b) = pair(cfg());
        for m in msgs(0..3) {
            a.send(B, &m, 0).unwrap();
        }
        let p = out(&mut a, 0);
        feed(&mut b, A, &p[2..], 0);
        let naks = out(&mut b, 0);
        // Arrives before nak_interval: packets 0 and 1 may still be in flight.
        feed(&mut a, B, &naks, MS);
        assert!(out(&mut a, MS).is_empty());
        // A second NAK for the same hole is held back by the receiver's rate limit...
        feed(&mut b, A, &p[2..], MS);
        assert!(out(&mut b, MS).is_empty());
        // ...until nak_interval passed.
        feed(&mut b, A, &p[2..], 3 * MS);
        let naks = out(&mut b, 3 * MS);
        assert_eq!(naks.len(), 1);
        feed(&mut a, B, &naks, 3 * MS);
        assert_eq!(out(&mut a, 3 * MS).len(), 2);
    }

    #[test]
    fn timeout_resends_oldest_with_backoff() {
        let (mut a, mut b) = pair(cfg());
        a.send(B, b"m0", 0).unwrap();
        a.send(B, b"m1", 0).unwrap();
        assert_eq!(out(&mut a, 0).len(), 2); // both lost
        let mut expect = 10 * MS;
        let mut now = 0;
        for _ in 0..5 {
            assert_eq!(a.next_timeout(), Some(now + expect));
            now += expect;
            a.on_timeout(now);
            let p = out(&mut a, now);
            assert_eq!(p.len(), 1);
            assert_eq!(
                kind(&p[0]),
                Body::Data {
                    seq: 0,
                    ack_req: true,
                    payload: b"m0"
                }
            );
            expect = (expect * 2).min(80 * MS);
        }
        assert_eq!(a.counters().timeouts, 5);
        // The last probe gets through: b answers at once (ACK_REQ); a resets its backoff.
        assert!(out(&mut a, now).is_empty());
        now += 80 * MS;
        a.on_timeout(now);
        let p = out(&mut a, now);
        feed(&mut b, A, &p, now);
        let ack = out(&mut b, now);
        assert_eq!(Packet::decode(&ack[0]).unwrap().ack, 1);
        feed(&mut a, B, &ack, now);
        assert_eq!(a.next_timeout(), Some(now + 10 * MS), "backoff reset");
        settle(&mut a, &mut b, &mut now);
        assert_eq!(delivered(&mut b), [b"m0".to_vec(), b"m1".to_vec()]);
    }

    #[test]
    fn duplicates_are_dropped_and_reacked() {
        let (mut a, mut b) = pair(cfg());
        a.send(B, b"once", 0).unwrap();
        let p = out(&mut a, 0);
        feed(&mut b, A, &p, 0);
        feed(&mut b, A, &p, 0);
        feed(&mut b, A, &p, 0);
        assert_eq!(delivered(&mut b), [b"once".to_vec()]);
        assert_eq!(b.counters().rx_duplicates, 2);
        // A duplicate means our ack was lost: it goes out now, not after ack_delay.
        assert_eq!(out(&mut b, 0).len(), 1);
        // Duplicates of buffered out-of-order packets are dropped too.
        for m in msgs(0..3) {
            a.send(B, &m, 0).unwrap();
        }
        let p = out(&mut a, 0);
        feed(&mut b, A, &p[1..], 0);
        feed(&mut b, A, &p[1..], 0);
        assert_eq!(b.counters().rx_duplicates, 4);
        feed(&mut b, A, &p[..1], 0);
        assert_eq!(delivered(&mut b), msgs(0..3));
    }

    #[test]
    fn window_full_then_recovers() {
        let (mut a, mut b) = pair(cfg());
        let mut now = 0;
        for m in msgs(0..8) {
            a.send(B, &m, now).unwrap();
        }
        assert_eq!(a.send(B, b"no", now), Err(SendError::WindowFull));
        assert_eq!(a.counters().window_full, 1);
        settle(&mut a, &mut b, &mut now);
        a.send(B, b"yes", now).unwrap();
        settle(&mut a, &mut b, &mut now);
        let mut want = msgs(0..8);
        want.push(b"yes".to_vec());
        assert_eq!(delivered(&mut b), want);
    }

    #[test]
    fn shared_pool_exhaustion_is_no_resource() {
        let mut c = cfg();
        c.tx_pool_packets = 3;
        let (mut a, _) = pair(c);
        a.add_peer(PeerId(2), 0).unwrap();
        a.send(B, b"1", 0).unwrap();
        a.send(B, b"2", 0).unwrap();
        a.send(PeerId(2), b"3", 0).unwrap();
        assert_eq!(a.send(PeerId(2), b"4", 0), Err(SendError::WindowFull));
        assert_eq!(a.counters().tx_pool_exhausted, 1);
        // Removing a peer returns its buffers.
        assert!(a.remove_peer(B));
        a.send(PeerId(2), b"4", 0).unwrap();
    }

    #[test]
    fn silent_peer_fails_and_its_state_is_dropped() {
        let (mut a, _b) = pair(cfg());
        a.send(B, b"lost", 5 * MS).unwrap();
        let _ = out(&mut a, 5 * MS);
        let mut now = 5 * MS;
        while let Some(t) = a.next_timeout() {
            now = t;
            a.on_timeout(now);
            let _ = out(&mut a, now);
        }
        assert_eq!(now, 1005 * MS, "declared failed exactly at peer_timeout");
        assert_eq!(a.poll_event(), Some(Event::PeerFailed(B)));
        assert_eq!(a.peer_status(B), PeerStatus::Failed);
        assert_eq!(a.send(B, b"x", now), Err(SendError::Failed));
        assert_eq!(a.pool_in_use(), (0, 0));
        assert_eq!(a.armed_timers(), 0);
        assert_eq!(a.counters().peers_failed, 1);
        // Packets from it are dropped; it can be added again.
        a.on_packet(
            B,
            &[2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            now,
        );
        assert_eq!(a.counters().rx_unknown_peer, 1);
        a.add_peer(B, now).unwrap();
        a.send(B, b"again", now).unwrap();
    }

    #[test]
    fn messages_received_before_failure_are_delivered_first() {
        let (mut a, mut b) = pair(cfg());
        b.send(A, b"last words", 0).unwrap();
        let p = out(&mut b, 0);
        feed(&mut a, B, &p, 0);
        a.send(B, b"unanswered", 0).unwrap();
        let _ = out(&mut a, 0);
        while let Some(now) = a.next_timeout() {
            a.on_timeout(now);
            let _ = out(&mut a, now);
        }
        assert_eq!(
            a.poll_event(),
            Some(Event::Deliver {
                peer: B,
                payload: b"last words"
            })
        );
        assert_eq!(a.poll_event(), Some(Event::PeerFailed(B)));
    }

    #[test]
    fn keepalive_detects_an_idle_dead_peer_and_spares_a_live_one() {
        let mut c = cfg();
        c.keepalive = Some(100 * MS);
        let (mut a, mut b) = pair(c);
        let mut now = 0;
        // Live: probes are answered, nothing fails for a long time.
        while now < 5000 * MS {
            let t = [a.next_timeout(), b.next_timeout()]
                .into_iter()
                .flatten()
                .min()
                .unwrap();
            now = t;
            a.on_timeout(now);
            b.on_timeout(now);
            let pa = out(&mut a, now);
            let pb = out(&mut b, now);
            feed(&mut b, A, &pa, now);
            feed(&mut a, B, &pb, now);
        }
        assert!(a.counters().tx_probes > 10);
        assert_eq!(a.counters().peers_failed, 0);
        assert!(a.poll_event().is_none());
        // Dead: b stops answering; a notices within keepalive + peer_timeout.
        let dead_at = now;
        loop {
            now = a.next_timeout().unwrap();
            a.on_timeout(now);
            let _ = out(&mut a, now);
            if let Some(ev) = a.poll_event() {
                assert_eq!(ev, Event::PeerFailed(B));
                break;
            }
        }
        assert!(now - dead_at <= 1100 * MS, "{}", now - dead_at);
    }

    #[test]
    fn an_awaited_peer_is_probed_and_its_death_found_without_keepalive() {
        let mut c = cfg();
        c.await_probe = 100 * MS;
        let (mut a, mut b) = pair(c);
        // Nothing awaited, nothing in flight: no timer, no probe, ever.
        assert!(a.next_timeout().is_none());
        // A request the peer acknowledged; its answer is awaited.
        a.send(B, b"request", 0).unwrap();
        let pa = out(&mut a, 0);
        feed(&mut b, A, &pa, 0);
        let mut now = MS;
        b.on_timeout(now);
        let pb = out(&mut b, now);
        feed(&mut a, B, &pb, now);
        assert_eq!(a.peer_status(B), PeerStatus::Active { unacked: 0 });
        a.set_awaiting(B, true);
        // Live: the probes are answered for as long as it is awaited.
        while now < 3000 * MS {
            now = [a.next_timeout(), b.next_timeout()]
                .into_iter()
                .flatten()
                .min()
                .unwrap();
            a.on_timeout(now);
            b.on_timeout(now);
            let pa = out(&mut a, now);
            let pb = out(&mut b, now);
            feed(&mut b, A, &pa, now);
            feed(&mut a, B, &pb, now);
        }
        assert!(a.counters().tx_probes > 10, "{}", a.counters().tx_probes);
        assert_eq!(a.counters().peers_failed, 0);
        // Answered: no longer awaited, the probes stop.
        a.set_awaiting(B, false);
        let probes = a.counters().tx_probes;
        while let Some(t) = a.next_timeout() {
            now = t;
            a.on_timeout(now);
            let pa = out(&mut a, now);
            feed(&mut b, A, &pa, now);
            b.on_timeout(now);
            let pb = out(&mut b, now);
            feed(&mut a, B, &pb, now);
        }
        assert!(a.counters().tx_probes <= probes + 1);
        // Awaited again, and the peer died: found within await_probe + peer_timeout.
        a.set_awaiting(B, true);
        let dead_at = now;
        loop {
            now = a.next_timeout().unwrap();
            a.on_timeout(now);
            let _ = out(&mut a, now);
            if let Some(ev) = a.poll_event() {
                assert_eq!(ev, Event::PeerFailed(B));
                break;
            }
        }
        assert!(now - dead_at <= 1200 * MS, "{}", now - dead_at);
        // Unknown and failed peers are ignored.
        a.set_awaiting(B, false);
        a.set_awaiting(PeerId(77), true);
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut c = cfg();
        c.initial_seq = u32::MAX - 20;
        let (mut a, mut b) = pair(c);
        let mut now = 0;
        let mut got = Vec::new();
        for chunk in 0..10u32 {
            for m in msgs(chunk * 5..chunk * 5 + 5) {
                a.send(B, &m, now).unwrap();
            }
            // Lose the second packet of every batch once.
            let mut p = out(&mut a, now);
            p.remove(1);
            feed(&mut b, A, &p, now);
            settle(&mut a, &mut b, &mut now);
            got.extend(delivered(&mut b));
        }
        assert_eq!(got, msgs(0..50));
        assert!(a.counters().tx_retransmits >= 10);
    }

    #[test]
    fn garbage_is_counted_never_trusted() {
        let (mut a, mut b) = pair(cfg());
        a.on_packet(B, b"", 0);
        a.on_packet(B, &[9; 40], 0);
        assert_eq!(a.counters().rx_malformed, 2);
        // An ack for a message never sent.
        let mut buf = [0u8; 64];
        let n = Packet {
            session: 200,
            ack: 5,
            credit: 1 << 20,
            body: Body::Ack { ack_req: false },
        }
        .encode_into(&mut buf)
        .unwrap();
        a.on_packet(B, &buf[..n], 0);
        assert_eq!(a.counters().rx_invalid, 1);
        // A data packet far beyond the window.
        let n = Packet {
            session: 200,
            ack: 0,
            credit: 1 << 20,
            body: Body::Data {
                seq: 1000,
                ack_req: false,
                payload: b"x",
            },
        }
        .encode_into(&mut buf)
        .unwrap();
        a.on_packet(B, &buf[..n], 0);
        assert_eq!(a.counters().rx_out_of_window, 1);
        // From a peer nobody added.
        a.on_packet(PeerId(77), &buf[..n], 0);
        assert_eq!(a.counters().rx_unknown_peer, 1);
        // None of it changed a's state.
        assert!(a.poll_event().is_none());
        assert!(out(&mut a, 0).is_empty());
        // Real traffic pins b's session; another session is then stale.
        b.send(A, b"hi", 0).unwrap();
        let p = out(&mut b, 0);
        feed(&mut a, B, &p, 0);
        let n = Packet {
            session: 999,
            ack: 0,
            credit: 1 << 20,
            body: Body::Data {
                seq: 1,
                ack_req: false,
                payload: b"x",
            },
        }
        .encode_into(&mut buf)
        .unwrap();
        a.on_packet(B, &buf[..n], 0);
        assert_eq!(a.counters().rx_stale_session, 1);
        assert_eq!(delivered(&mut a), [b"hi".to_vec()]);
    }

    #[test]
    fn api_errors() {
        assert!(Engine::new(Config {
            window: 0,
            ..Config::default()
        })
        .is_err());
        assert!(Engine::new(Config {
            max_rto: 1,
            ..Config::default()
        })
        .is_err());
        assert!(Engine::new(Config {
            max_payload: 65516,
            ..Config::default()
        })
        .is_err());
        // The largest allowed message round-trips.
        let big = Config {
            max_payload: 65515,
            ..cfg()
        };
        let (mut a, mut b) = pair(big);
        let m = vec![7u8; 65515];
        a.send(B, &m, 0).unwrap();
        let mut now = 0;
        settle(&mut a, &mut b, &mut now);
        assert_eq!(delivered(&mut b), [m]);
        let (mut a, _) = pair(cfg());
        assert_eq!(a.add_peer(B, 0), Err(AddPeerError::Exists));
        assert_eq!(
            a.add_peer(PeerId(1 << 20), 0),
            Err(AddPeerError::IdTooLarge)
        );
        assert_eq!(a.send(PeerId(5), b"", 0), Err(SendError::UnknownPeer));
        let big = vec![0; a.config().max_payload + 1];
        assert_eq!(a.send(B, &big, 0), Err(SendError::TooLarge));
        assert!(!a.remove_peer(PeerId(5)));
        assert_eq!(a.peer_status(PeerId(5)), PeerStatus::Unknown);
        // Empty messages are messages.
        let (mut a, mut b) = pair(cfg());
        a.send(B, b"", 0).unwrap();
        let mut now = 0;
        settle(&mut a, &mut b, &mut now);
        assert_eq!(delivered(&mut b), [Vec::<u8>::new()]);
    }

    #[test]
    fn idle_peers_are_small_and_cost_no_timer() {
        let mut e = Engine::new(Config::default()).unwrap();
        for i in 0..1000 {
            e.add_peer(PeerId(i), 0).unwrap();
        }
        assert_eq!(e.armed_timers(), 0);
        assert_eq!(e.pool_bytes(), 0);
        assert!(e.poll_transmit(0).is_none());
    }

    #[test]
    fn receive_pool_exhaustion_backpressures() {
        let mut c = cfg();
        c.rx_pool_packets = 2;
        let (mut a, mut b) = pair(c);
        let mut now = 0;
        for m in msgs(0..6) {
            a.send(B, &m, now).unwrap();
        }
        // b does not poll its events: after two buffered messages it drops the rest
        // without acknowledging them; they are recovered once b drains its queue.
        for _ in 0..3 {
            let p = out(&mut a, now);
            feed(&mut b, A, &p, now);
            let p = out(&mut b, now);
            feed(&mut a, B, &p, now);
            now += 100 * MS;
            a.on_timeout(now);
            b.on_timeout(now);
        }
        assert!(b.counters().rx_no_buffer > 0);
        let mut got = Vec::new();
        for _ in 0..100 {
            got.extend(delivered(&mut b));
            if got.len() == 6 {
                break;
            }
            let p = out(&mut a, now);
            feed(&mut b, A, &p, now);
            let p = out(&mut b, now);
            feed(&mut a, B, &p, now);
            now = a.next_timeout().unwrap_or(now).max(now);
            a.on_timeout(now);
            b.on_timeout(now);
        }
        assert_eq!(got, msgs(0..6));
    }
}

#[cfg(test)]
mod recovery_tests {
    use super::*;

    const A: PeerId = PeerId(0);
    const B: PeerId = PeerId(1);
    const MS: u64 = 1_000_000;

    fn pair(cfg: Config) -> (Engine, Engine) {
        let mut a = Engine::new(cfg.clone()).unwrap();
        let mut b = Engine::new(cfg).unwrap();
        a.add_peer(B, 0).unwrap();
        b.add_peer(A, 0).unwrap();
        (a, b)
    }

    fn cfg() -> Config {
        Config {
            window: 64,
            ack_delay: MS,
            initial_rto: 10 * MS,
            max_rto: 80 * MS,
            nak_interval: 2 * MS,
            ..Config::default()
        }
    }

    fn out(e: &mut Engine, now: u64) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        while let Some(t) = e.poll_transmit(now) {
            v.push(t.bytes.to_vec());
        }
        v
    }

    /// Bytes of data packets in `pkts` (headers included).
    fn data_bytes(pkts: &[Vec<u8>]) -> usize {
        pkts.iter()
            .filter(|p| matches!(Packet::decode(p).unwrap().body, Body::Data { .. }))
            .map(|p| p.len())
            .sum()
    }

    #[test]
    fn the_peers_credit_bounds_the_bytes_in_flight() {
        let c = Config {
            window: 1024,
            max_payload: 1000,
            // The congestion window starts above the credit: the credit binds.
            initial_window: 100,
            ..cfg()
        };
        let (mut a, mut b) = pair(c.clone());
        // b can hold 10 KB: it says so in every packet.
        b.set_rcv_buf(10_000);
        b.send(A, b"hello", 0).unwrap();
        for p in out(&mut b, 0) {
            a.on_packet(B, &p, 1);
        }
        assert_eq!(a.peer_window(B).map(|w| w.1), Some(10_000));
        let msg = vec![5u8; 1000];
        let mut queued = 0;
        while a.send(B, &msg, 2).is_ok() {
            queued += 1;
        }
        // One window goes out, one more waits behind it, then the caller is pushed back.
        assert!((10..=20).contains(&queued), "{queued}");
        assert!(!a.can_send(B));
        let first = out(&mut a, 2);
        assert!(data_bytes(&first) <= 10_000, "{}", data_bytes(&first));
        assert!(!first.is_empty());
        assert!(a.counters().window_limited > 0);
        // Nothing more goes until b acknowledges.
        assert!(out(&mut a, 3).is_empty());
        for p in &first {
            b.on_packet(A, p, 4);
        }
        while b.poll_event().is_some() {}
        b.on_timeout(4 + MS);
        for p in out(&mut b, 4 + MS) {
            a.on_packet(B, &p, 5 + MS);
        }
        let second = out(&mut a, 5 + MS);
        assert!(!second.is_empty() && data_bytes(&second) <= 10_000);
        assert!(a.can_send(B));
    }

    #[test]
    fn bytes_queued_behind_the_flight_stay_within_queue_ahead() {
        let c = Config {
            window: 4096,
            max_payload: 1000,
            initial_window: 100,
            ..cfg()
        };
        let (mut a, mut b) = pair(c.clone());
        // A credit far above QUEUE_AHEAD: the queue, not the credit, pushes back.
        b.set_rcv_buf(1 << 20);
        b.send(A, b"hello", 0).unwrap();
        for p in out(&mut b, 0) {
            a.on_packet(B, &p, 1);
        }
        let msg = vec![7u8; 1000];
        let mut queued = 0u32;
        while a.send(B, &msg, 2).is_ok() {
            queued += 1;
        }
        let pkt = (HEADER_LEN + 1000) as u32;
        // Nothing has been transmitted yet: every message waits, up to QUEUE_AHEAD.
        assert_eq!(queued, QUEUE_AHEAD.div_ceil(pkt), "{queued}");
        assert_eq!(a.send(B, &msg, 2), Err(SendError::WindowFull));
        // Once they leave, the queue takes about QUEUE_AHEAD more.
        let first = out(&mut a, 2);
        assert_eq!(first.len() as u32, queued);
        let mut more = 0u32;
        while a.send(B, &msg, 3).is_ok() {
            more += 1;
        }
        assert_eq!(more, QUEUE_AHEAD.div_ceil(pkt), "{more}");
    }

    #[test]
    fn credit_is_shared_among_the_senders() {
        let c = cfg();
        let mut r = Engine::new(Config {
            rcv_buf: 90_000,
            ..c.clone()
        })
        .unwrap();
        let mut senders: Vec<Engine> = (0..3).map(|_| Engine::new(c.clone()).unwrap()).collect();
        for (i, s) in senders.iter_mut().enumerate() {
            r.add_peer(PeerId(i as u32), 0).unwrap();
            s.add_peer(PeerId(9), 0).unwrap();
            s.send(PeerId(9), b"x", 0).unwrap();
            for p in out(s, 0) {
                r.on_packet(PeerId(i as u32), &p, 10);
            }
        }
        r.on_timeout(10 + MS);
        for p in out(&mut r, 10 + MS) {
            assert_eq!(Packet::decode(&p).unwrap().credit, 30_000);
        }
    }

    #[test]
    fn a_nak_halves_the_window_once_per_loss_event() {
        let c = Config {
            window: 1024,
            max_payload: 100,
            ..cfg()
        };
        let (mut a, mut b) = pair(c);
        let msg = [1u8; 100];
        let mut now = 0;
        // Grow the window over a few lossless round trips.
        for _ in 0..4 {
            while a.send(B, &msg, now).is_ok() {}
            for p in out(&mut a, now) {
                b.on_packet(A, &p, now + 1);
            }
            while b.poll_event().is_some() {}
            now += MS;
            b.on_timeout(now);
            for p in out(&mut b, now) {
                a.on_packet(B, &p, now + 1);
            }
            now += 1;
        }
        let (grown, _) = a.peer_window(B).unwrap();
        assert!(grown > 8 * 120, "slow start grew the window: {grown}");
        // Lose the first half of the next flight (a run of drops, as from a full queue):
        // the NAK halves the window, once.
        while a.send(B, &msg, now).is_ok() {}
        let flight = out(&mut a, now);
        assert!(flight.len() > 16);
        now += 3 * MS;
        for p in &flight[flight.len() / 2..] {
            b.on_packet(A, p, now);
        }
        for p in out(&mut b, now) {
            a.on_packet(B, &p, now + 1);
        }
        let (cut, _) = a.peer_window(B).unwrap();
        assert_eq!(a.counters().cwnd_reductions, 1);
        assert!(
            cut <= grown / 2 + 200 && cut >= grown / 4,
            "{grown} -> {cut}"
        );
        // The lost packet went again at once (no timeout).
        let again = out(&mut a, now + 1);
        assert_eq!(seqs(&again)[0], seqs(&flight)[0]);
        assert_eq!(a.counters().timeouts, 0);
        // A second NAK for the same event does not cut again.
        now += 3 * MS;
        b.on_timeout(now);
        for p in out(&mut b, now) {
            a.on_packet(B, &p, now + 1);
        }
        assert_eq!(a.counters().cwnd_reductions, 1);
    }

    #[test]
    fn in_order_messages_are_delivered_directly_and_in_order() {
        let (mut a, mut b) = pair(cfg());
        for i in 0..4u8 {
            a.send(B, &[i; 3], 0).unwrap();
        }
        let pk = out(&mut a, 0);
        assert_eq!(pk.len(), 4);
        let mut got: Vec<(u8, bool)> = Vec::new();
        // 0 in order: direct.
        b.on_packet_with(A, &pk[0], 1, &mut |_, m| got.push((m[0], true)));
        // 2 out of order: stored; 1 fills the hole: 1 and 2 are queued (2 was waiting).
        b.on_packet_with(A, &pk[2], 2, &mut |_, m| got.push((m[0], true)));
        b.on_packet_with(A, &pk[1], 3, &mut |_, m| got.push((m[0], true)));
        assert!(b.has_events());
        // 3 arrives while events wait: queued behind them, not delivered ahead.
        b.on_packet_with(A, &pk[3], 4, &mut |_, m| got.push((m[0], true)));
        while let Some(Event::Deliver { payload, .. }) = b.poll_event() {
            got.push((payload[0], false));
        }
        assert_eq!(got, [(0, true), (1, false), (2, false), (3, false)]);
        assert_eq!(b.counters().rx_delivered, 4);
        assert_eq!(b.pool_in_use().1, 0);
    }

    #[test]
    fn an_isolated_loss_is_resent_without_backoff() {
        let c = Config {
            window: 1024,
            max_payload: 100,
            initial_window: 64,
            ..cfg()
        };
        let (mut a, mut b) = pair(c);
        let msg = [1u8; 100];
        while a.send(B, &msg, 0).is_ok() {}
        let flight = out(&mut a, 0);
        assert!(flight.len() >= 32, "{}", flight.len());
        let before = a.peer_window(B).unwrap().0;
        // One packet of the flight is lost.
        let now = 3 * MS;
        for (i, p) in flight.iter().enumerate() {
            if i != 5 {
                b.on_packet(A, p, now);
            }
        }
        for p in out(&mut b, now) {
            a.on_packet(B, &p, now + 1);
        }
        assert_eq!(a.counters().cwnd_reductions, 0);
        assert!(a.peer_window(B).unwrap().0 >= before);
        let again = out(&mut a, now + 1);
        assert_eq!(seqs(&again)[0], seqs(&flight)[5]);
    }

    fn seqs(pkts: &[Vec<u8>]) -> Vec<u32> {
        pkts.iter()
            .filter_map(|p| match Packet::decode(p).unwrap().body {
                Body::Data { seq, .. } => Some(seq),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn idle_peer_size() {
        // Also asserted at compile time next to the constant; printed for reports.
        println!("IDLE_PEER_BYTES = {}", Engine::IDLE_PEER_BYTES);
    }

    #[test]
    fn a_persisting_hole_is_naked_again() {
        let (mut a, mut b) = pair(cfg());
        for i in 0..3u8 {
            a.send(B, &[i], 0).unwrap();
        }
        let p = out(&mut a, 0);
        b.on_packet(A, &p[2], 0);
        assert_eq!(out(&mut b, 0).len(), 1, "first NAK");
        // Nothing else arrives: the NAK is repeated every nak_interval, not left to the
        // sender's timeout.
        assert_eq!(b.next_timeout(), Some(2 * MS));
        b.on_timeout(2 * MS);
        let naks = out(&mut b, 2 * MS);
        assert_eq!(naks.len(), 1);
        assert!(matches!(
            Packet::decode(&naks[0]).unwrap().body,
            Body::Nak { .. }
        ));
        assert_eq!(b.counters().tx_naks, 2);
        a.on_packet(B, &naks[0], 2 * MS);
        assert_eq!(seqs(&out(&mut a, 2 * MS)), [0, 1]);
    }

    #[test]
    fn after_a_timeout_partial_acks_resend_the_next_at_once() {
        let (mut a, mut b) = pair(cfg());
        for i in 0..4u8 {
            a.send(B, &[i], 0).unwrap();
        }
        let _lost = out(&mut a, 0); // the whole burst is lost: no NAK can come
        a.on_timeout(10 * MS);
        let mut now = 10 * MS;
        let mut p = out(&mut a, now);
        assert_eq!(seqs(&p), [0]);
        for next in 1..4 {
            now += 100_000; // one round trip, far below the timeout
            b.on_packet(A, &p[0], now);
            let ack = out(&mut b, now); // ACK_REQ: answered at once
            assert_eq!(ack.len(), 1);
            a.on_packet(B, &ack[0], now);
            p = out(&mut a, now);
            assert_eq!(seqs(&p), [next], "partial ack resends the next packet");
        }
        assert_eq!(a.counters().timeouts, 1);
    }

    #[test]
    fn nak_names_no_more_holes_than_free_buffers() {
        let mut c = cfg();
        c.rx_pool_packets = 16; // 14 buffers for out-of-order packets
        let (mut a, mut b) = pair(c);
        for i in 0..40u8 {
            a.send(B, &[i], 0).unwrap();
        }
        let p = out(&mut a, 0);
        // Every even packet from 2 on arrives: holes at 0, 1, 3, 5, ...
        for x in p.iter().skip(2).step_by(2) {
            b.on_packet(A, x, 0);
        }
        let naks = out(&mut b, 0);
        let nak = Packet::decode(naks.last().unwrap()).unwrap();
        let Body::Nak { sack } = nak.body else {
            panic!("{nak:?}")
        };
        // 14 held leaves no free buffer: the NAK names only the first hole.
        assert_eq!(b.pool_in_use().1, 14);
        assert!(sack.is_empty(), "{sack:?}");
        a.on_packet(B, naks.last().unwrap(), 5 * MS);
        assert_eq!(seqs(&out(&mut a, 5 * MS)), [0]);
    }
}
