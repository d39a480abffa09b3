//! Decoding a Responses event stream into [`StreamEvent`]s and the accumulated response.
//! Sans-IO: it sees parsed SSE events only, never bytes or sockets, and never panics on
//! malformed input (that is a typed error).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::error::provider_error;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::accumulate::{ResponseBuilder, Slot};
use crate::llm::sse;
use crate::llm::wire::Decoder;
use crate::llm::wire::malformed;
use crate::llm::{ContentPart, FinishKind, FinishReason, StreamEvent, ToolKind, Usage};

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    item_id: Option<Cow<'a, str>>,
    #[serde(default)]
    summary_index: Option<u64>,
    #[serde(default)]
    item: Option<WireItem>,
    #[serde(default)]
    response: Option<WireResponse>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    input: Option<String>,
    /// In-stream `error` events: either nested (`error: {…}`) or flat (`code`, `message`).
    #[serde(default)]
    error: Option<WireError>,
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct WireItem {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    input: Option<String>,
    #[serde(default)]
    summary: Vec<WireText>,
    #[serde(default)]
    encrypted_content: Option<String>,
    #[serde(default)]
    content: Vec<WireContent>,
}

#[derive(Deserialize)]
struct WireText {
    #[serde(default)]
    text: String,
}

#[derive(Deserialize)]
struct WireContent {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireResponse {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    incomplete_details: Option<WireIncomplete>,
    #[serde(default)]
    error: Option<WireError>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireIncomplete {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct WireError {
    #[serde(default, rename = "type")]
    pub(super) kind: Option<String>,
    #[serde(default)]
    pub(super) code: Option<Value>,
    #[serde(default)]
    pub(super) message: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

/// What an output item is, and the builder slot of its content part.
struct OpenItem {
    item_id: String,
    kind: OpenKind,
    slot: Option<Slot>,
    done: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OpenKind {
    Message,
    Reasoning,
    Call,
    Other,
}

/// Decodes one Responses event stream.
pub(crate) struct ResponsesDecoder {
    builder: ResponseBuilder,
    provider: String,
    items: Vec<OpenItem>,
    refusal: String,
    failed: bool,
    /// The provider's key, removed from in-stream error messages that would echo it.
    api_key: Option<String>,
}

impl ResponsesDecoder {
    /// Also removes `api_key` from in-stream error messages (whatever the key's shape).
    pub(crate) fn with_api_key(mut self, api_key: Option<String>) -> ResponsesDecoder {
        self.api_key = api_key;
        self
    }

    pub(crate) fn new(provider: &str) -> ResponsesDecoder {
        ResponsesDecoder {
            builder: ResponseBuilder::new(provider),
            provider: provider.to_string(),
            items: Vec::new(),
            refusal: String::new(),
            failed: false,
            api_key: None,
        }
    }

    fn item_index(&self, item_id: Option<&str>) -> Option<usize> {
        let item_id = item_id?;
        self.items.iter().rposition(|item| item.item_id == item_id)
    }

    /// The item a delta names, registering a message item that was never announced (its
    /// text is still text).
    fn message_item(&mut self, item_id: Option<&str>) -> usize {
        let found = match item_id {
            Some(_) => self.item_index(item_id),
            // No item id at all: the latest open message.
            None => self
                .items
                .iter()
                .rposition(|i| i.kind == OpenKind::Message && !i.done),
        };
        match found {
            Some(index) => index,
            None => {
                self.items.push(OpenItem {
                    item_id: item_id.unwrap_or("").to_string(),
                    kind: OpenKind::Message,
                    slot: None,
                    done: false,
                });
                self.items.len() - 1
            }
        }
    }

    fn text_delta(&mut self, index: usize, delta: &str, out: &mut Vec<StreamEvent>) {
        let slot = match self.items[index].slot {
            Some(slot) => slot,
            None => {
                let slot = self.builder.text_start(out);
                self.items[index].slot = Some(slot);
                slot
            }
        };
        self.builder.text_delta(slot, delta, out);
    }

    fn item_added(&mut self, item: WireItem, out: &mut Vec<StreamEvent>) {
        let item_id = item.id.clone().unwrap_or_default();
        let (kind, slot) = match item.kind.as_str() {
            "message" => (OpenKind::Message, None),
            "reasoning" => {
                let slot = self.builder.reasoning_start(out);
                if let Some(ContentPart::Thinking(thinking)) = self.builder.part_mut(slot) {
                    thinking.id = item.id;
                    thinking.signature = item.encrypted_content;
                }
                (OpenKind::Reasoning, Some(slot))
            }
            "function_call" | "custom_tool_call" => {
                let call_id = item.call_id.unwrap_or_else(|| item_id.clone());
                let name = item.name.unwrap_or_default();
                let slot = self.builder.tool_call_start(&call_id, &name, out);
                if let Some(ContentPart::ToolCall(call)) = self.builder.part_mut(slot) {
                    call.item_id = item.id;
                    if item.kind == "custom_tool_call" {
                        call.kind = ToolKind::Custom;
                    }
                }
                (OpenKind::Call, Some(slot))
            }
            _ => (OpenKind::Other, None),
        };
        self.items.push(OpenItem {
            item_id,
            kind,
            slot,
            done: false,
        });
    }

    /// The slot of the open call item `item_id` names.
    fn call_slot(&self, item_id: Option<&str>) -> Option<Slot> {
        self.item_index(item_id)
            .filter(|&i| self.items[i].kind == OpenKind::Call && !self.items[i].done)
            .and_then(|i| self.items[i].slot)
    }

    fn reasoning_slot(&self, item_id: Option<&str>) -> Option<Slot> {
        self.item_index(item_id)
            .filter(|&i| self.items[i].kind == OpenKind::Reasoning)
            .and_then(|i| self.items[i].slot)
    }

    fn item_done(&mut self, item: WireItem, out: &mut Vec<StreamEvent>) {
        let index = match self.item_index(item.id.as_deref()) {
            Some(index) if !self.items[index].done => index,
            _ => {
                // Done without added: register it now so that its content is not lost.
                self.item_added(
                    WireItem {
                        kind: item.kind.clone(),
                        id: item.id.clone(),
                        call_id: item.call_id.clone(),
                        name: item.name.clone(),
                        arguments: None,
                        input: None,
                        summary: Vec::new(),
                        encrypted_content: None,
                        content: Vec::new(),
                    },
                    out,
                );
                self.items.len() - 1
            }
        };
        self.items[index].done = true;
        match self.items[index].kind {
            OpenKind::Message => {
                if self.items[index].slot.is_none() {
                    // Text that came without deltas.
                    for content in &item.content {
                        if let ("output_text", Some(text)) = (content.kind.as_str(), &content.text)
                        {
                            self.text_delta(index, text, out);
                        }
                    }
                }
                if self.refusal.is_empty() {
                    for content in &item.content {
                        if let Some(refusal) = &content.refusal {
                            self.refusal.push_str(refusal);
                        }
                    }
                }
            }
            OpenKind::Reasoning => {
                let Some(slot) = self.items[index].slot else {
                    return;
                };
                let mut summary = None;
                if let Some(ContentPart::Thinking(thinking)) = self.builder.part_mut(slot) {
                    if item.encrypted_content.is_some() {
                        thinking.signature = item.encrypted_content;
                    }
                    if thinking.text.is_empty() && !item.summary.is_empty() {
                        let texts: Vec<&str> =
                            item.summary.iter().map(|s| s.text.as_str()).collect();
                        summary = Some(texts.join("\n\n"));
                    }
                }
                if let Some(summary) = summary {
                    self.builder.reasoning_delta(slot, &summary, out);
                }
            }
            OpenKind::Call => {
                if let (Some(slot), Some(full)) =
                    (self.items[index].slot, item.arguments.or(item.input))
                {
                    self.builder.tool_call_set_arguments(slot, &full);
                }
            }
            OpenKind::Other => {}
        }
        if let Some(slot) = self.items[index].slot {
            self.builder.end(slot, out);
        }
    }

    fn finish(&mut self, response: WireResponse, out: &mut Vec<StreamEvent>) {
        if let Some(id) = &response.id {
            self.builder.set_id(id);
        }
        if let Some(model) = &response.model {
            self.builder.set_model(model);
        }
        let status = response.status.unwrap_or_else(|| "completed".to_string());
        let incomplete_reason = response.incomplete_details.and_then(|d| d.reason);
        let reason = match status.as_str() {
            "incomplete" => match incomplete_reason.as_deref() {
                Some("max_output_tokens") => FinishKind::Length,
                Some("content_filter") => FinishKind::ContentFilter,
                _ => FinishKind::Other,
            },
            "completed" if self.builder.has_tool_calls() => FinishKind::ToolCalls,
            "completed" => FinishKind::Stop,
            _ => FinishKind::Other,
        };
        if let Some(why) = incomplete_reason {
            self.builder.warn(format!("incomplete: {why}"));
        }
        if !self.refusal.is_empty() {
            let refusal = std::mem::take(&mut self.refusal);
            self.builder.refuse(refusal);
        }
        if let Some(usage) = response.usage {
            *self.builder.usage_mut() = usage_from(usage);
        }
        self.builder
            .set_finish_reason(FinishReason::new(reason, Some(status)));
        self.builder.finish(out);
    }

    fn stream_error(
        &self,
        error: Option<WireError>,
        code: Option<Value>,
        message: Option<String>,
    ) -> Error {
        let (kind, code, message) = match error {
            Some(e) => (e.kind, e.code.or(code), e.message.or(message)),
            None => (None, code, message),
        };
        let message = message.unwrap_or_else(|| "the stream reported an error".to_string());
        let message =
            crate::llm::status::redact_key(&message, self.api_key.as_deref().unwrap_or(""));
        provider_error(
            &self.provider,
            None,
            code.as_ref(),
            kind.as_deref(),
            &message,
        )
    }
}

fn usage_from(usage: WireUsage) -> Usage {
    Usage {
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        total_tokens: usage
            .total_tokens
            .unwrap_or(usage.input_tokens + usage.output_tokens),
        reasoning_tokens: usage.output_tokens_details.and_then(|d| d.reasoning_tokens),
        cache_read_tokens: usage.input_tokens_details.and_then(|d| d.cached_tokens),
        cache_write_tokens: None,
        cache_write_1h_tokens: None,
    }
}

/// Event types that carry nothing the decoder needs beyond what other events carry.
const IGNORED_EVENTS: &[&str] = &[
    "response.queued",
    "response.content_part.added",
    "response.content_part.done",
    "response.output_text.done",
    "response.output_text.annotation.added",
    "response.refusal.done",
    "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.done",
    "response.reasoning_text.done",
];

impl Decoder for ResponsesDecoder {
    fn event(&mut self, event: sse::Event, out: &mut Vec<StreamEvent>) -> Result<()> {
        if self.failed || self.builder.is_finished() {
            return Ok(());
        }
        let wire: WireEvent<'_> = serde_json::from_str(&event.data)
            .map_err(|e| malformed(&self.provider, &event.data, &e))?;
        let kind = wire.kind.as_ref();
        if kind != "error" && kind != "response.failed" {
            let (id, model) = match &wire.response {
                Some(r) => (r.id.as_deref(), r.model.as_deref()),
                None => (None, None),
            };
            self.builder.start(id, model, out);
        }
        match kind {
            "response.created" | "response.in_progress" => {}
            "response.output_item.added" => {
                if let Some(item) = wire.item {
                    self.item_added(item, out);
                }
            }
            "response.output_item.done" => {
                if let Some(item) = wire.item {
                    self.item_done(item, out);
                }
            }
            "response.output_text.delta" => {
                let index = self.message_item(wire.item_id.as_deref());
                if self.items[index].kind == OpenKind::Message && !self.items[index].done {
                    self.text_delta(index, wire.delta.as_deref().unwrap_or(""), out);
                }
            }
            "response.refusal.delta" => {
                self.refusal.push_str(wire.delta.as_deref().unwrap_or(""));
            }
            "response.reasoning_summary_part.added" => {
                // Summary parts are joined with a blank line.
                if wire.summary_index.unwrap_or(0) > 0 {
                    if let Some(slot) = self.reasoning_slot(wire.item_id.as_deref()) {
                        self.builder.reasoning_delta(slot, "\n\n", out);
                    }
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(slot) = self.reasoning_slot(wire.item_id.as_deref()) {
                    self.builder
                        .reasoning_delta(slot, wire.delta.as_deref().unwrap_or(""), out);
                }
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                match self.call_slot(wire.item_id.as_deref()) {
                    Some(slot) => {
                        self.builder.tool_call_delta(
                            slot,
                            wire.delta.as_deref().unwrap_or(""),
                            out,
                        );
                    }
                    // The item's `done` event repeats the whole input, so nothing is lost.
                    None => self.builder.warn(format!(
                        "skipped tool-call input for item `{}` that was never opened",
                        wire.item_id.as_deref().unwrap_or("")
                    )),
                }
            }
            "response.function_call_arguments.done" | "response.custom_tool_call_input.done" => {
                if let (Some(slot), Some(full)) = (
                    self.call_slot(wire.item_id.as_deref()),
                    wire.arguments.or(wire.input),
                ) {
                    self.builder.tool_call_set_arguments(slot, &full);
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = wire.response.unwrap_or_default();
                self.finish(response, out);
            }
            "response.failed" => {
                self.failed = true;
                let error = wire.response.and_then(|r| r.error);
                return Err(self.stream_error(error, None, None));
            }
            "error" => {
                self.failed = true;
                return Err(self.stream_error(wire.error, wire.code, wire.message));
            }
            kind if IGNORED_EVENTS.contains(&kind) => {}
            kind => {
                let event_type = kind.to_string();
                let data = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                out.push(StreamEvent::ProviderEvent { event_type, data });
            }
        }
        Ok(())
    }

    fn end(&mut self, _out: &mut Vec<StreamEvent>) -> Result<()> {
        if self.failed || self.builder.is_finished() {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Stream,
            "the stream ended before response.completed",
        )
        .with_provider(self.provider.clone()))
    }
}
