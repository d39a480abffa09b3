//! Benchmarks of the tools section: apply_patch on a 10,000-line file with 20 hunks,
//! edit_file on a 1 MB file, truncation of a 10 MB single line. Each figure is the median of
//! several runs on real files in a temp dir (through LocalExecutionEnvironment), or of the
//! pure function where the row says so.

use std::fs;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::ToolCall;
use agentloop::tools::{self, RegisteredTool, ToolContext, ToolRegistry};
use agentloop::unstable::{self, Operation, parse_patch, truncate_tool_output};
use serde_json::json;

use crate::{Row, ms};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// A 10,000-line file and a patch with 20 hunks spread over it (3 context lines each side,
/// one line replaced by two, an `@@` hint four lines above).
fn big_patch_case() -> (String, String) {
    let mut state = 0x9E37_79B9_7F4A_7C15;
    let lines: Vec<String> = (0..10_000)
        .map(|i| {
            format!(
                "    let value_{i:05} = compute({}, \"text\");",
                xorshift(&mut state) % 1000
            )
        })
        .collect();
    let mut patch = String::from("*** Begin Patch\n*** Update File: big.rs\n");
    for hunk in 0..20 {
        let at = 100 + hunk * 490 + (xorshift(&mut state) % 200) as usize;
        patch.push_str(&format!("@@ {}\n", lines[at - 4]));
        for context in &lines[at - 3..at] {
            patch.push_str(&format!(" {context}\n"));
        }
        patch.push_str(&format!(
            "-{}\n+    changed({hunk});\n+    again({hunk});\n",
            lines[at]
        ));
        for context in &lines[at + 1..at + 4] {
            patch.push_str(&format!(" {context}\n"));
        }
    }
    patch.push_str("*** End Patch\n");
    (lines.join("\n") + "\n", patch)
}

fn run_tool(tool: RegisteredTool, env: &LocalExecutionEnvironment, call: &ToolCall) -> bool {
    let mut registry = ToolRegistry::new();
    registry.register(tool);
    let cancel = CancelToken::new();
    let ctx = ToolContext::new(env, &call.id, &cancel);
    let outcome = agentloop::unstable::prepare_call(&registry, call)
        .expect("valid call")
        .run(&ctx);
    !outcome.is_error
}

pub fn run() -> Vec<Row> {
    let mut rows = Vec::new();
    let dir = tempfile::tempdir().expect("temp dir");
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();

    // apply_patch: pure engine, then the tool end to end (read, plan, atomic write).
    let (original, patch) = big_patch_case();
    let parsed = parse_patch(&patch).expect("the generated patch parses");
    let Operation::Update { hunks, .. } = &parsed.operations[0] else {
        unreachable!("one update")
    };
    let engine = median(
        (0..20)
            .map(|_| {
                let start = Instant::now();
                let applied = unstable::apply_hunks("big.rs", &original, hunks).expect("applies");
                std::hint::black_box(applied);
                start.elapsed()
            })
            .collect(),
    );
    rows.push(Row {
        section: "tools",
        name: "apply_patch engine: 10,000 lines, 20 hunks (parse excluded)".into(),
        value: ms(engine),
        target: String::new(),
    });
    let call = ToolCall::new("b", "apply_patch", json!({ "patch": patch }));
    let tool_time = median(
        (0..20)
            .map(|_| {
                fs::write(dir.path().join("big.rs"), &original).expect("write input");
                let start = Instant::now();
                assert!(
                    run_tool(tools::apply_patch(), &env, &call),
                    "the patch applies"
                );
                start.elapsed()
            })
            .collect(),
    );
    rows.push(Row {
        section: "tools",
        name: "apply_patch tool: 10,000 lines, 20 hunks, read + write".into(),
        value: ms(tool_time),
        target: String::new(),
    });

    // edit_file on a 1 MB file: a unique exact match near the end, and a fuzzy
    // (indentation) match that scans the whole file line by line first.
    let mut state = 7;
    let mut content = String::new();
    let mut line = 0;
    while content.len() < 1_000_000 {
        content.push_str(&format!(
            "        item_{line:06}.update({});\n",
            xorshift(&mut state) % 10_000
        ));
        line += 1;
    }
    content.push_str("        final_marker();\n");
    fs::write(dir.path().join("big.py"), &content).expect("write input");
    let exact = ToolCall::new(
        "e",
        "edit_file",
        json!({"file_path": "big.py", "old_string": "        final_marker();\n", "new_string": "        final_marker(True);\n"}),
    );
    let fuzzy = ToolCall::new(
        "f",
        "edit_file",
        json!({"file_path": "big.py", "old_string": "    final_marker();", "new_string": "    final_marker(False);"}),
    );
    let engine = median(
        (0..10)
            .map(|_| {
                let start = Instant::now();
                let edit = unstable::plan_edit(
                    "big.py",
                    &content,
                    "        final_marker();\n",
                    "        final_marker(True);\n",
                    false,
                )
                .expect("the edit applies");
                std::hint::black_box(edit);
                start.elapsed()
            })
            .collect(),
    );
    rows.push(Row {
        section: "tools",
        name: format!(
            "edit_file engine: {:.1} MB text, exact match",
            content.len() as f64 / 1e6
        ),
        value: ms(engine),
        target: String::new(),
    });
    for (label, call) in [("exact match", &exact), ("indentation-fuzzy match", &fuzzy)] {
        let time = median(
            (0..10)
                .map(|_| {
                    let mut input = content.clone();
                    if label.starts_with("indentation") {
                        // No exact match: the file indents the line by two spaces, the old
                        // string by four, so only the line-based levels find it.
                        input = input.replace("        final_marker();", "  final_marker();");
                    }
                    fs::write(dir.path().join("big.py"), &input).expect("write input");
                    let start = Instant::now();
                    assert!(run_tool(tools::edit_file(), &env, call), "the edit applies");
                    start.elapsed()
                })
                .collect(),
        );
        rows.push(Row {
            section: "tools",
            name: format!(
                "edit_file tool: {:.1} MB file, {label}",
                content.len() as f64 / 1e6
            ),
            value: ms(time),
            target: String::new(),
        });
    }

    // Truncation of a 10 MB single line (spec §5.3's pathological case), ASCII and
    // multi-byte.
    let limits = Default::default();
    for (label, unit) in [("ASCII", "x"), ("3-byte chars", "語")] {
        let output = unit.repeat(10 * 1024 * 1024 / unit.len());
        let time = median(
            (0..10)
                .map(|_| {
                    let start = Instant::now();
                    let truncated = truncate_tool_output(&output, "shell", &limits, &limits);
                    std::hint::black_box(&truncated);
                    start.elapsed()
                })
                .collect(),
        );
        rows.push(Row {
            section: "tools",
            name: format!("truncate a 10 MB single line ({label}) to 30,000 chars"),
            value: ms(time),
            target: "< 50 ms".into(),
        });
    }
    rows
}
