//! Unit tests of the Responses format: stream edge cases in inline bodies, malformed
//! input, request bodies. The recorded corpus is replayed through the public decoder in
//! `tests/it/llm/openai.rs`.

use serde_json::{Value, json};

use super::*;
use crate::llm::test_support::*;
use crate::llm::{
    ContentPart, FinishKind, FreeformFormat, Message, Role, StreamEvent, ThinkingData, ToolCall,
    ToolDefinition, ToolKind, ToolResult,
};

fn decoder() -> Box<dyn Decoder> {
    Box::new(ResponsesDecoder::new("openai"))
}

#[test]
fn the_in_stream_error_event_is_an_error_after_the_stream_started() {
    // Shaped after the recorded `openai-responses/error_insufficient_quota.sse`.
    let body = b"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"model\":\"gpt-5-nano\",\"output\":[]}}\n\n\
        event: error\ndata: {\"type\":\"error\",\"sequence_number\":1,\"error\":{\"type\":\"insufficient_quota\",\"code\":\"insufficient_quota\",\"message\":\"You exceeded your current quota.\",\"param\":null}}\n\n\
        event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_1\",\"status\":\"failed\",\"error\":{\"code\":\"insufficient_quota\",\"message\":\"You exceeded your current quota.\"},\"output\":[]}}\n\n";
    let decoded = decode_whole(decoder(), body);
    let err = decoded.result.unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Quota);
    assert!(matches!(
        decoded.events.first(),
        Some(StreamEvent::StreamStart { .. })
    ));
    assert!(
        !decoded
            .events
            .iter()
            .any(|e| matches!(e, StreamEvent::Finish { .. }))
    );
}

#[test]
fn a_response_failed_without_an_error_event_is_an_error_too() {
    let body = b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n\
        event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"boom\"}}}\n\n";
    let err = decode_whole(decoder(), body).result.unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Server);
    assert!(err.is_retryable());
    assert_eq!(err.message(), "boom");
}

#[test]
fn truncated_json_in_a_data_line_is_a_stream_error() {
    let body = b"event: response.created\ndata: {\"type\":\"response.created\",\"respo\n\n";
    let err = decode_whole(decoder(), body).result.unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::Stream);
}

#[test]
fn an_unknown_event_type_is_passed_through_and_the_stream_continues() {
    let body =
        b"data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"model\":\"m\"}}\n\n\
        data: {\"type\":\"response.brand_new_thing\",\"x\":1}\n\n\
        data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"delta\":\"hi\"}\n\n\
        data: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\"}}\n\n";
    let decoded = decode_whole(decoder(), body);
    assert!(decoded.events.iter().any(|e| matches!(e,
        StreamEvent::ProviderEvent { event_type, data } if event_type == "response.brand_new_thing" && data["x"] == 1)));
    assert_eq!(decoded.result.unwrap().text(), "hi");
}

#[test]
fn a_tool_call_delta_for_an_item_never_opened_is_skipped_with_a_warning() {
    let body = b"data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n\
        data: {\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_nope\",\"delta\":\"{\"}\n\n\
        data: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\"}}\n\n";
    let response = decode_whole(decoder(), body).result.unwrap();
    assert!(response.tool_calls().is_empty());
    assert!(
        response.warnings[0].contains("fc_nope"),
        "{:?}",
        response.warnings
    );
}

#[test]
fn a_non_utf8_byte_inside_a_string_becomes_a_replacement_character() {
    let body = b"data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"delta\":\"a\xffb\"}\n\n\
        data: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\"}}\n\n";
    assert_eq!(
        decode_whole(decoder(), body).result.unwrap().text(),
        "a\u{fffd}b"
    );
}

#[test]
fn text_deltas_without_an_item_id_join_one_text_part() {
    let body = b"data: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n\
        data: {\"type\":\"response.output_text.delta\",\"delta\":\"b\"}\n\n\
        data: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\"}}\n\n";
    let response = decode_whole(decoder(), body).result.unwrap();
    assert_eq!(response.text(), "ab");
    assert_eq!(response.message.content.len(), 1);
}

#[test]
fn a_stream_that_ends_before_response_completed_is_a_stream_error() {
    let body = b"data: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n\
        data: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"delta\":\"partial\"}\n\n";
    let decoded = decode_whole(decoder(), body);
    assert_eq!(decoded.result.unwrap_err().kind(), crate::ErrorKind::Stream);
}

#[test]
fn incomplete_for_content_filter_finishes_as_content_filter() {
    let body = b"data: {\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"content_filter\"}}}\n\n";
    let response = decode_whole(decoder(), body).result.unwrap();
    assert_eq!(response.finish_reason.reason, FinishKind::ContentFilter);
}

fn body_of(request: &Request) -> Value {
    serde_json::from_slice(&request::request_body(request, "openai").unwrap()).unwrap()
}

#[test]
fn system_and_developer_messages_become_instructions() {
    let mut developer = Message::user("be brief");
    developer.role = Role::Developer;
    let request = Request::new(
        "gpt-5.2",
        vec![
            Message::system("you are terse"),
            developer,
            Message::user("hi"),
        ],
    );
    let body = body_of(&request);
    assert_eq!(body["instructions"], "you are terse\n\nbe brief");
    assert_eq!(
        body["input"],
        json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}])
    );
    assert_eq!(body["store"], false);
    assert_eq!(body["stream"], true);
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
}

#[test]
fn encrypted_reasoning_is_asked_of_reasoning_models_only() {
    for (model, asked) in [
        ("gpt-5.2", true),
        ("o4-mini", true),
        ("gpt-4o", false),
        ("gpt-4.1-mini", false),
    ] {
        let body = body_of(&Request::new(model, vec![Message::user("x")]));
        assert_eq!(body.get("include").is_some(), asked, "{model}");
    }
}

#[test]
fn thinking_from_another_provider_is_not_sent_but_responses_reasoning_is() {
    let mut assistant = Message::assistant("done");
    assistant.content.insert(
        0,
        ContentPart::Thinking(ThinkingData {
            text: "anthropic thoughts".into(),
            signature: Some("anthropic-sig".into()),
            redacted: false,
            id: None,
        }),
    );
    assistant.content.insert(
        1,
        ContentPart::Thinking(ThinkingData {
            text: "summary".into(),
            signature: Some("gAAAA-encrypted".into()),
            redacted: false,
            id: Some("rs_1".into()),
        }),
    );
    let body = body_of(&Request::new("m", vec![assistant]));
    assert_eq!(
        body["input"],
        json!([
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "summary"}], "encrypted_content": "gAAAA-encrypted"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}
        ])
    );
}

#[test]
fn custom_tools_and_calls_use_the_custom_item_types() {
    let mut request = Request::new("m", vec![]);
    request.tools = vec![ToolDefinition {
        name: "apply_patch".into(),
        description: "patch files".into(),
        parameters: json!({"type": "object"}).into(),
        freeform: Some(FreeformFormat {
            syntax: "lark".into(),
            definition: "start: x".into(),
        }),
    }];
    request.tool_choice = Some(crate::llm::ToolChoice::Named("apply_patch".into()));
    let call = ToolCall {
        kind: ToolKind::Custom,
        item_id: Some("ctc_1".into()),
        ..ToolCall::new(
            "call_1",
            "apply_patch",
            Value::String("*** Begin Patch".into()),
        )
    };
    let result = ToolResult::for_call(&call, "ok", false);
    request.messages = vec![
        Message {
            content: vec![ContentPart::ToolCall(call)],
            ..Message::assistant("")
        },
        Message::tool_result(result),
    ];
    let body = body_of(&request);
    assert_eq!(
        body["tools"],
        json!([{"type": "custom", "name": "apply_patch", "description": "patch files",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}}])
    );
    assert_eq!(
        body["tool_choice"],
        json!({"type": "custom", "name": "apply_patch"})
    );
    assert_eq!(
        body["input"],
        json!([
            {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_1", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "call_1", "output": "ok"}
        ])
    );
}

#[test]
fn provider_options_merge_into_the_body_key_by_key() {
    let mut request = Request::new("m", vec![Message::user("x")]);
    request.reasoning_effort = Some("high".into());
    request.provider_options = Some(
        json!({"openai": {"reasoning": {"summary": "detailed"}, "service_tier": "flex"}, "gemini": {"x": 1}}),
    );
    let body = body_of(&request);
    assert_eq!(
        body["reasoning"],
        json!({"effort": "high", "summary": "detailed"})
    );
    assert_eq!(body["service_tier"], "flex");
    assert!(body.get("x").is_none());
}

#[test]
fn request_bodies_are_deterministic() {
    let mut request = Request::new("m", vec![Message::system("s"), Message::user("u")]);
    request.provider_options = Some(json!({"openai": {"b": 1, "a": 2}}));
    let one = request::request_body(&request, "openai").unwrap();
    let two = request::request_body(&request, "openai").unwrap();
    assert_eq!(one, two);
}

#[test]
fn debug_never_shows_the_key() {
    let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123";
    let shown = format!("{:?}", OpenAi::new(key));
    assert!(!shown.contains(key), "{shown}");
    assert!(shown.contains("[REDACTED]"));
}

#[test]
fn the_cache_key_is_the_prompt_cache_key() {
    let mut request = Request::new("gpt-5", vec![Message::user("hi")]);
    assert!(body_of(&request).get("prompt_cache_key").is_none());
    request.cache_key = Some("session-1".into());
    assert_eq!(body_of(&request)["prompt_cache_key"], "session-1");
}
