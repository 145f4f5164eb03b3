//! The steps of the channel protocol that every test shares, over any [`Channel`]:
//! the hello that opens a session, and around each test `Start` → `Ready`, then
//! `Done` → `Verdict` (see [`crate::channel::Msg`]).

use crate::channel::{Channel, Hex, Msg, RegionInfo, PROTOCOL};
use crate::registry::TestId;
use std::time::Duration;
use ucs::{Result, Status};

/// What a peer's hello says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub protocol: u32,
    /// A uct transport name, or [`UCP`] for the protocol-layer tests.
    pub transport: String,
    pub address: Vec<u8>,
}

/// The `transport` of a hello that opens protocol-layer (ucp) tests.
pub const UCP: &str = "ucp";

/// Sends this side's hello.
pub fn send_hello<C: Channel>(chan: &mut C, transport: &str, address: Vec<u8>) -> Result<()> {
    chan.send(&Msg::Hello {
        protocol: PROTOCOL,
        transport: transport.into(),
        address: Hex(address),
    })
}

/// Receives the peer's hello (any transport; see [`check_hello`]).
pub fn recv_hello<C: Channel>(chan: &mut C, timeout: Duration) -> Result<Hello> {
    match chan.recv(timeout) {
        Ok(Msg::Hello {
            protocol,
            transport,
            address,
        }) => Ok(Hello {
            protocol,
            transport,
            address: address.0,
        }),
        Ok(Msg::Failed { error }) => {
            tracing::error!("the peer failed: {error}");
            Err(Status::IoError)
        }
        Ok(m) => {
            tracing::error!("expected the peer's hello, got {m:?}");
            Err(Status::InvalidParam)
        }
        Err(e) => {
            if e != Status::ConnectionReset {
                tracing::error!("no hello from the peer: {e}");
            }
            Err(e)
        }
    }
}

/// Checks that the peer speaks this side's protocol over `transport`.
pub fn check_hello(h: &Hello, transport: &str) -> Result<()> {
    if h.protocol != PROTOCOL || h.transport != transport {
        tracing::error!(
            "peer speaks protocol {} over {}; this side {PROTOCOL} over {transport} \
             (are both sides the same rucx-perftest?)",
            h.protocol,
            h.transport
        );
        return Err(Status::Unsupported);
    }
    Ok(())
}

/// Receives the peer's answer to a `Start` or `Done`, turning `Failed` into an error.
pub fn expect_reply<C: Channel>(chan: &mut C, timeout: Duration, what: &str) -> Result<Msg> {
    match chan.recv(timeout) {
        Ok(Msg::Failed { error }) => {
            tracing::error!("{error}");
            Err(Status::IoError)
        }
        Ok(m) => Ok(m),
        Err(e) => {
            tracing::error!("no {what} from the peer: {e}");
            Err(e)
        }
    }
}

/// Initiator: waits for `Ready`, returning the responder's region.
pub fn expect_ready<C: Channel>(chan: &mut C, timeout: Duration) -> Result<Option<RegionInfo>> {
    match expect_reply(chan, timeout, "ready")? {
        Msg::Ready { region } => Ok(region),
        m => {
            tracing::error!("expected ready from the peer, got {m:?}");
            Err(Status::InvalidParam)
        }
    }
}

/// Responder: after `Done` (already received), reports `check`'s finding.
pub fn judge<C: Channel>(chan: &mut C, check: impl FnOnce() -> Option<String>) -> Result<()> {
    let error = check();
    if let Some(e) = &error {
        tracing::error!("responder: {e}");
    }
    chan.send(&Msg::Verdict { error })
}

/// Initiator: ends the test on the responder and gets its verdict.
pub fn done_and_verdict<C: Channel>(chan: &mut C, timeout: Duration, test: TestId) -> Result<()> {
    chan.send(&Msg::Done)?;
    match expect_reply(chan, timeout, "verdict")? {
        Msg::Verdict { error: None } => Ok(()),
        Msg::Verdict { error: Some(e) } => {
            tracing::error!("{test}: the responder received wrong data: {e}");
            Err(Status::IoError)
        }
        m => {
            tracing::error!("expected a verdict from the peer, got {m:?}");
            Err(Status::InvalidParam)
        }
    }
}
