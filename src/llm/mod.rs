//! The provider-neutral LLM client: the data model, streaming, and one file per wire format.
//!
//! This module knows nothing of tools, sessions or files. It turns a [`Request`] into a
//! provider's native HTTP request, parses the provider's server-sent events back into
//! [`StreamEvent`]s, and accumulates them into a [`Response`].
//!
//! The shapes follow the unified LLM specification (§3): a conversation is a list of
//! [`Message`]s, each a list of [`ContentPart`]s. Everything a provider needs to see again on
//! the next request — thinking signatures, redacted thinking, OpenAI reasoning items, Gemini
//! thought signatures — is kept on the parts so that a history replays byte for byte.
//!
//! The serde derives on these types are a public format (transcripts, JSONL events); the
//! wire-format structs of each provider stay private to their own file.

pub(crate) mod sse;

mod accumulate;
mod base_url;
pub use base_url::check_base_url;
mod client;
mod http;
mod models;
mod status;
pub use http::HttpOptions;
#[cfg(test)]
mod test_support;
mod wire;

pub mod anthropic;
pub mod gemini;
pub mod openai;
pub mod openai_chat;
pub mod pricing;
pub mod scripted;

pub use client::{Client, EventStream, Provider, RetryObserver, RetryPolicy};
pub(crate) mod tool_schema;
pub use tool_schema::ToolSchema;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who produced a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions that shape the model's behaviour.
    System,
    /// Human (or host) input.
    User,
    /// Model output: text, tool calls, thinking.
    Assistant,
    /// Tool results, linked to their call by id.
    Tool,
    /// Privileged application instructions (merged with the system prompt where a provider
    /// has no such role).
    Developer,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who produced it.
    pub role: Role,
    /// The body, in order.
    pub content: Vec<ContentPart>,
    /// Optional author name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// For tool messages: the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    fn with_text(role: Role, text: impl Into<String>) -> Message {
        Message {
            role,
            content: vec![ContentPart::text(text)],
            name: None,
            tool_call_id: None,
        }
    }

    /// A system message with one text part.
    pub fn system(text: impl Into<String>) -> Message {
        Message::with_text(Role::System, text)
    }

    /// A user message with one text part.
    pub fn user(text: impl Into<String>) -> Message {
        Message::with_text(Role::User, text)
    }

    /// An assistant message with one text part.
    pub fn assistant(text: impl Into<String>) -> Message {
        Message::with_text(Role::Assistant, text)
    }

    /// A tool message carrying one result.
    pub fn tool_result(result: ToolResult) -> Message {
        Message {
            role: Role::Tool,
            tool_call_id: Some(result.tool_call_id.clone()),
            content: vec![ContentPart::ToolResult(result)],
            name: None,
        }
    }

    /// The concatenation of every text part (empty if there is none).
    pub fn text(&self) -> String {
        let mut out = String::new();
        for part in &self.content {
            if let ContentPart::Text { text, .. } = part {
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls in this message, in order.
    pub fn tool_calls(&self) -> Vec<&ToolCall> {
        self.content
            .iter()
            .filter_map(|p| match p {
                ContentPart::ToolCall(call) => Some(call),
                _ => None,
            })
            .collect()
    }

    /// The concatenation of every non-redacted thinking part, or `None` if there is none.
    pub fn reasoning(&self) -> Option<String> {
        let mut out: Option<String> = None;
        for part in &self.content {
            if let ContentPart::Thinking(t) = part {
                if !t.redacted && !t.text.is_empty() {
                    let s = out.get_or_insert_with(String::new);
                    if !s.is_empty() {
                        s.push_str("\n\n");
                    }
                    s.push_str(&t.text);
                }
            }
        }
        out
    }
}

/// One piece of a message body (unified spec §3.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
        /// A provider signature attached to this text part (Gemini `thoughtSignature`),
        /// sent back unchanged on the same part.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// An image (input, or a tool result's picture).
    Image(ImageData),
    /// A model-initiated tool invocation.
    ToolCall(ToolCall),
    /// The result of a tool call.
    ToolResult(ToolResult),
    /// Model reasoning, possibly signed or redacted; sent back unchanged.
    Thinking(ThinkingData),
}

impl ContentPart {
    /// A text part without a signature.
    pub fn text(text: impl Into<String>) -> ContentPart {
        ContentPart::Text {
            text: text.into(),
            signature: None,
        }
    }
}

/// An image given by URL or by bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageData {
    /// A URL (`https://…` or `data:`), if the image is referenced rather than embedded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Raw image bytes (serialised as base64).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::base64::serde_opt"
    )]
    pub data: Option<Vec<u8>>,
    /// MIME type (`image/png`); `image/png` is assumed for bytes without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Fidelity hint for providers that take one (`auto`, `low`, `high`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl ImageData {
    /// An image from bytes with a MIME type.
    pub fn from_bytes(data: Vec<u8>, media_type: impl Into<String>) -> ImageData {
        ImageData {
            url: None,
            data: Some(data),
            media_type: Some(media_type.into()),
            detail: None,
        }
    }

    /// The MIME type, defaulting to `image/png`.
    pub fn media_type_or_default(&self) -> &str {
        self.media_type.as_deref().unwrap_or("image/png")
    }

    /// The bytes as standard base64 (empty if the image is a URL).
    pub fn base64(&self) -> String {
        self.data
            .as_deref()
            .map(crate::base64::encode)
            .unwrap_or_default()
    }
}

/// Whether a tool takes JSON arguments or free text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// A function tool: arguments are a JSON object.
    #[default]
    Function,
    /// A freeform (Responses `custom`) tool: the input is raw text.
    Custom,
}

impl ToolKind {
    fn is_function(&self) -> bool {
        *self == ToolKind::Function
    }
}

/// A tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id (provider-assigned, or synthetic for Gemini).
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The arguments: a JSON object for function tools; a JSON string holding the raw input
    /// for custom tools; or, when the model sent arguments that are not valid JSON, a string
    /// holding exactly what it sent (the tool layer reports the parse error to the model).
    pub arguments: Value,
    /// Function or custom (freeform) call.
    #[serde(default, skip_serializing_if = "ToolKind::is_function")]
    pub kind: ToolKind,
    /// The provider's output-item id where it differs from the call id (Responses `fc_…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<String>,
    /// A provider signature attached to this call (Gemini `thoughtSignature`), sent back
    /// unchanged on the same part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl ToolCall {
    /// A function call with JSON arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
            kind: ToolKind::Function,
            item_id: None,
            signature: None,
        }
    }

    /// The arguments as the text a provider expects on the wire: the raw input for custom
    /// calls and unparseable arguments, compact JSON otherwise.
    pub fn arguments_text(&self) -> String {
        match &self.arguments {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

/// The result of executing a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The [`ToolCall::id`] this answers.
    pub tool_call_id: String,
    /// The tool's output as the model sees it (already truncated).
    pub content: String,
    /// Whether the tool failed.
    #[serde(default)]
    pub is_error: bool,
    /// An image the tool returned (for example `read_file` on a PNG).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageData>,
    /// The tool's name (Gemini's `functionResponse` needs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Function or custom: a custom call is answered with a custom output item.
    #[serde(default, skip_serializing_if = "ToolKind::is_function")]
    pub kind: ToolKind,
}

impl ToolResult {
    /// A text result for `call`.
    pub fn for_call(call: &ToolCall, content: impl Into<String>, is_error: bool) -> ToolResult {
        ToolResult {
            tool_call_id: call.id.clone(),
            content: content.into(),
            is_error,
            image: None,
            name: Some(call.name.clone()),
            kind: call.kind,
        }
    }
}

/// Model reasoning (unified spec §3.5 `ThinkingData`).
///
/// Also carries OpenAI Responses reasoning items: `id` is the item id, `text` the summary
/// and `signature` the `encrypted_content`, so a stateless conversation can send them back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThinkingData {
    /// The reasoning text (empty for redacted thinking).
    #[serde(default)]
    pub text: String,
    /// The provider's signature or encrypted content, sent back unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Redacted thinking: `signature` holds the opaque data; there is no text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
    /// The provider's item id (OpenAI Responses reasoning items).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// Unique name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments; the root is an `object`. Make it from a value with
    /// `json!({...}).into()`.
    pub parameters: ToolSchema,
    /// For freeform tools: the grammar that constrains the raw-text input. Wire formats
    /// with custom tools (OpenAI Responses) offer the tool as `custom`; the others offer it
    /// as a function with `parameters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freeform: Option<FreeformFormat>,
}

/// The grammar of a freeform tool's input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreeformFormat {
    /// `"lark"` or `"regex"`.
    pub syntax: String,
    /// The grammar text.
    pub definition: String,
}

/// How the model may choose tools.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// Exactly this tool.
    Named(String),
}

/// The input to `Client::complete` and `Client::stream` (unified spec §3.6).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Request {
    /// The provider's model id.
    pub model: String,
    /// The conversation; system messages are lifted into the provider's system field.
    pub messages: Vec<Message>,
    /// Which registered provider answers; the client's default when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    /// Tool choice; `Auto` when tools are present and this is `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// `"low"`, `"medium"`, `"high"` (or a provider's own value); `None` = provider default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Output token limit; each adapter has a default where its API requires one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// Provider-specific options keyed by provider id, e.g.
    /// `{"anthropic": {"beta_headers": ["…"]}}`. Each adapter reads only its own key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_options: Option<Value>,
    /// Which requests share a prompt prefix, for the provider's prompt cache: OpenAI's
    /// `prompt_cache_key` (Responses, and Chat Completions on OpenAI's own API); other
    /// formats ignore it. A session sets its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
    /// How long the prompt-cache entries this request writes should live, in seconds, where
    /// the provider lets the caller choose: Anthropic takes 300 or 3600 (`cache_control`'s
    /// `ttl`, `5m` or `1h`; another value is a configuration error); others ignore it.
    /// `None` leaves it to the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_ttl_secs: Option<u64>,
}

impl Request {
    /// A request for `model` with `messages` and nothing else set.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Request {
        Request {
            model: model.into(),
            messages,
            ..Request::default()
        }
    }

    /// The options object under `provider_options[provider_id]`, if any.
    pub fn options_for(&self, provider_id: &str) -> Option<&serde_json::Map<String, Value>> {
        self.provider_options
            .as_ref()?
            .get(provider_id)?
            .as_object()
    }
}

/// Why generation stopped, unified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishKind {
    /// Natural end.
    #[default]
    Stop,
    /// The output-token limit was reached.
    Length,
    /// The model wants tools run.
    ToolCalls,
    /// Blocked by a safety filter.
    ContentFilter,
    /// The provider reported an error.
    Error,
    /// Anything else (the raw value says what).
    Other,
}

/// Why generation stopped: the unified kind plus the provider's raw value.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FinishReason {
    /// The unified reason.
    pub reason: FinishKind,
    /// The provider's own value (`end_turn`, `tool_use`, `STOP`, `incomplete`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

impl FinishReason {
    /// A finish reason from its parts.
    pub fn new(reason: FinishKind, raw: Option<String>) -> FinishReason {
        FinishReason { reason, raw }
    }
}

/// Token counts (unified spec §3.9). Add two with `+`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens (including reasoning where the provider counts it so).
    pub output_tokens: u64,
    /// Input plus output.
    pub total_tokens: u64,
    /// Reasoning tokens, where reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Tokens read from the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Tokens written to the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// Of `cache_write_tokens`, those written to live an hour (Anthropic's `1h` TTL, billed
    /// higher than its 5-minute writes), where the provider reports them apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h_tokens: Option<u64>,
}

fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

impl std::ops::Add for Usage {
    type Output = Usage;
    fn add(self, rhs: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens + rhs.input_tokens,
            output_tokens: self.output_tokens + rhs.output_tokens,
            total_tokens: self.total_tokens + rhs.total_tokens,
            reasoning_tokens: add_opt(self.reasoning_tokens, rhs.reasoning_tokens),
            cache_read_tokens: add_opt(self.cache_read_tokens, rhs.cache_read_tokens),
            cache_write_tokens: add_opt(self.cache_write_tokens, rhs.cache_write_tokens),
            cache_write_1h_tokens: add_opt(self.cache_write_1h_tokens, rhs.cache_write_1h_tokens),
        }
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Usage) {
        *self = *self + rhs;
    }
}

/// A complete model response (unified spec §3.7).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Response {
    /// Provider-assigned response id.
    pub id: String,
    /// The model that answered.
    pub model: String,
    /// The provider that answered.
    pub provider: String,
    /// The assistant message: text, thinking and tool-call parts in stream order.
    pub message: Message,
    /// Why generation stopped.
    pub finish_reason: FinishReason,
    /// Token counts.
    pub usage: Usage,
    /// Non-fatal issues (refusal text, unknown events skipped, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The model's refusal text, when it declined to answer (Chat Completions
    /// `delta.refusal`, Responses `refusal` content). It is not part of the answer text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
}

impl Default for Message {
    fn default() -> Self {
        Message {
            role: Role::Assistant,
            content: Vec::new(),
            name: None,
            tool_call_id: None,
        }
    }
}

impl Response {
    /// The concatenated text.
    pub fn text(&self) -> String {
        self.message.text()
    }

    /// The tool calls, in order.
    pub fn tool_calls(&self) -> Vec<&ToolCall> {
        self.message.tool_calls()
    }

    /// The concatenated reasoning text, if any.
    pub fn reasoning(&self) -> Option<String> {
        self.message.reasoning()
    }
}

/// One event of a streamed response (unified spec §3.13–3.14).
///
/// Order: `StreamStart` first; then any interleaving of text, reasoning and tool-call
/// segments, each `Start`, `Delta`*, `End`; `Finish` last, carrying the accumulated
/// [`Response`]. Errors are not events: the stream yields `Err` and ends.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// The stream has begun.
    StreamStart {
        /// Response id, if the provider sent one up front.
        id: Option<String>,
        /// Model, if the provider sent it up front.
        model: Option<String>,
    },
    /// A text segment began.
    TextStart {
        /// Correlates the segment's events.
        text_id: String,
    },
    /// More text.
    TextDelta {
        /// Correlates the segment's events.
        text_id: String,
        /// The new text.
        delta: String,
    },
    /// A text segment ended.
    TextEnd {
        /// Correlates the segment's events.
        text_id: String,
    },
    /// Reasoning began.
    ReasoningStart,
    /// More reasoning text.
    ReasoningDelta {
        /// The new reasoning text.
        delta: String,
    },
    /// Reasoning ended.
    ReasoningEnd,
    /// A tool call began.
    ToolCallStart {
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
    },
    /// More argument text (partial JSON, or raw text for custom tools).
    ToolCallDelta {
        /// The call id.
        id: String,
        /// The new argument text.
        delta: String,
    },
    /// A tool call is complete.
    ToolCallEnd {
        /// The finished call with parsed arguments.
        tool_call: ToolCall,
    },
    /// Generation finished; always the last event of a successful stream.
    Finish {
        /// Why it stopped.
        finish_reason: FinishReason,
        /// Final token counts.
        usage: Usage,
        /// The whole response, accumulated.
        response: Box<Response>,
    },
    /// A provider event with no unified meaning, passed through.
    ProviderEvent {
        /// The provider's event type.
        event_type: String,
        /// Its payload.
        data: Value,
    },
}
