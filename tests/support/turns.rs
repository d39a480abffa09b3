//! Scripted model turns in each native wire format: SSE bodies for "a turn with text" and
//! "a turn with tool calls", for the loopback server to replay. OpenAI Responses, Anthropic
//! Messages and Gemini; shaped after the recorded streams in `tests/data/conformance`.

use serde_json::{Value, json};

use super::Reply;

/// One tool call of a scripted turn.
#[derive(Debug, Clone)]
pub enum Call {
    /// A JSON function call.
    Function {
        id: String,
        name: String,
        args: Value,
    },
    /// A freeform (Responses `custom`) call whose input is raw text.
    Custom {
        id: String,
        name: String,
        input: String,
    },
}

/// A function call.
pub fn function(id: &str, name: &str, args: Value) -> Call {
    Call::Function {
        id: id.to_string(),
        name: name.to_string(),
        args,
    }
}

/// A freeform call (only the Responses format has them).
pub fn custom(id: &str, name: &str, input: &str) -> Call {
    Call::Custom {
        id: id.to_string(),
        name: name.to_string(),
        input: input.to_string(),
    }
}

/// The text split in two pieces (on a character boundary), as streams deliver it.
fn halves(text: &str) -> [&str; 2] {
    let mid = text
        .char_indices()
        .nth(text.chars().count() / 2)
        .map_or(text.len(), |(i, _)| i);
    [&text[..mid], &text[mid..]]
}

fn sse_event(out: &mut String, name: &str, data: &Value) {
    out.push_str("event: ");
    out.push_str(name);
    out.push_str("\ndata: ");
    out.push_str(&data.to_string());
    out.push_str("\n\n");
}

/// An OpenAI Responses stream: optional text, then the calls.
pub fn responses_sse(text: &str, calls: &[Call]) -> String {
    let mut out = String::new();
    let response = |status: &str, output: Vec<Value>| {
        json!({"id": "resp_loopback", "object": "response", "status": status,
               "model": "gpt-loopback", "output": output, "error": null,
               "incomplete_details": null, "usage": null})
    };
    let created = response("in_progress", vec![]);
    sse_event(
        &mut out,
        "response.created",
        &json!({"type": "response.created", "response": created}),
    );
    let mut items = Vec::new();
    let mut index = 0;
    if !text.is_empty() {
        let item_id = "msg_loopback";
        sse_event(
            &mut out,
            "response.output_item.added",
            &json!({"type": "response.output_item.added", "output_index": index,
                    "item": {"id": item_id, "type": "message", "status": "in_progress",
                             "content": [], "role": "assistant"}}),
        );
        sse_event(
            &mut out,
            "response.content_part.added",
            &json!({"type": "response.content_part.added", "item_id": item_id,
                    "output_index": index, "content_index": 0,
                    "part": {"type": "output_text", "annotations": [], "text": ""}}),
        );
        for piece in halves(text) {
            sse_event(
                &mut out,
                "response.output_text.delta",
                &json!({"type": "response.output_text.delta", "item_id": item_id,
                        "output_index": index, "content_index": 0, "delta": piece}),
            );
        }
        sse_event(
            &mut out,
            "response.output_text.done",
            &json!({"type": "response.output_text.done", "item_id": item_id,
                    "output_index": index, "content_index": 0, "text": text}),
        );
        let item = json!({"id": item_id, "type": "message", "status": "completed",
                          "role": "assistant",
                          "content": [{"type": "output_text", "annotations": [], "text": text}]});
        sse_event(
            &mut out,
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
        items.push(item);
        index += 1;
    }
    for call in calls {
        let (item_id, added, delta_event, deltas, done) = match call {
            Call::Function { id, name, args } => {
                let item_id = format!("fc_{id}");
                let arguments = args.to_string();
                let added = json!({"id": item_id, "type": "function_call", "status": "in_progress",
                                   "arguments": "", "call_id": id, "name": name});
                let done = json!({"id": item_id, "type": "function_call", "status": "completed",
                                  "arguments": arguments, "call_id": id, "name": name});
                let deltas: Vec<String> =
                    halves(&arguments).iter().map(|s| s.to_string()).collect();
                (
                    item_id,
                    added,
                    "response.function_call_arguments.delta",
                    deltas,
                    done,
                )
            }
            Call::Custom { id, name, input } => {
                let item_id = format!("ct_{id}");
                let added = json!({"type": "custom_tool_call", "id": item_id, "call_id": id,
                                   "name": name, "input": ""});
                let done = json!({"type": "custom_tool_call", "id": item_id, "call_id": id,
                                  "name": name, "input": input, "status": "completed"});
                let deltas: Vec<String> = halves(input).iter().map(|s| s.to_string()).collect();
                (
                    item_id,
                    added,
                    "response.custom_tool_call_input.delta",
                    deltas,
                    done,
                )
            }
        };
        sse_event(
            &mut out,
            "response.output_item.added",
            &json!({"type": "response.output_item.added", "output_index": index, "item": added}),
        );
        for delta in deltas {
            sse_event(
                &mut out,
                delta_event,
                &json!({"type": delta_event, "item_id": item_id, "output_index": index,
                        "delta": delta}),
            );
        }
        sse_event(
            &mut out,
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "output_index": index, "item": done}),
        );
        items.push(done);
        index += 1;
    }
    let mut completed = response("completed", items);
    completed["usage"] = json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                                "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                                "total_tokens": 15});
    sse_event(
        &mut out,
        "response.completed",
        &json!({"type": "response.completed", "response": completed}),
    );
    out
}

/// A Gemini `streamGenerateContent?alt=sse` stream: optional text, then the calls (function
/// calls only; Gemini assigns no ids, so the decoder makes its own). CRLF-framed, as Gemini
/// sends it.
pub fn gemini_sse(text: &str, calls: &[Call]) -> String {
    let mut out = String::new();
    let chunk = |out: &mut String, parts: Vec<Value>, finish: Option<&str>| {
        let mut candidate = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
        if let Some(finish) = finish {
            candidate["finishReason"] = json!(finish);
        }
        let data = json!({"candidates": [candidate],
                          "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                                            "totalTokenCount": 15},
                          "modelVersion": "gemini-loopback", "responseId": "loopback"});
        out.push_str("data: ");
        out.push_str(&data.to_string());
        out.push_str("\r\n\r\n");
    };
    let call_parts: Vec<Value> = calls
        .iter()
        .map(|call| match call {
            Call::Function { name, args, .. } => {
                json!({"functionCall": {"name": name, "args": args}})
            }
            Call::Custom { .. } => panic!("Gemini has no freeform calls"),
        })
        .collect();
    if text.is_empty() {
        chunk(&mut out, call_parts, Some("STOP"));
        return out;
    }
    let [first, second] = halves(text);
    chunk(&mut out, vec![json!({"text": first})], None);
    let mut last = vec![json!({"text": second})];
    last.extend(call_parts);
    chunk(&mut out, last, Some("STOP"));
    out
}

/// An Anthropic Messages stream: optional text, then the calls (function calls only).
pub fn anthropic_sse(text: &str, calls: &[Call]) -> String {
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|call| match call {
            Call::Function { id, name, args } => (id.as_str(), name.as_str(), args.clone()),
            Call::Custom { .. } => panic!("Anthropic has no freeform calls"),
        })
        .collect();
    crate::session_sse::anthropic_sse(text, &calls)
}

/// [`responses_sse`] as a reply.
pub fn responses_turn(text: &str, calls: &[Call]) -> Reply {
    Reply::sse(responses_sse(text, calls))
}

/// [`gemini_sse`] as a reply.
pub fn gemini_turn(text: &str, calls: &[Call]) -> Reply {
    Reply::sse(gemini_sse(text, calls))
}

/// [`anthropic_sse`] as a reply.
pub fn anthropic_turn(text: &str, calls: &[Call]) -> Reply {
    Reply::sse(anthropic_sse(text, calls))
}

/// An OpenAI Chat Completions stream (`data:` lines, `[DONE]`): optional text, then the
/// calls (function calls only; a freeform tool is a function on this format).
pub fn chat_sse(text: &str, calls: &[Call]) -> String {
    let mut out = String::new();
    let chunk = |out: &mut String, delta: Value, finish: Option<&str>| {
        let data = json!({"id": "chatcmpl-loopback", "object": "chat.completion.chunk",
                          "model": "loopback",
                          "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        out.push_str("data: ");
        out.push_str(&data.to_string());
        out.push_str("\n\n");
    };
    chunk(&mut out, json!({"role": "assistant", "content": ""}), None);
    for piece in halves(text) {
        if !piece.is_empty() {
            chunk(&mut out, json!({"content": piece}), None);
        }
    }
    for (index, call) in calls.iter().enumerate() {
        let Call::Function { id, name, args } = call else {
            panic!("Chat Completions has no freeform calls");
        };
        chunk(
            &mut out,
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                   "function": {"name": name, "arguments": args.to_string()}}]}),
            None,
        );
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    chunk(&mut out, json!({}), Some(finish));
    out.push_str("data: [DONE]\n\n");
    out
}

/// [`chat_sse`] as a reply.
pub fn chat_turn(text: &str, calls: &[Call]) -> Reply {
    Reply::sse(chat_sse(text, calls))
}
