//! The OpenAI Responses format against recorded streams and a loopback server.

use agentloop::llm::{Client, ContentPart, Message, Request, RetryPolicy, StreamEvent};
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
    served::assert_captures_live_and_offline(&captures, &wire::request(), client, decode_stream);
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

/// The events the client streams for `capture`, served whole; the stream's error last.
fn streamed(capture: &std::path::Path) -> (Vec<StreamEvent>, Option<agentloop::Error>) {
    let server = Server::start(vec![Reply::sse_file(capture)]);
    let client = client(&server).with_retry_policy(RetryPolicy::none());
    let mut events = Vec::new();
    for item in client.stream(&wire::request()).unwrap() {
        match item {
            Ok(event) => events.push(event),
            Err(err) => return (events, Some(err)),
        }
    }
    (events, None)
}

#[test]
fn every_responses_capture_decodes_to_its_expected_result_whole_split_and_bytewise() {
    for capture in conformance::sse_files("openai-responses") {
        let decoded = conformance::replay(&capture, decode_stream);
        // The deltas a UI shows add up to the response's text.
        if let Ok(response) = &decoded {
            let (events, _) = streamed(&capture);
            let (text, _) = conformance::streamed_text_and_reasoning(&events);
            assert_eq!(
                text,
                response.text(),
                "{}: streamed text",
                capture.display()
            );
        }
    }
}

#[test]
fn reasoning_items_keep_their_id_summary_parts_and_stream_order() {
    let capture = wire::capture("openai-responses/reasoning_summary_then_text.sse");
    let response = decode_stream(&std::fs::read(&capture).unwrap()).unwrap();
    match &response.message.content[0] {
        ContentPart::Thinking(t) => {
            assert_eq!(
                t.id.as_deref(),
                Some("rs_0a1097cbfef27a8c00696afa2459008196a08a4261aba00f56")
            );
            assert_eq!(
                t.text.matches("\n\n**").count(),
                2,
                "three parts joined by blank lines"
            );
        }
        other => panic!("reasoning first, got {other:?}"),
    }
    assert!(matches!(&response.message.content[1], ContentPart::Text { text, .. } if text == "3"));
    let (events, error) = streamed(&capture);
    assert!(error.is_none(), "{error:?}");
    let (_, reasoning) = conformance::streamed_text_and_reasoning(&events);
    assert_eq!(
        Some(reasoning),
        response.reasoning(),
        "reasoning deltas include the separators"
    );
    let starts = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ReasoningStart))
        .count();
    assert_eq!(starts, 1);
}

#[test]
fn error_bodies_of_the_responses_api_classify_as_recorded() {
    let captures = conformance::error_files_recorded_from(|from| from == "openai-responses");
    assert_eq!(captures.len(), 2, "captures: {captures:?}");
    served::assert_served_errors(&captures, &wire::request(), client);
}
