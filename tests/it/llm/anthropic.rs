//! The Anthropic Messages adapter against recorded streams and a loopback server. Its
//! decoder's edge cases in inline bodies are unit tests (`src/llm/anthropic/tests.rs`).

use agentloop::llm::{Message, Request, ToolDefinition, ToolResult};
use agentloop::unstable::{SseParser as Parser, decode_anthropic_stream as decode_stream};
use serde_json::{Value, json};

use support::{self, Reply, Server, conformance, served};

fn request() -> Request {
    Request::new("claude-test", vec![Message::user("hello")])
}

#[test]
fn every_capture_decodes_to_its_expected_result_whole_and_byte_by_byte() {
    let captures = conformance::sse_files("anthropic");
    assert!(captures.len() >= 7, "captures: {captures:?}");
    served::assert_captures_live_and_offline(
        &captures,
        &request(),
        support::anthropic_client,
        decode_stream,
    );
}

#[test]
fn every_capture_decodes_to_its_expected_result_whole_split_and_bytewise() {
    for capture in conformance::sse_files("anthropic") {
        let _decoded = conformance::replay(&capture, decode_stream);
    }
}

#[test]
fn every_error_body_maps_to_its_expected_kind_and_retryability() {
    let captures = conformance::error_files("anthropic_");
    assert!(captures.len() >= 3, "captures: {captures:?}");
    served::assert_served_errors(&captures, &request(), support::anthropic_client);
}

fn capture(name: &str) -> std::path::PathBuf {
    conformance::dir().join("anthropic").join(name)
}

fn tools() -> Vec<ToolDefinition> {
    ["read_file", "shell"]
        .iter()
        .map(|name| ToolDefinition {
            name: name.to_string(),
            description: format!("the {name} tool"),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}})
                .into(),
            freeform: None,
        })
        .collect()
}

/// The signature of the first thinking block in a capture, exactly as it was sent.
fn signature_in(capture: &std::path::Path) -> String {
    let mut parser = Parser::new();
    let mut events = Vec::new();
    parser.feed(&std::fs::read(capture).unwrap(), &mut events);
    parser.finish(&mut events);
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .find_map(|v| v["delta"]["signature"].as_str().map(str::to_string))
        .expect("a signature_delta")
}

#[test]
fn request_carries_key_version_betas_and_a_streaming_body() {
    let server = Server::start(vec![Reply::sse_file(capture("text_basic.sse"))]);
    let mut req = request();
    req.provider_options =
        Some(json!({"anthropic": {"beta_headers": ["interleaved-thinking-2025-05-14"]}}));
    support::anthropic_client(&server).complete(&req).unwrap();
    let sent = &server.requests()[0];
    assert_eq!(sent.method, "POST");
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some(support::FAKE_KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        sent.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14,prompt-caching-2024-07-31")
    );
    let body = sent.json();
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_tokens"], 8192);
    assert_eq!(body["messages"][0]["role"], "user");
}

#[test]
fn thinking_signature_is_sent_back_byte_identical_with_the_tool_result() {
    let thinking_capture = capture("thinking_then_tool_use_no_args.sse");
    let server = Server::start(vec![
        Reply::sse_file(&thinking_capture).chunk(7),
        Reply::sse_file(capture("text_basic.sse")),
    ]);
    let client = support::anthropic_client(&server);
    let mut first = request();
    first.tools = tools();
    first.reasoning_effort = Some("low".into());
    let response = client.complete(&first).unwrap();
    let call = response.tool_calls()[0].clone();

    let mut second = first.clone();
    second.messages.push(response.message.clone());
    second
        .messages
        .push(Message::tool_result(ToolResult::for_call(
            &call, "1.2.3", false,
        )));
    client.complete(&second).unwrap();

    let signature = signature_in(&thinking_capture);
    let sent = &server.requests()[1];
    let assistant = &sent.json()["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"][0]["type"], "thinking");
    assert_eq!(assistant["content"][0]["signature"], signature.as_str());
    assert_eq!(
        assistant["content"][0]["thinking"],
        response.reasoning().unwrap().as_str()
    );
    assert_eq!(assistant["content"][1]["type"], "tool_use");
    assert_eq!(assistant["content"][1]["id"], call.id.as_str());
    assert_eq!(assistant["content"][1]["input"], json!({}));
    let raw = sent.body_text();
    assert!(
        raw.contains(&format!("\"signature\":\"{signature}\"")),
        "the signature bytes were not sent back unchanged"
    );
    let results = &sent.json()["messages"][2];
    assert_eq!(results["role"], "user");
    assert_eq!(results["content"][0]["type"], "tool_result");
    assert_eq!(results["content"][0]["tool_use_id"], call.id.as_str());
    assert_eq!(
        sent.json()["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
}

#[test]
fn redacted_thinking_is_sent_back_as_the_data_it_came_with() {
    let redacted = capture("redacted_thinking.sse");
    let server = Server::start(vec![
        Reply::sse_file(&redacted),
        Reply::sse_file(capture("text_basic.sse")),
    ]);
    let client = support::anthropic_client(&server);
    let response = client.complete(&request()).unwrap();
    let mut next = request();
    next.messages.push(response.message.clone());
    next.messages.push(Message::user("go on"));
    client.complete(&next).unwrap();

    let mut parser = Parser::new();
    let mut events = Vec::new();
    parser.feed(&std::fs::read(&redacted).unwrap(), &mut events);
    let data: Vec<String> = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .filter_map(|v| v["content_block"]["data"].as_str().map(str::to_string))
        .collect();
    assert_eq!(data.len(), 2);
    let sent = server.requests();
    let content = &sent[1].json()["messages"][1]["content"];
    for (i, data) in data.iter().enumerate() {
        assert_eq!(
            content[i],
            json!({"type": "redacted_thinking", "data": data})
        );
    }
}

const BREAKPOINT: &str = ",\"cache_control\":{\"type\":\"ephemeral\"}";

/// The body without its breakpoint markers (the cache keys on the content, not on them:
/// the older request's next-to-last marker is gone from the newer one), and where the
/// last marker (the latest user turn's) stood in it.
fn without_breakpoints(body: &str) -> (String, usize) {
    let before_last = body.rfind(BREAKPOINT).expect("a cache breakpoint");
    let markers_before = body[..before_last].matches(BREAKPOINT).count();
    (
        body.replace(BREAKPOINT, ""),
        before_last - markers_before * BREAKPOINT.len(),
    )
}

#[test]
fn consecutive_requests_share_a_byte_identical_prefix_and_carry_cache_breakpoints() {
    let server = Server::start(vec![
        Reply::sse_file(capture("tool_use_parallel_with_text.sse")),
        Reply::sse_file(capture("text_basic.sse")),
        Reply::sse_file(capture("text_basic.sse")),
    ]);
    let client = support::anthropic_client(&server);
    let mut req = Request::new(
        "claude-test",
        vec![
            Message::system("You are a careful coding agent."),
            Message::user("Retrieve both secrets."),
        ],
    );
    req.tools = tools();
    let response = client.complete(&req).unwrap();
    req.messages.push(response.message.clone());
    for call in response.tool_calls() {
        req.messages.push(Message::tool_result(ToolResult::for_call(
            call, "secret", false,
        )));
    }
    let response = client.complete(&req).unwrap();
    req.messages.push(response.message.clone());
    req.messages.push(Message::user("Thanks. Now summarise."));
    client.complete(&req).unwrap();

    let bodies: Vec<String> = server.requests().iter().map(|r| r.body_text()).collect();
    assert_eq!(bodies.len(), 3);
    for pair in bodies.windows(2) {
        let (older, cut) = without_breakpoints(&pair[0]);
        let (newer, _) = without_breakpoints(&pair[1]);
        assert!(
            cut > older.find("\"messages\":[").unwrap(),
            "the prefix covers the history"
        );
        assert!(
            newer.starts_with(&older[..cut]),
            "the newer request does not start with the older one up to its last breakpoint"
        );
    }
    for (i, request) in server.requests().iter().enumerate() {
        let body = request.json();
        // System, tools, and the latest two user turns (the first request has one).
        let marks = if i == 0 { 3 } else { 4 };
        assert_eq!(
            bodies[i].matches("cache_control").count(),
            marks,
            "request {i}"
        );
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        let tools = body["tools"].as_array().unwrap();
        assert_eq!(tools.last().unwrap()["cache_control"]["type"], "ephemeral");
        let messages = body["messages"].as_array().unwrap();
        let last_user = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
        let last_block = last_user["content"].as_array().unwrap().last().unwrap();
        assert_eq!(
            last_block["cache_control"]["type"], "ephemeral",
            "request {i}"
        );
        assert!(
            request
                .header("anthropic-beta")
                .is_some_and(|b| b.contains("prompt-caching-2024-07-31"))
        );
    }
    // The middle request's latest user turn holds the two tool results.
    let middle = server.requests()[1].json().clone();
    let results = middle["messages"][2]["content"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|b| b["type"] == "tool_result"));
}

#[test]
fn the_same_request_serialises_to_the_same_bytes_and_auto_cache_can_be_turned_off() {
    let server = Server::start(vec![
        Reply::sse_file(capture("text_basic.sse")),
        Reply::sse_file(capture("text_basic.sse")),
        Reply::sse_file(capture("text_basic.sse")),
    ]);
    let client = support::anthropic_client(&server);
    let mut req = request();
    req.tools = tools();
    req.provider_options = Some(json!({"anthropic": {"metadata": {"user_id": "u"}, "top_k": 3}}));
    client.complete(&req).unwrap();
    client.complete(&req).unwrap();
    req.provider_options = Some(json!({"anthropic": {"auto_cache": false}}));
    client.complete(&req).unwrap();
    let sent = server.requests();
    assert_eq!(sent[0].body, sent[1].body);
    assert_eq!(sent[0].json()["top_k"], 3);
    assert_eq!(sent[0].json()["metadata"]["user_id"], "u");
    assert!(!sent[2].body_text().contains("cache_control"));
    assert_eq!(sent[2].header("anthropic-beta"), None);
    assert!(sent[2].json().get("auto_cache").is_none());
}
