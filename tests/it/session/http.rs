//! The session against the loopback server speaking the Anthropic Messages format: the
//! requests the loop sends, steering in the recorded body, abort and interrupt while the
//! server stalls, retries and fatal errors through real HTTP.

use std::sync::Arc;
use std::time::Instant;

use agentloop::llm::Client;
use agentloop::profiles::ProviderProfile;
use agentloop::session::{
    CloseReason, EventKind, Events, Session, SessionConfig, SessionState, StopReason,
};
use serde_json::{Value, json};

use support::session::*;
use support::session_sse::{anthropic_sse, partial_text_sse};
use support::{self, FAKE_KEY, GENEROUS, Reply, Server};

pub fn anthropic_profile() -> ProviderProfile {
    ProviderProfile::new("anthropic", "claude-loopback")
        .with_base_instructions("You are a careful coding agent.")
        .with_tool(echo_tool())
}

pub struct HttpHarness {
    pub session: Session,
    pub events: Events,
    pub server: Server,
    pub _dir: tempfile::TempDir,
}

pub fn http_harness(
    replies: Vec<Reply>,
    profile: ProviderProfile,
    config: SessionConfig,
) -> HttpHarness {
    http_harness_with(replies, profile, config, support::anthropic_client)
}

/// [`http_harness`] over the client `client_for` builds for the server.
fn http_harness_with(
    replies: Vec<Reply>,
    profile: ProviderProfile,
    config: SessionConfig,
    client_for: fn(&Server) -> Client,
) -> HttpHarness {
    let server = Server::start(replies);
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let client = client_for(&server);
    let session = Session::new(profile, env, client, config).unwrap();
    let events = session.events();
    HttpHarness {
        session,
        events,
        server,
        _dir: dir,
    }
}

fn text_blocks(message: &Value) -> Vec<String> {
    message["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_steer_from_the_event_loop_is_a_user_message_in_the_very_next_request_body() {
    let (gate, release) = gate_tool("gate");
    let mut h = http_harness(
        vec![
            Reply::sse(anthropic_sse("", &[("toolu_1", "gate", json!({}))])),
            Reply::sse(anthropic_sse("Using tabs.", &[])),
        ],
        anthropic_profile().with_tool(gate),
        SessionConfig::default(),
    );
    h.session.submit("reformat main.rs").unwrap();
    let steer = "use tabs, not spaces";
    let mut seen = Vec::new();
    // The host's event loop: steer as soon as the tool starts, then let the tool finish.
    for event in h.events.by_ref() {
        let kind = event.kind.name();
        seen.push(event);
        match kind {
            "tool_call_start" => {
                h.session.steer(steer).unwrap();
                release.send(()).unwrap();
            }
            "processing_end" => break,
            _ => {}
        }
    }
    let injected = position(&seen, "steering_injected");
    let second_stream = seen
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.kind, EventKind::AssistantTextStart {}))
        .nth(1)
        .map(|(i, _)| i)
        .unwrap();
    assert!(
        injected < second_stream,
        "STEERING_INJECTED precedes the request"
    );
    let requests = h.server.requests();
    assert_eq!(requests.len(), 2);
    assert!(!requests[0].body_text().contains(steer));
    let messages = requests[1].json()["messages"].as_array().unwrap().clone();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(text_blocks(last).last().map(String::as_str), Some(steer));
    // The tool result sits before it in the same request.
    assert!(requests[1].body_text().contains("tool_result"));
}

/// Strips `cache_control` markers (they move to the latest turn on every request).
fn without_cache_markers(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| *k != "cache_control")
                .map(|(k, v)| (k.clone(), without_cache_markers(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_cache_markers).collect()),
        other => other.clone(),
    }
}

#[test]
fn rounds_of_one_input_send_identical_system_prompts_and_tools_and_growing_messages() {
    let mut h = http_harness(
        vec![
            Reply::sse(anthropic_sse(
                "Step one.",
                &[("toolu_1", "echo", json!({"text": "a"}))],
            )),
            Reply::sse(anthropic_sse(
                "",
                &[("toolu_2", "echo", json!({"text": "b"}))],
            )),
            Reply::sse(anthropic_sse("All done.", &[])),
        ],
        anthropic_profile().with_tool(tool("second", |_, _| Ok("x".to_string().into()))),
        SessionConfig::default(),
    );
    h.session.submit("do three rounds").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::Completed);
    let requests = h.server.requests();
    assert_eq!(requests.len(), 3);
    let bodies: Vec<String> = requests.iter().map(|r| r.body_text()).collect();
    let system = |body: &str| -> String {
        // The raw bytes of the system field, as sent.
        let start = body.find("\"system\":").unwrap();
        let end = body[start..].find("]").unwrap() + start;
        body[start..=end].to_string()
    };
    let tools = |body: &str| -> String {
        let value: Value = serde_json::from_str(body).unwrap();
        value["tools"].to_string()
    };
    for body in &bodies[1..] {
        assert_eq!(
            system(body),
            system(&bodies[0]),
            "byte-identical system prompt"
        );
        assert_eq!(tools(body), tools(&bodies[0]), "identical tool list");
    }
    let names: Vec<Value> = requests[0].json()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(names, [json!("echo"), json!("second")], "registry order");
    for pair in requests.windows(2) {
        let older = without_cache_markers(&pair[0].json()["messages"]);
        let newer = without_cache_markers(&pair[1].json()["messages"]);
        let (older, newer) = (older.as_array().unwrap(), newer.as_array().unwrap());
        assert!(newer.len() > older.len());
        assert_eq!(
            &newer[..older.len()],
            &older[..],
            "messages only grow at the end"
        );
        // Byte level, with the breakpoint markers taken out (the cache keys on the content):
        // the newer body starts with the older one up to the older's last breakpoint, and
        // has a breakpoint there too.
        const MARK: &str = ",\"cache_control\":{\"type\":\"ephemeral\"}";
        let marks = |body: String| -> (String, Vec<usize>) {
            let pieces: Vec<&str> = body.split(MARK).collect();
            let mut at = 0;
            let points = pieces[..pieces.len() - 1]
                .iter()
                .map(|piece| {
                    at += piece.len();
                    at
                })
                .collect();
            (pieces.concat(), points)
        };
        let (older, older_marks) = marks(pair[0].body_text());
        let (newer, newer_marks) = marks(pair[1].body_text());
        let cut = *older_marks.last().unwrap();
        assert!(newer.starts_with(&older[..cut]));
        assert!(newer_marks.contains(&cut));
    }
}

/// A client whose stall timeout outlasts [`GENEROUS`]: a stalled stream that ends within
/// the ceiling was cut by the session's stop, not by the client's own timeout.
fn patient_client(server: &Server) -> Client {
    let http = support::http_options().with_stall_timeout(GENEROUS * 3);
    support::client_for(support::anthropic(server).with_http_options(http))
}

#[test]
fn abort_while_the_server_stalls_mid_stream_ends_the_session_promptly() {
    let mut h = http_harness_with(
        vec![Reply::sse(partial_text_sse("I am thinking about it")).then_stall()],
        anthropic_profile(),
        SessionConfig::default(),
        patient_client,
    );
    h.session.submit("go").unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::AssistantTextDelta { .. })
    });
    let started = Instant::now();
    h.session.abort();
    let events = collect_to_end(&mut h.events);
    let elapsed = started.elapsed();
    assert!(elapsed < GENEROUS, "SESSION_END after {elapsed:?}");
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::SessionEnd {
            reason: CloseReason::Aborted,
            ..
        }
    ));
    assert!(
        h.server.wait_client_closed(0, GENEROUS).is_some(),
        "the socket was closed"
    );
    assert_eq!(h.session.history().check_tool_results(), Ok(()));
}

#[test]
fn interrupt_while_the_server_stalls_mid_stream_returns_to_idle_and_the_next_submit_works() {
    let mut h = http_harness_with(
        vec![
            Reply::sse(partial_text_sse("I am thinking about it")).then_stall(),
            Reply::sse(anthropic_sse("Fresh answer.", &[])),
        ],
        anthropic_profile(),
        SessionConfig::default(),
        patient_client,
    );
    h.session.submit("go").unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::AssistantTextDelta { .. })
    });
    let started = Instant::now();
    h.session.interrupt();
    let events = collect_input(&mut h.events);
    let elapsed = started.elapsed();
    assert!(elapsed < GENEROUS, "PROCESSING_END after {elapsed:?}");
    assert_eq!(stop_reason(&events), StopReason::Interrupted);
    assert!(h.server.wait_client_closed(0, GENEROUS).is_some());
    assert_eq!(h.session.history().check_tool_results(), Ok(()));
    assert_eq!(h.session.state(), SessionState::Idle);
    let outcome = h.session.run("again").unwrap();
    assert_eq!(outcome.text, "Fresh answer.");
    assert_eq!(h.server.requests().len(), 2);
}

#[test]
fn a_rate_limited_request_is_retried_over_http_and_the_input_completes() {
    let mut h = http_harness(
        vec![
            Reply::json(
                429,
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
            ),
            Reply::sse(anthropic_sse("Done after a retry.", &[])),
        ],
        anthropic_profile(),
        SessionConfig::default(),
    );
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::Completed);
    assert!(!names(&events).contains(&"error"));
    assert_eq!(h.server.requests().len(), 2);
}

#[test]
fn a_401_closes_the_session_at_once_and_no_event_carries_the_key() {
    let body = format!(
        r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {FAKE_KEY}"}}}}"#
    );
    let mut h = http_harness(
        vec![
            Reply::json(401, body),
            Reply::sse(anthropic_sse("never", &[])),
        ],
        anthropic_profile(),
        SessionConfig::default(),
    );
    h.session.submit("go").unwrap();
    let events = collect_to_end(&mut h.events);
    assert_eq!(h.server.requests().len(), 1, "not retried");
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::SessionEnd {
            reason: CloseReason::Error,
            ..
        }
    ));
    for event in &events {
        let line = serde_json::to_string(event).unwrap();
        assert!(!line.contains(FAKE_KEY), "{line}");
        assert!(!format!("{event:?}").contains(FAKE_KEY));
    }
    assert!(!format!("{:?}", h.session).contains(FAKE_KEY));
}
