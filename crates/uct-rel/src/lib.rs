//! rucx's sans-IO reliability engine for datagram transports.
//!
//! The udp transport sends every message through one socket to all peers; this crate
//! turns that unreliable, unordered datagram service into reliable, in-order,
//! exactly-once delivery per peer, the role InfiniBand UD's reliability layer plays in
//! UCX. It is a pure state machine: no sockets, no clock, no threads. It is fed datagrams
//! and the time, and it emits datagrams to send and messages to deliver, so the same code
//! runs under the real transport and under testkit's deterministic simulated network.
//!
//! - [`engine`]: the state machine ([`Engine`]), its configuration, events and counters;
//!   the protocol and its memory use are described there.
//! - [`packet`]: the wire format, its diagram, the one encoder and the one decoder.
//! - [`seq`]: serial-number arithmetic for wrapping 32-bit sequence numbers.
//! - `pool` and `timers` (private): the shared packet-buffer pools and the per-peer timer
//!   heap that keep per-peer state fixed and small.
//!
//! ```
//! use uct_rel::{Config, Engine, Event, PeerId};
//!
//! let mut a = Engine::new(Config::default()).unwrap();
//! let mut b = Engine::new(Config::default()).unwrap();
//! a.add_peer(PeerId(1), 0).unwrap(); // a calls b "1"
//! b.add_peer(PeerId(0), 0).unwrap(); // b calls a "0"
//! a.send(PeerId(1), b"hello", 0).unwrap();
//! while let Some(t) = a.poll_transmit(0) {
//!     let bytes = t.bytes.to_vec();
//!     b.on_packet(PeerId(0), &bytes, 10);
//! }
//! assert_eq!(
//!     b.poll_event(),
//!     Some(Event::Deliver { peer: PeerId(0), payload: b"hello" })
//! );
//! ```

#![forbid(unsafe_code)]

pub mod engine;
pub mod packet;
mod pool;
pub mod seq;
mod timers;

pub use engine::{
    AddPeerError, Config, ConfigError, Counters, Engine, Event, ExtPayload, PeerId, PeerStatus,
    SendError, Transmit, TxBatch, MAX_WINDOW,
};
