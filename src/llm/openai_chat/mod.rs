//! The OpenAI Chat Completions wire format (`POST {base}/chat/completions`), spoken by
//! OpenAI and by most servers that call themselves OpenAI-compatible (Ollama, llama.cpp,
//! vLLM, Groq, OpenRouter, DeepSeek, …). Request bodies, the SSE decoder and error
//! classification; it never retries and never reads the environment.
//!
//! Translation (unified spec §7.10):
//!
//! | unified | Chat Completions |
//! |---|---|
//! | system and developer messages | one leading `system` message, joined with a blank line |
//! | user text and images | `user` message: a string for a single text part, else `text` / `image_url` parts (images as URLs or data URIs) |
//! | assistant text and [`ToolCall`](crate::llm::ToolCall)s | `assistant` message with `content` and `tool_calls` (`arguments` as JSON text) |
//! | [`ToolResult`](crate::llm::ToolResult) | `tool` message (`tool_call_id`, text content); a result's image follows the run of tool messages as a `user` message |
//! | thinking | not sent (servers differ on whether they accept it back) |
//! | [`ToolDefinition`](crate::llm::ToolDefinition) | `function` tool; a freeform tool is offered as a function with its `parameters` |
//! | `reasoning_effort` | top-level `reasoning_effort`, only when set |
//! | `max_tokens` | `max_completion_tokens` for `api.openai.com` (OpenAI rejects `max_tokens` for reasoning models), `max_tokens` elsewhere (what older compatible servers know) |
//! | `stop_sequences` | `stop` |
//! | `cache_key` | `prompt_cache_key`, for `api.openai.com` only |
//! | `provider_options[<provider id>]` | merged into the body last |
//!
//! Every request asks for `stream_options: {include_usage: true}`, so usage arrives in a
//! final chunk with `choices: []`.
//!
//! Streaming: only `choices[0]` is decoded. `delta.content` is text; `delta.reasoning_content`
//! (DeepSeek, llama.cpp) or `delta.reasoning` (OpenRouter, Groq) is reasoning;
//! `delta.refusal` is reported as a warning (`refusal: …`), not as text. Tool-call deltas
//! are accumulated by `index`; an entry without `index` (Ollama) belongs to the call with
//! its `id`, a new call when the id is new, or the latest call when it has no id. A
//! `finish_reason` of `stop` with tool calls present finishes as `tool_calls` (Ollama sends
//! `stop`). `data: [DONE]` finishes the stream; a stream that ends after a `finish_reason`
//! without `[DONE]` finishes too, but one that ends with neither is a
//! [`Stream`](crate::ErrorKind::Stream) error (a truncated answer must not look complete). An
//! `event: error` frame or a chunk with an `error` object is an error.

mod lenient;
mod stream;

pub(crate) use stream::ChatDecoder;

use std::borrow::Cow;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::cancel::CancelToken;
use crate::error::{Error, Result};
use crate::json::RawJson;
use crate::llm::http::{self, EventIter};
use crate::llm::openai::openai_error;
use crate::llm::status;
use crate::llm::wire::{Decoder, HttpRequest, WireFormat};
use crate::llm::wire::{
    check_header_value, decode_body, image_url, serialize_with_options, system_text,
};
use crate::llm::{
    ContentPart, HttpOptions, ImageData, Message, Provider, Request, Response, Role, ToolChoice,
};

/// The provider id an [`OpenAiChat`] has unless given another with
/// [`with_id`](OpenAiChat::with_id).
pub const DEFAULT_ID: &str = "openai-chat";

/// The base URL of [`OpenAiChat::new`]: OpenAI's API.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A Chat Completions server as a provider (id `"openai-chat"` by default).
///
/// Register several under different ids to talk to several servers:
///
/// ```no_run
/// use agentloop::llm::{openai_chat::OpenAiChat, Client};
/// let client = Client::new()
///     .with_provider(OpenAiChat::compatible("http://127.0.0.1:11434/v1").with_id("ollama"))
///     .with_provider(
///         OpenAiChat::new("gsk_…")
///             .with_base_url("https://api.groq.com/openai/v1")
///             .with_id("groq"),
///     );
/// # let _ = client;
/// ```
///
/// The API key is optional: without one no `Authorization` header is sent, which is what a
/// local server (Ollama, llama.cpp) expects.
#[derive(Clone)]
pub struct OpenAiChat {
    id: String,
    api_key: Option<String>,
    base_url: String,
    http: HttpOptions,
    /// Idle keep-alive connections for the next requests (shared by clones).
    connections: http::Connections,
}

impl fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("id", &self.id)
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("base_url", &self.base_url)
            .field("http", &self.http)
            .finish()
    }
}

impl OpenAiChat {
    /// OpenAI's own Chat Completions endpoint ([`DEFAULT_BASE_URL`]) with `api_key`.
    pub fn new(api_key: impl Into<String>) -> OpenAiChat {
        OpenAiChat::compatible(DEFAULT_BASE_URL).with_api_key(api_key)
    }

    /// A compatible server at `base_url` (the part before `/chat/completions`, e.g.
    /// `http://127.0.0.1:11434/v1`), without a key; add one with
    /// [`with_api_key`](Self::with_api_key) if the server wants it.
    pub fn compatible(base_url: impl Into<String>) -> OpenAiChat {
        OpenAiChat {
            id: DEFAULT_ID.to_string(),
            api_key: None,
            base_url: base_url.into().trim_end_matches('/').to_string(),
            http: HttpOptions::default(),
            connections: http::Connections::default(),
        }
    }

    /// Talks to `base_url` instead (the part before `/chat/completions`).
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> OpenAiChat {
        self.base_url = base_url.into().trim_end_matches('/').to_string();
        self
    }

    /// Sends `Authorization: Bearer <api_key>` (an empty key sends nothing).
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> OpenAiChat {
        let key = api_key.into();
        self.api_key = (!key.is_empty()).then_some(key);
        self
    }

    /// Registers under `id` instead of `"openai-chat"`; requests name it in
    /// [`Request::provider`], and `provider_options[id]` is merged into its bodies.
    pub fn with_id(mut self, id: impl Into<String>) -> OpenAiChat {
        self.id = id.into();
        self
    }

    /// Replaces the timeouts and transport settings.
    pub fn with_http_options(mut self, http: HttpOptions) -> OpenAiChat {
        self.http = http;
        self.connections = http::Connections::default();
        self
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Whether the base URL points at this machine (`localhost`, `127.0.0.1`, `[::1]`).
    pub fn is_local(&self) -> bool {
        is_local_url(&self.base_url)
    }
}

/// Whether `url`'s host is a loopback name or address.
pub(crate) fn is_local_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.split(':').next().unwrap_or("")
    };
    host.eq_ignore_ascii_case("localhost") || host == "::1" || host.starts_with("127.")
}

fn is_openai_host(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host = rest.split(['/', ':', '?']).next().unwrap_or("");
    host.eq_ignore_ascii_case("api.openai.com")
}

impl Provider for OpenAiChat {
    fn id(&self) -> &str {
        &self.id
    }

    fn base_url(&self) -> Option<&str> {
        Some(self.base_url())
    }

    fn models(&self) -> Result<Vec<String>> {
        super::models::list(
            &self.id,
            &self.base_url,
            self.api_key.as_deref(),
            &self.http,
        )
    }

    fn open(&self, request: &Request, cancel: &CancelToken) -> Result<EventIter> {
        http::open(self, &self.http, &self.connections, request, cancel)
    }
}

impl WireFormat for OpenAiChat {
    fn provider_id(&self) -> &str {
        &self.id
    }

    fn build_request(&self, request: &Request) -> Result<HttpRequest> {
        let mut headers = vec![
            ("content-type".to_string(), "application/json".to_string()),
            ("accept".to_string(), "text/event-stream".to_string()),
        ];
        if let Some(key) = &self.api_key {
            check_header_value(&self.id, "api key", key)?;
            headers.push(("authorization".to_string(), format!("Bearer {key}")));
        }
        Ok(HttpRequest {
            url: format!("{}/chat/completions", self.base_url),
            headers,
            body: request_body(request, &self.id, is_openai_host(&self.base_url))?,
        })
    }

    fn decoder(&self, _request: &Request) -> Box<dyn Decoder> {
        Box::new(ChatDecoder::new(&self.id).with_api_key(self.api_key.clone()))
    }

    fn classify_error(&self, status: u16, headers: &[(String, String)], body: &str) -> Error {
        // A server that echoes the key must not put it in an error, whatever its shape
        // (`gsk_…`, `fw_…` and plain keys escape the generic secret pattern).
        let body = match &self.api_key {
            Some(key) => status::redact_key(body, key),
            None => std::borrow::Cow::Borrowed(body),
        };
        let error = openai_error(&self.id, Some(status), headers, &body);
        if status == 401 && self.api_key.is_none() {
            let message = format!(
                "{} (no api key is configured for this provider)",
                error.message()
            );
            return error.with_message(message);
        }
        error
    }
}

/// Decodes a complete Chat Completions SSE body into the [`Response`] a stream would have
/// produced, or the error it carried.
///
/// An offline utility for tests, recorded transcripts and benchmarks: no I/O happens.
pub(crate) fn decode_stream(body: &[u8]) -> Result<Response> {
    decode_body(&mut ChatDecoder::new(DEFAULT_ID), body)
}

// ---------------------------------------------------------------------------------------
// Request body
// ---------------------------------------------------------------------------------------

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<ChatMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ChatTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct ChatMessage<'a> {
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<ChatContent<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ChatToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum ChatContent<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<ChatPart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ChatPart<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: ChatImage<'a> },
}

#[derive(Serialize)]
struct ChatImage<'a> {
    url: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
}

#[derive(Serialize)]
struct ChatToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: ChatFunctionCall<'a>,
}

#[derive(Serialize)]
struct ChatFunctionCall<'a> {
    name: &'a str,
    arguments: String,
}

#[derive(Serialize)]
struct ChatTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ChatFunction<'a>,
}

#[derive(Serialize)]
struct ChatFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: RawJson<'a>,
}

fn request_body(request: &Request, provider_id: &str, openai_host: bool) -> Result<Vec<u8>> {
    let system = system_text(&request.messages);
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !system.is_empty() {
        messages.push(ChatMessage {
            role: "system",
            content: Some(ChatContent::Text(Cow::Owned(system))),
            tool_calls: Vec::new(),
            tool_call_id: None,
        });
    }
    // Images from tool results wait until the run of tool messages ends.
    let mut tool_images: Vec<(&str, &ImageData)> = Vec::new();
    for message in &request.messages {
        match message.role {
            Role::System | Role::Developer => {}
            Role::Assistant => {
                flush_tool_images(&mut tool_images, &mut messages);
                messages.push(assistant_message(message));
            }
            Role::User | Role::Tool => {
                push_user_or_tool(message, &mut messages, &mut tool_images);
            }
        }
    }
    flush_tool_images(&mut tool_images, &mut messages);

    let tools: Vec<ChatTool<'_>> = request
        .tools
        .iter()
        .map(|tool| ChatTool {
            kind: "function",
            function: ChatFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: tool.parameters.raw(),
            },
        })
        .collect();
    let tool_choice = (!tools.is_empty()).then(|| {
        match request.tool_choice.as_ref().unwrap_or(&ToolChoice::Auto) {
            ToolChoice::Auto => Value::from("auto"),
            ToolChoice::None => Value::from("none"),
            ToolChoice::Required => Value::from("required"),
            ToolChoice::Named(name) => {
                serde_json::json!({"type": "function", "function": {"name": name}})
            }
        }
    });
    let (max_completion_tokens, max_tokens) = if openai_host {
        (request.max_tokens, None)
    } else {
        (None, request.max_tokens)
    };
    let body = Body {
        model: &request.model,
        messages,
        tools,
        tool_choice,
        reasoning_effort: request.reasoning_effort.as_deref(),
        max_completion_tokens,
        max_tokens,
        temperature: request.temperature,
        top_p: request.top_p,
        stop: &request.stop_sequences,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        // Only OpenAI's own API is known to take it; compatible servers differ.
        prompt_cache_key: request.cache_key.as_deref().filter(|_| openai_host),
    };
    serialize_with_options(&body, request.options_for(provider_id))
}

fn assistant_message(message: &Message) -> ChatMessage<'_> {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for part in &message.content {
        match part {
            ContentPart::Text { text: t, .. } => text.push_str(t),
            ContentPart::ToolCall(call) => tool_calls.push(ChatToolCall {
                id: &call.id,
                kind: "function",
                function: ChatFunctionCall {
                    name: &call.name,
                    arguments: call.arguments_text(),
                },
            }),
            _ => {}
        }
    }
    // `content` may be left out when there are tool calls; otherwise it is required.
    let content = if text.is_empty() && !tool_calls.is_empty() {
        None
    } else {
        Some(ChatContent::Text(Cow::Owned(text)))
    };
    ChatMessage {
        role: "assistant",
        content,
        tool_calls,
        tool_call_id: None,
    }
}

/// A user message's text and images, and any tool results it (or a tool message) carries.
fn push_user_or_tool<'a>(
    message: &'a Message,
    messages: &mut Vec<ChatMessage<'a>>,
    tool_images: &mut Vec<(&'a str, &'a ImageData)>,
) {
    let mut parts: Vec<ChatPart<'a>> = Vec::new();
    let flush = |parts: &mut Vec<ChatPart<'a>>,
                 messages: &mut Vec<ChatMessage<'a>>,
                 tool_images: &mut Vec<(&'a str, &'a ImageData)>| {
        if parts.is_empty() {
            return;
        }
        flush_tool_images(tool_images, messages);
        // A single text part goes as a plain string, which every server accepts.
        let content = match parts.as_slice() {
            [ChatPart::Text { text }] => {
                let text = text.clone();
                parts.clear();
                ChatContent::Text(text)
            }
            _ => ChatContent::Parts(std::mem::take(parts)),
        };
        messages.push(ChatMessage {
            role: "user",
            content: Some(content),
            tool_calls: Vec::new(),
            tool_call_id: None,
        });
    };
    for part in &message.content {
        match part {
            ContentPart::Text { text, .. } if message.role == Role::Tool => {
                if let Some(call_id) = &message.tool_call_id {
                    messages.push(tool_message(call_id, text));
                }
            }
            ContentPart::Text { text, .. } => {
                if !text.is_empty() {
                    parts.push(ChatPart::Text {
                        text: Cow::Borrowed(text),
                    });
                }
            }
            ContentPart::Image(image) => parts.push(ChatPart::ImageUrl {
                image_url: ChatImage {
                    url: image_url(image),
                    detail: image.detail.as_deref(),
                },
            }),
            ContentPart::ToolResult(result) => {
                flush(&mut parts, messages, tool_images);
                messages.push(tool_message(&result.tool_call_id, &result.content));
                if let Some(image) = &result.image {
                    tool_images.push((&result.tool_call_id, image));
                }
            }
            ContentPart::ToolCall(_) | ContentPart::Thinking(_) => {}
        }
    }
    flush(&mut parts, messages, tool_images);
}

fn tool_message<'a>(call_id: &'a str, content: &'a str) -> ChatMessage<'a> {
    ChatMessage {
        role: "tool",
        content: Some(ChatContent::Text(Cow::Borrowed(content))),
        tool_calls: Vec::new(),
        tool_call_id: Some(call_id),
    }
}

/// Tool messages carry text only: images that tool results returned follow them in one
/// user message, each introduced by the call it came from.
fn flush_tool_images<'a>(
    tool_images: &mut Vec<(&'a str, &'a ImageData)>,
    messages: &mut Vec<ChatMessage<'a>>,
) {
    if tool_images.is_empty() {
        return;
    }
    let mut parts = Vec::with_capacity(tool_images.len() * 2);
    for (call_id, image) in tool_images.drain(..) {
        parts.push(ChatPart::Text {
            text: Cow::Owned(format!("image returned by tool call {call_id}:")),
        });
        parts.push(ChatPart::ImageUrl {
            image_url: ChatImage {
                url: image_url(image),
                detail: image.detail.as_deref(),
            },
        });
    }
    messages.push(ChatMessage {
        role: "user",
        content: Some(ChatContent::Parts(parts)),
        tool_calls: Vec::new(),
        tool_call_id: None,
    });
}

#[cfg(test)]
mod tests;
