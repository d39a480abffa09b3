//! HTTP plumbing over ureq, shared by every wire format; it never retries and never
//! knows a provider's JSON.
//!
//! One `ureq::Agent` per request, so that a [`CancelToken`] callback can call
//! `Agent::shutdown()` from another thread and end a blocked read at once (shutting an agent
//! down kills every clone of it, so agents are never shared between requests). Statuses are
//! not errors to ureq (`http_status_as_error(false)`): this module reads the body of a failed
//! response (ureq decodes gzip) and lets the wire format classify it. Connect,
//! time-to-first-byte and stream-stall (`timeout_per_read`) timeouts come from
//! [`HttpOptions`].
//!
//! A wire format (one file per format in `llm/`) implements [`WireFormat`] (request building
//! and error classification) and [`Decoder`] (SSE events to [`StreamEvent`]s, usually with
//! the shared `accumulate::ResponseBuilder`); [`open`] does everything between: send, status
//! check, body bytes → [`sse::Parser`] → decoder → events. The error helpers at the end of
//! this file ([`error_from_status`], [`kind_for_status`], [`kind_from_message`],
//! [`parse_retry_after`]) implement the unified spec's §6.4–6.5 once for every format.

use std::collections::VecDeque;
use std::io::Read;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cancel::{CancelGuard, CancelToken};
use crate::error::{Error, ErrorKind, Result, scrub_secrets};
use crate::llm::sse;
use crate::llm::{Request, StreamEvent};

/// Timeouts and transport settings of an HTTP provider.
///
/// ```
/// use agentloop::llm::HttpOptions;
/// use std::time::Duration;
///
/// let options = HttpOptions::default()
///     .with_stall_timeout(Duration::from_secs(60))
///     .with_env_proxy(false);
/// assert_eq!(options.connect_timeout, Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HttpOptions {
    /// TCP (and TLS) connect timeout. ureq cannot interrupt a connect in progress, so keep
    /// it modest. Default 10 s.
    pub connect_timeout: Duration,
    /// From sending the request to receiving the response headers. Default 120 s.
    pub first_byte_timeout: Duration,
    /// Longest silence allowed between two reads of the response. It applies to every read,
    /// so a server silent for longer than this before its headers also times out: the
    /// effective time to first byte is the smaller of the two. Default 120 s.
    pub stall_timeout: Duration,
    /// Whether to honour `HTTPS_PROXY`/`ALL_PROXY`/`NO_PROXY` from the environment (ureq
    /// reads them). Default `true`; turn it off for loopback servers.
    pub use_env_proxy: bool,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(120),
            stall_timeout: Duration::from_secs(120),
            use_env_proxy: true,
        }
    }
}

impl HttpOptions {
    /// Sets [`connect_timeout`](Self::connect_timeout).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> HttpOptions {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`first_byte_timeout`](Self::first_byte_timeout).
    pub fn with_first_byte_timeout(mut self, timeout: Duration) -> HttpOptions {
        self.first_byte_timeout = timeout;
        self
    }

    /// Sets [`stall_timeout`](Self::stall_timeout).
    pub fn with_stall_timeout(mut self, timeout: Duration) -> HttpOptions {
        self.stall_timeout = timeout;
        self
    }

    /// Sets [`use_env_proxy`](Self::use_env_proxy).
    pub fn with_env_proxy(mut self, use_env_proxy: bool) -> HttpOptions {
        self.use_env_proxy = use_env_proxy;
        self
    }

    fn agent(&self) -> ureq::Agent {
        let mut builder = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(self.connect_timeout))
            .timeout_recv_response(Some(self.first_byte_timeout))
            .timeout_per_read(Some(self.stall_timeout))
            .user_agent(concat!("agentloop/", env!("CARGO_PKG_VERSION")))
            .max_redirects(0);
        if !self.use_env_proxy {
            builder = builder.proxy(None);
        }
        builder.build().new_agent()
    }
}

/// A request ready to send: everything a wire format decides.
pub(crate) struct HttpRequest {
    /// Full URL. May carry a key in its query (Gemini): never put it in an error unscrubbed.
    pub(crate) url: String,
    /// Headers, including authentication. Never printed or logged.
    pub(crate) headers: Vec<(String, String)>,
    /// JSON body.
    pub(crate) body: Vec<u8>,
}

/// What a wire format knows: how to build its request and how to read its errors.
pub(crate) trait WireFormat: Send + Sync {
    /// The provider id used in errors and responses (`"anthropic"`).
    fn provider_id(&self) -> &str;
    /// Builds the streaming HTTP request for `request`.
    fn build_request(&self, request: &Request) -> Result<HttpRequest>;
    /// A fresh decoder for one response stream.
    fn decoder(&self, request: &Request) -> Box<dyn Decoder>;
    /// Classifies a non-2xx response (status, lower-cased headers, body text).
    fn classify_error(&self, status: u16, headers: &[(String, String)], body: &str) -> Error;
}

/// Turns one provider's SSE events into [`StreamEvent`]s and accumulates the response.
pub(crate) trait Decoder: Send {
    /// Handles one SSE event. An in-stream error event returns `Err`.
    fn event(&mut self, event: sse::Event, out: &mut Vec<StreamEvent>) -> Result<()>;
    /// The body ended. Emits the final `Finish` (or returns a stream error if the stream
    /// ended before the provider's terminal event where it has one).
    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<()>;
}

/// The boxed event iterator a [`Provider`](crate::llm::Provider) returns.
pub(crate) type EventIter = Box<dyn Iterator<Item = Result<StreamEvent>> + Send>;

/// How much of a failed response's body is read for classification.
const ERROR_BODY_LIMIT: u64 = 64 * 1024;

/// Size of one body read.
const READ_BUFFER: usize = 16 * 1024;

/// Sends `request` in `wire`'s format and returns its event stream once the response
/// headers have arrived with a 2xx status; the `Provider::open` of every HTTP wire format.
///
/// Never retries. Returns [`ErrorKind::Aborted`] as soon as `cancel` fires, also while
/// blocked on the network.
pub(crate) fn open(
    wire: &dyn WireFormat,
    options: &HttpOptions,
    request: &Request,
    cancel: &CancelToken,
) -> Result<EventIter> {
    let provider = wire.provider_id().to_string();
    let http = wire.build_request(request)?;
    if cancel.is_cancelled() {
        return Err(aborted(&provider));
    }
    let agent = options.agent();
    let guard = {
        let agent = agent.clone();
        cancel.on_cancel(move || agent.shutdown())
    };
    let mut builder = agent.post(&http.url);
    for (name, value) in &http.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let response = match builder.send(&http.body[..]) {
        Ok(response) => response,
        Err(err) => return Err(transport_error(&provider, err, cancel, Phase::Headers)),
    };
    let status = response.status().as_u16();
    if !(200..300).contains(&status) {
        let headers = lowercase_headers(response.headers());
        let mut body = String::new();
        let read = response
            .into_body()
            .into_with_config()
            .limit(ERROR_BODY_LIMIT)
            .lossy_utf8(true)
            .reader()
            .read_to_string(&mut body);
        if cancel.is_cancelled() {
            return Err(aborted(&provider));
        }
        if let Err(err) = read {
            if body.is_empty() {
                return Err(transport_error(&provider, err.into(), cancel, Phase::Body));
            }
        }
        return Err(wire.classify_error(status, &headers, &body));
    }
    let reader = response.into_body().into_reader();
    Ok(Box::new(HttpEventStream {
        provider,
        reader: Some(reader),
        decoder: wire.decoder(request),
        parser: sse::Parser::new(),
        sse_events: Vec::new(),
        events: Vec::new(),
        pending: VecDeque::new(),
        buffer: vec![0; READ_BUFFER],
        cancel: cancel.clone(),
        _guard: guard,
        failed: None,
        done: false,
    }))
}

/// The live body of a streaming response, decoded as it is read.
struct HttpEventStream {
    provider: String,
    reader: Option<ureq::BodyReader<'static>>,
    decoder: Box<dyn Decoder>,
    parser: sse::Parser,
    sse_events: Vec<sse::Event>,
    events: Vec<StreamEvent>,
    pending: VecDeque<StreamEvent>,
    buffer: Vec<u8>,
    cancel: CancelToken,
    /// Shuts the agent down on cancel for as long as the stream lives.
    _guard: CancelGuard,
    /// The error that ended the stream, delivered after the pending events.
    failed: Option<Error>,
    done: bool,
}

impl HttpEventStream {
    /// Reads until at least one event is pending or the stream is over. Events decoded
    /// before a failure are kept pending, so the caller receives them before the error.
    fn fill(&mut self) -> Result<()> {
        while self.pending.is_empty() && !self.done {
            if self.cancel.is_cancelled() {
                return Err(aborted(&self.provider));
            }
            let Some(reader) = self.reader.as_mut() else {
                self.done = true;
                break;
            };
            let n = match reader.read(&mut self.buffer) {
                Ok(n) => n,
                Err(err) => {
                    return Err(transport_error(
                        &self.provider,
                        ureq::Error::from(err),
                        &self.cancel,
                        Phase::Body,
                    ));
                }
            };
            if n == 0 {
                self.reader = None;
                self.done = true;
                self.parser.finish(&mut self.sse_events);
            } else {
                self.parser.feed(&self.buffer[..n], &mut self.sse_events);
            }
            let mut result = Ok(());
            for event in self.sse_events.drain(..) {
                result = self.decoder.event(event, &mut self.events);
                if result.is_err() {
                    break;
                }
            }
            if result.is_ok() && self.done {
                result = self.decoder.end(&mut self.events);
            }
            self.pending.extend(self.events.drain(..));
            result?;
        }
        Ok(())
    }
}

impl Iterator for HttpEventStream {
    type Item = Result<StreamEvent>;

    fn next(&mut self) -> Option<Result<StreamEvent>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if let Some(err) = self.failed.take() {
                return Some(Err(err));
            }
            if self.done {
                return None;
            }
            if let Err(err) = self.fill() {
                // An error ends the stream: drop the connection, deliver what was decoded
                // before it, then the error, then nothing.
                self.done = true;
                self.reader = None;
                self.sse_events.clear();
                self.failed = Some(err);
            }
        }
    }
}

/// Where a transport error happened, for its message and kind.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    /// Connecting, sending, or waiting for the response headers.
    Headers,
    /// Reading the body.
    Body,
}

fn aborted(provider: &str) -> Error {
    Error::new(ErrorKind::Aborted, "the request was cancelled").with_provider(provider)
}

/// Maps a ureq error to ours. Never includes the URL (it may carry a key) or a header.
fn transport_error(provider: &str, err: ureq::Error, cancel: &CancelToken, phase: Phase) -> Error {
    if cancel.is_cancelled() {
        return aborted(provider);
    }
    use ureq::Timeout;
    let (kind, message) = match &err {
        ureq::Error::Timeout(Timeout::Connect | Timeout::Resolve) => (
            ErrorKind::Timeout,
            "connecting to the provider timed out".to_string(),
        ),
        ureq::Error::Timeout(Timeout::PerRead) if phase == Phase::Body => (
            ErrorKind::Timeout,
            "the stream stalled: no data within the stall timeout".to_string(),
        ),
        ureq::Error::Timeout(Timeout::PerRead | Timeout::RecvResponse) => (
            ErrorKind::Timeout,
            "no response from the provider within the first-byte timeout".to_string(),
        ),
        ureq::Error::Timeout(other) => (ErrorKind::Timeout, format!("timed out ({other})")),
        ureq::Error::HostNotFound => (ErrorKind::Network, "host not found".to_string()),
        ureq::Error::BadUri(_) => (
            ErrorKind::Configuration,
            "the provider url is not a valid http(s) url".to_string(),
        ),
        ureq::Error::Http(_) => (
            ErrorKind::Configuration,
            "a request header has a name or value that http does not allow".to_string(),
        ),
        ureq::Error::InvalidProxyUrl => (
            ErrorKind::Configuration,
            "the proxy url from the environment is invalid".to_string(),
        ),
        ureq::Error::Io(io) if phase == Phase::Body => (
            ErrorKind::Stream,
            format!("the connection broke mid-stream: {}", io.kind()),
        ),
        ureq::Error::Protocol(_) if phase == Phase::Body => (
            ErrorKind::Stream,
            "the response body is malformed http".to_string(),
        ),
        ureq::Error::Io(io) => (
            ErrorKind::Network,
            format!("the connection failed before a response: {}", io.kind()),
        ),
        other => {
            let kind = if phase == Phase::Body {
                ErrorKind::Stream
            } else {
                ErrorKind::Network
            };
            (kind, scrub_secrets(&strip_urls(&other.to_string())))
        }
    };
    Error::new(kind, message).with_provider(provider)
}

/// Removes the query string of anything that looks like a URL (keys travel in queries).
fn strip_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match word.find('?') {
            Some(q) if word.contains("://") => {
                out.push_str(&word[..q]);
                out.push_str("?…");
            }
            _ => out.push_str(word),
        }
    }
    out
}

fn lowercase_headers(headers: &ureq::http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            let value = value.to_str().ok()?;
            Some((name.as_str().to_ascii_lowercase(), value.to_string()))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Error classification shared by the wire formats (unified spec §6.4–6.5).
// ---------------------------------------------------------------------------------------

/// The error kind of an HTTP status (unified spec §6.4).
///
/// 402 is [`ErrorKind::Quota`]; other unlisted 4xx are client errors
/// ([`ErrorKind::InvalidRequest`]); every 5xx, including Anthropic's 529, is
/// [`ErrorKind::Server`]; anything else unexpected is treated as a server fault.
pub(crate) fn kind_for_status(status: u16) -> ErrorKind {
    match status {
        400 | 422 => ErrorKind::InvalidRequest,
        401 => ErrorKind::Authentication,
        402 => ErrorKind::Quota,
        403 => ErrorKind::AccessDenied,
        404 => ErrorKind::NotFound,
        408 => ErrorKind::Timeout,
        413 => ErrorKind::ContextLength,
        429 => ErrorKind::RateLimited,
        405..=499 => ErrorKind::InvalidRequest,
        _ => ErrorKind::Server,
    }
}

/// The error kind a provider's message implies, if it implies one (unified spec §6.5, plus
/// the phrasings providers actually use for an over-long prompt: Anthropic's "prompt is too
/// long", OpenAI's `context_length_exceeded`, llama.cpp's "exceeds the available context").
pub(crate) fn kind_from_message(message: &str) -> Option<ErrorKind> {
    let lower = message.to_ascii_lowercase();
    let has = |needle: &str| lower.contains(needle);
    if has("prompt is too long")
        || has("context length")
        || has("context_length")
        || has("context window")
        || has("too many tokens")
        || has("maximum context")
        || has("exceeds the available context")
        // Gemini, vLLM, Groq/DeepSeek, LM Studio, Ollama (see the overflow table in
        // `session::compaction`).
        || has("exceeds the maximum number of tokens")
        || has("maximum model length")
        || has("reduce the length of the messages")
        || has("greater than the context length")
        || has("prompt too long")
    {
        Some(ErrorKind::ContextLength)
    } else if has("content filter") || has("content_filter") || has("safety") {
        Some(ErrorKind::ContentFilter)
    } else if has("not found") || has("does not exist") {
        Some(ErrorKind::NotFound)
    } else if has("unauthorized") || has("invalid key") || has("invalid api key") {
        Some(ErrorKind::Authentication)
    } else if has("insufficient_quota") || has("exceeded your current quota") {
        Some(ErrorKind::Quota)
    } else {
        None
    }
}

/// The kind for `status`, refined by `message` where the status alone is ambiguous (400,
/// 422, 413 and statuses outside the table); a clear status (401, 403, 404, 429, 5xx) wins.
pub(crate) fn classify(status: u16, message: &str) -> ErrorKind {
    let by_status = kind_for_status(status);
    match status {
        400 | 413 | 422 => kind_from_message(message).unwrap_or(by_status),
        429 => match kind_from_message(message) {
            Some(ErrorKind::Quota) => ErrorKind::Quota,
            _ => by_status,
        },
        _ => by_status,
    }
}

/// `retry-after-ms` (milliseconds) or `retry-after` (seconds, fractional allowed, or an
/// HTTP date), from lower-cased headers.
pub(crate) fn retry_after_from_headers(headers: &[(String, String)]) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        // The same sane range as seconds below: a server's absurd value is not a panic.
        if (0.0..1e15).contains(&ms) {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    parse_retry_after(get("retry-after")?, SystemTime::now())
}

/// Parses a `retry-after` value: delay seconds (`"1"`, `"1.5"`) or an HTTP date
/// (`"Wed, 21 Oct 2015 07:28:00 GMT"`), measured from `now`. A date in the past is zero.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (0.0..1e12)
            .contains(&secs)
            .then(|| Duration::from_secs_f64(secs));
    }
    let at = parse_http_date(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only HTTP date form
/// servers may send (RFC 9110 §5.6.7).
fn parse_http_date(value: &str) -> Option<SystemTime> {
    let rest = value.split_once(", ").map(|(_, r)| r)?;
    let mut parts = rest.split(' ');
    let day: u64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    // Only plausible dates: keeps the arithmetic below far from overflow.
    if !(1970..=9999).contains(&year) {
        return None;
    }
    let mut hms = parts.next()?.split(':');
    let h: u64 = hms.next()?.parse().ok()?;
    let m: u64 = hms.next()?.parse().ok()?;
    let s: u64 = hms.next()?.parse().ok()?;
    if parts.next()? != "GMT" || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day as i64);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + m * 60 + s;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The message and code in a provider's JSON error body: `error.message` (or `message`,
/// or `error` when it is a string) and `error.code` (or `error.type`, or `error.status`);
/// numbers become their decimal text.
pub(crate) fn error_body_fields(body: &str) -> (Option<String>, Option<String>) {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
        return (None, None);
    };
    // Gemini streams wrap the error in a one-element array.
    let value = match &value {
        serde_json::Value::Array(items) if items.len() == 1 => &items[0],
        other => other,
    };
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let error = value.get("error");
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(text)
        .or_else(|| error.and_then(text))
        .or_else(|| value.get("message").and_then(text));
    let code = error
        .and_then(|e| {
            e.get("code")
                .and_then(text)
                .or_else(|| e.get("type").and_then(text))
                .or_else(|| e.get("status").and_then(text))
        })
        .or_else(|| value.get("code").and_then(text));
    (message, code)
}

/// The message of an error whose body gives none: the start of the body, or, for an empty
/// body, that it was empty (`status` is `None` for an error inside a 200 stream).
pub(crate) fn message_from_body(body: &str, status: Option<u16>) -> String {
    let body = body.trim();
    match status {
        _ if !body.is_empty() => body.chars().take(200).collect(),
        Some(status) => format!("http status {status} with an empty body"),
        None => "the stream reported an error".to_string(),
    }
}

/// `text` with every occurrence of `key` replaced by `[REDACTED]`, for error bodies from
/// servers that echo the key back (keys shorter than 8 characters are not searched for:
/// they would match ordinary words).
pub(crate) fn redact_key<'a>(text: &'a str, key: &str) -> std::borrow::Cow<'a, str> {
    if key.len() >= 8 && text.contains(key) {
        std::borrow::Cow::Owned(text.replace(key, "[REDACTED]"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// The error for a non-2xx response, for wire formats whose error body is the common
/// `{"error": {"message", "type"|"code"}}` shape: kind from status and message, provider
/// code, scrubbed body excerpt, and `retry-after`.
pub(crate) fn error_from_status(
    provider: &str,
    status: u16,
    headers: &[(String, String)],
    body: &str,
) -> Error {
    let (message, code) = error_body_fields(body);
    let message = scrub_secrets(&message.unwrap_or_else(|| message_from_body(body, Some(status))));
    let kind = classify(status, &message);
    let mut err = Error::new(kind, message)
        .with_provider(provider)
        .with_status(status);
    if let Some(code) = code {
        err = err.with_code(code);
    }
    if !body.trim().is_empty() {
        err = err.with_body(body);
    }
    if let Some(after) = retry_after_from_headers(headers) {
        err = err.with_retry_after(after);
    }
    err
}

#[cfg(test)]
mod retry_after_tests {
    use super::*;

    fn header(name: &str, value: &str) -> Vec<(String, String)> {
        vec![(name.to_string(), value.to_string())]
    }

    #[test]
    fn absurd_retry_after_values_are_ignored_not_a_panic() {
        assert_eq!(
            retry_after_from_headers(&header("retry-after-ms", "1e30")),
            None
        );
        assert_eq!(
            retry_after_from_headers(&header("retry-after-ms", "-5")),
            None
        );
        assert_eq!(
            retry_after_from_headers(&header("retry-after-ms", "1500")),
            Some(Duration::from_millis(1500))
        );
        let now = SystemTime::now();
        for date in [
            "Sun, 06 Nov 999999999999999 08:49:37 GMT",
            "Sun, 06 Nov 9223372036854775807 08:49:37 GMT",
            "Sun, 06 Nov -400 08:49:37 GMT",
        ] {
            assert_eq!(parse_retry_after(date, now), None, "{date}");
        }
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Some(Duration::ZERO)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_the_spec_table() {
        let table = [
            (400, ErrorKind::InvalidRequest),
            (401, ErrorKind::Authentication),
            (403, ErrorKind::AccessDenied),
            (404, ErrorKind::NotFound),
            (408, ErrorKind::Timeout),
            (413, ErrorKind::ContextLength),
            (422, ErrorKind::InvalidRequest),
            (429, ErrorKind::RateLimited),
            (500, ErrorKind::Server),
            (503, ErrorKind::Server),
            (529, ErrorKind::Server),
        ];
        for (status, kind) in table {
            assert_eq!(kind_for_status(status), kind, "{status}");
        }
    }

    #[test]
    fn messages_refine_ambiguous_statuses_only() {
        let long = "prompt is too long: 215000 tokens > 200000 maximum";
        assert_eq!(classify(400, long), ErrorKind::ContextLength);
        assert_eq!(
            classify(400, "model: x does not exist"),
            ErrorKind::NotFound
        );
        assert_eq!(classify(400, "bad field"), ErrorKind::InvalidRequest);
        assert_eq!(classify(401, long), ErrorKind::Authentication);
        assert_eq!(classify(503, "not found"), ErrorKind::Server);
        assert_eq!(
            classify(429, "You exceeded your current quota"),
            ErrorKind::Quota
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_470); // 2015-10-21 07:27:50 UTC
        assert_eq!(parse_retry_after("1", now), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_retry_after(" 1.5 ", now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);
        assert_eq!(
            parse_retry_after("Wed, 21 Foo 2015 07:28:00 GMT", now),
            None
        );
    }

    #[test]
    fn retry_after_ms_wins_over_retry_after() {
        let headers = vec![
            ("retry-after".to_string(), "7".to_string()),
            ("retry-after-ms".to_string(), "250".to_string()),
        ];
        assert_eq!(
            retry_after_from_headers(&headers),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn common_error_bodies_give_message_and_code() {
        let (m, c) = error_body_fields(
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        );
        assert_eq!(m.as_deref(), Some("invalid x-api-key"));
        assert_eq!(c.as_deref(), Some("authentication_error"));
        let (m, c) =
            error_body_fields(r#"{"error":{"message":"Provider returned error","code":429}}"#);
        assert_eq!(m.as_deref(), Some("Provider returned error"));
        assert_eq!(c.as_deref(), Some("429"));
        assert_eq!(error_body_fields("<html>"), (None, None));
    }

    #[test]
    fn error_from_status_scrubs_and_keeps_retry_after() {
        let key = "sk-ant-api03-ABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let body =
            format!(r#"{{"error":{{"type":"rate_limit_error","message":"slow down {key}"}}}}"#);
        let headers = vec![("retry-after".to_string(), "3".to_string())];
        let err = error_from_status("anthropic", 429, &headers, &body);
        assert_eq!(err.kind(), ErrorKind::RateLimited);
        assert_eq!(err.retry_after(), Some(Duration::from_secs(3)));
        assert_eq!(err.code(), Some("rate_limit_error"));
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(key), "{shown}");
    }

    #[test]
    fn urls_lose_their_query_in_messages() {
        assert_eq!(
            strip_urls("bad uri: https://x.test/v1?key=secret now"),
            "bad uri: https://x.test/v1?… now"
        );
    }
}
