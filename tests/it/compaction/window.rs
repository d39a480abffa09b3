//! A request above the context window is never sent: when compaction cannot bring it
//! under (nothing left to cut, or the per-input bound reached), the input ends with a
//! `ContextLength` error, and the loopback server, which checks the size of every request
//! it receives, never sees one above the window.

use std::sync::Arc;

use agentloop::ErrorKind;
use agentloop::profiles::ProviderProfile;
use agentloop::session::compaction::CompactionConfig;
use agentloop::session::{Session, SessionConfig, StopReason};
use serde_json::json;

use super::{collect_input, compactions};
use support::server::{Reply, Server};
use support::session::{DirEnv, echo_tool, stop_reason};
use support::turns;

/// The most bytes a request of `window` tokens may have on the wire: the library counts a
/// quarter of the text bytes (and of the tool definitions) as tokens; the Messages JSON
/// around them (roles, content blocks, ids) adds what the second term allows. A request
/// at 262 % of the window, as before these checks, is far above it.
fn wire_bytes(window: usize) -> usize {
    window * 4 + window / 2
}

/// Asserts that every request `server` received fits in `window` tokens.
fn assert_every_request_fits(server: &Server, window: usize) {
    for (i, request) in server.requests().iter().enumerate() {
        assert!(
            request.body.len() <= wire_bytes(window),
            "request {i} has {} bytes, over the {} a {window}-token window allows",
            request.body.len(),
            wire_bytes(window)
        );
    }
}

fn session(server: &Server, config: SessionConfig) -> (Session, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let profile = ProviderProfile::new("anthropic", "test-model")
        .with_base_instructions("You are a test agent.")
        .with_tool(echo_tool());
    let session = Session::new(
        profile,
        Arc::new(DirEnv::new(dir.path())),
        support::anthropic_client(server),
        config,
    )
    .unwrap();
    (session, dir)
}

#[test]
fn a_prompt_larger_than_the_window_is_not_sent_and_the_input_ends_with_context_length() {
    let window = 2_000;
    let server = Server::start(vec![Reply::sse(turns::anthropic_sse("never asked", &[]))]);
    let config = SessionConfig::default()
        .with_compaction(CompactionConfig::default().with_context_window(window));
    let (session, _dir) = session(&server, config);
    let mut events = session.events();
    // 12 000 bytes: about 3 000 tokens, and a user message is never summarised or cut.
    let error = session
        .run("p".repeat(12_000))
        .expect_err("the input cannot be sent");
    let seen = collect_input(&mut events);
    assert_eq!(error.kind(), ErrorKind::ContextLength, "{error}");
    let message = error.to_string();
    assert!(
        message.contains("context window of 2000 tokens")
            && message.contains("nothing left could be summarised or cut")
            && message.contains("it was not sent"),
        "{message}"
    );
    assert_eq!(stop_reason(&seen), StopReason::Error);
    assert!(
        server.requests().is_empty(),
        "no request reached the server"
    );
}

#[test]
fn once_the_compaction_bound_is_reached_a_request_over_the_window_is_not_sent() {
    let window = 4_000;
    // Every answer calls `echo` with 2 000 bytes: each round adds about 1 000 tokens.
    let replies = (0..40)
        .map(|i| {
            let call = turns::function(
                &format!("call_{i}"),
                "echo",
                json!({"text": "b".repeat(2_000)}),
            );
            Reply::sse(turns::anthropic_sse("", &[call]))
        })
        .collect();
    let server = Server::start(replies);
    let compaction = CompactionConfig::default()
        .with_context_window(window)
        .with_max_compactions_per_input(1)
        .with_summariser(|_| Some("## Goal\nkeep echoing".to_string()));
    let config = SessionConfig::default()
        .with_loop_detection(false)
        .with_compaction(compaction);
    let (session, _dir) = session(&server, config);
    let mut events = session.events();
    let error = session.run("echo for ever").expect_err("the window fills");
    let seen = collect_input(&mut events);
    assert_eq!(error.kind(), ErrorKind::ContextLength, "{error}");
    assert!(
        error
            .to_string()
            .contains("the 1 compactions an input may run (max_compactions_per_input) have run"),
        "{error}"
    );
    assert_eq!(compactions(&seen).len(), 1, "the bound allows one");
    let sent = server.requests().len();
    assert!(
        (3..40).contains(&sent),
        "{sent} requests: some rounds ran, and the input ended before the script did"
    );
    assert_every_request_fits(&server, window);
}

#[test]
fn a_summary_request_that_pre_compact_hooks_push_over_the_window_is_not_sent() {
    let window = 4_000;
    let mut replies: Vec<Reply> = (0..6)
        .map(|i| {
            let call = turns::function(
                &format!("call_{i}"),
                "echo",
                json!({"text": "b".repeat(2_000)}),
            );
            Reply::sse(turns::anthropic_sse("", &[call]))
        })
        .collect();
    replies.push(Reply::sse(turns::anthropic_sse("done", &[])));
    let server = Server::start(replies);
    // A megabyte of context for every summary request (the hook runner cuts it to 30 000
    // characters: still far over a 4 000-token window).
    let hooks = agentloop::session::Hooks::new()
        .with_pre_compact(|_| agentloop::session::HookDecision::AddContext("c".repeat(1_000_000)));
    let config = SessionConfig::default()
        .with_loop_detection(false)
        .with_hooks(hooks)
        .with_compaction(CompactionConfig::default().with_context_window(window));
    let (session, _dir) = session(&server, config);
    let mut events = session.events();
    let outcome = session
        .run("echo a few times")
        .expect("the input completes");
    let seen = collect_input(&mut events);
    assert_eq!(outcome.text, "done");
    let done = compactions(&seen);
    assert!(!done.is_empty(), "the window made the session compact");
    for compaction in &done {
        assert_eq!(
            compaction.fallback,
            agentloop::session::compaction::CompactionFallback::Dropped,
            "a mechanical record instead of the summary"
        );
    }
    for request in server.requests() {
        assert!(
            !request.body_text().contains("handoff summary"),
            "a summary request reached the server"
        );
    }
    assert_every_request_fits(&server, window);
}
