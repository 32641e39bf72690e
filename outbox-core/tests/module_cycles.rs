//! Modules should form layers that read bottom-up: this test lists the
//! import circles between the modules of every crate of the workspace, at
//! every level, and fails on any circle that is not on the list of known
//! ones below, and on a known one that is gone (so the list only shrinks).
//!
//! It reads the sources: a file's module path comes from its path; its
//! dependencies are the `crate::…` and `super::…` paths it names (in `use`
//! items and in code, comments left out), each resolved to the module that
//! defines the named item (a re-export in a `mod.rs` is seen through), or
//! to the module the path itself names. A module's own submodules, its
//! ancestors and its tests do not count.
//!
//! A module folder counts as one module beside its siblings: the files
//! under `fence/` are `fence` to `message.rs`, so `message.rs` importing
//! a file of `fence/` while `fence/mod.rs` imports `message.rs` is a circle
//! (`fence message`), and so is `admin/ops.rs` importing a label from
//! `admin/dashboard/` while a file of `admin/dashboard/` imports `ops`
//! (`admin::dashboard admin::ops`). Each import is an edge between the two
//! siblings under the deepest module holding both ends: `a::x::y` importing
//! `a::z::w` is the edge `a::x` → `a::z`; within one folder, between its
//! files.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Circles allowed, each as `crate: a b` (its sibling modules, sorted,
/// joined by ` `): none; a new circle fails this test.
const KNOWN: &[&str] = &[];

/// The crates whose `src` the test reads, relative to the workspace root.
const CRATES: &[&str] = &[
    "outbox-core",
    "outbox-core/testing",
    "outbox-seaorm",
    "outbox-seaorm/derive",
    "outbox-axum",
    "migrations",
    "example-app",
];

/// One source file as a module.
struct Module {
    /// `drain::round`, or `` for the crate root.
    path: Vec<String>,
    /// The text, comments removed.
    code: String,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of `file` under `src`: `a/b.rs` and `a/b/mod.rs` are
/// `a::b`; `lib.rs`, `main.rs` are the root; `bin/x.rs` is skipped.
fn module_path(src: &Path, file: &Path) -> Option<Vec<String>> {
    let relative = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    let last = parts.pop()?;
    match last.as_str() {
        "lib.rs" | "main.rs" | "mod.rs" => {}
        name => parts.push(name.trim_end_matches(".rs").to_owned()),
    }
    Some(parts)
}

/// `text` without `//` and `/* */` comments (doc comments included) and
/// without the contents of string literals.
fn strip(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if bytes[i..].starts_with(b"/*") {
            i += 2;
            while i < bytes.len() && !bytes[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if bytes[i] == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                if bytes[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if bytes[i] == b'\'' && i + 2 < bytes.len() && bytes[i + 2] == b'\'' {
            // A char literal such as '"'.
            i += 3;
        } else {
            out.push(bytes[i] as char);
            i += 1;
        }
    }
    out
}

/// The code before `#[cfg(test)]`: a module's unit tests may reach
/// anywhere.
fn without_tests(code: &str) -> &str {
    code.find("#[cfg(test)]\nmod tests")
        .map_or(code, |at| &code[..at])
}

/// Items a module defines: `struct`, `enum`, `fn`, `trait`, `type`,
/// `const`, `static`, `macro_rules!` names.
fn definitions(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '!'))
        .filter(|w| !w.is_empty())
        .collect();
    for pair in words.windows(2) {
        if matches!(
            pair[0],
            "struct" | "enum" | "fn" | "trait" | "type" | "const" | "static" | "macro_rules!"
        ) {
            names.insert(pair[1].to_owned());
        }
    }
    names
}

/// Every `crate::a::b` / `super::a` path in `code`, expanded over `{…}`
/// groups one level deep, as segments relative to the crate root.
fn paths(code: &str, here: &[String], is_dir_module: bool) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let rest: String = chars[i..chars.len().min(i + 7)].iter().collect();
        let start_ok = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        let (base, skip) = if start_ok && rest.starts_with("crate::") {
            (Vec::new(), 7)
        } else if start_ok && rest.starts_with("super::") {
            // `super` of a file module `a::b` is `a`; of `a/b/mod.rs` too.
            let mut base = here.to_vec();
            if !is_dir_module || !base.is_empty() {
                base.pop();
            }
            let mut j = i + 7;
            // `super::super::`
            while chars[j..].iter().take(7).collect::<String>() == "super::" {
                base.pop();
                j += 7;
            }
            (base, j - i)
        } else {
            i += 1;
            continue;
        };
        let mut j = i + skip;
        let mut prefix = base.clone();
        loop {
            let ident: String = chars[j..]
                .iter()
                .take_while(|c| c.is_alphanumeric() || **c == '_')
                .collect();
            if ident.is_empty() {
                break;
            }
            j += ident.len();
            prefix.push(ident);
            if chars[j..].iter().take(2).collect::<String>() == "::" {
                j += 2;
            } else {
                break;
            }
        }
        if chars.get(j) == Some(&'{') {
            // A group: each member, one level deep.
            let end = chars[j..]
                .iter()
                .position(|c| *c == '}')
                .map_or(j, |p| j + p);
            let inner: String = chars[j + 1..end].iter().collect();
            for member in inner.split(',') {
                let mut path = prefix.clone();
                for segment in member.split("::") {
                    let ident: String = segment
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !ident.is_empty() && ident != "self" {
                        path.push(ident);
                    }
                }
                found.push(path);
            }
            j = end;
        } else {
            found.push(prefix);
        }
        i = j.max(i + 1);
    }
    found
}

/// The module a path depends on: the deepest module it names, or, when
/// the next segment is an item that module only re-exports, the module
/// that defines it.
fn resolve(
    path: &[String],
    modules: &BTreeMap<Vec<String>, BTreeSet<String>>,
) -> Option<Vec<String>> {
    let mut deepest = None;
    for len in (0..=path.len()).rev() {
        if modules.contains_key(&path[..len]) {
            deepest = Some(len);
            break;
        }
    }
    let len = deepest?;
    let module = path[..len].to_vec();
    let Some(item) = path.get(len) else {
        return Some(module);
    };
    if modules[&module].contains(item) {
        return Some(module);
    }
    // A re-export: the module of the subtree that defines it.
    let definers: Vec<&Vec<String>> = modules
        .iter()
        .filter(|(candidate, names)| candidate.starts_with(&module) && names.contains(item))
        .map(|(candidate, _)| candidate)
        .collect();
    match definers.as_slice() {
        [only] => Some((*only).clone()),
        _ => Some(module),
    }
}

/// Strongly connected components of more than one module (Tarjan).
fn circles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<BTreeSet<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        next: usize,
        found: Vec<BTreeSet<Vec<String>>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a Vec<String>) {
        state.index.insert(node, state.next);
        state.low.insert(node, state.next);
        state.next += 1;
        state.stack.push(node);
        state.on_stack.insert(node);
        if let Some(targets) = state.edges.get(node) {
            for target in targets {
                let Some((target, _)) = state.edges.get_key_value(target) else {
                    continue;
                };
                if !state.index.contains_key(target) {
                    visit(state, target);
                    let low = state.low[target].min(state.low[node]);
                    state.low.insert(node, low);
                } else if state.on_stack.contains(target) {
                    let low = state.index[target].min(state.low[node]);
                    state.low.insert(node, low);
                }
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = BTreeSet::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(top);
                component.insert(top.clone());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.found
}

/// The sibling modules an import from `from` to `to` joins: the children,
/// under the deepest module holding both, that hold each end (the file
/// modules themselves when they share a folder). `None` when one holds the
/// other.
fn siblings(from: &[String], to: &[String]) -> Option<(Vec<String>, Vec<String>)> {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    if common == from.len() || common == to.len() {
        return None;
    }
    Some((from[..=common].to_vec(), to[..=common].to_vec()))
}

/// `a::b`, or `(root)`.
fn module_name(path: &[String]) -> String {
    if path.is_empty() {
        "(root)".to_owned()
    } else {
        path.join("::")
    }
}

/// The imports between the file modules of one crate, each from the
/// importing module to the module that defines what it names.
fn file_edges(root: &Path, name: &str) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = root.join(name).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut modules = Vec::new();
    for file in files {
        let Some(path) = module_path(&src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        let is_dir_module = file.file_name().is_some_and(|n| n == "mod.rs")
            || file
                .file_name()
                .is_some_and(|n| n == "lib.rs" || n == "main.rs");
        let code = strip(&text);
        modules.push((path, is_dir_module, without_tests(&code).to_owned()));
    }
    let defined: BTreeMap<Vec<String>, BTreeSet<String>> = modules
        .iter()
        .map(|(path, _, code)| (path.clone(), definitions(code)))
        .collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (path, is_dir_module, code) in &modules {
        let module = Module {
            path: path.clone(),
            code: code.clone(),
        };
        let targets = edges.entry(module.path.clone()).or_default();
        for named in paths(&module.code, &module.path, *is_dir_module) {
            let Some(target) = resolve(&named, &defined) else {
                continue;
            };
            // Itself, its own submodules and its ancestors (a `mod.rs` is
            // a facade its children are declared in) do not count.
            if target.starts_with(&module.path) || module.path.starts_with(&target) {
                continue;
            }
            targets.insert(target);
        }
    }
    edges
}

/// The circles of a crate whose file modules import as `edges`, at every
/// level (see the module docs), each as `crate: a b c` (its sorted sibling
/// modules), then the imports that close it (`a::x → b::y`).
fn level_circles(name: &str, edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<String> {
    // The graph of siblings, and for each of its edges the file imports
    // behind it.
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    let mut behind: BTreeMap<(Vec<String>, Vec<String>), Vec<String>> = BTreeMap::new();
    for (from, targets) in edges {
        for to in targets {
            let Some((a, b)) = siblings(from, to) else {
                continue;
            };
            graph.entry(b.clone()).or_default();
            graph.entry(a.clone()).or_default().insert(b.clone());
            behind.entry((a, b)).or_default().push(format!(
                "{} → {}",
                module_name(from),
                module_name(to)
            ));
        }
    }
    circles(&graph)
        .into_iter()
        .map(|component| {
            let names: Vec<String> = component.iter().map(|p| module_name(p)).collect();
            let imports: Vec<String> = behind
                .iter()
                .filter(|((a, b), _)| component.contains(a) && component.contains(b))
                .flat_map(|(_, imports)| imports.iter().cloned())
                .collect();
            format!(
                "{name}: {} (imports: {})",
                names.join(" "),
                imports.join(", ")
            )
        })
        .collect()
}

/// The circles of one crate (see [`level_circles`]).
fn crate_circles(root: &Path, name: &str) -> Vec<String> {
    level_circles(name, &file_edges(root, name))
}

/// A circle as [`KNOWN`] names it: without the imports behind it.
fn circle_key(circle: &str) -> &str {
    circle.split(" (imports: ").next().unwrap_or(circle)
}

#[test]
fn no_import_circle_beyond_the_known_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let found: Vec<String> = CRATES
        .iter()
        .flat_map(|name| crate_circles(root, name))
        .collect();
    let known: BTreeSet<&str> = KNOWN.iter().copied().collect();
    let new: Vec<&String> = found
        .iter()
        .filter(|circle| !known.contains(circle_key(circle)))
        .collect();
    let gone: Vec<&&str> = known
        .iter()
        .filter(|key| !found.iter().any(|circle| circle_key(circle) == **key))
        .collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "import circles between modules, one a line:\n  new (break them):\n{}\n  gone (remove them from KNOWN):\n{}",
        new.iter().map(|c| format!("    {c}")).collect::<Vec<_>>().join("\n"),
        gone.iter().map(|c| format!("    {c}")).collect::<Vec<_>>().join("\n"),
    );
}

#[test]
fn a_circle_is_found_and_a_layer_is_not() {
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    let m = |name: &str| vec![name.to_owned()];
    edges.entry(m("a")).or_default().insert(m("b"));
    edges.entry(m("b")).or_default().insert(m("c"));
    edges.entry(m("c")).or_default().insert(m("a"));
    edges.entry(m("d")).or_default().insert(m("a"));
    let found = circles(&edges);
    assert_eq!(found, vec![[m("a"), m("b"), m("c")].into_iter().collect()]);
    let code = strip("use super::{deliver::X, observe}; // crate::nope\nlet s = \"crate::nope\";");
    let here = vec!["drain".to_owned(), "round".to_owned()];
    assert_eq!(
        paths(&code, &here, false),
        vec![
            vec!["drain".to_owned(), "deliver".to_owned(), "X".to_owned()],
            vec!["drain".to_owned(), "observe".to_owned()],
        ]
    );
}

#[test]
fn a_folder_is_one_module_beside_its_siblings() {
    let m = |path: &str| -> Vec<String> { path.split("::").map(str::to_owned).collect() };
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    // `message.rs` → `fence/token.rs`, `fence/mod.rs` → `message.rs`: no
    // circle between files, one between `message` and the folder `fence`.
    edges
        .entry(m("message"))
        .or_default()
        .insert(m("fence::token"));
    edges.entry(m("fence")).or_default().insert(m("message"));
    // One level down: `admin/ops.rs` → `admin/dashboard/labels.rs`,
    // `admin/dashboard/page.rs` → `admin/ops.rs`.
    edges
        .entry(m("admin::ops"))
        .or_default()
        .insert(m("admin::dashboard::labels"));
    edges
        .entry(m("admin::dashboard::page"))
        .or_default()
        .insert(m("admin::ops"));
    // Layers: `drain/round.rs` → `store/drain.rs` only.
    edges
        .entry(m("drain::round"))
        .or_default()
        .insert(m("store::drain"));
    let found = level_circles("c", &edges);
    assert_eq!(
        found,
        vec![
            "c: admin::dashboard admin::ops (imports: admin::dashboard::page → admin::ops, \
             admin::ops → admin::dashboard::labels)"
                .to_owned(),
            "c: fence message (imports: fence → message, message → fence::token)".to_owned(),
        ]
    );
    assert_eq!(
        siblings(&m("a::x::y"), &m("a::z::w")),
        Some((m("a::x"), m("a::z")))
    );
    assert_eq!(siblings(&m("a::x"), &m("a::x::y")), None);
}
