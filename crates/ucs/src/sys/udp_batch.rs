//! Batched UDP socket calls: `sendmmsg` and `recvmmsg`, with UDP generic segmentation
//! offload (GSO, the `UDP_SEGMENT` control message: one buffer of equal-size datagrams
//! handed to the kernel in one go) and generic receive offload (GRO, the `UDP_GRO` socket
//! option: the kernel hands back several datagrams of one sender in one buffer, with their
//! size in a control message).
//!
//! Both offloads are optional: [`enable_gro`] and [`gso_supported`] say whether this
//! kernel has them, and the caller falls back to one datagram per message without them
//! (an old kernel answers `ENOPROTOOPT`, a device that cannot segment answers `EIO` or
//! `EINVAL` to a GSO send: [`SendError::GsoRefused`]).
//!
//! Invariants: every pointer handed to the kernel points into a buffer that the call
//! borrows for its whole duration (the caller's datagrams on send, the [`RecvBatch`]'s own
//! arena on receive); the header arrays are rebuilt on every call, so that a vector that
//! reallocated between calls is never seen through a stale pointer. Nothing received is
//! trusted: lengths come from the kernel and are checked against the buffers, and a
//! control message is read only when its level, type and length match.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};

/// `SOL_UDP`: the protocol level of UDP socket options (IPPROTO_UDP).
const SOL_UDP: libc::c_int = 17;
/// `UDP_SEGMENT` (Linux 4.18): GSO segment size, as a socket option or a control message.
const UDP_SEGMENT: libc::c_int = 103;
/// `UDP_GRO` (Linux 5.0): receive coalesced datagrams with their size in a control message.
const UDP_GRO: libc::c_int = 104;

/// Largest number of segments the kernel accepts in one GSO send (`UDP_MAX_SEGMENTS` of
/// Linux before 6.x; newer kernels allow more).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Largest total payload of one GSO send (the IP length field bounds the super-datagram).
pub const GSO_MAX_BYTES: usize = 65000;
/// Largest buffer a GRO receive can fill.
pub const GRO_MAX_BYTES: usize = 65535;

/// Room for one control message carrying a `u16` (GSO) or an `int` (GRO): header plus
/// data, aligned. 8 bytes of data is more than either needs.
const CMSG_ROOM: usize = 32;

fn set_int_opt(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: `v` is a live c_int and its exact size is passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

/// Turns on UDP GRO for the socket; false when the kernel does not have it.
pub fn enable_gro(fd: BorrowedFd<'_>) -> bool {
    set_int_opt(fd, SOL_UDP, UDP_GRO, 1)
}

/// Whether the kernel knows UDP GSO: setting the socket's default segment size to 0
/// (no segmentation, the default) succeeds exactly when it does.
pub fn gso_supported(fd: BorrowedFd<'_>) -> bool {
    set_int_opt(fd, SOL_UDP, UDP_SEGMENT, 0)
}

/// A socket address in the kernel's form.
fn to_raw(a: &SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for every sockaddr type;
            // we write a whole sockaddr_in at its start.
            unsafe { std::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above, for a sockaddr_in6.
            unsafe { std::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// The address the kernel wrote, if it is an IPv4 or IPv6 one of the right length.
fn from_raw(s: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match i32::from(s.ss_family) {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, and it is long enough.
            let sin = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for a sockaddr_in6.
            let sin6 =
                unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain integers; all zeroes is a valid (AF_UNSPEC) value.
    unsafe { std::mem::zeroed() }
}

fn zeroed_mmsghdr() -> libc::mmsghdr {
    // SAFETY: mmsghdr is integers and raw pointers; all zeroes (null pointers, zero
    // lengths) is a valid empty header.
    unsafe { std::mem::zeroed() }
}

/// One message of a [`SendBatch`]: `count` datagrams (buffers `first..first + count` of
/// the call), all to `addr`. With `gso` set, they go as one GSO send of segments of `gso`
/// bytes: every datagram but the last must be exactly `gso` bytes, the last at most that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutMsg {
    pub addr: SocketAddr,
    pub first: u32,
    pub count: u32,
    pub gso: Option<u16>,
}

/// Why [`SendBatch::send`] stopped before the end.
#[derive(Debug)]
pub enum SendError {
    /// The socket's send buffer is full.
    WouldBlock,
    /// The message at this index asked for GSO and the kernel or the device refused it:
    /// resend its datagrams one by one and stop asking.
    GsoRefused(usize),
    /// The message at this index failed for another reason (it is lost, like a datagram
    /// on the wire).
    Failed(usize, io::Error),
}

/// Reusable header storage for `sendmmsg`.
#[derive(Default)]
pub struct SendBatch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<[u64; CMSG_ROOM / 8]>,
}

// SAFETY: the raw pointers inside the headers are written at the start of every call and
// used only during it, while the batch is borrowed mutably; between calls they are never
// dereferenced, so moving the batch to, or sharing it with, another thread is harmless.
unsafe impl Send for SendBatch {}
// SAFETY: as above; `&SendBatch` gives no access to the pointers at all.
unsafe impl Sync for SendBatch {}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch").finish_non_exhaustive()
    }
}

impl SendBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends `msgs[start..]` with as few `sendmmsg` calls as the kernel allows. Datagram
    /// `i` is the concatenation of the two parts `buf(i)` returns (the second may be
    /// empty): the kernel gathers them, so a header and a payload kept apart need no
    /// copy into one buffer. Returns how many messages went (all of them on success), or
    /// where and why it stopped; the kernel copies each datagram once and keeps no
    /// reference to the buffers.
    pub fn send<'b>(
        &mut self,
        fd: BorrowedFd<'_>,
        msgs: &[OutMsg],
        buf: impl Fn(usize) -> (&'b [u8], &'b [u8]),
    ) -> Result<usize, (usize, SendError)> {
        let n = msgs.len();
        self.hdrs.clear();
        self.iovs.clear();
        self.addrs.clear();
        self.cmsgs.clear();
        self.addrs.resize(n, zeroed_storage());
        self.cmsgs.resize(n, [0; CMSG_ROOM / 8]);
        for (i, m) in msgs.iter().enumerate() {
            let alen = to_raw(&m.addr, &mut self.addrs[i]);
            let before = self.iovs.len();
            for k in m.first..m.first + m.count {
                let (head, tail) = buf(k as usize);
                for b in [head, tail].into_iter().filter(|b| !b.is_empty()) {
                    self.iovs.push(libc::iovec {
                        iov_base: b.as_ptr() as *mut libc::c_void,
                        iov_len: b.len(),
                    });
                }
            }
            let mut h = zeroed_mmsghdr();
            h.msg_hdr.msg_namelen = alen;
            h.msg_hdr.msg_iovlen = (self.iovs.len() - before) as _;
            self.hdrs.push(h);
        }
        // All vectors are complete: now take the pointers, which stay valid until we
        // return (nothing pushes to them below).
        let mut iov_at = 0usize;
        for (i, m) in msgs.iter().enumerate() {
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_iov = self.iovs[iov_at..].as_mut_ptr();
            #[allow(clippy::unnecessary_cast)] // its type differs between C libraries
            {
                iov_at += h.msg_iovlen as usize;
            }
            if let Some(seg) = m.gso {
                let room = &mut self.cmsgs[i];
                h.msg_control = room.as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE is a pure size computation.
                h.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
                // SAFETY: msg_control points to CMSG_ROOM (>= CMSG_SPACE(2)) zeroed, aligned
                // bytes owned by self.cmsgs[i]; CMSG_FIRSTHDR returns its start, and
                // CMSG_DATA a pointer inside it with room for the 2-byte segment size.
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
                }
            }
        }
        let mut done = 0usize;
        while done < n {
            let rest = &mut self.hdrs[done..];
            // SAFETY: every header points at its address, iovecs and control buffer in
            // this batch, and every iovec at a datagram borrowed from the caller for the
            // whole call; `rest.len()` headers follow `rest.as_mut_ptr()`.
            let r = unsafe {
                libc::sendmmsg(
                    fd.as_raw_fd(),
                    rest.as_mut_ptr(),
                    rest.len().min(1024) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                done += r as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                    return Err((done, SendError::WouldBlock));
                }
                Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::ENOPROTOOPT)
                    if msgs[done].gso.is_some() =>
                {
                    return Err((done, SendError::GsoRefused(done)));
                }
                _ => return Err((done, SendError::Failed(done, e))),
            }
        }
        Ok(n)
    }
}

/// One datagram (or, with GRO, a run of datagrams of `seg` bytes each, the last maybe
/// shorter) read by [`RecvBatch::recv`].
#[derive(Debug)]
pub struct InMsg<'a> {
    /// The sender, when the kernel gave an IPv4 or IPv6 address.
    pub from: Option<SocketAddr>,
    /// The bytes, `seg` bytes per datagram.
    pub data: &'a [u8],
    /// Datagram size when the kernel coalesced several (GRO); `None`: one datagram.
    pub seg: Option<usize>,
    /// The datagram was longer than the buffer and was cut (`MSG_TRUNC`).
    pub truncated: bool,
}

/// Reusable buffers and headers for `recvmmsg`: `slots` buffers of `slot_len` bytes.
pub struct RecvBatch {
    slot_len: usize,
    arena: Vec<u8>,
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<[u64; CMSG_ROOM / 8]>,
    got: usize,
}

// SAFETY: the header pointers point into the batch's own heap buffers (which do not move
// when the batch does) and are rewritten at the start of every `recv`; `get` (through
// `&self`) reads only the control buffers through them, which nothing mutates meanwhile.
unsafe impl Send for RecvBatch {}
// SAFETY: as above: shared access only reads.
unsafe impl Sync for RecvBatch {}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("slots", &self.addrs.len())
            .field("slot_len", &self.slot_len)
            .finish_non_exhaustive()
    }
}

impl RecvBatch {
    /// Room for `slots` (>= 1) datagrams of up to `slot_len` bytes each.
    pub fn new(slots: usize, slot_len: usize) -> Self {
        let slots = slots.max(1);
        Self {
            slot_len,
            arena: vec![0; slots * slot_len],
            hdrs: (0..slots).map(|_| zeroed_mmsghdr()).collect(),
            iovs: vec![
                libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                };
                slots
            ],
            addrs: vec![zeroed_storage(); slots],
            cmsgs: vec![[0; CMSG_ROOM / 8]; slots],
            got: 0,
        }
    }

    /// Buffers in the batch.
    pub fn slots(&self) -> usize {
        self.addrs.len()
    }

    /// Reads up to `max` (at most [`RecvBatch::slots`]) datagrams without blocking.
    /// Returns how many arrived (0 when none waits); read them with [`RecvBatch::get`].
    pub fn recv(&mut self, fd: BorrowedFd<'_>, max: usize) -> io::Result<usize> {
        let n = max.min(self.slots());
        self.got = 0;
        if n == 0 {
            return Ok(0);
        }
        let base = self.arena.as_mut_ptr();
        for i in 0..n {
            self.iovs[i] = libc::iovec {
                // SAFETY: i * slot_len + slot_len <= arena.len() (slots * slot_len).
                iov_base: unsafe { base.add(i * self.slot_len) }.cast(),
                iov_len: self.slot_len,
            };
            let h = &mut self.hdrs[i];
            *h = zeroed_mmsghdr();
            h.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = self.cmsgs[i].as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = CMSG_ROOM as _;
        }
        loop {
            // SAFETY: n headers, each pointing at its own address storage, one iovec into
            // its own slot of the arena and its own control buffer, all owned by self and
            // not moved during the call; a null timeout means no waiting with DONTWAIT.
            let r = unsafe {
                libc::recvmmsg(
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    self.hdrs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r >= 0 {
                self.got = r as usize;
                return Ok(self.got);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(0),
                _ => return Err(e),
            }
        }
    }

    /// Message `i` of the last [`RecvBatch::recv`] (`i` below what it returned).
    pub fn get(&self, i: usize) -> InMsg<'_> {
        assert!(i < self.got, "message {i} of {}", self.got);
        let h = &self.hdrs[i].msg_hdr;
        let len = (self.hdrs[i].msg_len as usize).min(self.slot_len);
        let data = &self.arena[i * self.slot_len..i * self.slot_len + len];
        let mut seg = None;
        #[allow(clippy::unnecessary_cast)] // socklen_t on some targets
        let ctl_len = (h.msg_controllen as usize).min(CMSG_ROOM);
        if h.msg_flags & libc::MSG_CTRUNC == 0 && ctl_len > 0 {
            let mut probe = zeroed_mmsghdr().msg_hdr;
            probe.msg_control = self.cmsgs[i].as_ptr() as *mut libc::c_void;
            probe.msg_controllen = ctl_len as _;
            // SAFETY: `probe` describes this slot's control buffer with the length the
            // kernel filled (capped to the buffer); CMSG_FIRSTHDR/CMSG_NXTHDR stay inside
            // that length, and a message is read only if its header says it holds at
            // least an int.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&probe);
                while !c.is_null() {
                    if (*c).cmsg_level == SOL_UDP
                        && (*c).cmsg_type == UDP_GRO
                        && (*c).cmsg_len as usize >= libc::CMSG_LEN(4) as usize
                    {
                        let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                        if v > 0 && (v as usize) < len {
                            seg = Some(v as usize);
                        }
                    }
                    c = libc::CMSG_NXTHDR(&probe, c);
                }
            }
        }
        InMsg {
            from: from_raw(&self.addrs[i], h.msg_namelen),
            data,
            seg,
            truncated: h.msg_flags & libc::MSG_TRUNC != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        (a, b)
    }

    fn recv_all(b: &UdpSocket, rb: &mut RecvBatch, want: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        for _ in 0..2000 {
            let n = rb.recv(b.as_fd(), rb.slots()).unwrap();
            for i in 0..n {
                let m = rb.get(i);
                assert!(m.from.is_some());
                assert!(!m.truncated);
                match m.seg {
                    Some(s) => got.extend(m.data.chunks(s).map(|c| c.to_vec())),
                    None => got.push(m.data.to_vec()),
                }
            }
            if got.len() >= want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        got
    }

    #[test]
    fn sendmmsg_and_recvmmsg_carry_every_byte() {
        let (a, b) = pair();
        let to = b.local_addr().unwrap();
        let data: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 100 + i as usize]).collect();
        let msgs: Vec<OutMsg> = (0..40)
            .map(|i| OutMsg {
                addr: to,
                first: i,
                count: 1,
                gso: None,
            })
            .collect();
        let mut sb = SendBatch::new();
        // Each datagram in two parts, split anywhere (an empty part included).
        let parts = |i: usize| data[i].split_at(i % 7);
        assert_eq!(sb.send(a.as_fd(), &msgs, parts).unwrap(), 40);
        let mut rb = RecvBatch::new(16, 2048);
        let got = recv_all(&b, &mut rb, 40);
        assert_eq!(got, data);
    }

    #[test]
    fn gso_send_arrives_as_datagrams_with_or_without_gro() {
        let (a, b) = pair();
        if !gso_supported(a.as_fd()) {
            eprintln!("kernel without UDP GSO: nothing to test");
            return;
        }
        let gro = enable_gro(b.as_fd());
        let to = b.local_addr().unwrap();
        // 10 segments of 1000 bytes and a short last one, twice.
        let data: Vec<Vec<u8>> = (0..22u8)
            .map(|i| vec![i; if i % 11 == 10 { 300 } else { 1000 }])
            .collect();
        let msgs = [
            OutMsg {
                addr: to,
                first: 0,
                count: 11,
                gso: Some(1000),
            },
            OutMsg {
                addr: to,
                first: 11,
                count: 11,
                gso: Some(1000),
            },
        ];
        let mut sb = SendBatch::new();
        // Segments gathered from two parts each: GSO cuts the concatenation.
        let parts = |i: usize| data[i].split_at(data[i].len() / 3);
        assert_eq!(sb.send(a.as_fd(), &msgs, parts).unwrap(), 2);
        let mut rb = RecvBatch::new(8, GRO_MAX_BYTES);
        let got = recv_all(&b, &mut rb, 22);
        assert_eq!(got, data, "gro {gro}");
    }

    #[test]
    fn truncation_is_reported() {
        let (a, b) = pair();
        a.send_to(&[7; 300], b.local_addr().unwrap()).unwrap();
        let mut rb = RecvBatch::new(2, 100);
        for _ in 0..2000 {
            if rb.recv(b.as_fd(), 2).unwrap() == 1 {
                let m = rb.get(0);
                assert!(m.truncated);
                assert_eq!(m.data, &[7; 100][..]);
                assert_eq!(m.from, Some(a.local_addr().unwrap()));
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        panic!("nothing received");
    }

    #[test]
    fn addresses_round_trip() {
        for a in [
            "192.0.2.7:9".parse::<SocketAddr>().unwrap(),
            "[2001:db8::1]:65535".parse().unwrap(),
        ] {
            let mut s = zeroed_storage();
            let n = to_raw(&a, &mut s);
            assert_eq!(from_raw(&s, n), Some(a));
            assert_eq!(from_raw(&s, 2), None);
        }
    }
}
