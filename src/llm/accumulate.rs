//! The response builder every wire-format decoder shares: it turns "a text segment began,
//! more text, it ended" into [`StreamEvent`]s and, at the same time, into the [`Response`]
//! the `Finish` event carries. It never parses provider JSON and never does I/O.
//!
//! A decoder calls `*_start` when the provider opens a segment and gets a [`Slot`] back
//! (keep a map from the provider's own index or item id to slots), then `*_delta` and
//! `*_end` with that slot. The content parts of the response keep the order in which
//! segments were *started*, which is the provider's block order. [`ResponseBuilder::finish`]
//! closes whatever is still open (emitting the matching `End` events), fills in
//! `total_tokens` when the provider sent none, and emits `Finish`.
//!
//! Tool-call arguments are buffered as text and parsed once, at `tool_call_end`: an empty
//! buffer means `{}`, invalid JSON is kept as a JSON string holding exactly what the model
//! sent (the tool layer reports the parse error to the model; see [`ToolCall::arguments`]).

use serde_json::Value;

use crate::llm::{
    ContentPart, FinishReason, Response, StreamEvent, ThinkingData, ToolCall, ToolKind, Usage,
};

/// A segment opened by a `*_start` call: an index into the response's content parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(usize);

/// Per-part streaming state, parallel to `response.message.content`.
#[derive(Debug, Default)]
struct PartState {
    open: bool,
    /// The text id of a text segment (sent with every text event).
    text_id: Option<String>,
    /// A tool call's argument text, parsed at the end.
    arguments: String,
    /// Whether this part emits events (redacted thinking does not).
    silent: bool,
}

/// Builds a [`Response`] and its [`StreamEvent`]s from decoded provider events.
#[derive(Debug)]
pub(crate) struct ResponseBuilder {
    response: Response,
    parts: Vec<PartState>,
    started: bool,
    finished: bool,
    next_text_id: usize,
}

impl ResponseBuilder {
    /// A builder for a response from `provider`.
    pub(crate) fn new(provider: &str) -> ResponseBuilder {
        let mut response = Response {
            provider: provider.to_string(),
            ..Response::default()
        };
        response.message.role = crate::llm::Role::Assistant;
        ResponseBuilder {
            response,
            parts: Vec::new(),
            started: false,
            finished: false,
            next_text_id: 0,
        }
    }

    /// Records the response id and model (either may come later through
    /// [`set_id`](Self::set_id) / [`set_model`](Self::set_model)) and emits `StreamStart`
    /// the first time it is called.
    pub(crate) fn start(
        &mut self,
        id: Option<&str>,
        model: Option<&str>,
        out: &mut Vec<StreamEvent>,
    ) {
        if let Some(id) = id {
            self.set_id(id);
        }
        if let Some(model) = model {
            self.set_model(model);
        }
        self.ensure_started(out);
    }

    fn ensure_started(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push(StreamEvent::StreamStart {
                id: non_empty(&self.response.id),
                model: non_empty(&self.response.model),
            });
        }
    }

    /// Whether `StreamStart` has been emitted.
    pub(crate) fn is_started(&self) -> bool {
        self.started
    }

    /// Whether `Finish` has been emitted.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// Sets the response id.
    pub(crate) fn set_id(&mut self, id: &str) {
        if self.response.id != id {
            self.response.id = id.to_string();
        }
    }

    /// Sets the model.
    pub(crate) fn set_model(&mut self, model: &str) {
        if self.response.model != model {
            self.response.model = model.to_string();
        }
    }

    fn push_part(&mut self, part: ContentPart, state: PartState) -> Slot {
        self.response.message.content.push(part);
        self.parts.push(state);
        Slot(self.parts.len() - 1)
    }

    /// Opens a text segment; emits `TextStart`.
    pub(crate) fn text_start(&mut self, out: &mut Vec<StreamEvent>) -> Slot {
        self.ensure_started(out);
        let text_id = format!("text_{}", self.next_text_id);
        self.next_text_id += 1;
        out.push(StreamEvent::TextStart {
            text_id: text_id.clone(),
        });
        self.push_part(
            ContentPart::text(String::new()),
            PartState {
                open: true,
                text_id: Some(text_id),
                ..PartState::default()
            },
        )
    }

    /// Appends text to an open text segment; emits `TextDelta` (nothing for empty text).
    pub(crate) fn text_delta(&mut self, slot: Slot, delta: &str, out: &mut Vec<StreamEvent>) {
        if delta.is_empty() {
            return;
        }
        if let Some(ContentPart::Text { text, .. }) = self.response.message.content.get_mut(slot.0)
        {
            text.push_str(delta);
            let text_id = self.parts[slot.0].text_id.clone().unwrap_or_default();
            out.push(StreamEvent::TextDelta {
                text_id,
                delta: delta.to_string(),
            });
        }
    }

    /// Opens a reasoning (thinking) segment; emits `ReasoningStart`.
    pub(crate) fn reasoning_start(&mut self, out: &mut Vec<StreamEvent>) -> Slot {
        self.ensure_started(out);
        out.push(StreamEvent::ReasoningStart);
        self.push_part(
            ContentPart::Thinking(ThinkingData {
                text: String::new(),
                signature: None,
                redacted: false,
                id: None,
            }),
            PartState {
                open: true,
                ..PartState::default()
            },
        )
    }

    /// Appends reasoning text; emits `ReasoningDelta` (nothing for empty text).
    pub(crate) fn reasoning_delta(&mut self, slot: Slot, delta: &str, out: &mut Vec<StreamEvent>) {
        if delta.is_empty() {
            return;
        }
        if let Some(ContentPart::Thinking(t)) = self.response.message.content.get_mut(slot.0) {
            t.text.push_str(delta);
            out.push(StreamEvent::ReasoningDelta {
                delta: delta.to_string(),
            });
        }
    }

    /// Appends to a reasoning segment's signature (signatures may arrive in pieces).
    pub(crate) fn reasoning_signature(&mut self, slot: Slot, signature: &str) {
        if let Some(ContentPart::Thinking(t)) = self.response.message.content.get_mut(slot.0) {
            t.signature
                .get_or_insert_with(String::new)
                .push_str(signature);
        }
    }

    /// Adds a complete redacted-thinking part (opaque `data`, no text, no events).
    pub(crate) fn redacted_reasoning(&mut self, data: &str, out: &mut Vec<StreamEvent>) -> Slot {
        self.ensure_started(out);
        self.push_part(
            ContentPart::Thinking(ThinkingData {
                text: String::new(),
                signature: Some(data.to_string()),
                redacted: true,
                id: None,
            }),
            PartState {
                silent: true,
                ..PartState::default()
            },
        )
    }

    /// Opens a tool call; emits `ToolCallStart`.
    pub(crate) fn tool_call_start(
        &mut self,
        id: &str,
        name: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Slot {
        self.ensure_started(out);
        let id = self.unique_call_id(id);
        out.push(StreamEvent::ToolCallStart {
            id: id.clone(),
            name: name.to_string(),
        });
        self.push_part(
            ContentPart::ToolCall(ToolCall::new(id, name, Value::Null)),
            PartState {
                open: true,
                ..PartState::default()
            },
        )
    }

    /// `id`, or — when an earlier tool call of this response already has it (some
    /// OpenAI-compatible servers repeat ids) — `id` with the first free `_2`, `_3`, …
    /// suffix, so that every call gets exactly one result in the next request. The renamed
    /// id is what the history and the next request carry, for the call and its result alike.
    fn unique_call_id(&self, id: &str) -> String {
        let taken =
            |candidate: &str| {
                !candidate.is_empty()
                    && self.response.message.content.iter().any(
                        |part| matches!(part, ContentPart::ToolCall(call) if call.id == candidate),
                    )
            };
        if !taken(id) {
            return id.to_string();
        }
        (2..)
            .map(|n| format!("{id}_{n}"))
            .find(|candidate| !taken(candidate))
            .unwrap_or_default()
    }

    /// Appends argument text to an open tool call; emits `ToolCallDelta` (nothing for an
    /// empty fragment).
    pub(crate) fn tool_call_delta(&mut self, slot: Slot, delta: &str, out: &mut Vec<StreamEvent>) {
        if delta.is_empty() {
            return;
        }
        let Some(ContentPart::ToolCall(call)) = self.response.message.content.get(slot.0) else {
            return;
        };
        out.push(StreamEvent::ToolCallDelta {
            id: call.id.clone(),
            delta: delta.to_string(),
        });
        self.parts[slot.0].arguments.push_str(delta);
    }

    /// Sets a tool call's complete argument text at once (replacing what deltas gave),
    /// for providers that repeat the whole arguments in a final event.
    pub(crate) fn tool_call_set_arguments(&mut self, slot: Slot, arguments: &str) {
        if let Some(state) = self.parts.get_mut(slot.0) {
            state.arguments.clear();
            state.arguments.push_str(arguments);
        }
    }

    /// A complete tool call in one piece (Gemini): emits `ToolCallStart` and
    /// `ToolCallEnd`.
    pub(crate) fn tool_call_whole(
        &mut self,
        mut call: ToolCall,
        out: &mut Vec<StreamEvent>,
    ) -> Slot {
        self.ensure_started(out);
        call.id = self.unique_call_id(&call.id);
        out.push(StreamEvent::ToolCallStart {
            id: call.id.clone(),
            name: call.name.clone(),
        });
        out.push(StreamEvent::ToolCallEnd {
            tool_call: call.clone(),
        });
        self.push_part(ContentPart::ToolCall(call), PartState::default())
    }

    /// The part behind `slot`, to set provider details (`item_id`, `signature`, `kind`).
    pub(crate) fn part_mut(&mut self, slot: Slot) -> Option<&mut ContentPart> {
        self.response.message.content.get_mut(slot.0)
    }

    /// Closes the segment behind `slot` (a no-op if it is closed); emits its `End` event.
    /// A tool call's arguments are parsed here.
    pub(crate) fn end(&mut self, slot: Slot, out: &mut Vec<StreamEvent>) {
        let Some(state) = self.parts.get_mut(slot.0) else {
            return;
        };
        if !state.open {
            return;
        }
        state.open = false;
        let silent = state.silent;
        match &mut self.response.message.content[slot.0] {
            ContentPart::Text { .. } => out.push(StreamEvent::TextEnd {
                text_id: state.text_id.clone().unwrap_or_default(),
            }),
            ContentPart::Thinking(_) if !silent => out.push(StreamEvent::ReasoningEnd),
            ContentPart::ToolCall(call) => {
                let raw = std::mem::take(&mut state.arguments);
                if call.arguments.is_null() || !raw.is_empty() {
                    call.arguments = parse_arguments(raw, call.kind);
                }
                out.push(StreamEvent::ToolCallEnd {
                    tool_call: call.clone(),
                });
            }
            _ => {}
        }
    }

    /// The usage so far, to update as the provider reports it.
    pub(crate) fn usage_mut(&mut self) -> &mut Usage {
        &mut self.response.usage
    }

    /// Sets why generation stopped.
    pub(crate) fn set_finish_reason(&mut self, reason: FinishReason) {
        self.response.finish_reason = reason;
    }

    /// Whether any tool call has been started.
    pub(crate) fn has_tool_calls(&self) -> bool {
        self.response
            .message
            .content
            .iter()
            .any(|p| matches!(p, ContentPart::ToolCall(_)))
    }

    /// Records a non-fatal issue on the response.
    pub(crate) fn warn(&mut self, warning: impl Into<String>) {
        self.response.warnings.push(warning.into());
    }

    /// Records the model's refusal text (also kept as a `refusal: …` warning).
    pub(crate) fn refuse(&mut self, refusal: String) {
        self.warn(format!("refusal: {refusal}"));
        self.response.refusal = Some(refusal);
    }

    /// Closes open segments, completes the usage and emits `Finish` (once).
    pub(crate) fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        if self.finished {
            return;
        }
        self.ensure_started(out);
        for i in 0..self.parts.len() {
            self.end(Slot(i), out);
        }
        let usage = &mut self.response.usage;
        if usage.total_tokens == 0 {
            usage.total_tokens = usage.input_tokens + usage.output_tokens;
        }
        self.finished = true;
        out.push(StreamEvent::Finish {
            finish_reason: self.response.finish_reason.clone(),
            usage: self.response.usage,
            response: Box::new(self.response.clone()),
        });
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// Parses accumulated argument text: `""` is `{}`; custom tools keep the raw text; text
/// that is not JSON is kept as a string holding exactly what was sent.
pub(crate) fn parse_arguments(raw: String, kind: ToolKind) -> Value {
    if kind == ToolKind::Custom {
        return Value::String(raw);
    }
    if raw.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    match serde_json::from_str(&raw) {
        Ok(value) => value,
        Err(_) => Value::String(raw),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_repeated_tool_call_id_is_made_unique() {
        let mut builder = super::ResponseBuilder::new("p");
        let mut out = Vec::new();
        builder.tool_call_start("call_1", "shell", &mut out);
        builder.tool_call_start("call_1", "shell", &mut out);
        builder.tool_call_start("call_1_2", "shell", &mut out);
        builder.finish(&mut out);
        let Some(crate::llm::StreamEvent::Finish { response, .. }) = out.last() else {
            panic!("no finish");
        };
        let ids: Vec<_> = response.tool_calls().iter().map(|c| c.id.clone()).collect();
        assert_eq!(ids, ["call_1", "call_1_2", "call_1_2_2"]);
    }

    use super::*;
    use crate::llm::FinishKind;

    #[test]
    fn segments_become_events_and_parts_in_start_order() {
        let mut b = ResponseBuilder::new("test");
        let mut out = Vec::new();
        b.start(Some("r1"), Some("m"), &mut out);
        let think = b.reasoning_start(&mut out);
        b.reasoning_delta(think, "hmm", &mut out);
        b.reasoning_signature(think, "si");
        b.reasoning_signature(think, "g");
        b.end(think, &mut out);
        let text = b.text_start(&mut out);
        b.text_delta(text, "hi", &mut out);
        b.text_delta(text, "", &mut out);
        let call = b.tool_call_start("c1", "f", &mut out);
        b.tool_call_delta(call, "{\"a\":", &mut out);
        b.tool_call_delta(call, "1}", &mut out);
        let empty = b.tool_call_start("c2", "g", &mut out);
        b.set_finish_reason(FinishReason::new(
            FinishKind::ToolCalls,
            Some("tool_use".into()),
        ));
        b.usage_mut().input_tokens = 3;
        b.usage_mut().output_tokens = 4;
        b.finish(&mut out);
        b.finish(&mut out);

        let kinds: Vec<&str> = out
            .iter()
            .map(|e| match e {
                StreamEvent::StreamStart { .. } => "start",
                StreamEvent::ReasoningStart => "rs",
                StreamEvent::ReasoningDelta { .. } => "rd",
                StreamEvent::ReasoningEnd => "re",
                StreamEvent::TextStart { .. } => "ts",
                StreamEvent::TextDelta { .. } => "td",
                StreamEvent::TextEnd { .. } => "te",
                StreamEvent::ToolCallStart { .. } => "cs",
                StreamEvent::ToolCallDelta { .. } => "cd",
                StreamEvent::ToolCallEnd { .. } => "ce",
                StreamEvent::Finish { .. } => "finish",
                _ => "other",
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "start", "rs", "rd", "re", "ts", "td", "cs", "cd", "cd", "cs", "te", "ce", "ce",
                "finish"
            ]
        );
        let r = &b.response;
        assert_eq!(r.text(), "hi");
        assert_eq!(r.reasoning().as_deref(), Some("hmm"));
        let calls = r.tool_calls();
        assert_eq!(calls[0].arguments, serde_json::json!({"a": 1}));
        assert_eq!(calls[1].arguments, serde_json::json!({}));
        assert_eq!(r.usage.total_tokens, 7);
        let _ = empty;
        match &r.message.content[0] {
            ContentPart::Thinking(t) => assert_eq!(t.signature.as_deref(), Some("sig")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn invalid_arguments_are_kept_verbatim() {
        assert_eq!(
            parse_arguments("{\"a\":".into(), ToolKind::Function),
            Value::String("{\"a\":".into())
        );
        assert_eq!(
            parse_arguments("*** Begin".into(), ToolKind::Custom),
            Value::String("*** Begin".into())
        );
    }
}
