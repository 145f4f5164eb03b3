//! The tests rucx-perftest knows: one [`TestId`] per test and a name table ([`TESTS`])
//! with what the runners and the printer need to know about each.
//!
//! A new test is one enum variant, one row in [`TESTS`] and a runner; the command line, the printer and the JSON output pick it up from the table.
//! Names of ucx_perftest that rucx does not run yet are listed in [`PLANNED`] so that
//! asking for one says "not implemented yet" instead of "unknown".

use serde::{Deserialize, Serialize};
use std::fmt;

/// A test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestId {
    AmLat,
    AmBw,
    PutLat,
    PutBw,
    GetLat,
    GetBw,
    TagLat,
    TagBw,
    TagMr,
    TagSyncLat,
}

/// The layer a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// The transport layer (`uct`).
    Uct,
    /// The protocol layer (`ucp`).
    Ucp,
}

impl Api {
    /// How ucx_perftest names the layer in its banner.
    pub fn label(self) -> &'static str {
        match self {
            Api::Uct => "transport layer",
            Api::Ucp => "protocol layer",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Api::Uct => "uct",
            Api::Ucp => "ucp",
        }
    }
}

/// What a test measures; decides how per-iteration times turn into latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Ping-pong: one iteration is a round trip and the reported latency is half of it.
    PingPong,
    /// One operation after the other, each waited for (get latency): one iteration is one
    /// operation and is reported whole.
    Sequential,
    /// A stream of operations: the reported "overhead" is the time per operation.
    Stream,
}

impl Kind {
    /// Divisor from iteration time to reported latency.
    pub fn factor(self) -> f64 {
        match self {
            Kind::PingPong => 2.0,
            Kind::Sequential | Kind::Stream => 1.0,
        }
    }

    /// Title of the latency column group, as ucx_perftest words it.
    pub fn latency_title(self) -> &'static str {
        match self {
            Kind::PingPong | Kind::Sequential => "latency (usec)",
            Kind::Stream => "overhead (usec)",
        }
    }
}

/// How the message data is handed to the transport (ucx_perftest's `-D`): short, bcopy
/// or zcopy for transport tests, contig for protocol tests (ucp picks the protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Inline in the operation (`am_short`, `put_short`).
    Short,
    /// Copied by the transport into its own buffer (`*_bcopy`).
    Bcopy,
    /// Taken from the user's buffer without a copy (`*_zcopy`).
    Zcopy,
    /// One contiguous buffer handed to ucp (its datatype `contig`).
    Contig,
}

impl Layout {
    pub const ALL: [Layout; 4] = [Layout::Short, Layout::Bcopy, Layout::Zcopy, Layout::Contig];

    pub fn name(self) -> &'static str {
        match self {
            Layout::Short => "short",
            Layout::Bcopy => "bcopy",
            Layout::Zcopy => "zcopy",
            Layout::Contig => "contig",
        }
    }

    pub fn from_name(s: &str) -> Option<Layout> {
        Layout::ALL.into_iter().find(|l| l.name() == s)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One row of the test table.
#[derive(Debug)]
pub struct TestInfo {
    pub id: TestId,
    /// The name used with `-t` and in results.
    pub name: &'static str,
    /// Other names accepted with `-t` (ucx_perftest's, where they differ).
    pub aliases: &'static [&'static str],
    /// ucx_perftest's description of the test.
    pub description: &'static str,
    pub api: Api,
    pub kind: Kind,
    /// The layouts the test can use, in the order "auto" tries them.
    pub layouts: &'static [Layout],
    /// Default of `-O` (ucx_perftest's window size of the test; 0: none).
    pub window: u32,
}

/// Every test rucx-perftest runs.
pub static TESTS: &[TestInfo] = &[
    TestInfo {
        id: TestId::AmLat,
        name: "am_lat",
        aliases: &[],
        description: "active message latency",
        api: Api::Uct,
        kind: Kind::PingPong,
        layouts: &[Layout::Short, Layout::Bcopy, Layout::Zcopy],
        window: 0,
    },
    TestInfo {
        id: TestId::AmBw,
        name: "am_bw",
        aliases: &[],
        description: "active message bandwidth / message rate",
        api: Api::Uct,
        kind: Kind::Stream,
        layouts: &[Layout::Short, Layout::Bcopy, Layout::Zcopy],
        window: 0,
    },
    TestInfo {
        id: TestId::PutLat,
        name: "put_lat",
        aliases: &[],
        description: "put latency",
        api: Api::Uct,
        kind: Kind::PingPong,
        layouts: &[Layout::Short, Layout::Bcopy, Layout::Zcopy],
        window: 0,
    },
    TestInfo {
        id: TestId::PutBw,
        name: "put_bw",
        aliases: &[],
        description: "put bandwidth / message rate",
        api: Api::Uct,
        kind: Kind::Stream,
        layouts: &[Layout::Short, Layout::Bcopy, Layout::Zcopy],
        window: 0,
    },
    TestInfo {
        id: TestId::GetLat,
        name: "get_lat",
        aliases: &[],
        description: "get latency",
        api: Api::Uct,
        kind: Kind::Sequential,
        layouts: &[Layout::Bcopy, Layout::Zcopy],
        window: 0,
    },
    TestInfo {
        id: TestId::GetBw,
        name: "get_bw",
        aliases: &["get"],
        description: "get bandwidth / message rate",
        api: Api::Uct,
        kind: Kind::Stream,
        layouts: &[Layout::Bcopy, Layout::Zcopy],
        window: 0,
    },
    TestInfo {
        id: TestId::TagLat,
        name: "tag_lat",
        aliases: &[],
        description: "tag match latency",
        api: Api::Ucp,
        kind: Kind::PingPong,
        layouts: &[Layout::Contig],
        window: 1,
    },
    TestInfo {
        id: TestId::TagBw,
        name: "tag_bw",
        aliases: &[],
        description: "tag match bandwidth",
        api: Api::Ucp,
        kind: Kind::Stream,
        layouts: &[Layout::Contig],
        window: 32,
    },
    TestInfo {
        id: TestId::TagMr,
        name: "tag_mr",
        aliases: &[],
        description: "tag match message rate",
        api: Api::Ucp,
        kind: Kind::Stream,
        layouts: &[Layout::Contig],
        window: 32,
    },
    TestInfo {
        id: TestId::TagSyncLat,
        name: "tag_sync_lat",
        aliases: &[],
        description: "tag sync match latency",
        api: Api::Ucp,
        kind: Kind::PingPong,
        layouts: &[Layout::Contig],
        window: 1,
    },
];

/// Tests of ucx_perftest that rucx does not run yet.
pub static PLANNED: &[&str] = &[
    "add_lat",
    "add_mr",
    "fadd_lat",
    "swap_lat",
    "cswap_lat",
    "tag_sync_bw",
    "ucp_put_lat",
    "ucp_put_bw",
    "ucp_get",
    "ucp_add",
    "ucp_fadd",
    "ucp_swap",
    "ucp_cswap",
    "stream_bw",
    "stream_lat",
    "ucp_am_lat",
    "ucp_am_bw",
];

impl TestId {
    /// The table row of this test.
    pub fn info(self) -> &'static TestInfo {
        // TESTS lists the variants in declaration order (checked by `every_test_has_a_row`).
        &TESTS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }
}

impl fmt::Display for TestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a test name was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LookupError {
    /// A ucx_perftest test that rucx does not run yet.
    NotImplemented(String),
    /// No test has this name.
    Unknown(String),
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupError::NotImplemented(n) => {
                write!(f, "test '{n}' is not implemented in rucx-perftest yet")
            }
            LookupError::Unknown(n) => {
                write!(f, "unknown test '{n}'; known tests: {}", names().join(", "))
            }
        }
    }
}

impl std::error::Error for LookupError {}

/// Finds a test by name or alias.
pub fn lookup(name: &str) -> Result<&'static TestInfo, LookupError> {
    if let Some(t) = TESTS
        .iter()
        .find(|t| t.name == name || t.aliases.contains(&name))
    {
        return Ok(t);
    }
    if PLANNED.contains(&name) {
        return Err(LookupError::NotImplemented(name.to_string()));
    }
    Err(LookupError::Unknown(name.to_string()))
}

/// The names of every runnable test.
pub fn names() -> Vec<&'static str> {
    TESTS.iter().map(|t| t.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_test_has_a_row() {
        for id in [
            TestId::AmLat,
            TestId::AmBw,
            TestId::PutLat,
            TestId::PutBw,
            TestId::GetLat,
            TestId::GetBw,
            TestId::TagLat,
            TestId::TagBw,
            TestId::TagMr,
            TestId::TagSyncLat,
        ] {
            assert_eq!(TESTS.iter().filter(|t| t.id == id).count(), 1, "{id:?}");
            assert_eq!(id.info().id, id);
        }
        assert_eq!(TESTS.len(), 10);
    }

    #[test]
    fn lookup_by_name_alias_and_errors() {
        assert_eq!(lookup("am_lat").unwrap().id, TestId::AmLat);
        assert_eq!(lookup("get").unwrap().id, TestId::GetBw);
        assert_eq!(lookup("tag_mr").unwrap().id, TestId::TagMr);
        assert_eq!(lookup("tag_sync_lat").unwrap().api, Api::Ucp);
        assert_eq!(
            lookup("tag_sync_bw").unwrap_err(),
            LookupError::NotImplemented("tag_sync_bw".into())
        );
        let e = lookup("nope").unwrap_err();
        assert!(e.to_string().contains("unknown test 'nope'"));
        assert!(e.to_string().contains("put_bw"));
    }

    #[test]
    fn names_are_unique_and_serde_matches() {
        let mut all: Vec<&str> = TESTS
            .iter()
            .flat_map(|t| std::iter::once(t.name).chain(t.aliases.iter().copied()))
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
        for t in TESTS {
            assert_eq!(
                serde_json::to_string(&t.id).unwrap(),
                format!("\"{}\"", t.name)
            );
            assert!(!PLANNED.contains(&t.name));
        }
    }
}
