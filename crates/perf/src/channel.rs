//! The out-of-band channel between the two sides of a test: addresses, parameters, remote
//! keys and verdicts travel here, never the measured traffic.
//!
//! Messages are [`Msg`] values, one JSON object per line, byte strings in hex. The
//! [`LineChannel`] carries them over a pair of descriptors (the pipes to a child's stdin
//! and stdout, or the two halves of a TCP connection between hosts) with a deadline on
//! every receive, so a side whose peer died or hung returns `TimedOut` or
//! `ConnectionReset` instead of waiting forever.
//!
//! A session: the initiator sends `Hello` (the transport, or "ucp" for protocol-layer
//! tests, and its address) and the responder answers with its own; then tests, each
//! `Start` → `Ready` → (the test) → `Done` → `Verdict`; then `Quit`. After a `Quit` the
//! initiator may open another session (tests of another transport or layer) with a new
//! `Hello`, or close the channel.

use crate::params::Params;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};
use ucs::{Result, Status};

/// Version of the message set; both sides must speak the same.
pub const PROTOCOL: u32 = 2;

/// Longest line accepted; a longer one means the peer is not rucx-perftest.
const MAX_LINE: usize = 1 << 20;

/// Bytes that travel as a hex string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hex(pub Vec<u8>);

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&hex_encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Hex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Hex, D::Error> {
        let s = String::deserialize(d)?;
        hex_decode(&s)
            .map(Hex)
            .ok_or_else(|| serde::de::Error::custom("bad hex string"))
    }
}

/// Lower-case hex of `b`.
pub fn hex_encode(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(DIGITS[usize::from(x >> 4)] as char);
        s.push(DIGITS[usize::from(x & 15)] as char);
    }
    s
}

/// Bytes of a hex string (either case); `None` if it is not one.
pub fn hex_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() % 2 != 0 {
        return None;
    }
    let nib = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    b.chunks(2)
        .map(|p| Some(nib(p[0])? << 4 | nib(p[1])?))
        .collect()
}

/// A memory region one side exposes to the other.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionInfo {
    /// Address of the region in its owner.
    pub address: u64,
    /// The packed remote key.
    pub rkey: Hex,
}

/// The messages of the channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Msg {
    /// Both sides, first: the transport (a uct transport, or "ucp") and the interface
    /// or worker address.
    Hello {
        protocol: u32,
        transport: String,
        address: Hex,
    },
    /// Initiator: run this test (with the layout resolved); my region, if the test has the
    /// responder write to me.
    Start {
        params: Params,
        region: Option<RegionInfo>,
    },
    /// Responder: set up; my region, if the test reads or writes the responder's memory.
    Ready { region: Option<RegionInfo> },
    /// Initiator: the measured part is over; check what you received.
    Done,
    /// Responder: what the check found (`None`: correct).
    Verdict { error: Option<String> },
    /// Either side: this test cannot go on.
    Failed { error: String },
    /// Initiator: no more tests in this session.
    Quit,
}

/// A message channel with deadlines.
pub trait Channel {
    fn send(&mut self, msg: &Msg) -> Result<()>;
    /// Waits up to `timeout` for the next message.
    fn recv(&mut self, timeout: Duration) -> Result<Msg>;
    /// The next message if one has arrived, without waiting.
    fn try_recv(&mut self) -> Result<Option<Msg>>;
}

/// [`Channel`] over a readable and a writable descriptor, one JSON message per line.
#[derive(Debug)]
pub struct LineChannel {
    rd: File,
    wr: File,
    buf: Vec<u8>,
}

impl LineChannel {
    pub fn new(rd: OwnedFd, wr: OwnedFd) -> LineChannel {
        LineChannel {
            rd: File::from(rd),
            wr: File::from(wr),
            buf: Vec::new(),
        }
    }

    /// A complete line already buffered, decoded.
    fn take_line(&mut self) -> Result<Option<Msg>> {
        let Some(pos) = self.buf.iter().position(|&b| b == b'\n') else {
            if self.buf.len() > MAX_LINE {
                tracing::error!("peer sent a line longer than {MAX_LINE} bytes");
                return Err(Status::MessageTruncated);
            }
            return Ok(None);
        };
        let line: Vec<u8> = self.buf.drain(..=pos).collect();
        let text = String::from_utf8_lossy(&line[..pos]);
        serde_json::from_str(text.trim()).map(Some).map_err(|e| {
            tracing::error!("bad message from peer ({e}): {}", text.trim());
            Status::InvalidParam
        })
    }

    /// Reads what the descriptor has once it is readable within `timeout_ms`; false if
    /// nothing came in time.
    fn fill(&mut self, timeout_ms: i32) -> Result<bool> {
        if !ucs::sys::poll::readable(self.rd.as_fd(), timeout_ms)? {
            return Ok(false);
        }
        let mut chunk = [0u8; 4096];
        loop {
            match self.rd.read(&mut chunk) {
                Ok(0) => {
                    tracing::debug!("peer closed the channel");
                    return Err(Status::ConnectionReset);
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Status::from(e)),
            }
        }
    }
}

impl Channel for LineChannel {
    fn send(&mut self, msg: &Msg) -> Result<()> {
        let mut line = serde_json::to_vec(msg).map_err(|_| Status::InvalidParam)?;
        line.push(b'\n');
        self.wr.write_all(&line).map_err(|e| {
            tracing::debug!("sending to peer failed: {e}");
            Status::ConnectionReset
        })?;
        self.wr.flush().map_err(|_| Status::ConnectionReset)
    }

    fn recv(&mut self, timeout: Duration) -> Result<Msg> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self.take_line()? {
                return Ok(m);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Status::TimedOut);
            }
            // Round up so that a sub-millisecond remainder still waits.
            let ms = i32::try_from(left.as_millis() + 1).unwrap_or(i32::MAX);
            self.fill(ms)?;
        }
    }

    fn try_recv(&mut self) -> Result<Option<Msg>> {
        if let Some(m) = self.take_line()? {
            return Ok(Some(m));
        }
        self.fill(0)?;
        self.take_line()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::TestId;

    fn pair() -> (LineChannel, LineChannel) {
        let (r1, w1) = rustix::pipe::pipe().unwrap();
        let (r2, w2) = rustix::pipe::pipe().unwrap();
        (LineChannel::new(r1, w2), LineChannel::new(r2, w1))
    }

    #[test]
    fn hex_round_trip() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(hex_decode(&hex_encode(&b)).unwrap(), b);
        assert_eq!(hex_encode(&[0x0f, 0xa0]), "0fa0");
        assert_eq!(hex_decode("0FA0").unwrap(), vec![0x0f, 0xa0]);
        assert!(hex_decode("abc").is_none());
        assert!(hex_decode("zz").is_none());
    }

    #[test]
    fn messages_cross_and_time_out() {
        let (mut a, mut b) = pair();
        let hello = Msg::Hello {
            protocol: PROTOCOL,
            transport: "shm".into(),
            address: Hex(vec![1, 2, 255]),
        };
        let start = Msg::Start {
            params: Params::new(TestId::PutLat),
            region: Some(RegionInfo {
                address: 0x1000,
                rkey: Hex(vec![9; 40]),
            }),
        };
        a.send(&hello).unwrap();
        a.send(&start).unwrap();
        let t = Duration::from_secs(5);
        assert_eq!(b.recv(t).unwrap(), hello);
        assert_eq!(b.try_recv().unwrap(), Some(start));
        assert_eq!(b.try_recv().unwrap(), None);
        assert_eq!(
            b.recv(Duration::from_millis(20)).unwrap_err(),
            Status::TimedOut
        );
        drop(a);
        assert_eq!(b.recv(t).unwrap_err(), Status::ConnectionReset);
    }

    #[test]
    fn garbage_is_an_error() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        let mut wr = File::from(w);
        let (r2, w2) = rustix::pipe::pipe().unwrap();
        let mut c = LineChannel::new(r, w2);
        wr.write_all(b"{\"msg\":\"bogus\"}\n").unwrap();
        assert_eq!(
            c.recv(Duration::from_secs(1)).unwrap_err(),
            Status::InvalidParam
        );
        drop(r2);
    }
}
