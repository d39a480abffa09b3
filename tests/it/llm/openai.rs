//! The OpenAI Responses format against recorded streams and a loopback server.

use agentloop::llm::{Client, Message, Request, StreamEvent};
use agentloop::unstable::decode_openai_stream as decode_stream;

use crate::llm::wire;
use support::providers::{self, OPENAI_KEY};
use support::{self, Reply, Server, conformance, served};

fn client(server: &Server) -> Client {
    support::client_for(providers::openai(server))
}

#[test]
fn every_responses_capture_decodes_to_its_expected_result_whole_and_byte_by_byte() {
    let captures = conformance::sse_files("openai-responses");
    assert_eq!(captures.len(), 7, "captures: {captures:?}");
    for capture in &captures {
        served::assert_capture_live_and_offline(
            capture,
            &wire::request(),
            client,
            decode_stream,
            conformance::assert_response,
        );
    }
}

#[test]
fn every_responses_error_body_maps_to_its_expected_kind_and_retryability() {
    let captures = conformance::error_files("openai_responses_");
    assert_eq!(captures.len(), 2, "captures: {captures:?}");
    served::assert_served_errors(&captures, &wire::request(), client);
}

#[test]
fn the_request_goes_to_responses_with_a_bearer_key_and_a_stateless_streaming_body() {
    let server = Server::start(vec![Reply::sse_file(wire::capture(
        "openai-responses/text_basic.sse",
    ))]);
    let request = Request::new(
        "gpt-5.2",
        vec![Message::system("be terse"), Message::user("hello")],
    );
    let response = client(&server).complete(&request).unwrap();
    assert_eq!(response.provider, "openai");
    assert_eq!(
        response.id,
        "resp_0360bd45725b0a010068f966a4c4a881959717ba17b93477ef"
    );
    let sent = &server.requests()[0];
    assert_eq!(sent.method, "POST");
    assert_eq!(sent.path, "/v1/responses");
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {OPENAI_KEY}").as_str())
    );
    let body = sent.json();
    assert_eq!(body["instructions"], "be terse");
    assert_eq!(body["stream"], true);
    assert_eq!(body["store"], false);
}

#[test]
fn a_custom_tool_call_streams_its_raw_input_as_deltas() {
    let capture = wire::capture("openai-responses/custom_tool_call_SYNTHETIC.sse");
    let server = Server::start(vec![Reply::sse_file(&capture).chunk(13)]);
    let events: Vec<StreamEvent> = client(&server)
        .stream(&wire::request())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let deltas: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallDelta { id, delta } if id == "call_custom_sql_001" => {
                Some(delta.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "SELECT * FROM users WHERE age > 25");
    assert!(events.iter().any(|e| matches!(e,
        StreamEvent::ToolCallEnd { tool_call } if tool_call.arguments == "SELECT * FROM users WHERE age > 25")));
}
