//! [`Params`]: what one test run does. The initiator sends them to the responder at the
//! start of every test, so both sides always agree on the test, size and counts.

use crate::registry::{Api, Layout, TestId};
use serde::{Deserialize, Serialize};
use ucs::{Result, Status};

/// Largest message size accepted (the buffers are allocated whole on both sides).
pub const MAX_SIZE: usize = 1 << 30;

/// Largest iteration count: the per-iteration timestamps are kept in memory (8 bytes each).
pub const MAX_ITERATIONS: u64 = 1 << 28;

/// Parameters of one test run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    pub test: TestId,
    /// Transport name as given to `uct::Transport::from_name` (transport tests); empty
    /// for protocol tests, where ucp picks the transport (`UCX_TLS` restricts it).
    pub transport: String,
    /// Message size in bytes (for AM short: including the 8-byte header).
    pub size: usize,
    /// Measured iterations.
    pub iterations: u64,
    /// Iterations run before measuring, not reported.
    pub warmup: u64,
    /// Data layout; `None` picks the cheapest one the size fits (short, bcopy, zcopy).
    pub layout: Option<Layout>,
    /// Transport layer: am_bw: credit window of the sender (0: only the transport's own
    /// back-pressure); put_bw/get_bw: operations between flushes (0: flush only at the
    /// end). Protocol layer: tag_bw/tag_mr: most sends in flight, and receives posted
    /// ahead, on each side; put_bw, get_bw, am_bw, stream_bw, fadd_mr: most requests in
    /// flight; add_mr: most posts between flushes when ucp emulates the atomics (a post
    /// on the direct path completes in the call) (0 there: the test's default). Others:
    /// unused.
    pub window: u32,
    /// tag_bw / tag_mr: completions go through a completion queue (`ucp::Cq`) instead of
    /// request handles.
    #[serde(default)]
    pub cq: bool,
    /// tag_bw / tag_mr: completions go through a closure per operation
    /// (`ucp::Callback::new`) instead of request handles.
    #[serde(default)]
    pub callbacks: bool,
    /// tag_bw / tag_mr: the responder keeps `window` receives posted ahead of their
    /// messages (the pattern of MPI message-rate benchmarks). Without it the responder
    /// receives as ucx_perftest's does: one receive at a time, posted once the one
    /// before it completed, and taken in the call when its message is already there.
    #[serde(default)]
    pub prepost: bool,
}

impl Params {
    /// Defaults of a test: 8 bytes, 10000 iterations, 1000 warm-up, layout by size, the
    /// test's default window; transport tests over shm.
    pub fn new(test: TestId) -> Params {
        let info = test.info();
        Params {
            test,
            transport: match info.api {
                Api::Uct => "shm".into(),
                Api::Ucp => String::new(),
            },
            size: 8,
            iterations: 10_000,
            warmup: 1_000,
            layout: None,
            window: info.window,
            cq: false,
            callbacks: false,
            prepost: false,
        }
    }

    /// Checks what can be checked without a transport.
    pub fn validate(&self) -> Result<()> {
        let info = self.test.info();
        if self.size == 0 || self.size > MAX_SIZE {
            tracing::error!(
                "{}: size {} is out of range 1..={MAX_SIZE}",
                info.name,
                self.size
            );
            return Err(Status::InvalidParam);
        }
        if self.iterations == 0 || self.iterations > MAX_ITERATIONS {
            tracing::error!(
                "{}: iterations {} is out of range 1..={MAX_ITERATIONS}",
                info.name,
                self.iterations
            );
            return Err(Status::InvalidParam);
        }
        if self.warmup > MAX_ITERATIONS {
            tracing::error!("{}: warm-up {} is too large", info.name, self.warmup);
            return Err(Status::InvalidParam);
        }
        if self.test.is_atomic() && self.size != 4 && self.size != 8 {
            tracing::error!("{}: atomics are 4 or 8 bytes, not {}", info.name, self.size);
            return Err(Status::InvalidParam);
        }
        if let Some(l) = self.layout {
            if !info.layouts.contains(&l) {
                tracing::error!("{}: data layout '{l}' is not supported", info.name);
                return Err(Status::Unsupported);
            }
        }
        if info.api == Api::Uct && uct::Transport::from_name(&self.transport).is_none() {
            tracing::error!("unknown transport '{}'", self.transport);
            return Err(Status::NoDevice);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        let mut p = Params::new(TestId::GetLat);
        assert!(p.validate().is_ok());
        p.layout = Some(Layout::Short);
        assert_eq!(p.validate(), Err(Status::Unsupported));
        p.layout = Some(Layout::Zcopy);
        p.size = 0;
        assert_eq!(p.validate(), Err(Status::InvalidParam));
        p.size = 8;
        p.iterations = 0;
        assert_eq!(p.validate(), Err(Status::InvalidParam));
        p.iterations = 1;
        p.transport = "ib".into();
        assert_eq!(p.validate(), Err(Status::NoDevice));
        // Protocol tests take no transport and only the contig layout.
        let mut t = Params::new(TestId::TagBw);
        assert_eq!((t.transport.as_str(), t.window), ("", 32));
        assert!(t.validate().is_ok());
        t.layout = Some(Layout::Zcopy);
        assert_eq!(t.validate(), Err(Status::Unsupported));
        t.layout = Some(Layout::Contig);
        assert!(t.validate().is_ok());
        // Atomics take 4 or 8 bytes.
        let mut a = Params::new(TestId::FaddLat);
        assert!(a.validate().is_ok());
        a.size = 4;
        assert!(a.validate().is_ok());
        a.size = 16;
        assert_eq!(a.validate(), Err(Status::InvalidParam));
    }

    #[test]
    fn round_trips_through_json() {
        let mut p = Params::new(TestId::PutBw);
        p.layout = Some(Layout::Zcopy);
        p.size = 1 << 20;
        let s = serde_json::to_string(&p).unwrap();
        assert!(s.contains("\"test\":\"put_bw\""), "{s}");
        assert_eq!(serde_json::from_str::<Params>(&s).unwrap(), p);
        // The protocol-layer test of the same name has its own key in the channel.
        let q = Params::new(TestId::UcpPutBw);
        let s = serde_json::to_string(&q).unwrap();
        assert!(s.contains("\"test\":\"ucp_put_bw\""), "{s}");
        assert_eq!(serde_json::from_str::<Params>(&s).unwrap(), q);
    }
}
