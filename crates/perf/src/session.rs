//! A run of tests of either layer over one channel.
//!
//! The [`Initiator`] runs a list of tests that may mix transport-layer tests (each over a
//! named uct transport) and protocol-layer tests: for each group of consecutive tests of
//! the same layer and transport it opens a session with the responder (a hello naming the
//! transport, or "ucp"), runs the tests, and ends the session with `Quit`. The responder
//! ([`respond`]) waits for a hello, opens the matching peer, serves it, and waits for the
//! next hello until the initiator closes the channel. One responder therefore serves any
//! mix of tests, which is what a server waiting for an unknown client needs.

use crate::channel::Channel;
use crate::handshake::{self, UCP};
use crate::params::Params;
use crate::protocol::UcpPeer;
use crate::registry::Api;
use crate::stats::PerfResult;
use crate::transport::UctPeer;
use std::time::Duration;
use ucs::{Result, Status};

/// The open session (boxed: the peers are large and of different sizes).
enum Side<C: Channel> {
    Uct(Box<UctPeer<C>>),
    Ucp(Box<UcpPeer<C>>),
}

impl<C: Channel> Side<C> {
    /// The transport of a session this side was opened for ("ucp" for the protocol layer).
    fn key(&self) -> &str {
        match self {
            Side::Uct(u) => u.transport(),
            Side::Ucp(_) => UCP,
        }
    }

    fn finish(self) -> Result<C> {
        match self {
            Side::Uct(u) => (*u).finish(),
            Side::Ucp(u) => (*u).finish(),
        }
    }
}

/// The session a test needs: "ucp", or the uct transport's canonical name.
fn key_of(p: &Params) -> Result<String> {
    match p.test.info().api {
        Api::Ucp => Ok(UCP.into()),
        Api::Uct => uct::Transport::from_name(&p.transport)
            .map(|t| t.name().to_string())
            .ok_or_else(|| {
                tracing::error!("unknown transport '{}'", p.transport);
                Status::NoDevice
            }),
    }
}

/// The initiating side of a run.
pub struct Initiator<C: Channel> {
    /// The channel while no session is open.
    chan: Option<C>,
    side: Option<Side<C>>,
    timeout: Duration,
}

impl<C: Channel> Initiator<C> {
    /// An initiator over `chan`; `timeout` bounds every wait for the peer.
    pub fn new(chan: C, timeout: Duration) -> Initiator<C> {
        Initiator {
            chan: Some(chan),
            side: None,
            timeout,
        }
    }

    /// Runs one test, opening the session it needs first (and ending the previous one).
    pub fn run(&mut self, p: &Params) -> Result<PerfResult> {
        p.validate()?;
        let key = key_of(p)?;
        if self.side.as_ref().is_some_and(|s| s.key() != key) {
            if let Some(side) = self.side.take() {
                self.chan = Some(side.finish()?);
            }
        }
        if self.side.is_none() {
            let chan = self.chan.take().ok_or(Status::InvalidParam)?;
            self.side = Some(if key == UCP {
                Side::Ucp(Box::new(UcpPeer::connect(chan, self.timeout)?))
            } else {
                Side::Uct(Box::new(UctPeer::connect(&key, chan, self.timeout)?))
            });
        }
        match self.side.as_mut() {
            Some(Side::Uct(u)) => u.run(p),
            Some(Side::Ucp(u)) => u.run(p),
            None => Err(Status::InvalidParam),
        }
    }

    /// The transport of the open session: the uct transport, or the one ucp chose.
    pub fn transport(&self) -> Option<&str> {
        match self.side.as_ref()? {
            Side::Uct(u) => Some(u.transport()),
            Side::Ucp(u) => Some(u.transport()),
        }
    }

    /// Ends the open session and closes the channel, which ends [`respond`].
    pub fn finish(mut self) -> Result<()> {
        if let Some(side) = self.side.take() {
            drop(side.finish()?);
        }
        Ok(())
    }
}

/// The responding side of a run: serves sessions until the initiator closes the channel
/// (`Ok`), or a session fails. `timeout` bounds every wait for the initiator.
pub fn respond<C: Channel>(mut chan: C, timeout: Duration) -> Result<()> {
    loop {
        let hello = match handshake::recv_hello(&mut chan, timeout) {
            Ok(h) => h,
            Err(Status::ConnectionReset) => return Ok(()),
            Err(e) => return Err(e),
        };
        chan = if hello.transport == UCP {
            let mut peer = UcpPeer::accept(&hello, chan, timeout)?;
            peer.serve()?;
            peer.into_channel()
        } else {
            let mut peer = UctPeer::accept(&hello, chan, timeout)?;
            peer.serve()?;
            peer.into_channel()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::LineChannel;
    use crate::registry::TestId;

    /// Protocol and transport tests mixed in one run against one responder.
    #[test]
    fn mixed_run_against_one_responder() {
        let (r1, w1) = rustix::pipe::pipe().unwrap();
        let (r2, w2) = rustix::pipe::pipe().unwrap();
        let timeout = Duration::from_secs(60);
        let responder = std::thread::spawn(move || respond(LineChannel::new(r2, w1), timeout));
        let mut init = Initiator::new(LineChannel::new(r1, w2), timeout);
        let short = |test| Params {
            iterations: 50,
            warmup: 5,
            ..Params::new(test)
        };
        for test in [
            TestId::TagLat,
            TestId::AmLat,
            TestId::TagMr,
            TestId::UcpPutLat,
            TestId::FaddLat,
            TestId::TagBw,
            TestId::PutBw,
            TestId::UcpAmLat,
        ] {
            let r = init.run(&short(test)).unwrap();
            assert_eq!(r.test, test);
            assert_eq!(r.api, test.info().api);
            assert_eq!(init.transport(), Some("shm"));
        }
        init.finish().unwrap();
        assert_eq!(responder.join().unwrap(), Ok(()));
    }
}
