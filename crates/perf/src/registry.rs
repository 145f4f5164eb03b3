//! The tests rucx-perftest knows: one [`TestId`] per test and a name table ([`TESTS`])
//! with what the runners and the printer need to know about each.
//!
//! A new test is one enum variant, one row in [`TESTS`] and a runner; the command line, the printer and the JSON output pick it up from the table.
//! Names of ucx_perftest that rucx does not run yet are listed in [`PLANNED`] so that
//! asking for one says "not implemented yet" instead of "unknown".
//!
//! Six names exist on both layers: am_lat, am_bw, put_lat, put_bw, get_lat and get_bw are
//! transport-layer (uct) tests and protocol-layer (ucp) tests. [`lookup_in`] picks the
//! layer: the transport layer when asked for (rucx-perftest: `-x TRANSPORT` given), else
//! the protocol layer. Results carry the name and the layer (`"api"`), so the two stay
//! apart in the JSON output; ucx_perftest's own names of the protocol-layer tests
//! (ucp_put_lat, ucp_get, ucp_am_lat, ucp_fadd, ...) are aliases.

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
    // The protocol-layer tests below serialize (in the channel's parameters) as
    // ucp_put_lat, ... so that every variant has its own key; their name (in `-t` and
    // in results) is put_lat, ... like the transport-layer tests of the same operation.
    UcpPutLat,
    UcpPutBw,
    UcpGetLat,
    UcpGetBw,
    UcpAmLat,
    UcpAmBw,
    StreamLat,
    StreamBw,
    AddLat,
    FaddLat,
    SwapLat,
    CswapLat,
    AddMr,
    FaddMr,
    /// rucx's own: put with remote signal (no ucx_perftest counterpart).
    PutSignalLat,
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
    TestInfo {
        id: TestId::UcpPutLat,
        name: "put_lat",
        aliases: &["ucp_put_lat"],
        description: "put latency",
        api: Api::Ucp,
        kind: Kind::PingPong,
        layouts: &[Layout::Contig],
        window: 1,
    },
    TestInfo {
        id: TestId::UcpPutBw,
        name: "put_bw",
        aliases: &["ucp_put_bw"],
        description: "put bandwidth / message rate",
        api: Api::Ucp,
        kind: Kind::Stream,
        layouts: &[Layout::Contig],
        window: 32,
    },
    TestInfo {
        id: TestId::UcpGetLat,
        name: "get_lat",
        aliases: &[],
        description: "get latency",
        api: Api::Ucp,
        kind: Kind::Sequential,
        layouts: &[Layout::Contig],
        window: 1,
    },
    TestInfo {
        id: TestId::UcpGetBw,
        name: "get_bw",
        aliases: &["ucp_get"],
        description: "get bandwidth / message rate",
        api: Api::Ucp,
        kind: Kind::Stream,
        layouts: &[Layout::Contig],
        window: 32,
    },
    TestInfo {
        id: TestId::UcpAmLat,
        name: "am_lat",
        aliases: &["ucp_am_lat"],
        description: "active message latency",
        api: Api::Ucp,
        kind: Kind::PingPong,
        layouts: &[Layout::Contig],
        window: 1,
    },
    TestInfo {
        id: TestId::UcpAmBw,
        name: "am_bw",
        aliases: &["ucp_am_bw"],
        description: "active message bandwidth / message rate",
        api: Api::Ucp,
        kind: Kind::Stream,
        layouts: &[Layout::Contig],
        window: 32,
    },
    TestInfo {
        id: TestId::StreamLat,
        name: "stream_lat",
        aliases: &[],
        description: "stream latency",
        api: Api::Ucp,
        kind: Kind::PingPong,
        layouts: &[Layout::Contig],
        window: 1,
    },
    TestInfo {
        id: TestId::StreamBw,
        name: "stream_bw",
        aliases: &[],
        description: "stream bandwidth",
        api: Api::Ucp,
        kind: Kind::Stream,
        layouts: &[Layout::Contig],
        window: 32,
    },
    TestInfo {
        id: TestId::AddLat,
        name: "add_lat",
        aliases: &[],
        description: "atomic add latency",
        api: Api::Ucp,
        kind: Kind::PingPong,
        layouts: &[Layout::Contig],
        window: 1,
    },
    TestInfo {
        id: TestId::FaddLat,
        name: "fadd_lat",
        aliases: &["ucp_fadd"],
        description: "atomic fetch-and-add latency",
        api: Api::Ucp,
        kind: Kind::Sequential,
        layouts: &[Layout::Contig],
        window: 1,
    },
    TestInfo {
        id: TestId::SwapLat,
        name: "swap_lat",
        aliases: &["ucp_swap"],
        description: "atomic swap latency",
        api: Api::Ucp,
        kind: Kind::Sequential,
        layouts: &[Layout::Contig],
        window: 1,
    },
    TestInfo {
        id: TestId::CswapLat,
        name: "cswap_lat",
        aliases: &["ucp_cswap"],
        description: "atomic compare-and-swap latency",
        api: Api::Ucp,
        kind: Kind::Sequential,
        layouts: &[Layout::Contig],
        window: 1,
    },
    TestInfo {
        id: TestId::AddMr,
        name: "add_mr",
        aliases: &["ucp_add"],
        description: "atomic add message rate",
        api: Api::Ucp,
        kind: Kind::Stream,
        layouts: &[Layout::Contig],
        window: 32,
    },
    TestInfo {
        id: TestId::FaddMr,
        name: "fadd_mr",
        aliases: &[],
        description: "atomic fetch-and-add message rate",
        api: Api::Ucp,
        kind: Kind::Stream,
        layouts: &[Layout::Contig],
        window: 32,
    },
    TestInfo {
        id: TestId::PutSignalLat,
        name: "put_signal_lat",
        aliases: &[],
        description: "put with remote signal latency",
        api: Api::Ucp,
        kind: Kind::PingPong,
        layouts: &[Layout::Contig],
        window: 1,
    },
];

/// Tests of ucx_perftest that rucx does not run yet.
pub static PLANNED: &[&str] = &["tag_sync_bw", "fadd", "swap", "cswap"];

impl TestId {
    /// The table row of this test.
    pub fn info(self) -> &'static TestInfo {
        // TESTS lists the variants in declaration order (checked by `every_test_has_a_row`).
        &TESTS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// The atomic tests, whose size is that of the operand (4 or 8 bytes).
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            TestId::AddLat
                | TestId::FaddLat
                | TestId::SwapLat
                | TestId::CswapLat
                | TestId::AddMr
                | TestId::FaddMr
        )
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

/// Finds a test by name or alias; a name both layers have gives the protocol-layer test
/// (see [`lookup_in`]).
pub fn lookup(name: &str) -> Result<&'static TestInfo, LookupError> {
    lookup_in(name, None)
}

/// Finds a test by name or alias, on layer `api` when the name has a test there: with
/// `Some(Api::Uct)` (rucx-perftest: a transport given with `-x`) am_lat names the
/// transport-layer test, otherwise the protocol-layer one. A name of one layer only gives
/// that test whatever `api` says (the caller decides whether that is an error).
pub fn lookup_in(name: &str, api: Option<Api>) -> Result<&'static TestInfo, LookupError> {
    let want = api.unwrap_or(Api::Ucp);
    let mut found = TESTS
        .iter()
        .filter(|t| t.name == name || t.aliases.contains(&name));
    let first = found.next();
    if let Some(t) = first {
        if t.api == want {
            return Ok(t);
        }
        return Ok(found.find(|t| t.api == want).unwrap_or(t));
    }
    if PLANNED.contains(&name) {
        return Err(LookupError::NotImplemented(name.to_string()));
    }
    Err(LookupError::Unknown(name.to_string()))
}

/// True when both layers have a test named `name` (am_lat, put_bw, ...).
pub fn on_both_layers(name: &str) -> bool {
    let mut apis = TESTS.iter().filter(|t| t.name == name).map(|t| t.api);
    apis.next()
        .is_some_and(|first| apis.any(|other| other != first))
}

/// The names of every runnable test (each once, in table order).
pub fn names() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = Vec::with_capacity(TESTS.len());
    for t in TESTS {
        if !v.contains(&t.name) {
            v.push(t.name);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [TestId; 25] = [
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
        TestId::UcpPutLat,
        TestId::UcpPutBw,
        TestId::UcpGetLat,
        TestId::UcpGetBw,
        TestId::UcpAmLat,
        TestId::UcpAmBw,
        TestId::StreamLat,
        TestId::StreamBw,
        TestId::AddLat,
        TestId::FaddLat,
        TestId::SwapLat,
        TestId::CswapLat,
        TestId::AddMr,
        TestId::FaddMr,
        TestId::PutSignalLat,
    ];

    #[test]
    fn every_test_has_a_row() {
        for id in ALL {
            assert_eq!(TESTS.iter().filter(|t| t.id == id).count(), 1, "{id:?}");
            assert_eq!(id.info().id, id);
        }
        assert_eq!(TESTS.len(), ALL.len());
    }

    #[test]
    fn lookup_by_name_alias_and_errors() {
        assert_eq!(lookup("tag_mr").unwrap().id, TestId::TagMr);
        assert_eq!(lookup("tag_sync_lat").unwrap().api, Api::Ucp);
        // "get" is ucx_perftest's transport-layer test: one layer only.
        assert_eq!(lookup("get").unwrap().id, TestId::GetBw);
        assert_eq!(
            lookup("tag_sync_bw").unwrap_err(),
            LookupError::NotImplemented("tag_sync_bw".into())
        );
        let e = lookup("nope").unwrap_err();
        assert!(e.to_string().contains("unknown test 'nope'"));
        assert!(e.to_string().contains("put_bw"));
        assert!(e.to_string().contains("fadd_mr"));
    }

    /// Names both layers have: the transport layer only when asked for.
    #[test]
    fn shared_names_pick_the_layer() {
        for (name, uct, ucp) in [
            ("am_lat", TestId::AmLat, TestId::UcpAmLat),
            ("am_bw", TestId::AmBw, TestId::UcpAmBw),
            ("put_lat", TestId::PutLat, TestId::UcpPutLat),
            ("put_bw", TestId::PutBw, TestId::UcpPutBw),
            ("get_lat", TestId::GetLat, TestId::UcpGetLat),
            ("get_bw", TestId::GetBw, TestId::UcpGetBw),
        ] {
            assert!(on_both_layers(name), "{name}");
            assert_eq!(lookup(name).unwrap().id, ucp, "{name}");
            assert_eq!(lookup_in(name, Some(Api::Ucp)).unwrap().id, ucp);
            assert_eq!(lookup_in(name, Some(Api::Uct)).unwrap().id, uct);
            assert_eq!(ucp.name(), uct.name());
        }
        // One-layer names ignore the preference (the caller reports a misplaced -x).
        assert_eq!(
            lookup_in("tag_lat", Some(Api::Uct)).unwrap().id,
            TestId::TagLat
        );
        assert_eq!(
            lookup_in("fadd_lat", Some(Api::Uct)).unwrap().id,
            TestId::FaddLat
        );
        assert!(!on_both_layers("tag_lat") && !on_both_layers("add_mr"));
        // ucx_perftest's names of its protocol-layer tests.
        for (alias, id) in [
            ("ucp_put_lat", TestId::UcpPutLat),
            ("ucp_put_bw", TestId::UcpPutBw),
            ("ucp_get", TestId::UcpGetBw),
            ("ucp_am_lat", TestId::UcpAmLat),
            ("ucp_am_bw", TestId::UcpAmBw),
            ("ucp_add", TestId::AddMr),
            ("ucp_fadd", TestId::FaddLat),
            ("ucp_swap", TestId::SwapLat),
            ("ucp_cswap", TestId::CswapLat),
            ("stream_lat", TestId::StreamLat),
            ("stream_bw", TestId::StreamBw),
        ] {
            assert_eq!(lookup(alias).unwrap().id, id, "{alias}");
            assert_eq!(lookup_in(alias, Some(Api::Uct)).unwrap().id, id);
        }
    }

    #[test]
    fn names_are_unique_per_layer_and_keys_unique() {
        let mut all: Vec<(Api, &str)> = TESTS
            .iter()
            .flat_map(|t| {
                std::iter::once(t.name)
                    .chain(t.aliases.iter().copied())
                    .map(move |n| (t.api, n))
            })
            .collect();
        let n = all.len();
        all.sort_unstable_by_key(|&(a, s)| (a.name(), s));
        all.dedup();
        assert_eq!(all.len(), n);
        // An alias never names a test of the other layer.
        for t in TESTS {
            for a in t.aliases {
                assert!(TESTS.iter().all(|o| o.name != *a), "{a}");
            }
        }
        // The serialized ids (the channel's) are unique; a test of one layer only is
        // serialized under its name.
        let mut keys: Vec<String> = TESTS
            .iter()
            .map(|t| serde_json::to_string(&t.id).unwrap())
            .collect();
        for t in TESTS {
            let key = serde_json::to_string(&t.id).unwrap();
            if on_both_layers(t.name) && t.api == Api::Ucp {
                assert_eq!(key, format!("\"ucp_{}\"", t.name));
            } else {
                assert_eq!(key, format!("\"{}\"", t.name));
            }
            assert!(!PLANNED.contains(&t.name));
        }
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), TESTS.len());
        assert_eq!(names().len(), TESTS.len() - 6);
    }
}
