//! The edit_file tool on real files: the data-driven cases in tests/data/edit_file.

use std::fs;
use std::path::Path;

use agentloop::llm::ToolCall;
use agentloop::tools::edit_file;
use serde_json::Value;

use crate::tools_tree::{cases, copy_tree, data_dir, describe_difference, run_tool, snapshot};

/// Runs one case directory: `input/` (optional), `args.json` (the tool arguments), and
/// `expected/` or `error`. An optional `output` file holds lines the success message must
/// contain.
fn run_case(case: &Path) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_tree(&case.join("input"), dir.path());
    let before = snapshot(dir.path());
    let arguments: Value =
        serde_json::from_str(&fs::read_to_string(case.join("args.json")).expect("read args.json"))
            .expect("args.json is JSON");
    let call = ToolCall::new("call-1", "edit_file", arguments);
    let outcome = run_tool(edit_file::tool(), dir.path(), &call);
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
            return Err(format!("a failed edit changed the tree:\n{difference}"));
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

#[test]
fn every_edit_file_data_case_gives_its_expected_tree_or_error() {
    let all = cases(&data_dir("edit_file"));
    assert!(all.len() >= 20, "only {} cases", all.len());
    let failures: Vec<String> = all
        .iter()
        .filter_map(|case| {
            run_case(case)
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
