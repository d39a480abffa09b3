//! The Gemini format against recorded streams and a loopback server.

use std::time::Duration;

use agentloop::ErrorKind;
use agentloop::llm::{Client, FinishKind, Message, Request, RetryPolicy, ToolResult};
use agentloop::unstable::decode_gemini_stream as decode_stream;
use serde_json::{Value, json};

use crate::llm::wire;
use support::providers::{self, GEMINI_KEY};
use support::{self, Reply, Server, conformance, served};

fn client(server: &Server) -> Client {
    support::client_for(providers::gemini(server))
}

#[test]
fn every_gemini_capture_decodes_to_its_expected_result_whole_and_byte_by_byte() {
    let captures = conformance::sse_files("gemini");
    assert_eq!(captures.len(), 6, "captures: {captures:?}");
    for capture in &captures {
        let server = Server::start(vec![
            Reply::sse_file(capture),
            Reply::sse_file(capture).chunk(1),
        ]);
        let client = client(&server);
        let whole = client.complete(&wire::request()).unwrap();
        conformance::assert_response(capture, "served whole", &whole);
        let bytewise = client.complete(&wire::request()).unwrap();
        conformance::assert_response(capture, "one byte per chunk", &bytewise);
        let offline = decode_stream(&std::fs::read(capture).unwrap()).unwrap();
        conformance::assert_response(capture, "decode_stream", &offline);
        assert_eq!(whole.text(), bytewise.text());
        assert_eq!(whole.reasoning(), offline.reasoning());
    }
}

#[test]
fn every_gemini_error_body_maps_to_its_expected_kind_and_retryability() {
    let captures = conformance::error_files("gemini_");
    assert_eq!(captures.len(), 3, "captures: {captures:?}");
    served::assert_served_errors(&captures, &wire::request(), client);
}

#[test]
fn a_429_with_retry_info_is_retried_after_the_body_delay_when_no_header_says_otherwise() {
    let capture = wire::capture("errors/gemini_429_resource_exhausted.json");
    let server = Server::start(vec![Reply::json(429, std::fs::read(&capture).unwrap())]);
    // 34.4 s is more than this policy's max delay: the error comes at once, with the delay.
    let err = client(&server).complete(&wire::request()).unwrap_err();
    assert_eq!(
        err.retry_after(),
        Some(std::time::Duration::from_secs_f64(34.4))
    );
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn the_request_names_the_model_in_the_path_and_the_key_in_a_header() {
    let server = Server::start(vec![Reply::sse_file(wire::capture(
        "gemini/text_basic.sse",
    ))]);
    let request = Request::new("gemini-2.5-flash", vec![Message::user("4200 + 42?")]);
    client(&server).complete(&request).unwrap();
    let sent = &server.requests()[0];
    assert_eq!(
        sent.path,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert_eq!(sent.header("x-goog-api-key"), Some(GEMINI_KEY));
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.json()["contents"][0]["parts"][0]["text"], "4200 + 42?");
}

#[test]
fn a_signed_function_call_round_trips_byte_identical_in_the_next_request() {
    let capture = wire::capture("gemini/function_call_thought_signature_gemini3.sse");
    let server = Server::start(vec![
        Reply::sse_file(&capture).chunk(5),
        Reply::sse_file(wire::capture("gemini/text_basic.sse")),
    ]);
    let client = client(&server);
    let mut messages = vec![Message::user("Which country is Paris in?")];
    let first = client
        .complete(&Request::new("gemini-3-pro-preview", messages.clone()))
        .unwrap();
    let call = first.tool_calls()[0].clone();
    messages.push(first.message.clone());
    messages.push(Message::tool_result(ToolResult::for_call(
        &call, "France", false,
    )));
    client
        .complete(&Request::new("gemini-3-pro-preview", messages))
        .unwrap();
    let recorded = std::fs::read_to_string(&capture).unwrap();
    let received: serde_json::Value = serde_json::from_str(
        recorded
            .lines()
            .next()
            .unwrap()
            .strip_prefix("data: ")
            .unwrap(),
    )
    .unwrap();
    let signature = received["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
        .as_str()
        .unwrap();
    let sent = server.requests()[1].json().clone();
    assert_eq!(
        sent["contents"][1]["parts"][0]["thoughtSignature"],
        signature
    );
    assert_eq!(
        sent["contents"][1]["parts"][0]["functionCall"]["name"],
        "get_country"
    );
    assert_eq!(
        sent["contents"][2]["parts"][0]["functionResponse"]["name"],
        "get_country"
    );
}

#[test]
fn every_gemini_capture_decodes_to_its_expected_result_whole_split_and_bytewise() {
    for capture in conformance::sse_files("gemini") {
        let body = std::fs::read(&capture).unwrap();
        assert!(
            body.windows(2).any(|w| w == b"\r\n"),
            "{} is CRLF-framed",
            capture.display()
        );
        // The parts carrying a thought signature are among what `replay` checks.
        conformance::replay(&capture, decode_stream).unwrap();
    }
}

#[test]
fn error_bodies_of_the_gemini_api_classify_as_recorded() {
    let captures = conformance::error_files_recorded_from(|from| from == "gemini");
    assert_eq!(captures.len(), 3, "captures: {captures:?}");
    served::assert_served_errors(&captures, &wire::request(), client);
}

/// The error the client reports for one recorded error body served with `status` and
/// `headers`, its retries off.
fn served_error(name: &str, status: u16, headers: &[(&str, &str)]) -> agentloop::Error {
    let body = std::fs::read(wire::capture(&format!("errors/{name}"))).unwrap();
    let mut reply = Reply::json(status, body);
    for (header, value) in headers {
        reply = reply.header(header, value);
    }
    let server = Server::start(vec![reply]);
    client(&server)
        .with_retry_policy(RetryPolicy::none())
        .complete(&wire::request())
        .unwrap_err()
}

#[test]
fn an_invalid_key_is_an_authentication_error_and_quota_429_is_a_rate_limit() {
    let err = served_error("gemini_400_api_key_invalid_stream.json", 400, &[]);
    assert_eq!(err.kind(), ErrorKind::Authentication);
    let err = served_error("gemini_429_resource_exhausted.json", 429, &[]);
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    assert_eq!(err.retry_after(), Some(Duration::from_secs_f64(34.4)));
    let err = served_error(
        "gemini_429_resource_exhausted.json",
        429,
        &[("retry-after", "3")],
    );
    assert_eq!(
        err.retry_after(),
        Some(Duration::from_secs(3)),
        "the header wins"
    );
}

#[test]
fn function_calls_get_unique_ids_across_streams() {
    let body = std::fs::read(wire::capture("gemini/function_call_parallel.sse")).unwrap();
    let one = decode_stream(&body).unwrap();
    let two = decode_stream(&body).unwrap();
    let mut ids: Vec<String> = one
        .tool_calls()
        .into_iter()
        .chain(two.tool_calls())
        .map(|c| c.id.clone())
        .collect();
    assert!(ids.iter().all(|id| id.starts_with("call_")));
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4);
    assert_eq!(one.finish_reason.reason, FinishKind::ToolCalls);
}

/// The body the client sends for `request`, as the loopback server recorded it.
fn body_of(request: &Request) -> Value {
    let server = Server::start(vec![Reply::sse_file(wire::capture(
        "gemini/text_basic.sse",
    ))]);
    client(&server).complete(request).unwrap();
    server.requests()[0].json().clone()
}

#[test]
fn signatures_go_back_on_the_parts_they_came_on() {
    // A function call signed by Gemini 3, answered, then sent back.
    let body = std::fs::read(wire::capture(
        "gemini/function_call_thought_signature_gemini3.sse",
    ))
    .unwrap();
    let response = decode_stream(&body).unwrap();
    let call = response.tool_calls()[0].clone();
    let signature = call.signature.clone().expect("the call is signed");
    let result = ToolResult::for_call(&call, "France", false);
    let request = Request::new(
        "gemini-3-pro-preview",
        vec![
            Message::user("where?"),
            response.message.clone(),
            Message::tool_result(result),
        ],
    );
    let sent = body_of(&request);
    assert_eq!(
        sent["contents"][1],
        json!({"role": "model", "parts": [
            {"functionCall": {"name": "get_country", "args": {}}, "thoughtSignature": signature}
        ]})
    );
    assert_eq!(
        sent["contents"][2],
        json!({"role": "user", "parts": [
            {"functionResponse": {"name": "get_country", "response": {"result": "France"}}}
        ]})
    );

    // A signature on a trailing empty text part goes back as an empty signed text part.
    let body = std::fs::read(wire::capture(
        "gemini/gemini3_thinking_signature_in_empty_part.sse",
    ))
    .unwrap();
    let response = decode_stream(&body).unwrap();
    let request = Request::new(
        "gemini-3-pro-preview",
        vec![Message::user("q"), response.message.clone()],
    );
    let sent = body_of(&request);
    let parts = sent["contents"][1]["parts"].as_array().unwrap();
    let last = parts.last().unwrap();
    assert_eq!(last["text"], "");
    assert!(
        last["thoughtSignature"]
            .as_str()
            .unwrap()
            .starts_with("EtQJ")
    );
    assert_eq!(
        parts.len(),
        2,
        "unsigned thoughts are not sent back: {parts:?}"
    );
    assert_eq!(parts[0]["text"], response.text());
}
