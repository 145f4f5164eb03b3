//! The sockaddr connection manager: a listener on an IP and port for client–server
//! programs. A client connects and sends a blob (the protocol layer sends its worker
//! address); the server's application accepts, answering with a blob of its own, or
//! rejects. After that both sides use the normal transports; the connection closes.
//!
//! ```text
//! request: magic u32 = "RUCM" | version u8 = 1 | reserved u8 u16 = 0 | length u32 | blob
//! reply:   magic u32 = "RUCM" | version u8 = 1 | verdict u8 (0 accept, 1 reject)
//!          | reserved u16 = 0 | length u32 | blob (empty on reject)
//! ```
//! Blobs are at most [`MAX_BLOB`] bytes; anything else on the wire closes the connection.

use crate::wire::{Reader, Writer};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};
use ucs::{Result, Status};

const MAGIC: u32 = u32::from_le_bytes(*b"RUCM");
const VERSION: u8 = 1;
const HDR: usize = 12;
/// Largest blob either side may send.
pub const MAX_BLOB: usize = 4096;

/// Encodes a message with `verdict` (0 for requests and acceptances).
pub fn encode(verdict: u8, blob: &[u8]) -> Vec<u8> {
    let mut w = Writer::with_capacity(HDR + blob.len());
    w.u32(MAGIC)
        .u8(VERSION)
        .u8(verdict)
        .u16(0)
        .u32(blob.len() as u32);
    w.buf.extend_from_slice(blob);
    w.buf
}

/// Parses a message from the start of `b`: `Ok(None)` when more bytes are needed.
pub fn decode(b: &[u8]) -> Result<Option<(u8, Vec<u8>)>> {
    if b.len() < HDR {
        return Ok(None);
    }
    let bad = Status::InvalidParam;
    let mut r = Reader::new(b);
    if r.u32().ok_or(bad)? != MAGIC || r.u8().ok_or(bad)? != VERSION {
        return Err(bad);
    }
    let verdict = r.u8().ok_or(bad)?;
    if verdict > 1 || r.u16().ok_or(bad)? != 0 {
        return Err(bad);
    }
    let len = r.u32().ok_or(bad)? as usize;
    if len > MAX_BLOB {
        return Err(bad);
    }
    Ok(r.bytes(len).map(|blob| (verdict, blob.to_vec())))
}

fn stream_socket(addr: &SocketAddr) -> Result<Socket> {
    Ok(Socket::new(
        Domain::for_address(*addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?)
}

/// A connection that is reading one message.
struct Pending {
    sock: Socket,
    peer: SocketAddr,
    buf: Vec<u8>,
    since: Instant,
}

/// A connection request: a client and the blob it sent.
pub struct ConnRequest {
    sock: Socket,
    pub client: SocketAddr,
    pub blob: Vec<u8>,
}

impl std::fmt::Debug for ConnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConnRequest({}, {} bytes)", self.client, self.blob.len())
    }
}

fn write_all_timeout(sock: &Socket, data: &[u8], timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut off = 0;
    while off < data.len() {
        match sock.send_with_flags(&data[off..], libc::MSG_NOSIGNAL) {
            Ok(n) => off += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(Status::TimedOut);
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(_) => return Err(Status::ConnectionReset),
        }
    }
    Ok(())
}

impl ConnRequest {
    /// This side's address of the client's connection (the listener's IP and port).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.sock.local_addr().ok().and_then(|a| a.as_socket())
    }

    /// Accepts, sending `blob` back.
    pub fn accept(self, blob: &[u8]) -> Result<()> {
        write_all_timeout(&self.sock, &encode(0, blob), Duration::from_secs(10))
    }

    /// Rejects: the client's connect fails with `Rejected`.
    pub fn reject(self) -> Result<()> {
        write_all_timeout(&self.sock, &encode(1, &[]), Duration::from_secs(10))
    }
}

/// A listening socket.
pub struct Listener {
    sock: Socket,
    local: SocketAddr,
    pending: Vec<Pending>,
    malformed: u64,
}

impl Listener {
    /// Listens on `addr` (port 0: the kernel picks one; see [`Listener::local_addr`]).
    pub fn bind(addr: SocketAddr) -> Result<Listener> {
        let sock = stream_socket(&addr)?;
        sock.set_reuse_address(true)?;
        sock.bind(&SockAddr::from(addr)).map_err(|e| {
            tracing::debug!("cm: bind {addr} failed: {e}");
            if e.kind() == std::io::ErrorKind::AddrInUse {
                Status::Busy
            } else {
                Status::InvalidAddr
            }
        })?;
        sock.listen(1024)?;
        let local = sock.local_addr()?.as_socket().ok_or(Status::InvalidAddr)?;
        Ok(Listener {
            sock,
            local,
            pending: Vec::new(),
            malformed: 0,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Connections closed for malformed requests.
    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    /// Readable when a client connects.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Accepts new connections and returns the requests that arrived whole. Clients that
    /// send nothing usable within 10 s are dropped.
    pub fn poll(&mut self) -> Vec<ConnRequest> {
        while let Ok((s, a)) = self.sock.accept() {
            if s.set_nonblocking(true).is_ok() {
                let peer = a.as_socket().unwrap_or(self.local);
                self.pending.push(Pending {
                    sock: s,
                    peer,
                    buf: Vec::new(),
                    since: Instant::now(),
                });
            }
        }
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            let p = &mut self.pending[i];
            let mut chunk = [0u8; 1024];
            let mut drop_it = false;
            loop {
                match (&p.sock).read(&mut chunk) {
                    Ok(0) => {
                        drop_it = true;
                        break;
                    }
                    Ok(n) => {
                        p.buf.extend_from_slice(&chunk[..n]);
                        if p.buf.len() > HDR + MAX_BLOB {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        drop_it = true;
                        break;
                    }
                }
            }
            match decode(&p.buf) {
                Ok(Some((0, blob))) => {
                    let p = self.pending.swap_remove(i);
                    out.push(ConnRequest {
                        sock: p.sock,
                        client: p.peer,
                        blob,
                    });
                    continue;
                }
                Ok(None) if !drop_it && p.since.elapsed() < Duration::from_secs(10) => {}
                Ok(_) | Err(_) => {
                    self.malformed += u64::from(!drop_it);
                    self.pending.swap_remove(i);
                    continue;
                }
            }
            i += 1;
        }
        out
    }
}

/// A client's connection request in flight.
pub struct CmClient {
    sock: Socket,
    connected: bool,
    out: Vec<u8>,
    sent: usize,
    buf: Vec<u8>,
}

/// What the server said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted(Vec<u8>),
    Rejected,
}

impl CmClient {
    /// Starts connecting to `server` and sending `blob`.
    pub fn connect(server: SocketAddr, blob: &[u8]) -> Result<CmClient> {
        if blob.len() > MAX_BLOB {
            return Err(Status::InvalidParam);
        }
        let sock = stream_socket(&server)?;
        let connected = match sock.connect(&SockAddr::from(server)) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => false,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(Status::Unreachable)
            }
            Err(e) => {
                tracing::debug!("cm: connect {server} failed: {e}");
                return Err(Status::Unreachable);
            }
        };
        Ok(CmClient {
            sock,
            connected,
            out: encode(0, blob),
            sent: 0,
            buf: Vec::new(),
        })
    }

    /// This side's address of the connection (known once `connect` started).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.sock.local_addr().ok().and_then(|a| a.as_socket())
    }

    /// The connection's descriptor (readable when the server answered).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Advances the exchange: `Ok(None)` while waiting.
    pub fn poll(&mut self) -> Result<Option<Verdict>> {
        if !self.connected {
            match self.sock.take_error() {
                Ok(None) => {}
                Ok(Some(_)) | Err(_) => return Err(Status::Unreachable),
            }
            match self.sock.peer_addr() {
                Ok(_) => self.connected = true,
                Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return Ok(None),
                Err(_) => return Err(Status::Unreachable),
            }
        }
        while self.sent < self.out.len() {
            match self
                .sock
                .send_with_flags(&self.out[self.sent..], libc::MSG_NOSIGNAL)
            {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(_) => return Err(Status::ConnectionReset),
            }
        }
        let mut chunk = [0u8; 1024];
        let mut closed = false;
        loop {
            match (&self.sock).read(&mut chunk) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => return Err(Status::ConnectionReset),
            }
            if self.buf.len() > HDR + MAX_BLOB {
                return Err(Status::InvalidParam);
            }
        }
        match decode(&self.buf)? {
            None if closed => Err(Status::ConnectionReset),
            None => Ok(None),
            Some((0, blob)) => Ok(Some(Verdict::Accepted(blob))),
            Some(_) => Ok(Some(Verdict::Rejected)),
        }
    }

    /// Flushes nothing more; the connection closes when dropped.
    pub fn close(mut self) {
        let _ = self.sock.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(v in 0u8..2, blob in proptest::collection::vec(any::<u8>(), 0..200)) {
            let m = encode(v, &blob);
            prop_assert_eq!(decode(&m).unwrap(), Some((v, blob)));
            for cut in 0..m.len() {
                prop_assert!(decode(&m[..cut]).unwrap().is_none());
            }
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&b);
        }
    }

    fn wait<T>(mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn accept_reject_and_refused() {
        let mut l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = l.local_addr().port();
        assert_ne!(port, 0);
        let mut c = CmClient::connect(l.local_addr(), b"hello").unwrap();
        let req = wait(|| {
            let _ = c.poll().unwrap();
            l.poll().pop()
        });
        assert_eq!(req.blob, b"hello");
        req.accept(b"welcome").unwrap();
        assert_eq!(
            wait(|| c.poll().unwrap()),
            Verdict::Accepted(b"welcome".to_vec())
        );

        let mut c = CmClient::connect(l.local_addr(), b"again").unwrap();
        let req = wait(|| {
            let _ = c.poll().unwrap();
            l.poll().pop()
        });
        req.reject().unwrap();
        assert_eq!(wait(|| c.poll().unwrap()), Verdict::Rejected);

        drop(l);
        let refused = CmClient::connect(format!("127.0.0.1:{port}").parse().unwrap(), b"x")
            .and_then(|mut c| {
                wait(|| match c.poll() {
                    Ok(None) => None,
                    Ok(Some(_)) => Some(Ok(())),
                    Err(e) => Some(Err(e)),
                })
            });
        assert_eq!(refused, Err(Status::Unreachable));
    }

    #[test]
    fn garbage_is_dropped() {
        let mut l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut s = std::net::TcpStream::connect(l.local_addr()).unwrap();
        s.write_all(&[0xffu8; 64]).unwrap();
        wait(|| {
            assert!(l.poll().is_empty());
            (l.malformed() == 1).then_some(())
        });
    }
}
