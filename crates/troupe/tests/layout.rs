//! The code's layout as docs/architecture.md states it, checked on the
//! source tree: the session layer above the actor tree, agents built
//! through their constructors, no long import circles, no long files
//! without a reason.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                if name != "target" && name != "node_modules" && !name.starts_with('.') {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn source_files() -> Vec<PathBuf> {
    let mut files = rust_files(&root().join("crates"));
    files.extend(rust_files(&root().join("tests")));
    files
}

#[test]
fn the_actor_tree_does_not_depend_on_mcp_and_the_cli_depends_on_the_session_layer() {
    let actors = std::fs::read_to_string(root().join("crates/actors/Cargo.toml")).unwrap();
    assert!(
        !actors.contains("troupe-mcp"),
        "crates/actors/Cargo.toml names troupe-mcp: the session layer (crates/troupe) owns MCP"
    );
    let cli = std::fs::read_to_string(root().join("crates/cli/Cargo.toml")).unwrap();
    assert!(
        cli.lines().any(|l| l.trim_start().starts_with("troupe = ")),
        "crates/cli/Cargo.toml does not depend on troupe"
    );
}

#[test]
fn agent_args_are_built_by_their_constructors_only() {
    let home = root().join("crates/actors/src/agent/args.rs");
    let mut literals = Vec::new();
    for file in source_files() {
        if file.ends_with("crates/troupe/tests/layout.rs") || file == home {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let Some(at) = line.find("AgentArgs {") else {
                continue;
            };
            let before = line[..at].trim_end();
            let declaration = ["struct", "impl", "for", "->"]
                .iter()
                .any(|k| before.ends_with(k) || before.trim_start().starts_with("//"));
            if !declaration {
                literals.push(format!("{}:{}", file.display(), i + 1));
            }
        }
    }
    assert!(
        literals.is_empty(),
        "AgentArgs built by struct literal outside agent/args.rs (use AgentArgs::root / ::child): {literals:?}"
    );
}

/// A file over 600 lines says why in its `//!` doc, on a line starting
/// `Over 600 lines:`.
#[test]
fn no_source_file_is_over_600_lines_without_a_reason() {
    let mut long = Vec::new();
    for file in source_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines = text.lines().count();
        let reason = text
            .lines()
            .take_while(|l| l.starts_with("//!") || l.trim().is_empty())
            .any(|l| {
                l.trim_start_matches("//!")
                    .trim()
                    .starts_with("Over 600 lines:")
            });
        if lines > 600 && !reason {
            long.push(format!("{} ({lines} lines)", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "split these, or say why in their //! doc (`Over 600 lines: ...`): {long:?}"
    );
}

/// The module path of a file under `src` (`agent::args`; `""` for lib.rs).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The paths a file names through `crate::`, `super::` and `self::`
/// (in `use` lists too), as full module paths.
fn references(text: &str, here: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let code = match code.find("#[cfg(test)]\nmod tests") {
        Some(i) => &code[..i],
        None => &code[..],
    };
    let segs: Vec<&str> = if here.is_empty() {
        Vec::new()
    } else {
        here.split("::").collect()
    };
    let base = |head: &str| -> Vec<String> {
        match head {
            "crate" => Vec::new(),
            "super" => segs[..segs.len().saturating_sub(1)]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            _ => segs.iter().map(|s| s.to_string()).collect(),
        }
    };
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for head in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(pos) = code[from..].find(head) {
            let start = from + pos;
            from = start + head.len();
            if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
                continue;
            }
            let prefix = base(&head[..head.len() - 2]);
            let rest = &code[from..];
            if let Some(list) = rest.strip_prefix('{') {
                // `use crate::{a::b, c}`: one level of braces is enough here.
                let end = list.find('}').unwrap_or(list.len());
                for item in list[..end].split(',') {
                    let path: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                        .collect();
                    let mut full = prefix.clone();
                    full.extend(path.split("::").filter(|s| !s.is_empty()).map(String::from));
                    out.push(full.join("::"));
                }
            } else {
                let path: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let mut full = prefix;
                full.extend(path.split("::").filter(|s| !s.is_empty()).map(String::from));
                out.push(full.join("::"));
            }
        }
    }
    out
}

/// The strongly connected components (more than one file) of a crate's
/// file-level import graph.
fn import_circles(src: &Path) -> Vec<Vec<String>> {
    let files: BTreeMap<String, PathBuf> = rust_files(src)
        .into_iter()
        .map(|f| (module_of(src, &f), f))
        .collect();
    let resolve = |path: &str| -> Option<String> {
        let segs: Vec<&str> = path.split("::").collect();
        (1..=segs.len())
            .rev()
            .map(|i| segs[..i].join("::"))
            .find(|m| files.contains_key(m))
    };
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let targets = references(&text, module)
            .iter()
            .filter_map(|r| resolve(r))
            .filter(|t| t != module)
            .collect();
        edges.insert(module.clone(), targets);
    }
    // Tarjan's algorithm, iteratively small enough to recurse.
    struct Tarjan<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        out: Vec<Vec<String>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: &str) {
            let i = self.index.len();
            self.index.insert(v.to_string(), i);
            self.low.insert(v.to_string(), i);
            self.stack.push(v.to_string());
            self.on.insert(v.to_string());
            for w in self.edges[v].clone() {
                if !self.index.contains_key(&w) {
                    self.visit(&w);
                    let lw = self.low[&w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on.contains(&w) {
                    let iw = self.index[&w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(&w);
                    let done = w == v;
                    comp.push(w);
                    if done {
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
    let mut t = Tarjan {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn the_import_graph_finds_a_circle_when_there_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::B;\n").unwrap();
    std::fs::write(src.join("b.rs"), "use super::{c::C, a};\n").unwrap();
    std::fs::write(src.join("c.rs"), "pub fn f() { crate::a::g() }\n").unwrap();
    assert_eq!(import_circles(src), vec![vec!["a", "b", "c"]]);
}

#[test]
fn no_import_circle_is_longer_than_three_files() {
    for krate in ["actors", "cli", "troupe", "remote"] {
        let circles = import_circles(&root().join("crates").join(krate).join("src"));
        let long: Vec<_> = circles.iter().filter(|c| c.len() > 3).collect();
        assert!(
            long.is_empty(),
            "crates/{krate}/src: import circles of more than three files: {long:?} \
             (docs/architecture.md lists the ones allowed)"
        );
    }
}

/// The words that would make a `--release` build behave differently from
/// the `cargo build` one in a way `.ci/run`'s hooks check could miss: code
/// compiled only with (or without) debug assertions, or depending on the
/// optimisation level. `.ci/run` builds its release binary at opt-level 0
/// on this guarantee.
fn profile_gates(text: &str) -> Vec<&'static str> {
    ["debug_assertions", "opt_level", "OPT_LEVEL"]
        .into_iter()
        .filter(|w| text.contains(w))
        .collect()
}

#[test]
fn a_profile_gate_is_found_when_there_is_one() {
    assert_eq!(
        profile_gates("#[cfg(not(debug_assertions))]\nfn f() {}"),
        ["debug_assertions"]
    );
    assert!(profile_gates("#[cfg(feature = \"test-hooks\")]\nfn f() {}").is_empty());
}

#[test]
fn no_library_or_binary_code_depends_on_the_build_profile() {
    let mut gated = Vec::new();
    for file in rust_files(&root().join("crates")) {
        // Sources only: tests and benches may look at their own profile.
        let rel = file.strip_prefix(root().join("crates")).unwrap();
        if !rel.components().any(|c| c.as_os_str() == "src") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let found = profile_gates(&text);
        if !found.is_empty() {
            gated.push(format!("{}: {found:?}", file.display()));
        }
    }
    // A build script could read the profile cargo gives it.
    for krate in std::fs::read_dir(root().join("crates")).unwrap() {
        let path = krate.unwrap().path().join("build.rs");
        if let Ok(text) = std::fs::read_to_string(&path)
            && (text.contains("PROFILE") || !profile_gates(&text).is_empty())
        {
            gated.push(format!("{} (reads the profile)", path.display()));
        }
    }
    assert!(
        gated.is_empty(),
        "these make a release build differ from a debug one, and .ci/run's \
         hooks check builds its release binary at opt-level 0 on the promise \
         that nothing does: {gated:?}"
    );
}
