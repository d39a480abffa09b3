//! The Anthropic Messages wire format (`POST {base}/v1/messages`, streamed): request
//! translation (`request.rs`), stream decoding (`stream.rs`) and error classification. Its
//! serde structs never leave this module, and it never retries (the
//! [`Client`](crate::llm::Client) does).
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
//!   8 192, plus the thinking budget when thinking is on (also a `thinking` object given in
//!   provider options); an explicit `max_tokens` that does not exceed the budget of
//!   `reasoning_effort` is a configuration error.
//! * `provider_options.anthropic`: `beta_headers` (a list joined into `anthropic-beta`),
//!   `auto_cache` (see below); every other key is merged into the body, replacing what the
//!   adapter computed (`thinking`, `max_tokens`, `metadata`, `top_k`, …). The keys that
//!   carry the translation itself (`model`, `messages`, `system`, `tools`, `stream`) cannot
//!   be replaced and are ignored.
//!
//! # Prompt caching
//!
//! Unless `provider_options.anthropic.auto_cache` is `false`, the adapter marks four
//! `cache_control: {"type": "ephemeral"}` breakpoints (the most the API allows): the last
//! `system` block, the last tool, and the last block of each of the two latest user turns
//! (in an agent loop, the newest tool results and the ones before). System prompt and tools
//! are stable for a session; the latest user turn moves forward each round, and the one
//! before it sits exactly where the previous request's latest breakpoint sat, so each
//! request reads the whole prefix the previous one wrote even when a round adds more than
//! the 20 or so blocks the API looks back from a breakpoint. [`Request::cache_ttl_secs`]
//! sets every breakpoint's `ttl` (`5m` for 300, `1h` for 3600, which also requests the
//! `extended-cache-ttl-2025-04-11` beta; another value is a configuration error). When
//! breakpoints are present the `prompt-caching-2024-07-31` beta is requested too.
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

mod request;
mod stream;

use std::fmt;

use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::http::{self, EventIter, HttpOptions};
use crate::llm::status;
use crate::llm::wire::decode_body;
use crate::llm::wire::{Decoder, HttpRequest, WireFormat};
use crate::llm::{Provider, Request};
use request::build_body;
use stream::AnthropicDecoder;

/// The provider id.
const ID: &str = "anthropic";
/// The API version this adapter speaks.
const API_VERSION: &str = "2023-06-01";
/// Requested when the request carries cache breakpoints.
const CACHE_BETA: &str = "prompt-caching-2024-07-31";
/// Requested as well when they ask for the 1-hour TTL.
const LONG_CACHE_BETA: &str = "extended-cache-ttl-2025-04-11";
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
    /// Idle keep-alive connections for the next requests (shared by clones).
    connections: http::Connections,
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
            connections: http::Connections::default(),
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
        self.connections = http::Connections::default();
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

    fn base_url(&self) -> Option<&str> {
        Some(self.base_url())
    }

    fn open(&self, request: &Request, cancel: &CancelToken) -> Result<EventIter> {
        http::open(self, &self.http, &self.connections, request, cancel)
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
        let body = status::redact_key(body, &self.api_key);
        status::error_from_status(ID, status, headers, &body)
    }
}

fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Configuration, message).with_provider(ID)
}

/// Decodes a complete Anthropic Messages SSE body into the [`Response`](crate::llm::Response)
/// a stream would have produced, or the error it carried.
///
/// An offline utility for tests, recorded transcripts and benchmarks: no I/O happens.
pub(crate) fn decode_stream(body: &[u8]) -> Result<crate::llm::Response> {
    decode_body(&mut AnthropicDecoder::new(None), body)
}

#[cfg(test)]
mod tests;
