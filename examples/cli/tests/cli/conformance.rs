//! Provider fidelity through the CLI: every recorded capture of the conformance corpus,
//! served by the loopback server to the CLI in its own wire format, gives its expected
//! text, tool calls (in order), reasoning, refusal and error in the `--json` events.
//!
//! The capture answers the first model call; tool calls it makes run (unknown tools become
//! error results) and later calls get a plain text answer.

use std::path::Path;

use serde_json::Value;

use crate::{agentloop, run_command};
use support::providers::{GEMINI_KEY, OPENAI_KEY};
use support::turns;
use support::{FAKE_KEY, GENEROUS, Reply, Server, conformance};

/// A corpus folder, the CLI provider that speaks its format, and how to answer later calls.
struct Folder {
    name: &'static str,
    provider: &'static str,
    base_path: &'static str,
    key_vars: &'static [(&'static str, &'static str)],
    text_turn: fn(&str) -> String,
}

const FOLDERS: &[Folder] = &[
    Folder {
        name: "anthropic",
        provider: "anthropic",
        base_path: "",
        key_vars: &[("ANTHROPIC_API_KEY", FAKE_KEY)],
        text_turn: |text| turns::anthropic_sse(text, &[]),
    },
    Folder {
        name: "openai-responses",
        provider: "openai",
        base_path: "/v1",
        key_vars: &[
            ("OPENAI_API_KEY", OPENAI_KEY),
            ("OPENAI_COMPATIBLE_API_KEY", OPENAI_KEY),
        ],
        text_turn: |text| turns::responses_sse(text, &[]),
    },
    Folder {
        name: "openai-chat",
        provider: "openai-chat",
        base_path: "/v1",
        key_vars: &[
            ("OPENAI_API_KEY", OPENAI_KEY),
            ("OPENAI_COMPATIBLE_API_KEY", OPENAI_KEY),
        ],
        text_turn: |text| turns::chat_sse(text, &[]),
    },
    Folder {
        name: "gemini",
        provider: "gemini",
        base_path: "",
        key_vars: &[("GEMINI_API_KEY", GEMINI_KEY)],
        text_turn: |text| turns::gemini_sse(text, &[]),
    },
];

/// The folder whose provider produced a recorded error body, by its file name.
fn folder_of_error(capture: &Path) -> &'static Folder {
    let name = capture.file_name().unwrap().to_str().unwrap();
    let provider = if name.starts_with("anthropic_") {
        "anthropic"
    } else if name.starts_with("gemini_") {
        "gemini"
    } else if name.starts_with("openai_responses_") {
        "openai"
    } else {
        "openai-chat" // OpenAI Chat Completions, llama.cpp, OpenRouter
    };
    FOLDERS.iter().find(|f| f.provider == provider).unwrap()
}

/// A recorded error body with its recorded status, content type and encoding.
fn error_reply(capture: &Path, expected: &Value) -> Reply {
    let (status, content_type) = conformance::expected_http(expected);
    let reply = Reply::body(status, &content_type, std::fs::read(capture).unwrap());
    if expected["http"]["content-encoding"] == "gzip" {
        reply.gzip()
    } else {
        reply
    }
}

/// Runs the CLI (with `extra` options) with `first` answering the first model call;
/// returns its events.
fn events_for(folder: &Folder, first: Reply, extra: &[&str]) -> Vec<Value> {
    // An error the CLI retries gets the same answer each time.
    let mut replies = vec![first.clone(), first.clone(), first];
    replies.extend((0..4).map(|_| Reply::sse((folder.text_turn)("ok"))));
    let server = Server::start(replies);
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(agentloop());
    command
        .args(["--json", "--max-rounds", "2", "--provider", folder.provider])
        .args(extra)
        .arg("--base-url")
        .arg(format!("{}{}", server.url(), folder.base_path))
        .arg("--cwd")
        .arg(work.path())
        .arg("answer the recorded question")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        // A named model: without one the CLI asks an openai-chat server for its models.
        .env("OPENAI_COMPATIBLE_MODEL", "gpt-5")
        .envs(folder.key_vars.iter().copied());
    let ran = run_command(command, "");
    ran.stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect()
}

/// What the events say differs from the capture's `.expected.json`.
fn mismatches(expected: &Value, events: &[Value]) -> Vec<String> {
    let mut diffs = Vec::new();
    let data = |kind: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["kind"] == kind)
            .map(|e| &e["data"])
            .collect()
    };
    if let Some(error) = expected.get("error").filter(|e| !e.is_null()) {
        let needle = error["message_contains"].as_str().unwrap_or("");
        let errors = data("error");
        if !errors
            .iter()
            .any(|e| e["message"].as_str().unwrap_or("").contains(needle))
        {
            diffs.push(format!("no error event containing {needle:?}: {errors:?}"));
        }
    }
    let ends = data("assistant_text_end");
    let Some(first) = ends.first() else {
        // An error before the first event ends the call without a text end.
        if expected.get("error").is_none_or(Value::is_null) {
            diffs.push("no assistant_text_end".to_string());
        }
        return diffs;
    };
    if expected.get("error").is_none_or(Value::is_null) {
        let want = expected["text"].as_str().unwrap_or("");
        if first["text"].as_str().unwrap_or("") != want {
            diffs.push(format!("text: want {want:?}, got {:?}", first["text"]));
        }
    }
    if let Some(want) = expected.get("reasoning") {
        let got = first.get("reasoning").cloned().unwrap_or(Value::Null);
        if &got != want {
            diffs.push(format!("reasoning: want {want:?}, got {got:?}"));
        }
    }
    if let Some(want) = expected.get("refusal") {
        let got = first.get("refusal").cloned().unwrap_or(Value::Null);
        if &got != want {
            diffs.push(format!("refusal: want {want:?}, got {got:?}"));
        }
    }
    // The first round's calls, as started, in the model's order.
    let calls = expected["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let starts: Vec<&Value> = data("tool_call_start")
        .into_iter()
        .take(calls.len())
        .collect();
    if starts.len() != calls.len() {
        diffs.push(format!(
            "tool calls: want {}, got {}",
            calls.len(),
            starts.len()
        ));
    }
    for (want, got) in calls.iter().zip(&starts) {
        if got["tool_name"] != want["name"] {
            diffs.push(format!(
                "tool name: want {}, got {}",
                want["name"], got["tool_name"]
            ));
        }
        if got["arguments"] != want["arguments"] {
            diffs.push(format!(
                "arguments of {}: want {}, got {}",
                want["name"], want["arguments"], got["arguments"]
            ));
        }
        if let Some(id) = want["id"].as_str() {
            if got["call_id"] != id {
                diffs.push(format!("call id: want {id}, got {}", got["call_id"]));
            }
        }
    }
    diffs
}

#[test]
fn every_recorded_capture_gives_its_expected_result_through_the_cli_json_events() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for folder in FOLDERS {
        for capture in conformance::sse_files(folder.name) {
            let expected = conformance::expected_for(&capture);
            let events = events_for(folder, Reply::sse_file(&capture), &[]);
            checked += 1;
            for diff in mismatches(&expected, &events) {
                failures.push(format!("{}: {diff}", capture.display()));
            }
        }
    }
    for capture in conformance::error_files("") {
        let expected = conformance::expected_for(&capture);
        // Gemini's recorded 429 asks for a 34.4 s wait: with `--max-retry-wait 5` the CLI
        // fails at once instead of waiting (the default honours up to 60 s per retry).
        let long_wait = expected["error"]["retry_after_seconds"].as_f64() > Some(5.0);
        let extra: &[&str] = if long_wait {
            &["--max-retry-wait", "5"]
        } else {
            &[]
        };
        let folder = folder_of_error(&capture);
        let started = std::time::Instant::now();
        let events = events_for(folder, error_reply(&capture, &expected), extra);
        if long_wait && started.elapsed() >= GENEROUS {
            failures.push(format!(
                "{}: the CLI waited {:?} despite --max-retry-wait 5",
                capture.display(),
                started.elapsed()
            ));
        }
        checked += 1;
        let needle = expected["error"]["message_contains"].as_str().unwrap_or("");
        let found = events.iter().any(|e| {
            e["kind"] == "error" && e["data"]["message"].as_str().unwrap_or("").contains(needle)
        });
        if !found {
            failures.push(format!(
                "{}: no error event containing {needle:?}",
                capture.display()
            ));
        }
    }
    assert!(checked >= 40, "only {checked} captures checked");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
