//! Overflow errors of every recorded provider shape (`tests/data/conformance/errors/
//! overflow_*`): one compaction and one retry against a loopback server; a second
//! overflow is a typed error.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloop::ErrorKind;
use agentloop::llm::Client;
use agentloop::profiles::ProviderProfile;
use agentloop::session::compaction::CompactionReason;
use agentloop::session::{Session, SessionConfig, StopReason};
use serde_json::{Value, json};

use super::{collect_input, compactions};
use support::server::{Reply, Server};
use support::session::{DirEnv, echo_tool, stop_reason};
use support::{conformance, providers, turns};

/// The overflow captures and the llama.cpp one recorded earlier, with their formats.
fn captures() -> Vec<(PathBuf, String, u16, String)> {
    let mut out = Vec::new();
    let mut paths = conformance::files("errors", ".json");
    paths.extend(conformance::files("errors", ".sse"));
    for path in paths {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let format = if name.starts_with("overflow_") {
            let expected = conformance::expected_for(&path);
            expected["format"].as_str().unwrap().to_string()
        } else if name == "llamacpp_400_exceed_context_size.json" {
            "openai-chat".to_string()
        } else {
            continue;
        };
        let expected = conformance::expected_for(&path);
        let (status, content_type) = conformance::expected_http(&expected);
        out.push((path, format, status, content_type));
    }
    assert!(out.len() >= 12, "the overflow table: {}", out.len());
    out
}

fn turn(format: &str, text: &str, calls: &[turns::Call]) -> Reply {
    match format {
        "anthropic" => turns::anthropic_turn(text, calls),
        "openai-responses" => turns::responses_turn(text, calls),
        "openai-chat" => turns::chat_turn(text, calls),
        "gemini" => turns::gemini_turn(text, calls),
        other => panic!("unknown format {other}"),
    }
}

fn client(format: &str, server: &Server) -> (Client, &'static str) {
    match format {
        "anthropic" => (support::anthropic_client(server), "anthropic"),
        "openai-responses" => (support::client_for(providers::openai(server)), "openai"),
        "openai-chat" => (
            support::client_for(providers::openai_chat(server)),
            "openai-chat",
        ),
        "gemini" => (support::client_for(providers::gemini(server)), "gemini"),
        other => panic!("unknown format {other}"),
    }
}

fn overflow_reply(path: &Path, status: u16, content_type: &str) -> Reply {
    Reply::body(status, content_type, std::fs::read(path).unwrap())
}

/// Runs an input whose second model call overflows, against replies
/// `[tool call, overflow, summary, last]`; returns the events and the requests.
fn run(
    format: &str,
    overflow: Reply,
    last: Reply,
) -> (
    Vec<agentloop::session::SessionEvent>,
    Vec<Value>,
    agentloop::Result<agentloop::session::Outcome>,
) {
    let big = "b".repeat(4_000);
    let server = Server::start(vec![
        turn(
            format,
            "",
            &[turns::function("call_1", "echo", json!({"text": big}))],
        ),
        overflow,
        turn(format, "## Goal\nthe summary of the earlier turns", &[]),
        last,
    ]);
    let (client, id) = client(format, &server);
    let dir = tempfile::tempdir().unwrap();
    let profile = ProviderProfile::new(id, "test-model")
        .with_base_instructions("You are a test agent.")
        .with_tool(echo_tool());
    let session = Session::new(
        profile,
        Arc::new(DirEnv::new(dir.path())),
        client,
        SessionConfig::default(),
    )
    .unwrap();
    let mut events = session.events();
    // `run` is `Err` when the provider failed (a second overflow), `Ok` otherwise.
    let outcome = session.run("echo something long");
    let seen = collect_input(&mut events);
    let bodies = server.requests().iter().map(|r| r.json().clone()).collect();
    (seen, bodies, outcome)
}

#[test]
fn every_recorded_overflow_shape_leads_to_one_compaction_and_one_retry() {
    for (path, format, status, content_type) in captures() {
        let name = path.display().to_string();
        let (seen, bodies, outcome) = run(
            &format,
            overflow_reply(&path, status, &content_type),
            turn(&format, "finished after compacting", &[]),
        );
        let outcome = outcome.unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(
            stop_reason(&seen),
            StopReason::Completed,
            "{name}: {:?}",
            outcome.error
        );
        assert_eq!(outcome.text, "finished after compacting", "{name}");
        let done = compactions(&seen);
        assert_eq!(done.len(), 1, "{name}");
        assert_eq!(done[0].reason, CompactionReason::Overflow, "{name}");
        assert_eq!(
            done[0].summary, "## Goal\nthe summary of the earlier turns",
            "{name}"
        );
        assert_eq!(bodies.len(), 4, "{name}: call, overflow, summary, retry");
        let retry = bodies[3].to_string();
        assert!(
            !retry.contains(&"b".repeat(4_000)),
            "{name}: the retry is compacted"
        );
        assert!(retry.contains("the summary of the earlier turns"), "{name}");
        assert!(
            bodies[2].to_string().contains("handoff summary"),
            "{name}: the summary request"
        );
    }
}

#[test]
fn a_second_overflow_after_compacting_is_a_typed_error() {
    for (path, format, status, content_type) in captures() {
        let name = path.display().to_string();
        let (seen, bodies, outcome) = run(
            &format,
            overflow_reply(&path, status, &content_type),
            overflow_reply(&path, status, &content_type),
        );
        assert_eq!(stop_reason(&seen), StopReason::Error, "{name}");
        assert_eq!(
            compactions(&seen).len(),
            1,
            "{name}: one compaction, no loop"
        );
        assert_eq!(bodies.len(), 4, "{name}");
        let error = outcome.expect_err("a second overflow fails the run");
        assert_eq!(error.kind(), ErrorKind::ContextLength, "{name}");
        assert!(
            error.message().contains("still exceeds"),
            "{name}: {}",
            error.message()
        );
    }
}
