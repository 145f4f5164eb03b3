//! The tcp transport: nonblocking sockets on an epoll set, one listening socket per
//! interface, framed active messages.
//!
//! A connection belongs to a pair of endpoints. An endpoint created to a peer interface
//! connects to it (from this interface's address) and sends a handshake naming this
//! interface; when the peer then creates its endpoint to us, it answers on that accepted
//! connection instead of opening one (`bind_accepted`), so a peer pair costs one socket
//! on each side. So that endpoints both sides create at once share one connection too,
//! the interface with the larger address does not connect at once: its endpoint buffers
//! what it sends and waits up to [`TcpConfig::peer_wait_ns`] for the peer's connection
//! (`adopt_for_waiting`), then connects itself (`connect_overdue`; the timerfd in the
//! epoll set wakes a blocked wait for that). Nothing waits on a message from the peer, so
//! the tie-break cannot hang.
//!
//! Sending writes straight from the caller's buffers (`writev`); what the socket does not
//! take is kept in the endpoint's bounded send buffer and flushed by progress, and a full
//! send buffer is `NoResource`. Receiving reads whole frames into the connection's buffer
//! and delivers each one in place. A put frame (`put_zcopy`, used by rendezvous) is not
//! buffered: once its header names a live tcp registration of this process
//! ([`crate::md::wire_target`]) that holds the whole target range, its data is read from
//! the socket straight into the destination; a put to anything else is read into the
//! connection buffer and discarded (and counted as dropped). A peer that resets or closes, or that keepalive finds
//! dead, fails the endpoints that write to it (reported by [`TcpIface::take_events`]);
//! nothing a peer sends can make this process panic: bad handshakes and frames close the
//! connection and are counted.
//!
//! Behaviour a caller sees that differs from the in-memory transports:
//! - Connecting is asynchronous: the first sends of a new endpoint (and its handshake) are
//!   kept in its send buffer until the connection is up; `ep_flush` (and the interface
//!   flush) say `NoResource` until everything was handed to the kernel.
//! - `NoResource` only comes once the kernel's socket buffers *and* the endpoint's send
//!   buffer ([`TcpConfig::tx_buf`]) are full, so a receiver that stops progressing stalls
//!   its senders only after megabytes.
//! - Destroying an endpoint drops what its send buffer still holds (flush first); the
//!   receiver sees a connection that closed, possibly inside a frame, which it discards.
//! - The event descriptor is a level-triggered epoll set: it is readable while a
//!   connection waits to be accepted or data waits to be read, so there is nothing to arm.

pub mod wire;

use crate::am::AmTable;
use crate::slab::Slab;
use crate::types::*;
use socket2::{Domain, Protocol, SockAddr, Socket, TcpKeepalive, Type};
use std::io::{IoSlice, Read};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Weak;
use std::time::Duration;
use ucs::config::{self, Var};
use ucs::{EventSet, Events, Result, Status};
use wire::{FRAME_HDR, PUT_HDR, PUT_ID};

pub static VARS: &[Var] = &[
    Var {
        name: "TCP_SEG_SIZE",
        default: "64k",
        doc: "Largest tcp active message (bcopy/zcopy payload), and the unit of the receive buffer.",
    },
    Var {
        name: "TCP_PUT_SEG",
        default: "256k",
        doc: "Largest tcp put (put_zcopy, used by rendezvous to send data that the receiver reads straight into its buffer).",
    },
    Var {
        name: "TCP_TX_BUF",
        default: "1m",
        doc: "Bytes an endpoint may hold that its socket did not take yet; beyond it sends get NO_RESOURCE.",
    },
    Var {
        name: "TCP_KEEPIDLE",
        default: "10s",
        doc: "Idle time before tcp keepalive probes a connection (detects silent peers).",
    },
    Var {
        name: "TCP_KEEPINTVL",
        default: "2s",
        doc: "Time between tcp keepalive probes.",
    },
    Var {
        name: "TCP_KEEPCNT",
        default: "3",
        doc: "Unanswered keepalive probes after which the peer is declared dead.",
    },
    Var {
        name: "TCP_PEER_WAIT",
        default: "2ms",
        doc: "How long a new endpoint of the interface with the larger address waits for the peer to connect (so that both directions share one connection) before it connects itself.",
    },
];

/// Settings of a tcp interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    pub seg_size: usize,
    pub put_seg: usize,
    pub tx_buf: usize,
    pub keepidle: Duration,
    pub keepintvl: Duration,
    pub keepcnt: u32,
    /// How long an endpoint of the interface with the larger address waits for the
    /// peer's connection before connecting itself (`TCP_PEER_WAIT`).
    pub peer_wait_ns: u64,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            seg_size: 64 << 10,
            put_seg: 256 << 10,
            tx_buf: 1 << 20,
            keepidle: Duration::from_secs(10),
            keepintvl: Duration::from_secs(2),
            keepcnt: 3,
            peer_wait_ns: 2_000_000,
        }
    }
}

impl TcpConfig {
    pub fn from_env() -> Result<TcpConfig> {
        config::register(VARS);
        let c = TcpConfig {
            seg_size: config::size(&VARS[0])? as usize,
            put_seg: config::size(&VARS[1])? as usize,
            tx_buf: config::size(&VARS[2])? as usize,
            keepidle: config::time(&VARS[3])?,
            keepintvl: config::time(&VARS[4])?,
            keepcnt: config::u64_value(&VARS[5])? as u32,
            peer_wait_ns: config::time(&VARS[6])?.as_nanos() as u64,
        };
        c.validate()?;
        Ok(c)
    }

    /// Checks the limits: a segment of 256 B to 16 MiB, a put of 4 KiB to 64 MiB, a send
    /// buffer of at least one segment and one put.
    pub fn validate(&self) -> Result<()> {
        if self.seg_size < 256
            || self.seg_size > 16 << 20
            || self.put_seg < 4096
            || self.put_seg > 64 << 20
            || self.tx_buf < self.seg_size
            || self.tx_buf < self.put_seg
        {
            return Err(Status::InvalidParam);
        }
        Ok(())
    }
}

/// Something that happened to an interface's connections, for the protocol layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IfaceEvent {
    /// The endpoint's connection failed; its sends now return the status.
    EpFailed(EpId, Status),
    /// The peer with this interface address closed its connection to us.
    PeerClosed(Vec<u8>),
}

/// Reads one connection gets per readiness report before the others get their turn (the
/// epoll set is level-triggered: what is left is reported again).
const RX_READS_PER_EVENT: usize = 16;
/// Initial receive buffer of a connection; it grows up to one frame of `seg_size` when a
/// frame needs it, so that idle or small-message connections stay cheap.
const RX_BUF_INITIAL: usize = 16 << 10;
/// Room for the handshake in front of the first frame.
const RX_BUF_SLACK: usize = 128;

/// Sent bytes at the front of an endpoint's send buffer worth moving the rest down for.
const TX_COMPACT: usize = 64 << 10;

const TOK_LISTENER: u64 = 0;
const TOK_EP: u64 = 1 << 32;
const TOK_RX: u64 = 2 << 32;
const TOK_TIMER: u64 = 3 << 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EpState {
    /// Not connected: waiting until this time (ns) for the peer's connection to answer on.
    Waiting(u64),
    Connecting,
    Connected,
    Failed(Status),
}

struct TcpEp {
    sock: Socket,
    state: EpState,
    /// Bytes the socket has not taken yet; `head` is the first unsent one.
    tx: Vec<u8>,
    head: usize,
    want_out: bool,
    /// What the peer's endpoint sends back on this connection (its `peer` is the address
    /// this endpoint connected to, or the connector's handshake address).
    rx: RxState,
}

impl TcpEp {
    fn pending(&self) -> usize {
        self.tx.len() - self.head
    }
}

/// An accepted connection that no endpoint of ours sends on (yet).
struct RxConn {
    sock: Socket,
    rx: RxState,
}

impl RxConn {
    /// True when the connection comes from `peer`'s IP. An endpoint answers only on a
    /// connection from the address its handshake names, so that another local process
    /// cannot take our messages for that peer by naming it.
    fn comes_from(&self, peer: &SocketAddr) -> bool {
        self.sock
            .peer_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .is_some_and(|a| a.ip() == peer.ip())
    }
}

/// The receiving half of a connection.
struct RxState {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The peer's interface address: the connector's, once its handshake arrived, or the
    /// one our endpoint connected to.
    peer: Option<Vec<u8>>,
    /// The put frame whose data is being read; while it is, the buffer is empty.
    put: Option<PutRx>,
    /// The peer sent something on this connection (its closing is news for the
    /// endpoints that talk to it: [`IfaceEvent::PeerClosed`]).
    heard: bool,
}

impl RxState {
    fn new(peer: Option<Vec<u8>>, buf_max: usize) -> RxState {
        RxState {
            buf: vec![0; RX_BUF_INITIAL.min(buf_max)],
            start: 0,
            end: 0,
            peer,
            put: None,
            heard: false,
        }
    }
}

/// The rest of a put frame's data still in the socket.
struct PutRx {
    /// Where the next byte goes (an address of this process, inside a registration).
    dst: u64,
    left: usize,
    /// The registration's liveness, checked before every read into it; `None` when the
    /// put was refused and its data is discarded.
    alive: Option<Weak<()>>,
}

impl PutRx {
    /// The destination of the next read, when the target registration is still alive.
    /// The range [dst, dst+left) lies inside a registration of this process (checked by
    /// `wire_target` when the frame arrived).
    fn target(&mut self) -> Option<&mut [u8]> {
        crate::rma::registered_mut(&mut self.alive, self.dst, self.left)
    }
}

/// A tcp interface on one device.
pub struct TcpIface {
    device: String,
    local: SocketAddr,
    listener: Socket,
    events: EventSet,
    eps: Slab<TcpEp>,
    rx: Slab<RxConn>,
    handlers: AmTable,
    out_events: Vec<IfaceEvent>,
    ready: Vec<(u64, Events)>,
    scratch: Vec<u8>,
    cfg: TcpConfig,
    attr: IfaceAttr,
    dropped: u64,
    /// Endpoints in `EpState::Waiting`.
    waiting: Vec<EpId>,
    /// Wakes a blocked wait when a waiting endpoint must connect.
    timer: ucs::sys::DeadlineTimer,
}

fn new_socket(addr: &SocketAddr) -> Result<Socket> {
    let s = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    Ok(s)
}

impl TcpIface {
    /// Opens an interface listening on `ip` (port chosen by the kernel) of `device`.
    pub fn open(device: &str, ip: std::net::IpAddr, cfg: TcpConfig) -> Result<TcpIface> {
        cfg.validate()?;
        let bind = SocketAddr::new(ip, 0);
        let listener = new_socket(&bind)?;
        listener.set_reuse_address(true)?;
        listener.bind(&SockAddr::from(bind)).map_err(|e| {
            tracing::debug!("tcp: bind to {bind} failed: {e}");
            Status::NoDevice
        })?;
        listener.listen(1024)?;
        let local = listener.local_addr()?.as_socket().ok_or(Status::NoDevice)?;
        let events = EventSet::new()?;
        events.add(&listener, Events::READABLE, TOK_LISTENER)?;
        let timer = ucs::sys::DeadlineTimer::new()?;
        events.add(&timer, Events::READABLE, TOK_TIMER)?;
        let seg = cfg.seg_size;
        let attr = IfaceAttr {
            caps: Caps::AM_SHORT
                | Caps::AM_BCOPY
                | Caps::AM_ZCOPY
                | Caps::PUT_ZCOPY
                | Caps::CONNECT_TO_IFACE
                | Caps::EVENT_RECV,
            max_am_short: 256,
            max_am_bcopy: seg,
            max_am_zcopy: seg,
            max_am_hdr: 128,
            max_put_short: 0,
            max_put_bcopy: 0,
            max_put_zcopy: cfg.put_seg,
            max_get_bcopy: 0,
            max_get_zcopy: 0,
            iface_addr_len: wire::encode_addr(&local).len(),
            device_addr_len: crate::shm::address::DEVICE_ADDR_LEN,
            cost: CostModel {
                overhead: 1e-6,
                latency: 10e-6,
                bandwidth: 3e9,
            },
            // Rendezvous by put: one copy less than eager, but a registration and a
            // round trip more, which on loopback cost about 40 us; the automatic
            // threshold lands near 150 KB, where the two measured about even.
            rma_cost: CostModel {
                overhead: 5e-6,
                latency: 40e-6,
                bandwidth: 4e9,
            },
        };
        tracing::debug!("tcp: interface on {device} listening at {local}");
        Ok(TcpIface {
            device: device.to_string(),
            local,
            listener,
            events,
            eps: Slab::default(),
            rx: Slab::default(),
            handlers: AmTable::default(),
            out_events: Vec::new(),
            ready: Vec::new(),
            scratch: vec![0; seg],
            cfg,
            attr,
            dropped: 0,
            waiting: Vec::new(),
            timer,
        })
    }

    pub fn attr(&self) -> &IfaceAttr {
        &self.attr
    }

    pub fn device(&self) -> &str {
        &self.device
    }

    /// The address the interface listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn address(&self) -> Vec<u8> {
        wire::encode_addr(&self.local)
    }

    pub fn handlers(&mut self) -> &mut AmTable {
        &mut self.handlers
    }

    /// Malformed input dropped (bad handshakes or frames).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// True when `iface_addr` can be reached from this interface: same address family,
    /// and a loopback peer only from a loopback interface of the same host.
    pub fn is_reachable(&self, same_host: bool, iface_addr: &[u8]) -> bool {
        let Ok(a) = wire::decode_addr(iface_addr) else {
            return false;
        };
        a.is_ipv4() == self.local.is_ipv4()
            && (a.ip().is_loopback() == self.local.ip().is_loopback())
            && (!a.ip().is_loopback() || same_host)
    }

    fn keepalive(&self) -> TcpKeepalive {
        TcpKeepalive::new()
            .with_time(self.cfg.keepidle)
            .with_interval(self.cfg.keepintvl)
            .with_retries(self.cfg.keepcnt)
    }

    /// The largest receive buffer a connection needs: the handshake and one whole frame.
    fn rx_buf_max(&self) -> usize {
        self.cfg.seg_size + FRAME_HDR + RX_BUF_SLACK
    }

    pub fn ep_create(&mut self, iface_addr: &[u8]) -> Result<EpId> {
        let peer = wire::decode_addr(iface_addr)?;
        if let Some(ep) = self.bind_accepted(iface_addr, &peer) {
            return Ok(ep);
        }
        let sock = new_socket(&peer)?;
        sock.set_nodelay(true)?;
        sock.set_tcp_keepalive(&self.keepalive())?;
        // Connect from this interface's address, so that the peer sees the address our
        // handshake names (it checks them before answering on this connection). Should
        // that fail, the peer answers on a connection of its own instead.
        if let Err(e) = sock.bind(&SockAddr::from(SocketAddr::new(self.local.ip(), 0))) {
            tracing::debug!("tcp: bind to {} failed: {e}", self.local.ip());
        }
        if self.address().as_slice() > iface_addr {
            // The later interface (by address) gives the peer a moment to connect first,
            // so that endpoints both sides create at once still share one connection;
            // what it sends meanwhile waits in the send buffer.
            let deadline = ucs::now_ns() + self.cfg.peer_wait_ns;
            let ep = self.eps.insert(TcpEp {
                sock,
                state: EpState::Waiting(deadline),
                tx: Vec::with_capacity(self.cfg.seg_size),
                head: 0,
                want_out: false,
                rx: RxState::new(Some(iface_addr.to_vec()), self.rx_buf_max()),
            })?;
            self.waiting.push(ep);
            return Ok(ep);
        }
        let state = match sock.connect(&SockAddr::from(peer)) {
            Ok(()) => EpState::Connected,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => EpState::Connecting,
            Err(e) => {
                tracing::debug!("tcp: connect to {peer} failed: {e}");
                return Err(Status::Unreachable);
            }
        };
        let mut tx = wire::encode_handshake(&self.address());
        tx.reserve(self.cfg.seg_size);
        let ep = self.eps.insert(TcpEp {
            sock,
            state,
            tx,
            head: 0,
            want_out: true,
            rx: RxState::new(Some(iface_addr.to_vec()), self.rx_buf_max()),
        })?;
        let e = self.eps.get(ep)?;
        self.events.add(
            &e.sock,
            Events::READABLE | Events::WRITABLE,
            TOK_EP | u64::from(ep.0),
        )?;
        if state == EpState::Connected {
            self.flush_ep(ep);
        }
        Ok(ep)
    }

    /// Connects waiting endpoints whose peer did not connect in time.
    fn connect_overdue(&mut self) {
        let now = ucs::now_ns();
        let due: Vec<EpId> = self
            .waiting
            .iter()
            .copied()
            .filter(|&ep| {
                self.eps
                    .get(ep)
                    .is_ok_and(|e| matches!(e.state, EpState::Waiting(d) if d <= now))
            })
            .collect();
        for ep in due {
            self.waiting.retain(|&x| x != ep);
            self.start_connect(ep);
        }
    }

    /// Connects waiting endpoint `ep` itself: the handshake goes in front of what it
    /// buffered.
    fn start_connect(&mut self, ep: EpId) {
        let me = self.address();
        let Ok(e) = self.eps.get_mut(ep) else { return };
        let Some(peer) = e.rx.peer.as_deref().and_then(|a| wire::decode_addr(a).ok()) else {
            return;
        };
        let state = match e.sock.connect(&SockAddr::from(peer)) {
            Ok(()) => EpState::Connected,
            Err(err) if err.raw_os_error() == Some(libc::EINPROGRESS) => EpState::Connecting,
            Err(err) => {
                tracing::debug!("tcp: connect to {peer} failed: {err}");
                self.fail_ep(ep, Status::Unreachable);
                return;
            }
        };
        let mut tx = wire::encode_handshake(&me);
        tx.extend_from_slice(&e.tx[e.head..]);
        e.tx = tx;
        e.head = 0;
        e.state = state;
        e.want_out = true;
        if self
            .events
            .add(
                &e.sock,
                Events::READABLE | Events::WRITABLE,
                TOK_EP | u64::from(ep.0),
            )
            .is_err()
        {
            self.fail_ep(ep, Status::IoError);
            return;
        }
        if state == EpState::Connected {
            self.flush_ep(ep);
        }
    }

    /// A waiting endpoint to the peer that opened accepted connection `id` answers on it.
    fn adopt_for_waiting(&mut self, id: EpId) {
        let Ok(c) = self.rx.get(id) else { return };
        let Some(peer) = c.rx.peer.clone() else {
            return;
        };
        if !wire::decode_addr(&peer).is_ok_and(|a| c.comes_from(&a)) {
            return;
        }
        let Some(pos) = self.waiting.iter().position(|&ep| {
            self.eps
                .get(ep)
                .is_ok_and(|e| e.rx.peer.as_deref() == Some(peer.as_slice()))
        }) else {
            return;
        };
        let ep = self.waiting.remove(pos);
        let Ok(c) = self.rx.remove(id) else { return };
        let Ok(e) = self.eps.get_mut(ep) else { return };
        // The unconnected socket made at creation goes; the peer's connection stays.
        e.sock = c.sock;
        e.rx = c.rx;
        e.state = EpState::Connected;
        e.want_out = e.pending() > 0;
        let interest = if e.want_out {
            Events::READABLE | Events::WRITABLE
        } else {
            Events::READABLE
        };
        if self
            .events
            .modify(&e.sock, interest, TOK_EP | u64::from(ep.0))
            .is_err()
        {
            self.fail_ep(ep, Status::IoError);
            return;
        }
        tracing::debug!(
            "tcp: waiting endpoint {} answers on the peer's connection",
            ep.0
        );
        self.flush_ep(ep);
    }

    /// An endpoint on a connection the peer `iface_addr` opened to us (its endpoint sends
    /// on it, ours answers on it), when there is one that no endpoint of ours uses yet and
    /// whose remote address is the peer's. A peer pair then needs one connection; should
    /// both sides connect at once, each keeps sending on its own and nothing waits for a
    /// tie-break.
    fn bind_accepted(&mut self, iface_addr: &[u8], peer: &SocketAddr) -> Option<EpId> {
        let found = self
            .rx
            .iter()
            .find(|(_, c)| c.rx.peer.as_deref() == Some(iface_addr) && c.comes_from(peer))
            .map(|(id, _)| id);
        let c = self.rx.remove(found?).ok()?;
        let ep = self
            .eps
            .insert(TcpEp {
                sock: c.sock,
                state: EpState::Connected,
                tx: Vec::with_capacity(self.cfg.seg_size),
                head: 0,
                want_out: false,
                rx: c.rx,
            })
            .ok()?;
        let e = self.eps.get(ep).ok()?;
        if self
            .events
            .modify(&e.sock, Events::READABLE, TOK_EP | u64::from(ep.0))
            .is_err()
        {
            let _ = self.eps.remove(ep);
            return None;
        }
        tracing::debug!("tcp: endpoint {} answers on the peer's connection", ep.0);
        Some(ep)
    }

    pub fn ep_destroy(&mut self, ep: EpId) -> Result<()> {
        let e = self.eps.remove(ep)?;
        self.waiting.retain(|&x| x != ep);
        let _ = self.events.remove(&e.sock);
        Ok(())
    }

    pub fn ep_count(&self) -> usize {
        self.eps.len()
    }

    pub fn check_ep(&self, ep: EpId) -> Result<()> {
        self.eps.get(ep).map(|_| ())
    }

    /// True when `ep` can take another message of any size now (an endpoint with an empty
    /// send buffer always can: what the socket does not take is kept).
    pub fn ep_has_space(&self, ep: EpId) -> Result<bool> {
        let e = self.eps.get(ep)?;
        Ok(e.pending() == 0 || e.pending() + FRAME_HDR + self.cfg.seg_size <= self.cfg.tx_buf)
    }

    /// True when everything `ep` was given has been handed to the kernel.
    pub fn ep_is_flushed(&self, ep: EpId) -> Result<bool> {
        let e = self.eps.get(ep)?;
        match e.state {
            EpState::Failed(s) => Err(s),
            _ => Ok(e.pending() == 0 && e.state == EpState::Connected),
        }
    }

    /// True when every endpoint that has not failed has handed everything to the kernel
    /// (the interface flush). A failed endpoint's data is gone; it does not hold a flush.
    pub fn is_flushed(&self) -> bool {
        self.eps.iter().all(|(_, e)| {
            matches!(e.state, EpState::Failed(_))
                || (e.pending() == 0 && e.state == EpState::Connected)
        })
    }

    fn fail_ep(&mut self, ep: EpId, s: Status) {
        if let Ok(e) = self.eps.get_mut(ep) {
            if !matches!(e.state, EpState::Failed(_)) {
                e.state = EpState::Failed(s);
                e.tx.clear();
                e.head = 0;
                let _ = self.events.remove(&e.sock);
                self.out_events.push(IfaceEvent::EpFailed(ep, s));
                tracing::debug!("tcp: endpoint {} failed: {s}", ep.0);
            }
        }
    }

    /// Writes an active-message frame made of `parts`.
    fn send_frame(&mut self, ep: EpId, id: u8, parts: &[&[u8]]) -> Result<Outcome> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if id >= AM_ID_MAX || total > self.cfg.seg_size {
            return Err(Status::InvalidParam);
        }
        self.send_parts(ep, &wire::frame_header(id, total), parts)
    }

    /// Writes `head` and `parts` (one frame) from the caller's buffers as far as the
    /// socket takes them, and keeps the rest in the send buffer.
    fn send_parts(&mut self, ep: EpId, head: &[u8], parts: &[&[u8]]) -> Result<Outcome> {
        const MAX_PARTS: usize = 5;
        let total = head.len() + parts.iter().map(|p| p.len()).sum::<usize>();
        let tx_max = self.cfg.tx_buf;
        let e = self.eps.get_mut(ep)?;
        if let EpState::Failed(s) = e.state {
            return Err(s);
        }
        if e.state != EpState::Connected {
            // Not connected yet: the caller keeps its data (pending) rather than our
            // buffer, so a send reported done has reached the kernel, and survives this
            // process, as soon as the connection exists.
            return Ok(Outcome::NoResource);
        }
        let mut sent = 0;
        if e.pending() == 0 && e.state == EpState::Connected {
            let mut iov: [IoSlice<'_>; MAX_PARTS + 1] = [IoSlice::new(&[]); MAX_PARTS + 1];
            iov[0] = IoSlice::new(head);
            let n = parts.len().min(MAX_PARTS);
            for (i, p) in parts.iter().take(n).enumerate() {
                iov[i + 1] = IoSlice::new(p);
            }
            match e
                .sock
                .send_vectored_with_flags(&iov[..1 + n], libc::MSG_NOSIGNAL)
            {
                Ok(n) => sent = n,
                Err(err)
                    if matches!(
                        err.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(err) => {
                    tracing::debug!("tcp: send failed: {err}");
                    self.fail_ep(ep, Status::ConnectionReset);
                    return Err(Status::ConnectionReset);
                }
            }
            if sent == total && parts.len() <= MAX_PARTS {
                return Ok(Outcome::Done(()));
            }
        } else if e.pending() > 0 && e.pending() + total > tx_max {
            return Ok(Outcome::NoResource);
        }
        // Keep what the socket did not take.
        if e.head > 0 && e.head == e.tx.len() {
            e.tx.clear();
            e.head = 0;
        }
        let mut skip = sent;
        for piece in std::iter::once(head).chain(parts.iter().copied()) {
            if skip >= piece.len() {
                skip -= piece.len();
                continue;
            }
            e.tx.extend_from_slice(&piece[skip..]);
            skip = 0;
        }
        if !e.want_out {
            e.want_out = true;
            let _ = self.events.modify(
                &e.sock,
                Events::READABLE | Events::WRITABLE,
                TOK_EP | u64::from(ep.0),
            );
        }
        Ok(Outcome::Done(()))
    }

    /// Hands buffered bytes of `ep` to its socket.
    fn flush_ep(&mut self, ep: EpId) {
        let Ok(e) = self.eps.get_mut(ep) else { return };
        if e.state != EpState::Connected {
            return;
        }
        while e.head < e.tx.len() {
            match e.sock.send_with_flags(&e.tx[e.head..], libc::MSG_NOSIGNAL) {
                Ok(n) => e.head += n,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                    // A slow reader may never let the buffer empty: drop the sent prefix
                    // now and then so that the vector does not grow without bound.
                    if e.head >= TX_COMPACT && 2 * e.head >= e.tx.len() {
                        e.tx.drain(..e.head);
                        e.head = 0;
                    }
                    return;
                }
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => {
                    tracing::debug!("tcp: send failed: {err}");
                    self.fail_ep(ep, Status::ConnectionReset);
                    return;
                }
            }
        }
        e.tx.clear();
        e.head = 0;
        if e.want_out {
            e.want_out = false;
            let _ = self
                .events
                .modify(&e.sock, Events::READABLE, TOK_EP | u64::from(ep.0));
        }
    }

    pub fn am_short(&mut self, ep: EpId, id: u8, hdr: u64, payload: &[u8]) -> Result<Outcome> {
        if payload.len() > self.attr.max_am_short {
            return Err(Status::InvalidParam);
        }
        self.send_frame(ep, id, &[&hdr.to_ne_bytes(), payload])
    }

    pub fn am_bcopy(
        &mut self,
        ep: EpId,
        id: u8,
        pack: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<Outcome<usize>> {
        let e = self.eps.get(ep)?;
        if let EpState::Failed(s) = e.state {
            return Err(s);
        }
        // Refuse a bad id before the packer runs, like the other transports.
        if id >= AM_ID_MAX {
            return Err(Status::InvalidParam);
        }
        if e.pending() > 0 && e.pending() + FRAME_HDR + self.cfg.seg_size > self.cfg.tx_buf {
            return Ok(Outcome::NoResource);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        // A packer that panicked took the buffer with it: make a new one.
        scratch.resize(self.cfg.seg_size, 0);
        let n = pack(&mut scratch);
        let r = if n > scratch.len() {
            Err(Status::InvalidParam)
        } else {
            self.send_frame(ep, id, &[&scratch[..n]]).map(|o| match o {
                Outcome::Done(()) => Outcome::Done(n),
                Outcome::InProgress => Outcome::InProgress,
                Outcome::NoResource => Outcome::NoResource,
            })
        };
        self.scratch = scratch;
        r
    }

    pub fn am_zcopy(&mut self, ep: EpId, id: u8, header: &[u8], iov: &[&[u8]]) -> Result<Outcome> {
        if header.len() > self.attr.max_am_hdr {
            return Err(Status::InvalidParam);
        }
        if iov.len() <= 2 {
            let mut parts: Vec<&[u8]> = Vec::with_capacity(3);
            parts.push(header);
            parts.extend_from_slice(iov);
            return self.send_frame(ep, id, &parts);
        }
        let total = header.len() + iov.iter().map(|b| b.len()).sum::<usize>();
        if id >= AM_ID_MAX || total > self.cfg.seg_size {
            return Err(Status::InvalidParam);
        }
        self.am_bcopy(ep, id, |b| {
            let mut o = 0;
            for p in std::iter::once(header).chain(iov.iter().copied()) {
                b[o..o + p.len()].copy_from_slice(p);
                o += p.len();
            }
            o
        })
        .map(|o| match o {
            Outcome::Done(_) => Outcome::Done(()),
            Outcome::InProgress => Outcome::InProgress,
            Outcome::NoResource => Outcome::NoResource,
        })
    }

    /// Writes the concatenation of `iov` at `addr` of the peer, into the registration that
    /// `rkey` (a wire key of the peer's tcp domain) names. Like an active message it is
    /// done once the socket or the send buffer took it; the peer reads the data straight
    /// into its memory. Remote completion is ordered like any frame: an active message
    /// sent after the put is delivered after the put's data was written.
    pub fn put_zcopy(
        &mut self,
        ep: EpId,
        iov: &[&[u8]],
        addr: u64,
        rkey: &crate::Rkey,
    ) -> Result<Outcome> {
        let reg = rkey.wire_reg().ok_or(Status::InvalidParam)?;
        let total: usize = iov.iter().map(|b| b.len()).sum();
        if total > self.cfg.put_seg || iov.len() > 4 {
            return Err(Status::InvalidParam);
        }
        rkey.check(addr, total)?;
        let head = wire::put_header(addr, reg, total);
        self.send_parts(ep, &head, iov)
    }

    /// True when the interface has no connection either way (only the listener).
    pub fn is_idle(&self) -> bool {
        self.eps.is_empty() && self.rx.is_empty()
    }

    /// What happened to connections since the last call.
    pub fn take_events(&mut self) -> Vec<IfaceEvent> {
        std::mem::take(&mut self.out_events)
    }

    /// True when events wait in [`TcpIface::take_events`].
    pub fn has_events(&self) -> bool {
        !self.out_events.is_empty()
    }

    /// Accepts connections, reads and delivers frames, flushes send buffers.
    pub fn poll(&mut self, f: &mut impl FnMut(u8, &[u8])) -> usize {
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        if self.events.wait(0, |t, e| ready.push((t, e))).is_err() {
            self.ready = ready;
            return 0;
        }
        let mut n = 0;
        for &(tok, ev) in &ready {
            match tok & !0xffff_ffff {
                TOK_LISTENER => self.accept_all(),
                TOK_EP => n += self.ep_event(EpId(tok as u32), ev, f),
                TOK_RX => n += self.rx_event(tok as u32, f),
                // Clear it; the deadlines are checked below.
                TOK_TIMER => self.timer.clear(),
                _ => {}
            }
        }
        self.ready = ready;
        if !self.waiting.is_empty() {
            self.connect_overdue();
        }
        n
    }

    pub fn progress(&mut self) -> usize {
        let mut handlers = std::mem::take(&mut self.handlers);
        let n = self.poll(&mut |id, d| handlers.dispatch(id, d));
        self.handlers = handlers;
        n
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((sock, _)) => {
                    if sock.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    // The connector's keepalive watches our side; ours finds a connector
                    // whose host vanished, so that its connection is not kept forever.
                    let _ = sock.set_tcp_keepalive(&self.keepalive());
                    let conn = RxConn {
                        sock,
                        rx: RxState::new(None, self.rx_buf_max()),
                    };
                    // Too many connections: this one is closed (dropped) at once.
                    let Ok(id) = self.rx.insert(conn) else {
                        continue;
                    };
                    if let Ok(c) = self.rx.get(id) {
                        if self
                            .events
                            .add(&c.sock, Events::READABLE, TOK_RX | u64::from(id.0))
                            .is_err()
                        {
                            let _ = self.rx.remove(id);
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::debug!("tcp: accept failed: {e}");
                    return;
                }
            }
        }
    }

    fn ep_event(&mut self, ep: EpId, ev: Events, f: &mut impl FnMut(u8, &[u8])) -> usize {
        let mut delivered = 0;
        let Ok(e) = self.eps.get_mut(ep) else {
            return 0;
        };
        if e.state == EpState::Connecting {
            match e.sock.take_error() {
                Ok(None) if ev.contains(Events::WRITABLE) => {
                    e.state = EpState::Connected;
                    self.flush_ep(ep);
                }
                Ok(None) => {}
                Ok(Some(err)) | Err(err) => {
                    let s = match err.raw_os_error() {
                        Some(libc::ECONNREFUSED)
                        | Some(libc::EHOSTUNREACH)
                        | Some(libc::ENETUNREACH)
                        | Some(libc::ETIMEDOUT) => Status::Unreachable,
                        _ => Status::ConnectionReset,
                    };
                    self.fail_ep(ep, s);
                }
            }
            return 0;
        }
        if ev.contains(Events::READABLE)
            || ev.contains(Events::HANGUP)
            || ev.contains(Events::ERROR)
        {
            // The peer's endpoint answers on this connection; a close or reset fails
            // this endpoint, and tells that the peer is gone.
            let lim = self.rx_limits();
            let mut refused = 0;
            let Ok(e) = self.eps.get_mut(ep) else {
                return 0;
            };
            let end = read_frames(&e.sock, &mut e.rx, &lim, f, &mut delivered, &mut refused);
            self.count_refused(refused);
            let failed = match end {
                RxEnd::More => false,
                RxEnd::Closed => true,
                RxEnd::Bad => {
                    self.dropped += 1;
                    tracing::debug!("tcp: malformed input from a peer; connection closed");
                    true
                }
            };
            if failed {
                let peer = self
                    .eps
                    .get(ep)
                    .ok()
                    .filter(|e| e.rx.heard)
                    .and_then(|e| e.rx.peer.clone());
                self.fail_ep(ep, Status::ConnectionReset);
                if let Some(p) = peer {
                    self.out_events.push(IfaceEvent::PeerClosed(p));
                }
                return delivered;
            }
        }
        if ev.contains(Events::WRITABLE) {
            self.flush_ep(ep);
        }
        delivered
    }

    fn close_rx(&mut self, id: EpId) {
        if let Ok(c) = self.rx.remove(id) {
            let _ = self.events.remove(&c.sock);
            if let Some(p) = c.rx.peer {
                self.out_events.push(IfaceEvent::PeerClosed(p));
            }
        }
    }

    /// Reads from accepted connection `idx` and delivers the complete frames.
    fn rx_event(&mut self, idx: u32, f: &mut impl FnMut(u8, &[u8])) -> usize {
        let id = EpId(idx);
        let lim = self.rx_limits();
        let mut delivered = 0;
        let mut refused = 0;
        let end = match self.rx.get_mut(id) {
            Ok(c) => read_frames(&c.sock, &mut c.rx, &lim, f, &mut delivered, &mut refused),
            Err(_) => return 0,
        };
        self.count_refused(refused);
        match end {
            RxEnd::More if !self.waiting.is_empty() => self.adopt_for_waiting(id),
            RxEnd::More => {}
            RxEnd::Closed => self.close_rx(id),
            RxEnd::Bad => {
                self.dropped += 1;
                tracing::debug!("tcp: malformed input from a peer; connection closed");
                self.close_rx(id);
            }
        }
        delivered
    }

    fn count_refused(&mut self, refused: u64) {
        if refused > 0 {
            self.dropped += refused;
            tracing::debug!("tcp: a put into memory that is not registered was dropped");
        }
    }

    fn rx_limits(&self) -> RxLimits {
        RxLimits {
            max: self.cfg.seg_size,
            max_put: self.cfg.put_seg,
            buf_max: self.rx_buf_max(),
        }
    }

    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.events.as_fd()
    }

    /// Level-triggered epoll: the descriptor stays readable while anything is unread, so
    /// there is nothing to arm; buffered complete frames would be missed, but frames are
    /// always delivered as soon as they are read.
    pub fn arm(&mut self) -> Result<()> {
        if !self.out_events.is_empty() {
            return Err(Status::Busy);
        }
        let next = self
            .waiting
            .iter()
            .filter_map(|&ep| match self.eps.get(ep).map(|e| e.state) {
                Ok(EpState::Waiting(d)) => Some(d),
                _ => None,
            })
            .min();
        if next.is_some_and(|t| t <= ucs::now_ns()) {
            return Err(Status::Busy);
        }
        self.timer.set(next)
    }
}

/// Limits of what a connection receives.
struct RxLimits {
    /// Largest active message.
    max: usize,
    /// Largest put.
    max_put: usize,
    /// Largest receive buffer: a handshake and one whole active message.
    buf_max: usize,
}

/// Why [`read_frames`] stopped.
enum RxEnd {
    /// Nothing more to read now (or this turn's reads are used up).
    More,
    /// The peer closed or reset the connection.
    Closed,
    /// The peer sent something malformed.
    Bad,
}

/// Reads from `sock` and delivers the complete frames, at most [`RX_READS_PER_EVENT`]
/// reads (the epoll set reports what is left again). A put's data goes from the socket
/// straight to its destination. Counts delivered frames and refused puts.
fn read_frames(
    sock: &Socket,
    c: &mut RxState,
    lim: &RxLimits,
    f: &mut impl FnMut(u8, &[u8]),
    delivered: &mut usize,
    refused: &mut u64,
) -> RxEnd {
    for _ in 0..RX_READS_PER_EVENT {
        if let Some(p) = &mut c.put {
            // A put's data goes from the socket to its destination (or, refused, into
            // the empty connection buffer to be dropped).
            let want = match p.target() {
                Some(dst) => dst.len(),
                None => p.left.min(c.buf.len()),
            };
            let got = match p.target() {
                Some(dst) => (&*sock).read(dst),
                None => (&*sock).read(&mut c.buf[..want]),
            };
            match got {
                Ok(0) => return RxEnd::Closed,
                Ok(n) => {
                    p.dst += n as u64;
                    p.left -= n;
                    if p.left == 0 {
                        c.put = None;
                        *delivered += 1;
                    }
                    if n < want {
                        // The socket is drained: the level-triggered epoll set reports
                        // it again when more arrives, so do not pay for a read that
                        // would only say "again".
                        return RxEnd::More;
                    }
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return RxEnd::More,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return RxEnd::Closed,
            }
        }
        if c.end == c.buf.len() {
            if c.start > 0 {
                c.buf.copy_within(c.start..c.end, 0);
                c.end -= c.start;
                c.start = 0;
            } else if c.buf.len() < lim.buf_max {
                let n = (2 * c.buf.len()).clamp(RX_BUF_INITIAL.min(lim.buf_max), lim.buf_max);
                c.buf.resize(n, 0);
            } else {
                // Unreachable with checked frames (a whole one fits and is consumed),
                // but never read into an empty slice: that would look like a close.
                return RxEnd::Bad;
            }
        }
        let room = c.buf.len() - c.end;
        let got = match (&*sock).read(&mut c.buf[c.end..]) {
            Ok(0) => return RxEnd::Closed,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return RxEnd::More,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return RxEnd::Closed,
        };
        // A short read drained the socket (see the put case above).
        let drained = got < room;
        c.end += got;
        c.heard = true;
        // Handshake first (accepted connections), then frames.
        if c.peer.is_none() {
            match wire::decode_handshake(&c.buf[c.start..c.end]) {
                Ok(Some((peer, used))) => {
                    c.peer = Some(peer);
                    c.start += used;
                }
                Ok(None) if drained => return RxEnd::More,
                Ok(None) => continue,
                Err(_) => return RxEnd::Bad,
            }
        }
        while c.end - c.start >= FRAME_HDR {
            let Ok((id, len)) =
                wire::parse_frame(&c.buf[c.start..c.start + FRAME_HDR], lim.max, lim.max_put)
            else {
                return RxEnd::Bad;
            };
            if id == PUT_ID {
                if c.end - c.start < FRAME_HDR + PUT_HDR {
                    break;
                }
                let h = c.start + FRAME_HDR;
                let Ok((addr, reg)) = wire::decode_put_header(&c.buf[h..h + PUT_HDR]) else {
                    return RxEnd::Bad;
                };
                let data = len - PUT_HDR;
                let alive = crate::md::wire_target(reg, addr, data as u64);
                if alive.is_none() {
                    *refused += 1;
                }
                let mut p = PutRx {
                    dst: addr,
                    left: data,
                    alive,
                };
                let s = h + PUT_HDR;
                let n = data.min(c.end - s);
                if let Some(dst) = p.target() {
                    dst[..n].copy_from_slice(&c.buf[s..s + n]);
                }
                p.dst += n as u64;
                p.left -= n;
                c.start = s + n;
                if p.left > 0 {
                    // The buffer is used up: the rest comes straight from the socket.
                    c.put = Some(p);
                    break;
                }
                *delivered += 1;
                continue;
            }
            if c.end - c.start < FRAME_HDR + len {
                break;
            }
            let s = c.start + FRAME_HDR;
            f(id, &c.buf[s..s + len]);
            *delivered += 1;
            c.start = s + len;
        }
        if c.start == c.end {
            c.start = 0;
            c.end = 0;
        }
        if drained && c.put.is_none() {
            return RxEnd::More;
        }
    }
    RxEnd::More
}
