//! The edit_file tool on real files: the data-driven cases in tests/data/edit_file.

use std::fs;

use agentloop::llm::ToolCall;
use agentloop::tools::edit_file;
use serde_json::Value;

use support::tools_tree::data_dir;
use support::tree_cases::{check_every_case, run_tree_case};

#[test]
fn every_edit_file_data_case_gives_its_expected_tree_or_error() {
    // A case: `input/` (optional), `args.json` (the tool arguments), and `expected/` or
    // `error`, and optionally `output`.
    check_every_case(&data_dir("edit_file"), 20, |case| {
        let arguments: Value = serde_json::from_str(
            &fs::read_to_string(case.join("args.json")).expect("read args.json"),
        )
        .expect("args.json is JSON");
        let call = ToolCall::new("call-1", "edit_file", arguments);
        run_tree_case(case, edit_file(), &call)
    });
}
