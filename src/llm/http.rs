//! HTTP plumbing over ureq, shared by every wire format; it never retries and never
//! knows a provider's JSON.
//!
//! One `ureq::Agent` per request in flight, so that a [`CancelToken`] callback can call
//! `Agent::shutdown()` from another thread and end a blocked read at once (shutting an agent
//! down kills every clone of it, so an agent never serves two requests at once). An agent
//! whose response was read to its end goes back to its provider's [`Connections`] with
//! its idle keep-alive connection, and the provider's next request takes it: one TCP (and
//! TLS) handshake per server instead of one per round. Statuses are
//! not errors to ureq (`http_status_as_error(false)`): this module reads the body of a failed
//! response (gzip decoded here, see [`ResponseBody`]) and lets the wire format classify it. Connect,
//! time-to-first-byte and stream-stall (`timeout_per_read`) timeouts come from
//! [`HttpOptions`].
//!
//! A wire format (one file per format in `llm/`) implements [`WireFormat`] (request building
//! and error classification) and [`Decoder`] (SSE events to [`StreamEvent`]s, usually with
//! the shared `accumulate::ResponseBuilder`), both in `wire.rs`; [`open`] does everything
//! between: send, status check, body bytes → [`sse::Parser`] → decoder → events. Statuses
//! and error bodies become errors in `status.rs`.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cancel::{CancelGuard, CancelToken};
use crate::error::{Error, ErrorKind, Result, scrub_secrets};
use crate::llm::sse;
use crate::llm::wire::{Decoder, WireFormat};
use crate::llm::{Request, StreamEvent};
use crate::sync::lock;

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
    /// Longest time a stream may go without one event while data still arrives (a server
    /// that sends only keep-alive comments). Default 300 s.
    pub progress_timeout: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(120),
            stall_timeout: Duration::from_secs(120),
            use_env_proxy: true,
            progress_timeout: Duration::from_secs(300),
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

    /// Sets [`progress_timeout`](Self::progress_timeout).
    pub fn with_progress_timeout(mut self, timeout: Duration) -> HttpOptions {
        self.progress_timeout = timeout;
        self
    }

    /// Sets [`use_env_proxy`](Self::use_env_proxy).
    pub fn with_env_proxy(mut self, use_env_proxy: bool) -> HttpOptions {
        self.use_env_proxy = use_env_proxy;
        self
    }

    pub(super) fn agent(&self) -> ureq::Agent {
        let mut builder = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(self.connect_timeout))
            .timeout_recv_response(Some(self.first_byte_timeout))
            .timeout_per_read(Some(self.stall_timeout))
            .user_agent(concat!("agentloop/", env!("CARGO_PKG_VERSION")))
            .max_redirects(0)
            // A request leaves as several writes (the header, then the body in pieces of
            // the output buffer): with Nagle's algorithm a short last piece would wait for
            // the server to acknowledge an earlier one, up to a round trip per model call.
            // ureq's own default is the same today; set here so that no default can change it.
            .no_delay(true)
            // ureq zero-fills both buffers (128 KiB each by default) for every connection:
            // 64 fresh pages per request. The response header must fit in the input buffer
            // (16 KiB, see `INPUT_BUFFER`); the output buffer holds our request header and
            // passes the body through in pieces.
            .input_buffer_size(INPUT_BUFFER)
            // One byte under the buffer: a header that fills the buffer is then ureq's
            // typed "too large" error, not a read of nothing into a full buffer (EOF).
            .max_response_header_size(INPUT_BUFFER - 1)
            .output_buffer_size(OUTPUT_BUFFER)
            // An agent carries one request at a time, so it keeps at most one connection.
            .max_idle_connections(1)
            .max_idle_connections_per_host(1)
            .max_idle_age(MAX_IDLE);
        if !self.use_env_proxy {
            builder = builder.proxy(None);
        }
        builder.build().new_agent()
    }
}

/// The idle agents of one provider, each holding at most one keep-alive connection, for
/// its next requests. Clones share them; a provider's `with_http_options` starts afresh.
///
/// A request takes the most recently used agent (or makes one) and gives it back only
/// when its response body was read to the end and its token was not cancelled (a
/// cancelled agent is shut down for good). At most [`MAX_IDLE_AGENTS`] wait here, and at
/// most [`MAX_IDLE_IN_PROCESS`] in all providers of the process together, so that a
/// thousand sessions with a provider each do not hold a thousand idle sockets; one idle
/// for [`MAX_IDLE`] or longer is dropped, with its connection, when the next request
/// looks. ureq checks that a pooled connection is still open before reusing it.
#[derive(Clone, Default)]
pub(crate) struct Connections(Arc<Mutex<Idle>>);

/// The idle agents, and since when each is idle; counted in [`IDLE_IN_PROCESS`].
#[derive(Default)]
struct Idle(Vec<(ureq::Agent, Instant)>);

impl Drop for Idle {
    fn drop(&mut self) {
        IDLE_IN_PROCESS.fetch_sub(self.0.len(), Ordering::SeqCst);
    }
}

/// How many idle agents (connections) a provider keeps: enough for the sessions sharing
/// it between their rounds.
const MAX_IDLE_AGENTS: usize = 8;

/// How many idle agents all providers of the process keep together.
const MAX_IDLE_IN_PROCESS: usize = 64;

/// Idle agents in all providers of the process.
static IDLE_IN_PROCESS: AtomicUsize = AtomicUsize::new(0);

/// How long an idle connection is kept: long enough for the tool calls between two
/// rounds, and below the idle timeout of most servers and load balancers.
const MAX_IDLE: Duration = Duration::from_secs(15);

impl Connections {
    /// An agent for one request: the most recently idle one, or a new one. Agents idle
    /// for [`MAX_IDLE`] or longer are dropped on the way, with their connections.
    fn take(&self, options: &HttpOptions) -> ureq::Agent {
        let mut idle = lock(&self.0);
        let before = idle.0.len();
        idle.0.retain(|(_, since)| since.elapsed() < MAX_IDLE);
        let taken = idle.0.pop();
        let left = before - idle.0.len();
        IDLE_IN_PROCESS.fetch_sub(left, Ordering::SeqCst);
        drop(idle);
        match taken {
            Some((agent, _)) => agent,
            None => options.agent(),
        }
    }

    /// Keeps `agent`, whose last response was read to its end, unless the provider or the
    /// process already keeps as many as they may (then the agent and its connection go).
    fn give_back(&self, agent: ureq::Agent) {
        let mut idle = lock(&self.0);
        if idle.0.len() >= MAX_IDLE_AGENTS {
            idle.0.remove(0);
        } else {
            let kept = IDLE_IN_PROCESS.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_IDLE_IN_PROCESS).then_some(n + 1)
            });
            if kept.is_err() {
                return;
            }
        }
        idle.0.push((agent, Instant::now()));
    }
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("idle", &lock(&self.0).0.len())
            .finish()
    }
}

/// The boxed event iterator a [`Provider`](crate::llm::Provider) returns.
pub(crate) type EventIter = Box<dyn Iterator<Item = Result<StreamEvent>> + Send>;

/// How much of a failed response's body is read for classification.
const ERROR_BODY_LIMIT: u64 = 64 * 1024;

/// ureq's buffer for the response: its header, then body reads; also the largest response
/// header accepted. Providers send 1–3 KB of headers (and an nginx in front of one passes
/// at most 4–8 KB by default); ureq zero-fills the buffer for every connection, and at
/// 64 KiB its 12 more fresh pages were 3 % of the CLI's page faults.
const INPUT_BUFFER: usize = 16 * 1024;

/// ureq's buffer for the request header and body pieces.
const OUTPUT_BUFFER: usize = 16 * 1024;

/// Size of one body read: the first reads take [`FIRST_READ_BUFFER`] bytes, and the
/// buffer grows to this once a read fills it (a long answer or a fast stream).
const READ_BUFFER: usize = 16 * 1024;

/// The read buffer of a new stream: one page. Most answers stream a few KB in events of
/// a few hundred bytes; a zeroed 16 KiB buffer per model call cost the CLI's task 7–9
/// fresh pages (`perf record -e page-faults`).
const FIRST_READ_BUFFER: usize = 4 * 1024;

/// How many body bytes after the finish event are read (and dropped) to keep the
/// connection for the next request.
const TAIL_LIMIT: usize = 16 * 1024;

/// Sends `request` in `wire`'s format and returns its event stream once the response
/// headers have arrived with a 2xx status; the `Provider::open` of every HTTP wire format.
///
/// Never retries. Returns [`ErrorKind::Aborted`] as soon as `cancel` fires, also while
/// blocked on the network.
pub(crate) fn open(
    wire: &dyn WireFormat,
    options: &HttpOptions,
    connections: &Connections,
    request: &Request,
    cancel: &CancelToken,
) -> Result<EventIter> {
    let provider = wire.provider_id().to_string();
    let http = wire.build_request(request)?;
    super::base_url::check_base_url(&http.url).map_err(|e| e.with_provider(&provider))?;
    if cancel.is_cancelled() {
        return Err(aborted(&provider));
    }
    let agent = connections.take(options);
    let guard = {
        let agent = agent.clone();
        cancel.on_cancel(move || agent.shutdown())
    };
    let mut builder = agent.post(&http.url);
    if !http
        .headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("accept-encoding"))
    {
        builder = builder.header("accept-encoding", "gzip");
    }
    for (name, value) in &http.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let response = match builder.send(&http.body[..]) {
        Ok(response) => response,
        Err(err) => {
            let detail = err.to_string();
            let err = transport_error(&provider, err, cancel, Phase::Headers, options);
            return Err(super::base_url::name_url(err, &http.url, &detail));
        }
    };
    let status = response.status().as_u16();
    if (300..400).contains(&status) {
        return Err(redirected(&provider, status, response.headers()));
    }
    if (200..300).contains(&status) {
        if let Some(kind) = not_an_event_stream(response.headers()) {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "the server answered {status} with `{kind}`, not an event stream \
                     (a proxy, or a wrong URL?)"
                ),
            )
            .with_provider(&provider)
            .with_status(status));
        }
    }
    if !(200..300).contains(&status) {
        let headers = lowercase_headers(response.headers());
        let mut bytes = Vec::new();
        let read = ResponseBody::of(response)
            .take(ERROR_BODY_LIMIT)
            .read_to_end(&mut bytes);
        let body = String::from_utf8_lossy(&bytes);
        if cancel.is_cancelled() {
            return Err(aborted(&provider));
        }
        if let Err(err) = read {
            if body.is_empty() {
                return Err(transport_error(
                    &provider,
                    err.into(),
                    cancel,
                    Phase::Body,
                    options,
                ));
            }
        }
        let err = wire.classify_error(status, &headers, &body);
        if status == 404 {
            return Err(super::base_url::not_found(err, &http.url, &request.model));
        }
        return Err(err);
    }
    let reader = ResponseBody::of(response);
    Ok(Box::new(HttpEventStream {
        provider,
        reader: Some(reader),
        decoder: wire.decoder(request),
        parser: sse::Parser::new(),
        sse_events: Vec::new(),
        events: Vec::new(),
        pending: VecDeque::new(),
        buffer: vec![0; FIRST_READ_BUFFER],
        cancel: cancel.clone(),
        guard: Some(guard),
        agent: Some((agent, connections.clone())),
        failed: None,
        done: false,
        options: options.clone(),
        last_event: Instant::now(),
    }))
}

/// The content type of a 2xx response that is clearly not an event stream (HTML from a
/// proxy or a web server, JSON from an API that does not stream). A missing or unusual
/// content type passes: some compatible servers send none.
fn not_an_event_stream(headers: &ureq::http::HeaderMap) -> Option<String> {
    let value = headers
        .get("content-type")?
        .to_str()
        .ok()?
        .to_ascii_lowercase();
    let kind = value.split(';').next().unwrap_or("").trim().to_string();
    let known_other = kind.starts_with("text/html")
        || kind == "application/json"
        || kind == "application/xml"
        || kind == "text/xml";
    known_other.then_some(kind)
}

/// A 3xx: agentloop does not follow redirects of its POSTs (the body and the key would go
/// to wherever the server says), and a redirect is not a server fault to retry.
fn redirected(provider: &str, status: u16, headers: &ureq::http::HeaderMap) -> Error {
    let location = headers
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(strip_urls)
        .unwrap_or_else(|| "an unnamed location".to_string());
    Error::new(
        ErrorKind::Configuration,
        format!(
            "the server redirected the request ({status}) to {location}: agentloop does not \
             follow redirects; set the base URL to the final address"
        ),
    )
    .with_provider(provider)
    .with_status(status)
}

/// A response's body as the wire format reads it: gzip decoded here (requests say
/// `accept-encoding: gzip`), anything else as it came.
///
/// Not ureq's own decoding: its body reader makes room for the gzip decoder's state on the
/// stack (a 53 KiB frame, touched in full by the stack probes for every response, compressed
/// or not), which every worker thread reading a response then kept in its resident stack.
/// Here the decoder is made on the heap, and only for a compressed body.
enum ResponseBody {
    Plain(ureq::BodyReader<'static>),
    Gzip(Box<flate2::read::MultiGzDecoder<ureq::BodyReader<'static>>>),
}

impl ResponseBody {
    fn of(response: ureq::http::Response<ureq::Body>) -> ResponseBody {
        let gzip = response
            .headers()
            .get("content-encoding")
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| {
                let value = value.trim();
                value.eq_ignore_ascii_case("gzip") || value.eq_ignore_ascii_case("x-gzip")
            });
        let reader = response.into_body().into_reader();
        if gzip {
            ResponseBody::gzip(reader)
        } else {
            ResponseBody::Plain(reader)
        }
    }

    /// Out of line: the decoder's state is built in this frame before it moves to the heap.
    #[inline(never)]
    fn gzip(reader: ureq::BodyReader<'static>) -> ResponseBody {
        ResponseBody::Gzip(Box::new(flate2::read::MultiGzDecoder::new(reader)))
    }
}

impl Read for ResponseBody {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            ResponseBody::Plain(reader) => reader.read(buf),
            ResponseBody::Gzip(reader) => reader.read(buf),
        }
    }
}

/// The live body of a streaming response, decoded as it is read.
struct HttpEventStream {
    provider: String,
    reader: Option<ResponseBody>,
    decoder: Box<dyn Decoder>,
    parser: sse::Parser,
    sse_events: Vec<sse::Event>,
    events: Vec<StreamEvent>,
    pending: VecDeque<StreamEvent>,
    buffer: Vec<u8>,
    cancel: CancelToken,
    /// Shuts the agent down on cancel for as long as the stream reads.
    guard: Option<CancelGuard>,
    /// The agent of this request and where it goes back once the body is read to its end.
    agent: Option<(ureq::Agent, Connections)>,
    /// The error that ended the stream, delivered after the pending events.
    failed: Option<Error>,
    done: bool,
    /// The timeouts, for the progress deadline and for error messages.
    options: HttpOptions,
    /// When the parser last produced an event (or the stream started).
    last_event: Instant,
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
                        &self.options,
                    ));
                }
            };
            if n == 0 {
                self.reader = None;
                self.done = true;
                self.release();
                self.parser.finish(&mut self.sse_events);
            } else {
                self.parser.feed(&self.buffer[..n], &mut self.sse_events);
                if n == self.buffer.len() && n < READ_BUFFER {
                    self.buffer.resize(READ_BUFFER, 0);
                }
            }
            if self.parser.overflowed() {
                return Err(Error::new(
                    ErrorKind::Stream,
                    format!(
                        "the stream sent a line or an event over {} MiB; it was ended",
                        sse::MAX_EVENT_BYTES / (1024 * 1024)
                    ),
                )
                .with_provider(&self.provider));
            }
            if self.sse_events.is_empty() {
                let quiet = self.last_event.elapsed();
                if quiet >= self.options.progress_timeout && !self.done {
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "the stream sent no event for {} (the progress timeout, {}): only \
                             keep-alive data arrived",
                            seconds(quiet),
                            seconds(self.options.progress_timeout)
                        ),
                    )
                    .with_provider(&self.provider));
                }
            } else {
                self.last_event = Instant::now();
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
            let finished = self
                .events
                .iter()
                .any(|e| matches!(e, StreamEvent::Finish { .. }));
            self.pending.extend(self.events.drain(..));
            result?;
            if finished && !self.done {
                self.read_tail();
            }
        }
        Ok(())
    }

    /// After the finish event: reads the rest of the body (the chunked terminator, as a
    /// rule already received with the last event) so that its connection can carry the
    /// provider's next request. The response is complete: more than [`TAIL_LIMIT`] bytes,
    /// an error, a cancellation or data still trickling in after the stall timeout only
    /// cost the connection. A server that holds the body open after its last event costs
    /// the stall timeout, like any silence.
    fn read_tail(&mut self) {
        let deadline = Instant::now() + self.options.stall_timeout;
        let mut extra = 0;
        while let Some(reader) = self.reader.as_mut() {
            match reader.read(&mut self.buffer) {
                Ok(0) => {
                    self.reader = None;
                    self.release();
                }
                Ok(n) if extra + n <= TAIL_LIMIT && Instant::now() < deadline => extra += n,
                _ => self.reader = None,
            }
        }
        self.done = true;
    }

    /// The body was read to its end, so ureq holds its connection idle in the agent: the
    /// agent goes back to the provider, unless the request was cancelled (that shut the
    /// agent down). The cancel callback is unregistered first, so a later cancellation of
    /// this token cannot shut down an agent another request is using.
    fn release(&mut self) {
        self.guard = None;
        if let Some((agent, connections)) = self.agent.take() {
            if !self.cancel.is_cancelled() {
                connections.give_back(agent);
            }
        }
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
fn transport_error(
    provider: &str,
    err: ureq::Error,
    cancel: &CancelToken,
    phase: Phase,
    options: &HttpOptions,
) -> Error {
    if cancel.is_cancelled() {
        return aborted(provider);
    }
    use ureq::Timeout;
    let (kind, message) = match &err {
        ureq::Error::Timeout(Timeout::Connect | Timeout::Resolve) => (
            ErrorKind::Timeout,
            format!(
                "connecting to the provider timed out after {}",
                seconds(options.connect_timeout)
            ),
        ),
        ureq::Error::Timeout(Timeout::PerRead) if phase == Phase::Body => (
            ErrorKind::Timeout,
            format!(
                "the stream stalled: no data for {} (the stall timeout)",
                seconds(options.stall_timeout)
            ),
        ),
        ureq::Error::Timeout(Timeout::PerRead | Timeout::RecvResponse) => (
            ErrorKind::Timeout,
            format!(
                "no response from the provider within {} (the first-byte timeout)",
                seconds(options.first_byte_timeout.min(options.stall_timeout))
            ),
        ),
        ureq::Error::Timeout(other) => (ErrorKind::Timeout, format!("timed out ({other})")),
        ureq::Error::HostNotFound => (ErrorKind::Network, "host not found".to_string()),
        ureq::Error::LargeResponseHeader(..) => (
            ErrorKind::Network,
            format!(
                "the response header is over {} KiB: not a model server's answer",
                INPUT_BUFFER / 1024
            ),
        ),
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

/// A duration for a message: `2.5 s`, `120 s`, `0.25 s`.
fn seconds(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("{secs:.0} s")
    } else {
        format!("{} s", format!("{secs:.3}").trim_end_matches('0'))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The two tests below count the process's idle agents: one at a time.
    static COUNTING: Mutex<()> = Mutex::new(());

    #[test]
    fn idle_agents_are_capped_and_the_stale_ones_dropped() {
        let _one_at_a_time = lock(&COUNTING);
        let options = HttpOptions::default();
        let connections = Connections::default();
        for _ in 0..MAX_IDLE_AGENTS + 2 {
            connections.give_back(options.agent());
        }
        let kept = lock(&connections.0).0.len();
        assert_eq!(kept, MAX_IDLE_AGENTS);
        // One idle too long at the bottom: taking one drops it and the one taken.
        let Some(long_ago) = Instant::now().checked_sub(MAX_IDLE + Duration::from_secs(1)) else {
            return; // a machine up for less than that: nothing to test
        };
        lock(&connections.0).0[0].1 = long_ago;
        let _ = connections.take(&options);
        let idle = lock(&connections.0);
        assert_eq!(idle.0.len(), MAX_IDLE_AGENTS - 2);
        assert!(idle.0.iter().all(|(_, since)| since.elapsed() < MAX_IDLE));
    }

    #[test]
    fn the_process_keeps_a_bounded_number_of_idle_agents() {
        let _one_at_a_time = lock(&COUNTING);
        let options = HttpOptions::default();
        let providers: Vec<Connections> = (0..MAX_IDLE_IN_PROCESS + 8)
            .map(|_| Connections::default())
            .collect();
        for connections in &providers {
            connections.give_back(options.agent());
        }
        let kept: usize = providers.iter().map(|c| lock(&c.0).0.len()).sum();
        assert_eq!(
            kept, MAX_IDLE_IN_PROCESS,
            "one idle agent each, up to the cap"
        );
        assert_eq!(IDLE_IN_PROCESS.load(Ordering::SeqCst), MAX_IDLE_IN_PROCESS);
        drop(providers);
        // Dropped providers give their share back: room for new idle agents again.
        let connections = Connections::default();
        connections.give_back(options.agent());
        assert_eq!(lock(&connections.0).0.len(), 1);
    }

    #[test]
    fn urls_lose_their_query_in_messages() {
        assert_eq!(
            strip_urls("bad uri: https://x.test/v1?key=secret now"),
            "bad uri: https://x.test/v1?… now"
        );
    }
}
