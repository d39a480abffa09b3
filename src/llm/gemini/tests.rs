//! Unit tests of the Gemini format: stream edge cases in inline bodies, errors, request
//! bodies and the schema subset. The recorded corpus is replayed through the public decoder
//! in `tests/it/llm/gemini.rs`.

use serde_json::{Value, json};

use super::request::gemini_schema;
use super::*;
use crate::llm::test_support::*;
use crate::llm::{
    ContentPart, FinishKind, FinishReason, Message, StreamEvent, ThinkingData, ToolCall,
    ToolChoice, ToolDefinition, ToolResult,
};

fn decoder() -> Box<dyn Decoder> {
    Box::new(GeminiDecoder::new())
}

#[test]
fn an_over_long_prompt_is_a_context_length_error() {
    let body = r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#;
    let err = Gemini::new("k").classify_error(400, &[], body);
    assert_eq!(err.kind(), ErrorKind::ContextLength);
    assert_eq!(err.code(), Some("INVALID_ARGUMENT"));
}

#[test]
fn grpc_statuses_map_per_the_spec() {
    for (grpc, kind) in [
        ("NOT_FOUND", ErrorKind::NotFound),
        ("INVALID_ARGUMENT", ErrorKind::InvalidRequest),
        ("UNAUTHENTICATED", ErrorKind::Authentication),
        ("PERMISSION_DENIED", ErrorKind::AccessDenied),
        ("RESOURCE_EXHAUSTED", ErrorKind::RateLimited),
        ("UNAVAILABLE", ErrorKind::Server),
        ("DEADLINE_EXCEEDED", ErrorKind::Timeout),
        ("INTERNAL", ErrorKind::Server),
    ] {
        let body = format!(r#"[{{"error":{{"code":500,"message":"m","status":"{grpc}"}}}}]"#);
        assert_eq!(gemini_error(Some(500), &[], &body).kind(), kind, "{grpc}");
    }
}

fn run(body: &str) -> Decoded {
    decode_whole(decoder(), body.as_bytes())
}

#[test]
fn an_error_chunk_mid_stream_is_an_error_not_a_finish() {
    let decoded = run(concat!(
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hel\"}]}}]}\r\n\r\n",
        "data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":\"UNAVAILABLE\"}}\r\n\r\n",
    ));
    let err = decoded.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server);
    assert_eq!(err.status(), None);
    assert!(
        !decoded
            .events
            .iter()
            .any(|e| matches!(e, StreamEvent::Finish { .. }))
    );
}

#[test]
fn a_stream_without_a_finish_reason_is_a_stream_error() {
    let err =
        run("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hel\"}]}}]}\r\n\r\n")
            .result
            .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Stream);
}

#[test]
fn truncated_json_in_a_data_line_is_a_stream_error() {
    let err = run("data: {\"candidates\":[{\"content\":{\"parts\":[{\"te\r\n\r\n")
        .result
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Stream);
}

#[test]
fn safety_and_recitation_finish_as_content_filter_and_a_blocked_prompt_too() {
    for raw in ["SAFETY", "RECITATION"] {
        let body = format!(
            "data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"x\"}}]}},\"finishReason\":\"{raw}\"}}]}}\r\n\r\n"
        );
        let response = run(&body).result.unwrap();
        assert_eq!(
            response.finish_reason,
            FinishReason::new(FinishKind::ContentFilter, Some(raw.into()))
        );
    }
    let response = run("data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":{\"promptTokenCount\":5}}\r\n\r\n")
        .result
        .unwrap();
    assert_eq!(response.finish_reason.reason, FinishKind::ContentFilter);
    assert_eq!(response.text(), "");
}

#[test]
fn a_thinking_only_stream_cut_by_max_tokens_gives_empty_text_reasoning_and_length() {
    let response = run(concat!(
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"**Plan**\",\"thought\":true}]}}]}\r\n\r\n",
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\"}]},\"finishReason\":\"MAX_TOKENS\"}],",
        "\"usageMetadata\":{\"promptTokenCount\":4,\"thoughtsTokenCount\":50,\"totalTokenCount\":54}}\r\n\r\n",
    ))
    .result
    .unwrap();
    assert_eq!(response.text(), "");
    assert_eq!(response.reasoning().as_deref(), Some("**Plan**"));
    assert_eq!(response.finish_reason.reason, FinishKind::Length);
    assert_eq!(response.usage.output_tokens, 0);
    assert_eq!(response.usage.reasoning_tokens, Some(50));
}

fn body_of(request: &Request) -> Value {
    let http = Gemini::new("k").build_request(request).unwrap();
    serde_json::from_slice(&http.body).unwrap()
}

#[test]
fn parallel_results_share_one_user_content_and_names_come_from_the_calls() {
    let a = ToolCall::new("call_a", "read", json!({"p": 1}));
    let b = ToolCall::new("call_b", "grep", json!({"q": "x"}));
    let mut ra = ToolResult::for_call(&a, "ok", false);
    ra.name = None;
    let rb = ToolResult::for_call(&b, "no match", true);
    let assistant = Message {
        content: vec![ContentPart::ToolCall(a), ContentPart::ToolCall(b)],
        ..Message::assistant("")
    };
    let request = Request::new(
        "gemini-2.5-flash",
        vec![
            Message::system("sys"),
            Message::user("go"),
            assistant,
            Message::tool_result(ra),
            Message::tool_result(rb),
        ],
    );
    let sent = body_of(&request);
    assert_eq!(
        sent["systemInstruction"],
        json!({"parts": [{"text": "sys"}]})
    );
    assert_eq!(
        sent["contents"][2],
        json!({"role": "user", "parts": [
            {"functionResponse": {"name": "read", "response": {"result": "ok"}}},
            {"functionResponse": {"name": "grep", "response": {"error": "no match"}}}
        ]})
    );
}

#[test]
fn a_result_whose_tool_name_cannot_be_found_is_an_invalid_request() {
    let orphan = ToolResult {
        tool_call_id: "call_x".into(),
        content: "?".into(),
        is_error: false,
        image: None,
        name: None,
        kind: Default::default(),
    };
    let request = Request::new("gemini-2.5-flash", vec![Message::tool_result(orphan)]);
    let err = Gemini::new("k").build_request(&request).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    assert!(err.message().contains("call_x"));
}

#[test]
fn thinking_is_not_sent_back_whoever_signed_it() {
    let mut assistant = Message::assistant("answer");
    assistant.content.insert(
        0,
        ContentPart::Thinking(ThinkingData {
            text: "plan".into(),
            signature: Some("sig".into()),
            redacted: false,
            id: None,
        }),
    );
    let sent = body_of(&Request::new(
        "gemini-2.5-pro",
        vec![Message::user("q"), assistant],
    ));
    assert_eq!(sent["contents"][1]["parts"], json!([{"text": "answer"}]));
}

#[test]
fn thinking_config_follows_the_model_family() {
    let config = |model: &str, effort: &str| {
        let mut request = Request::new(model, vec![Message::user("q")]);
        request.reasoning_effort = Some(effort.into());
        body_of(&request)["generationConfig"]["thinkingConfig"].clone()
    };
    assert_eq!(
        config("gemini-2.5-flash", "high"),
        json!({"thinkingBudget": 24576, "includeThoughts": true})
    );
    assert_eq!(
        config("models/gemini-2.5-pro", "2000"),
        json!({"thinkingBudget": 2000, "includeThoughts": true})
    );
    assert_eq!(
        config("gemini-3-flash-preview", "medium"),
        json!({"thinkingLevel": "medium", "includeThoughts": true})
    );
    assert_eq!(
        config("gemini-3-pro-preview", "medium"),
        json!({"thinkingLevel": "high", "includeThoughts": true})
    );
    let plain = body_of(&Request::new("gemini-2.0-flash", vec![Message::user("q")]));
    assert!(plain.get("generationConfig").is_none());
}

#[test]
fn schemas_are_reduced_to_the_gemini_subset() {
    let schema = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "path": {"type": "string", "description": "file", "format": "uri"},
            "limit": {"type": ["integer", "null"], "minimum": 1, "default": 10},
            "mode": {"enum": ["a", "b"]},
            "kind": {"const": "x"},
            "tags": {"type": "array", "items": {"type": "string", "additionalProperties": false}},
            "either": {"oneOf": [{"type": "string"}, {"type": "number", "format": "double"}]}
        },
        "required": ["path", "ghost"]
    });
    assert_eq!(
        gemini_schema(&schema),
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file"},
                "limit": {"type": "integer", "nullable": true, "minimum": 1},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "kind": {"type": "string", "enum": ["x"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "either": {"anyOf": [{"type": "string"}, {"type": "number", "format": "double"}]}
            },
            "required": ["path"]
        })
    );
}

#[test]
fn tools_tool_choice_and_options() {
    let mut request = Request::new("gemini-2.5-flash", vec![Message::user("q")]);
    request.tools = vec![ToolDefinition {
        name: "noargs".into(),
        description: "d".into(),
        parameters: json!({"type": "object", "properties": {}}).into(),
        freeform: None,
    }];
    request.tool_choice = Some(ToolChoice::Named("noargs".into()));
    request.provider_options = Some(json!({"gemini": {
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        "generationConfig": {"candidateCount": 1}
    }}));
    request.max_tokens = Some(64);
    let sent = body_of(&request);
    assert_eq!(
        sent["tools"],
        json!([{"functionDeclarations": [{"name": "noargs", "description": "d"}]}])
    );
    assert_eq!(
        sent["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["noargs"]}})
    );
    assert_eq!(
        sent["generationConfig"],
        json!({"maxOutputTokens": 64, "candidateCount": 1})
    );
    assert_eq!(sent["safetySettings"][0]["threshold"], "BLOCK_NONE");
}

#[test]
fn the_key_goes_in_a_header_and_the_model_in_the_path() {
    let request = Request::new("models/gemini-2.5-flash", vec![Message::user("q")]);
    let http = Gemini::new("AIzaSECRET")
        .with_base_url("http://127.0.0.1:9/v1beta/")
        .build_request(&request)
        .unwrap();
    assert_eq!(
        http.url,
        "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert!(!http.url.contains("AIzaSECRET"));
    assert!(
        http.headers
            .iter()
            .any(|(k, v)| k == "x-goog-api-key" && v == "AIzaSECRET")
    );
    let bad = Request::new("../evil?x=1", vec![Message::user("q")]);
    assert_eq!(
        Gemini::new("k").build_request(&bad).err().unwrap().kind(),
        ErrorKind::InvalidRequest
    );
}

#[test]
fn debug_never_shows_the_key() {
    let key = "AIzaSyA-abcdefghijklmnopqrstuvwxyz012345";
    let shown = format!("{:?}", Gemini::new(key));
    assert!(!shown.contains(key), "{shown}");
}

#[test]
fn images_become_inline_or_file_data() {
    let mut user = Message::user("see");
    user.content
        .push(ContentPart::Image(crate::llm::ImageData::from_bytes(
            vec![0xff, 0],
            "image/jpeg",
        )));
    user.content.push(ContentPart::Image(crate::llm::ImageData {
        url: Some("data:image/gif;base64,R0lG".into()),
        data: None,
        media_type: None,
        detail: None,
    }));
    user.content.push(ContentPart::Image(crate::llm::ImageData {
        url: Some("gs://bucket/a.png".into()),
        data: None,
        media_type: Some("image/png".into()),
        detail: None,
    }));
    let sent = body_of(&Request::new("gemini-2.5-flash", vec![user]));
    assert_eq!(
        sent["contents"][0]["parts"],
        json!([
            {"text": "see"},
            {"inlineData": {"mimeType": "image/jpeg", "data": "/wA="}},
            {"inlineData": {"mimeType": "image/gif", "data": "R0lG"}},
            {"fileData": {"mimeType": "image/png", "fileUri": "gs://bucket/a.png"}}
        ])
    );
}

#[test]
fn a_non_utf8_byte_inside_text_becomes_a_replacement_character() {
    let body = b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\xfeb\"}]},\"finishReason\":\"STOP\"}]}\r\n\r\n";
    assert_eq!(
        decode_whole(decoder(), body).result.unwrap().text(),
        "a\u{fffd}b"
    );
}

#[test]
fn parts_of_unknown_kinds_are_skipped() {
    let response = run(concat!(
        "data: {\"candidates\":[{\"content\":{\"parts\":[{\"executableCode\":{\"language\":\"PYTHON\",\"code\":\"1+1\"}},",
        "{\"text\":\"2\"}]},\"finishReason\":\"STOP\"}]}\r\n\r\n",
    ))
    .result
    .unwrap();
    assert_eq!(response.text(), "2");
    assert_eq!(response.message.content.len(), 1);
}

#[test]
fn another_providers_calls_of_the_current_turn_get_the_documented_placeholder_signature() {
    let call = |id: &str| ToolCall::new(id, "read", json!({"p": 1}));
    let assistant = |calls: Vec<ToolCall>| Message {
        content: calls.into_iter().map(ContentPart::ToolCall).collect(),
        ..Message::assistant("")
    };
    let result = |c: &ToolCall| Message::tool_result(ToolResult::for_call(c, "ok", false));
    let (old, a, b) = (call("c0"), call("c1"), call("c2"));
    let mut own = call("c3");
    own.signature = Some("Z2VtaW5p".into());
    let messages = vec![
        Message::user("earlier task"),
        assistant(vec![old.clone()]),
        result(&old),
        Message::user("the task"),
        // Another provider's parallel calls, then Gemini's own signed call.
        assistant(vec![a.clone(), b.clone()]),
        result(&a),
        result(&b),
        assistant(vec![own.clone()]),
        result(&own),
    ];
    let sent = body_of(&Request::new("gemini-3-pro-preview", messages.clone()));
    let signature = |content: usize, part: usize| {
        sent["contents"][content]["parts"][part]["thoughtSignature"].clone()
    };
    assert_eq!(
        signature(1, 0),
        Value::Null,
        "a call of an earlier turn is left alone"
    );
    // Contents 2 (the first result and "the task", one user content) and 4 are user ones.
    assert_eq!(signature(3, 0), json!("skip_thought_signature_validator"));
    assert_eq!(
        signature(3, 1),
        Value::Null,
        "only the first of parallel calls"
    );
    assert_eq!(
        signature(5, 0),
        json!("Z2VtaW5p"),
        "Gemini's own signature stays"
    );
    let older = body_of(&Request::new("gemini-2.5-pro", messages));
    assert_eq!(
        older["contents"][3]["parts"][0]["thoughtSignature"],
        Value::Null
    );
}
