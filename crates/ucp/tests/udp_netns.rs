//! Real traffic over udp (UCX_TLS=udp) between two hosts made of network namespaces, on a
//! path that loses 1%, 5% or 20% of the packets each way, duplicates 1% and reorders 10%
//! (`tc netem`, or where the kernel lacks netem the same impairments from htb, a
//! classic-BPF random classifier and mirred: see `Hosts::impair`). Tag messages (echoed),
//! active messages (echoed, eager and rendezvous) and RMA (put then get, emulated by the
//! target over active messages) from 1 B to 16 MiB, every byte checked. Skipped with a
//! message when not root.
//!
//! Sizes shrink as loss grows to keep the run short (16 MiB in every class at 1%, and a
//! 16 MiB tag message at 5%); everything is byte-checked either way. The phases' times and
//! the impairment counters are printed (run with --nocapture to see them).

mod common;

use common::*;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use ucp::am::AmSendFlags;
use ucp::{AmAction, AmData, AmDesc, Buf, Ep, RmaPath};
use ucs::Status;

const REGION: usize = 16 << 20;
const AM_TO_SERVER: u16 = 7;
const AM_TO_CLIENT: u16 = 8;
/// The largest active message (with an 8-byte header) that goes eagerly in one udp
/// datagram of the default size. Larger ones take ucp's AM rendezvous, which registers
/// the sender's buffer with the lane's memory domain, and udp's (like tcp's) registers
/// nothing: `UCS_ERR_UNSUPPORTED` until ucp falls back to a domain that can.
const AM_EAGER_MAX: usize = 1430;

/// What an AM handler saw: descriptor, header, reply endpoint, rendezvous length (None:
/// eager data kept under the descriptor).
type Kept = Arc<Mutex<Vec<(AmDesc, Vec<u8>, Option<Ep>, Option<usize>)>>>;

fn keep_handler(w: &mut ucp::Worker, id: u16) -> Kept {
    let kept: Kept = Arc::default();
    let k2 = kept.clone();
    w.am_set_handler(
        id,
        Some(Box::new(move |m| {
            let rndv = match m.data {
                AmData::Eager(_) => None,
                AmData::Rndv { length } => Some(length),
            };
            k2.lock()
                .unwrap()
                .push((m.desc, m.header.to_vec(), m.reply_ep, rndv));
            AmAction::Keep
        })),
    );
    kept
}

/// The data of a kept message (eager or pulled by rendezvous).
fn take_data(w: &mut ucp::Worker, desc: AmDesc, rndv: Option<usize>) -> Vec<u8> {
    match rndv {
        None => {
            let d = w.am_data(desc).unwrap().to_vec();
            w.am_data_release(desc).unwrap();
            d
        }
        Some(len) => {
            let mut b = vec![0u8; len];
            assert_eq!(w.am_recv_data(desc, &mut b).unwrap(), len);
            b
        }
    }
}

/// Echoes tag messages and active messages, owns a region for RMA; stops on STOP_TAG.
fn role_server() {
    let mut w = worker();
    println!("@@ {}", hex(&w.address()));
    let ep = w.ep_create(&unhex(&stdin_line())).unwrap();
    let ctx = w.context().clone();
    let mem = ctx.mem_alloc(REGION).unwrap();
    println!("@@ {} {}", mem.address() as u64, hex(&mem.rkey_pack()));
    let ams = keep_handler(&mut w, AM_TO_SERVER);
    let mut buf = vec![0u8; 16 << 20];
    // SAFETY: `buf` outlives every receive posted into it (each completes before the next).
    let mut rr = unsafe {
        w.tag_recv_nb(Buf::contig(buf.as_mut_ptr(), buf.len()), 0, 0, None)
            .unwrap()
    };
    loop {
        let mut idle = w.progress() == 0;
        if let Some(st) = w.request_test(rr).unwrap() {
            assert_eq!(st, Status::Ok);
            let info = w.request_info(rr).unwrap();
            w.request_free(rr).unwrap();
            if info.sender_tag == STOP_TAG {
                break;
            }
            w.tag_send(ep, &buf[..info.length], info.sender_tag)
                .unwrap();
            // SAFETY: as above.
            rr = unsafe {
                w.tag_recv_nb(Buf::contig(buf.as_mut_ptr(), buf.len()), 0, 0, None)
                    .unwrap()
            };
            idle = false;
        }
        let kept: Vec<_> = ams.lock().unwrap().drain(..).collect();
        for (desc, header, reply, rndv) in kept {
            let data = take_data(&mut w, desc, rndv);
            w.am_send(
                reply.unwrap(),
                AM_TO_CLIENT,
                &header,
                &data,
                AmSendFlags::default(),
            )
            .unwrap();
            idle = false;
        }
        if idle {
            w.wait(1).unwrap();
        }
    }
    w.flush_nb(None)
        .unwrap()
        .map(|r| w.wait_request(r, TIMEOUT).unwrap());
    println!("@@ done");
    progress_until_bye(&mut w);
}

/// Keeps progressing until the test says "bye": over udp a process answers its peers'
/// retransmissions only while it progresses, so one that stopped right after its last
/// receive (an acknowledgement lost on the way) would leave the other's flush waiting
/// for the peer timeout.
fn progress_until_bye(w: &mut ucp::Worker) {
    let lines = stdin_lines();
    loop {
        match lines.try_recv() {
            Ok(l) => {
                assert_eq!(l, "bye");
                return;
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => {}
            Err(e) => panic!("stdin: {e}"),
        }
        if w.progress() == 0 {
            w.wait(1).unwrap();
        }
    }
}

fn sizes(s: &str) -> Vec<usize> {
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().unwrap())
        .collect()
}

/// Runs the plan `tag sizes;am sizes;rma sizes` against the server, checking every byte.
fn role_client(args: &str) {
    let mut parts = args.split(';');
    let (tag_sizes, am_sizes, rma_sizes) = (
        sizes(parts.next().unwrap()),
        sizes(parts.next().unwrap()),
        sizes(parts.next().unwrap()),
    );
    let mut w = worker();
    println!("@@ {}", hex(&w.address()));
    let ep = w.ep_create(&unhex(&stdin_line())).unwrap();
    let key_line = stdin_line();
    let (base, key) = key_line.split_once(' ').unwrap();
    let base: u64 = base.parse().unwrap();

    let t = Instant::now();
    let mut back = vec![0u8; 16 << 20];
    for (i, &len) in tag_sizes.iter().enumerate() {
        let tag = 1000 + i as u64;
        let data = pattern(len, tag);
        w.tag_send(ep, &data, tag).unwrap();
        let info = w.tag_recv(&mut back, tag, u64::MAX).unwrap();
        assert!(
            info.length == len && back[..len] == data[..],
            "tag echo of {len} bytes"
        );
    }
    println!("@@ transport {:?}", w.ep_transport(ep).unwrap().unwrap());
    println!("@@ tag {:.0} ms", t.elapsed().as_secs_f64() * 1e3);

    let t = Instant::now();
    let got = keep_handler(&mut w, AM_TO_CLIENT);
    for (i, &len) in am_sizes.iter().enumerate() {
        let data = pattern(len, 5000 + i as u64);
        let header = (i as u64).to_le_bytes();
        let flags = AmSendFlags {
            reply: true,
            ..Default::default()
        };
        w.am_send(ep, AM_TO_SERVER, &header, &data, flags).unwrap();
        let deadline = Instant::now() + TIMEOUT;
        let (desc, h, _, rndv) = loop {
            if let Some(m) = got.lock().unwrap().pop() {
                break m;
            }
            if w.progress() == 0 {
                w.wait(1).unwrap();
            }
            assert!(Instant::now() < deadline, "no AM echo of {len} bytes");
        };
        assert_eq!(h, header, "AM header");
        let echoed = take_data(&mut w, desc, rndv);
        assert!(echoed == data, "AM echo of {len} bytes");
    }
    println!("@@ am {:.0} ms", t.elapsed().as_secs_f64() * 1e3);

    let t = Instant::now();
    let rk = w.rkey_unpack(ep, &unhex(key)).unwrap();
    assert_eq!(rk.rma_path(), RmaPath::Emulated);
    for (i, &len) in rma_sizes.iter().enumerate() {
        let data = pattern(len, 9000 + i as u64);
        let at = base + (i as u64 * 4099) % (REGION - len).max(1) as u64;
        w.put(ep, &data, at, &rk).unwrap();
        let mut b = vec![0u8; len];
        w.get(ep, &mut b, at, &rk).unwrap();
        assert!(b == data, "RMA put/get of {len} bytes");
    }
    w.flush_ep_blocking(ep).unwrap();
    println!("@@ rma {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    println!("@@ ok");
    w.tag_send(ep, &[], STOP_TAG).unwrap();
    w.flush_nb(None)
        .unwrap()
        .map(|r| w.wait_request(r, TIMEOUT).unwrap());
    progress_until_bye(&mut w);
}

#[test]
fn peer_main() {
    let Ok(role) = std::env::var("RUCX_TEST_ROLE") else {
        return;
    };
    let args = std::env::var("RUCX_TEST_ARGS").unwrap_or_default();
    match role.as_str() {
        "server" => role_server(),
        "client" => role_client(&args),
        r => panic!("unknown role {r}"),
    }
}

fn list(v: &[usize]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The sizes every class covers: 1 B, around the datagram and fragment sizes, larger.
const BASE: [usize; 9] = [1, 100, 1400, 1454, 1455, 4096, 65_536, 300_000, 1 << 20];

fn lossy_case(loss: f64, tag_big: &[usize], am_big: &[usize], rma_big: &[usize]) {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(h) = Hosts::new(2) else { return };
    let how = h.impair(0, loss, 1.0, 10.0);
    assert_eq!(h.impair(1, loss, 1.0, 10.0), how);
    // The path has no base delay worth mentioning (or 1 ms each way with netem): a 10 ms
    // first retransmission timeout and NAK repeats every 2 ms avoid resending what is
    // still in flight; backing off to at most 100 ms keeps a run of losses of the same
    // packet (at 20%, a retransmission and its answer are both lost a third of the time)
    // from stalling for seconds; the peer timeout is long so that 20% loss never fails a
    // peer.
    let env = [
        ("UCX_TLS", "udp"),
        ("UCX_UDP_RTO", "10ms"),
        ("UCX_UDP_RTO_MAX", "100ms"),
        ("UCX_UDP_NAK_INTERVAL", "2ms"),
        ("UCX_UDP_TIMEOUT", "60s"),
    ];
    let with = |big: &[usize]| {
        let mut v = BASE.to_vec();
        v.extend_from_slice(big);
        list(&v)
    };
    let am: Vec<usize> = [1, 100, 1000, AM_EAGER_MAX]
        .into_iter()
        .chain(am_big.iter().copied())
        .collect();
    let plan = format!("{};{};{}", with(tag_big), list(&am), with(rma_big));
    let start = Instant::now();
    let mut server = Peer::spawn_in(Some(&h.names[0]), "server", "", &env);
    let saddr = server.line();
    let mut client = Peer::spawn_in(Some(&h.names[1]), "client", &plan, &env);
    let caddr = client.line();
    server.send(&caddr);
    let key = server.line();
    client.send(&saddr);
    client.send(&key);
    assert_eq!(client.line(), "transport Udp");
    let tag = client.line();
    let am = client.line();
    let rma = client.line();
    assert_eq!(client.line(), "ok");
    assert_eq!(server.line(), "done");
    client.send("bye");
    client.finish();
    server.send("bye");
    server.finish();
    let (d0, s0, u0) = h.impair_stats(0);
    let (d1, s1, u1) = h.impair_stats(1);
    eprintln!(
        "udp over {loss}% loss, 1% dup, 10% reorder ({how}): {tag}, {am}, {rma}; total {:?}; \
         packets dropped {}, reordered {}, duplicated {}",
        start.elapsed(),
        d0 + d1,
        s0 + s1,
        u0 + u1
    );
    if how != "netem" {
        assert!(
            d0 + d1 > 0 && s0 + s1 > 0 && u0 + u1 > 0,
            "the path was impaired"
        );
    }
    drop(h);
}

#[test]
fn loss_1_percent() {
    lossy_case(1.0, &[4 << 20, 16 << 20], &[], &[4 << 20, 16 << 20]);
}

#[test]
fn loss_5_percent() {
    lossy_case(5.0, &[4 << 20, 16 << 20], &[], &[4 << 20, 16 << 20]);
}

#[test]
fn loss_20_percent() {
    lossy_case(20.0, &[4 << 20, 16 << 20], &[], &[4 << 20, 16 << 20]);
}

/// Without impairment, the same plan over udp and a duration to compare with.
#[test]
fn no_loss_reference() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some(h) = Hosts::new(2) else { return };
    let env = [("UCX_TLS", "udp")];
    let plan = format!(
        "{};{};{}",
        list(&[1, 1455, 1 << 20, 16 << 20]),
        list(&[1, 1000, AM_EAGER_MAX]),
        list(&[1, 1455, 16 << 20])
    );
    let start = Instant::now();
    let mut server = Peer::spawn_in(Some(&h.names[0]), "server", "", &env);
    let saddr = server.line();
    let mut client = Peer::spawn_in(Some(&h.names[1]), "client", &plan, &env);
    let caddr = client.line();
    server.send(&caddr);
    let key = server.line();
    client.send(&saddr);
    client.send(&key);
    assert_eq!(client.line(), "transport Udp");
    let (tag, am, rma) = (client.line(), client.line(), client.line());
    assert_eq!(client.line(), "ok");
    assert_eq!(server.line(), "done");
    client.send("bye");
    client.finish();
    server.send("bye");
    server.finish();
    eprintln!(
        "udp without loss: {tag}, {am}, {rma}; total {:?}",
        start.elapsed()
    );
}

/// Two workers of this process over udp on loopback (no root needed): tag, AM (eager and
/// rendezvous) and emulated RMA, every byte checked.
#[test]
fn local_two_workers() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let cfg = ucp::Config {
        transports: vec![uct::Transport::Udp],
        ..ucp::Config::from_env().unwrap()
    };
    let ctx = ucp::Context::with_config(
        ucp::Features::TAG | ucp::Features::RMA | ucp::Features::AM,
        cfg,
        uct::IfaceConfig::default(),
    )
    .unwrap();
    let mut a = ucp::Worker::new(&ctx, ucp::ThreadMode::Single).unwrap();
    let mut b = ucp::Worker::new(&ctx, ucp::ThreadMode::Single).unwrap();
    let ab = a.ep_create(&b.address()).unwrap();
    let _ = a.address();
    let got = keep_handler(&mut b, AM_TO_SERVER);
    for len in [0usize, 1, 1454, 1455, 100_000, 3 << 20] {
        let data = pattern(len, len as u64);
        let mut out = vec![0u8; len];
        // SAFETY: buffers outlive the requests (pumped to completion below).
        let rr = unsafe {
            b.tag_recv_nb(Buf::contig(out.as_mut_ptr(), len), 5, u64::MAX, None)
                .unwrap()
        };
        // SAFETY: as above.
        let sr = unsafe {
            a.tag_send_nb(
                ab,
                Buf::contig(data.as_ptr().cast_mut(), len),
                5,
                false,
                None,
            )
            .unwrap()
        };
        let deadline = Instant::now() + TIMEOUT;
        while b.request_test(rr).unwrap().is_none()
            || sr.is_some_and(|r| a.request_test(r).unwrap().is_none())
        {
            a.progress();
            b.progress();
            assert!(Instant::now() < deadline, "tag of {len} bytes stuck");
        }
        assert!(out == data, "tag of {len} bytes");
        if len > AM_EAGER_MAX {
            continue;
        }
        // AM.
        // SAFETY: `data` outlives the request.
        let sr = unsafe {
            a.am_send_nb(
                ab,
                AM_TO_SERVER,
                b"hdr",
                Buf::contig(data.as_ptr().cast_mut(), len),
                AmSendFlags::default(),
                None,
            )
            .unwrap()
        };
        let (desc, h, _, rndv) = loop {
            if let Some(m) = got.lock().unwrap().pop() {
                break m;
            }
            if let Some(r) = sr {
                assert_ne!(a.request_test(r).unwrap(), Some(Status::Unsupported));
            }
            a.progress();
            b.progress();
            assert!(Instant::now() < deadline, "AM of {len} bytes stuck");
        };
        assert_eq!(h, b"hdr");
        let echoed = if let Some(n) = rndv {
            let mut buf = vec![0u8; n];
            // SAFETY: `buf` outlives the request (pumped to completion below).
            let r = unsafe {
                b.am_recv_data_nb(desc, Buf::contig(buf.as_mut_ptr(), n), None)
                    .unwrap()
            };
            while b.request_test(r).unwrap().is_none()
                || sr.is_some_and(|r| a.request_test(r).unwrap().is_none())
            {
                a.progress();
                b.progress();
                assert!(
                    Instant::now() < deadline,
                    "AM rendezvous of {len} bytes stuck"
                );
            }
            buf
        } else {
            take_data(&mut b, desc, None)
        };
        assert!(echoed == data, "AM of {len} bytes");
    }
    assert_eq!(a.ep_transport(ab).unwrap(), Some(uct::Transport::Udp));
}
