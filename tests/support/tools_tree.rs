//! Helpers for the file-tool tests: copy a tree into a temp dir, snapshot a tree, run one
//! tool call through a registry on a real `LocalExecutionEnvironment`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use agentloop::CancelToken;
use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::ToolCall;
use agentloop::tools::{RegisteredTool, ToolContext, ToolRegistry};
use agentloop::unstable::{ToolOutcome, prepare_call};

/// A tree as every relative path mapped to `None` (a directory) or the file's bytes.
pub type Snapshot = BTreeMap<String, Option<Vec<u8>>>;

/// The path of `tests/data/<sub>`.
pub fn data_dir(sub: &str) -> PathBuf {
    crate::data_dir().join(sub)
}

/// The snapshot of `root` (empty when it does not exist). Symlinks are followed.
pub fn snapshot(root: &Path) -> Snapshot {
    let mut tree = Snapshot::new();
    if !root.exists() {
        return tree;
    }
    for entry in walkdir::WalkDir::new(root).follow_links(true).min_depth(1) {
        let entry = entry.expect("walk the tree");
        let relative = entry
            .path()
            .strip_prefix(root)
            .expect("inside the root")
            .to_string_lossy()
            .into_owned();
        let content = if entry.file_type().is_dir() {
            None
        } else {
            Some(fs::read(entry.path()).expect("read a file of the tree"))
        };
        tree.insert(relative, content);
    }
    tree
}

/// Copies the tree at `from` (if it exists) into `to`.
pub fn copy_tree(from: &Path, to: &Path) {
    if !from.exists() {
        return;
    }
    for entry in walkdir::WalkDir::new(from).min_depth(1) {
        let entry = entry.expect("walk the tree");
        let target = to.join(entry.path().strip_prefix(from).expect("inside the root"));
        if entry.file_type().is_dir() {
            fs::create_dir_all(&target).expect("create a directory");
        } else {
            fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

/// A readable difference between two snapshots, empty when they are equal.
pub fn describe_difference(actual: &Snapshot, expected: &Snapshot) -> String {
    let mut out = String::new();
    for (path, content) in expected {
        match actual.get(path) {
            None => out.push_str(&format!("missing: {path}\n")),
            Some(found) if found != content => out.push_str(&format!(
                "differs: {path}\n  expected: {:?}\n  actual:   {:?}\n",
                content.as_deref().map(String::from_utf8_lossy),
                found.as_deref().map(String::from_utf8_lossy)
            )),
            Some(_) => {}
        }
    }
    for path in actual.keys() {
        if !expected.contains_key(path) {
            out.push_str(&format!("unexpected: {path}\n"));
        }
    }
    out
}

/// Runs `call` against `tool` in `working_dir` and returns the outcome.
pub fn run_tool(tool: RegisteredTool, working_dir: &Path, call: &ToolCall) -> ToolOutcome {
    let env = LocalExecutionEnvironment::new(working_dir).unwrap();
    let mut registry = ToolRegistry::new();
    registry.register(tool);
    let cancel = CancelToken::new();
    let ctx = ToolContext::new(&env, &call.id, &cancel);
    match prepare_call(&registry, call) {
        Ok(prepared) => prepared.run(&ctx),
        Err(text) => ToolOutcome {
            text,
            is_error: true,
            image: None,
        },
    }
}

/// The case directories under `root`, sorted by name.
pub fn cases(root: &Path) -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = fs::read_dir(root)
        .unwrap_or_else(|e| panic!("read {}: {e}", root.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_dir())
        .collect();
    cases.sort();
    cases
}
