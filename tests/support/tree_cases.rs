//! Data-driven file-tool cases compared as whole trees: a case directory holds `input/`
//! (optional), the call, and `expected/` or `error`; an optional `output` file lists lines
//! the success message must contain. Runs real tools on real temp directories.

use std::fs;
use std::path::Path;

use agentloop::llm::ToolCall;
use agentloop::tools::RegisteredTool;

use crate::tools_tree::{cases, copy_tree, describe_difference, run_tool, snapshot};

/// Runs `call` against `tool` on a copy of `case/input` and compares the outcome with the
/// case: with an `error` file, the call must fail with that text and change nothing;
/// otherwise it must succeed, say every line of `output`, and leave the tree of
/// `expected/` (an empty tree when there is none).
pub fn run_tree_case(case: &Path, tool: RegisteredTool, call: &ToolCall) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_tree(&case.join("input"), dir.path());
    let before = snapshot(dir.path());
    let outcome = run_tool(tool, dir.path(), call);
    let after = snapshot(dir.path());
    if let Ok(wanted) = fs::read_to_string(case.join("error")) {
        let wanted = wanted.trim_end_matches('\n');
        if !outcome.is_error {
            return Err(format!(
                "expected an error containing {wanted:?}, got success: {}",
                outcome.text
            ));
        }
        if !outcome.text.contains(wanted) {
            return Err(format!("error text lacks {wanted:?}:\n{}", outcome.text));
        }
        let difference = describe_difference(&after, &before);
        if !difference.is_empty() {
            return Err(format!("a failed call changed the tree:\n{difference}"));
        }
        return Ok(());
    }
    if outcome.is_error {
        return Err(format!("unexpected error: {}", outcome.text));
    }
    if let Ok(wanted) = fs::read_to_string(case.join("output")) {
        for line in wanted.lines().filter(|l| !l.is_empty()) {
            if !outcome.text.contains(line) {
                return Err(format!("output lacks {line:?}:\n{}", outcome.text));
            }
        }
    }
    let difference = describe_difference(&after, &snapshot(&case.join("expected")));
    if difference.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "tree differs:\n{difference}\noutput: {}",
            outcome.text
        ))
    }
}

/// Runs every case directory under `root` (at least `at_least` of them) with `run` and
/// panics with the failures of all that failed.
pub fn check_every_case(root: &Path, at_least: usize, run: impl Fn(&Path) -> Result<(), String>) {
    let all = cases(root);
    assert!(all.len() >= at_least, "only {} cases", all.len());
    let failures: Vec<String> = all
        .iter()
        .filter_map(|case| {
            run(case)
                .err()
                .map(|e| format!("== {}: {e}", case.file_name().unwrap().to_string_lossy()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}
