//! The controls of an unattended run on the command line, against the loopback server:
//! `--output-schema` (the value alone on stdout, or in the `--json` end event; exit 4 when
//! none came), the budget flags (exit 3, the figures in `--json`), a cost budget without a
//! price (exit 2), `--fallback-model` (same provider, or another), `--cache-ttl`.

use serde_json::{Value, json};

use support::providers::OPENAI_KEY;
use support::{FAKE_KEY, Reply, Server};

use crate::{Wire, kinds, run_agent};

const SCHEMA: &str = r#"{"type": "object", "properties": {"count": {"type": "integer"}},
                        "required": ["count"], "additionalProperties": false}"#;

/// A `--output-schema` file in `dir`.
fn schema_file(dir: &std::path::Path) -> String {
    let path = dir.join("schema.json");
    std::fs::write(&path, SCHEMA).unwrap();
    path.to_str().unwrap().to_string()
}

fn anthropic_args<'a>(server_url: &'a str, cwd: &'a str) -> Vec<&'a str> {
    vec![
        "--provider",
        "anthropic",
        "--base-url",
        server_url,
        "--cwd",
        cwd,
    ]
}

#[test]
fn output_schema_prints_only_the_value_on_stdout() {
    let server = Server::start(vec![
        Reply::sse(Wire::Anthropic.turn(
            "Counting.",
            &[("c1", "shell", json!({"command": "ls | wc -l"}))],
        )),
        Reply::sse(Wire::Anthropic.turn("", &[("c2", "final_answer", json!({"count": 3}))])),
    ]);
    let work = tempfile::tempdir().unwrap();
    let (url, cwd, schema) = (
        server.url(),
        work.path().to_str().unwrap(),
        schema_file(work.path()),
    );
    let mut args = anthropic_args(&url, cwd);
    args.extend(["--output-schema", &schema, "count the files"]);
    let ran = run_agent(&args, &[("ANTHROPIC_API_KEY", FAKE_KEY)], "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert_eq!(ran.stdout, "{\"count\":3}\n");
    // The view went to stderr.
    assert!(ran.stderr.contains("Counting."), "{}", ran.stderr);
    assert!(ran.stderr.contains("── done"), "{}", ran.stderr);
    let offered = server.requests()[0].json()["tools"].clone();
    assert!(
        offered
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "final_answer")
    );
}

#[test]
fn with_json_the_value_is_in_the_processing_end_event() {
    let server = Server::start(vec![Reply::sse(
        Wire::Anthropic.turn("", &[("c1", "final_answer", json!({"count": 7}))]),
    )]);
    let work = tempfile::tempdir().unwrap();
    let (url, cwd, schema) = (
        server.url(),
        work.path().to_str().unwrap(),
        schema_file(work.path()),
    );
    let mut args = anthropic_args(&url, cwd);
    args.extend(["--json", "--output-schema", &schema, "count"]);
    let ran = run_agent(&args, &[("ANTHROPIC_API_KEY", FAKE_KEY)], "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let events = ran.events();
    let end = events
        .iter()
        .find(|e| e["kind"] == "processing_end")
        .unwrap();
    assert_eq!(end["data"]["output"], json!({"count": 7}));
    assert_eq!(end["data"]["stop_reason"], "completed");
}

#[test]
fn a_model_that_never_gives_a_valid_answer_exits_4_with_nothing_on_stdout() {
    // Three reminders (the default retries), then the fourth text answer ends it.
    let replies = (0..4)
        .map(|_| Reply::sse(Wire::Anthropic.turn("About three.", &[])))
        .collect();
    let server = Server::start(replies);
    let work = tempfile::tempdir().unwrap();
    let (url, cwd, schema) = (
        server.url(),
        work.path().to_str().unwrap(),
        schema_file(work.path()),
    );
    let mut args = anthropic_args(&url, cwd);
    args.extend(["--output-schema", &schema, "count"]);
    let ran = run_agent(&args, &[("ANTHROPIC_API_KEY", FAKE_KEY)], "");
    assert_eq!(ran.status, Some(4), "{}", ran.all_output());
    assert_eq!(ran.stdout, "");
    assert!(
        ran.stderr.contains("no valid final answer"),
        "{}",
        ran.stderr
    );
    assert_eq!(server.requests().len(), 4);
}

#[test]
fn an_unusable_schema_file_is_bad_usage() {
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("schema.json");
    std::fs::write(&path, "[1, 2]").unwrap();
    let ran = run_agent(
        &[
            "--provider",
            "anthropic",
            "--output-schema",
            path.to_str().unwrap(),
            "x",
        ],
        &[("ANTHROPIC_API_KEY", FAKE_KEY)],
        "",
    );
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    assert!(
        ran.stderr.contains("a JSON Schema is a JSON object"),
        "{}",
        ran.stderr
    );
}

#[test]
fn a_tool_call_budget_stops_the_run_with_status_3_and_the_figures_in_json() {
    let server = Server::start(vec![
        Reply::sse(Wire::Anthropic.turn(
            "",
            &[
                ("c1", "shell", json!({"command": "echo one > one.txt"})),
                ("c2", "shell", json!({"command": "echo two > two.txt"})),
            ],
        )),
        Reply::sse(Wire::Anthropic.turn("never asked", &[])),
    ]);
    let work = tempfile::tempdir().unwrap();
    let (url, cwd) = (server.url(), work.path().to_str().unwrap());
    let mut args = anthropic_args(&url, cwd);
    args.extend(["--json", "--max-tool-calls", "1", "write two files"]);
    let ran = run_agent(&args, &[("ANTHROPIC_API_KEY", FAKE_KEY)], "");
    assert_eq!(ran.status, Some(3), "{}", ran.all_output());
    assert!(work.path().join("one.txt").exists());
    assert!(
        !work.path().join("two.txt").exists(),
        "the second call did not run"
    );
    assert_eq!(server.requests().len(), 1);
    let events = ran.events();
    let exhausted = events
        .iter()
        .find(|e| e["kind"] == "budget_exhausted")
        .unwrap();
    assert_eq!(
        exhausted["data"],
        json!({"which": "tool_calls", "scope": "session", "limit": 1.0, "used": 1.0})
    );
    let end = events
        .iter()
        .find(|e| e["kind"] == "processing_end")
        .unwrap();
    assert_eq!(end["data"]["stop_reason"], "budget_exhausted");
    assert_eq!(end["data"]["tool_calls"], 1);
    let session_end = events.iter().find(|e| e["kind"] == "session_end").unwrap();
    assert_eq!(session_end["data"]["tool_calls"], 1);
}

#[test]
fn a_cost_budget_for_a_model_without_a_price_is_bad_usage() {
    let ran = run_agent(
        &[
            "--provider",
            "anthropic",
            "--model",
            "claude-unpriced-9",
            "--max-cost",
            "2",
            "x",
        ],
        &[("ANTHROPIC_API_KEY", FAKE_KEY)],
        "",
    );
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    assert!(
        ran.stderr.contains("`claude-unpriced-9` has none"),
        "{}",
        ran.stderr
    );
}

/// The recorded-shape Anthropic 529, with `retry-after: 0` so that the CLI's own retry
/// policy (1 s backoff) does not slow the test; three of them end its two retries.
fn overloaded() -> Vec<Reply> {
    let capture = support::conformance::dir().join("errors/anthropic_529_overloaded_error.json");
    let body = std::fs::read(capture).unwrap();
    (0..3)
        .map(|_| Reply::body(529, "application/json", body.clone()).header("retry-after", "0"))
        .collect()
}

#[test]
fn fallback_model_continues_on_the_next_model_of_the_same_provider() {
    let mut replies = vec![Reply::sse(Wire::Anthropic.turn(
        "",
        &[("c1", "shell", json!({"command": "echo FIRST-RESULT"}))],
    ))];
    replies.extend(overloaded());
    replies.push(Reply::sse(Wire::Anthropic.turn("done", &[])));
    let server = Server::start(replies);
    let work = tempfile::tempdir().unwrap();
    let (url, cwd) = (server.url(), work.path().to_str().unwrap());
    let mut args = anthropic_args(&url, cwd);
    args.extend(["--json", "--fallback-model", "claude-haiku-4-5", "go"]);
    let ran = run_agent(&args, &[("ANTHROPIC_API_KEY", FAKE_KEY)], "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let events = ran.events();
    let fallback = events
        .iter()
        .find(|e| e["kind"] == "model_fallback")
        .unwrap();
    assert_eq!(fallback["data"]["to_model"], "claude-haiku-4-5");
    assert_eq!(fallback["data"]["error_kind"], "server");
    // The first call, three attempts at the second (two retries), the next model.
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    let last = requests[4].json();
    assert_eq!(last["model"], "claude-haiku-4-5");
    assert!(
        last.to_string().contains("FIRST-RESULT"),
        "the history continues"
    );
}

#[test]
fn fallback_model_can_name_another_provider_whose_key_comes_from_the_environment() {
    let mut replies = vec![Reply::sse(Wire::Anthropic.turn(
        "",
        &[("c1", "shell", json!({"command": "echo FIRST-RESULT"}))],
    ))];
    replies.extend(overloaded());
    let anthropic = Server::start(replies);
    let openai = Server::start(vec![Reply::sse(Wire::OpenAi.turn("done on openai", &[]))]);
    let work = tempfile::tempdir().unwrap();
    let (url, cwd) = (anthropic.url(), work.path().to_str().unwrap());
    let openai_url = format!("{}/v1", openai.url());
    let mut args = anthropic_args(&url, cwd);
    args.extend(["--json", "--fallback-model", "openai:gpt-5", "go"]);
    let ran = run_agent(
        &args,
        &[
            ("ANTHROPIC_API_KEY", FAKE_KEY),
            ("OPENAI_API_KEY", OPENAI_KEY),
            ("OPENAI_BASE_URL", &openai_url),
        ],
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let events = ran.events();
    assert!(kinds(&events).contains(&"model_fallback"));
    let body: Value = openai.requests()[0].json().clone();
    assert_eq!(body["model"], "gpt-5");
    let outputs: Vec<&Value> = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    assert_eq!(outputs.len(), 1);
    assert!(
        outputs[0]["output"]
            .as_str()
            .unwrap()
            .contains("FIRST-RESULT")
    );
    assert!(!ran.all_output().contains(OPENAI_KEY));
}

#[test]
fn cache_ttl_1h_is_sent_on_every_breakpoint() {
    let server = Server::start(vec![Reply::sse(Wire::Anthropic.turn("done", &[]))]);
    let work = tempfile::tempdir().unwrap();
    let (url, cwd) = (server.url(), work.path().to_str().unwrap());
    let mut args = anthropic_args(&url, cwd);
    args.extend(["--cache-ttl", "1h", "go"]);
    let ran = run_agent(&args, &[("ANTHROPIC_API_KEY", FAKE_KEY)], "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let request = &server.requests()[0];
    let body = request.body_text();
    assert_eq!(
        body.matches(r#""cache_control":{"type":"ephemeral","ttl":"1h"}"#)
            .count(),
        3
    );
    assert!(!body.contains(r#""cache_control":{"type":"ephemeral"}"#));
    assert!(
        request
            .header("anthropic-beta")
            .unwrap()
            .contains("extended-cache-ttl-2025-04-11")
    );
}
