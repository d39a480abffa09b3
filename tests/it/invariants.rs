//! The architecture's invariants that can be checked from the source tree itself
//! (ARCHITECTURE.md, "Invariants"): no async runtime in the lock file, `llm/` independent of
//! the agent layers, processes and `unsafe` confined to `exec/`, no printing from library
//! code, the process environment read only where the docs say, top-level modules in layers
//! without a cycle, and no circle between the files inside a folder.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    support::repo_root().to_path_buf()
}

/// Every `.rs` file under `dir`, with its path relative to the crate root.
fn rust_files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).expect("readable source dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(root())
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push((rel, fs::read_to_string(&path).expect("utf-8 source")));
            }
        }
    }
    out.sort();
    out
}

/// The code of a file without its unit-test modules and comment lines, for checks that
/// concern what the library does at run time.
fn library_code(text: &str) -> String {
    let code = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_test_file(path: &str) -> bool {
    path.ends_with("/tests.rs") || path.contains("/tests/")
}

#[test]
fn no_async_runtime_is_in_the_lock_file() {
    let lock = fs::read_to_string(root().join("Cargo.lock")).expect("Cargo.lock is committed");
    for runtime in [
        "tokio",
        "async-std",
        "smol",
        "futures-executor",
        "async-io",
        "async-executor",
    ] {
        assert!(
            !lock.contains(&format!("name = \"{runtime}\"")),
            "{runtime} is in Cargo.lock"
        );
    }
}

#[test]
fn llm_never_imports_the_agent_layers() {
    for (path, text) in rust_files(&root().join("src/llm")) {
        // Doc links may point up to the layers that use llm; code may not.
        let code = library_code(&text);
        for layer in ["tools", "session", "exec", "profiles", "prompt"] {
            assert!(
                !code.contains(&format!("crate::{layer}")),
                "{path} uses crate::{layer}"
            );
        }
    }
}

#[test]
fn only_exec_spawns_processes() {
    for (path, text) in rust_files(&root().join("src")) {
        if path.starts_with("src/exec/") || is_test_file(&path) {
            continue;
        }
        let code = library_code(&text);
        assert!(
            !code.contains("Command::new") && !code.contains("process::Command"),
            "{path} spawns a process"
        );
    }
}

#[test]
fn unsafe_code_is_only_in_exec_and_every_block_says_why() {
    // The compiler holds the line too: the crate root denies `unsafe`, and only modules of
    // `exec/` allow it again, each with a line saying why.
    let lib = fs::read_to_string(root().join("src/lib.rs")).expect("lib.rs");
    assert!(
        lib.contains("\n#![deny(unsafe_code)]\n"),
        "lib.rs denies unsafe_code"
    );
    for (path, text) in rust_files(&root().join("src")) {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.contains("allow(unsafe_code)") {
                assert!(
                    path.starts_with("src/exec/"),
                    "{path}:{} allows unsafe_code outside exec/",
                    i + 1
                );
                assert!(
                    i > 0 && lines[i - 1].trim_start().starts_with("// unsafe: "),
                    "{path}:{} allows unsafe_code without a `// unsafe: why` line above",
                    i + 1
                );
            }
        }
    }
    for (path, text) in rust_files(&root().join("src")) {
        let code = library_code(&text);
        let has_unsafe =
            code.contains("unsafe {") || code.contains("unsafe fn") || code.contains("unsafe impl");
        if !path.starts_with("src/exec/") {
            assert!(!has_unsafe, "{path} contains unsafe code");
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.contains("unsafe {") && !line.trim_start().starts_with("//") {
                let window = &lines[i.saturating_sub(6)..=i];
                assert!(
                    window.iter().any(|l| l.contains("SAFETY:")),
                    "{path}:{} has an unsafe block without a SAFETY note",
                    i + 1
                );
            }
        }
    }
}

#[test]
fn library_code_never_prints() {
    for (path, text) in rust_files(&root().join("src")) {
        if is_test_file(&path) {
            continue;
        }
        let code = library_code(&text);
        for mac in ["println!", "eprintln!", "print!(", "eprint!(", "dbg!("] {
            assert!(!code.contains(mac), "{path} uses {mac}");
        }
    }
}

#[test]
fn the_process_environment_is_read_only_where_documented() {
    // from_env() constructors, LocalExecutionEnvironment::new (what commands inherit,
    // filtered), the ripgrep lookup on PATH and the core variables MCP servers start with.
    let allowed = [
        "src/llm/client.rs",
        "src/exec/local/mod.rs",
        "src/exec/process/child.rs",
        "src/exec/search/ripgrep.rs",
        // The transport process's environment (filtered like commands').
        "src/exec/remote/mod.rs",
    ];
    for (path, text) in rust_files(&root().join("src")) {
        if is_test_file(&path) || allowed.contains(&path.as_str()) {
            continue;
        }
        let code = library_code(&text);
        for read in ["env::var(", "env::vars(", "env::var_os(", "env::vars_os("] {
            assert!(
                !code.contains(read),
                "{path} reads the environment ({read})"
            );
        }
        for write in ["env::set_var(", "env::remove_var(", "set_current_dir("] {
            assert!(
                !code.contains(write),
                "{path} mutates process state ({write})"
            );
        }
    }
}

/// The layers of the crate, lowest first: a top-level module may use its own layer and the
/// ones below, never one above. A new top-level module gets a row here.
const LAYERS: &[(&str, u32)] = &[
    ("cancel", 0),
    ("error", 0),
    ("time", 0),
    ("sync", 0),
    ("base64", 0),
    ("sha256", 0),
    ("llm", 1),
    ("exec", 1),
    ("prompt", 2),
    ("tools", 2),
    ("profiles", 3),
    ("mcp", 3),
    ("session", 4),
    // The ACP server drives sessions; nothing below imports it.
    ("acp", 5),
    // Re-exports for the bench and tests, like the crate root: above everything.
    ("unstable", 9),
];

/// The top-level modules named by `crate::` paths in `code`, grouped imports included
/// (`use crate::{llm::Client, tools}`).
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // e.g. `my_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: split at commas outside nested braces.
            let mut depth = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && !c.is_whitespace() => {
                        start = false;
                        found.push(ident(&group[i..]));
                    }
                    _ => {}
                }
            }
        } else {
            found.push(ident(rest));
        }
    }
    found.retain(|name| !name.is_empty());
    found
}

/// For every top-level module of `src/`, the other top-level modules its library code uses.
fn module_imports() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut graph = std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
    for (path, text) in rust_files(&root().join("src")) {
        let rel = path.strip_prefix("src/").unwrap();
        let top = rel.split('/').next().unwrap().trim_end_matches(".rs");
        if top == "lib" || is_test_file(&path) {
            continue;
        }
        let uses = graph.entry(top.to_string()).or_default();
        for used in crate_paths(&library_code(&text)) {
            if used != top && LAYERS.iter().any(|(name, _)| *name == used) {
                uses.insert(used);
            }
        }
    }
    graph
}

fn layer(module: &str) -> u32 {
    LAYERS
        .iter()
        .find(|(name, _)| *name == module)
        .unwrap_or_else(|| panic!("src/{module} is not in LAYERS; give it a layer"))
        .1
}

#[test]
fn the_crate_paths_of_a_file_are_found_grouped_or_not() {
    let code = "use crate::llm::Client;\nuse crate::{exec::{A, B}, tools};\nlet x = \
                crate::time::now(); my_crate::session::X; $crate::cancel::Y";
    assert_eq!(
        crate_paths(code),
        ["llm", "exec", "tools", "time", "cancel"]
    );
}

#[test]
fn no_module_imports_from_a_higher_layer() {
    let graph = module_imports();
    assert!(graph.contains_key("session") && graph.contains_key("llm"));
    let mut upward = Vec::new();
    for (module, uses) in &graph {
        for used in uses {
            if layer(used) > layer(module) {
                upward.push(format!("{module} uses {used}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layering: {upward:?}"
    );
}

#[test]
fn no_cycle_between_top_level_modules() {
    let graph = module_imports();
    // Depth-first search from every module; a module met again on the current path closes a cycle.
    fn visit(
        module: &str,
        graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut cycle = path[at..].to_vec();
            cycle.push(module.to_string());
            return Some(cycle);
        }
        path.push(module.to_string());
        for used in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(used, graph, path) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    for module in graph.keys() {
        if let Some(cycle) = visit(module, &graph, &mut Vec::new()) {
            panic!("cycle between top-level modules: {}", cycle.join(" -> "));
        }
    }
}

/// The source files of `src/` as modules: each file's library code, the module path it
/// defines (`src/exec/process/mod.rs` → `exec::process`) and the paths its `use`
/// declarations bring in, so that a path can be followed to the file that defines it.
struct SourceTree {
    /// File → library code.
    code: std::collections::BTreeMap<String, String>,
    /// Module path → file.
    files: std::collections::BTreeMap<Vec<String>, String>,
    /// File → the names its `use` declarations bind, each with the path it names.
    uses: std::collections::BTreeMap<String, Vec<(String, Vec<String>)>>,
}

/// The module path of a file of `src/` (`src/lib.rs` is the crate root: an empty path).
fn module_of(path: &str) -> Vec<String> {
    let rel = path.strip_prefix("src/").unwrap().trim_end_matches(".rs");
    let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Expands the use tree at the start of `s` (`a::{b, c::{d as e, self}, f::*}`) into
/// `(bound name, full path)` pairs; returns them and the rest of `s`.
fn use_tree<'a>(s: &'a str, prefix: &[String], out: &mut Vec<(String, Vec<String>)>) -> &'a str {
    let mut path = prefix.to_vec();
    let mut s = s.trim_start();
    loop {
        if let Some(group) = s.strip_prefix('{') {
            s = group;
            loop {
                s = s.trim_start();
                if let Some(rest) = s.strip_prefix('}') {
                    return rest;
                }
                s = use_tree(s, &path, out).trim_start();
                s = s.strip_prefix(',').unwrap_or(s);
            }
        }
        if let Some(rest) = s.strip_prefix('*') {
            path.push("*".to_string());
            out.push(("*".to_string(), path));
            return rest;
        }
        let s2 = s.strip_prefix('$').unwrap_or(s);
        let name = ident_at(s2);
        if name.is_empty() {
            return s; // not a path: give up on this tree
        }
        s = s2[name.len()..].trim_start();
        if name != "self" {
            path.push(name.to_string());
        }
        if let Some(rest) = s.strip_prefix("::") {
            s = rest.trim_start();
            continue;
        }
        let bound = match s.strip_prefix("as") {
            Some(rest) if rest.starts_with(char::is_whitespace) => {
                let rest = rest.trim_start();
                let alias = ident_at(rest);
                s = &rest[alias.len()..];
                alias.to_string()
            }
            _ => path.last().cloned().unwrap_or_default(),
        };
        out.push((bound, path));
        return s;
    }
}

/// Every `use` declaration of `code`, expanded.
fn use_declarations(code: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("use ") {
        let before = code[..at].trim_end();
        let starts_statement = before.is_empty()
            || before.ends_with([';', '{', '}'])
            || before.ends_with("pub")
            || before.ends_with(')') && before.rsplit_once("pub(").is_some();
        let follows_ident = code[..at]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if starts_statement && !follows_ident {
            use_tree(&code[at + 4..], &[], &mut out);
        }
    }
    out
}

/// Every path of `code` that starts with `crate::`, `super::` or `self::`, grouped uses
/// expanded, plus the paths of its `use` declarations.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = use_declarations(code).into_iter().map(|(_, p)| p).collect();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            let before = code[..at].chars().last();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue; // `my_crate::`, `Self::`
            }
            let mut rest = &code[at..];
            let mut path = Vec::new();
            loop {
                let name = ident_at(rest);
                if name.is_empty() {
                    break;
                }
                path.push(name.to_string());
                rest = &rest[name.len()..];
                match rest.strip_prefix("::") {
                    Some(more) => rest = more,
                    None => break,
                }
            }
            out.push(path);
        }
    }
    out
}

impl SourceTree {
    fn read() -> SourceTree {
        let mut tree = SourceTree {
            code: Default::default(),
            files: Default::default(),
            uses: Default::default(),
        };
        for (path, text) in rust_files(&root().join("src")) {
            if is_test_file(&path) {
                continue;
            }
            let code = library_code(&text);
            tree.files.insert(module_of(&path), path.clone());
            tree.uses.insert(path.clone(), use_declarations(&code));
            tree.code.insert(path, code);
        }
        tree
    }

    /// The file that defines what `path` names when `file` uses it: the deepest module
    /// file the path walks into, then through that module's `use` declarations (a
    /// re-export or an import is followed to its source). `None` for paths outside the
    /// crate.
    fn resolve(&self, file: &str, path: &[String], depth: usize) -> Option<String> {
        let here = module_of(file);
        let (mut module, mut rest) = match path.first().map(String::as_str) {
            Some("crate") => (Vec::new(), &path[1..]),
            Some("self") => (here, &path[1..]),
            Some("super") => {
                let ups = path.iter().take_while(|s| *s == "super").count();
                (
                    here[..here.len().saturating_sub(ups)].to_vec(),
                    &path[ups..],
                )
            }
            // A path relative to the module itself names one of its child modules.
            Some(first)
                if self
                    .files
                    .contains_key(&[here.clone(), vec![first.to_string()]].concat()) =>
            {
                (here, path)
            }
            _ => return None,
        };
        while let Some(next) = rest.first() {
            let child = [module.clone(), vec![next.clone()]].concat();
            if !self.files.contains_key(&child) {
                break;
            }
            module = child;
            rest = &rest[1..];
        }
        let target = self.files.get(&module)?.clone();
        let Some(name) = rest.first().filter(|name| *name != "*") else {
            return Some(target);
        };
        if depth < 8 {
            let imported = self.uses[&target]
                .iter()
                .filter(|(bound, _)| bound == name)
                .find_map(|(_, source)| self.resolve(&target, source, depth + 1));
            if imported.is_some() {
                return imported;
            }
        }
        Some(target)
    }

    /// File → the files it uses. A folder's `mod.rs` is the folder's face: its children
    /// may use what it defines and it uses its children, so the edges between a file and
    /// the `mod.rs` of a folder it is in are not counted. Every other edge is one between
    /// files of one folder, or between a file and a file or sub-folder of a folder around
    /// it.
    fn file_imports(
        &self,
    ) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
        let inside = |inner: &[String], outer: &[String]| {
            inner.len() > outer.len() && inner[..outer.len()] == *outer
        };
        let mut graph =
            std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
        for (file, code) in &self.code {
            let uses = graph.entry(file.clone()).or_default();
            for path in paths_in(code) {
                let Some(target) = self.resolve(file, &path, 0) else {
                    continue;
                };
                let (from, to) = (module_of(file), module_of(&target));
                if target != *file && !inside(&from, &to) && !inside(&to, &from) {
                    uses.insert(target);
                }
            }
        }
        graph
    }
}

/// A cycle of `graph` through `node`'s descendants, if any (depth-first; a node met again
/// on the current path closes it).
fn find_cycle(
    node: &str,
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    path: &mut Vec<String>,
    done: &mut std::collections::BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|n| n == node) {
        let mut cycle = path[at..].to_vec();
        cycle.push(node.to_string());
        return Some(cycle);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.to_string());
    for next in graph.get(node).into_iter().flatten() {
        if let Some(cycle) = find_cycle(next, graph, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(node.to_string());
    None
}

#[test]
fn use_trees_are_expanded_and_paths_followed_to_the_file_that_defines_them() {
    let path = |p: &str| -> Vec<String> { p.split("::").map(str::to_string).collect() };
    let bound = |name: &str, p: &str| (name.to_string(), path(p));
    let code = "pub(crate) use super::{a::{B, c as d}, self as e, f::*};\nuse crate::x;\n\
                let y = super::super::g::h(); $crate::i::J;";
    assert_eq!(
        use_declarations(code),
        [
            bound("B", "super::a::B"),
            bound("d", "super::a::c"),
            bound("e", "super"),
            bound("*", "super::f::*"),
            bound("x", "crate::x"),
        ]
    );
    let found = paths_in(code);
    assert!(found.contains(&path("super::super::g::h")) && found.contains(&path("crate::i::J")));

    // Through a re-export to the defining file, and through a module's private import.
    let tree = SourceTree::read();
    assert_eq!(
        tree.resolve(
            "src/tools/mod.rs",
            &path("crate::session::SessionConfig"),
            0
        )
        .as_deref(),
        Some("src/session/config.rs")
    );
    assert_eq!(
        tree.resolve("src/session/worker.rs", &path("crate::sync::lock"), 0)
            .as_deref(),
        Some("src/sync.rs")
    );
    assert_eq!(
        tree.resolve("src/session/worker.rs", &path("super::Outcome"), 0)
            .as_deref(),
        Some("src/session/mod.rs")
    );
}

#[test]
fn no_cycle_between_files_inside_a_folder() {
    let graph = SourceTree::read().file_imports();
    assert!(graph["src/session/worker.rs"].contains("src/session/compact.rs"));
    let mut done = std::collections::BTreeSet::new();
    for file in graph.keys() {
        if let Some(cycle) = find_cycle(file, &graph, &mut Vec::new(), &mut done) {
            // Named from the smallest folder that holds every file of the cycle.
            let folder = cycle.iter().skip(1).fold(
                cycle[0].rsplit_once('/').unwrap().0.to_string(),
                |folder, file| {
                    let mut folder = folder;
                    while !file.starts_with(&format!("{folder}/")) {
                        folder = folder.rsplit_once('/').unwrap().0.to_string();
                    }
                    folder
                },
            );
            let names: Vec<&str> = cycle.iter().map(|file| &file[folder.len() + 1..]).collect();
            panic!("cycle between files in {folder}/: {}", names.join(" -> "));
        }
    }
}

#[test]
fn the_code_map_names_every_source_file() {
    let doc = fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let start = doc.find("## Code map").expect("a code map section");
    let map = &doc[start..];
    let map = &map[..map[2..].find("\n## ").map_or(map.len(), |end| end + 2)];
    let mut missing = Vec::new();
    let mut stack = vec![root().join("src")];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("readable source dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if !map.contains(&format!("`{rel}`")) {
                missing.push(rel);
            }
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "not in ARCHITECTURE.md's code map: {missing:?}"
    );
}

/// The names in `text` after each occurrence of `marker`, up to the next non-identifier char.
fn names_after(text: &str, marker: &str) -> std::collections::BTreeSet<String> {
    text.match_indices(marker)
        .map(|(at, _)| {
            let rest = &text[at + marker.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            rest[..end].to_string()
        })
        .collect()
}

#[test]
fn every_forwarding_environment_forwards_or_writes_every_trait_method() {
    let exec = fs::read_to_string(root().join("src/exec/mod.rs")).expect("exec/mod.rs");
    let start = exec
        .find("pub trait ExecutionEnvironment")
        .expect("the trait");
    let body = &exec[start..start + exec[start..].find("\n}\n").expect("trait end")];
    let methods = names_after(body, "    fn ");
    assert!(methods.contains("read_file") && methods.contains("max_command_timeout"));

    let forward = fs::read_to_string(root().join("src/exec/forward.rs")).expect("forward.rs");
    assert_eq!(
        names_after(&forward, "(@method $to:tt "),
        methods,
        "forward_execution_environment! has one arm per trait method"
    );

    // Every impl that forwards through the macro (a decorator) must name every method: a
    // provided method left out would silently take the trait's default.
    let mut decorators = 0;
    for (path, text) in rust_files(&root().join("src")) {
        for (at, _) in text.match_indices("\nimpl") {
            let block = &text[at + 1..];
            if !block[..block.find('{').unwrap_or(0)].contains("ExecutionEnvironment for ") {
                continue;
            }
            let block = &block[..block.find("\n}\n").unwrap_or(block.len())];
            let Some(call) = block.find("forward_execution_environment!(") else {
                continue;
            };
            decorators += 1;
            let list = &block[call..];
            let list = &list[list.find("=>").expect("a method list")..list.find(");").unwrap()];
            let mut named: std::collections::BTreeSet<String> = list
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect();
            named.extend(names_after(block, "    fn "));
            let missing: Vec<_> = methods.difference(&named).collect();
            assert!(
                missing.is_empty(),
                "{path}: {missing:?} neither written nor forwarded"
            );
        }
    }
    assert!(decorators >= 5, "found {decorators} forwarding impls");
}
