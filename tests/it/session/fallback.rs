//! The fallback chain through real sessions against the loopback server: recorded 429s
//! (Gemini's, OpenRouter's) and an Anthropic `529 overloaded_error` (reconstructed from its
//! documented body) end the first model's retries, and the input completes on the next
//! model from the current history; across a provider change (Anthropic → OpenAI) the
//! history is translated (thinking signatures left out, tool calls and results kept) and
//! the transcript replays strictly; a failure a fallback cannot help ends the input as
//! before.

use std::path::Path;
use std::sync::Arc;

use agentloop::llm::scripted::{ReplayMode, ScriptedModel};
use agentloop::llm::{Client, Provider};
use agentloop::profiles::ProviderProfile;
use agentloop::session::transcript::Transcript;
use agentloop::session::{EventKind, Session, SessionConfig, SessionEvent, StopReason};
use agentloop::tools::ToolOutput;
use serde_json::{Value, json};

use support::parity_kit::Kit;
use support::session::{DirEnv, collect_input, echo_tool, tool};
use support::turns::{self, function};
use support::{Reply, Server, providers};

/// An `errors/` capture of the corpus served as it was recorded, `times` times.
fn recorded_error(name: &str, times: usize) -> Vec<Reply> {
    let capture = support::conformance::dir().join("errors").join(name);
    let expected = support::conformance::expected_for(&capture);
    let (status, content_type) = support::conformance::expected_http(&expected);
    let body = std::fs::read(&capture).unwrap();
    (0..times)
        .map(|_| Reply::body(status, &content_type, body.clone()))
        .collect()
}

/// `(from, to, error kind)` of every `model_fallback` event.
fn fallbacks(events: &[SessionEvent]) -> Vec<(String, String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ModelFallback {
                from_provider,
                from_model,
                to_provider,
                to_model,
                error_kind,
                ..
            } => Some((
                format!("{from_provider}/{from_model}"),
                format!("{to_provider}/{to_model}"),
                error_kind.clone(),
            )),
            _ => None,
        })
        .collect()
}

fn start_session(
    dir: &Path,
    profile: ProviderProfile,
    client: Client,
    config: SessionConfig,
) -> (Session, agentloop::session::Events) {
    let env = Arc::new(DirEnv::new(dir));
    let session = Session::new(profile, env, client, config).unwrap();
    let events = session.events();
    (session, events)
}

#[test]
fn geminis_recorded_429_hands_the_input_to_the_next_model_with_the_history() {
    let mut replies = vec![Kit::Gemini.calls(&[function(
        "c1",
        "echo",
        json!({"text": "FIRST-MODEL-RESULT"}),
    )])];
    // Its RetryInfo asks for 34.4 s, longer than the policy waits: the policy gives up on
    // the first 429 (a retry would reach the second model's reply and fail the paths
    // checked below).
    replies.extend(recorded_error("gemini_429_resource_exhausted.json", 1));
    replies.push(Kit::Gemini.text("Finished on the second model."));
    let server = Server::start(replies);
    let client = support::client_for(providers::gemini(&server));
    let profile = ProviderProfile::new("gemini", "gemini-first").with_tool(echo_tool());
    let config =
        SessionConfig::default().with_fallback_model(profile.clone().with_model("gemini-second"));
    let dir = tempfile::tempdir().unwrap();
    let (session, mut events) = start_session(dir.path(), profile, client, config);
    session.submit("work").unwrap();
    let seen = collect_input(&mut events);
    assert_eq!(support::session::stop_reason(&seen), StopReason::Completed);
    assert_eq!(
        fallbacks(&seen),
        [(
            "gemini/gemini-first".to_string(),
            "gemini/gemini-second".to_string(),
            "rate_limited".to_string()
        )]
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        requests[1].path.contains("/models/gemini-first:"),
        "{}",
        requests[1].path
    );
    assert!(
        requests[2].path.contains("/models/gemini-second:"),
        "{}",
        requests[2].path
    );
    // The second model's first request holds the first model's tool call and its result.
    let outputs = Kit::Gemini.tool_outputs(requests[2].json());
    assert_eq!(outputs.len(), 1);
    assert_eq!(outputs[0].text, "FIRST-MODEL-RESULT");
    session.history().check_tool_results().unwrap();
}

#[test]
fn openrouters_recorded_429_exhausts_the_retries_then_the_next_model_continues() {
    let mut replies = vec![turns::chat_turn(
        "",
        &[function(
            "c1",
            "echo",
            json!({"text": "FIRST-MODEL-RESULT"}),
        )],
    )];
    // Two retries after the first attempt (the tests' policy): three 429s end them.
    replies.extend(recorded_error(
        "openrouter_429_upstream_rate_limited.json",
        3,
    ));
    replies.push(turns::chat_turn("Finished on the second model.", &[]));
    let server = Server::start(replies);
    let client = support::client_for(providers::openai_chat(&server));
    let id = providers::openai_chat(&server).id().to_string();
    let profile = ProviderProfile::new(&id, "first/model").with_tool(echo_tool());
    let config =
        SessionConfig::default().with_fallback_model(profile.clone().with_model("second/model"));
    let dir = tempfile::tempdir().unwrap();
    let (session, mut events) = start_session(dir.path(), profile, client, config);
    let outcome = session.run("work");
    let seen = collect_input(&mut events);
    let outcome = outcome.unwrap();
    assert_eq!(outcome.text, "Finished on the second model.");
    assert_eq!(fallbacks(&seen)[0].2, "rate_limited");
    let models: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.json()["model"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        models,
        [
            "first/model",
            "first/model",
            "first/model",
            "first/model",
            "second/model"
        ]
    );
    let last = server.requests().pop().unwrap();
    let tool_messages: Vec<&Value> = last.json()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_messages.len(), 1);
    assert_eq!(tool_messages[0]["content"], "FIRST-MODEL-RESULT");
}

/// The corpus capture of an Anthropic answer with thinking (and its signature) and a call
/// of `fixed_version` with no arguments.
const THINKING_THEN_TOOL: &str = "anthropic/thinking_then_tool_use_no_args.sse";
const RECORDED_CALL_ID: &str = "toolu_01825dXWLSoJwCst1qTsiWdb";

/// The thinking signature the capture carries (its `signature_delta`).
fn recorded_signature() -> String {
    let capture =
        std::fs::read_to_string(support::conformance::dir().join(THINKING_THEN_TOOL)).unwrap();
    capture
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .find_map(|event| event["delta"]["signature"].as_str().map(str::to_string))
        .expect("a signature_delta")
}

fn fixed_version() -> agentloop::tools::RegisteredTool {
    tool("fixed_version", |_input, _ctx| {
        Ok(ToolOutput::text("version 1.2.3"))
    })
}

/// The Anthropic profile with an OpenAI fallback, both offering `fixed_version`.
fn anthropic_then_openai() -> (ProviderProfile, SessionConfig) {
    let primary = ProviderProfile::new("anthropic", "claude-sonnet-4-5").with_tool(fixed_version());
    let fallback = ProviderProfile::new("openai", "gpt-5").with_tool(fixed_version());
    (
        primary,
        SessionConfig::default().with_fallback_model(fallback),
    )
}

#[test]
fn an_anthropic_529_falls_back_to_openai_with_the_history_translated_and_replays_strictly() {
    let mut replies = vec![Reply::sse_file(
        support::conformance::dir().join(THINKING_THEN_TOOL),
    )];
    replies.extend(recorded_error("anthropic_529_overloaded_error.json", 3));
    let anthropic_server = Server::start(replies);
    let openai_server = Server::start(vec![Kit::OpenAi.text("Version 1.2.3 is fixed.")]);
    let client = Client::new()
        .with_provider(support::anthropic(&anthropic_server))
        .with_provider(providers::openai(&openai_server))
        .with_retry_policy(support::fast_retries());
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("session.jsonl");
    let (profile, config) = anthropic_then_openai();
    let (session, mut events) = start_session(
        dir.path(),
        profile,
        client,
        config.with_transcript(&transcript),
    );
    session.submit("which version is fixed?").unwrap();
    let seen = collect_input(&mut events);
    assert_eq!(support::session::stop_reason(&seen), StopReason::Completed);
    assert_eq!(
        fallbacks(&seen),
        [(
            "anthropic/claude-sonnet-4-5".to_string(),
            "openai/gpt-5".to_string(),
            "server".to_string()
        )]
    );
    // The first call, then three attempts at the second (two retries) before the switch.
    assert_eq!(anthropic_server.requests().len(), 4);
    let body = openai_server.requests()[0].json().clone();
    let items = body["input"].as_array().unwrap();
    let of_type =
        |kind: &str| -> Vec<&Value> { items.iter().filter(|i| i["type"] == kind).collect() };
    // Anthropic's call and its result continue on OpenAI, under the same call id.
    assert_eq!(of_type("function_call").len(), 1);
    assert_eq!(of_type("function_call")[0]["call_id"], RECORDED_CALL_ID);
    assert_eq!(of_type("function_call")[0]["name"], "fixed_version");
    assert_eq!(
        of_type("function_call_output")[0]["call_id"],
        RECORDED_CALL_ID
    );
    assert_eq!(
        of_type("function_call_output")[0]["output"],
        "version 1.2.3"
    );
    // Anthropic's thinking and its signature cannot go to OpenAI: left out.
    assert!(of_type("reasoning").is_empty());
    let text = body.to_string();
    assert!(!text.contains("The user wants me to"), "no thinking text");
    let signature = recorded_signature();
    assert!(signature.len() > 100);
    assert!(!text.contains(&signature[..64]), "no Anthropic signature");
    session.close();
    drop(session);

    // The transcript records the switch and replays strictly: the same requests, the
    // recorded failure answered again (never retried), the same fallback.
    let recorded = Transcript::read(&transcript).unwrap();
    let file = std::fs::read_to_string(&transcript).unwrap();
    assert_eq!(file.matches("\"type\":\"fallback\"").count(), 1);
    assert_eq!(recorded.request_count(), 3);
    let model = ScriptedModel::from_transcript(&recorded, ReplayMode::Strict);
    let client = Client::new()
        .with_provider(model.clone())
        .with_provider(model.alias("openai"))
        .with_retry_policy(support::fast_retries());
    let (profile, config) = anthropic_then_openai();
    let (replayed, mut events) = start_session(dir.path(), profile, client, config);
    let outcome = replayed.run("which version is fixed?");
    let seen = collect_input(&mut events);
    let outcome = outcome.unwrap();
    assert_eq!(outcome.text, "Version 1.2.3 is fixed.");
    assert_eq!(fallbacks(&seen).len(), 1);
    assert_eq!(model.request_count(), 3, "no retry of the recorded failure");
    assert_eq!(model.remaining_turns(), 0);
    replayed.history().check_tool_results().unwrap();
}

#[test]
fn a_failure_a_fallback_cannot_help_ends_the_input_as_before() {
    let server = Server::start(recorded_error("anthropic_401_authentication_error.json", 1));
    let client = support::anthropic_client(&server);
    let profile = ProviderProfile::new("anthropic", "claude-sonnet-4-5");
    let config = SessionConfig::default().with_fallback_model(profile.clone().with_model("other"));
    let dir = tempfile::tempdir().unwrap();
    let (session, mut events) = start_session(dir.path(), profile, client, config);
    session.submit("x").unwrap();
    let seen = collect_input(&mut events);
    assert_eq!(support::session::stop_reason(&seen), StopReason::Error);
    assert!(fallbacks(&seen).is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn an_anthropic_history_falling_back_to_gemini_3_marks_the_unsigned_calls() {
    let mut replies = vec![Reply::sse_file(
        support::conformance::dir().join(THINKING_THEN_TOOL),
    )];
    replies.extend(recorded_error("anthropic_529_overloaded_error.json", 3));
    let anthropic_server = Server::start(replies);
    let gemini_server = Server::start(vec![Kit::Gemini.text("Version 1.2.3.")]);
    let client = Client::new()
        .with_provider(support::anthropic(&anthropic_server))
        .with_provider(providers::gemini(&gemini_server))
        .with_retry_policy(support::fast_retries());
    let primary = ProviderProfile::new("anthropic", "claude-sonnet-4-5").with_tool(fixed_version());
    let fallback =
        ProviderProfile::new("gemini", "gemini-3-pro-preview").with_tool(fixed_version());
    let config = SessionConfig::default().with_fallback_model(fallback);
    let dir = tempfile::tempdir().unwrap();
    let (session, mut events) = start_session(dir.path(), primary, client, config);
    session.submit("which version is fixed?").unwrap();
    let seen = collect_input(&mut events);
    assert_eq!(support::session::stop_reason(&seen), StopReason::Completed);
    let body = gemini_server.requests()[0].json().clone();
    let call = body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["parts"].as_array().unwrap())
        .find(|p| p.get("functionCall").is_some())
        .unwrap()
        .clone();
    assert_eq!(call["functionCall"]["name"], "fixed_version");
    assert_eq!(call["thoughtSignature"], "skip_thought_signature_validator");
    assert!(!body.to_string().contains("The user wants me to"));
}
