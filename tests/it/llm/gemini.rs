//! The Gemini format against recorded streams and a loopback server.

use agentloop::llm::{Client, Message, Request, ToolResult};
use agentloop::unstable::decode_gemini_stream as decode_stream;

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
