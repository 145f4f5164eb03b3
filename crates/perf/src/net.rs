//! The out-of-band channel between two hosts: a TCP connection carrying the same
//! [`LineChannel`] messages as the pipes to a local peer process (addresses, test
//! parameters, verdicts; never the measured traffic), as ucx_perftest trades its
//! parameters and addresses over a socket.
//!
//! Every step is bounded: connecting by a timeout per address, accepting by the server's
//! timeout, and every later receive by the channel's deadlines.

use crate::channel::LineChannel;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};
use ucs::{Result, Status};

/// ucx_perftest's default port.
pub const DEFAULT_PORT: u16 = 13337;

/// Splits "HOST", "HOST:PORT", "[V6]" or "[V6]:PORT" into host and port (`None` when not
/// given). An IPv6 address without brackets is taken whole, as a host.
pub fn parse_host_port(s: &str) -> std::result::Result<(String, Option<u16>), String> {
    let bad_port = |p: &str| format!("'{p}' is not a port number (1-65535)");
    let port = |p: &str| match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(bad_port(p)),
        Ok(n) => Ok(n),
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("'{s}': missing ']'"))?;
        return match after {
            "" => Ok((host.to_string(), None)),
            a => match a.strip_prefix(':') {
                Some(p) => Ok((host.to_string(), Some(port(p)?))),
                None => Err(format!("'{s}': expected ':PORT' after ']'")),
            },
        };
    }
    match s.split_once(':') {
        Some((h, p)) if !p.contains(':') => {
            if h.is_empty() {
                return Err(format!("'{s}': missing host"));
            }
            Ok((h.to_string(), Some(port(p)?)))
        }
        _ if s.is_empty() => Err("missing host".into()),
        _ => Ok((s.to_string(), None)),
    }
}

/// A channel over `stream`: its two halves as the read and write descriptors.
fn channel(stream: TcpStream) -> Result<LineChannel> {
    stream.set_nodelay(true).map_err(Status::from)?;
    let rd: OwnedFd = stream.as_fd().try_clone_to_owned().map_err(Status::from)?;
    Ok(LineChannel::new(rd, OwnedFd::from(stream)))
}

/// Client: connects to `host:port`, trying each address it resolves to for up to
/// `timeout`. A refused connection is an error at once (no server there), as with
/// ucx_perftest.
pub fn connect(
    host: &str,
    port: u16,
    timeout: Duration,
) -> std::result::Result<LineChannel, String> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve '{host}': {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("'{host}' has no address"));
    }
    let mut last = String::new();
    for a in &addrs {
        match TcpStream::connect_timeout(a, timeout) {
            Ok(s) => {
                return channel(s).map_err(|e| format!("connected to {a}, but: {e}"));
            }
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(format!(
        "cannot connect to {host} port {port} ({last}); is `rucx-perftest --server -p {port}` \
         running there?"
    ))
}

/// Server: listens on every address of this host at `port` (0: any free port; see
/// [`TcpListener::local_addr`]).
pub fn listen(port: u16) -> std::result::Result<TcpListener, String> {
    // IPv6 "any" also accepts IPv4 where the system maps it; fall back to IPv4 only.
    TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| format!("cannot listen on port {port}: {e}"))
}

/// Server: waits up to `timeout` for one client.
pub fn accept(
    listener: &TcpListener,
    timeout: Duration,
) -> std::result::Result<(LineChannel, SocketAddr), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no client connected within {timeout:?}"));
        }
        let ms = i32::try_from(left.as_millis() + 1).unwrap_or(i32::MAX);
        match ucs::sys::poll::readable(listener.as_fd(), ms) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(e) => return Err(format!("waiting for a client: {e}")),
        }
        match listener.accept() {
            Ok((s, peer)) => {
                return channel(s)
                    .map(|c| (c, peer))
                    .map_err(|e| format!("client {peer} connected, but: {e}"))
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("accepting a client: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::{Channel, Msg};

    #[test]
    fn host_and_port() {
        let ok = |s: &str| parse_host_port(s).unwrap();
        assert_eq!(ok("node1"), ("node1".into(), None));
        assert_eq!(ok("node1:2000"), ("node1".into(), Some(2000)));
        assert_eq!(ok("10.0.0.1:13337"), ("10.0.0.1".into(), Some(13337)));
        assert_eq!(ok("[::1]"), ("::1".into(), None));
        assert_eq!(ok("[::1]:99"), ("::1".into(), Some(99)));
        assert_eq!(ok("fe80::1"), ("fe80::1".into(), None));
        for bad in ["", ":80", "h:0", "h:x", "h:70000", "[::1", "[::1]x"] {
            assert!(parse_host_port(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn messages_cross_a_connection() {
        let l = listen(0).unwrap();
        let port = l.local_addr().unwrap().port();
        let t = Duration::from_secs(10);
        let server = std::thread::spawn(move || {
            let (mut c, _) = accept(&l, t).unwrap();
            let m = c.recv(t).unwrap();
            c.send(&m).unwrap();
        });
        let mut c = connect("127.0.0.1", port, t).unwrap();
        c.send(&Msg::Done).unwrap();
        assert_eq!(c.recv(t).unwrap(), Msg::Done);
        server.join().unwrap();
        // The server closed its end.
        assert_eq!(c.recv(t).unwrap_err(), Status::ConnectionReset);
    }

    #[test]
    fn refused_and_no_client_are_errors() {
        let port = {
            let l = listen(0).unwrap();
            l.local_addr().unwrap().port()
        };
        let e = connect("127.0.0.1", port, Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("refused"), "{e}");
        let l = listen(0).unwrap();
        let e = accept(&l, Duration::from_millis(30)).unwrap_err();
        assert!(e.contains("no client"), "{e}");
    }
}
