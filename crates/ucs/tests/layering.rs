//! The layering rule of DESIGN.md, checked on the real dependency graph.
//!
//! Each workspace crate may depend (normal and build dependencies) only on the crates of
//! the layers below it; nothing depends on `capi` or `ucc`; `testkit` is reached only through
//! dev-dependencies. The graph comes from `cargo metadata --no-deps`, so a `Cargo.toml`
//! edit that points a dependency upwards fails here with the offending edge named.
//!
//! This test lives in ucs (the bottom layer) only because every build of the workspace
//! compiles ucs; it does not test ucs itself.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// For each workspace crate: the workspace crates it may use as normal or build
/// dependencies. Dev-dependencies may in addition name `testkit`.
const ALLOWED: &[(&str, &[&str])] = &[
    ("ucs", &[]),
    ("uct-rel", &["ucs"]),
    ("uct", &["ucs", "uct-rel"]),
    ("ucp", &["ucs", "uct", "uct-rel"]),
    ("coll", &["ucs", "uct", "uct-rel", "ucp"]),
    // The benchmark library measures collectives too, so it sits above coll.
    ("perf", &["ucs", "uct", "ucp", "coll"]),
    ("capi", &["ucs", "uct", "ucp"]),
    ("ucc", &["ucs", "uct", "uct-rel", "ucp", "coll"]),
    ("tools", &["ucs", "uct", "uct-rel", "ucp", "coll", "perf"]),
    ("testkit", &["ucs", "uct", "uct-rel", "ucp", "coll", "perf"]),
];

/// A crate only reachable through dev-dependencies.
const DEV_ONLY: &str = "testkit";
/// Crates nothing may depend on, in any way (the C ABIs, leaves).
const LEAVES: &[&str] = &["capi", "ucc"];

/// One dependency edge between two workspace crates.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: String,
    to: String,
    /// "normal", "build" or "dev".
    kind: String,
}

/// The edges between workspace members found in `cargo metadata` output.
fn workspace_edges(meta: &Value) -> (BTreeSet<String>, Vec<Edge>) {
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .expect("cargo metadata has workspace_members")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let packages: Vec<&Value> = meta["packages"]
        .as_array()
        .expect("cargo metadata has packages")
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(id)))
        .collect();
    let names: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    let mut edges = Vec::new();
    for p in &packages {
        let from = p["name"].as_str().unwrap_or_default();
        for d in p["dependencies"].as_array().into_iter().flatten() {
            let to = d["name"].as_str().unwrap_or_default();
            // Only path dependencies can be workspace crates; a registry crate that
            // happens to share a name is not one of ours.
            if !names.contains(to) || d["path"].is_null() {
                continue;
            }
            let kind = d["kind"].as_str().unwrap_or("normal").to_string();
            edges.push(Edge {
                from: from.to_string(),
                to: to.to_string(),
                kind,
            });
        }
    }
    edges.sort();
    edges.dedup();
    (names, edges)
}

/// Every rule the graph breaks, as sentences naming the edge.
fn violations(names: &BTreeSet<String>, edges: &[Edge]) -> Vec<String> {
    let allowed = |c: &str| ALLOWED.iter().find(|(n, _)| *n == c).map(|(_, a)| *a);
    let mut out = Vec::new();
    for name in names {
        if allowed(name).is_none() {
            out.push(format!(
                "workspace crate `{name}` has no place in the layering table; add it to \
                 ALLOWED in crates/ucs/tests/layering.rs (and to DESIGN.md's map)"
            ));
        }
    }
    for e in edges {
        let Some(ok) = allowed(&e.from) else {
            continue;
        };
        let edge = format!("`{}` -> `{}` ({} dependency)", e.from, e.to, e.kind);
        if LEAVES.contains(&e.to.as_str()) {
            out.push(format!(
                "{edge}: nothing may depend on `{}`, a C ABI; use the Rust crates it wraps",
                e.to
            ));
        } else if e.kind == "dev" {
            if e.to != DEV_ONLY && !ok.contains(&e.to.as_str()) {
                out.push(format!(
                    "{edge}: a dev-dependency may only point to a lower layer or to \
                     `{DEV_ONLY}`; `{}` may use: {}",
                    e.from,
                    list(ok)
                ));
            }
        } else if e.to == DEV_ONLY {
            out.push(format!(
                "{edge}: `{DEV_ONLY}` is for tests only; make it a [dev-dependencies] entry"
            ));
        } else if !ok.contains(&e.to.as_str()) {
            out.push(format!(
                "{edge} points upwards or sideways in the layers; `{}` may depend on: {}",
                e.from,
                list(ok)
            ));
        }
    }
    out
}

fn list(crates: &[&str]) -> String {
    if crates.is_empty() {
        "no workspace crate".to_string()
    } else {
        crates.join(", ")
    }
}

fn cargo_metadata() -> Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(&root)
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed in {}:\n{}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata printed JSON")
}

#[test]
fn workspace_dependencies_follow_the_layers() {
    let meta = cargo_metadata();
    let (names, edges) = workspace_edges(&meta);
    for core in ["ucs", "uct"] {
        assert!(
            names.contains(core),
            "`{core}` missing from the workspace: {names:?}"
        );
    }
    let bad = violations(&names, &edges);
    assert!(
        bad.is_empty(),
        "the crate dependency graph breaks the layering of DESIGN.md:\n  {}\n\
         (edges found: {})",
        bad.join("\n  "),
        edges
            .iter()
            .map(|e| format!("{}->{}[{}]", e.from, e.to, e.kind))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// The checker itself: a made-up graph with one edge of each forbidden sort.
#[test]
fn checker_names_each_kind_of_bad_edge() {
    let pkg = |name: &str, deps: &[(&str, &str)]| {
        let deps: Vec<Value> = deps
            .iter()
            .map(|(to, kind)| {
                serde_json::json!({
                    "name": to,
                    "kind": if *kind == "normal" { Value::Null } else { Value::from(*kind) },
                    "path": format!("/ws/crates/{to}"),
                })
            })
            .collect();
        serde_json::json!({ "name": name, "id": format!("id-{name}"), "dependencies": deps })
    };
    let meta = serde_json::json!({
        "workspace_members": [
            "id-ucs", "id-uct", "id-ucp", "id-tools", "id-perf", "id-newbie", "id-capi",
            "id-testkit",
        ],
        "packages": [
            pkg("ucs", &[]),
            pkg("uct", &[("ucs", "normal"), ("ucp", "normal"), ("testkit-like", "normal")]),
            pkg("ucp", &[("uct", "normal"), ("testkit", "dev"), ("tools", "dev")]),
            pkg("tools", &[("capi", "normal")]),
            pkg("perf", &[("ucs", "build"), ("testkit", "normal")]),
            pkg("newbie", &[]),
            pkg("capi", &[]),
            pkg("testkit", &[]),
            // Not a workspace member: its edges are not ours to check.
            pkg("outsider", &[("capi", "normal")]),
        ],
    });
    let (names, edges) = workspace_edges(&meta);
    let bad = violations(&names, &edges);
    let has = |needle: &str| bad.iter().any(|b| b.contains(needle));
    assert!(
        has("`uct` -> `ucp` (normal dependency) points upwards"),
        "{bad:#?}"
    );
    assert!(has("`ucp` -> `tools` (dev dependency)"), "{bad:#?}");
    assert!(has("`tools` -> `capi`"), "{bad:#?}");
    assert!(has("`perf` -> `testkit` (normal dependency)"), "{bad:#?}");
    assert!(has("`newbie` has no place"), "{bad:#?}");
    // Allowed edges stay quiet.
    assert!(!has("`uct` -> `ucs`"), "{bad:#?}");
    assert!(!has("`ucp` -> `testkit`"), "{bad:#?}");
    assert!(!has("`perf` -> `ucs`"), "{bad:#?}");
    assert!(!has("outsider"), "{bad:#?}");
    assert!(!has("testkit-like"), "{bad:#?}");
    assert_eq!(bad.len(), 5, "{bad:#?}");
}
