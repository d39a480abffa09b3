//! Unit tests of the Chat Completions format: server quirks and stream edge cases in
//! inline bodies, malformed input, request bodies. The recorded corpus is replayed through
//! the public decoder in `tests/it/llm/openai_chat.rs`.

use serde_json::{Value, json};

use super::*;
use crate::ErrorKind;
use crate::llm::test_support::*;
use crate::llm::{FinishKind, FinishReason, ImageData, ToolCall, ToolDefinition, ToolResult};

fn decoder() -> Box<dyn Decoder> {
    Box::new(ChatDecoder::new("openai-chat"))
}

#[test]
fn a_401_without_a_configured_key_says_so() {
    let err = OpenAiChat::compatible("https://example.invalid/v1").classify_error(
        401,
        &[],
        r#"{"error":{"message":"missing key","type":"invalid_request_error"}}"#,
    );
    assert_eq!(err.kind(), ErrorKind::Authentication);
    assert!(
        err.message().contains("no api key is configured"),
        "{}",
        err.message()
    );
}

fn run(body: &str) -> Decoded {
    decode_whole(decoder(), body.as_bytes())
}

#[test]
fn calls_without_an_index_are_matched_by_id_then_by_position() {
    let decoded = run(concat!(
        "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"b\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"a\",\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    ));
    let response = decoded.result.unwrap();
    let calls = response.tool_calls();
    assert_eq!(
        (calls[0].id.as_str(), &calls[0].arguments),
        ("a", &json!({"x": 1}))
    );
    assert_eq!(
        (calls[1].id.as_str(), &calls[1].arguments),
        ("b", &json!({}))
    );
    assert_eq!(
        response.finish_reason.reason,
        FinishKind::ToolCalls,
        "stop with calls"
    );
    assert_eq!(response.finish_reason.raw.as_deref(), Some("stop"));
}

#[test]
fn a_tool_call_delta_for_an_index_never_opened_is_a_stream_error() {
    let decoded = run(concat!(
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n",
        "data: [DONE]\n\n",
    ));
    let err = decoded.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Stream);
    assert!(err.message().contains("index 3"), "{}", err.message());
}

#[test]
fn a_call_opened_with_a_name_but_no_id_gets_a_synthetic_id() {
    let decoded = run(
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
    );
    let response = decoded.result.unwrap();
    assert_eq!(response.tool_calls()[0].id, "call_0");
}

#[test]
fn truncated_json_in_a_data_line_is_a_stream_error() {
    let err = run("data: {\"choices\":[{\"delta\":{\"content\":\"hi\n\n")
        .result
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Stream);
}

#[test]
fn an_error_object_in_a_data_chunk_is_an_error() {
    let decoded = run(concat!(
        "data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n",
        "data: {\"error\":{\"message\":\"This model's maximum context length is 8192 tokens\",\"type\":\"invalid_request_error\",\"code\":null}}\n\n",
    ));
    let err = decoded.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContextLength);
    assert_eq!(err.status(), None);
    let (text, _) = streamed_text_and_reasoning(&decoded.events);
    assert_eq!(text, "par");
}

#[test]
fn a_stream_that_ends_after_a_finish_reason_without_done_finishes() {
    let response = run(concat!(
        "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    ))
    .result
    .unwrap();
    assert_eq!(response.text(), "ok");
    assert_eq!(response.finish_reason.reason, FinishKind::Stop);
}

#[test]
fn a_stream_that_ends_without_any_finish_is_a_stream_error() {
    let err = run("data: {\"choices\":[{\"delta\":{\"content\":\"cut off\"}}]}\n\n")
        .result
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Stream);
    assert!(err.is_retryable());
}

#[test]
fn done_without_a_finish_reason_finishes_as_stop() {
    let response = run("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n")
        .result
        .unwrap();
    assert_eq!(
        response.finish_reason,
        FinishReason::new(FinishKind::Stop, None)
    );
}

#[test]
fn a_non_utf8_byte_in_content_becomes_a_replacement_character() {
    let body = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\xc3b\"},\"finish_reason\":\"stop\"}]}\n\n";
    assert_eq!(
        decode_whole(decoder(), body).result.unwrap().text(),
        "a\u{fffd}b"
    );
}

#[test]
fn reasoning_then_text_gives_two_parts_in_order() {
    let response = run(concat!(
        "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"think \"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hard\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"answer\"},\"finish_reason\":\"length\"}]}\n\n",
        "data: [DONE]\n\n",
    ))
    .result
    .unwrap();
    assert!(
        matches!(&response.message.content[0], ContentPart::Thinking(t) if t.text == "think hard")
    );
    assert!(
        matches!(&response.message.content[1], ContentPart::Text { text, .. } if text == "answer")
    );
    assert_eq!(response.finish_reason.reason, FinishKind::Length);
}

fn body_of(provider: &OpenAiChat, request: &Request) -> Value {
    let http = provider.build_request(request).unwrap();
    serde_json::from_slice(&http.body).unwrap()
}

#[test]
fn messages_follow_the_chat_shapes() {
    let call = ToolCall::new("call_1", "read", json!({"path": "a"}));
    let mut result = ToolResult::for_call(&call, "contents", false);
    result.image = Some(ImageData::from_bytes(vec![1, 2, 3], "image/png"));
    let mut developer = Message::system("dev rules");
    developer.role = Role::Developer;
    let mut user = Message::user("look");
    user.content.push(ContentPart::Image(ImageData {
        url: Some("https://x/y.png".into()),
        data: None,
        media_type: None,
        detail: Some("low".into()),
    }));
    let request = Request::new(
        "m",
        vec![
            Message::system("sys"),
            developer,
            user,
            Message {
                content: vec![ContentPart::ToolCall(call)],
                ..Message::assistant("")
            },
            Message::tool_result(result),
            Message::user("next"),
        ],
    );
    let body = body_of(&OpenAiChat::compatible("http://127.0.0.1:1/v1"), &request);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "sys\n\ndev rules"},
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}
            ]},
            {"role": "assistant", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "contents"},
            {"role": "user", "content": [
                {"type": "text", "text": "image returned by tool call call_1:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AQID"}}
            ]},
            {"role": "user", "content": "next"}
        ])
    );
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert!(body.get("reasoning_effort").is_none());
}

#[test]
fn max_tokens_uses_the_field_the_server_knows() {
    let mut request = Request::new("m", vec![Message::user("x")]);
    request.max_tokens = Some(100);
    request.reasoning_effort = Some("low".into());
    let openai = body_of(&OpenAiChat::new("sk-test"), &request);
    assert_eq!(openai["max_completion_tokens"], 100);
    assert!(openai.get("max_tokens").is_none());
    assert_eq!(openai["reasoning_effort"], "low");
    let local = body_of(
        &OpenAiChat::compatible("http://localhost:11434/v1"),
        &request,
    );
    assert_eq!(local["max_tokens"], 100);
    assert!(local.get("max_completion_tokens").is_none());
}

#[test]
fn tools_and_named_tool_choice() {
    let mut request = Request::new("m", vec![Message::user("x")]);
    request.tools = vec![ToolDefinition {
        name: "f".into(),
        description: "does f".into(),
        parameters: json!({"type": "object", "properties": {}}).into(),
        freeform: None,
    }];
    request.tool_choice = Some(ToolChoice::Named("f".into()));
    request.provider_options = Some(json!({"ollama": {"options": {"num_ctx": 8192}}}));
    let body = body_of(
        &OpenAiChat::compatible("http://localhost:11434/v1").with_id("ollama"),
        &request,
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "f", "description": "does f", "parameters": {"type": "object", "properties": {}}}}])
    );
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "f"}})
    );
    assert_eq!(
        body["options"],
        json!({"num_ctx": 8192}),
        "options under the provider's own id"
    );
}

#[test]
fn the_key_is_sent_only_when_there_is_one() {
    let request = Request::new("m", vec![Message::user("x")]);
    let without = OpenAiChat::compatible("http://127.0.0.1:1/v1")
        .build_request(&request)
        .unwrap();
    assert!(!without.headers.iter().any(|(k, _)| k == "authorization"));
    let with = OpenAiChat::compatible("http://127.0.0.1:1/v1")
        .with_api_key("k")
        .build_request(&request)
        .unwrap();
    assert!(
        with.headers
            .iter()
            .any(|(k, v)| k == "authorization" && v == "Bearer k")
    );
}

#[test]
fn local_urls_are_recognised() {
    for url in [
        "http://localhost:11434/v1",
        "http://127.0.0.1:8080",
        "http://[::1]:8000/v1",
        "http://LOCALHOST",
    ] {
        assert!(is_local_url(url), "{url}");
    }
    for url in [
        "https://api.openai.com/v1",
        "http://localhost.example.com",
        "http://10.0.0.1",
    ] {
        assert!(!is_local_url(url), "{url}");
    }
}

#[test]
fn debug_never_shows_the_key() {
    let key = "gsk_abcdefghijklmnopqrstuvwxyz0123456789";
    let shown = format!(
        "{:?}",
        OpenAiChat::compatible("https://x/v1").with_api_key(key)
    );
    assert!(!shown.contains(key), "{shown}");
}

#[test]
fn a_server_that_reuses_index_zero_for_each_call_gets_separate_calls() {
    let response = run(concat!(
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"n\\\":1}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"b\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"n\\\":2}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    ))
    .result
    .unwrap();
    let calls = response.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].arguments, json!({"n": 2}));
}

#[test]
fn odd_field_shapes_from_compatible_servers_do_not_break_the_stream() {
    let response = run(concat!(
        // content as a list, a null count, arguments as an object
        "data: {\"choices\":[{\"delta\":{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"ok\",\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]},\"finish_reason\":\"tool_calls\"}],",
        "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":null,\"total_tokens\":null}}\n\n",
    ))
    .result
    .unwrap();
    assert_eq!(response.text(), "ok");
    assert_eq!(response.tool_calls()[0].arguments, json!({"a": 1}));
    assert_eq!(response.usage.input_tokens, 3);
    assert_eq!(response.usage.total_tokens, 3);
}

#[test]
fn an_unknown_event_name_on_a_chat_chunk_is_decoded_as_a_chunk() {
    let response = run(concat!(
        "event: message\ndata: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
        "event: something-new\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    ))
    .result
    .unwrap();
    assert_eq!(response.text(), "hi");
}

#[test]
fn new_talks_to_openai_with_the_key_and_compatible_to_the_given_server() {
    let request = Request::new("m", vec![Message::user("x")]);
    let openai = OpenAiChat::new("sk-k").build_request(&request).unwrap();
    assert_eq!(openai.url, "https://api.openai.com/v1/chat/completions");
    assert!(
        openai
            .headers
            .iter()
            .any(|(k, v)| k == "authorization" && v == "Bearer sk-k")
    );
    let groq = OpenAiChat::new("gsk-k")
        .with_base_url("https://api.groq.com/openai/v1/")
        .build_request(&request)
        .unwrap();
    assert_eq!(groq.url, "https://api.groq.com/openai/v1/chat/completions");
}

#[test]
fn the_prompt_cache_key_goes_to_openais_own_api_only() {
    let mut request = Request::new("gpt-5", vec![Message::user("hi")]);
    request.cache_key = Some("session-1".into());
    let openai = body_of(&OpenAiChat::new("sk-test"), &request);
    assert_eq!(openai["prompt_cache_key"], "session-1");
    let local = body_of(
        &OpenAiChat::compatible("http://127.0.0.1:8080/v1"),
        &request,
    );
    assert!(local.get("prompt_cache_key").is_none(), "{local}");
}
