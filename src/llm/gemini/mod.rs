//! The Gemini API wire format (`POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse`):
//! request bodies, the SSE decoder and error classification. It never retries and never
//! reads the environment. The key travels in the `x-goog-api-key` header, never in the URL.
//!
//! Translation (unified spec §7.3):
//!
//! | unified | Gemini |
//! |---|---|
//! | system and developer messages | `systemInstruction`, joined with a blank line |
//! | user and tool messages | `user` contents; assistant messages are `model` contents; consecutive contents of one role are merged (parallel function responses must share one content) |
//! | text, images | `text`; `inlineData` (bytes or a `data:` URL) or `fileData` (other URLs) |
//! | [`ToolCall`](crate::llm::ToolCall) | `functionCall {name, args}` (ids are ours, so they are not sent) |
//! | [`ToolResult`](crate::llm::ToolResult) | `functionResponse {name, response: {result}}`, or `{error}` when `is_error`; the name is the result's own or that of the call with its id earlier in the conversation; an image follows as `inlineData` |
//! | thought signatures | sent back as `thoughtSignature` on the same part they came on: a text part (also an empty one) or a function call; for models after Gemini 2, the first function call of a model content of the current turn that has no signature of Gemini's own (another provider's calls, after a fallback or a resume) gets Google's documented `skip_thought_signature_validator`, since Gemini 3 refuses unsigned calls there |
//! | thinking | not sent: Gemini needs no thought summaries back, and a thinking part's signature may be another provider's |
//! | [`ToolDefinition`](crate::llm::ToolDefinition) | `functionDeclarations`, with the JSON Schema reduced to the subset Gemini accepts (see below) |
//! | tool choice | `toolConfig.functionCallingConfig.mode` `AUTO` / `NONE` / `ANY` (+ `allowedFunctionNames` for a named tool) |
//! | `reasoning_effort` | `thinkingConfig` with `includeThoughts: true`: Gemini 2.x models take a `thinkingBudget` (minimal 512, low 1024, medium 8192, high 24576 tokens, or a number given as the effort); later models take a `thinkingLevel` (the effort as given, except that `-pro` models, which know only low and high, get `low` for minimal and `high` for medium) |
//! | `max_tokens`, `temperature`, `top_p`, `stop_sequences` | `generationConfig` |
//! | `provider_options.gemini` | merged into the body last (`safetySettings`, `cachedContent`, more `generationConfig`, …) |
//!
//! The schema subset: `type` (a `["string", "null"]` pair becomes `nullable`), `format`
//! (`enum`/`date-time` on strings, `int32`/`int64`/`float`/`double` on numbers), `title`,
//! `description`, `nullable`, `enum` (strings only), `properties`, `required` (names that
//! exist), `items`, `anyOf` (also from `oneOf`), `minItems`/`maxItems`,
//! `minProperties`/`maxProperties`, `minLength`/`maxLength`, `pattern`,
//! `minimum`/`maximum`, `propertyOrdering`; `const` becomes a one-value `enum`. Everything
//! else (`$schema`, `additionalProperties`, `$ref`, `default`, `examples`, …) is dropped, and
//! a function without properties is declared without `parameters`.
//!
//! Streaming: chunks arrive CRLF-framed with no terminator; each carries the cumulative
//! `usageMetadata` (the last one wins) and `finishReason` comes on the last candidate chunk.
//! Text parts become text, `thought: true` parts reasoning, `functionCall` parts whole tool
//! calls with a fresh id (`call_…`, unique in the process). A part that carries a
//! `thoughtSignature` becomes a content part of its own with the signature on it, so that
//! a signed text or function-call part goes back exactly as it came. `STOP` with function calls finishes as
//! `tool_calls`; `MAX_TOKENS` as `length`; `SAFETY`, `RECITATION` and the other block
//! reasons as `content_filter`, as does a prompt blocked before any candidate. A stream that
//! ends without a `finishReason` is a [`Stream`](ErrorKind::Stream) error. An `{"error": …}`
//! chunk is an error.
//!
//! Errors: the body is JSON even when the content type says `text/event-stream`; the gRPC
//! `status` decides the kind (unified spec §6.4: `RESOURCE_EXHAUSTED` is a rate limit,
//! `INVALID_ARGUMENT` an invalid request, …), except that an `API_KEY_INVALID` reason is an
//! authentication error and an over-long prompt a context-length error. A
//! `RetryInfo.retryDelay` (`"34.4s"`) becomes the error's `retry_after` when no header gives
//! one.

mod request;
mod stream;

use std::fmt;
use std::time::Duration;

use serde_json::Value;

use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result, scrub_secrets};
use crate::llm::http::{self, EventIter};
use crate::llm::status;
use crate::llm::wire::{Decoder, HttpRequest, WireFormat};
use crate::llm::wire::{check_header_value, decode_body};
use crate::llm::{HttpOptions, Provider, Request, Response};

pub(crate) use stream::GeminiDecoder;

/// The provider id of [`Gemini`].
pub const ID: &str = "gemini";

/// The default base URL of the Gemini API.
pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";

/// The Gemini API as a provider (id `"gemini"`).
///
/// ```no_run
/// use agentloop::llm::{gemini::Gemini, Client, Message, Request};
/// let client = Client::new().with_provider(Gemini::new("AIza…"));
/// let response = client.complete(&Request::new("gemini-2.5-flash", vec![Message::user("hello")]))?;
/// println!("{}", response.text());
/// # Ok::<(), agentloop::Error>(())
/// ```
#[derive(Clone)]
pub struct Gemini {
    api_key: String,
    base_url: String,
    http: HttpOptions,
    /// Idle keep-alive connections for the next requests (shared by clones).
    connections: http::Connections,
}

impl fmt::Debug for Gemini {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gemini")
            .field("api_key", &"[REDACTED]")
            .field("base_url", &self.base_url)
            .field("http", &self.http)
            .finish()
    }
}

impl Gemini {
    /// A provider with `api_key`, talking to [`DEFAULT_BASE_URL`].
    pub fn new(api_key: impl Into<String>) -> Gemini {
        Gemini {
            api_key: api_key.into(),
            base_url: DEFAULT_BASE_URL.to_string(),
            http: HttpOptions::default(),
            connections: http::Connections::default(),
        }
    }

    /// Talks to `base_url` instead (the part before `/v1beta`; a trailing `/v1beta` is
    /// accepted too).
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Gemini {
        let url = base_url.into();
        let trimmed = url.trim_end_matches('/');
        self.base_url = trimmed
            .strip_suffix("/v1beta")
            .unwrap_or(trimmed)
            .to_string();
        self
    }

    /// Replaces the timeouts and transport settings.
    pub fn with_http_options(mut self, http: HttpOptions) -> Gemini {
        self.http = http;
        self.connections = http::Connections::default();
        self
    }

    /// The base URL requests go to.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

impl Provider for Gemini {
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

impl WireFormat for Gemini {
    fn provider_id(&self) -> &str {
        ID
    }

    fn build_request(&self, request: &Request) -> Result<HttpRequest> {
        if self.api_key.trim().is_empty() {
            return Err(
                Error::new(ErrorKind::Configuration, "the gemini api key is empty")
                    .with_provider(ID),
            );
        }
        check_header_value(ID, "api key", &self.api_key)?;
        let model = request
            .model
            .strip_prefix("models/")
            .unwrap_or(&request.model);
        let url_safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        if model.is_empty() || !model.chars().all(url_safe) {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!("`{model}` is not a gemini model name (letters, digits, `-`, `.`, `_`)"),
            )
            .with_provider(ID));
        }
        Ok(HttpRequest {
            url: format!(
                "{}/v1beta/models/{model}:streamGenerateContent?alt=sse",
                self.base_url
            ),
            headers: vec![
                ("x-goog-api-key".to_string(), self.api_key.clone()),
                ("content-type".to_string(), "application/json".to_string()),
                ("accept".to_string(), "text/event-stream".to_string()),
            ],
            body: request::request_body(request)?,
        })
    }

    fn decoder(&self, _request: &Request) -> Box<dyn Decoder> {
        Box::new(GeminiDecoder::new().with_api_key(Some(self.api_key.clone())))
    }

    fn classify_error(&self, status: u16, headers: &[(String, String)], body: &str) -> Error {
        // A server that echoes the key must not put it in an error, whatever its shape.
        let body = status::redact_key(body, &self.api_key);
        gemini_error(Some(status), headers, &body)
    }
}

/// Decodes a complete Gemini SSE body into the [`Response`] a stream would have produced,
/// or the error it carried.
///
/// An offline utility for tests, recorded transcripts and benchmarks: no I/O happens.
pub(crate) fn decode_stream(body: &[u8]) -> Result<Response> {
    decode_body(&mut GeminiDecoder::new(), body)
}

/// The error for a Gemini error body (`{"error": {code, message, status, details}}`, or
/// that object in a one-element array). `status` is `None` for an error chunk inside a
/// 200 stream.
pub(crate) fn gemini_error(status: Option<u16>, headers: &[(String, String)], body: &str) -> Error {
    let value: Value = serde_json::from_str(body.trim()).unwrap_or(Value::Null);
    let value = match &value {
        Value::Array(items) if items.len() == 1 => &items[0],
        other => other,
    };
    let error = value.get("error").unwrap_or(&Value::Null);
    let grpc = error.get("status").and_then(Value::as_str);
    let message = match error.get("message").and_then(Value::as_str) {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => status::message_from_body(body, status),
    };
    let details = error
        .get("details")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let detail = |kind: &str| {
        details.iter().find(|d| {
            d.get("@type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with(kind))
        })
    };
    let reason = detail("google.rpc.ErrorInfo")
        .and_then(|d| d.get("reason"))
        .and_then(Value::as_str);
    let kind = classify(status, grpc, reason, &message);
    let mut err = Error::new(kind, scrub_secrets(&message)).with_provider(ID);
    if let Some(status) = status {
        err = err.with_status(status);
    }
    let numeric = error
        .get("code")
        .and_then(Value::as_u64)
        .map(|c| c.to_string());
    if let Some(code) = grpc.map(str::to_string).or(numeric) {
        err = err.with_code(code);
    }
    let delay = detail("google.rpc.RetryInfo")
        .and_then(|d| d.get("retryDelay"))
        .and_then(Value::as_str)
        .and_then(parse_duration);
    if let Some(wait) = status::retry_after_from_headers(headers).or(delay) {
        err = err.with_retry_after(wait);
    }
    if !body.trim().is_empty() {
        err = err.with_body(body);
    }
    err
}

fn classify(
    status: Option<u16>,
    grpc: Option<&str>,
    reason: Option<&str>,
    message: &str,
) -> ErrorKind {
    if matches!(reason, Some("API_KEY_INVALID" | "API_KEY_EXPIRED")) {
        return ErrorKind::Authentication;
    }
    let lower = message.to_ascii_lowercase();
    if status::kind_from_message(message) == Some(ErrorKind::ContextLength)
        || lower.contains("exceeds the maximum number of tokens")
    {
        return ErrorKind::ContextLength;
    }
    match grpc {
        Some("NOT_FOUND") => ErrorKind::NotFound,
        Some("INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE") => {
            ErrorKind::InvalidRequest
        }
        Some("UNAUTHENTICATED") => ErrorKind::Authentication,
        Some("PERMISSION_DENIED") => ErrorKind::AccessDenied,
        Some("RESOURCE_EXHAUSTED") => ErrorKind::RateLimited,
        Some("UNAVAILABLE" | "INTERNAL" | "UNKNOWN" | "ABORTED" | "DATA_LOSS") => ErrorKind::Server,
        Some("DEADLINE_EXCEEDED") => ErrorKind::Timeout,
        _ => match status {
            Some(status) => status::classify(status, message),
            None => status::kind_from_message(message).unwrap_or(ErrorKind::Server),
        },
    }
}

/// A protobuf JSON duration (`"34.4s"`, `"2s"`).
fn parse_duration(text: &str) -> Option<Duration> {
    let secs: f64 = text.trim().strip_suffix('s')?.parse().ok()?;
    (0.0..1e12)
        .contains(&secs)
        .then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests;
