//! A member killed in the middle of a collective: every survivor's collective completes
//! with an error within a bounded time, over shm and over tcp, and on the team's shared
//! segment (`Alg::Shm`, where survivors wait on the dead member's flag). Members are processes (this
//! test binary run again with `COLL_TEST_ROLE` set) that talk to the test over
//! stdin/stdout lines starting with `@@ `.

use coll::{Args, Buffer, CollType, Context, DataType, Op, Options};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const P: usize = 4;
/// What "bounded" means here: the keepalive of the transports is seconds; this is the
/// test's patience.
const BOUND: Duration = Duration::from_secs(60);

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

struct Member {
    child: Child,
    lines: Receiver<String>,
}

impl Member {
    fn spawn(rank: usize, tls: &str, segment: bool) -> Member {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "peer_main",
                "--nocapture",
                "--test-threads",
                "1",
                "-q",
            ])
            .env("COLL_TEST_ROLE", rank.to_string())
            .env("UCX_TLS", tls)
            .env("COLL_TEST_SEGMENT", if segment { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(m) = l.strip_prefix("@@ ") {
                    let _ = tx.send(m.to_string());
                }
            }
        });
        Member { child, lines }
    }

    fn line(&self) -> String {
        self.lines
            .recv_timeout(BOUND)
            .expect("member did not answer")
    }

    fn send(&mut self, s: &str) {
        let i = self.child.stdin.as_mut().unwrap();
        writeln!(i, "{s}").unwrap();
        i.flush().unwrap();
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn data(rank: usize, n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| ((i * 7 + rank) as i32).to_ne_bytes())
        .collect()
}

/// The member's side.
#[test]
fn peer_main() {
    let Ok(role) = std::env::var("COLL_TEST_ROLE") else {
        return;
    };
    let rank: usize = role.parse().unwrap();
    let ctx = ucp::Context::new(ucp::Features::TAG).unwrap();
    let w = ucp::Worker::new(&ctx, ucp::ThreadMode::Single).unwrap();
    let segment = std::env::var("COLL_TEST_SEGMENT").is_ok_and(|v| v == "1");
    let opts = Options {
        timeout: BOUND,
        shm: segment,
        ..Options::default()
    };
    let mut cx = Context::with_options(w, opts).unwrap();
    println!("@@ addr {}", hex(cx.address()));
    let mut stdin = std::io::stdin().lines();
    let l = stdin.next().unwrap().unwrap();
    let addrs: Vec<Vec<u8>> = l.split(',').map(unhex).collect();
    let team = cx.team_create(addrs, rank).unwrap();
    // A collective that works, checked.
    let n = 1000;
    let src = data(rank, n);
    let mut dst = vec![0u8; 4 * n];
    cx.run(
        team,
        Args::new(CollType::Allreduce)
            .src(Buffer::from_slice(&src))
            .dst(Buffer::from_mut(&mut dst))
            .dtype(DataType::Int32)
            .op(Op::Sum)
            .count(n),
    )
    .unwrap();
    assert_eq!(
        cx.init(
            team,
            Args::new(CollType::Allreduce)
                .src(Buffer::from_vec(vec![0; 4]))
                .dst(Buffer::from_vec(vec![0; 4]))
                .dtype(DataType::Int32)
                .count(1)
        )
        .and_then(|r| cx.algorithm(r))
        .map(|a| a == coll::Alg::Shm),
        Ok(segment)
    );
    let want: Vec<u8> = (0..n)
        .flat_map(|i| ((0..P).map(|r| (i * 7 + r) as i32).sum::<i32>()).to_ne_bytes())
        .collect();
    assert_eq!(dst, want);
    cx.barrier(team).unwrap();
    // The collective in whose middle the last member dies.
    let n = 256 << 10;
    let args = Args::new(CollType::Allreduce)
        .src(Buffer::from_vec(data(rank, n)))
        .dst(Buffer::from_vec(vec![0; 4 * n]))
        .dtype(DataType::Int32)
        .op(Op::Sum)
        .count(n);
    let r = cx.init(team, args).unwrap();
    if segment && rank != P - 1 {
        // On the segment, posting runs rounds as far as the others allow: the survivors
        // post only after the victim, so that it cannot finish the collective in its
        // post (it writes its first round and stops).
        let _ = stdin.next();
    }
    cx.post(r).unwrap();
    println!("@@ ready");
    if rank == P - 1 {
        // Posted, never progressed again: killed here.
        let _ = stdin.next();
        std::thread::sleep(BOUND * 2);
        return;
    }
    let t0 = Instant::now();
    let res = cx.wait(r);
    println!("@@ result {:?} {}", res, t0.elapsed().as_millis());
    // The team is broken from now on: the next collective fails at once.
    let again = cx.barrier(team);
    println!("@@ next {again:?}");
    let _ = cx.finalize(r);
}

fn killed_member(tls: &str, segment: bool) {
    let mut m: Vec<Member> = (0..P).map(|r| Member::spawn(r, tls, segment)).collect();
    let addrs: Vec<String> = m
        .iter()
        .map(|x| x.line().strip_prefix("addr ").unwrap().to_string())
        .collect();
    for x in &mut m {
        x.send(&addrs.join(","));
    }
    if segment {
        assert_eq!(m[P - 1].line(), "ready");
        for x in &mut m[..P - 1] {
            x.send("go");
        }
        for x in &m[..P - 1] {
            assert_eq!(x.line(), "ready");
        }
    } else {
        for x in &m {
            assert_eq!(x.line(), "ready");
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let victim = &mut m[P - 1];
    let _ = victim.child.kill();
    let _ = victim.child.wait();
    for (r, x) in m[..P - 1].iter().enumerate() {
        let l = x.line();
        assert!(
            l.starts_with("result Err("),
            "{tls}: survivor {r} reported {l}"
        );
        let next = x.line();
        assert!(next.starts_with("next Err("), "{tls}: survivor {r}: {next}");
        eprintln!("{tls}: survivor {r}: {l}");
    }
    assert!(t0.elapsed() < BOUND, "{tls}: took {:?}", t0.elapsed());
    for x in &mut m[..P - 1] {
        let st = x.child.wait().unwrap();
        assert!(st.success(), "{tls}: a survivor failed: {st}");
    }
}

#[test]
fn member_killed_mid_collective() {
    if std::env::var("COLL_TEST_ROLE").is_ok() {
        return;
    }
    killed_member("shm", false);
    killed_member("tcp", false);
}

#[test]
fn member_killed_mid_collective_on_the_segment() {
    if std::env::var("COLL_TEST_ROLE").is_ok() {
        return;
    }
    killed_member("shm", true);
    killed_member("tcp", true);
}
