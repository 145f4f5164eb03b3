//! Client–server connection establishment: accept (on the listener's worker or another
//! one), reject, a closed port, operations queued while connecting, and 50 clients
//! connecting at once, each exchanging checked messages with the server.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ucp::{ConnReqId, Context, Ep, EpStatus, Features, ThreadMode, Worker};
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

/// Progresses `w` until `ep` failed; returns the status it failed with.
fn wait_failed(w: &mut Worker, ep: Ep) -> Status {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let EpStatus::Failed(s) = w.ep_status(ep).unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "endpoint never failed");
        if w.progress() == 0 {
            w.wait(1).unwrap();
        }
    }
}

/// Progresses `w` until a connection request arrived.
fn next_request(w: &mut Worker, reqs: &Requests) -> (ConnReqId, SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        w.progress();
        if let Some(r) = reqs.lock().unwrap().pop() {
            return r;
        }
        assert!(Instant::now() < deadline, "no connection request");
        std::thread::sleep(Duration::from_micros(100));
    }
}

#[test]
fn reject_and_closed_port() {
    let c = ctx();
    let (mut s, addr, reqs) = server(&c);
    let c2 = c.clone();
    let client = std::thread::spawn(move || {
        let mut w = Worker::new(&c2, ThreadMode::Single).unwrap();
        // The endpoint exists at once; a send made before the answer waits for it and
        // then completes with the refusal, and the error handler hears of it once.
        let ep = w.ep_create_sockaddr(addr, Duration::from_secs(30)).unwrap();
        assert_eq!(w.ep_status(ep).unwrap(), EpStatus::Connecting);
        let calls = Arc::new(Mutex::new(Vec::new()));
        let c3 = calls.clone();
        w.ep_set_err_handler(ep, Some(Box::new(move |_, s| c3.lock().unwrap().push(s))))
            .unwrap();
        let data = *b"too early";
        // SAFETY: `data` outlives the request, which is waited for below.
        let r = unsafe {
            w.tag_send_nb(
                ep,
                ucp::Buf::contig(data.as_ptr().cast_mut(), data.len()),
                1,
                false,
                None,
            )
        }
        .unwrap()
        .expect("queued while connecting");
        let s = wait_failed(&mut w, ep);
        assert_eq!(w.wait_request(r, Duration::from_secs(10)).unwrap(), s);
        w.progress();
        assert_eq!(*calls.lock().unwrap(), vec![s]);
        // Later operations fail at once.
        assert_eq!(w.tag_send(ep, b"x", 1).err(), Some(s));
        w.ep_close_nb(ep, true).unwrap();
        s
    });
    let (id, _) = next_request(&mut s, &reqs);
    s.listener_reject(id).unwrap();
    assert_eq!(client.join().unwrap(), Status::Rejected);

    // Nothing listens on a port we just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = w
        .ep_create_sockaddr(
            format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(wait_failed(&mut w, ep), Status::Unreachable);
}

#[test]
fn accept_on_another_worker_and_context() {
    // The listener's worker only listens; each connection is served by a worker of its
    // own, one of them in another context (as UCX's client-server example does).
    let c = ctx();
    let (mut l, addr, reqs) = server(&c);
    let other_ctx = ctx();
    for (round, data_ctx) in [c.clone(), other_ctx].into_iter().enumerate() {
        let cc = c.clone();
        let client = std::thread::spawn(move || {
            let mut w = Worker::new(&cc, ThreadMode::Single).unwrap();
            let ep = w.ep_create_sockaddr(addr, Duration::from_secs(30)).unwrap();
            // Sent before the server answered: queued, then delivered in order.
            for i in 0..5u64 {
                w.tag_send(ep, format!("early {i}").as_bytes(), 10 + i)
                    .unwrap();
            }
            let mut buf = [0u8; 32];
            let info = w.tag_recv(&mut buf, 2, u64::MAX).unwrap();
            assert_eq!(&buf[..info.length], b"from the data worker");
            w.flush_nb(None)
                .unwrap()
                .map(|r| w.wait_request(r, Duration::from_secs(30)).unwrap());
        });
        let (id, _) = next_request(&mut l, &reqs);
        let req = l.conn_request_take(id).unwrap();
        let mut d = Worker::new(&data_ctx, ThreadMode::Single).unwrap();
        let ep = d.ep_create_accept(req).unwrap();
        let mut buf = [0u8; 32];
        for i in 0..5u64 {
            let info = d.tag_recv(&mut buf, 10 + i, u64::MAX).unwrap();
            assert_eq!(
                &buf[..info.length],
                format!("early {i}").as_bytes(),
                "round {round}"
            );
        }
        d.tag_send(ep, b"from the data worker", 2).unwrap();
        client.join().unwrap();
        // The listener's worker no longer knows the request.
        assert_eq!(l.listener_reject(id), Err(Status::InvalidParam));
    }
}

#[test]
fn closing_a_connecting_endpoint_cancels_its_operations() {
    let c = ctx();
    let (_s, addr, _reqs) = server(&c);
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = w.ep_create_sockaddr(addr, Duration::from_secs(30)).unwrap();
    let data = *b"never sent";
    let got = Arc::new(Mutex::new(None));
    let g2 = got.clone();
    // SAFETY: `data` outlives the request, which completes in ep_close_nb below.
    let r = unsafe {
        w.tag_send_nb(
            ep,
            ucp::Buf::contig(data.as_ptr().cast_mut(), data.len()),
            1,
            false,
            Some(ucp::Callback::new(move |_, s, _| {
                *g2.lock().unwrap() = Some(s)
            })),
        )
    }
    .unwrap();
    assert!(r.is_some());
    assert_eq!(w.ep_close_nb(ep, false).unwrap(), None);
    w.progress();
    assert_eq!(*got.lock().unwrap(), Some(Status::Canceled));
    assert_eq!(w.ep_status(ep).err(), Some(Status::InvalidParam));
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

#[test]
fn stream_bytes_that_beat_the_servers_answer_reach_a_waiting_receive() {
    // The server answers the connection request and sends at once; the client progresses
    // only after both are there, so the server's data (and its wireup) reach the client
    // before the client learns who the server is. A stream receive the client posted on
    // its connecting endpoint still gets the bytes, in order.
    let c = Context::new(Features::TAG | Features::STREAM).unwrap();
    let (mut s, addr, reqs) = server(&c);
    let mut w = Worker::new(&c, ThreadMode::Single).unwrap();
    let ep = w.ep_create_sockaddr(addr, Duration::from_secs(30)).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: `buf` outlives the receive, which is waited for below.
    let r = unsafe {
        w.stream_recv_nb(
            ep,
            ucp::Buf::contig(buf.as_mut_ptr(), buf.len()),
            true,
            None,
        )
    }
    .unwrap();
    let ucp::stream::StreamRecv::Pending(r) = r else {
        panic!("nothing was sent yet")
    };
    // The client progresses until its request is out (the server has not answered yet).
    let deadline = Instant::now() + Duration::from_secs(30);
    let id = loop {
        w.progress();
        s.progress();
        if let Some((id, _)) = reqs.lock().unwrap().pop() {
            break id;
        }
        assert!(Instant::now() < deadline, "no connection request");
        std::thread::sleep(Duration::from_micros(100));
    };
    let sep = s.ep_create_from_request(id).unwrap();
    let data: Vec<u8> = (0..64u8).collect();
    s.stream_send(sep, &data).unwrap();
    s.flush_nb(None)
        .unwrap()
        .map(|f| s.wait_request(f, Duration::from_secs(30)).unwrap());
    assert_eq!(
        w.wait_request(r, Duration::from_secs(30)).unwrap(),
        Status::Ok
    );
    assert_eq!(&buf[..], &data[..]);
    assert_eq!(w.ep_status(ep).unwrap(), EpStatus::Connected);
}
