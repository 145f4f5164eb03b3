//! Shared helpers of the multi-process tests: peers are this test binary run again with
//! `RUCX_TEST_ROLE` set; they talk to the test over stdin/stdout lines starting `@@ `.
#![allow(dead_code)]

pub mod require;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use ucp::{Context, Features, ThreadMode, Worker};

pub const TIMEOUT: Duration = Duration::from_secs(120);
pub const STOP_TAG: u64 = u64::MAX;
/// Largest message of these tests.
pub const MAX: usize = 64 << 20;

/// Multi-process tests spin on two cores; run them one at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub struct Peer {
    child: Child,
    stdin: ChildStdin,
    pub lines: Receiver<String>,
}

impl Peer {
    pub fn spawn(role: &str, args: &str) -> Peer {
        Self::spawn_env(role, args, &[])
    }

    /// Like `spawn`, with extra environment variables for the peer.
    pub fn spawn_env(role: &str, args: &str, env: &[(&str, &str)]) -> Peer {
        Self::spawn_in(None, role, args, env)
    }

    /// Like `spawn_env`, inside network namespace `ns` when given (`ip netns exec`).
    pub fn spawn_in(ns: Option<&str>, role: &str, args: &str, env: &[(&str, &str)]) -> Peer {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let mut child = cmd
            .envs(env.iter().copied())
            .args([
                "--exact",
                "peer_main",
                "--nocapture",
                "--test-threads",
                "1",
                "-q",
            ])
            .env("RUCX_TEST_ROLE", role)
            .env("RUCX_TEST_ARGS", args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn peer");
        let stdin = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(m) = l.strip_prefix("@@ ") {
                    if tx.send(m.to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        Peer {
            child,
            stdin,
            lines,
        }
    }

    pub fn line(&self) -> String {
        self.lines
            .recv_timeout(TIMEOUT)
            .expect("peer did not answer in time")
    }

    pub fn send(&mut self, s: &str) {
        writeln!(self.stdin, "{s}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The peer's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the peer now (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn finish(mut self) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "peer failed: {st}");
                return;
            }
            assert!(Instant::now() < deadline, "peer did not exit");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn worker() -> Worker {
    let ctx =
        Context::new(Features::TAG | Features::RMA | Features::AMO64 | Features::AMO32).unwrap();
    Worker::new(&ctx, ThreadMode::Single).unwrap()
}

/// Connects this process's worker with a peer: exchanges addresses.
pub fn connect(w: &mut Worker, p: &mut Peer) -> ucp::Ep {
    let theirs = unhex(&p.line());
    let addr = w.address();
    p.send(&hex(&addr));
    w.ep_create(&theirs).unwrap()
}

pub fn stdin_line() -> String {
    let mut s = String::new();
    std::io::stdin().read_line(&mut s).unwrap();
    s.trim().to_string()
}

pub fn peer_connect(w: &mut Worker) -> ucp::Ep {
    println!("@@ {}", hex(&w.address()));
    let theirs = unhex(&stdin_line());
    w.ep_create(&theirs).unwrap()
}

/// Lines from stdin, read by a thread, so a peer can progress while it waits for orders.
pub fn stdin_lines() -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in std::io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(l.trim().to_string()).is_err() {
                break;
            }
        }
    });
    rx
}

/// Network namespaces joined by a bridge: test "hosts" with their own network stacks
/// (and so their own host identity: shared memory is never chosen between them). Removed
/// when dropped.
pub struct Hosts {
    pub names: Vec<String>,
    switch: String,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Waits (at most `TIMEOUT`) until `dev` of namespace `ns` is running (operational
/// state up).
fn wait_running(ns: &str, dev: &str) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let out = Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", "dev", dev])
            .output()
            .expect("ip link show");
        if String::from_utf8_lossy(&out.stdout).contains("state UP") {
            return;
        }
        assert!(Instant::now() < deadline, "{dev} in {ns} is not running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Hosts {
    /// `None` (with the reason printed) when this process may not make namespaces; a
    /// failure instead when `RUCX_REQUIRE` names netns.
    pub fn new(n: usize) -> Option<Hosts> {
        if !rustix::process::geteuid().is_root() {
            require::skip("netns", "network-namespace tests need root");
            return None;
        }
        if !ip(&["netns", "list"]) {
            require::skip("netns", "the ip command (iproute2) is not available");
            return None;
        }
        let tag = std::process::id();
        let switch = format!("rucx-sw-{tag}");
        let mut h = Hosts {
            names: Vec::new(),
            switch: switch.clone(),
        };
        assert!(ip(&["netns", "add", &switch]), "ip netns add");
        assert!(ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]));
        assert!(ip(&["-n", &switch, "link", "set", "br0", "up"]));
        for i in 0..n {
            let ns = format!("rucx-h{i}-{tag}");
            assert!(ip(&["netns", "add", &ns]));
            h.names.push(ns.clone());
            let (dev, peer) = (format!("rh{i}"), format!("rs{i}"));
            assert!(ip(&[
                "link", "add", &dev, "netns", &ns, "type", "veth", "peer", "name", &peer, "netns",
                &switch
            ]));
            assert!(ip(&[
                "-n", &switch, "link", "set", &peer, "master", "br0", "up"
            ]));
            // Addresses from TEST-NET-2 (RFC 5737): they exist only inside these namespaces.
            assert!(ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("198.51.100.{}/24", i + 1),
                "dev",
                &dev
            ]));
            assert!(ip(&["-n", &ns, "link", "set", &dev, "up"]));
            assert!(ip(&["-n", &ns, "link", "set", "lo", "up"]));
        }
        // A worker uses only running devices, and the kernel reports a veth running some
        // time after both ends are up (up to a second, longer on a loaded machine): a
        // worker started before then has no interface on it, and its peers find it
        // unreachable.
        for i in 0..n {
            wait_running(&h.names[i], &format!("rh{i}"));
        }
        Some(h)
    }

    /// The address of host `i`.
    pub fn addr(&self, i: usize) -> String {
        format!("198.51.100.{}", i + 1)
    }

    /// Makes host `i`'s network device lose `loss` percent of the packets it sends,
    /// reorder about `reorder` percent, and duplicate `duplicate` percent of those it
    /// receives, with `tc netem` (`loss L% duplicate D% reorder R% delay 1ms`) when the
    /// kernel has it. Without netem (a kernel built without `CONFIG_NET_SCH_NETEM`), the
    /// same from qdiscs and classifiers most kernels have: an htb root whose classic-BPF
    /// filter draws a random number per packet and sends `loss`% to a class whose pfifo
    /// holds nothing (dropped) and `reorder`% to a slow class (50 Mbit/s; they fall behind
    /// the others), and an ingress filter that mirrors `duplicate`% back into the
    /// device's receive path. No base delay then. Returns which of the two was set up.
    pub fn impair(&self, i: usize, loss: f64, duplicate: f64, reorder: f64) -> &'static str {
        let ns = &self.names[i];
        let dev = format!("rh{i}");
        let tc = |args: &[&str]| -> bool {
            let mut a = vec!["netns", "exec", ns.as_str(), "tc"];
            a.extend_from_slice(args);
            ip(&a)
        };
        let (l, d, r) = (
            format!("{loss}%"),
            format!("{duplicate}%"),
            format!("{reorder}%"),
        );
        if tc(&[
            "qdisc",
            "add",
            "dev",
            &dev,
            "root",
            "netem",
            "loss",
            &l,
            "duplicate",
            &d,
            "reorder",
            &r,
            "delay",
            "1ms",
        ]) {
            return "netem";
        }
        // Thresholds on a uniform u32: below t_loss drop, below t_reo reorder.
        let frac = |p: f64| ((p / 100.0) * 4_294_967_296.0).min(4_294_967_295.0) as u64;
        let t_loss = frac(loss);
        let t_reo = frac(loss + reorder);
        let t_dup = frac(duplicate);
        // Classic BPF: A = random u32 (ancillary load SKF_AD_RANDOM); jge to skip; ret
        // returns the class id (0x10001 = 1:1 normal, 1:2 slow, 1:3 drop).
        let rand = "32 0 0 4294963256";
        let classify =
            format!("6,{rand},53 1 0 {t_loss},6 0 0 65539,53 1 0 {t_reo},6 0 0 65538,6 0 0 65537");
        let dup = format!("4,{rand},53 1 0 {t_dup},6 0 0 65537,6 0 0 0");
        let ok = tc(&[
            "qdisc", "add", "dev", &dev, "root", "handle", "1:", "htb", "default", "1",
        ]) && tc(&[
            "class", "add", "dev", &dev, "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit",
        ]) && tc(&[
            "class", "add", "dev", &dev, "parent", "1:", "classid", "1:2", "htb", "rate", "50mbit",
            "ceil", "50mbit", "burst", "1600", "cburst", "1600",
        ]) && tc(&[
            "class", "add", "dev", &dev, "parent", "1:", "classid", "1:3", "htb", "rate", "1mbit",
        ]) && tc(&[
            "qdisc", "add", "dev", &dev, "parent", "1:2", "handle", "20:", "pfifo", "limit", "1000",
        ]) && tc(&[
            "qdisc", "add", "dev", &dev, "parent", "1:3", "handle", "30:", "pfifo", "limit", "0",
        ]) && tc(&[
            "filter", "add", "dev", &dev, "parent", "1:", "prio", "1", "bpf", "bytecode", &classify,
        ]) && tc(&["qdisc", "add", "dev", &dev, "ingress"])
            && tc(&[
                "filter", "add", "dev", &dev, "parent", "ffff:", "prio", "1", "bpf", "bytecode",
                &dup, "action", "mirred", "ingress", "mirror", "dev", &dev,
            ]);
        assert!(
            ok,
            "neither netem nor htb/bpf/mirred could impair {dev} in {ns}"
        );
        "htb+bpf"
    }

    /// Packets host `i`'s impairment dropped, reordered (sent through the slow class) and
    /// duplicated, from `tc -s` (the htb+bpf variant; zeros for netem).
    pub fn impair_stats(&self, i: usize) -> (u64, u64, u64) {
        let dev = format!("rh{i}");
        let out = |args: &[&str]| -> String {
            let o = Command::new("ip")
                .args(["netns", "exec", &self.names[i], "tc", "-s"])
                .args(args)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            o
        };
        // "Sent N bytes P pkt (dropped D, ..." after each class / action line.
        let field = |text: &str, after: &str, key: &str| -> u64 {
            text.split(after)
                .nth(1)
                .and_then(|t| t.split(key).nth(1))
                .and_then(|t| t.split([' ', ',', ')']).find(|w| !w.is_empty()))
                .and_then(|w| w.parse().ok())
                .unwrap_or(0)
        };
        let classes = out(&["class", "show", "dev", &dev]);
        let dropped = field(&classes, "class htb 1:3", "dropped ");
        let slow = field(&classes, "class htb 1:2", "bytes ");
        let filters = out(&["filter", "show", "dev", &dev, "ingress"]);
        let dups = field(&filters, "mirred", "bytes ");
        (dropped, slow, dups)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = ip(&["netns", "del", n]);
        }
        let _ = ip(&["netns", "del", &self.switch]);
    }
}
