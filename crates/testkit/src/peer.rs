//! Child processes for multi-process tests: [`Peer`] spawns a binary (normally
//! `rucx-testpeer`) with piped stdin, stdout and stderr and talks to it in lines.
//!
//! Every wait is bounded. Reading a line goes through a reader thread and a channel so that
//! [`Peer::read_line_timeout`] can give up; waiting for the exit uses a pidfd so that
//! [`Peer::expect_exit`] sleeps in `poll` instead of spinning. A peer that is dropped
//! without having been reaped is killed with SIGKILL and reaped, so a failing test (a
//! panic unwinding through the test function) leaves no process behind.
//!
//! Protocol convention (what `rucx-testpeer` does): one message per line, the first word
//! is a keyword, binary values are hex. A peer that detects a failure prints
//! `fail <reason>` and exits with status 1; [`Peer::expect`] turns such a line into
//! [`PeerError::Failed`].

use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes of a peer's stderr kept for error messages (the tail).
const STDERR_KEEP: usize = 16 * 1024;

/// What went wrong talking to a peer. The `Display` form names the peer and ends with the
/// tail of its stderr, which is where a panicking peer explains itself.
pub enum PeerError {
    /// Spawning or writing failed.
    Io {
        peer: String,
        what: String,
        err: std::io::Error,
        stderr: String,
    },
    /// Nothing arrived within the timeout.
    Timeout {
        peer: String,
        what: String,
        stderr: String,
    },
    /// The peer closed its stdout (normally: it exited) while a line was expected.
    Closed {
        peer: String,
        what: String,
        status: Option<ExitStatus>,
        stderr: String,
    },
    /// The peer reported `fail <reason>`, or said something the protocol does not allow.
    Failed {
        peer: String,
        line: String,
        stderr: String,
    },
}

impl PeerError {
    /// True for [`PeerError::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, PeerError::Timeout { .. })
    }
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stderr = match self {
            PeerError::Io {
                peer, what, err, ..
            } => {
                write!(f, "{peer}: {what}: {err}")?;
                self.stderr()
            }
            PeerError::Timeout { peer, what, .. } => {
                write!(f, "{peer}: timed out waiting for {what}")?;
                self.stderr()
            }
            PeerError::Closed {
                peer, what, status, ..
            } => {
                write!(f, "{peer}: closed its output while waiting for {what}")?;
                if let Some(s) = status {
                    write!(f, " ({s})")?;
                }
                self.stderr()
            }
            PeerError::Failed { peer, line, .. } => {
                write!(f, "{peer}: reported `{line}`")?;
                self.stderr()
            }
        };
        if !stderr.is_empty() {
            write!(f, "\n--- stderr of the peer (tail) ---\n{stderr}")?;
        }
        Ok(())
    }
}

impl PeerError {
    fn stderr(&self) -> &str {
        match self {
            PeerError::Io { stderr, .. }
            | PeerError::Timeout { stderr, .. }
            | PeerError::Closed { stderr, .. }
            | PeerError::Failed { stderr, .. } => stderr,
        }
    }
}

// `unwrap()` and `expect()` print Debug: make it as readable as Display.
impl fmt::Debug for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for PeerError {}

/// A spawned child process speaking the line protocol.
pub struct Peer {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    threads: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

/// Options for [`Peer::spawn_with`].
#[derive(Clone, Debug, Default)]
pub struct PeerOptions {
    /// A label for error messages; defaults to the arguments.
    pub name: Option<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

impl Peer {
    /// Spawns `exe` with `args`.
    pub fn spawn(exe: impl AsRef<Path>, args: &[&str]) -> Result<Peer, PeerError> {
        Peer::spawn_with(exe, args, &PeerOptions::default())
    }

    /// Spawns `exe` with `args` and `opts`.
    pub fn spawn_with(
        exe: impl AsRef<Path>,
        args: &[&str],
        opts: &PeerOptions,
    ) -> Result<Peer, PeerError> {
        let exe: PathBuf = exe.as_ref().to_owned();
        let label = opts.name.clone().unwrap_or_else(|| args.join(" "));
        let mut cmd = Command::new(&exe);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|err| PeerError::Io {
            peer: label.clone(),
            what: format!("spawning {}", exe.display()),
            err,
            stderr: String::new(),
        })?;
        let name = format!("peer `{label}` (pid {})", child.id());
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr_pipe = child.stderr.take().expect("stderr is piped");

        // Lines go through a channel so that reading can time out; the thread ends at EOF,
        // which happens at the latest when the child is killed.
        let (tx, lines) = mpsc::channel();
        let out_thread = std::thread::Builder::new()
            .name("peer-stdout".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
            .expect("spawning a reader thread");
        let stderr = Arc::new(Mutex::new(String::new()));
        let keep = stderr.clone();
        let err_thread = std::thread::Builder::new()
            .name("peer-stderr".into())
            .spawn(move || {
                let mut r = BufReader::new(stderr_pipe);
                let mut buf = [0u8; 4096];
                while let Ok(n) = r.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut s = keep.lock().unwrap_or_else(|p| p.into_inner());
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if s.len() > 2 * STDERR_KEEP {
                        let mut cut = s.len() - STDERR_KEEP;
                        while !s.is_char_boundary(cut) {
                            cut += 1;
                        }
                        s.drain(..cut);
                    }
                }
            })
            .expect("spawning a reader thread");
        Ok(Peer {
            name,
            child,
            stdin,
            lines,
            stderr,
            threads: vec![out_thread, err_thread],
            status: None,
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The label used in error messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the peer wrote to stderr so far (the tail).
    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Writes `line` and a newline to the peer's stdin.
    pub fn send(&mut self, line: impl AsRef<str>) -> Result<(), PeerError> {
        let line = line.as_ref();
        let res = match self.stdin.as_mut() {
            Some(w) => w
                .write_all(line.as_bytes())
                .and_then(|()| w.write_all(b"\n"))
                .and_then(|()| w.flush()),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "stdin already closed",
            )),
        };
        res.map_err(|err| PeerError::Io {
            peer: self.name.clone(),
            what: format!("sending `{line}`"),
            err,
            stderr: self.stderr(),
        })
    }

    /// Closes the peer's stdin (peers exit at end of input).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next line the peer printed, waiting at most `timeout`.
    pub fn read_line_timeout(&mut self, timeout: Duration) -> Result<String, PeerError> {
        match self.lines.recv_timeout(timeout) {
            Ok(l) => Ok(l),
            Err(RecvTimeoutError::Timeout) => Err(PeerError::Timeout {
                peer: self.name.clone(),
                what: format!("a line ({timeout:?})"),
                stderr: self.stderr(),
            }),
            Err(RecvTimeoutError::Disconnected) => {
                // The output is closed: the child has exited or is about to; a short
                // bounded wait picks up its status for the message.
                let status = self.wait_exit(Duration::from_secs(2)).ok().flatten();
                Err(PeerError::Closed {
                    peer: self.name.clone(),
                    what: "a line".into(),
                    status,
                    stderr: self.stderr(),
                })
            }
        }
    }

    /// Reads the next line, which must start with the word `keyword`; returns the other
    /// words. A `fail ...` line or another keyword is [`PeerError::Failed`].
    pub fn expect(&mut self, keyword: &str, timeout: Duration) -> Result<Vec<String>, PeerError> {
        let line = self.read_line_timeout(timeout).map_err(|e| match e {
            PeerError::Timeout { peer, stderr, .. } => PeerError::Timeout {
                peer,
                what: format!("`{keyword} ...` ({timeout:?})"),
                stderr,
            },
            PeerError::Closed {
                peer,
                status,
                stderr,
                ..
            } => PeerError::Closed {
                peer,
                what: format!("`{keyword} ...`"),
                status,
                stderr,
            },
            e => e,
        })?;
        let mut words = line.split_whitespace().map(str::to_owned);
        if words.next().as_deref() == Some(keyword) {
            Ok(words.collect())
        } else {
            Err(PeerError::Failed {
                peer: self.name.clone(),
                line: if line.starts_with("fail") {
                    line
                } else {
                    format!("{line}` but `{keyword} ...` was expected")
                },
                stderr: self.stderr(),
            })
        }
    }

    /// Waits at most `timeout` for the peer to exit and returns its status. The peer is not
    /// killed on timeout (`Drop` does that).
    pub fn expect_exit(&mut self, timeout: Duration) -> Result<ExitStatus, PeerError> {
        match self.wait_exit(timeout) {
            Ok(Some(s)) => Ok(s),
            Ok(None) => Err(PeerError::Timeout {
                peer: self.name.clone(),
                what: format!("the process to exit ({timeout:?})"),
                stderr: self.stderr(),
            }),
            Err(err) => Err(PeerError::Io {
                peer: self.name.clone(),
                what: "waiting for exit".into(),
                err,
                stderr: self.stderr(),
            }),
        }
    }

    /// Kills the peer with SIGKILL and reaps it; returns its status.
    pub fn kill(&mut self) -> Result<ExitStatus, PeerError> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        // Child::kill sends SIGKILL; an error means it is already gone, which wait reports.
        let _ = self.child.kill();
        let s = self.child.wait().map_err(|err| PeerError::Io {
            peer: self.name.clone(),
            what: "reaping after SIGKILL".into(),
            err,
            stderr: self.stderr(),
        })?;
        self.status = Some(s);
        Ok(s)
    }

    /// Ok(None) on timeout. Sleeps in poll on a pidfd (readable once the child exits).
    fn wait_exit(&mut self, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        if let Some(s) = self.child.try_wait()? {
            self.status = Some(s);
            return Ok(Some(s));
        }
        let pidfd = pidfd_of(self.child.id())?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
            let mut fds = [rustix::event::PollFd::new(
                &pidfd,
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut fds, ms) {
                Ok(0) => return Ok(None),
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let s = self.child.wait()?;
        self.status = Some(s);
        Ok(Some(s))
    }
}

/// A pidfd of `pid`: readable once the process has exited.
pub fn pidfd_of(pid: u32) -> std::io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Closing stdin first lets a well-behaved peer see EOF; SIGKILL makes sure it goes.
        self.stdin = None;
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // The reader threads end at EOF of the pipes, which the child's death brings; they
        // are detached rather than joined so that a stray holder of a pipe end cannot make
        // a drop hang.
        self.threads.clear();
    }
}
