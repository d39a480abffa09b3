//! Decoding a Gemini `streamGenerateContent?alt=sse` stream into [`StreamEvent`]s and the
//! accumulated response. Sans-IO: it sees parsed SSE events only, never bytes or sockets,
//! and never panics on malformed input (that is a typed error).

use std::borrow::Cow;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use serde_json::Value;

use super::{ID, gemini_error};
use crate::error::{Error, ErrorKind, Result};
use crate::llm::accumulate::{ResponseBuilder, Slot};
use crate::llm::sse;
use crate::llm::wire::Decoder;
use crate::llm::wire::malformed;
use crate::llm::{ContentPart, FinishKind, FinishReason, StreamEvent, ToolCall};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    #[serde(default, borrow)]
    candidates: Option<Vec<Candidate<'a>>>,
    #[serde(default)]
    usage_metadata: Option<UsageMetadata>,
    #[serde(default, borrow)]
    model_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    response_id: Option<Cow<'a, str>>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    #[serde(default, borrow)]
    content: Option<CandidateContent<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    index: Option<u64>,
}

#[derive(Deserialize)]
struct CandidateContent<'a> {
    #[serde(default, borrow)]
    parts: Option<Vec<WirePart<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePart<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default, borrow)]
    thought_signature: Option<Cow<'a, str>>,
    #[serde(default)]
    function_call: Option<WireFunctionCall>,
}

#[derive(Deserialize)]
struct WireFunctionCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    #[serde(default)]
    prompt_token_count: u64,
    #[serde(default)]
    candidates_token_count: Option<u64>,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
    #[serde(default)]
    cached_content_token_count: Option<u64>,
    #[serde(default)]
    total_token_count: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

/// A fresh call id, unique in the process: `call_` + a per-process random prefix + a
/// counter (Gemini assigns no ids; the session pairs calls and results by id).
fn synthetic_call_id() -> String {
    static PREFIX: OnceLock<u32> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish() as u32
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("call_{prefix:08x}{n:04}")
}

/// An open text or reasoning segment.
#[derive(Clone, Copy)]
struct Open {
    slot: Slot,
    thought: bool,
}

/// Decodes one Gemini event stream.
pub(crate) struct GeminiDecoder {
    builder: ResponseBuilder,
    open: Option<Open>,
    finish_reason: Option<String>,
    blocked: Option<String>,
    failed: bool,
    /// The provider's key, removed from in-stream error events that would echo it.
    api_key: Option<String>,
}

impl GeminiDecoder {
    /// Also removes `api_key` from in-stream error events (whatever the key's shape).
    pub(crate) fn with_api_key(mut self, api_key: Option<String>) -> GeminiDecoder {
        self.api_key = api_key;
        self
    }

    pub(crate) fn new() -> GeminiDecoder {
        GeminiDecoder {
            builder: ResponseBuilder::new(ID),
            open: None,
            finish_reason: None,
            blocked: None,
            failed: false,
            api_key: None,
        }
    }

    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(open) = self.open.take() {
            self.builder.end(open.slot, out);
        }
    }

    /// Text or thought text; a part with a signature becomes a content part of its own.
    fn text(
        &mut self,
        text: &str,
        thought: bool,
        signature: Option<&str>,
        out: &mut Vec<StreamEvent>,
    ) {
        let continues = matches!(self.open, Some(open) if open.thought == thought);
        if !continues || signature.is_some() {
            self.close(out);
        }
        let slot = match self.open {
            Some(open) => open.slot,
            None => {
                let slot = if thought {
                    self.builder.reasoning_start(out)
                } else {
                    self.builder.text_start(out)
                };
                self.open = Some(Open { slot, thought });
                slot
            }
        };
        if thought {
            self.builder.reasoning_delta(slot, text, out);
        } else {
            self.builder.text_delta(slot, text, out);
        }
        if let Some(signature) = signature {
            match self.builder.part_mut(slot) {
                Some(ContentPart::Text { signature: s, .. }) => *s = Some(signature.to_string()),
                Some(ContentPart::Thinking(t)) => t.signature = Some(signature.to_string()),
                _ => {}
            }
            self.close(out);
        }
    }

    fn part(&mut self, part: WirePart<'_>, out: &mut Vec<StreamEvent>) {
        let signature = part.thought_signature.as_deref().filter(|s| !s.is_empty());
        if let Some(call) = part.function_call {
            self.close(out);
            let id = call
                .id
                .filter(|id| !id.is_empty())
                .unwrap_or_else(synthetic_call_id);
            let arguments = call
                .args
                .filter(|a| !a.is_null())
                .unwrap_or_else(|| Value::Object(serde_json::Map::new()));
            let mut tool_call = ToolCall::new(id, call.name, arguments);
            tool_call.signature = signature.map(str::to_string);
            self.builder.tool_call_whole(tool_call, out);
            return;
        }
        let text = part.text.as_deref().unwrap_or("");
        if text.is_empty() && signature.is_none() {
            return;
        }
        self.text(text, part.thought == Some(true), signature, out);
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        self.close(out);
        let has_calls = self.builder.has_tool_calls();
        let (reason, raw) = match (&self.finish_reason, &self.blocked) {
            (Some(raw), _) => {
                let reason = match raw.as_str() {
                    "STOP" if has_calls => FinishKind::ToolCalls,
                    "STOP" => FinishKind::Stop,
                    "MAX_TOKENS" => FinishKind::Length,
                    "SAFETY"
                    | "RECITATION"
                    | "BLOCKLIST"
                    | "PROHIBITED_CONTENT"
                    | "SPII"
                    | "IMAGE_SAFETY"
                    | "IMAGE_PROHIBITED_CONTENT"
                    | "IMAGE_RECITATION" => FinishKind::ContentFilter,
                    _ => FinishKind::Other,
                };
                (reason, raw.clone())
            }
            (None, Some(blocked)) => (FinishKind::ContentFilter, blocked.clone()),
            (None, None) => (FinishKind::Other, String::new()),
        };
        if let Some(blocked) = &self.blocked {
            self.builder.warn(format!("prompt blocked: {blocked}"));
        }
        self.builder
            .set_finish_reason(FinishReason::new(reason, Some(raw)));
        self.builder.finish(out);
    }
}

impl Decoder for GeminiDecoder {
    fn event(&mut self, event: sse::Event, out: &mut Vec<StreamEvent>) -> Result<()> {
        if self.failed || self.builder.is_finished() {
            return Ok(());
        }
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Chunk<'_> = serde_json::from_str(data).map_err(|e| malformed(ID, data, &e))?;
        if chunk.error.is_some() {
            self.failed = true;
            let data = crate::llm::status::redact_key(data, self.api_key.as_deref().unwrap_or(""));
            return Err(gemini_error(None, &[], &data));
        }
        self.builder.start(
            chunk.response_id.as_deref(),
            chunk.model_version.as_deref(),
            out,
        );
        if let Some(usage) = chunk.usage_metadata {
            let output = usage.candidates_token_count.unwrap_or(0);
            let target = self.builder.usage_mut();
            target.input_tokens = usage.prompt_token_count;
            target.output_tokens = output;
            target.reasoning_tokens = usage.thoughts_token_count;
            target.cache_read_tokens = usage.cached_content_token_count;
            target.total_tokens = usage.total_token_count.unwrap_or(
                usage.prompt_token_count + output + usage.thoughts_token_count.unwrap_or(0),
            );
        }
        if let Some(feedback) = chunk.prompt_feedback {
            if let Some(reason) = feedback.block_reason {
                self.blocked = Some(reason);
            }
        }
        let candidate = chunk
            .candidates
            .into_iter()
            .flatten()
            .find(|c| c.index.unwrap_or(0) == 0);
        if let Some(candidate) = candidate {
            let parts = candidate.content.and_then(|c| c.parts).unwrap_or_default();
            for part in parts {
                self.part(part, out);
            }
            if let Some(reason) = candidate.finish_reason {
                self.finish_reason = Some(reason.into_owned());
            }
        }
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<()> {
        if self.failed || self.builder.is_finished() {
            return Ok(());
        }
        if self.finish_reason.is_some() || self.blocked.is_some() {
            self.finish(out);
            return Ok(());
        }
        Err(
            Error::new(ErrorKind::Stream, "the stream ended before a finishReason")
                .with_provider(ID),
        )
    }
}
