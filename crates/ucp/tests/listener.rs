//! Client–server connection establishment: accept, reject, a closed port, and 50
//! clients connecting at once, each exchanging checked messages with the server.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ucp::{ConnReqId, Context, Features, ThreadMode, Worker};
use ucs::Status;

fn ctx() -> Context {
    Context::new(Features::TAG).unwrap()
}

type Requests = Arc<Mutex<Vec<(ConnReqId, SocketAddr)>>>;

fn server(c: &Context) -> (Worker, SocketAddr, Requests) {
    let mut w = Worker::new(c, ThreadMode::Single).unwrap();
    let reqs: Requests = Arc::default();
    let r2 = reqs.clone();
    let l = w
        .listener_create(
            "127.0.0.1:0".parse().unwrap(),
            Box::new(move |id, client| r2.lock().unwrap().push((id, client))),
        )
        .unwrap();
    let addr = w.listener_addr(l).unwrap();
    assert_ne!(addr.port(), 0, "port 0 picks a port");
    (w, addr, reqs)
}

#[test]
fn accept_then_exchange_messages() {
    let c = ctx();
    let (mut s, addr, reqs) = server(&c);
    let c2 = c.clone();
    let client = std::thread::spawn(move || {
        let mut w = Worker::new(&c2, ThreadMode::Single).unwrap();
        let ep = w.ep_create_sockaddr(addr, Duration::from_secs(30)).unwrap();
        w.tag_send(ep, b"hello server", 1).unwrap();
        let mut buf = [0u8; 32];
        let info = w.tag_recv(&mut buf, 2, u64::MAX).unwrap();
        assert_eq!(&buf[..info.length], b"hello client");
        w.flush_nb(None)
            .unwrap()
            .map(|r| w.wait_request(r, Duration::from_secs(30)).unwrap());
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let req = loop {
        s.progress();
        if let Some(r) = reqs.lock().unwrap().pop() {
            break r;
        }
        assert!(Instant::now() < deadline, "no connection request");
        std::thread::sleep(Duration::from_micros(100));
    };
    assert!(req.1.ip().is_loopback());
    let ep = s.ep_create_from_request(req.0).unwrap();
    let mut buf = [0u8; 32];
    let info = s.tag_recv(&mut buf, 1, u64::MAX).unwrap();
    assert_eq!(&buf[..info.length], b"hello server");
    s.tag_send(ep, b"hello client", 2).unwrap();
    client.join().unwrap();
    // Answering a request twice is an error, not a crash.
    assert_eq!(s.ep_create_from_request(req.0), Err(Status::InvalidParam));
}

#[test]
fn reject_and_closed_port() {
    let c = ctx();
    let (mut s, addr, reqs) = server(&c);
    let c2 = c.clone();
    let client = std::thread::spawn(move || {
        let mut w = Worker::new(&c2, ThreadMode::Single).unwrap();
        w.ep_create_sockaddr(addr, Duration::from_secs(30))
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        s.progress();
        if let Some((id, _)) = reqs.lock().unwrap().pop() {
            s.listener_reject(id).unwrap();
            break;
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(client.join().unwrap().err(), Some(Status::Rejected));

    // Nothing listens on a port we just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    let r = w.ep_create_sockaddr(
        format!("127.0.0.1:{port}").parse().unwrap(),
        Duration::from_secs(10),
    );
    assert_eq!(r.err(), Some(Status::Unreachable));
}

#[test]
fn fifty_clients_at_once() {
    const N: u64 = 50;
    let c = ctx();
    let (mut s, addr, reqs) = server(&c);
    let clients: Vec<_> = (0..N)
        .map(|i| {
            let c2 = c.clone();
            std::thread::spawn(move || {
                let mut w = Worker::new(&c2, ThreadMode::Single).unwrap();
                let ep = w.ep_create_sockaddr(addr, Duration::from_secs(60)).unwrap();
                let msg = format!("client {i}");
                w.tag_send(ep, msg.as_bytes(), 100 + i).unwrap();
                let mut buf = [0u8; 64];
                let info = w.tag_recv(&mut buf, 300, u64::MAX).unwrap();
                assert_eq!(&buf[..info.length], b"welcome");
                w.flush_nb(None)
                    .unwrap()
                    .map(|r| w.wait_request(r, Duration::from_secs(60)).unwrap());
            })
        })
        .collect();
    let mut eps = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while eps.len() < N as usize {
        s.progress();
        let pending: Vec<_> = reqs.lock().unwrap().drain(..).collect();
        for (id, _) in pending {
            eps.push(s.ep_create_from_request(id).unwrap());
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {N} clients connected",
            eps.len()
        );
    }
    // Each client's message, then a reply on the endpoint its request created.
    let mut buf = [0u8; 64];
    let mut seen = std::collections::HashSet::new();
    for _ in 0..N {
        let info = s.tag_recv(&mut buf, 0, 0).unwrap();
        let i = info.sender_tag - 100;
        assert_eq!(&buf[..info.length], format!("client {i}").as_bytes());
        assert!(seen.insert(i), "client {i} twice");
    }
    // Every endpoint the requests created reaches its client.
    for ep in &eps {
        s.tag_send(*ep, b"welcome", 300).unwrap();
    }
    for c in clients {
        c.join().unwrap();
    }
}
