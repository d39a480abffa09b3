//! Anthropic Messages SSE bodies for loopback replies, with tool calls given as tuples
//! (used by the session tests, the CLI's tests and the `loop` bench).

use serde_json::{Value, json};

/// An Anthropic SSE body: optional text, then tool-use blocks `(id, name, input)`.
pub fn anthropic_sse(text: &str, calls: &[(&str, &str, Value)]) -> String {
    let mut out = String::new();
    let mut event = |name: &str, data: Value| {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_loopback", "type": "message", "role": "assistant",
            "model": "claude-loopback", "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    );
    let mut index = 0;
    if !text.is_empty() {
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "text", "text": ""}}),
        );
        let mid = text
            .char_indices()
            .nth(text.chars().count() / 2)
            .map_or(0, |(i, _)| i);
        for piece in [&text[..mid], &text[mid..]] {
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "text_delta", "text": piece}}),
            );
        }
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
        index += 1;
    }
    for (id, name, input) in calls {
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        );
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index,
                   "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
        );
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
        index += 1;
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": 5}}),
    );
    event("message_stop", json!({"type": "message_stop"}));
    out
}

/// The first half of a text answer, for replies that stall mid-stream.
pub fn partial_text_sse(text: &str) -> String {
    let full = anthropic_sse(text, &[]);
    let cut = full.find("event: content_block_stop").unwrap();
    full[..cut].to_string()
}
