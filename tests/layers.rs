//! The crates' structure, read from their source: in the core no file imports a higher layer
//! (the layers, lowest first, are drawn in `docs/architecture.md`), and no crate (core, ffi,
//! cli, kit) has an import circle between its files. `python/tests/test_import_circles.py`
//! checks the Python package the same way.

#![allow(clippy::expect_used)] // a test: an unreadable source tree is a failure

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layer of a core source file (its path under `core/src`), lowest first; `None` for
/// files outside the layering (the crate root and test support).
fn layer(file: &str) -> Option<usize> {
    if file == "model/eval.rs" || file.starts_with("model/refit/") {
        return Some(6); // the evaluator and the refit read plans: they sit above them
    }
    let top = file.split('/').next()?.trim_end_matches(".rs");
    Some(match top {
        "config" | "error" => 0,
        "model" => 1,
        "kernel" => 2,
        "setup" => 3,
        "plan" => 4,
        "policy" => 5,
        "window" => 6, // the outlier-delay window: calls schedule, beside the evaluator
        "owned" => 7,
        _ => return None,
    })
}

/// Every `.rs` file under `dir`, as paths relative to `root`.
fn sources(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .expect("core/src is readable")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            sources(root, &p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(root).expect("under root");
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The module path of a source file: `config/mod.rs` -> `config`, `plan/check.rs` ->
/// `plan::check`.
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The code before the unit tests, without comments (doc links are not imports).
fn production(text: &str) -> String {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::a::b::...` path in `text`, with `use crate::x::{y, z::w}` groups expanded.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let base: Vec<String> = rest[..end]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if rest[end..].starts_with('{') {
            let close = rest[end..].find('}').map_or(rest.len(), |c| end + c);
            for item in rest[end + 1..close].split(',') {
                let mut p = base.clone();
                p.extend(
                    item.trim()
                        .split("::")
                        .filter(|s| !s.is_empty() && *s != "self")
                        .map(|s| s.split_whitespace().next().unwrap_or(s).to_string()),
                );
                out.push(p);
            }
        } else {
            out.push(base);
        }
    }
    out
}

/// The import graph of the core's production code: file -> files it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    graph_of("core/src", |f| layer(f).is_some())
}

/// The import graph of the production code of the crate whose sources are in `src` (relative
/// to the repository root), over the files `include` accepts: file -> files it names.
fn graph_of(src: &str, include: impl Fn(&str) -> bool) -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(src);
    let mut files = Vec::new();
    sources(&root, &root, &mut files);
    let modules: BTreeMap<Vec<String>, String> =
        files.iter().map(|f| (module_of(f), f.clone())).collect();
    let mut edges = BTreeMap::new();
    for f in &files {
        if !include(f) || f.ends_with("tests.rs") {
            continue;
        }
        let text = fs::read_to_string(root.join(f)).expect("a readable source file");
        let mut to = BTreeSet::new();
        for path in crate_paths(&production(&text)) {
            // The longest prefix that names a module file.
            let target = (1..=path.len()).rev().find_map(|k| modules.get(&path[..k]));
            if let Some(t) = target
                && t != f
                && include(t)
            {
                to.insert(t.clone());
            }
        }
        edges.insert(f.clone(), to);
    }
    edges
}

/// Strongly connected components with more than one file (Tarjan).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> T<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.edges.contains_key(w) {
                    continue;
                }
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let m = self.low[v].min(self.low[w]);
                    self.low.insert(v, m);
                } else if self.on.contains(w) {
                    let m = self.low[v].min(self.index[w]);
                    self.low.insert(v, m);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn no_file_imports_a_higher_layer() {
    let edges = graph();
    assert!(edges.len() > 20, "the source walk found the core");
    let upward: Vec<String> = edges
        .iter()
        .flat_map(|(f, to)| to.iter().map(move |t| (f, t)))
        .filter(|(f, t)| layer(f) < layer(t))
        .map(|(f, t)| format!("{f} -> {t}"))
        .collect();
    assert!(upward.is_empty(), "imports of a higher layer: {upward:#?}");
}

#[test]
fn no_import_circle_in_core() {
    let found = circles(&graph());
    assert!(found.is_empty(), "import circles in core: {found:#?}");
}

/// Regression: `ffi/src` had two circles (`boundary <-> status`; `config <-> cost <-> error
/// <-> plan`) and `cli/src` three (`args <-> calibrate`, `simulate <-> online`, `simulate <->
/// chunking`, with `args -> chunking -> simulate -> args`). A reader should be able to open
/// any file and know what it stands on.
#[test]
fn no_import_circle_in_ffi_cli_or_kit() {
    for (src, least) in [("ffi/src", 15), ("cli/src", 18), ("kit/src", 10)] {
        let edges = graph_of(src, |f| f != "lib.rs" && f != "main.rs");
        assert!(edges.len() >= least, "the source walk found {src}");
        let found = circles(&edges);
        assert!(found.is_empty(), "import circles in {src}: {found:#?}");
    }
}

/// The circle finder finds a circle, so the tests above can fail.
#[test]
fn the_circle_finder_finds_circles() {
    let set = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<BTreeSet<_>>();
    let mut edges = BTreeMap::new();
    edges.insert("a.rs".to_string(), set(&["b.rs"]));
    edges.insert("b.rs".to_string(), set(&["c.rs"]));
    edges.insert("c.rs".to_string(), set(&["a.rs"]));
    edges.insert("d.rs".to_string(), set(&["a.rs"]));
    assert_eq!(circles(&edges), [vec!["a.rs", "b.rs", "c.rs"]]);
}

/// The error type is the bottom of the layering: its variants carry their bounds and the
/// policy's name, so its code names nothing of the crate (doc links aside).
#[test]
fn the_error_type_imports_nothing_from_the_crate() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/src/error.rs");
    let text = fs::read_to_string(file).expect("core/src/error.rs is readable");
    let paths: Vec<String> = crate_paths(&production(&text))
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert!(paths.is_empty(), "error.rs names {paths:?}");
    assert!(graph().get("error.rs").is_some_and(BTreeSet::is_empty));
}

#[test]
fn the_path_reader_expands_groups_and_ignores_tests() {
    let text = "use crate::config::{Config, budget::Budget};\n/// [`x`](crate::model::eval)\n\
                fn f() { crate::plan::check(); }\n#[cfg(test)]\nmod tests { use crate::policy::gds; }";
    let paths = crate_paths(&production(text));
    let names: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        names,
        ["config::Config", "config::budget::Budget", "plan::check"]
    );
}
