//! Output: ucx_perftest's table (same frame, column widths and number formats, so that
//! scripts that read ucx_perftest's `Final:` line read ours) and one JSON object per result.

use crate::registry::Kind;
use crate::stats::PerfResult;
use std::fmt::Write;

/// Width of the latency column group between its bars.
const LAT_GROUP: usize = 30;

fn centered(title: &str, width: usize) -> String {
    let left = width.saturating_sub(title.len()) / 2;
    let right = width.saturating_sub(title.len() + left);
    format!("{}{title}{}", " ".repeat(left), " ".repeat(right))
}

/// The five lines of the table head. Bandwidth tests title the latency group "overhead",
/// as ucx_perftest does; with `final_only` the first column is "Test" instead of "Stage".
pub fn table_header(kind: Kind, final_only: bool) -> String {
    let top = "+--------------+--------------+------------------------------+---------------------+-----------------------+";
    let mid = "+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+";
    let stage = if final_only {
        "|     Test     |"
    } else {
        "|    Stage     |"
    };
    let mut s = String::new();
    let _ = writeln!(s, "{top}");
    let _ = writeln!(
        s,
        "|              |              |{}|   bandwidth (MB/s)  |  message rate (msg/s) |",
        centered(kind.latency_title(), LAT_GROUP)
    );
    let _ = writeln!(s, "{mid}");
    let _ = writeln!(
        s,
        "{stage} # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |"
    );
    let _ = writeln!(s, "{mid}");
    s
}

/// The `Final:` line of a result (without its newline). With `final_only` the label is
/// blank, as with ucx_perftest's `-f`. Every number has at least one space before it, so
/// the columns stay apart for scripts that split on whitespace even when one overflows.
pub fn final_line(r: &PerfResult, final_only: bool) -> String {
    let label = if final_only { "" } else { "Final:" };
    format!(
        "{label:<14} {:>13} {:>10.3} {:>9.3} {:>9.3} {:>11.2} {:>10.2} {:>11.0} {:>11.0}",
        r.iterations,
        r.latency_p50_us,
        r.latency_avg_us,
        r.latency_overall_us,
        r.bandwidth_mbps,
        r.bandwidth_overall_mbps,
        r.msg_rate,
        r.msg_rate_overall,
    )
}

/// The line above a test's table: which test, over what, with which message.
pub fn banner(r: &PerfResult) -> String {
    let info = r.test.info();
    let path = r
        .rma_path
        .map_or_else(String::new, |p| format!(", rma path {p}"));
    format!(
        "# {} ({}, {}): {}/{}, {} bytes, {} layout, {} iterations, {} warm-up{path}",
        info.name,
        info.description,
        info.api.label(),
        r.transport,
        uct::Transport::from_name(&r.transport).map_or("?", |t| t.device()),
        r.size,
        r.layout,
        r.iterations,
        r.warmup
    )
}

/// A whole report of one result: banner, table head and final line.
pub fn table(r: &PerfResult, final_only: bool) -> String {
    format!(
        "{}\n{}{}\n",
        banner(r),
        table_header(r.test.info().kind, final_only),
        final_line(r, final_only)
    )
}

/// The result as one line of JSON.
pub fn json_line(r: &PerfResult) -> String {
    // Serializing plain numbers and strings cannot fail; keep a visible fallback anyway.
    serde_json::to_string(r).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Layout, TestId};
    use crate::stats::{PerfResult, Subject, Timing};

    fn sample() -> PerfResult {
        PerfResult {
            test: TestId::AmLat,
            api: crate::registry::Api::Uct,
            transport: "shm".into(),
            layout: Layout::Short,
            size: 8,
            iterations: 10000,
            warmup: 1000,
            window: 0,
            latency_p50_us: 0.082,
            latency_avg_us: 0.0767,
            latency_overall_us: 0.0767,
            bandwidth_mbps: 99.39,
            bandwidth_overall_mbps: 99.39,
            msg_rate: 13027812.0,
            msg_rate_overall: 13027812.0,
            elapsed_s: 0.0015,
            stamp_stride: 1,
            rma_path: None,
            samples_ns: vec![150; 4],
        }
    }

    #[test]
    fn header_matches_ucx_perftest() {
        let expect = "\
+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |        latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
";
        assert_eq!(table_header(Kind::PingPong, false), expect);
        let bw = table_header(Kind::Stream, true);
        assert!(bw.contains("|       overhead (usec)        |"), "{bw}");
        assert!(bw.contains("|     Test     | # iterations |"), "{bw}");
        assert!(bw.lines().all(|l| l.len() == 108));
    }

    #[test]
    fn final_line_matches_ucx_perftest() {
        let expect = "Final:                 10000      0.082     0.077     0.077       99.39      99.39    13027812    13027812";
        assert_eq!(final_line(&sample(), false), expect);
        let f = final_line(&sample(), true);
        assert_eq!(f.len(), expect.len());
        assert!(f.starts_with("                       10000"));
        // Columns are whitespace-separated the way scripts parse ucx_perftest's line.
        let cols: Vec<&str> = expect.split_whitespace().collect();
        assert_eq!(cols[0], "Final:");
        assert_eq!(cols[2], "0.082");
        assert_eq!(cols[5], "99.39");
        assert_eq!(cols[7], "13027812");
    }

    #[test]
    fn wide_numbers_keep_columns_separated() {
        let mut r = sample();
        r.latency_p50_us = 123456.789;
        r.bandwidth_mbps = 123456789.12;
        r.msg_rate = 1e15;
        assert_eq!(final_line(&r, false).split_whitespace().count(), 9);
    }

    #[test]
    fn json_has_the_fields() {
        let t = Timing::per_iteration(vec![100, 200], 250);
        let s = Subject {
            test: TestId::PutBw,
            transport: "shm".into(),
            layout: Layout::Zcopy,
            size: 65536,
            warmup: 3,
            window: 0,
        };
        let r = PerfResult::compute(s, Kind::Stream, &t).unwrap();
        let line = json_line(&r);
        assert!(!line.contains('\n'));
        assert!(!line.contains("samples"));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["test"], "put_bw");
        assert_eq!(v["api"], "uct");
        assert_eq!(v["stamp_stride"], 1);
        assert_eq!(v["transport"], "shm");
        assert_eq!(v["layout"], "zcopy");
        assert_eq!(v["size"], 65536);
        assert_eq!(v["iterations"], 2);
        for k in [
            "latency_p50_us",
            "latency_avg_us",
            "latency_overall_us",
            "bandwidth_mbps",
            "bandwidth_overall_mbps",
            "msg_rate",
            "msg_rate_overall",
        ] {
            assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {line}");
        }
    }

    #[test]
    fn banner_names_the_test() {
        let b = banner(&sample());
        assert!(b.contains("am_lat") && b.contains("8 bytes") && b.contains("shm/memory"));
        let t = table(&sample(), false);
        assert_eq!(t.lines().count(), 7);
        assert!(!b.contains("rma path"));
        let mut put = sample();
        put.test = TestId::UcpPutLat;
        put.api = crate::registry::Api::Ucp;
        put.rma_path = Some("direct");
        let b = banner(&put);
        assert!(b.contains("put_lat (put latency, protocol layer)"), "{b}");
        assert!(b.ends_with(", rma path direct"), "{b}");
    }

    /// A protocol-layer test named like a transport-layer one: the JSON says the name and
    /// the layer, and the access path when there is one.
    #[test]
    fn json_of_a_protocol_layer_rma_test() {
        let t = Timing::per_iteration(vec![100, 200], 250);
        let s = Subject {
            test: TestId::UcpGetBw,
            transport: "shm".into(),
            layout: Layout::Contig,
            size: 8,
            warmup: 0,
            window: 32,
        };
        let mut r = PerfResult::compute(s, Kind::Stream, &t).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json_line(&r)).unwrap();
        assert_eq!(
            (v["test"].as_str(), v["api"].as_str()),
            (Some("get_bw"), Some("ucp"))
        );
        assert!(v.get("rma_path").is_none(), "{v}");
        r.rma_path = Some("cma");
        let v: serde_json::Value = serde_json::from_str(&json_line(&r)).unwrap();
        assert_eq!(v["rma_path"], "cma");
    }
}
