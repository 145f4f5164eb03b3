//! The udp transport: one nonblocking UDP socket per interface for all peers, made
//! reliable and ordered by the sans-IO engine of [`uct_rel`] (the role InfiniBand UD plays
//! in UCX: memory stays constant as the job grows).
//!
//! # Peers and endpoints
//!
//! Endpoints connect to an interface (`CONNECT_TO_IFACE`): [`UdpIface::ep_create`] only
//! adds the remote address to the interface's peer table and to the engine (a fixed-size
//! record, [`uct_rel::Engine::IDLE_PEER_BYTES`]); it opens no socket, starts no thread,
//! allocates no buffer and sends nothing. Peers are numbered densely ([`PeerId`] = index
//! in the table); an index of peer numbers hashed by address (`addr_index`) finds the
//! peer of an arriving datagram's source address.
//! Several endpoints to the same address share its peer (and so its ordering). A datagram
//! from an unknown address that is a well-formed data packet creates an *implicit* peer,
//! so that a process can receive from peers it never created an endpoint to (the protocol
//! layer opens its own endpoint back, which then finds that peer). Peers that no endpoint
//! refers to are bounded ([`UdpConfig::max_implicit_peers`]); beyond the bound, datagrams
//! from new addresses are counted and dropped. Peers are never forgotten while the
//! interface lives (their sequence state must survive, or a later message would look like
//! a duplicate); a destroyed endpoint's unacknowledged messages are still delivered.
//!
//! # Messages
//!
//! Every active message is one reliable message of the engine, i.e. one datagram: a
//! two-byte frame header ([`wire`]) and the AM bytes, so `max_am_bcopy` is the datagram
//! payload ([`UdpConfig::seg_size`]; by default 1472 bytes on IPv4 and 1452 on IPv6, a
//! 1500-byte MTU path, and 65000 bytes on a loopback device, whose path is this host)
//! minus the engine's 20-byte header and the frame header. The protocol layer fragments
//! larger messages, or sends them by rendezvous through `put_zcopy` (below). Every active
//! message (short, bcopy's packer, zcopy's gather) is written straight into its slot of
//! the engine's send pool ([`uct_rel::Engine::send_with`]), where it stays for
//! retransmission: the only other copy is the kernel's.
//!
//! # Puts
//!
//! [`UdpIface::put_zcopy_lent`] moves data without that copy: each datagram is a put header
//! (registration and address, [`wire`]) in the send pool and a piece of the caller's
//! buffer named by an external payload ([`uct_rel::Engine::send_ext`]); `sendmmsg`
//! gathers the two, also for retransmissions. The put is therefore `InProgress` until the
//! endpoint is flushed (every piece acknowledged), and the caller keeps its buffer until
//! then; destroying the endpoint copies what is still unacknowledged into the engine
//! ([`uct_rel::Engine::materialize`]), so the buffer is free from then on too. The
//! receiver writes a piece into its destination when the engine delivers it (in order,
//! once), after checking that a live registration of this process's udp domain holds the
//! whole piece ([`crate::md::wire_target`]); other pieces are counted and dropped.
//! [`UdpIface::put_zcopy`], whose caller's buffers are only borrowed for the call, copies
//! the pieces into the engine before it returns `Done`. A message to
//! an idle peer is handed to the socket at once; one queued behind others waits for the
//! next progress call or until [`TX_DEFER`] messages or [`TX_DEFER_BYTES`] have
//! gathered, so that they go to the kernel together while still in the CPU's cache. When the peer's window (or the interface's send pool) is full, the send
//! returns `NoResource`, and `pending_add` queues until acknowledgements make room.
//!
//! # Kernel path
//!
//! Datagrams leave in batches: up to [`TX_BATCH`] at a time are taken from the engine
//! without copying and handed to one `sendmmsg`; where the kernel has UDP GSO (probed at
//! open) a run of equal-size datagrams to one peer is one message of that call with a
//! `UDP_SEGMENT` size, so the kernel walks its stack once per run. Reception is one
//! `recvmmsg` per batch; with UDP GRO (turned on when GSO is available) the kernel hands
//! back runs of one sender's datagrams in one buffer with their size, which the interface
//! splits. A kernel or device that refuses GSO turns it off for the interface (the
//! datagrams go one per message). GSO is not used with datagrams above half of 65000
//! bytes (nothing to gain).
//!
//! # Flow control and socket buffers
//!
//! The socket's buffers are set to [`UdpConfig::sock_buf`] (`UCX_UDP_SOCK_BUF`, 4 MiB).
//! The kernel caps them at `net.core.rmem_max` / `wmem_max` (208 KiB on a stock Debian
//! host); a capped buffer is reported once per process at warn level, naming the sysctl.
//! The receive buffer obtained is what the engine offers its senders (its credit, shared
//! among the peers sending at the time), so a sender never has more in flight to us than
//! the socket can hold: a small buffer costs bandwidth, not retransmissions.
//!
//! # Progress
//!
//! [`UdpIface::poll`]: read up to [`UdpConfig::rx_max_poll`] datagrams (nonblocking) and
//! feed them to the engine, which hands a message that is next in order (with nothing
//! queued ahead of it) to the handler straight from the receive buffer, and queues the
//! others (out of order, or behind queued ones) in its receive pool, delivered before the
//! next datagram; run the engine's timers when due ([`ucs::now_ns`]); send what
//! the engine wants sent (acknowledgements, NAKs, retransmissions, probes); deliver the
//! messages the engine releases, in order, to the handler, and turn failed peers into
//! [`IfaceEvent::EpFailed`]`(ep, EndpointTimeout)` for each of their endpoints. If the
//! socket's send buffer is full, the datagrams at hand are copied aside and sent first on
//! the next progress (nothing else is sent meanwhile).
//!
//! # Flush
//!
//! An endpoint is flushed when the peer acknowledged every message sent to it (remote
//! delivery, not just handed to the kernel: a datagram can still be lost after that), so
//! a flush takes a round trip plus [`UdpConfig::ack_delay`] (0 by default: a receiver
//! acknowledges at the end of each batch it reads). The peer must progress to
//! acknowledge: a process that stops progressing for good before its peers' last messages
//! were acknowledged leaves them waiting until [`UdpConfig::timeout`]; with the default
//! delay of 0 that can only happen when an acknowledgement is lost. A failed peer's
//! endpoint reports its error.
//!
//! # Waiting
//!
//! The event descriptor is an epoll set holding the socket and a timerfd.
//! [`UdpIface::arm`] returns `Busy` when events wait, a datagram is held back or waits in
//! the socket, and when an engine timer is already due; otherwise it sets the timerfd to
//! the engine's next deadline (retransmission, delayed acknowledgement, NAK repeat,
//! keepalive, peer timeout), so a sleeper wakes when a datagram arrives *or* the engine
//! needs to act. The timerfd is not read: re-arming it clears it. So `Iface::wait` (arm,
//! then poll the descriptor) and a worker sleeping on its epoll set both keep the
//! protocol running while idle, without spinning: a sender waiting for a dead peer wakes
//! once per (backed-off) retransmission until the peer times out.
//!
//! # Memory
//!
//! Per peer: the engine's record ([`uct_rel::Engine::IDLE_PEER_BYTES`], 156 bytes), a
//! 40-byte table entry, a 4-byte slot of the address index (`addr_index`: the peer's
//! number only, the address stays in the table; about 10 bytes with the index's empty
//! slots) and per endpoint a 12-byte slot: about 220 bytes, no descriptor, no buffer. Shared by all peers: the socket, the
//! receive batch (up to 1 MiB: 64 datagrams, or 16 GRO buffers of 64 KiB), the send
//! batch's headers, and the engine's packet pools, which grow with the
//! messages in flight up to [`UdpConfig::tx_queue`] datagrams each (by default 8192, and
//! at most 64 MiB of datagrams: 1032 on loopback).
//!
//! # Failure
//!
//! A peer that we wait for (unacknowledged messages, or a probe: with
//! [`UdpConfig::keepalive`] set, or while an answer is awaited on one of its endpoints,
//! [`UdpIface::set_awaiting`]) and that stays silent for [`UdpConfig::timeout`] is
//! declared failed by the engine: its endpoints fail with `EndpointTimeout`, later sends
//! on them return that status. An endpoint created again to that address starts a fresh
//! peer.
//!
//! # Untrusted input
//!
//! Every datagram is checked: by size against the receive buffer, by the engine's packet
//! decoder and its range checks, and by the frame decoder. What fails is counted
//! ([`UdpIface::stats`], summed in [`UdpIface::dropped`]) and dropped.
//!
//! All processes must use the same `UCX_UDP_SEG_SIZE`: it is part of the interface
//! address, and an interface with another size is not reachable.

mod addr_index;
pub mod wire;

use crate::am::AmTable;
use crate::slab::Slab;
use crate::tcp::IfaceEvent;
use crate::types::*;
use addr_index::AddrIndex;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;
use ucs::config::{self, Var};
use ucs::sys::udp_batch::{self, OutMsg, RecvBatch, SendBatch};
use ucs::{EventSet, Events, Result, Status};
use uct_rel::packet::{Body, Packet, HEADER_LEN};
use uct_rel::{Engine, Event, ExtPayload, PeerId, PeerStatus, SendError, TxBatch};
use wire::{Frame, FRAME_HDR, PUT_HDR};

pub static VARS: &[Var] = &[
    Var {
        name: "UDP_SEG_SIZE",
        default: "auto",
        doc: "Largest udp datagram payload, headers of rucx included (the largest active message is 22 bytes less). auto: 1472 on IPv4 and 1452 on IPv6 network devices (fits a 1500-byte MTU path), 65000 on loopback devices. 256..65507; all processes must use the same value.",
    },
    Var {
        name: "UDP_WINDOW",
        default: "4096",
        doc: "Unacknowledged udp messages per peer; beyond it sends get NO_RESOURCE. Both ends must agree. What is on the wire at once is bounded in bytes by flow control (the receiver's socket buffer, advertised in every packet) and congestion control, not by this.",
    },
    Var {
        name: "UDP_TIMEOUT",
        default: "10s",
        doc: "A udp peer that acknowledges nothing for this long while we wait for it is unreachable; its endpoints fail with ENDPOINT_TIMEOUT.",
    },
    Var {
        name: "UDP_KEEPALIVE",
        default: "inf",
        doc: "Probe udp peers silent for this long even when nothing is in flight, so that a dead idle peer is noticed (inf: never; idle peers then cost nothing).",
    },
    Var {
        name: "UDP_RTO",
        default: "5ms",
        doc: "Initial udp retransmission timeout (doubles on each expiry up to UDP_RTO_MAX); should exceed the round trip.",
    },
    Var {
        name: "UDP_RTO_MAX",
        default: "100ms",
        doc: "Ceiling of the udp retransmission timeout (one packet is resent per timeout, so a low ceiling is cheap; it bounds the stall when a retransmission and its answer are lost again and again).",
    },
    Var {
        name: "UDP_NAK_INTERVAL",
        default: "500us",
        doc: "Spacing of repeated udp negative acknowledgements for the same gap; about one round trip.",
    },
    Var {
        name: "UDP_ACK_DELAY",
        default: "0",
        doc: "How long a udp receiver may hold an acknowledgement back waiting for a message to carry it. 0: acknowledge at the end of each receive batch (one acknowledgement per batch and peer), so that a process that stops progressing right after receiving leaves no sender waiting.",
    },
    Var {
        name: "UDP_MAX_IMPLICIT_PEERS",
        default: "65536",
        doc: "Udp peers without an endpoint (created by arriving datagrams) an interface keeps; datagrams from further new addresses are dropped.",
    },
    Var {
        name: "UDP_RX_MAX_POLL",
        default: "64",
        doc: "Largest number of datagrams one udp progress call reads.",
    },
    Var {
        name: "UDP_SOCK_BUF",
        default: "4m",
        doc: "Send and receive buffer size requested for the udp socket. The kernel caps it at net.core.rmem_max / wmem_max (a warning says so once); the receive buffer obtained is what a udp interface offers its senders (flow control), so a capped buffer lowers udp bandwidth, not reliability.",
    },
    Var {
        name: "UDP_TX_QUEUE",
        default: "auto",
        doc: "Datagrams a udp interface keeps for retransmission (and receives out of order), over all peers; when full, sends get NO_RESOURCE. auto: 8192, at most 64 MiB of datagrams of UDP_SEG_SIZE.",
    },
    Var {
        name: "UDP_PACING",
        default: "y",
        doc: "After a loss that looks like a queue on the path overflowing (many datagrams of one window missing), spread new udp datagrams to that peer over the round trip for a while instead of sending the window in one burst. n: never pace.",
    },
];

/// Settings of a udp interface. Times are rounded to nanoseconds; `Duration::MAX` means
/// never.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpConfig {
    /// Largest datagram payload (UDP payload) including the engine's and the frame's
    /// headers; `None`: 1472 on IPv4, 1452 on IPv6 (a 1500-byte MTU path), 65000 on a
    /// loopback address.
    pub seg_size: Option<usize>,
    /// Unacknowledged messages per peer.
    pub window: u32,
    /// Silence after which a peer we wait for is declared failed.
    pub timeout: Duration,
    /// Probe idle peers silent for this long (`None`: never).
    pub keepalive: Option<Duration>,
    /// Initial retransmission timeout.
    pub rto: Duration,
    /// Retransmission timeout ceiling.
    pub rto_max: Duration,
    /// NAK repeat spacing.
    pub nak_interval: Duration,
    /// Longest delay of an acknowledgement.
    pub ack_delay: Duration,
    /// Peers no endpoint refers to, at most.
    pub max_implicit_peers: u32,
    /// Datagrams read per progress call.
    pub rx_max_poll: u32,
    /// Socket send and receive buffer size to ask for.
    pub sock_buf: usize,
    /// Send (and out-of-order receive) pool, in datagrams, over all peers.
    /// `None`: 8192 datagrams, at most 64 MiB of them.
    pub tx_queue: Option<u32>,
    /// Pace new datagrams to a peer after an overflow-like loss ([`uct_rel::Config::pacing`]).
    pub pacing: bool,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            seg_size: None,
            window: 4096,
            timeout: Duration::from_secs(10),
            keepalive: None,
            rto: Duration::from_millis(5),
            rto_max: Duration::from_millis(100),
            nak_interval: Duration::from_micros(500),
            ack_delay: Duration::ZERO,
            max_implicit_peers: 65536,
            rx_max_poll: 64,
            sock_buf: 4 << 20,
            tx_queue: None,
            pacing: true,
        }
    }
}

/// Largest UDP payload over IPv4 (65535 - 20 - 8).
pub const MAX_SEG_SIZE: usize = 65507;
/// The default datagram size on a loopback device (its MTU is 64 KiB, and the path never
/// leaves the host): ten times the bandwidth of 1472-byte datagrams there.
pub const LOOPBACK_SEG_SIZE: usize = 65000;
/// Smallest allowed [`UdpConfig::seg_size`].
pub const MIN_SEG_SIZE: usize = 256;

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl UdpConfig {
    pub fn from_env() -> Result<UdpConfig> {
        config::register(VARS);
        let seg = config::raw(&VARS[0]);
        let seg_size = if seg.trim().eq_ignore_ascii_case("auto") {
            None
        } else {
            Some(config::size(&VARS[0])? as usize)
        };
        let u32v = |i: usize| -> Result<u32> {
            u32::try_from(config::u64_value(&VARS[i])?).map_err(|_| Status::InvalidParam)
        };
        let keepalive = config::time(&VARS[3])?;
        let c = UdpConfig {
            seg_size,
            window: u32v(1)?,
            timeout: config::time(&VARS[2])?,
            keepalive: (keepalive != Duration::MAX).then_some(keepalive),
            rto: config::time(&VARS[4])?,
            rto_max: config::time(&VARS[5])?,
            nak_interval: config::time(&VARS[6])?,
            ack_delay: config::time(&VARS[7])?,
            max_implicit_peers: u32v(8)?,
            rx_max_poll: u32v(9)?,
            sock_buf: usize::try_from(config::size(&VARS[10])?).unwrap_or(usize::MAX),
            tx_queue: if config::raw(&VARS[11]).trim().eq_ignore_ascii_case("auto") {
                None
            } else {
                Some(u32v(11)?)
            },
            pacing: config::boolean(&VARS[12])?,
        };
        c.validate()?;
        Ok(c)
    }

    /// Checks every field (and that the engine accepts the result).
    pub fn validate(&self) -> Result<()> {
        let seg_ok = self
            .seg_size
            .map_or(true, |s| (MIN_SEG_SIZE..=MAX_SEG_SIZE).contains(&s));
        if !seg_ok || self.rx_max_poll == 0 || self.sock_buf > i32::MAX as usize {
            return Err(Status::InvalidParam);
        }
        self.engine_config(1472).validate().map_err(|e| {
            tracing::error!("udp: {e}");
            Status::InvalidParam
        })
    }

    /// The datagram payload size on an interface of this address family.
    pub fn seg_size_for(&self, ip: IpAddr) -> usize {
        self.seg_size.unwrap_or(if ip.is_loopback() {
            LOOPBACK_SEG_SIZE
        } else if ip.is_ipv4() {
            1472
        } else {
            1452
        })
    }

    /// The send pool size, in datagrams, for datagrams of `seg_size` bytes.
    pub fn tx_queue_for(&self, seg_size: usize) -> u32 {
        self.tx_queue
            .unwrap_or((8192).min((64 << 20) / seg_size.max(1)) as u32)
    }

    fn engine_config(&self, seg_size: usize) -> uct_rel::Config {
        uct_rel::Config {
            // A fresh incarnation id per interface: a restarted peer's packets are not
            // taken for the old one's.
            session: ucs::sys::host::random_u64() as u32,
            initial_seq: 0,
            window: self.window,
            max_payload: seg_size.saturating_sub(HEADER_LEN),
            ack_delay: ns(self.ack_delay),
            ack_every: (self.window / 4).clamp(1, 32),
            initial_rto: ns(self.rto),
            max_rto: ns(self.rto_max),
            nak_interval: ns(self.nak_interval),
            peer_timeout: ns(self.timeout),
            keepalive: self.keepalive.map(ns),
            // A peer whose answer is awaited (UdpIface::set_awaiting) and that has gone
            // quiet is probed every second, or every UDP_TIMEOUT if that is shorter.
            await_probe: ns(self.timeout).min(1_000_000_000),
            tx_pool_packets: self.tx_queue_for(seg_size),
            rx_pool_packets: self.tx_queue_for(seg_size),
            max_peers: 1 << 24,
            // Replaced by the socket's receive buffer once it is known (UdpIface::open).
            rcv_buf: u32::try_from(self.sock_buf).unwrap_or(u32::MAX).max(1),
            initial_window: 8,
            credit_epoch: 1_000_000,
            pacing: self.pacing,
        }
    }
}

/// Counters of a udp interface (datagrams and what happened to them). The engine's own
/// counters are in [`UdpIface::engine_counters`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams read from the socket.
    pub rx_datagrams: u64,
    /// Datagrams handed to the socket.
    pub tx_datagrams: u64,
    /// Datagrams larger than the configured size, dropped.
    pub rx_oversize: u64,
    /// Datagrams from unknown addresses that are not well-formed packets, dropped.
    pub rx_junk: u64,
    /// Well-formed packets other than data from unknown addresses, dropped.
    pub rx_stray: u64,
    /// Datagrams from new addresses dropped because of [`UdpConfig::max_implicit_peers`].
    pub rx_peers_refused: u64,
    /// Delivered messages whose frame header is invalid, dropped.
    pub rx_bad_frame: u64,
    /// Peers created by arriving datagrams.
    pub implicit_peers: u64,
    /// Sends the socket refused with an error (the datagram is lost; the engine resends).
    pub tx_errors: u64,
    /// Times the socket's send buffer was full.
    pub tx_stalls: u64,
    /// Kernel calls that sent datagrams (sendmmsg; `tx_datagrams / tx_calls` is the batch).
    pub tx_calls: u64,
    /// Datagrams sent as segments of a GSO send.
    pub tx_gso_segments: u64,
    /// recvmmsg calls that returned datagrams.
    pub rx_calls: u64,
    /// Datagrams that arrived coalesced by GRO.
    pub rx_gro_segments: u64,
    /// Put pieces queued (one datagram each, sent from the caller's buffer).
    pub tx_put_pieces: u64,
    /// Put pieces dropped because their target is not a live registration holding them.
    pub rx_put_refused: u64,
}

/// A remote interface.
struct PeerEntry {
    addr: SocketAddr,
    /// Endpoints that refer to it.
    eps: u32,
    failed: bool,
    /// Endpoints to it whose owner awaits an answer ([`UdpIface::set_awaiting`]).
    awaiting: u16,
}

struct UdpEp {
    peer: u32,
    failed: Option<Status>,
    awaiting: bool,
}

// The per-peer state the module docs promise (about 250 bytes with the hash-map entry).
const _: () = assert!(std::mem::size_of::<PeerEntry>() <= 40);
const _: () = assert!(std::mem::size_of::<Option<UdpEp>>() <= 12);
const _: () = assert!(Engine::IDLE_PEER_BYTES <= 160);

const TOK_SOCK: u64 = 0;
const TOK_TIMER: u64 = 1;

/// The send side's batch state: datagrams taken from the engine, the sendmmsg headers,
/// and the messages (single datagrams or GSO runs) they form.
struct TxPath {
    txb: TxBatch,
    sendb: SendBatch,
    out_msgs: Vec<OutMsg>,
}

/// A udp interface on one device.
pub struct UdpIface {
    device: String,
    local: SocketAddr,
    sock: UdpSocket,
    events: EventSet,
    timer: ucs::sys::DeadlineTimer,
    /// Boxed: the engine is large (its counters, scratch packet and configuration), and
    /// the interface enum should not grow by it.
    engine: Box<Engine>,
    peers: Vec<PeerEntry>,
    /// Peer numbers by address (of `peers`).
    by_addr: AddrIndex,
    /// Peers no endpoint refers to.
    unref_peers: u32,
    eps: Slab<UdpEp>,
    handlers: AmTable,
    out_events: Vec<IfaceEvent>,
    /// Receive buffers and headers for recvmmsg (taken out while a batch is processed).
    rxb: Option<Box<RecvBatch>>,
    /// Datagrams taken from the engine for one sendmmsg, and the messages they form
    /// (boxed: the interface enum should not grow by them).
    tx: Box<TxPath>,
    /// Datagrams the socket did not take (its send buffer was full), with their peers,
    /// sent first on the next progress. Copies: a rare path.
    stalled: VecDeque<(u32, Vec<u8>)>,
    /// Messages queued since the last transmit (see `push`).
    deferred: u32,
    /// Their bytes.
    deferred_bytes: usize,
    /// The last time read (by a progress call or a transmit), in `ucs::now_ns` units.
    clock: u64,
    /// The kernel has UDP GSO (and this interface's datagrams are small enough to gain).
    gso: bool,
    /// The socket has UDP GRO on.
    gro: bool,
    cfg: UdpConfig,
    seg_size: usize,
    /// Largest reliable message: frame header and AM bytes.
    max_msg: usize,
    attr: IfaceAttr,
    stats: Box<UdpStats>,
}

fn s_fd(s: &UdpSocket) -> BorrowedFd<'_> {
    s.as_fd()
}

/// Says once per process, at warn level, that the kernel granted smaller socket buffers
/// than asked for, and which sysctl to raise.
fn warn_if_capped(asked: usize, rcv: usize, snd: usize) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static WARNED: AtomicBool = AtomicBool::new(false);
    if (rcv >= asked && snd >= asked) || WARNED.swap(true, Ordering::Relaxed) {
        return;
    }
    let (name, got) = if rcv < asked {
        ("net.core.rmem_max", rcv)
    } else {
        ("net.core.wmem_max", snd)
    };
    tracing::warn!(
        "udp: socket buffers capped by the kernel: asked for {asked} B, got {rcv} B to \
         receive and {snd} B to send; udp bandwidth is limited accordingly (flow control \
         keeps it reliable). Raise {name} (now {got} B) to at least {asked} \
         (sysctl -w {name}={asked}), or lower UCX_UDP_SOCK_BUF to silence this"
    );
}

/// Datagrams taken from the engine per sendmmsg.
pub const TX_BATCH: usize = 128;
/// Messages queued behind others that may wait for the next progress call.
pub const TX_DEFER: u32 = 32;
/// Bytes of messages queued behind others that may wait for the next progress call: a
/// GSO send's worth. Beyond it they go at once, while the packed bytes are still in the
/// CPU's cache (the kernel's copy reads them again; 32 large datagrams, 2 MB, would have
/// left it).
pub const TX_DEFER_BYTES: usize = udp_batch::GSO_MAX_BYTES;

/// The form of an address used as a map key: no IPv6 flow label.
fn key(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(mut v6) => {
            v6.set_flowinfo(0);
            SocketAddr::V6(v6)
        }
        v4 => v4,
    }
}

fn io_would_block(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
    )
}

/// Largest `put_zcopy` (less when half the message window or send pool holds fewer
/// pieces): large enough that a rendezvous moves a megabyte in one call.
pub const MAX_PUT: usize = 1 << 20;

/// The caller's bytes an external payload of this interface's engine names, or nothing.
///
/// # Safety
///
/// `x` must come from this interface's engine (a `Transmit` of it, or its `materialize`):
/// the engine hands back only tokens that a put made from its caller's buffers, and only
/// while their packet is unacknowledged and its peer live, which is within the time
/// `put_zcopy_lent`'s caller keeps them readable (`put_zcopy` copies them before it
/// returns).
#[allow(unsafe_code)] // zero-copy sends read their caller's memory until acknowledged
unsafe fn ext_bytes<'a>(x: Option<ExtPayload>) -> &'a [u8] {
    match x {
        // SAFETY: see above; the token is the address of `len` readable bytes.
        Some(x) => unsafe {
            std::slice::from_raw_parts(x.token as usize as *const u8, x.len as usize)
        },
        None => &[],
    }
}

/// What became of the reliable messages handed up in one go.
#[derive(Default)]
struct RxCount {
    delivered: usize,
    bad: u64,
    refused: u64,
}

impl RxCount {
    /// Hands an active message to `f`, or writes a put piece into its registration.
    #[inline]
    fn frame(&mut self, m: &[u8], f: &mut impl FnMut(u8, &[u8])) {
        match wire::parse(m) {
            Ok(Frame::Am(id, data)) => {
                f(id, data);
                self.delivered += 1;
            }
            Ok(Frame::Put { reg, addr, data }) => {
                let mut alive = crate::md::wire_target(reg, addr, data.len() as u64);
                match crate::rma::registered_mut(&mut alive, addr, data.len()) {
                    Some(dst) => dst.copy_from_slice(data),
                    None => self.refused += 1,
                }
            }
            Err(_) => self.bad += 1,
        }
    }
}

impl UdpIface {
    /// Opens an interface bound to `ip` (port chosen by the kernel) of `device`.
    pub fn open(device: &str, ip: IpAddr, cfg: UdpConfig) -> Result<UdpIface> {
        cfg.validate()?;
        let bind = SocketAddr::new(ip, 0);
        let s = Socket::new(
            Domain::for_address(bind),
            Type::DGRAM.nonblocking().cloexec(),
            Some(Protocol::UDP),
        )?;
        if ip.is_ipv6() {
            s.set_only_v6(true)?;
        }
        // Best effort: the kernel caps these at its maxima (and reports twice what it
        // grants: half is its bookkeeping).
        let _ = s.set_recv_buffer_size(cfg.sock_buf);
        let _ = s.set_send_buffer_size(cfg.sock_buf);
        let rcv = s.recv_buffer_size().unwrap_or(0) / 2;
        let snd = s.send_buffer_size().unwrap_or(0) / 2;
        warn_if_capped(cfg.sock_buf, rcv, snd);
        s.bind(&SockAddr::from(bind)).map_err(|e| {
            tracing::debug!("udp: bind to {bind} failed: {e}");
            Status::NoDevice
        })?;
        let local = s.local_addr()?.as_socket().ok_or(Status::NoDevice)?;
        let sock: UdpSocket = s.into();
        let timer = ucs::sys::DeadlineTimer::new()?;
        let events = EventSet::new()?;
        events.add(&sock, Events::READABLE, TOK_SOCK)?;
        events.add(&timer, Events::READABLE, TOK_TIMER)?;
        let seg_size = cfg.seg_size_for(ip);
        let mut engine = Box::new(Engine::new(cfg.engine_config(seg_size)).map_err(|e| {
            tracing::error!("udp: {e}");
            Status::InvalidParam
        })?);
        // GSO pays off only when several datagrams fit one send; GRO then hands them back
        // in one buffer. Either is used only if this kernel has it.
        let gso = 2 * seg_size <= udp_batch::GSO_MAX_BYTES && udp_batch::gso_supported(s_fd(&sock));
        let gro = gso && udp_batch::enable_gro(s_fd(&sock));
        let slot_len = if gro {
            udp_batch::GRO_MAX_BYTES
        } else {
            // One byte more than the largest datagram: a longer one shows up as cut.
            seg_size + 1
        };
        let slots = ((1 << 20) / slot_len)
            .clamp(4, 64)
            .min(cfg.rx_max_poll as usize);
        let rxb = Some(Box::new(RecvBatch::new(slots, slot_len)));
        // What senders may have in flight to us together: the receive buffer granted. The
        // kernel counts each datagram's bookkeeping against the doubled figure it reports:
        // large (or GRO-coalesced) datagrams fill three quarters of it with data, small ones
        // about half.
        let usable = if gro || seg_size >= 8192 {
            rcv * 3 / 2
        } else {
            rcv
        };
        engine.set_rcv_buf(u32::try_from(usable.max(seg_size)).unwrap_or(u32::MAX));
        let max_msg = seg_size - HEADER_LEN;
        let max_am = max_msg - FRAME_HDR;
        // A put must fit a peer's message window and the send pool at once (put_zcopy
        // queues all its pieces or none); half of them, so that one can queue while
        // another is in flight.
        let put_pieces = (cfg.window.min(cfg.tx_queue_for(seg_size)) / 2).max(1) as usize;
        let max_put = MAX_PUT.min(put_pieces * (max_msg - FRAME_HDR - PUT_HDR));
        // A loopback interface reaches only this host's peers, over a path with large
        // datagrams; it is the cheaper way to them, so that the protocol layer, which
        // takes the cheapest interface that reaches a peer, sends to a same-host peer
        // through it rather than through a network device's (1472-byte datagrams, ten to
        // forty times the per-datagram work for the same bytes).
        let cost = CostModel {
            overhead: 2e-6,
            latency: if ip.is_loopback() { 10e-6 } else { 12e-6 },
            bandwidth: 1e9,
        };
        let attr = IfaceAttr {
            caps: Caps::AM_SHORT
                | Caps::AM_BCOPY
                | Caps::AM_ZCOPY
                | Caps::PUT_ZCOPY
                | Caps::CONNECT_TO_IFACE
                | Caps::EVENT_RECV,
            max_am_short: max_am - 8,
            max_am_bcopy: max_am,
            max_am_zcopy: max_am,
            max_am_hdr: max_am.min(128),
            max_put_short: 0,
            max_put_bcopy: 0,
            max_put_zcopy: max_put,
            max_get_bcopy: 0,
            max_get_zcopy: 0,
            iface_addr_len: wire::encode_addr(&local, seg_size as u16).len(),
            device_addr_len: crate::shm::address::DEVICE_ADDR_LEN,
            cost,
            // A put goes from the caller's buffer to the kernel: one copy fewer than an
            // active message on the sending side.
            rma_cost: CostModel {
                bandwidth: 1.5e9,
                ..cost
            },
        };
        tracing::debug!(
            "udp: interface on {device} at {local}, datagrams of {seg_size} bytes, \
             receive buffer {rcv} B, send buffer {snd} B, gso {gso}, gro {gro}"
        );
        Ok(UdpIface {
            device: device.to_string(),
            local,
            sock,
            events,
            timer,
            engine,
            peers: Vec::new(),
            by_addr: AddrIndex::default(),
            unref_peers: 0,
            eps: Slab::default(),
            handlers: AmTable::default(),
            out_events: Vec::new(),
            rxb,
            tx: Box::new(TxPath {
                txb: TxBatch::new(),
                sendb: SendBatch::new(),
                out_msgs: Vec::new(),
            }),
            stalled: VecDeque::new(),
            deferred: 0,
            deferred_bytes: 0,
            clock: ucs::now_ns(),
            gso,
            gro,
            cfg,
            seg_size,
            max_msg,
            attr,
            stats: Box::default(),
        })
    }

    pub fn attr(&self) -> &IfaceAttr {
        &self.attr
    }

    pub fn device(&self) -> &str {
        &self.device
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The datagram payload size of this interface.
    pub fn seg_size(&self) -> usize {
        self.seg_size
    }

    pub fn address(&self) -> Vec<u8> {
        wire::encode_addr(&self.local, self.seg_size as u16)
    }

    pub fn handlers(&mut self) -> &mut AmTable {
        &mut self.handlers
    }

    /// Whether the kernel path uses UDP GSO on send and GRO on receive.
    pub fn offloads(&self) -> (bool, bool) {
        (self.gso, self.gro)
    }

    /// The congestion window and the credit the peer of `ep` advertised, in bytes.
    pub fn ep_window(&self, ep: EpId) -> Result<(u32, u32)> {
        let peer = self.ep_peer(ep)?;
        self.engine
            .peer_window(PeerId(peer))
            .ok_or(Status::EndpointTimeout)
    }

    /// The interface's datagram counters.
    pub fn stats(&self) -> &UdpStats {
        &self.stats
    }

    /// A diagnostic dump for a stalled run (datagram counters, what waits in the
    /// interface, the reliability engine's state); slow, for error reports.
    pub fn describe(&self) -> String {
        let live: Vec<String> = self
            .peers
            .iter()
            .enumerate()
            .filter(|(_, p)| p.eps > 0 || p.failed)
            .map(|(i, p)| {
                format!(
                    "{i}={} eps {} failed {} awaiting {}",
                    p.addr, p.eps, p.failed, p.awaiting
                )
            })
            .collect();
        format!(
            "udp {} ({}): clock {} stalled {} deferred {} ({} bytes) events {}\npeers: {}\n{:?}\nengine: {}",
            self.device,
            self.local,
            self.clock,
            self.stalled.len(),
            self.deferred,
            self.deferred_bytes,
            self.out_events.len(),
            live.join(", "),
            self.stats,
            self.engine.describe()
        )
    }

    /// The reliability engine's counters (retransmissions, duplicates, malformed, ...).
    pub fn engine_counters(&self) -> &uct_rel::Counters {
        self.engine.counters()
    }

    /// Peers known (with or without endpoints).
    pub fn peer_count(&self) -> usize {
        self.peers.len()
    }

    /// Datagrams dropped as malformed, invalid or unexpected: oversize, junk or stray
    /// packets from unknown addresses, refused new peers, bad frames, and what the engine
    /// rejected (malformed, impossible contents, another session of a known peer).
    /// Duplicates and retransmissions are normal protocol traffic and not counted.
    pub fn dropped(&self) -> u64 {
        let c = self.engine.counters();
        let s = &self.stats;
        s.rx_oversize
            + s.rx_junk
            + s.rx_stray
            + s.rx_peers_refused
            + s.rx_bad_frame
            + c.rx_malformed
            + c.rx_invalid
            + c.rx_stale_session
    }

    /// True when `iface_addr` can be reached from this interface: same datagram size and
    /// address family, and a loopback peer only from a loopback interface of the same
    /// host.
    pub fn is_reachable(&self, same_host: bool, iface_addr: &[u8]) -> bool {
        let Ok((a, seg)) = wire::decode_addr(iface_addr) else {
            return false;
        };
        usize::from(seg) == self.seg_size
            && a.is_ipv4() == self.local.is_ipv4()
            && (a.ip().is_loopback() == self.local.ip().is_loopback())
            && (!a.ip().is_loopback() || same_host)
    }

    #[inline]
    fn find_peer(&self, addr: &SocketAddr) -> Option<u32> {
        self.by_addr.find(addr, |p| self.peers[p as usize].addr)
    }

    /// Adds a peer at `addr` that no endpoint refers to yet.
    fn add_peer(&mut self, addr: SocketAddr, now: u64) -> Result<u32> {
        let id = u32::try_from(self.peers.len()).map_err(|_| Status::NoResource)?;
        self.engine
            .add_peer(PeerId(id), now)
            .map_err(|_| Status::NoResource)?;
        self.peers.push(PeerEntry {
            addr,
            eps: 0,
            failed: false,
            awaiting: 0,
        });
        let peers = &self.peers;
        self.by_addr.insert(&addr, id, |p| peers[p as usize].addr);
        self.unref_peers += 1;
        Ok(id)
    }

    pub fn ep_create(&mut self, iface_addr: &[u8]) -> Result<EpId> {
        let (addr, seg) = wire::decode_addr(iface_addr)?;
        if usize::from(seg) != self.seg_size || addr.is_ipv4() != self.local.is_ipv4() {
            tracing::debug!("udp: {addr} (datagrams of {seg} bytes) is not reachable");
            return Err(Status::Unreachable);
        }
        let addr = key(addr);
        let now = ucs::now_ns();
        let peer = match self.find_peer(&addr) {
            Some(p) => {
                let pe = &mut self.peers[p as usize];
                if pe.failed {
                    // A new endpoint to a peer that failed starts afresh.
                    self.engine.remove_peer(PeerId(p));
                    self.engine
                        .add_peer(PeerId(p), now)
                        .map_err(|_| Status::NoResource)?;
                    pe.failed = false;
                }
                p
            }
            None => self.add_peer(addr, now)?,
        };
        let pe = &mut self.peers[peer as usize];
        if pe.eps == 0 {
            self.unref_peers -= 1;
        }
        pe.eps += 1;
        let ep = self.eps.insert(UdpEp {
            peer,
            failed: None,
            awaiting: false,
        })?;
        Ok(ep)
    }

    /// Destroys an endpoint. Its peer stays known, and what was sent to it is still
    /// delivered (flush first to know that it was).
    pub fn ep_destroy(&mut self, ep: EpId) -> Result<()> {
        let e = self.eps.remove(ep)?;
        // Puts through it may still refer to their caller's buffer, which the caller may
        // release once the endpoint is gone: their data moves into the engine.
        self.engine.materialize(PeerId(e.peer), |x, buf| {
            #[allow(unsafe_code)] // see ext_bytes
            // SAFETY: `x` comes from this interface's engine (see `ext_bytes`), and the
            // endpoint, whose destruction ends the buffer's promise, is destroyed only now.
            buf.copy_from_slice(unsafe { ext_bytes(Some(x)) });
        });
        if e.awaiting {
            self.count_awaiting(e.peer, false);
        }
        if let Some(pe) = self.peers.get_mut(e.peer as usize) {
            pe.eps -= 1;
            if pe.eps == 0 {
                self.unref_peers += 1;
            }
        }
        Ok(())
    }

    /// Tells the reliability engine whether an answer is awaited on `ep` (a reply to a
    /// request the peer already acknowledged): while one is and nothing is in flight, the
    /// peer is probed, so that its death is found even with keepalive off
    /// (`uct_rel::Engine::set_awaiting`). A peer is awaited while any endpoint to it is.
    pub fn set_awaiting(&mut self, ep: EpId, on: bool) -> Result<()> {
        let e = self.eps.get_mut(ep)?;
        if e.awaiting != on {
            e.awaiting = on;
            let peer = e.peer;
            self.count_awaiting(peer, on);
        }
        Ok(())
    }

    fn count_awaiting(&mut self, peer: u32, on: bool) {
        if let Some(pe) = self.peers.get_mut(peer as usize) {
            pe.awaiting = if on {
                pe.awaiting.saturating_add(1)
            } else {
                pe.awaiting.saturating_sub(1)
            };
            self.engine.set_awaiting(PeerId(peer), pe.awaiting > 0);
        }
    }

    pub fn ep_count(&self) -> usize {
        self.eps.len()
    }

    pub fn check_ep(&self, ep: EpId) -> Result<()> {
        self.eps.get(ep).map(|_| ())
    }

    /// The peer of a live endpoint, or its error.
    #[inline]
    fn ep_peer(&self, ep: EpId) -> Result<u32> {
        let e = self.eps.get(ep)?;
        match e.failed {
            Some(s) => Err(s),
            None => Ok(e.peer),
        }
    }

    fn peer_has_space(&self, peer: u32) -> bool {
        self.engine.can_send(PeerId(peer))
    }

    /// True when `ep` can take another message now. A failed endpoint "has space": its
    /// operations fail at once instead of waiting.
    pub fn ep_has_space(&self, ep: EpId) -> Result<bool> {
        let e = self.eps.get(ep)?;
        Ok(e.failed.is_some() || self.peer_has_space(e.peer))
    }

    /// True when the peer of `ep` acknowledged everything sent to it.
    pub fn ep_is_flushed(&self, ep: EpId) -> Result<bool> {
        let peer = self.ep_peer(ep)?;
        match self.engine.peer_status(PeerId(peer)) {
            PeerStatus::Active { unacked } => Ok(unacked == 0),
            PeerStatus::Failed => Err(Status::EndpointTimeout),
            PeerStatus::Unknown => Err(Status::InvalidParam),
        }
    }

    /// A mark of everything sent on `ep`'s peer so far, for [`UdpIface::ep_flushed_to`].
    pub fn ep_flush_mark(&self, ep: EpId) -> Result<u64> {
        let peer = self.ep_peer(ep)?;
        self.engine
            .queued_mark(PeerId(peer))
            .map(u64::from)
            .ok_or(Status::EndpointTimeout)
    }

    /// True when the peer of `ep` acknowledged everything sent before `mark` was taken,
    /// whatever was sent since.
    pub fn ep_flushed_to(&self, ep: EpId, mark: u64) -> Result<bool> {
        let peer = self.ep_peer(ep)?;
        self.engine
            .acked_to(PeerId(peer), mark as u32)
            .ok_or(Status::EndpointTimeout)
    }

    /// True when every peer that has not failed acknowledged everything sent to it.
    pub fn is_flushed(&self) -> bool {
        (0..self.peers.len() as u32).all(|p| {
            !matches!(self.engine.peer_status(PeerId(p)),
                PeerStatus::Active { unacked } if unacked > 0)
        })
    }

    /// Queues one reliable message for `peer`, which `pack` writes straight into the
    /// engine's send buffer (frame header included; it returns the length), and sends
    /// what can go. This is the one copy of the message before the kernel's.
    #[inline]
    fn push(&mut self, peer: u32, pack: impl FnOnce(&mut [u8]) -> usize) -> Result<Outcome> {
        let idle = matches!(
            self.engine.peer_status(PeerId(peer)),
            PeerStatus::Active { unacked: 0 }
        );
        // The engine reads the time of a send only for a peer's first unacknowledged
        // message (it starts the peer's timers); behind others the last time read will
        // do, and the clock is read again only if the batch goes out now.
        let now = if idle { ucs::now_ns() } else { self.clock };
        let mut len = 0;
        let pack = |b: &mut [u8]| {
            len = pack(b);
            len
        };
        match self.engine.send_with(PeerId(peer), now, pack) {
            Ok(()) => {
                // A message to an idle peer goes at once (latency); behind others, up to
                // TX_DEFER messages or TX_DEFER_BYTES wait for the next progress or for
                // the batch to fill, so that they reach the kernel together (one
                // sendmmsg, one GSO send).
                self.deferred += 1;
                self.deferred_bytes += len;
                if idle {
                    self.transmit(now);
                } else if self.deferred >= TX_DEFER || self.deferred_bytes >= TX_DEFER_BYTES {
                    self.transmit(ucs::now_ns());
                }
                Ok(Outcome::Done(()))
            }
            Err(SendError::WindowFull) => Ok(Outcome::NoResource),
            Err(SendError::Failed) => Err(Status::EndpointTimeout),
            Err(SendError::UnknownPeer | SendError::TooLarge) => Err(Status::InvalidParam),
        }
    }

    /// Sends one active message made of `parts`, gathered into the send buffer.
    fn send_parts(&mut self, ep: EpId, id: u8, parts: &[&[u8]]) -> Result<Outcome> {
        let peer = self.ep_peer(ep)?;
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if id >= AM_ID_MAX || FRAME_HDR + total > self.max_msg {
            return Err(Status::InvalidParam);
        }
        self.push(peer, |buf| {
            buf[..FRAME_HDR].copy_from_slice(&wire::frame_header(id));
            let mut at = FRAME_HDR;
            for p in parts {
                buf[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            at
        })
    }

    pub fn am_short(&mut self, ep: EpId, id: u8, hdr: u64, payload: &[u8]) -> Result<Outcome> {
        if payload.len() > self.attr.max_am_short {
            return Err(Status::InvalidParam);
        }
        self.send_parts(ep, id, &[&hdr.to_ne_bytes(), payload])
    }

    pub fn am_bcopy(
        &mut self,
        ep: EpId,
        id: u8,
        pack: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<Outcome<usize>> {
        let peer = self.ep_peer(ep)?;
        // Refuse a bad id, and wait for room, before the packer runs.
        if id >= AM_ID_MAX {
            return Err(Status::InvalidParam);
        }
        if !self.peer_has_space(peer) {
            return Ok(Outcome::NoResource);
        }
        let mut packed = 0;
        let r = self.push(peer, |buf| {
            buf[..FRAME_HDR].copy_from_slice(&wire::frame_header(id));
            packed = pack(&mut buf[FRAME_HDR..]);
            // More than the buffer is refused by the engine (nothing is queued).
            FRAME_HDR.saturating_add(packed)
        })?;
        Ok(match r {
            Outcome::Done(()) => Outcome::Done(packed),
            Outcome::InProgress => Outcome::InProgress,
            Outcome::NoResource => Outcome::NoResource,
        })
    }

    /// Sends `header` and the buffers of `iov`, gathered into one datagram.
    pub fn am_zcopy(&mut self, ep: EpId, id: u8, header: &[u8], iov: &[&[u8]]) -> Result<Outcome> {
        if header.len() > self.attr.max_am_hdr {
            return Err(Status::InvalidParam);
        }
        let peer = self.ep_peer(ep)?;
        let total = header.len() + iov.iter().map(|b| b.len()).sum::<usize>();
        if id >= AM_ID_MAX || FRAME_HDR + total > self.max_msg {
            return Err(Status::InvalidParam);
        }
        self.push(peer, |buf| {
            buf[..FRAME_HDR].copy_from_slice(&wire::frame_header(id));
            let mut at = FRAME_HDR;
            for p in std::iter::once(&header).chain(iov) {
                buf[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            at
        })
    }

    /// Writes the concatenation of `iov` at `addr` of the peer, inside the registration
    /// `rkey` names (a wire key of the peer's udp domain), copying the data into the send
    /// pool: `Done`, and the buffers are free on return. See
    /// [`UdpIface::put_zcopy_lent`] for the variant without the copy. `NoResource` when
    /// not every piece fits the peer's window now; nothing is queued then. Remote
    /// completion is ordered like any message: an active message sent after the put is
    /// delivered after its data was written.
    pub fn put_zcopy(
        &mut self,
        ep: EpId,
        iov: &[&[u8]],
        addr: u64,
        rkey: &crate::Rkey,
    ) -> Result<Outcome> {
        let peer = self.ep_peer(ep)?;
        let out = self.queue_put(peer, iov, addr, rkey)?;
        if out == Outcome::InProgress {
            // The pieces just queued refer to `iov`, which is only borrowed: copy them.
            self.engine.materialize(PeerId(peer), |x, buf| {
                #[allow(unsafe_code)] // see ext_bytes
                // SAFETY: `x` comes from this interface's engine (see `ext_bytes`); the
                // pieces of this put refer to `iov`, still borrowed here, and those of
                // earlier lent puts to buffers their callers still keep.
                buf.copy_from_slice(unsafe { ext_bytes(Some(x)) });
            });
            self.transmit(ucs::now_ns());
            return Ok(Outcome::Done(()));
        }
        Ok(out)
    }

    /// [`UdpIface::put_zcopy`] without the copy: each datagram is a put header in the
    /// send pool followed by a piece of a buffer of `iov`, which `sendmmsg` gathers (also
    /// for a retransmission). `InProgress` on success.
    ///
    /// # Safety
    ///
    /// After an `InProgress`, the buffers of `iov` must stay allocated and unchanged until
    /// the endpoint is flushed past the put ([`UdpIface::ep_is_flushed`], or
    /// [`UdpIface::ep_flushed_to`] a mark taken after it), its peer failed, or the
    /// endpoint was destroyed (which copies what is still unacknowledged).
    #[allow(unsafe_code)] // the lent buffers' lifetime is the caller's promise
    pub unsafe fn put_zcopy_lent(
        &mut self,
        ep: EpId,
        iov: &[&[u8]],
        addr: u64,
        rkey: &crate::Rkey,
    ) -> Result<Outcome> {
        let peer = self.ep_peer(ep)?;
        let out = self.queue_put(peer, iov, addr, rkey)?;
        if out == Outcome::InProgress {
            self.transmit(ucs::now_ns());
        }
        Ok(out)
    }

    /// Queues the pieces of a put as external payloads referring to `iov` (all of them,
    /// `InProgress`, or none, `NoResource`); transmits nothing.
    fn queue_put(
        &mut self,
        peer: u32,
        iov: &[&[u8]],
        addr: u64,
        rkey: &crate::Rkey,
    ) -> Result<Outcome> {
        let reg = rkey.wire_reg().ok_or(Status::InvalidParam)?;
        let total: usize = iov.iter().map(|b| b.len()).sum();
        if total > self.attr.max_put_zcopy {
            return Err(Status::InvalidParam);
        }
        rkey.check(addr, total)?;
        let piece = self.max_msg - FRAME_HDR - PUT_HDR;
        let packets: usize = iov.iter().map(|b| b.len().div_ceil(piece)).sum();
        let wire_bytes = (total + packets * (HEADER_LEN + FRAME_HDR + PUT_HDR)) as u64;
        if !self
            .engine
            .room_for_ext(PeerId(peer), packets as u32, wire_bytes)
        {
            return Ok(Outcome::NoResource);
        }
        let now = ucs::now_ns();
        let mut at = addr;
        for b in iov {
            for chunk in b.chunks(piece) {
                let ext = ExtPayload {
                    token: chunk.as_ptr() as u64,
                    len: chunk.len() as u32, // <= piece < 64 KiB
                };
                let head = wire::put_header(reg, at);
                let r = self.engine.send_ext(PeerId(peer), now, ext, |buf| {
                    buf[..head.len()].copy_from_slice(&head);
                    head.len()
                });
                match r {
                    Ok(()) => {}
                    // room_for_ext said every piece fits; only a failure can intervene.
                    Err(SendError::Failed) => return Err(Status::EndpointTimeout),
                    Err(_) => return Err(Status::NoResource),
                }
                at += chunk.len() as u64;
            }
        }
        self.stats.tx_put_pieces += packets as u64;
        Ok(Outcome::InProgress)
    }

    /// True when no peer is known: nothing can be in flight and nothing is expected, so
    /// progress may poll rarely (the first datagram of a new peer waits a little).
    pub fn is_idle(&self) -> bool {
        self.peers.is_empty()
    }

    /// Failed endpoints since the last call.
    pub fn take_events(&mut self) -> Vec<IfaceEvent> {
        std::mem::take(&mut self.out_events)
    }

    pub fn has_events(&self) -> bool {
        !self.out_events.is_empty()
    }

    /// Reads datagrams, runs due timers, sends what the engine wants sent, and delivers
    /// arrived messages to `f(am_id, bytes)`. Returns messages delivered plus datagrams
    /// read.
    pub fn poll(&mut self, f: &mut impl FnMut(u8, &[u8])) -> usize {
        let now = ucs::now_ns();
        let got = self.recv_batch(now, f);
        if self.engine.next_timeout().is_some_and(|t| t <= now) {
            self.engine.on_timeout(now);
        }
        self.transmit(now);
        got + self.deliver(f)
    }

    pub fn progress(&mut self) -> usize {
        let mut handlers = std::mem::take(&mut self.handlers);
        let n = self.poll(&mut |id, d| handlers.dispatch(id, d));
        self.handlers = handlers;
        n
    }

    /// Reads datagrams and feeds them to the engine; a message that is next in order is
    /// delivered to `f` straight from the receive buffer, and anything the engine queued
    /// is delivered before the next datagram (so that the direct path stays open).
    /// Returns datagrams read plus messages delivered.
    fn recv_batch(&mut self, now: u64, f: &mut impl FnMut(u8, &[u8])) -> usize {
        let Some(mut rxb) = self.rxb.take() else {
            return 0;
        };
        let mut got = 0;
        let mut delivered = 0;
        let mut budget = self.cfg.rx_max_poll as usize;
        while budget > 0 {
            let n = match rxb.recv(self.sock.as_fd(), budget) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    // E.g. an ICMP error reported on the socket: nothing to read here.
                    tracing::debug!("udp: receive failed: {e}");
                    break;
                }
            };
            self.stats.rx_calls += 1;
            budget = budget.saturating_sub(n);
            for i in 0..n {
                let m = rxb.get(i);
                let Some(from) = m.from else {
                    got += 1;
                    self.stats.rx_junk += 1;
                    continue;
                };
                let from = key(from);
                let seg = m.seg.unwrap_or(m.data.len()).max(1);
                if m.seg.is_some() {
                    self.stats.rx_gro_segments += m.data.len().div_ceil(seg) as u64;
                }
                if m.truncated || seg > self.seg_size {
                    got += 1;
                    self.stats.rx_oversize += 1;
                    continue;
                }
                // An empty datagram is one datagram too (and junk).
                let whole = std::iter::once(m.data).filter(|_| m.seg.is_none());
                let parts = m.data.chunks(seg).filter(|_| m.seg.is_some());
                for d in whole.chain(parts) {
                    got += 1;
                    let peer = match self.find_peer(&from) {
                        Some(p) => p,
                        None => match self.implicit_peer(from, d, now) {
                            Some(p) => p,
                            None => continue,
                        },
                    };
                    let mut n = RxCount::default();
                    self.engine
                        .on_packet_with(PeerId(peer), d, now, &mut |_, m| n.frame(m, f));
                    self.stats.rx_bad_frame += n.bad;
                    self.stats.rx_put_refused += n.refused;
                    delivered += n.delivered;
                    if self.engine.has_events() {
                        delivered += self.deliver(f);
                    }
                }
            }
            if n < rxb.slots() {
                break; // the socket is drained
            }
        }
        self.rxb = Some(rxb);
        self.stats.rx_datagrams += got as u64;
        got + delivered
    }

    /// A peer for a datagram from an unknown address: only a well-formed data packet makes
    /// one, within the bound.
    #[cold]
    fn implicit_peer(&mut self, from: SocketAddr, d: &[u8], now: u64) -> Option<u32> {
        match Packet::decode(d) {
            Ok(Packet {
                body: Body::Data { .. },
                ..
            }) => {}
            Ok(_) => {
                self.stats.rx_stray += 1;
                return None;
            }
            Err(_) => {
                self.stats.rx_junk += 1;
                return None;
            }
        }
        if self.unref_peers >= self.cfg.max_implicit_peers {
            self.stats.rx_peers_refused += 1;
            tracing::debug!("udp: datagram from new peer {from} dropped: too many peers");
            return None;
        }
        let p = self.add_peer(from, now).ok()?;
        self.stats.implicit_peers += 1;
        Some(p)
    }

    /// Sends the datagrams held back earlier, one by one; false if the socket's send
    /// buffer is still full.
    fn send_stalled(&mut self) -> bool {
        while let Some((p, bytes)) = self.stalled.front() {
            let addr = self.peers[*p as usize].addr;
            match self.sock.send_to(bytes, addr) {
                Err(e) if io_would_block(&e) => return false,
                Err(_) => self.stats.tx_errors += 1,
                Ok(_) => self.stats.tx_datagrams += 1,
            }
            self.stalled.pop_front();
        }
        true
    }

    /// Holds back the datagrams of `out_msgs[from..]` (copies; sent by `send_stalled`).
    #[cold]
    fn stall_rest(&mut self, from: usize) {
        for m in &self.tx.out_msgs[from..] {
            for k in m.first..m.first + m.count {
                let t = self.engine.batch_item(&self.tx.txb, k as usize);
                #[allow(unsafe_code)] // see ext_bytes
                // SAFETY: `t.ext` comes from this interface's engine (see `ext_bytes`).
                let tail = unsafe { ext_bytes(t.ext) };
                self.stalled.push_back((t.peer.0, [t.bytes, tail].concat()));
            }
        }
    }

    /// Hands the engine's datagrams to the socket in batches (sendmmsg, and GSO where
    /// consecutive datagrams go to one peer) until it has none or the socket's send buffer
    /// is full (what is at hand is then kept for the next call).
    fn transmit(&mut self, now: u64) {
        self.clock = now;
        self.deferred = 0;
        self.deferred_bytes = 0;
        if !self.stalled.is_empty() && !self.send_stalled() {
            return;
        }
        loop {
            let n = self
                .engine
                .poll_transmit_batch(now, &mut self.tx.txb, TX_BATCH);
            if n == 0 {
                return;
            }
            self.group(n);
            let (engine, txb) = (&self.engine, &self.tx.txb);
            let r = self
                .tx
                .sendb
                .send(self.sock.as_fd(), &self.tx.out_msgs, |i| {
                    let t = engine.batch_item(txb, i);
                    #[allow(unsafe_code)] // see ext_bytes
                    // SAFETY: `t.ext` comes from this interface's engine (see `ext_bytes`).
                    let tail = unsafe { ext_bytes(t.ext) };
                    (t.bytes, tail)
                });
            self.stats.tx_calls += 1;
            match r {
                Ok(_) => self.stats.tx_datagrams += n as u64,
                Err((done, err)) => {
                    let sent: u32 = self.tx.out_msgs[..done].iter().map(|m| m.count).sum();
                    self.stats.tx_datagrams += u64::from(sent);
                    match err {
                        udp_batch::SendError::WouldBlock => {
                            self.stats.tx_stalls += 1;
                            self.stall_rest(done);
                            return;
                        }
                        udp_batch::SendError::GsoRefused(_) => {
                            tracing::debug!("udp: the kernel refused a GSO send; sending datagrams one by one from now on");
                            self.gso = false;
                            self.stall_rest(done);
                        }
                        udp_batch::SendError::Failed(i, e) => {
                            // Lost like datagrams on the wire: the engine recovers them,
                            // or the peer times out.
                            self.stats.tx_errors += u64::from(self.tx.out_msgs[i].count);
                            tracing::debug!(
                                "udp: send to {} failed: {e}",
                                self.tx.out_msgs[i].addr
                            );
                            self.stall_rest(i + 1);
                        }
                    }
                    if !self.send_stalled() {
                        return;
                    }
                }
            }
        }
    }

    /// Forms `out_msgs` from the `n` datagrams of the batch: runs of datagrams to one peer
    /// of one size (the last may be shorter) become one GSO message when the kernel has
    /// GSO, every other datagram a message of its own.
    fn group(&mut self, n: usize) {
        self.tx.out_msgs.clear();
        let mut cur: Option<(u32, OutMsg, usize, usize)> = None; // peer, msg, seg, bytes
        for i in 0..n {
            let t = self.engine.batch_item(&self.tx.txb, i);
            let len = t.bytes.len() + t.ext.map_or(0, |x| x.len as usize);
            let peer = t.peer.0;
            if let Some((p, mut m, seg, bytes)) = cur {
                let fits = self.gso
                    && p == peer
                    && len <= seg
                    && (m.count as usize) < udp_batch::GSO_MAX_SEGMENTS
                    && bytes + len <= udp_batch::GSO_MAX_BYTES;
                if fits {
                    m.count += 1;
                    if len < seg {
                        // A shorter datagram ends a GSO run.
                        cur = None;
                        self.finish(m);
                    } else {
                        cur = Some((p, m, seg, bytes + len));
                    }
                    continue;
                }
            }
            if let Some((_, m, _, _)) = cur.take() {
                self.finish(m);
            }
            let Some(pe) = self.peers.get(peer as usize) else {
                continue;
            };
            cur = Some((
                peer,
                OutMsg {
                    addr: pe.addr,
                    first: i as u32,
                    count: 1,
                    gso: None,
                },
                len,
                len,
            ));
        }
        if let Some((_, m, _, _)) = cur.take() {
            self.finish(m);
        }
    }

    fn finish(&mut self, mut m: OutMsg) {
        if m.count > 1 {
            let t = self.engine.batch_item(&self.tx.txb, m.first as usize);
            let seg = t.bytes.len() + t.ext.map_or(0, |x| x.len as usize);
            m.gso = Some(seg as u16);
            self.stats.tx_gso_segments += u64::from(m.count);
        }
        self.tx.out_msgs.push(m);
    }

    fn deliver(&mut self, f: &mut impl FnMut(u8, &[u8])) -> usize {
        let mut n = RxCount::default();
        let mut failed: Option<u32> = None;
        while let Some(ev) = self.engine.poll_event() {
            match ev {
                Event::Deliver { payload, .. } => n.frame(payload, f),
                Event::PeerFailed(p) => {
                    failed = Some(p.0);
                    break;
                }
            }
        }
        self.stats.rx_bad_frame += n.bad;
        self.stats.rx_put_refused += n.refused;
        let mut delivered = n.delivered;
        if let Some(p) = failed {
            self.peer_failed(p);
            // More events may follow the failure.
            delivered += self.deliver(f);
        }
        delivered
    }

    #[cold]
    fn peer_failed(&mut self, p: u32) {
        let Some(pe) = self.peers.get_mut(p as usize) else {
            return;
        };
        pe.failed = true;
        tracing::debug!("udp: peer {} timed out", pe.addr);
        self.stalled.retain(|(q, _)| *q != p);
        for (i, e) in self.eps.iter_mut() {
            if e.peer == p && e.failed.is_none() {
                e.failed = Some(Status::EndpointTimeout);
                self.out_events
                    .push(IfaceEvent::EpFailed(i, Status::EndpointTimeout));
            }
        }
    }

    /// The epoll set of the socket and the timer; see the module docs.
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.events.as_fd()
    }

    /// Prepares for sleeping on [`UdpIface::event_fd`]: `Busy` when there is work now
    /// (events, a held-back datagram, a due timer, or a datagram waiting in the socket),
    /// else sets the timer to the engine's next deadline.
    pub fn arm(&mut self) -> Result<()> {
        if !self.out_events.is_empty()
            || !self.stalled.is_empty()
            || self.deferred > 0
            || ucs::sys::poll::readable(self.sock.as_fd(), 0)?
        {
            return Err(Status::Busy);
        }
        let next = self.engine.next_timeout();
        if next.is_some_and(|t| t <= ucs::now_ns()) {
            return Err(Status::Busy);
        }
        self.timer.set(next)
    }
}

impl Drop for UdpIface {
    fn drop(&mut self) {
        tracing::debug!(
            "udp: interface {} closing: {:?}; engine {:?}",
            self.local,
            self.stats,
            self.engine.counters()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(cfg: UdpConfig) -> (UdpIface, UdpIface) {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        (
            UdpIface::open("lo", ip, cfg).unwrap(),
            UdpIface::open("lo", ip, cfg).unwrap(),
        )
    }

    #[test]
    fn config_limits() {
        let mut c = UdpConfig::default();
        assert!(c.validate().is_ok());
        c.seg_size = Some(100);
        assert!(c.validate().is_err());
        c.seg_size = Some(MAX_SEG_SIZE + 1);
        assert!(c.validate().is_err());
        c.seg_size = Some(MAX_SEG_SIZE);
        assert!(c.validate().is_ok());
        c.window = 0;
        assert!(c.validate().is_err());
        let c = UdpConfig::default();
        assert_eq!(c.seg_size_for("2001:db8::1".parse().unwrap()), 1452);
        assert_eq!(c.seg_size_for("192.0.2.1".parse().unwrap()), 1472);
        assert_eq!(c.seg_size_for("::1".parse().unwrap()), LOOPBACK_SEG_SIZE);
        assert_eq!(c.tx_queue_for(1472), 8192);
        assert_eq!(c.tx_queue_for(65000), 1032);
    }

    #[test]
    fn message_and_implicit_peer() {
        let (mut a, mut b) = pair(UdpConfig::default());
        assert_eq!(a.attr().max_am_bcopy, LOOPBACK_SEG_SIZE - HEADER_LEN - 2);
        let ep = a.ep_create(&b.address()).unwrap();
        assert_eq!(b.peer_count(), 0);
        assert!(a.am_short(ep, 3, 42, b"hi").unwrap().is_done());
        let mut got = Vec::new();
        for _ in 0..1000 {
            b.poll(&mut |id, d| got.push((id, d.to_vec())));
            if !got.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        let mut want = 42u64.to_ne_bytes().to_vec();
        want.extend_from_slice(b"hi");
        assert_eq!(got, vec![(3, want)]);
        assert_eq!(b.stats().implicit_peers, 1);
        // The acknowledgement flushes the endpoint.
        for _ in 0..1000 {
            a.poll(&mut |_, _| {});
            b.poll(&mut |_, _| {});
            if a.ep_is_flushed(ep).unwrap() {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        assert!(a.ep_is_flushed(ep).unwrap());
        // An endpoint back finds the implicit peer.
        let back = b.ep_create(&a.address()).unwrap();
        assert_eq!(b.peer_count(), 1);
        b.ep_destroy(back).unwrap();
    }

    /// Progresses both until `done` holds (10 s at most).
    fn pump(
        a: &mut UdpIface,
        b: &mut UdpIface,
        mut done: impl FnMut(&UdpIface, &UdpIface) -> bool,
    ) {
        let start = std::time::Instant::now();
        while !done(a, b) {
            a.poll(&mut |_, _| {});
            b.poll(&mut |_, _| {});
            assert!(start.elapsed() < Duration::from_secs(10), "timed out");
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    #[test]
    fn put_pieces_land_in_the_registration() {
        let (mut a, mut b) = pair(UdpConfig::default());
        let md = crate::Md::open(crate::Transport::Udp);
        let len = 200_000;
        let mut target = vec![0u8; len + 16];
        #[allow(unsafe_code)] // testing puts into registered memory
        // SAFETY: `target` outlives the registration (dropped at the end of the test) and
        // is only read after the puts completed.
        let mem = unsafe { md.mem_reg(target.as_mut_ptr(), target.len()) }.unwrap();
        let rkey = md.rkey_unpack(&mem.pack_rkey()).unwrap();
        let ep = a.ep_create(&b.address()).unwrap();
        let src: Vec<u8> = (0..len).map(|i| (i * 11 + i / 257) as u8).collect();
        let (x, y) = src.split_at(70_001);
        let at = mem.address() as u64 + 8;
        #[allow(unsafe_code)] // testing the lent put
        // SAFETY: `src` outlives the flush waited for below.
        let r = unsafe { a.put_zcopy_lent(ep, &[x, &[], y], at, &rkey) }.unwrap();
        assert_eq!(r, Outcome::InProgress);
        // Each buffer is cut on its own into pieces of 64962 bytes: 2 + 3.
        assert_eq!(a.stats().tx_put_pieces, 5);
        pump(&mut a, &mut b, |a, _| a.ep_is_flushed(ep).unwrap());
        // Delivered in order: once acknowledged, written.
        assert!(target[8..8 + len] == src[..], "the bytes differ");
        assert_eq!(&target[..8], &[0; 8]);
        assert_eq!(&target[8 + len..], &[0; 8]);
        // The copying put: its buffer is free on return.
        let mut tmp = src[..1000].to_vec();
        let r = a.put_zcopy(ep, &[&tmp], at + 1000, &rkey).unwrap();
        assert_eq!(r, Outcome::Done(()));
        tmp.fill(0x77);
        pump(&mut a, &mut b, |a, _| a.ep_is_flushed(ep).unwrap());
        assert!(
            target[1008..2008] == src[..1000],
            "the copied put's bytes differ"
        );
        // A range past the registration is refused before anything is sent.
        assert!(a
            .put_zcopy(ep, &[&src[..20]], at + len as u64, &rkey)
            .is_err());
        drop(mem);
        // The registration is gone: a put to it is dropped on arrival, and counted.
        target.fill(0);
        // The copying put is done at once.
        assert_eq!(
            a.put_zcopy(ep, &[&src[..100]], at, &rkey).unwrap(),
            Outcome::Done(())
        );
        pump(&mut a, &mut b, |a, b| {
            a.ep_is_flushed(ep).unwrap() && b.stats().rx_put_refused > 0
        });
        assert_eq!(b.stats().rx_put_refused, 1);
        assert!(target.iter().all(|&v| v == 0));
    }

    #[test]
    fn a_put_fits_a_small_window() {
        let cfg = UdpConfig {
            seg_size: Some(1472),
            window: 8,
            ..UdpConfig::default()
        };
        let (a, _b) = pair(cfg);
        // Four pieces of 1472 - 20 - 2 - 16 bytes: half the window.
        assert_eq!(a.attr().max_put_zcopy, 4 * 1434);
    }

    #[test]
    fn destroying_the_endpoint_frees_the_putters_buffer() {
        let (mut a, mut b) = pair(UdpConfig::default());
        let md = crate::Md::open(crate::Transport::Udp);
        let len = 300_000;
        let mut target = vec![0u8; len];
        #[allow(unsafe_code)] // testing puts into registered memory
        // SAFETY: as in put_pieces_land_in_the_registration.
        let mem = unsafe { md.mem_reg(target.as_mut_ptr(), len) }.unwrap();
        let rkey = md.rkey_unpack(&mem.pack_rkey()).unwrap();
        let ep = a.ep_create(&b.address()).unwrap();
        let want: Vec<u8> = (0..len).map(|i| (i * 5 + i / 101) as u8).collect();
        let mut src = want.clone();
        #[allow(unsafe_code)] // testing the lent put
        // SAFETY: `src` stays unchanged until the endpoint is destroyed below.
        let r = unsafe { a.put_zcopy_lent(ep, &[&src], mem.address() as u64, &rkey) };
        assert_eq!(r.unwrap(), Outcome::InProgress);
        // Lose whatever went already: the engine must resend from its own copy.
        let mut sink = [0u8; 70_000];
        while b.sock.recv_from(&mut sink).is_ok() {}
        a.ep_destroy(ep).unwrap();
        src.fill(0xee); // the caller may reuse its buffer once the endpoint is gone
        pump(&mut a, &mut b, |a, _| a.is_flushed());
        assert!(a.engine_counters().tx_retransmits > 0);
        assert!(target == want, "the bytes differ");
        drop(mem);
    }

    #[test]
    fn other_seg_size_is_unreachable() {
        let (a, _) = pair(UdpConfig::default());
        let other = UdpIface::open(
            "lo",
            "127.0.0.1".parse().unwrap(),
            UdpConfig {
                seg_size: Some(9000),
                ..UdpConfig::default()
            },
        )
        .unwrap();
        assert!(!a.is_reachable(true, &other.address()));
        let mut a = a;
        assert_eq!(a.ep_create(&other.address()), Err(Status::Unreachable));
    }
}
