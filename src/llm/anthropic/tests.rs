//! Unit tests of the Messages format: stream edge cases in inline bodies (an error event
//! after output, a body cut before `message_stop`, the order of events around parallel tool
//! calls) and the key kept out of `Debug`. The recorded corpus is replayed through the
//! public decoder in `tests/it/llm/anthropic.rs`.

use super::*;
use crate::llm::test_support::*;
use crate::llm::{FinishKind, StreamEvent};

fn decoder() -> Box<dyn Decoder> {
    Box::new(AnthropicDecoder::new(None))
}

/// One SSE event of the Messages stream.
fn event(name: &str, data: &str) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// A message's start and its first text block with `text`, shaped after the recorded
/// `anthropic/text_basic.sse`.
fn text_opening(text: &str) -> String {
    [
        event(
            "message_start",
            r#"{"type":"message_start","message":{"model":"claude-sonnet-4-20250514","id":"msg_1","type":"message","role":"assistant","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":17,"output_tokens":1}}}"#,
        ),
        event(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        event(
            "content_block_delta",
            &format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{}}}}}"#,
                serde_json::Value::from(text)
            ),
        ),
    ]
    .concat()
}

#[test]
fn debug_hides_the_key() {
    let shown = format!("{:?}", Anthropic::new("sk-ant-secret-key-123"));
    assert!(!shown.contains("secret"), "{shown}");
    assert!(shown.contains("[REDACTED]"));
}

#[test]
fn an_overloaded_error_event_after_output_is_a_retryable_server_error_item() {
    let body = text_opening("4200 + 42 =")
        + &event(
            "error",
            r#"{"type":"error","error":{"details":null,"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}"#,
        );
    let decoded = decode_whole(decoder(), body.as_bytes());
    let err = decoded.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server);
    assert!(err.is_retryable());
    assert_eq!(err.code(), Some("overloaded_error"));
    assert_eq!(err.message(), "Overloaded");
    // The stream's start, the text's start and its delta came before the error.
    assert_eq!(decoded.events.len(), 3, "{:?}", decoded.events);
}

#[test]
fn a_body_that_ends_before_message_stop_is_a_stream_error() {
    let body = text_opening("4200 + 42 = 4242")
        + &event(
            "content_block_stop",
            r#"{"type":"content_block_stop","index":0}"#,
        )
        + &event(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
        );
    let err = decode_whole(decoder(), body.as_bytes()).result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Stream);
    assert!(err.message().contains("message_stop"), "{err}");
}

/// Text, then two `tool_use` blocks whose input arrives in pieces, then `tool_use` as the
/// stop reason: shaped after the recorded `anthropic/tool_use_parallel_with_text.sse`.
fn parallel_tool_calls_body() -> String {
    let mut body = text_opening("I'll retrieve");
    body += &event(
        "content_block_delta",
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" both secrets."}}"#,
    );
    body += &event("ping", r#"{"type": "ping"}"#);
    body += &event(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    );
    for (index, id, pieces) in [
        (
            1,
            "toolu_01",
            [r#"{\"passwo"#, r#"rd\": \"mellon"#, r#"\"}"#],
        ),
        (
            2,
            "toolu_02",
            [r#"{\"passw"#, r#"ord\": \"radian"#, r#"ce\"}"#],
        ),
    ] {
        body += &event(
            "content_block_start",
            &format!(
                r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"tool_use","id":"{id}","name":"secret_retrieval_tool","input":{{}}}}}}"#
            ),
        );
        for piece in [""].into_iter().chain(pieces) {
            body += &event(
                "content_block_delta",
                &format!(
                    r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"input_json_delta","partial_json":"{piece}"}}}}"#
                ),
            );
        }
        body += &event(
            "content_block_stop",
            &format!(r#"{{"type":"content_block_stop","index":{index}}}"#),
        );
    }
    body += &event(
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":109}}"#,
    );
    body + &event("message_stop", r#"{"type":"message_stop"}"#)
}

#[test]
fn stream_events_come_in_the_documented_order_for_parallel_tool_calls() {
    let body = parallel_tool_calls_body();
    let events = decode_chunks(decoder(), body.as_bytes().chunks(5)).events;
    assert!(matches!(
        events.first(),
        Some(StreamEvent::StreamStart {
            id: Some(_),
            model: Some(_)
        })
    ));
    let Some(StreamEvent::Finish {
        response,
        finish_reason,
        ..
    }) = events.last()
    else {
        panic!("the last event is not Finish");
    };
    assert_eq!(finish_reason.reason, FinishKind::ToolCalls);
    let (text, _) = streamed_text_and_reasoning(&events);
    assert_eq!(text, response.text());
    let mut open: Vec<String> = Vec::new();
    let mut ended = Vec::new();
    for event in &events {
        match event {
            StreamEvent::ToolCallStart { id, .. } => open.push(id.clone()),
            StreamEvent::ToolCallDelta { id, .. } => assert!(open.contains(id)),
            StreamEvent::ToolCallEnd { tool_call } => {
                assert!(open.contains(&tool_call.id));
                ended.push(tool_call.clone());
            }
            _ => {}
        }
    }
    let calls: Vec<_> = response.tool_calls().into_iter().cloned().collect();
    assert_eq!(ended, calls);
    assert_eq!(calls.len(), 2, "{calls:?}");
}
