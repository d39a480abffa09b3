//! The Anthropic Messages wire format (`POST {base}/v1/messages`, streamed): request
//! translation, stream decoding and error classification. Its serde structs never leave
//! this file, and it never retries (the [`Client`](crate::llm::Client) does).
//!
//! # Request translation (unified spec §7.3)
//!
//! * System and developer messages become the `system` blocks, in order.
//! * Tool messages become `tool_result` blocks in a user message (`is_error` kept); messages
//!   of the same wire role in a row are merged into one, so user and assistant strictly
//!   alternate, and inside a merged user message the `tool_result` blocks come first, as the
//!   API requires.
//! * Thinking parts are sent back unchanged with their signatures (`redacted_thinking` with
//!   its `data`). Thinking parts without a signature, or with an OpenAI reasoning item id,
//!   came from another provider and are dropped: Anthropic rejects them.
//! * Images go as `base64` sources (bytes or `data:` URLs) or `url` sources.
//! * `ToolChoice::None` omits the tools (Anthropic has no "none" when tools are present).
//! * `reasoning_effort` turns extended thinking on: `low` 2 048, `medium` 8 192, `high`
//!   24 576 budget tokens (`minimal` 1 024, the API's minimum). `max_tokens` defaults to
//!   8 192, plus the thinking budget when thinking is on; an explicit `max_tokens` that does
//!   not exceed the budget is a configuration error.
//! * `provider_options.anthropic`: `beta_headers` (a list joined into `anthropic-beta`),
//!   `auto_cache` (see below); every other key is merged into the body, replacing what the
//!   adapter computed (`thinking`, `max_tokens`, `metadata`, `top_k`, …). The keys that
//!   carry the translation itself (`model`, `messages`, `system`, `tools`, `stream`) cannot
//!   be replaced and are ignored.
//!
//! # Prompt caching
//!
//! Unless `provider_options.anthropic.auto_cache` is `false`, the adapter marks three
//! `cache_control: {"type": "ephemeral"}` breakpoints (the API allows four): the last
//! `system` block, the last tool, and the last block of the latest user turn (in an agent
//! loop, the newest tool results). System prompt and tools are stable for a session, and the
//! latest user turn moves forward each round, so each request reads the prefix the previous
//! one wrote (Anthropic also looks back about 20 blocks before a breakpoint for an earlier
//! cache entry). When breakpoints are present the `prompt-caching-2024-07-31` beta is
//! requested too.
//!
//! The body serialises deterministically, with its fields in a fixed order: `model`,
//! generation settings, `tools`, `system`, merged provider options, then `messages` last —
//! so two rounds of a growing conversation share a byte-identical prefix up to where the
//! older request had its moving breakpoint.
//!
//! # Streaming
//!
//! `message_start` → `StreamStart`; `content_block_start/delta/stop` → text, reasoning and
//! tool-call segments (an empty `input_json_delta` means `{}`; `redacted_thinking` blocks
//! have no deltas and emit no events); `message_delta` carries the stop reason and
//! cumulative usage (its values replace `message_start`'s); `message_stop` → `Finish`;
//! `ping` is ignored; an `error` event is an `Err` (`overloaded_error` is a retryable
//! server error). A body that ends before `message_stop` is a stream error.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::accumulate::{ResponseBuilder, Slot};
use crate::llm::http::{self, Decoder, EventIter, HttpOptions, HttpRequest, WireFormat};
use crate::llm::{
    ContentPart, FinishKind, FinishReason, ImageData, Message, Provider, Request, Role,
    StreamEvent, ToolCall, ToolChoice, ToolResult, sse,
};

/// The provider id.
const ID: &str = "anthropic";
/// The API version this adapter speaks.
const API_VERSION: &str = "2023-06-01";
/// Requested when the request carries cache breakpoints.
const CACHE_BETA: &str = "prompt-caching-2024-07-31";
/// Default output limit without thinking.
const DEFAULT_MAX_TOKENS: u32 = 8192;

/// The Anthropic Messages API as a [`Provider`] (id `"anthropic"`).
///
/// ```
/// use agentloop::llm::{Client, anthropic::Anthropic};
///
/// let client = Client::new().with_provider(Anthropic::new("sk-ant-…"));
/// # let _ = client;
/// ```
///
/// Its `Debug` output never shows the key.
#[derive(Clone)]
pub struct Anthropic {
    api_key: String,
    base_url: String,
    http: HttpOptions,
    max_tokens_default: u32,
}

impl fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Anthropic")
            .field("api_key", &"[REDACTED]")
            .field("base_url", &self.base_url)
            .field("http", &self.http)
            .field("max_tokens_default", &self.max_tokens_default)
            .finish()
    }
}

impl Anthropic {
    /// A provider for `https://api.anthropic.com` with `api_key`.
    pub fn new(api_key: impl Into<String>) -> Anthropic {
        Anthropic {
            api_key: api_key.into(),
            base_url: "https://api.anthropic.com".to_string(),
            http: HttpOptions::default(),
            max_tokens_default: DEFAULT_MAX_TOKENS,
        }
    }

    /// Sends requests to `{url}/v1/messages` instead (a proxy, a gateway, a test server).
    /// A trailing `/` and a trailing `/v1` are accepted.
    pub fn with_base_url(mut self, url: impl Into<String>) -> Anthropic {
        let url = url.into();
        let trimmed = url.trim_end_matches('/');
        let trimmed = trimmed.strip_suffix("/v1").unwrap_or(trimmed);
        self.base_url = trimmed.to_string();
        self
    }

    /// Replaces the HTTP timeouts and proxy settings.
    pub fn with_http_options(mut self, options: HttpOptions) -> Anthropic {
        self.http = options;
        self
    }

    /// The `max_tokens` sent when a request sets none and thinking is off (default 8 192;
    /// with thinking on, the thinking budget is added to it).
    pub fn with_max_tokens_default(mut self, max_tokens: u32) -> Anthropic {
        self.max_tokens_default = max_tokens.max(1);
        self
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

impl Provider for Anthropic {
    fn id(&self) -> &str {
        ID
    }

    fn open(&self, request: &Request, cancel: &CancelToken) -> Result<EventIter> {
        http::open(self, &self.http, request, cancel)
    }
}

impl WireFormat for Anthropic {
    fn provider_id(&self) -> &str {
        ID
    }

    fn build_request(&self, request: &Request) -> Result<HttpRequest> {
        if self.api_key.trim().is_empty() {
            return Err(config_error("the anthropic api key is empty"));
        }
        if !self.api_key.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(config_error(
                "the anthropic api key contains characters an http header cannot carry",
            ));
        }
        let built = build_body(request, self.max_tokens_default)?;
        let mut headers = vec![
            ("x-api-key".to_string(), self.api_key.clone()),
            ("anthropic-version".to_string(), API_VERSION.to_string()),
            ("content-type".to_string(), "application/json".to_string()),
            ("accept".to_string(), "text/event-stream".to_string()),
        ];
        if !built.betas.is_empty() {
            headers.push(("anthropic-beta".to_string(), built.betas.join(",")));
        }
        Ok(HttpRequest {
            url: format!("{}/v1/messages", self.base_url),
            headers,
            body: built.body,
        })
    }

    fn decoder(&self, _request: &Request) -> Box<dyn Decoder> {
        Box::new(AnthropicDecoder::new(Some(self.api_key.clone())))
    }

    fn classify_error(&self, status: u16, headers: &[(String, String)], body: &str) -> Error {
        let body = http::redact_key(body, &self.api_key);
        http::error_from_status(ID, status, headers, &body)
    }
}

fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Configuration, message).with_provider(ID)
}

/// Decodes a complete Anthropic Messages SSE body into the [`Response`](crate::llm::Response)
/// a stream would have produced, or the error it carried.
///
/// An offline utility for tests, recorded transcripts and benchmarks: no I/O happens.
pub fn decode_stream(body: &[u8]) -> Result<crate::llm::Response> {
    let mut parser = sse::Parser::new();
    let mut decoder = AnthropicDecoder::new(None);
    let mut sse_events = Vec::new();
    let mut events = Vec::new();
    parser.feed(body, &mut sse_events);
    parser.finish(&mut sse_events);
    let mut response = None;
    let mut take_finish = |events: &mut Vec<StreamEvent>| {
        for event in events.drain(..) {
            if let StreamEvent::Finish { response: r, .. } = event {
                response = Some(*r);
            }
        }
    };
    for event in sse_events {
        decoder.event(event, &mut events)?;
        take_finish(&mut events);
    }
    decoder.end(&mut events)?;
    take_finish(&mut events);
    response.ok_or_else(|| Error::new(ErrorKind::Stream, "the stream has no finish event"))
}

// ---------------------------------------------------------------------------------------
// Request body
// ---------------------------------------------------------------------------------------

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    #[serde(flatten)]
    options: Map<String, Value>,
    messages: Vec<WireMessage<'a>>,
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize, Clone, Copy)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Image {
        source: ImageSource<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Cow<'a, Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ToolResultContent<'a>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
}

impl Block<'_> {
    fn is_tool_result(&self) -> bool {
        matches!(self, Block::ToolResult { .. })
    }

    /// Marks this block as a cache breakpoint; `false` for blocks that cannot carry one.
    fn mark_cache(&mut self) -> bool {
        match self {
            Block::Text { cache_control, .. }
            | Block::Image { cache_control, .. }
            | Block::ToolUse { cache_control, .. }
            | Block::ToolResult { cache_control, .. } => {
                *cache_control = Some(EPHEMERAL);
                true
            }
            Block::Thinking { .. } | Block::RedactedThinking { .. } => false,
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum ToolResultContent<'a> {
    Text(&'a str),
    Blocks(Vec<Block<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ImageSource<'a> {
    Base64 {
        media_type: Cow<'a, str>,
        data: Cow<'a, str>,
    },
    Url {
        url: &'a str,
    },
}

/// A serialised body and the beta features it needs.
struct BuiltBody {
    body: Vec<u8>,
    betas: Vec<String>,
}

/// Keys of `provider_options.anthropic` that are adapter settings, not body fields.
const SETTINGS_KEYS: &[&str] = &["beta_headers", "auto_cache"];
/// Body fields the translation owns; options cannot replace them.
const OWNED_KEYS: &[&str] = &["model", "messages", "system", "tools", "stream"];

fn thinking_budget(effort: &str) -> Result<u32> {
    match effort.to_ascii_lowercase().as_str() {
        "minimal" => Ok(1024),
        "low" => Ok(2048),
        "medium" => Ok(8192),
        "high" => Ok(24576),
        other => Err(config_error(format!(
            "unknown reasoning_effort `{other}` for anthropic; use minimal, low, medium or high, \
             or set provider_options.anthropic.thinking"
        ))),
    }
}

fn build_body(request: &Request, max_tokens_default: u32) -> Result<BuiltBody> {
    let options = request.options_for(ID);
    let setting = |key: &str| options.and_then(|o| o.get(key));
    let auto_cache = setting("auto_cache")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let mut betas: Vec<String> = Vec::new();
    match setting("beta_headers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                let Some(beta) = item.as_str() else {
                    return Err(config_error(
                        "provider_options.anthropic.beta_headers must be a list of strings",
                    ));
                };
                push_unique(&mut betas, beta);
            }
        }
        Some(Value::String(beta)) => {
            for beta in beta.split(',') {
                push_unique(&mut betas, beta.trim());
            }
        }
        Some(_) => {
            return Err(config_error(
                "provider_options.anthropic.beta_headers must be a list of strings",
            ));
        }
    }

    // Body fields from options, minus settings and the keys the translation owns.
    let mut merged = Map::new();
    if let Some(options) = options {
        for (key, value) in options {
            if !SETTINGS_KEYS.contains(&key.as_str()) && !OWNED_KEYS.contains(&key.as_str()) {
                merged.insert(key.clone(), value.clone());
            }
        }
    }

    // Thinking and max_tokens.
    let budget = match (&request.reasoning_effort, merged.contains_key("thinking")) {
        (Some(effort), false) => Some(thinking_budget(effort)?),
        _ => None,
    };
    let max_tokens = match (request.max_tokens, budget) {
        (Some(max), Some(budget)) if max <= budget => {
            return Err(config_error(format!(
                "max_tokens ({max}) must exceed the thinking budget ({budget}) of reasoning_effort \
                 `{}`; raise max_tokens or lower the effort",
                request.reasoning_effort.as_deref().unwrap_or_default()
            )));
        }
        (Some(max), _) => max,
        (None, Some(budget)) => max_tokens_default.saturating_add(budget),
        (None, None) => max_tokens_default,
    };
    let thinking =
        budget.map(|budget| serde_json::json!({"type": "enabled", "budget_tokens": budget}));

    // Tools and tool choice.
    let offer_tools = !request.tools.is_empty() && request.tool_choice != Some(ToolChoice::None);
    let mut tools: Vec<WireTool> = if offer_tools {
        request
            .tools
            .iter()
            .map(|t| WireTool {
                name: &t.name,
                description: &t.description,
                input_schema: &t.parameters,
                cache_control: None,
            })
            .collect()
    } else {
        Vec::new()
    };
    let tool_choice = match (&request.tool_choice, offer_tools) {
        (_, false) | (None | Some(ToolChoice::Auto), true) => None,
        (Some(ToolChoice::Required), true) => Some(serde_json::json!({"type": "any"})),
        (Some(ToolChoice::Named(name)), true) => {
            Some(serde_json::json!({"type": "tool", "name": name}))
        }
        (Some(ToolChoice::None), true) => None,
    };

    let (mut system, mut messages) = translate_messages(&request.messages);

    let mut cached = false;
    if auto_cache {
        if let Some(last) = system.last_mut() {
            cached |= last.mark_cache();
        }
        if let Some(last) = tools.last_mut() {
            last.cache_control = Some(EPHEMERAL);
            cached = true;
        }
        if let Some(turn) = messages.iter_mut().rev().find(|m| m.role == "user") {
            if let Some(block) = turn
                .content
                .iter_mut()
                .rev()
                .find(|b| !matches!(b, Block::Thinking { .. } | Block::RedactedThinking { .. }))
            {
                cached |= block.mark_cache();
            }
        }
    }
    if cached {
        push_unique(&mut betas, CACHE_BETA);
    }

    let body = Body {
        model: &request.model,
        max_tokens: (!merged.contains_key("max_tokens")).then_some(max_tokens),
        stream: true,
        temperature: request.temperature,
        top_p: request.top_p,
        stop_sequences: &request.stop_sequences,
        thinking,
        tool_choice,
        tools,
        system,
        options: merged,
        messages,
    };
    let body = serde_json::to_vec(&body)
        .map_err(|e| config_error(format!("the request cannot be serialised: {e}")))?;
    Ok(BuiltBody { body, betas })
}

fn push_unique(list: &mut Vec<String>, item: &str) {
    if !item.is_empty() && !list.iter().any(|b| b == item) {
        list.push(item.to_string());
    }
}

/// Splits the conversation into `system` blocks and alternating user/assistant messages.
fn translate_messages(messages: &[Message]) -> (Vec<Block<'_>>, Vec<WireMessage<'_>>) {
    let mut system = Vec::new();
    let mut out: Vec<WireMessage> = Vec::new();
    for message in messages {
        let role = match message.role {
            Role::System | Role::Developer => {
                for part in &message.content {
                    if let ContentPart::Text { text, .. } = part {
                        if !text.is_empty() {
                            system.push(Block::Text {
                                text,
                                cache_control: None,
                            });
                        }
                    }
                }
                continue;
            }
            Role::User | Role::Tool => "user",
            Role::Assistant => "assistant",
        };
        let blocks: Vec<Block> = message
            .content
            .iter()
            .filter_map(|part| translate_part(part, role))
            .collect();
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => out.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    for message in &mut out {
        if message.role == "user" {
            // tool_result blocks must lead a user message; keep both groups' order.
            let (mut results, rest): (Vec<Block>, Vec<Block>) =
                std::mem::take(&mut message.content)
                    .into_iter()
                    .partition(Block::is_tool_result);
            results.extend(rest);
            message.content = results;
        }
    }
    (system, out)
}

fn translate_part<'a>(part: &'a ContentPart, role: &str) -> Option<Block<'a>> {
    match part {
        ContentPart::Text { text, .. } => (!text.is_empty()).then_some(Block::Text {
            text,
            cache_control: None,
        }),
        ContentPart::Image(image) => Some(Block::Image {
            source: image_source(image)?,
            cache_control: None,
        }),
        ContentPart::ToolCall(call) if role == "assistant" => Some(tool_use(call)),
        ContentPart::ToolCall(_) => None,
        ContentPart::ToolResult(result) => Some(tool_result(result)),
        ContentPart::Thinking(t) if role == "assistant" && t.id.is_none() => {
            let signature = t.signature.as_deref().filter(|s| !s.is_empty())?;
            Some(if t.redacted {
                Block::RedactedThinking { data: signature }
            } else {
                Block::Thinking {
                    thinking: &t.text,
                    signature,
                }
            })
        }
        ContentPart::Thinking(_) => None,
    }
}

fn tool_use(call: &ToolCall) -> Block<'_> {
    let input = match &call.arguments {
        Value::Object(_) => Cow::Borrowed(&call.arguments),
        // Arguments that were not a JSON object (the model sent invalid JSON, or a custom
        // tool's raw text): the API takes only objects, so send the object they parse to,
        // or an empty one; the tool result already told the model what was wrong.
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(value @ Value::Object(_)) => Cow::Owned(value),
            _ => Cow::Owned(Value::Object(Map::new())),
        },
        _ => Cow::Owned(Value::Object(Map::new())),
    };
    Block::ToolUse {
        id: &call.id,
        name: &call.name,
        input,
        cache_control: None,
    }
}

fn tool_result(result: &ToolResult) -> Block<'_> {
    let content = match &result.image {
        None => ToolResultContent::Text(&result.content),
        Some(image) => {
            let mut blocks = Vec::with_capacity(2);
            if !result.content.is_empty() {
                blocks.push(Block::Text {
                    text: &result.content,
                    cache_control: None,
                });
            }
            if let Some(source) = image_source(image) {
                blocks.push(Block::Image {
                    source,
                    cache_control: None,
                });
            }
            ToolResultContent::Blocks(blocks)
        }
    };
    Block::ToolResult {
        tool_use_id: &result.tool_call_id,
        content,
        is_error: result.is_error,
        cache_control: None,
    }
}

fn image_source(image: &ImageData) -> Option<ImageSource<'_>> {
    if image.data.is_some() {
        return Some(ImageSource::Base64 {
            media_type: Cow::Borrowed(image.media_type_or_default()),
            data: Cow::Owned(image.base64()),
        });
    }
    let url = image.url.as_deref()?;
    if let Some(rest) = url.strip_prefix("data:") {
        // data:<mime>;base64,<payload>
        let (meta, payload) = rest.split_once(',')?;
        let media_type = meta.strip_suffix(";base64")?;
        return Some(ImageSource::Base64 {
            media_type: Cow::Borrowed(if media_type.is_empty() {
                image.media_type_or_default()
            } else {
                media_type
            }),
            data: Cow::Borrowed(payload),
        });
    }
    Some(ImageSource::Url { url })
}

// ---------------------------------------------------------------------------------------
// Stream decoding
// ---------------------------------------------------------------------------------------

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
    #[serde(default)]
    output_tokens_details: Option<WireOutputDetails>,
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

struct AnthropicDecoder {
    builder: ResponseBuilder,
    blocks: HashMap<usize, (BlockKind, Option<Slot>)>,
    /// The key, to redact from in-stream error events that would echo it.
    api_key: Option<String>,
}

impl AnthropicDecoder {
    fn new(api_key: Option<String>) -> AnthropicDecoder {
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
            http::kind_from_message(&message).unwrap_or(ErrorKind::InvalidRequest)
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
                let data = http::redact_key(&event.data, key);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolDefinition;

    fn body_json(request: &Request) -> Value {
        serde_json::from_slice(&build_body(request, DEFAULT_MAX_TOKENS).unwrap().body).unwrap()
    }

    #[test]
    fn roles_alternate_and_tool_results_lead_user_messages() {
        let call = ToolCall::new("t1", "shell", serde_json::json!({"command": "ls"}));
        let request = Request::new(
            "m",
            vec![
                Message::system("be brief"),
                Message::user("hi"),
                Message::user("there"),
                Message {
                    role: Role::Assistant,
                    content: vec![ContentPart::text("ok"), ContentPart::ToolCall(call.clone())],
                    name: None,
                    tool_call_id: None,
                },
                Message::user("also this"),
                Message::tool_result(ToolResult::for_call(&call, "boom", true)),
            ],
        );
        let body = body_json(&request);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[0]["content"].as_array().unwrap().len(), 2);
        let last = messages[2]["content"].as_array().unwrap();
        assert_eq!(last[0]["type"], "tool_result");
        assert_eq!(last[0]["is_error"], true);
        assert_eq!(last[1]["text"], "also this");
        assert_eq!(body["system"][0]["text"], "be brief");
    }

    #[test]
    fn effort_enables_thinking_with_room_for_the_answer() {
        let mut request = Request::new("m", vec![Message::user("x")]);
        request.reasoning_effort = Some("low".into());
        let body = body_json(&request);
        assert_eq!(body["thinking"]["budget_tokens"], 2048);
        assert_eq!(body["max_tokens"], 2048 + DEFAULT_MAX_TOKENS);
        request.max_tokens = Some(1000);
        let err = build_body(&request, DEFAULT_MAX_TOKENS).err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Configuration);
        request.reasoning_effort = Some("extreme".into());
        assert!(build_body(&request, DEFAULT_MAX_TOKENS).is_err());
    }

    #[test]
    fn tool_choice_none_omits_tools_and_options_merge() {
        let mut request = Request::new("m", vec![Message::user("x")]);
        request.tools = vec![ToolDefinition {
            name: "f".into(),
            description: "d".into(),
            parameters: serde_json::json!({"type": "object"}),
            freeform: None,
        }];
        request.tool_choice = Some(ToolChoice::None);
        request.provider_options = Some(serde_json::json!({"anthropic": {
            "top_k": 5, "model": "ignored", "auto_cache": false, "beta_headers": ["b1", "b1"]
        }}));
        let built = build_body(&request, DEFAULT_MAX_TOKENS).unwrap();
        let body: Value = serde_json::from_slice(&built.body).unwrap();
        assert!(body.get("tools").is_none());
        assert!(body.get("tool_choice").is_none());
        assert_eq!(body["top_k"], 5);
        assert_eq!(body["model"], "m");
        assert_eq!(built.betas, ["b1"]);
        assert!(
            !String::from_utf8(built.body)
                .unwrap()
                .contains("cache_control")
        );
    }

    #[test]
    fn images_become_base64_or_url_sources() {
        let mut message = Message::user("look");
        message
            .content
            .push(ContentPart::Image(ImageData::from_bytes(
                vec![1, 2, 3],
                "image/gif",
            )));
        message.content.push(ContentPart::Image(ImageData {
            url: Some("https://x.test/a.png".into()),
            data: None,
            media_type: None,
            detail: None,
        }));
        message.content.push(ContentPart::Image(ImageData {
            url: Some("data:image/jpeg;base64,AAEC".into()),
            data: None,
            media_type: None,
            detail: None,
        }));
        let body = body_json(&Request::new("m", vec![message]));
        let content = &body["messages"][0]["content"];
        assert_eq!(content[1]["source"]["type"], "base64");
        assert_eq!(content[1]["source"]["media_type"], "image/gif");
        assert_eq!(content[1]["source"]["data"], "AQID");
        assert_eq!(content[2]["source"]["url"], "https://x.test/a.png");
        assert_eq!(content[3]["source"]["media_type"], "image/jpeg");
        assert_eq!(content[3]["source"]["data"], "AAEC");
    }

    #[test]
    fn debug_hides_the_key() {
        let shown = format!("{:?}", Anthropic::new("sk-ant-secret-key-123"));
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("[REDACTED]"));
    }
}
