//! Prompt caching through real sessions against the loopback server: on every request of a
//! five-round Anthropic session a breakpoint sits exactly where the previous request's last
//! one sat, and everything before it is byte for byte the previous request's; the TTL is
//! sent when configured (with its beta) and not otherwise; OpenAI's `prompt_cache_key` is
//! the session's id; a capture with cache reads and 1-hour writes gives exact usage and
//! cost.

use std::sync::Arc;
use std::time::Duration;

use agentloop::ErrorKind;
use agentloop::llm::Client;
use agentloop::profiles::{self, ProviderProfile};
use agentloop::session::{EventKind, Session, SessionConfig};
use serde_json::json;

use support::parity_kit::Kit;
use support::session::{DirEnv, collect_input, collect_to_end};
use support::turns::function;
use support::{Reply, Server, providers};

const MARK_1H: &str = r#","cache_control":{"type":"ephemeral","ttl":"1h"}"#;
const MARK_DEFAULT: &str = r#","cache_control":{"type":"ephemeral"}"#;

/// A request body with its breakpoint markers taken out, and where each was: the byte
/// offsets, in the body without markers, at which a marker stood.
fn without_marks(body: &str, mark: &str) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(body.len());
    let mut points = Vec::new();
    let mut rest = body;
    while let Some(at) = rest.find(mark) {
        out.push_str(&rest[..at]);
        points.push(out.len());
        rest = &rest[at + mark.len()..];
    }
    out.push_str(rest);
    (out, points)
}

/// Runs a five-round Anthropic session (four rounds of two tool calls, then an answer)
/// with `config`; returns the raw request bodies and their `anthropic-beta` headers.
fn five_rounds(config: SessionConfig) -> Vec<(String, String)> {
    let mut replies = Vec::new();
    for round in 0..4 {
        replies.push(Kit::Anthropic.calls(&[
            function(
                &format!("r{round}a"),
                "shell",
                json!({"command": format!("echo round {round} a")}),
            ),
            function(
                &format!("r{round}b"),
                "shell",
                json!({"command": format!("echo round {round} b")}),
            ),
        ]));
    }
    replies.push(Kit::Anthropic.text("Done in five rounds."));
    let server = Server::start(replies);
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(agentloop::exec::LocalExecutionEnvironment::new(dir.path()).unwrap());
    let profile = profiles::anthropic("claude-sonnet-4-5");
    let session = Session::new(profile, env, support::anthropic_client(&server), config).unwrap();
    let mut events = session.events();
    session.submit("run the rounds").unwrap();
    collect_input(&mut events);
    server
        .requests()
        .iter()
        .map(|r| {
            (
                r.body_text(),
                r.header("anthropic-beta").unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn every_request_reads_the_previous_requests_whole_prefix_at_a_breakpoint() {
    let config = SessionConfig::default().with_prompt_cache_ttl(Duration::from_secs(3600));
    let requests = five_rounds(config);
    assert_eq!(requests.len(), 5);
    let stripped: Vec<(String, Vec<usize>)> = requests
        .iter()
        .map(|(body, _)| without_marks(body, MARK_1H))
        .collect();
    for (index, (body, beta)) in requests.iter().enumerate() {
        // Every breakpoint carries the TTL, and the TTL its beta.
        assert!(!body.contains(MARK_DEFAULT), "request {index}");
        assert!(beta.contains("extended-cache-ttl-2025-04-11"), "{beta}");
        assert!(beta.contains("prompt-caching-2024-07-31"), "{beta}");
        let marks = stripped[index].1.len();
        // System, tools, and one or two user turns (the first request has one).
        assert_eq!(marks, if index == 0 { 3 } else { 4 }, "request {index}");
    }
    for round in 1..requests.len() {
        let (previous, previous_points) = &stripped[round - 1];
        let (current, current_points) = &stripped[round];
        let last = *previous_points.last().unwrap();
        assert!(
            current_points.contains(&last),
            "request {round} has no breakpoint where request {} had its last ({last})",
            round - 1
        );
        assert_eq!(
            previous.as_bytes()[..last],
            current.as_bytes()[..last],
            "request {round} differs from request {} before that breakpoint",
            round - 1
        );
        assert!(
            current_points.last().unwrap() > &last,
            "the newest breakpoint moves forward"
        );
    }
}

#[test]
fn without_a_configured_ttl_the_breakpoints_carry_none() {
    let requests = five_rounds(SessionConfig::default());
    for (body, beta) in &requests {
        assert!(!body.contains("\"ttl\""), "{body}");
        assert!(body.contains(MARK_DEFAULT));
        assert!(!beta.contains("extended-cache-ttl"), "{beta}");
    }
    let config = SessionConfig::default().with_prompt_cache_ttl(Duration::from_secs(300));
    let (body, beta) = five_rounds(config).remove(0);
    assert!(body.contains(r#""cache_control":{"type":"ephemeral","ttl":"5m"}"#));
    assert!(!beta.contains("extended-cache-ttl"), "{beta}");
}

#[test]
fn a_ttl_providers_do_not_offer_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let config = SessionConfig::default().with_prompt_cache_ttl(Duration::from_secs(600));
    let client = support::client_for(agentloop::llm::scripted::ScriptedModel::new(vec![]));
    let err = Session::new(support::session::profile(), env, client, config).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Configuration);
    assert!(err.to_string().contains("5 minutes or 1 hour"), "{err}");
}

#[test]
fn openais_prompt_cache_key_is_the_sessions_id() {
    let server = Server::start(vec![Kit::OpenAi.text("ok"), Kit::OpenAi.text("ok")]);
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let client = support::client_for(providers::openai(&server));
    let profile = ProviderProfile::new("openai", "gpt-5");
    let session = Session::new(profile, env, client, SessionConfig::default()).unwrap();
    session.run("one").unwrap();
    session.run("two").unwrap();
    for request in server.requests() {
        assert_eq!(request.json()["prompt_cache_key"], session.id());
    }
}

#[test]
fn a_cache_hit_and_a_one_hour_write_give_exact_usage_and_cost() {
    let capture = support::conformance::dir().join("anthropic/cache_read_and_1h_write.sse");
    let server = Server::start(vec![Reply::sse_file(&capture)]);
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let client: Client = support::anthropic_client(&server);
    let profile = ProviderProfile::new("anthropic", "claude-sonnet-4-5");
    let config = SessionConfig::default().with_prompt_cache_ttl(Duration::from_secs(3600));
    let session = Session::new(profile, env, client, config).unwrap();
    let mut events = session.events();
    let outcome = session.run("run the tests").unwrap();
    session.close();
    let seen = collect_to_end(&mut events);
    let usage = outcome.usage;
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.cache_write_1h_tokens
        ),
        (14, 9, Some(24_576), Some(1_830), Some(1_830))
    );
    // claude-sonnet-4-5 per million: $3 in, $15 out, $0.30 cache read, $6 a 1-hour write
    // (the 5-minute rate, $3.75, would give 0.0163335).
    let expected = (14.0 * 3.0 + 9.0 * 15.0 + 24_576.0 * 0.30 + 1_830.0 * 6.0) / 1e6;
    assert!(
        (outcome.cost_usd.unwrap() - expected).abs() < 1e-12,
        "{:?}",
        outcome.cost_usd
    );
    assert!((expected - 0.018_529_8).abs() < 1e-12);
    let call_cost = seen.iter().find_map(|e| match &e.kind {
        EventKind::AssistantTextEnd {
            cost_usd, usage, ..
        } => Some((*cost_usd, *usage)),
        _ => None,
    });
    assert_eq!(call_cost, Some((outcome.cost_usd, usage)));
}
