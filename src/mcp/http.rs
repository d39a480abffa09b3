//! The Streamable HTTP transport: every message is a POST to the one endpoint, with the
//! `MCP-Protocol-Version` header and the server's `Mcp-Session-Id` once it gave one; the
//! answer is a JSON body, an SSE stream (read with the crate's SSE parser) or `202`.
//!
//! The POST runs on the calling thread, so a request's answer (and the progress before it)
//! is dispatched before the caller starts waiting. One ureq agent per POST, shut down when
//! the caller's cancel token fires or when the answer comes on another stream (some
//! servers send it on whichever GET stream is open): a POST never waits on its own stream,
//! or resumes it, for an answer already given. The handshake waits (a second at most) for
//! the GET stream to open or be refused. A server that answers 401 (or 403 for a missing scope) is
//! answered by the server's [`Authorizer`] and the POST sent again with the new token, at
//! most [`MAX_AUTH_RETRIES`] times. It never follows redirects, never reads an unbounded
//! body and never puts a header value in an error.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::connection::Connection;
use super::host::ClientContext;
use super::inbound::Inbound;
use super::oauth::Authorizer;
use super::rpc::Outbound;
use crate::cancel::CancelToken;
use crate::llm::sse;
use crate::sync::lock;

/// The largest JSON body read from a server: 64 MiB.
const MAX_BODY: u64 = 64 * 1024 * 1024;

/// How many times one SSE answer stream is resumed after it ended early.
const MAX_RESUMES: usize = 5;

/// How many times one message is sent again after an authorization.
const MAX_AUTH_RETRIES: usize = 3;

/// What one POST came to.
enum Posted {
    Done,
    /// 401 or 403: the status, the challenge and the `Authorization` header that was sent.
    Refused(u16, Option<String>, Option<String>),
}

/// How long a server may take to take a notification or a response (`202 Accepted` at
/// once, as a rule): a server that holds them cannot hold a startup or a cancelled call
/// much past its own timeout.
const NOTICE_TIMEOUT: Duration = Duration::from_secs(1);

/// Why an SSE stream gave no answer.
enum Ended {
    /// It ended (or broke) before the awaited answer: it may be resumed.
    Early,
    /// It sent an event over the parser's cap: the stream is hostile, never resumed.
    Overflowed,
}

/// The HTTP side of a [`Connection`].
pub(crate) struct HttpTransport {
    url: String,
    session_id: Mutex<Option<String>>,
    version: Mutex<String>,
    read_timeout: Duration,
    connect_timeout: Duration,
    inbound: Arc<Inbound>,
    auth: Option<Arc<Authorizer>>,
    /// The GET stream's thread and the agent to end it with.
    listener: Mutex<Option<(ureq::Agent, std::thread::JoinHandle<()>)>>,
    /// The requests whose POSTs are in flight, by id, with the token that ends their
    /// reads: cancelled when their answer comes on another stream.
    awaiting: Mutex<HashMap<u64, CancelToken>>,
    stopped: std::sync::atomic::AtomicBool,
}

/// How to reach one HTTP server.
pub(crate) struct Target<'a> {
    pub(crate) name: &'a str,
    pub(crate) url: &'a str,
    pub(crate) startup: Duration,
    pub(crate) call: Duration,
}

/// A connection to the server at `target.url` (nothing is sent before the handshake).
pub(crate) fn connect(
    target: &Target<'_>,
    context: Arc<ClientContext>,
    auth: Option<Arc<Authorizer>>,
) -> Connection {
    let inbound = Arc::new(Inbound::new(target.name, context));
    let transport = HttpTransport {
        url: target.url.to_string(),
        session_id: Mutex::new(None),
        version: Mutex::new(String::new()),
        read_timeout: target.call.max(target.startup),
        connect_timeout: target.startup.min(Duration::from_secs(10)),
        inbound: inbound.clone(),
        auth,
        listener: Mutex::new(None),
        awaiting: Mutex::new(HashMap::new()),
        stopped: std::sync::atomic::AtomicBool::new(false),
    };
    Connection::new(Arc::new(transport), inbound)
}

impl HttpTransport {
    fn agent(&self) -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(self.connect_timeout))
            .timeout_recv_response(Some(self.read_timeout))
            .timeout_per_read(Some(self.read_timeout))
            .user_agent(concat!("agentloop/", env!("CARGO_PKG_VERSION")))
            .max_redirects(0)
            .proxy(None)
            // Small JSON-RPC messages, each awaited: never held back by Nagle's algorithm.
            .no_delay(true)
            .build()
            .new_agent()
    }

    /// Sends `message`, answering authorization challenges in between; with a `timeout`,
    /// the server may stay silent for at most that long (before its answer's headers, and
    /// between two reads of its body).
    fn post(
        &self,
        message: &Value,
        cancel: Option<&CancelToken>,
        timeout: Option<Duration>,
    ) -> Result<(), String> {
        let never = CancelToken::new();
        let token = cancel.unwrap_or(&never);
        for _ in 0..MAX_AUTH_RETRIES {
            let header = self.auth.as_ref().and_then(|auth| auth.header(token));
            match self.post_once(message, header.as_deref(), cancel, timeout)? {
                Posted::Done => return Ok(()),
                Posted::Refused(status, challenge, sent) => match &self.auth {
                    Some(auth) => {
                        auth.challenge(status, challenge.as_deref(), sent.as_deref(), token)?
                    }
                    None => return Err(format!("HTTP {status}: the server wants authorization")),
                },
            }
        }
        Err(format!(
            "the server still refuses the request after {MAX_AUTH_RETRIES} authorizations"
        ))
    }

    /// One POST of `message`. A request's POST is ended early, and counts as done, when its
    /// answer comes on another stream first (see [`dispatch_all`](Self::dispatch_all)).
    fn post_once(
        &self,
        message: &Value,
        authorization: Option<&str>,
        cancel: Option<&CancelToken>,
        timeout: Option<Duration>,
    ) -> Result<Posted, String> {
        let agent = self.agent();
        let ended = cancel.map_or_else(CancelToken::new, CancelToken::child);
        let _shutdown = {
            let agent = agent.clone();
            ended.on_cancel(move || agent.shutdown())
        };
        let request = message.get("method").and(message.get("id"));
        let awaited = request.and_then(Value::as_u64);
        if let Some(id) = awaited {
            lock(&self.awaiting).insert(id, ended.clone());
        }
        let posted = self.exchange(&agent, message, authorization, &ended, timeout);
        if let Some(id) = awaited {
            lock(&self.awaiting).remove(&id);
        }
        let cancelled = cancel.is_some_and(CancelToken::is_cancelled);
        match posted {
            // Answered on another stream: the reads here were ended (or gave up) after it.
            Err(_) if ended.is_cancelled() && !cancelled => Ok(Posted::Done),
            other => other,
        }
    }

    /// Sends `message` on `agent` and reads what the server answers; `ended` ends the
    /// reads and the waits between them.
    fn exchange(
        &self,
        agent: &ureq::Agent,
        message: &Value,
        authorization: Option<&str>,
        ended: &CancelToken,
        timeout: Option<Duration>,
    ) -> Result<Posted, String> {
        let body = serde_json::to_vec(message).map_err(|e| e.to_string())?;
        let mut request = agent
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(timeout) = timeout {
            request = request
                .config()
                .timeout_recv_response(Some(timeout))
                .timeout_per_read(Some(timeout))
                .build();
        }
        let version = lock(&self.version).clone();
        if !version.is_empty() {
            request = request.header("mcp-protocol-version", version.as_str());
        }
        if let Some(method) = message.get("method").and_then(Value::as_str) {
            if version == super::connection::MODERN_VERSION {
                request = request.header("mcp-method", method);
            }
        }
        if let Some(id) = lock(&self.session_id).clone() {
            request = request.header("mcp-session-id", id.as_str());
        }
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        let response = request
            .send(&body[..])
            .map_err(|e| format!("HTTP request failed: {e}"))?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        if status == 401 || status == 403 {
            let challenge = header("www-authenticate");
            return Ok(Posted::Refused(
                status,
                challenge,
                authorization.map(str::to_owned),
            ));
        }
        if let Some(id) = header("mcp-session-id") {
            if id.len() <= 1024 && id.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
                *lock(&self.session_id) = Some(id);
            }
        }
        let content_type = header("content-type")
            .unwrap_or_default()
            .to_ascii_lowercase();
        let want = message.get("id").and_then(Value::as_u64);
        if content_type.starts_with("text/event-stream") && (200..300).contains(&status) {
            let reader = response.into_body().into_reader();
            return self
                .follow_stream(agent, reader, want, (authorization, timeout), ended)
                .map(|()| Posted::Done);
        }
        let mut text = String::new();
        let read = response
            .into_body()
            .into_with_config()
            .limit(MAX_BODY)
            .lossy_utf8(true)
            .reader()
            .read_to_string(&mut text);
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            let answered = self.dispatch_all(value, want);
            if answered || (200..300).contains(&status) {
                return Ok(Posted::Done);
            }
        }
        if let Err(e) = read {
            return Err(format!("reading the HTTP answer failed: {e}"));
        }
        if (200..300).contains(&status) {
            if want.is_some() {
                return Err(format!("HTTP {status} without an answer to the request"));
            }
            return Ok(Posted::Done);
        }
        if status == 404 && lock(&self.session_id).is_some() {
            self.inbound
                .close("the server ended the MCP session (HTTP 404)".to_string());
        }
        let excerpt: String = text.chars().take(200).collect();
        Err(format!("HTTP {status}: {excerpt}"))
    }

    /// Dispatches a message or a batch; whether the answer to `want` was among them.
    fn dispatch_all(&self, value: Value, want: Option<u64>) -> bool {
        let messages = match value {
            Value::Array(items) => items,
            other => vec![other],
        };
        let mut answered = false;
        for message in messages {
            let id = message.get("id").and_then(Value::as_u64);
            let answer = message.get("method").is_none() && id.is_some();
            answered |= answer && id == want;
            self.inbound.dispatch(message);
            // The answer to another request than this stream's: that request's POST stops
            // waiting for it (after the dispatch, so its caller finds it).
            if answer && id != want {
                let other = id.and_then(|id| lock(&self.awaiting).get(&id).cloned());
                if let Some(ended) = other {
                    ended.cancel();
                }
            }
        }
        answered
    }

    /// Reads the SSE stream; when it ends before the answer to `want` after giving event
    /// ids, resumes it with a GET and `Last-Event-ID` after the server's `retry` delay (at
    /// most [`MAX_RESUMES`] times), unless `ended` fires first. A resumed stream may stay
    /// silent no longer than the request's own `timeout`, as the POST's stream.
    fn follow_stream(
        &self,
        agent: &ureq::Agent,
        reader: impl Read,
        want: Option<u64>,
        (authorization, timeout): (Option<&str>, Option<Duration>),
        ended: &CancelToken,
    ) -> Result<(), String> {
        let mut parser = sse::Parser::new();
        let mut last_id = None;
        let mut outcome = self.read_stream(reader, want, &mut parser, &mut last_id);
        for _ in 0..MAX_RESUMES {
            let Err(Ended::Early) = outcome else { break };
            let Some(id) = last_id.clone() else { break };
            let delay = Duration::from_millis(parser.retry().unwrap_or(1000).min(30_000));
            if ended.wait_timeout(delay) {
                return Err("cancelled".to_string());
            }
            let mut request = agent
                .get(&self.url)
                .header("accept", "text/event-stream")
                .header("last-event-id", id.as_str());
            if let Some(timeout) = timeout {
                request = request
                    .config()
                    .timeout_recv_response(Some(timeout))
                    .timeout_per_read(Some(timeout))
                    .build();
            }
            let version = lock(&self.version).clone();
            if !version.is_empty() {
                request = request.header("mcp-protocol-version", version.as_str());
            }
            if let Some(session) = lock(&self.session_id).clone() {
                request = request.header("mcp-session-id", session.as_str());
            }
            if let Some(value) = authorization {
                request = request.header("authorization", value);
            }
            let response = request
                .call()
                .map_err(|e| format!("resuming the SSE stream failed: {e}"))?;
            if !(200..300).contains(&response.status().as_u16()) {
                return Err(format!(
                    "resuming the SSE stream failed: HTTP {}",
                    response.status().as_u16()
                ));
            }
            parser = sse::Parser::new();
            let reader = response.into_body().into_reader();
            outcome = self.read_stream(reader, want, &mut parser, &mut last_id);
        }
        outcome.or_else(|ended| match (ended, want) {
            (Ended::Overflowed, _) => Err(format!(
                "the SSE stream sent a line or an event over {} MiB; it was ended",
                sse::MAX_EVENT_BYTES / (1024 * 1024)
            )),
            (Ended::Early, Some(_)) => Err("the SSE stream ended without an answer".to_string()),
            (Ended::Early, None) => Ok(()),
        })
    }

    /// Reads SSE events until the answer to `want` arrives (`Ok`) or the stream ends.
    fn read_stream(
        &self,
        mut reader: impl Read,
        want: Option<u64>,
        parser: &mut sse::Parser,
        last_id: &mut Option<String>,
    ) -> Result<(), Ended> {
        let mut events = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            // A broken stream is resumable like an ended one.
            let n = reader.read(&mut buf).unwrap_or(0);
            if n == 0 {
                parser.finish(&mut events);
            } else {
                parser.feed(&buf[..n], &mut events);
            }
            if parser.overflowed() {
                return Err(Ended::Overflowed);
            }
            for event in events.drain(..) {
                if event.id.is_some() {
                    last_id.clone_from(&event.id);
                }
                if event.data.trim().is_empty() {
                    continue;
                }
                let Ok(value) = serde_json::from_str::<Value>(&event.data) else {
                    continue;
                };
                if self.dispatch_all(value, want) {
                    return Ok(());
                }
            }
            if n == 0 {
                return Err(Ended::Early);
            }
        }
    }
}

impl HttpTransport {
    /// The GET stream's thread: opens the stream, dispatches what comes, opens it again
    /// (after the server's `retry`, from the last event id) when it ends, until the
    /// transport stops or the server refuses (405: it offers no such stream). Tells
    /// `opened` each time the server has answered the GET (or it failed).
    fn listen_loop(&self, agent: &ureq::Agent, opened: crossbeam_channel::Sender<()>) {
        let mut last_id: Option<String> = None;
        let mut failures = 0;
        while !self.stopped.load(std::sync::atomic::Ordering::SeqCst) && failures < MAX_RESUMES {
            let mut request = agent.get(&self.url).header("accept", "text/event-stream");
            let version = lock(&self.version).clone();
            if !version.is_empty() {
                request = request.header("mcp-protocol-version", version.as_str());
            }
            if let Some(session) = lock(&self.session_id).clone() {
                request = request.header("mcp-session-id", session.as_str());
            }
            if let Some(id) = &last_id {
                request = request.header("last-event-id", id.as_str());
            }
            let held = self.auth.as_ref().and_then(|auth| auth.held());
            if let Some(value) = held.as_deref() {
                request = request.header("authorization", value);
            }
            let called = request.call();
            let _ = opened.try_send(());
            let Ok(response) = called else {
                failures += 1;
                continue;
            };
            let status = response.status().as_u16();
            let event_stream = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| t.starts_with("text/event-stream"));
            if !(200..300).contains(&status) || !event_stream {
                return;
            }
            let mut parser = sse::Parser::new();
            let opened = std::time::Instant::now();
            let reader = response.into_body().into_reader();
            let _ = self.read_stream(reader, None, &mut parser, &mut last_id);
            // A stream that lived a while ended normally (servers close idle streams);
            // only streams that end at once count towards giving up.
            if opened.elapsed() >= Duration::from_secs(10) {
                failures = 0;
            }
            failures += 1;
            let delay = Duration::from_millis(parser.retry().unwrap_or(1000).min(30_000));
            let deadline = std::time::Instant::now() + delay;
            while std::time::Instant::now() < deadline
                && !self.stopped.load(std::sync::atomic::Ordering::SeqCst)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Outbound for HttpTransport {
    fn send(&self, message: &Value, cancel: Option<&CancelToken>) -> Result<(), String> {
        let request = message.get("method").is_some() && message.get("id").is_some();
        let timeout = (!request).then(|| NOTICE_TIMEOUT.min(self.read_timeout));
        self.post(message, cancel, timeout)
    }

    fn send_request(
        &self,
        message: &Value,
        cancel: Option<&CancelToken>,
        timeout: Duration,
    ) -> Result<(), String> {
        self.post(message, cancel, Some(timeout))
    }

    fn listen(self: Arc<Self>) {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(self.connect_timeout))
            .user_agent(concat!("agentloop/", env!("CARGO_PKG_VERSION")))
            .max_redirects(0)
            .proxy(None)
            .build()
            .new_agent();
        let name = format!("agentloop-mcp-sse-{}", self.inbound.server());
        let (opened_tx, opened_rx) = crossbeam_channel::bounded(1);
        let transport = Arc::clone(&self);
        let reader = agent.clone();
        let spawned = std::thread::Builder::new()
            .name(name)
            .stack_size(256 * 1024)
            .spawn(move || transport.listen_loop(&reader, opened_tx));
        if let Ok(handle) = spawned {
            *lock(&self.listener) = Some((agent, handle));
            // The stream is open (or refused) before the first request after the handshake
            // goes out: a server that answers a request on whichever GET stream is open
            // (the conformance suite's `sse-retry` does) would otherwise get this one late,
            // mid-request, under load.
            let _ = opened_rx.recv_timeout(NOTICE_TIMEOUT.min(self.read_timeout));
        }
    }

    fn shutdown(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let listener = lock(&self.listener).take();
        if let Some((agent, handle)) = listener {
            agent.shutdown();
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
        // End the server's session, best effort and briefly.
        let Some(id) = lock(&self.session_id).take() else {
            return;
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(2)))
            .http_status_as_error(false)
            .proxy(None)
            .no_delay(true)
            .build()
            .new_agent();
        let mut request = agent
            .delete(&self.url)
            .header("mcp-session-id", id.as_str());
        // Only a token already held: ending a session never starts a login.
        let held = self.auth.as_ref().and_then(|auth| auth.held());
        if let Some(value) = held.as_deref() {
            request = request.header("authorization", value);
        }
        let _ = request.call();
    }

    fn set_version(&self, version: &str) {
        *lock(&self.version) = version.to_string();
    }
}
