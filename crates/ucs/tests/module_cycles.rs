//! No module of a checked crate imports a module that imports it back (DESIGN.md: the
//! module maps of ucp and capi are layered, bottom to top).
//!
//! The import graph is read from the sources: a module is a file (`foo.rs` or
//! `foo/mod.rs`; `lib.rs` is the crate root), and it depends on every module it names
//! through `crate::...` (also in `use` trees with braces, and `$crate::` in macros),
//! `super::...` or `self::...`. A path such as `crate::a::b::c` counts as an edge to the
//! deepest module of it that exists as a file (`a::b` if `c` is an item of `a/b.rs`).
//! Comments, string and character literals are ignored; inline modules (`mod tests { }`)
//! belong to their file, and `super::` inside them is resolved from the inline module.
//! Cycles are the strongly connected components of the graph (Tarjan); the test fails
//! listing each one with a reference (file and line) for every edge in it.
//!
//! This test lives in ucs (the bottom layer) only because every build of the workspace
//! compiles ucs; it reads the other crates' sources relative to `CARGO_MANIFEST_DIR/..`,
//! as `layering.rs` reads their manifests.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The crates whose modules must not import each other in a loop.
const CHECKED: &[&str] = &["capi", "ucp"];

/// A module path inside a crate (`[]` is the crate root).
type ModPath = Vec<String>;

/// The import graph of one crate: for each file module, the modules it refers to, with
/// the place of the first reference.
#[derive(Debug, Default)]
struct Graph {
    /// Every module that exists as a file.
    modules: BTreeSet<ModPath>,
    /// `from -> (to -> "file:line")`.
    edges: BTreeMap<ModPath, BTreeMap<ModPath, String>>,
}

fn display(m: &ModPath) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

/// The module a source file is, from its path under `src/`; `None` for binaries.
fn module_of(rel: &Path) -> Option<ModPath> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    let file = parts.pop()?;
    let stem = file.strip_suffix(".rs")?;
    match stem {
        "lib" | "main" if parts.is_empty() => {}
        "mod" => {}
        s => parts.push(s.to_string()),
    }
    Some(parts)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The source with comments, string literals and character literals replaced by spaces
/// (newlines kept, so that line numbers stay right).
fn strip(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if (c[i] == 'r' || (c[i] == 'b' && at(i + 1) == 'r'))
            && !at(i.wrapping_sub(1)).is_alphanumeric()
            && at(i.wrapping_sub(1)) != '_'
            && {
                let mut k = i + if c[i] == 'b' { 2 } else { 1 };
                while at(k) == '#' {
                    k += 1;
                }
                at(k) == '"'
            }
        {
            // A raw string: r"..", r#".."#, br".." ...
            let mut k = i + if c[i] == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while at(k) == '#' {
                hashes += 1;
                k += 1;
            }
            k += 1;
            while k < c.len() {
                if c[k] == '"' && (1..=hashes).all(|h| at(k + h) == '#') {
                    k += 1 + hashes;
                    break;
                }
                k += 1;
            }
            for &ch in &c[i..k.min(c.len())] {
                blank(&mut out, ch);
            }
            i = k;
        } else if c[i] == '"' {
            blank(&mut out, c[i]);
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            if i < c.len() {
                out.push(' ');
                i += 1;
            }
        } else if c[i] == '\'' && (at(i + 2) == '\'' || (at(i + 1) == '\\')) {
            // A character literal ('x', '\n', '\u{..}'); a lifetime has no closing quote.
            let mut k = i + 1;
            if at(k) == '\\' {
                k += 2;
            } else {
                k += 1;
            }
            while k < c.len() && c[k] != '\'' && c[k] != '\n' {
                k += 1;
            }
            for _ in i..=k.min(c.len() - 1) {
                out.push(' ');
            }
            i = k + 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Tokens of stripped source: identifiers (with `$crate`), `::`, and single punctuation.
fn tokens(src: &str) -> Vec<(String, usize)> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' || (ch == '$' && i + 1 < c.len()) {
            let s = i;
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let w: String = c[s..i].iter().collect();
            out.push((if w == "$crate" { "crate".into() } else { w }, line));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(("::".into(), line));
            i += 2;
        } else {
            out.push((ch.to_string(), line));
            i += 1;
        }
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Expands a `use` tree starting at `toks[i]` into full paths (`a::{b, c::{d}}`).
/// Returns the paths and the index after the tree.
fn use_tree(toks: &[(String, usize)], mut i: usize, prefix: &[String]) -> (Vec<ModPath>, usize) {
    let mut path: ModPath = prefix.to_vec();
    let mut out = Vec::new();
    while i < toks.len() {
        let t = toks[i].0.as_str();
        if t == "{" {
            i += 1;
            loop {
                let (mut sub, next) = use_tree(toks, i, &path);
                out.append(&mut sub);
                i = next;
                match toks.get(i).map(|t| t.0.as_str()) {
                    Some(",") => i += 1,
                    Some("}") => {
                        i += 1;
                        break;
                    }
                    _ => break,
                }
                if toks.get(i).is_some_and(|t| t.0 == "}") {
                    i += 1;
                    break;
                }
            }
            return (out, i);
        } else if t == "::" {
            i += 1;
        } else if t == "as" {
            i += 2;
        } else if t == "*" {
            i += 1;
        } else if is_ident(t) {
            path.push(t.to_string());
            i += 1;
        } else {
            break;
        }
    }
    if path.len() > prefix.len() || !prefix.is_empty() {
        out.push(path);
    }
    (out, i)
}

/// Resolves a path (`crate::..`, `super::..`, `self::..`) written in module `here` to the
/// module path it names (items included); `None` for other paths.
fn resolve(here: &[String], path: &[String]) -> Option<ModPath> {
    let first = path.first()?.as_str();
    let mut base: ModPath;
    let mut rest = path;
    match first {
        "crate" => {
            base = Vec::new();
            rest = &rest[1..];
        }
        "self" => {
            base = here.to_vec();
            rest = &rest[1..];
        }
        "super" => {
            base = here.to_vec();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(base)
}

/// The deepest prefix of `p` that is a file module.
fn deepest(modules: &BTreeSet<ModPath>, p: &[String]) -> ModPath {
    (0..=p.len())
        .rev()
        .map(|n| p[..n].to_vec())
        .find(|m| modules.contains(m))
        .unwrap_or_default()
}

/// Reads the import graph of the crate whose sources are under `src`.
fn graph_of(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g = Graph::default();
    let mut parsed = Vec::new();
    for f in files {
        let Some(m) = module_of(f.strip_prefix(src).expect("under src")) else {
            continue;
        };
        let text = fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        g.modules.insert(m.clone());
        parsed.push((f, m, tokens(&strip(&text))));
    }
    for (file, m, toks) in parsed {
        let name = file
            .strip_prefix(src.parent().unwrap_or(src))
            .unwrap_or(&file)
            .display()
            .to_string();
        // Inline modules: (name, brace depth inside them).
        let mut inline: Vec<(String, usize)> = Vec::new();
        let mut depth = 0usize;
        let mut refs: Vec<(ModPath, usize, ModPath)> = Vec::new();
        let mut i = 0;
        while i < toks.len() {
            let here: ModPath = m
                .iter()
                .cloned()
                .chain(inline.iter().map(|(n, _)| n.clone()))
                .collect();
            let t = toks[i].0.as_str();
            let line = toks[i].1;
            match t {
                "{" => depth += 1,
                "}" => {
                    if inline.last().is_some_and(|(_, d)| *d == depth) {
                        inline.pop();
                    }
                    depth = depth.saturating_sub(1);
                }
                "mod" if toks.get(i + 2).is_some_and(|t| t.0 == "{") => {
                    let n = toks[i + 1].0.clone();
                    inline.push((n, depth + 1));
                    depth += 1;
                    i += 3;
                    continue;
                }
                "use" => {
                    let (paths, next) = use_tree(&toks, i + 1, &[]);
                    for p in paths {
                        if let Some(r) = resolve(&here, &p) {
                            refs.push((r, line, here.clone()));
                        }
                    }
                    i = next;
                    continue;
                }
                "crate" | "super" | "self"
                    if toks.get(i + 1).is_some_and(|t| t.0 == "::")
                        && !(i > 0 && toks[i - 1].0 == "::") =>
                {
                    let mut p = vec![t.to_string()];
                    let mut k = i + 1;
                    while toks.get(k).is_some_and(|t| t.0 == "::")
                        && toks.get(k + 1).is_some_and(|t| is_ident(&t.0))
                    {
                        p.push(toks[k + 1].0.clone());
                        k += 2;
                    }
                    if let Some(r) = resolve(&here, &p) {
                        refs.push((r, line, here.clone()));
                    }
                    i = k;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        for (r, line, _) in refs {
            let to = deepest(&g.modules, &r);
            if to != m {
                g.edges
                    .entry(m.clone())
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| format!("{name}:{line}"));
            }
        }
    }
    g
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(g: &Graph) -> Vec<Vec<ModPath>> {
    struct St<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        on: BTreeSet<&'a ModPath>,
        stack: Vec<&'a ModPath>,
        next: usize,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(s: &mut St<'a>, v: &'a ModPath) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        if let Some(es) = s.g.edges.get(v) {
            for w in es.keys() {
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if s.on.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = St {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        on: BTreeSet::new(),
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    let all: BTreeSet<&ModPath> = g
        .modules
        .iter()
        .chain(g.edges.keys())
        .chain(g.edges.values().flat_map(|e| e.keys()))
        .collect();
    for v in all {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

/// A readable account of the cycles: each component with its internal edges.
fn report(krate: &str, g: &Graph, found: &[Vec<ModPath>]) -> String {
    let mut r = String::new();
    for comp in found {
        let names: Vec<String> = comp.iter().map(display).collect();
        r.push_str(&format!(
            "{krate}: modules in a cycle: {}\n",
            names.join(", ")
        ));
        let set: BTreeSet<&ModPath> = comp.iter().collect();
        for from in comp {
            for (to, at) in g.edges.get(from).into_iter().flatten() {
                if set.contains(to) {
                    r.push_str(&format!(
                        "    {} -> {}  ({at})\n",
                        display(from),
                        display(to)
                    ));
                }
            }
        }
    }
    r
}

#[test]
fn checked_crates_have_no_module_cycles() {
    let crates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut failures = String::new();
    for krate in CHECKED {
        let src = crates.join(krate).join("src");
        assert!(src.is_dir(), "{} is not a directory", src.display());
        let g = graph_of(&src);
        assert!(
            g.modules.len() > 1,
            "{krate}: found no modules under {}",
            src.display()
        );
        let found = cycles(&g);
        failures.push_str(&report(krate, &g, &found));
    }
    assert!(failures.is_empty(), "module cycles:\n{failures}");
}

/// A tree of sources written for one test, removed when dropped.
struct Tree(PathBuf);

impl Tree {
    fn new(files: &[(&str, &str)]) -> Tree {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let root =
            std::env::temp_dir().join(format!("rucx-module-cycles-{}-{nanos}", std::process::id()));
        for (path, text) in files {
            let p = root.join("src").join(path);
            fs::create_dir_all(p.parent().expect("has a parent")).expect("mkdir");
            fs::write(&p, text).expect("write");
        }
        Tree(root)
    }

    fn src(&self) -> PathBuf {
        self.0.join("src")
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn m(s: &str) -> ModPath {
    s.split("::").map(str::to_string).collect()
}

#[test]
fn checker_finds_a_cycle_and_ignores_comments_strings_and_test_modules() {
    let t = Tree::new(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n"),
        // a -> b through a braced use tree; b -> a through super::.
        (
            "a.rs",
            "use crate::{ffi_like, b::{self, Thing}};\npub fn f() -> Thing { b::make() }\n",
        ),
        (
            "b.rs",
            "pub struct Thing;\npub fn make() -> Thing { super::a::f(); Thing }\n",
        ),
        // c names a, but only in a comment, a string, a raw string and a char.
        (
            "c.rs",
            "// use crate::a;\n/* crate::a::f() */\nconst S: &str = \"crate::a\";\n\
             const R: &str = r#\"crate::b\"#;\nconst C: char = 'c';\n\
             fn g<'a>(x: &'a str) -> &'a str { x }\n\
             #[cfg(test)]\nmod tests {\n    use super::*;\n    use self::inner::X;\n    \
             mod inner { pub struct X; }\n}\n",
        ),
        // d -> c (a plain dependency), d/e.rs -> d through super::, and d -> e: a cycle
        // between a module and its child, and a path whose last part is an item.
        (
            "d/mod.rs",
            "mod e;\npub fn h() { crate::c::g(\"\"); self::e::k(); }\n",
        ),
        ("d/e.rs", "pub fn k() { super::h() }\n"),
    ]);
    let g = graph_of(&t.src());
    let found = cycles(&g);
    assert_eq!(
        found,
        vec![vec![m("a"), m("b")], vec![m("d"), m("d::e")]],
        "{}",
        report("synthetic", &g, &found)
    );
    let from_c: Vec<&ModPath> = g
        .edges
        .get(&m("c"))
        .into_iter()
        .flatten()
        .map(|e| e.0)
        .collect();
    assert!(from_c.is_empty(), "c refers to nothing, found {from_c:?}");
    assert!(g.edges[&m("d")].contains_key(&m("c")));
    let text = report("synthetic", &g, &found);
    assert!(text.contains("a -> b  (src/a.rs:1)"), "{text}");
    assert!(text.contains("b -> a  (src/b.rs:2)"), "{text}");
}

#[test]
fn checker_passes_an_acyclic_tree() {
    let t = Tree::new(&[
        ("lib.rs", "pub mod low;\npub mod high;\n"),
        ("low.rs", "pub fn f() {}\n"),
        (
            "high.rs",
            "use crate::low;\npub fn g() { low::f(); crate::low::f() }\n",
        ),
    ]);
    let g = graph_of(&t.src());
    assert!(cycles(&g).is_empty());
    assert!(g.edges[&m("high")].contains_key(&m("low")));
}
