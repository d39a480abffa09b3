//! Anthropic stream decoding: Messages API server-sent events to [`StreamEvent`]s and the
//! accumulated response (the event mapping is in the parent module's docs). It never does
//! I/O and never builds a request.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use super::ID;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::accumulate::{ResponseBuilder, Slot};
use crate::llm::status;
use crate::llm::wire::Decoder;
use crate::llm::{FinishKind, FinishReason, StreamEvent, sse};

/// One SSE payload; every event type's fields, all optional, so one parse serves all.
#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: Option<usize>,
    #[serde(default, borrow)]
    message: Option<WireMessageStart<'a>>,
    #[serde(default, borrow)]
    content_block: Option<WireBlock<'a>>,
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    error: Option<WireError<'a>>,
}

#[derive(Deserialize)]
struct WireMessageStart<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireBlock<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    signature: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    data: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    signature: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    /// The writes by TTL (`ephemeral_5m_input_tokens`, `ephemeral_1h_input_tokens`).
    #[serde(default)]
    cache_creation: Option<WireCacheCreation>,
    #[serde(default)]
    output_tokens_details: Option<WireOutputDetails>,
}

#[derive(Deserialize, Default)]
struct WireCacheCreation {
    #[serde(default)]
    ephemeral_1h_input_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
struct WireOutputDetails {
    #[serde(default)]
    thinking_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct WireError<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
}

/// What a content block index refers to.
#[derive(Clone, Copy)]
enum BlockKind {
    Text,
    Thinking,
    ToolUse,
    /// A block type this adapter does not know (server tools, citations …): skipped.
    Other,
}

pub(super) struct AnthropicDecoder {
    builder: ResponseBuilder,
    blocks: HashMap<usize, (BlockKind, Option<Slot>)>,
    /// The key, to redact from in-stream error events that would echo it.
    api_key: Option<String>,
}

impl AnthropicDecoder {
    pub(super) fn new(api_key: Option<String>) -> AnthropicDecoder {
        AnthropicDecoder {
            builder: ResponseBuilder::new(ID),
            blocks: HashMap::new(),
            api_key,
        }
    }

    fn apply_usage(&mut self, usage: &WireUsage) {
        let u = self.builder.usage_mut();
        if let Some(n) = usage.input_tokens {
            u.input_tokens = n;
        }
        if let Some(n) = usage.output_tokens {
            u.output_tokens = n;
        }
        if let Some(n) = usage.cache_read_input_tokens {
            u.cache_read_tokens = Some(n);
        }
        if let Some(n) = usage.cache_creation_input_tokens {
            u.cache_write_tokens = Some(n);
        }
        if let Some(n) = usage
            .cache_creation
            .as_ref()
            .and_then(|c| c.ephemeral_1h_input_tokens)
        {
            u.cache_write_1h_tokens = Some(n);
        }
        if let Some(n) = usage
            .output_tokens_details
            .as_ref()
            .and_then(|d| d.thinking_tokens)
        {
            u.reasoning_tokens = Some(n);
        }
    }

    fn block_start(&mut self, index: usize, block: WireBlock, out: &mut Vec<StreamEvent>) {
        let entry = match block.kind.as_ref() {
            "text" => {
                let slot = self.builder.text_start(out);
                if let Some(text) = &block.text {
                    self.builder.text_delta(slot, text, out);
                }
                (BlockKind::Text, Some(slot))
            }
            "thinking" => {
                let slot = self.builder.reasoning_start(out);
                if let Some(text) = &block.thinking {
                    self.builder.reasoning_delta(slot, text, out);
                }
                if let Some(signature) = block.signature.as_deref().filter(|s| !s.is_empty()) {
                    self.builder.reasoning_signature(slot, signature);
                }
                (BlockKind::Thinking, Some(slot))
            }
            "redacted_thinking" => {
                let data = block.data.as_deref().unwrap_or_default();
                let slot = self.builder.redacted_reasoning(data, out);
                (BlockKind::Other, Some(slot))
            }
            "tool_use" => {
                let id = block.id.as_deref().unwrap_or_default();
                let name = block.name.as_deref().unwrap_or_default();
                let slot = self.builder.tool_call_start(id, name, out);
                // A non-empty `input` here is the whole input (no deltas will follow).
                if let Some(Value::Object(input)) = &block.input {
                    if !input.is_empty() {
                        let text = Value::Object(input.clone()).to_string();
                        self.builder.tool_call_set_arguments(slot, &text);
                    }
                }
                (BlockKind::ToolUse, Some(slot))
            }
            other => {
                self.builder
                    .warn(format!("skipped an unsupported `{other}` content block"));
                (BlockKind::Other, None)
            }
        };
        self.blocks.insert(index, entry);
    }

    fn block_delta(&mut self, index: usize, delta: WireDelta, out: &mut Vec<StreamEvent>) {
        let Some(&(kind, Some(slot))) = self.blocks.get(&index) else {
            return;
        };
        match (kind, delta.kind.as_deref()) {
            (BlockKind::Text, Some("text_delta")) => {
                self.builder
                    .text_delta(slot, delta.text.as_deref().unwrap_or_default(), out);
            }
            (BlockKind::Thinking, Some("thinking_delta")) => {
                self.builder.reasoning_delta(
                    slot,
                    delta.thinking.as_deref().unwrap_or_default(),
                    out,
                );
            }
            (BlockKind::Thinking, Some("signature_delta")) => {
                self.builder
                    .reasoning_signature(slot, delta.signature.as_deref().unwrap_or_default());
            }
            (BlockKind::ToolUse, Some("input_json_delta")) => {
                self.builder.tool_call_delta(
                    slot,
                    delta.partial_json.as_deref().unwrap_or_default(),
                    out,
                );
            }
            _ => {}
        }
    }
}

fn finish_reason(raw: &str) -> FinishReason {
    let kind = match raw {
        "end_turn" | "stop_sequence" => FinishKind::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishKind::Length,
        "tool_use" => FinishKind::ToolCalls,
        "refusal" => FinishKind::ContentFilter,
        _ => FinishKind::Other,
    };
    FinishReason::new(kind, Some(raw.to_string()))
}

/// The error an in-stream `error` event stands for.
fn stream_error(error: Option<WireError>, data: &str) -> Error {
    let kind_name = error
        .as_ref()
        .and_then(|e| e.kind.as_deref())
        .unwrap_or("error")
        .to_string();
    let message = error
        .as_ref()
        .and_then(|e| e.message.as_deref())
        .unwrap_or("the provider reported an error mid-stream")
        .to_string();
    let kind = match kind_name.as_str() {
        "overloaded_error" | "api_error" | "timeout_error" => ErrorKind::Server,
        "rate_limit_error" => ErrorKind::RateLimited,
        "authentication_error" => ErrorKind::Authentication,
        "permission_error" => ErrorKind::AccessDenied,
        "not_found_error" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::ContextLength,
        "billing_error" => ErrorKind::Quota,
        "invalid_request_error" => {
            status::kind_from_message(&message).unwrap_or(ErrorKind::InvalidRequest)
        }
        // Unknown errors default to retryable (unified spec §6.3).
        _ => ErrorKind::Server,
    };
    Error::new(kind, crate::error::scrub_secrets(&message))
        .with_provider(ID)
        .with_code(kind_name)
        .with_body(data)
}

impl Decoder for AnthropicDecoder {
    fn event(&mut self, event: sse::Event, out: &mut Vec<StreamEvent>) -> Result<()> {
        if self.builder.is_finished() {
            return Ok(());
        }
        let wire: WireEvent = match serde_json::from_str(&event.data) {
            Ok(wire) => wire,
            Err(err) => {
                return Err(Error::new(
                    ErrorKind::Stream,
                    format!("a stream event is not valid json: {err}"),
                )
                .with_provider(ID)
                .with_body(&event.data));
            }
        };
        match wire.kind.as_ref() {
            "message_start" => {
                let (id, model) = match &wire.message {
                    Some(m) => (m.id.as_deref(), m.model.as_deref()),
                    None => (None, None),
                };
                let (id, model) = (id.map(str::to_string), model.map(str::to_string));
                if let Some(usage) = wire.message.as_ref().and_then(|m| m.usage.as_ref()) {
                    self.apply_usage(usage);
                }
                self.builder.start(id.as_deref(), model.as_deref(), out);
            }
            "content_block_start" => {
                if let (Some(index), Some(block)) = (wire.index, wire.content_block) {
                    self.block_start(index, block, out);
                }
            }
            "content_block_delta" => {
                if let (Some(index), Some(delta)) = (wire.index, wire.delta) {
                    self.block_delta(index, delta, out);
                }
            }
            "content_block_stop" => {
                if let Some(&(_, Some(slot))) = wire.index.and_then(|i| self.blocks.get(&i)) {
                    self.builder.end(slot, out);
                }
            }
            "message_delta" => {
                if let Some(reason) = wire.delta.as_ref().and_then(|d| d.stop_reason.as_deref()) {
                    self.builder.set_finish_reason(finish_reason(reason));
                }
                if let Some(usage) = &wire.usage {
                    self.apply_usage(usage);
                }
            }
            "message_stop" => self.builder.finish(out),
            "ping" => {}
            "error" => {
                let key = self.api_key.as_deref().unwrap_or_default();
                let data = status::redact_key(&event.data, key);
                let wire: WireEvent = serde_json::from_str(&data).unwrap_or(wire);
                return Err(stream_error(wire.error, &data));
            }
            other => {
                let data = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                out.push(StreamEvent::ProviderEvent {
                    event_type: other.to_string(),
                    data,
                });
            }
        }
        Ok(())
    }

    fn end(&mut self, _out: &mut Vec<StreamEvent>) -> Result<()> {
        if self.builder.is_finished() {
            return Ok(());
        }
        let message = if self.builder.is_started() {
            "the stream ended before message_stop"
        } else {
            "the response body ended without any event"
        };
        Err(Error::new(ErrorKind::Stream, message).with_provider(ID))
    }
}
