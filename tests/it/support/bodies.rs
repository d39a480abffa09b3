//! SSE bodies of one model answer (text, then tool calls) in each of the four wire formats,
//! for loopback replies. Shapes follow the recorded streams in `../shared/conformance/`.

use serde_json::{Value, json};

/// A wire format the loopback server can speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Responses.
    OpenAi,
    /// Chat Completions.
    OpenAiChat,
    /// Gemini `streamGenerateContent?alt=sse`.
    Gemini,
}

impl Wire {
    /// Every wire format.
    pub const ALL: [Wire; 4] = [
        Wire::Anthropic,
        Wire::OpenAi,
        Wire::OpenAiChat,
        Wire::Gemini,
    ];

    /// The request path a provider pointed at `{base}` (plus `/v1` for the OpenAI formats)
    /// posts to, up to the query string.
    pub fn path_prefix(self) -> &'static str {
        match self {
            Wire::Anthropic => "/v1/messages",
            Wire::OpenAi => "/v1/responses",
            Wire::OpenAiChat => "/v1/chat/completions",
            Wire::Gemini => "/v1beta/models/",
        }
    }

    /// One answer: optional text, then tool calls `(id, name, arguments)`.
    pub fn turn(self, text: &str, calls: &[(&str, &str, Value)]) -> String {
        match self {
            Wire::Anthropic => crate::session_sse::anthropic_sse(text, calls),
            Wire::OpenAi => responses_sse(text, calls),
            Wire::OpenAiChat => chat_sse(text, calls),
            Wire::Gemini => gemini_sse(text, calls),
        }
    }
}

/// An OpenAI Responses stream.
pub fn responses_sse(text: &str, calls: &[(&str, &str, Value)]) -> String {
    let mut out = String::new();
    let mut event = |data: Value| {
        out.push_str(&format!(
            "event: {}\ndata: {data}\n\n",
            data["type"].as_str().unwrap()
        ));
    };
    let response = |status: &str, output: Value| {
        json!({"id": "resp_loopback", "object": "response", "model": "gpt-loopback",
               "status": status, "output": output,
               "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}})
    };
    event(json!({"type": "response.created", "response": response("in_progress", json!([]))}));
    let mut output = Vec::new();
    if !text.is_empty() {
        let index = output.len();
        let item = json!({"id": "msg_1", "type": "message", "role": "assistant",
                          "status": "in_progress", "content": []});
        event(json!({"type": "response.output_item.added", "output_index": index, "item": item}));
        event(
            json!({"type": "response.output_text.delta", "item_id": "msg_1",
                     "output_index": index, "content_index": 0, "delta": text}),
        );
        let done = json!({"id": "msg_1", "type": "message", "role": "assistant",
                          "status": "completed",
                          "content": [{"type": "output_text", "text": text, "annotations": []}]});
        event(json!({"type": "response.output_item.done", "output_index": index, "item": done}));
        output.push(done);
    }
    for (n, (id, name, arguments)) in calls.iter().enumerate() {
        let index = output.len();
        let item_id = format!("fc_{n}");
        let arguments = arguments.to_string();
        let item = json!({"id": item_id, "type": "function_call", "status": "in_progress",
                          "arguments": "", "call_id": id, "name": name});
        event(json!({"type": "response.output_item.added", "output_index": index, "item": item}));
        event(
            json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
                     "output_index": index, "delta": arguments}),
        );
        event(
            json!({"type": "response.function_call_arguments.done", "item_id": item_id,
                     "output_index": index, "arguments": arguments}),
        );
        let done = json!({"id": item_id, "type": "function_call", "status": "completed",
                          "arguments": arguments, "call_id": id, "name": name});
        event(json!({"type": "response.output_item.done", "output_index": index, "item": done}));
        output.push(done);
    }
    event(json!({"type": "response.completed",
                 "response": response("completed", Value::Array(output))}));
    out
}

/// A Chat Completions stream.
pub fn chat_sse(text: &str, calls: &[(&str, &str, Value)]) -> String {
    let mut out = String::new();
    let mut chunk = |delta: Value, finish: Value, usage: Value| {
        let data = json!({"id": "chatcmpl-loopback", "object": "chat.completion.chunk",
                          "model": "gpt-loopback", "usage": usage,
                          "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        out.push_str(&format!("data: {data}\n\n"));
    };
    chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
        Value::Null,
    );
    if !text.is_empty() {
        chunk(json!({"content": text}), Value::Null, Value::Null);
    }
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                   "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
            Value::Null,
        );
        chunk(
            json!({"tool_calls": [{"index": index,
                                   "function": {"arguments": arguments.to_string()}}]}),
            Value::Null,
            Value::Null,
        );
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    chunk(
        json!({}),
        json!(finish),
        json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}),
    );
    out.push_str("data: [DONE]\n\n");
    out
}

/// A Gemini stream (one chunk per part, the finish on the last).
pub fn gemini_sse(text: &str, calls: &[(&str, &str, Value)]) -> String {
    let mut parts: Vec<Value> = Vec::new();
    if !text.is_empty() {
        parts.push(json!({"text": text}));
    }
    for (_, name, arguments) in calls {
        parts.push(json!({"functionCall": {"name": name, "args": arguments}}));
    }
    if parts.is_empty() {
        parts.push(json!({"text": ""}));
    }
    let last = parts.len() - 1;
    let mut out = String::new();
    for (i, part) in parts.into_iter().enumerate() {
        let mut candidate = json!({"content": {"parts": [part], "role": "model"}, "index": 0});
        if i == last {
            candidate["finishReason"] = json!("STOP");
        }
        let data = json!({"candidates": [candidate],
                          "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                                            "totalTokenCount": 15},
                          "modelVersion": "gemini-loopback", "responseId": "r_loopback"});
        out.push_str(&format!("data: {data}\r\n\r\n"));
    }
    out
}
