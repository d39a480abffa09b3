//! Usage and cost through real sessions: the recorded Anthropic, Responses, Chat and
//! Gemini captures (with reasoning and cache counts) replayed by the loopback server give
//! exactly the recorded numbers in `ASSISTANT_TEXT_END`; `PROCESSING_END`, `SESSION_END`
//! and the `Outcome` carry the sums; a priced model has a cost, an unknown one none.

use std::path::PathBuf;
use std::sync::Arc;

use agentloop::llm::pricing::Price;
use agentloop::llm::{Client, Provider, Usage};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Outcome, Session, SessionConfig, SessionEvent};
use serde_json::Value;

use support::session::{DirEnv, collect_to_end};
use support::{self, Reply, Server, providers};

fn capture(name: &str) -> PathBuf {
    support::conformance::dir().join(format!("{name}.sse"))
}

/// The usage the capture's `.expected.json` records.
fn recorded_usage(name: &str) -> Value {
    let path = capture(name).with_extension("sse.expected.json");
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    expected["usage"].clone()
}

/// Asserts that `usage` holds exactly every count the capture records.
fn assert_recorded(name: &str, usage: &Usage) {
    let recorded = recorded_usage(name);
    let ours = serde_json::to_value(usage).unwrap();
    for (key, value) in recorded.as_object().unwrap() {
        let our_key = if key == "cache_creation_tokens" {
            "cache_write_tokens"
        } else {
            key.as_str()
        };
        assert_eq!(&ours[our_key], value, "{name}: {key} (ours: {ours})");
    }
}

/// Runs one input ("hello") over `server`, then closes; returns the outcome and every
/// event.
fn run_on(
    server: Server,
    client: Client,
    provider_id: &str,
    model: &str,
    config: SessionConfig,
) -> (Outcome, Vec<SessionEvent>, Server) {
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let profile = ProviderProfile::new(provider_id, model);
    let session = Session::new(profile, env, client, config).unwrap();
    let mut events = session.events();
    let outcome = session.run("hello").unwrap();
    session.close();
    let events = collect_to_end(&mut events);
    (outcome, events, server)
}

fn call_usages(events: &[SessionEvent]) -> Vec<(Usage, Option<f64>)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantTextEnd {
                usage, cost_usd, ..
            } => Some((*usage, *cost_usd)),
            _ => None,
        })
        .collect()
}

fn processing_end(events: &[SessionEvent]) -> (Usage, Option<f64>) {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ProcessingEnd {
                usage, cost_usd, ..
            } => Some((*usage, *cost_usd)),
            _ => None,
        })
        .unwrap()
}

fn session_end(events: &[SessionEvent]) -> (Usage, Option<f64>) {
    match &events.last().unwrap().kind {
        EventKind::SessionEnd {
            usage, cost_usd, ..
        } => (*usage, *cost_usd),
        other => panic!("last event is {other:?}"),
    }
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-12)
}

#[test]
fn responses_reasoning_tokens_are_exact_and_gpt5_has_a_cost() {
    let name = "openai-responses/reasoning_summary_then_text";
    let server = Server::start(vec![Reply::sse_file(capture(name))]);
    let provider = providers::openai(&server);
    let id = provider.id().to_string();
    let client = support::client_for(provider);
    let (outcome, events, _server) = run_on(server, client, &id, "gpt-5", SessionConfig::default());
    let calls = call_usages(&events);
    assert_eq!(calls.len(), 1);
    let (usage, cost) = calls[0];
    assert_recorded(name, &usage);
    assert_eq!(usage.reasoning_tokens, Some(832));
    assert_eq!(usage.cache_read_tokens, Some(0));
    // gpt-5-2025-08-07 answered: priced as gpt-5 ($1.25 in, $10 out per million).
    let expected = (32.0 * 1.25 + 839.0 * 10.0) / 1e6;
    assert!(close(cost, expected), "{cost:?}");
    assert_eq!(processing_end(&events), (usage, cost));
    assert_eq!(session_end(&events), (usage, cost));
    assert_eq!(outcome.usage, usage);
    assert!(close(outcome.cost_usd, expected));
}

#[test]
fn chat_reasoning_tokens_are_exact_and_an_unknown_model_has_no_cost() {
    let name = "openai-chat/deepseek_reasoning_content";
    let server = Server::start(vec![Reply::sse_file(capture(name))]);
    let provider = providers::openai_chat(&server);
    let id = provider.id().to_string();
    let client = support::client_for(provider);
    let (outcome, events, _server) = run_on(
        server,
        client,
        &id,
        "deepseek-reasoner",
        SessionConfig::default(),
    );
    let (usage, cost) = call_usages(&events)[0];
    assert_recorded(name, &usage);
    assert_eq!(usage.reasoning_tokens, Some(198));
    assert_eq!(cost, None);
    assert_eq!(processing_end(&events), (usage, None));
    assert_eq!(session_end(&events), (usage, None));
    assert_eq!(outcome.cost_usd, None);
    assert_eq!(outcome.usage.output_tokens, 212);
}

#[test]
fn gemini_thought_tokens_are_exact() {
    let name = "gemini/thinking_thought_parts";
    let server = Server::start(vec![Reply::sse_file(capture(name))]);
    let provider = providers::gemini(&server);
    let id = provider.id().to_string();
    let client = support::client_for(provider);
    let (_outcome, events, _server) = run_on(
        server,
        client,
        &id,
        "gemini-2.5-flash",
        SessionConfig::default(),
    );
    let (usage, cost) = call_usages(&events)[0];
    assert_recorded(name, &usage);
    assert_eq!(usage.reasoning_tokens, Some(1947));
    assert_eq!(cost, None, "gemini-2.5-flash is not in the default table");
}

#[test]
fn anthropic_counts_are_exact_and_totals_add_up_over_a_multi_round_input() {
    // A thinking turn that calls a tool (unknown here: an error result), then a text turn.
    let first = "anthropic/thinking_then_tool_use_no_args";
    let second = "anthropic/text_basic";
    let server = Server::start(vec![
        Reply::sse_file(capture(first)),
        Reply::sse_file(capture(second)),
    ]);
    let client = support::anthropic_client(&server);
    // The host prices the two recorded models itself.
    let config = SessionConfig::default()
        .with_price(
            "claude-haiku-4-5",
            Price::new(1.0, 5.0)
                .with_cache_read(0.1)
                .with_cache_write(1.25)
                .with_cache_in_input(false),
        )
        .with_price(
            "claude-sonnet-4",
            Price::new(3.0, 15.0).with_cache_in_input(false),
        );
    let (outcome, events, server) = run_on(server, client, "anthropic", "claude-x", config);
    assert_eq!(server.requests().len(), 2);
    let calls = call_usages(&events);
    assert_eq!(calls.len(), 2);
    assert_recorded(first, &calls[0].0);
    assert_eq!(calls[0].0.reasoning_tokens, Some(53));
    assert_eq!(calls[0].0.cache_read_tokens, Some(0));
    assert_eq!(calls[0].0.cache_write_tokens, Some(0));
    assert_recorded(second, &calls[1].0);
    let first_cost = (598.0 * 1.0 + 92.0 * 5.0) / 1e6;
    let second_cost = (17.0 * 3.0 + 15.0 * 15.0) / 1e6;
    assert!(close(calls[0].1, first_cost), "{:?}", calls[0].1);
    assert!(close(calls[1].1, second_cost), "{:?}", calls[1].1);

    let sum = calls[0].0 + calls[1].0;
    assert_eq!(sum.input_tokens, 598 + 17);
    assert_eq!(sum.output_tokens, 92 + 15);
    let (input_usage, input_cost) = processing_end(&events);
    assert_eq!(input_usage, sum);
    assert!(close(input_cost, first_cost + second_cost));
    let (session_usage, session_cost) = session_end(&events);
    assert_eq!(session_usage, sum);
    assert!(close(session_cost, first_cost + second_cost));
    assert_eq!(outcome.usage, sum);
    assert!(close(outcome.cost_usd, first_cost + second_cost));

    // The JSON form carries the same fields (added, none renamed).
    let line = events.last().unwrap().to_string();
    let json: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(json["data"]["usage"]["input_tokens"], 615);
    assert!(json["data"]["cost_usd"].as_f64().is_some());
}
