//! Decoding a Chat Completions event stream into [`StreamEvent`]s and the accumulated
//! response. Sans-IO: it sees parsed SSE events only, never bytes or sockets, and never
//! panics on malformed input (that is a typed error).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::lenient;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::accumulate::{ResponseBuilder, Slot};
use crate::llm::openai::openai_error;
use crate::llm::sse;
use crate::llm::wire::Decoder;
use crate::llm::wire::malformed;
use crate::llm::{ContentPart, FinishKind, FinishReason, StreamEvent};

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::text")]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::text")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::text")]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::text")]
    refusal: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<DeltaCall<'a>>>,
}

#[derive(Deserialize)]
struct DeltaCall<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow, deserialize_with = "lenient::text")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<DeltaFunction<'a>>,
}

#[derive(Deserialize)]
struct DeltaFunction<'a> {
    #[serde(default, borrow, deserialize_with = "lenient::text")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "lenient::json_text")]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ChatUsage {
    #[serde(default, deserialize_with = "lenient::count")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient::count")]
    completion_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient::count")]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
    /// DeepSeek's name for cached prompt tokens.
    #[serde(default, deserialize_with = "lenient::count")]
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default, deserialize_with = "lenient::count")]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default, deserialize_with = "lenient::count")]
    reasoning_tokens: Option<u64>,
}

/// One tool call being streamed.
struct OpenCall {
    index: Option<u64>,
    id: String,
    slot: Slot,
}

/// Decodes one Chat Completions event stream.
pub(crate) struct ChatDecoder {
    builder: ResponseBuilder,
    provider: String,
    text: Option<Slot>,
    reasoning: Option<Slot>,
    calls: Vec<OpenCall>,
    refusal: String,
    finish_reason: Option<String>,
    done: bool,
    failed: bool,
    /// The provider's key, removed from in-stream error events that would echo it.
    api_key: Option<String>,
}

impl ChatDecoder {
    /// Also removes `api_key` from in-stream error events (whatever the key's shape).
    pub(crate) fn with_api_key(mut self, api_key: Option<String>) -> ChatDecoder {
        self.api_key = api_key;
        self
    }

    pub(crate) fn new(provider: &str) -> ChatDecoder {
        ChatDecoder {
            builder: ResponseBuilder::new(provider),
            provider: provider.to_string(),
            text: None,
            reasoning: None,
            calls: Vec::new(),
            refusal: String::new(),
            finish_reason: None,
            done: false,
            failed: false,
            api_key: None,
        }
    }

    fn close_text_and_reasoning(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(slot) = self.text.take() {
            self.builder.end(slot, out);
        }
        if let Some(slot) = self.reasoning.take() {
            self.builder.end(slot, out);
        }
    }

    fn tool_call(&mut self, entry: DeltaCall<'_>, out: &mut Vec<StreamEvent>) -> Result<()> {
        let (name, arguments) = match entry.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        let new_id = entry.id.as_deref().filter(|id| !id.is_empty());
        let found = match (entry.index, new_id) {
            // Some servers give every call index 0: a new id at a known index is a new call.
            (Some(index), Some(id)) => self
                .calls
                .iter()
                .rposition(|c| c.index == Some(index) && c.id == id),
            (Some(index), None) => self.calls.iter().rposition(|c| c.index == Some(index)),
            (None, Some(id)) => self.calls.iter().rposition(|c| c.id == id),
            (None, None) => self.calls.len().checked_sub(1),
        };
        let slot = match found {
            Some(i) => {
                let slot = self.calls[i].slot;
                if let (Some(name), Some(ContentPart::ToolCall(call))) =
                    (name.as_deref(), self.builder.part_mut(slot))
                {
                    if call.name.is_empty() {
                        call.name = name.to_string();
                    }
                }
                slot
            }
            None => {
                if entry.id.is_none() && name.is_none() {
                    let which = entry
                        .index
                        .map_or_else(|| "without an index".to_string(), |i| format!("{i}"));
                    return Err(Error::new(
                        ErrorKind::Stream,
                        format!("a tool-call delta for index {which} that was never opened (no id, no name)"),
                    )
                    .with_provider(self.provider.clone()));
                }
                self.close_text_and_reasoning(out);
                let id = match entry.id.as_deref() {
                    Some(id) if !id.is_empty() => id.to_string(),
                    _ => format!("call_{}", self.calls.len()),
                };
                let slot = self
                    .builder
                    .tool_call_start(&id, name.as_deref().unwrap_or(""), out);
                self.calls.push(OpenCall {
                    index: entry.index,
                    id,
                    slot,
                });
                slot
            }
        };
        if let Some(arguments) = arguments.as_deref() {
            self.builder.tool_call_delta(slot, arguments, out);
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        let has_calls = !self.calls.is_empty();
        let reason = match self.finish_reason.as_deref() {
            Some("length") => FinishKind::Length,
            Some("tool_calls" | "function_call") => FinishKind::ToolCalls,
            Some("content_filter") => FinishKind::ContentFilter,
            Some("stop") | None if has_calls => FinishKind::ToolCalls,
            Some("stop" | "eos" | "end_turn") | None => FinishKind::Stop,
            Some(_) => FinishKind::Other,
        };
        self.builder
            .set_finish_reason(FinishReason::new(reason, self.finish_reason.clone()));
        if !self.refusal.is_empty() {
            let refusal = std::mem::take(&mut self.refusal);
            self.builder.refuse(refusal);
        }
        self.builder.finish(out);
    }
}

impl Decoder for ChatDecoder {
    fn event(&mut self, event: sse::Event, out: &mut Vec<StreamEvent>) -> Result<()> {
        if self.failed || self.builder.is_finished() {
            return Ok(());
        }
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            self.finish(out);
            return Ok(());
        }
        if event.event.as_deref() == Some("error") {
            self.failed = true;
            let data = crate::llm::status::redact_key(data, self.api_key.as_deref().unwrap_or(""));
            return Err(openai_error(&self.provider, None, &[], &data));
        }
        let chunk: Chunk<'_> =
            serde_json::from_str(data).map_err(|e| malformed(&self.provider, data, &e))?;
        if chunk.error.is_some() {
            self.failed = true;
            let data = crate::llm::status::redact_key(data, self.api_key.as_deref().unwrap_or(""));
            return Err(openai_error(&self.provider, None, &[], &data));
        }
        self.builder
            .start(chunk.id.as_deref(), chunk.model.as_deref(), out);
        if let Some(usage) = chunk.usage {
            let target = self.builder.usage_mut();
            let input = usage.prompt_tokens.unwrap_or(0);
            let output = usage.completion_tokens.unwrap_or(0);
            target.input_tokens = input;
            target.output_tokens = output;
            target.total_tokens = usage.total_tokens.unwrap_or(input + output);
            target.reasoning_tokens = usage
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens);
            target.cache_read_tokens = usage
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .or(usage.prompt_cache_hit_tokens);
        }
        let Some(choice) = chunk
            .choices
            .into_iter()
            .flatten()
            .find(|c| c.index.unwrap_or(0) == 0)
        else {
            return Ok(());
        };
        if let Some(delta) = choice.delta {
            let reasoning = delta.reasoning_content.or(delta.reasoning);
            if let Some(reasoning) = reasoning.as_deref().filter(|r| !r.is_empty()) {
                if let Some(slot) = self.text.take() {
                    self.builder.end(slot, out);
                }
                let slot = match self.reasoning {
                    Some(slot) => slot,
                    None => *self.reasoning.insert(self.builder.reasoning_start(out)),
                };
                self.builder.reasoning_delta(slot, reasoning, out);
            }
            if let Some(content) = delta.content.as_deref().filter(|c| !c.is_empty()) {
                if let Some(slot) = self.reasoning.take() {
                    self.builder.end(slot, out);
                }
                let slot = match self.text {
                    Some(slot) => slot,
                    None => *self.text.insert(self.builder.text_start(out)),
                };
                self.builder.text_delta(slot, content, out);
            }
            if let Some(refusal) = delta.refusal.as_deref() {
                self.refusal.push_str(refusal);
            }
            for entry in delta.tool_calls.into_iter().flatten() {
                self.tool_call(entry, out)?;
            }
        }
        if let Some(reason) = choice.finish_reason {
            self.finish_reason = Some(reason.into_owned());
        }
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<()> {
        if self.failed || self.builder.is_finished() {
            return Ok(());
        }
        if self.finish_reason.is_some() {
            self.finish(out);
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Stream,
            "the stream ended before a finish_reason or [DONE]",
        )
        .with_provider(self.provider.clone()))
    }
}
