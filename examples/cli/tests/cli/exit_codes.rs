//! One test per exit status of the CLI's table (`agentloop --help`, the CLI manual): each
//! condition gives its documented status, and with `--json` the last line is the `exit`
//! record naming it in words. The signal statuses (130, 143, 129) are proven with the
//! running command in `robustness.rs` (`ends_like_an_abort_on`), which checks the record
//! too.

use serde_json::{Value, json};

use support::{FAKE_KEY, Reply, Server};

use crate::{Ran, Wire, kinds, run_agent};

/// The `exit` record: the last line, right after `session_end` when a session ran.
fn exit_record(ran: &Ran, code: i32, reason: &str) -> Value {
    assert_eq!(ran.status, Some(code), "{}", ran.all_output());
    let events = ran.events();
    let record = events.last().expect("an exit record").clone();
    assert_eq!(record["kind"], "exit", "{}", ran.stdout);
    assert_eq!(record["data"]["code"], code, "{record}");
    assert_eq!(record["data"]["reason"], reason, "{record}");
    assert!(
        record["data"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{record}"
    );
    if events.len() > 1 {
        assert_eq!(
            kinds(&events)[events.len() - 2],
            "session_end",
            "{}",
            ran.stdout
        );
    }
    record
}

/// A one-prompt `--json` run against `replies` on the loopback Anthropic server.
fn run_against(replies: Vec<Reply>, extra: &[&str]) -> (Ran, Server) {
    let server = Server::start(replies);
    let work = tempfile::tempdir().unwrap();
    let url = server.url();
    let mut args = vec![
        "--provider",
        "anthropic",
        "--base-url",
        &url,
        "--cwd",
        work.path().to_str().unwrap(),
        "--json",
    ];
    args.extend(extra);
    args.push("do the task");
    let ran = run_agent(&args, &[("ANTHROPIC_API_KEY", FAKE_KEY)], "");
    (ran, server)
}

#[test]
fn exit_0_when_the_agent_finished_its_input() {
    let (ran, _server) = run_against(vec![Reply::sse(Wire::Anthropic.turn("done", &[]))], &[]);
    let record = exit_record(&ran, 0, "completed");
    assert_eq!(record["data"]["detail"], "completed");
    // The session's totals, as `session_end` has them, for a harness's usage parse.
    let events = ran.events();
    let end = &events[events.len() - 2]["data"]["usage"];
    let usage = &record["data"]["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{record}");
    assert_eq!(usage["input_tokens"], end["input_tokens"]);
    assert_eq!(usage["output_tokens"], end["output_tokens"]);
    for key in ["cache_read_tokens", "cache_write_tokens", "cost_usd"] {
        assert!(usage.get(key).is_some(), "{key}: {record}");
    }
}

#[test]
fn exit_1_when_the_session_cannot_start() {
    // A hooks file that is no JSON: the session is refused once the CLI has started.
    let work = tempfile::tempdir().unwrap();
    let hooks = work.path().join("hooks.json");
    std::fs::write(&hooks, "not json").unwrap();
    let (ran, server) = run_against(
        vec![Reply::sse(Wire::Anthropic.turn("never asked", &[]))],
        &["--hooks", hooks.to_str().unwrap()],
    );
    let record = exit_record(&ran, 1, "error");
    assert_eq!(record["data"]["detail"], "configuration", "{record}");
    assert!(server.requests().is_empty());
}

#[test]
fn exit_2_for_bad_usage_names_the_mistake() {
    let ran = run_agent(&["--json", "--no-such-flag", "x"], &[], "");
    let record = exit_record(&ran, 2, "usage");
    assert!(
        record["data"]["message"]
            .as_str()
            .unwrap()
            .contains("--no-such-flag"),
        "{record}"
    );
}

#[test]
fn exit_2_for_a_prompt_with_no_key_and_no_provider() {
    let ran = run_agent(&["--json", "fix the bug"], &[], "");
    let record = exit_record(&ran, 2, "usage");
    assert!(
        record["data"]["message"]
            .as_str()
            .unwrap()
            .contains("no provider is configured"),
        "{record}"
    );
}

#[test]
fn exit_3_for_a_round_limit_with_its_stop_reason() {
    let ran = run_agent(&["--max-rounds", "1", "--json"], &[], "");
    let record = exit_record(&ran, 3, "limit");
    assert_eq!(record["data"]["detail"], "round_limit");
}

#[test]
fn exit_3_for_a_turn_limit_with_its_stop_reason() {
    let ran = run_agent(&["--max-turns", "1", "--json"], &[], "");
    let record = exit_record(&ran, 3, "limit");
    assert_eq!(record["data"]["detail"], "turn_limit");
}

#[test]
fn exit_3_for_a_budget_with_its_stop_reason() {
    let call = ("c1", "shell", json!({"command": "true"}));
    let (ran, _server) = run_against(
        vec![
            Reply::sse(Wire::Anthropic.turn("", std::slice::from_ref(&call))),
            Reply::sse(Wire::Anthropic.turn("", &[call])),
        ],
        &["--max-tool-calls", "1"],
    );
    let record = exit_record(&ran, 3, "limit");
    assert_eq!(record["data"]["detail"], "budget_exhausted");
}

#[test]
fn exit_4_when_no_final_answer_is_valid_against_the_schema() {
    let work = tempfile::tempdir().unwrap();
    let schema = work.path().join("schema.json");
    std::fs::write(&schema, r#"{"type": "object", "required": ["count"]}"#).unwrap();
    let replies = (0..4)
        .map(|_| Reply::sse(Wire::Anthropic.turn("About three.", &[])))
        .collect();
    let (ran, _server) = run_against(replies, &["--output-schema", schema.to_str().unwrap()]);
    let record = exit_record(&ran, 4, "no_valid_output");
    assert_eq!(record["data"]["detail"], "structured_output_failed");
}

#[test]
fn exit_5_when_the_provider_fails_after_the_retries() {
    // `retry-after: 0` keeps the CLI's backoff out of the test; three 500s end its two
    // retries.
    let body = r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#;
    let replies = (0..3)
        .map(|_| Reply::body(500, "application/json", body).header("retry-after", "0"))
        .collect();
    let (ran, server) = run_against(replies, &[]);
    let record = exit_record(&ran, 5, "provider_error");
    assert_eq!(record["data"]["detail"], "server", "{record}");
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn exit_6_when_the_provider_refuses_the_key_and_the_key_is_not_shown() {
    let body =
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    let (ran, server) = run_against(vec![Reply::body(401, "application/json", body)], &[]);
    let record = exit_record(&ran, 6, "provider_refused");
    assert_eq!(record["data"]["detail"], "authentication", "{record}");
    assert_eq!(server.requests().len(), 1, "a refused key is not retried");
    assert!(!ran.all_output().contains(FAKE_KEY));
}
