//! One MCP connection: JSON-RPC 2.0 requests multiplexed by id over a transport, the
//! two protocol eras (the `2026-07-28` `server/discover` probe, then the `initialize`
//! handshake of the earlier revisions), progress-reset timeouts and cancellation.
//!
//! It never spawns a process or opens a socket itself (the transports in `stdio.rs` and
//! `http.rs` do) and never blocks without a deadline or a cancel token to end the wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde_json::{Map, Value, json};

use crate::cancel::CancelToken;

use crate::sync::lock;

/// The revision with `server/discover` and per-request `_meta` (no handshake).
pub(crate) const MODERN_VERSION: &str = "2026-07-28";
/// The handshake revisions this client speaks, newest first.
pub(crate) const LEGACY_VERSIONS: [&str; 4] =
    ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// The error code a `2026-07-28` server answers an unsupported revision with.
pub(crate) const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// Sends one JSON-RPC message to the server.
pub(crate) trait Outbound: Send + Sync {
    /// Sends `message`; `cancel`, when given, may end a send that blocks (HTTP).
    fn send(&self, message: &Value, cancel: Option<&CancelToken>) -> Result<(), String>;
    /// [`send`](Self::send) of a request whose answer may keep the server silent for at
    /// most `timeout`: a transport whose send waits for the answer (HTTP) gives up then.
    fn send_request(
        &self,
        message: &Value,
        cancel: Option<&CancelToken>,
        _timeout: Duration,
    ) -> Result<(), String> {
        self.send(message, cancel)
    }
    /// Stops the transport (ends the server process, closes sockets); idempotent.
    fn shutdown(&self);
    /// What the server said on stderr lately (stdio), for error messages.
    fn stderr_tail(&self) -> String {
        String::new()
    }
    /// The protocol revision to announce in transport headers (HTTP).
    fn set_version(&self, _version: &str) {}
}

/// Why a request got no result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RpcFailure {
    /// The server answered with a JSON-RPC error.
    Error { code: i64, message: String },
    /// No answer within the timeout (reset by progress).
    Timeout(Duration),
    /// The cancel token fired.
    Cancelled,
    /// The connection closed (the server exited, the stream broke).
    Closed(String),
    /// The request could not be sent.
    Send(String),
}

impl std::fmt::Display for RpcFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RpcFailure::Error { code, message } => write!(f, "error {code}: {message}"),
            RpcFailure::Timeout(t) => write!(f, "no answer within {} ms", t.as_millis()),
            RpcFailure::Cancelled => write!(f, "cancelled"),
            RpcFailure::Closed(why) => write!(f, "the connection closed: {why}"),
            RpcFailure::Send(why) => write!(f, "could not send: {why}"),
        }
    }
}

type Reply = Result<Value, RpcFailure>;

/// The side of a connection that handles what the server sends: responses (by id),
/// progress notifications (by token), `list_changed`, and the server's own requests.
#[derive(Default)]
pub(crate) struct Inbound {
    pending: Mutex<HashMap<u64, Sender<Reply>>>,
    progress: Mutex<HashMap<u64, Sender<()>>>,
    tools_changed: AtomicBool,
    closed: Mutex<Option<String>>,
}

impl Inbound {
    /// Handles one message from the server. Requests the client does not serve are
    /// answered with "method not found" (`ping` with an empty result) through `out`.
    pub(crate) fn dispatch(&self, message: Value, out: &dyn Outbound) {
        let Value::Object(mut message) = message else {
            return;
        };
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let id = message.remove("id");
        match (method, id) {
            (None, Some(id)) => {
                let Some(id) = id.as_u64() else { return };
                let reply = match message.remove("error") {
                    Some(error) => Err(RpcFailure::Error {
                        code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                        message: error
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    }),
                    None => Ok(message.remove("result").unwrap_or(Value::Null)),
                };
                if let Some(waiter) = lock(&self.pending).remove(&id) {
                    let _ = waiter.send(reply);
                }
            }
            (Some(method), Some(id)) => {
                let answer = if method == "ping" {
                    json!({"jsonrpc": "2.0", "id": id, "result": {}})
                } else {
                    json!({"jsonrpc": "2.0", "id": id,
                           "error": {"code": -32601, "message": "Method not found"}})
                };
                let _ = out.send(&answer, None);
            }
            (Some(method), None) => match method.as_str() {
                "notifications/progress" => {
                    let token = message
                        .get("params")
                        .and_then(|p| p.get("progressToken"))
                        .and_then(Value::as_u64);
                    if let Some(token) = token {
                        if let Some(bump) = lock(&self.progress).get(&token) {
                            let _ = bump.try_send(());
                        }
                    }
                }
                "notifications/tools/list_changed" => {
                    self.tools_changed.store(true, Ordering::SeqCst);
                }
                _ => {}
            },
            (None, None) => {}
        }
    }

    /// The connection is gone: every waiting request fails with `why`.
    pub(crate) fn close(&self, why: String) {
        let mut closed = lock(&self.closed);
        if closed.is_none() {
            *closed = Some(why.clone());
        }
        drop(closed);
        for (_, waiter) in lock(&self.pending).drain() {
            let _ = waiter.send(Err(RpcFailure::Closed(why.clone())));
        }
    }

    fn closed(&self) -> Option<String> {
        lock(&self.closed).clone()
    }
}

/// What the server told about itself when the connection was set up.
#[derive(Debug, Clone)]
pub(crate) struct ServerInfo {
    /// The revision in use.
    pub version: String,
}

/// A live connection to one server.
pub(crate) struct Connection {
    out: Box<dyn Outbound>,
    inbound: Arc<Inbound>,
    next_id: AtomicU64,
    modern: AtomicBool,
}

impl Connection {
    /// A connection over `out`, whose reader feeds `inbound`.
    pub(crate) fn new(out: Box<dyn Outbound>, inbound: Arc<Inbound>) -> Connection {
        Connection {
            out,
            inbound,
            next_id: AtomicU64::new(1),
            modern: AtomicBool::new(false),
        }
    }

    /// Sets the connection up within `deadline`: probes `server/discover` (staying with
    /// `2026-07-28` on an answer or −32022), else runs the `initialize` handshake.
    pub(crate) fn handshake(
        &self,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<ServerInfo, RpcFailure> {
        let modern = ServerInfo {
            version: MODERN_VERSION.to_string(),
        };
        self.modern.store(true, Ordering::SeqCst);
        self.out.set_version(MODERN_VERSION);
        let left = deadline.saturating_duration_since(Instant::now());
        // Most of the startup budget: a server that is merely slow to start (Python,
        // `npx`) answers the probe late, and one that answered it is committed to it.
        let probe_timeout = left * 2 / 3;
        let probe = self.request("server/discover", json!({}), probe_timeout, cancel);
        match &probe {
            // A handshake-era server may answer any method with an empty result: only an
            // answer naming this revision counts.
            Ok(result) => {
                let versions = result.get("supportedVersions").and_then(Value::as_array);
                if versions.is_some_and(|v| v.iter().any(|v| v == MODERN_VERSION)) {
                    return Ok(modern);
                }
            }
            Err(RpcFailure::Error { code, .. }) if *code == UNSUPPORTED_PROTOCOL_VERSION => {
                return Ok(modern);
            }
            Err(RpcFailure::Cancelled | RpcFailure::Closed(_)) => return probe.map(|_| modern),
            // Any other error, a timeout, or an HTTP server refusing the probe (400).
            Err(_) => {}
        }
        self.modern.store(false, Ordering::SeqCst);
        self.out.set_version(LEGACY_VERSIONS[0]);
        let left = deadline.saturating_duration_since(Instant::now());
        let params = json!({
            "protocolVersion": LEGACY_VERSIONS[0],
            "capabilities": {},
            "clientInfo": client_info(),
        });
        let result = match self.request("initialize", params, left, cancel) {
            Ok(result) => result,
            // The probe's answer came after its timeout and the server now serves
            // 2026-07-28 on this connection.
            Err(RpcFailure::Error { code, .. }) if code == UNSUPPORTED_PROTOCOL_VERSION => {
                self.modern.store(true, Ordering::SeqCst);
                self.out.set_version(MODERN_VERSION);
                return Ok(modern);
            }
            Err(other) => return Err(other),
        };
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !LEGACY_VERSIONS.contains(&version.as_str()) {
            return Err(RpcFailure::Error {
                code: UNSUPPORTED_PROTOCOL_VERSION,
                message: format!("the server answered with unsupported revision `{version}`"),
            });
        }
        self.out.set_version(&version);
        self.notify("notifications/initialized", json!({}))?;
        Ok(ServerInfo { version })
    }

    /// Whether the server sent `notifications/tools/list_changed` since the last call.
    pub(crate) fn take_tools_changed(&self) -> bool {
        self.inbound.tools_changed.swap(false, Ordering::SeqCst)
    }

    /// Whether the connection is closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.inbound.closed().is_some()
    }

    /// The server's recent stderr.
    pub(crate) fn stderr_tail(&self) -> String {
        self.out.stderr_tail()
    }

    /// Sends a notification (with the era's `_meta` in `2026-07-28`).
    pub(crate) fn notify(&self, method: &str, mut params: Value) -> Result<(), RpcFailure> {
        if self.modern.load(Ordering::SeqCst) {
            let mut meta = self.meta(0);
            meta.remove("progressToken");
            params["_meta"] = Value::Object(meta);
        }
        let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.out.send(&message, None).map_err(RpcFailure::Send)
    }

    /// Sends a request and waits for its answer: at most `timeout` of silence (each
    /// progress notification for it starts the timeout again), or until `cancel` fires.
    /// A timed-out or cancelled request is followed by `notifications/cancelled`.
    pub(crate) fn request(
        &self,
        method: &str,
        mut params: Value,
        timeout: Duration,
        cancel: &CancelToken,
    ) -> Result<Value, RpcFailure> {
        if cancel.is_cancelled() {
            return Err(RpcFailure::Cancelled);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let meta = self.meta(id);
        if let Value::Object(params) = &mut params {
            params.insert("_meta".to_string(), Value::Object(meta));
        }
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (reply_tx, reply_rx) = crossbeam_channel::bounded(1);
        let (bump_tx, bump_rx) = crossbeam_channel::bounded(1);
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(1);
        lock(&self.inbound.pending).insert(id, reply_tx);
        lock(&self.inbound.progress).insert(id, bump_tx);
        // Looked at once the request is pending: `close` marks the connection closed before
        // it fails the pending requests, so either it finds this one or this look finds it
        // closed. (Looked at before, a close in between left the request waiting for its
        // whole timeout: a server that exits at once could hold start-up for 30 s.)
        if let Some(why) = self.inbound.closed() {
            lock(&self.inbound.pending).remove(&id);
            lock(&self.inbound.progress).remove(&id);
            return Err(RpcFailure::Closed(why));
        }
        let _guard = cancel.on_cancel(move || {
            let _ = stop_tx.try_send(());
        });
        let sent = Instant::now();
        let result = match self.out.send_request(&message, Some(cancel), timeout) {
            Ok(()) => wait(&reply_rx, &bump_rx, &stop_rx, timeout),
            Err(_) if cancel.is_cancelled() => Err(RpcFailure::Cancelled),
            // A send that waited for the answer (HTTP) and gave up at the timeout.
            Err(_) if sent.elapsed() >= timeout => Err(RpcFailure::Timeout(timeout)),
            Err(why) => Err(RpcFailure::Send(why)),
        };
        lock(&self.inbound.pending).remove(&id);
        lock(&self.inbound.progress).remove(&id);
        if matches!(result, Err(RpcFailure::Cancelled | RpcFailure::Timeout(_))) {
            let reason = match &result {
                Err(RpcFailure::Cancelled) => "cancelled by the user",
                _ => "timed out",
            };
            let _ = self.notify(
                "notifications/cancelled",
                json!({"requestId": id, "reason": reason}),
            );
        }
        // A reply that raced the failure still counts.
        match result {
            Err(RpcFailure::Timeout(_) | RpcFailure::Cancelled) => match reply_rx.try_recv() {
                Ok(reply) if !cancel.is_cancelled() => reply,
                _ => result,
            },
            other => other,
        }
    }

    /// The request `_meta`: a progress token, and in `2026-07-28` the revision, the
    /// client's capabilities and its name.
    fn meta(&self, id: u64) -> Map<String, Value> {
        let mut meta = Map::new();
        meta.insert("progressToken".to_string(), json!(id));
        if self.modern.load(Ordering::SeqCst) {
            meta.insert(
                "io.modelcontextprotocol/protocolVersion".to_string(),
                json!(MODERN_VERSION),
            );
            meta.insert(
                "io.modelcontextprotocol/clientCapabilities".to_string(),
                json!({}),
            );
            meta.insert(
                "io.modelcontextprotocol/clientInfo".to_string(),
                client_info(),
            );
        }
        meta
    }

    /// Ends the transport (and the server).
    pub(crate) fn shutdown(&self) {
        self.out.shutdown();
        self.inbound
            .close("the client shut the connection down".to_string());
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Waits for a reply, restarting the timeout on each progress bump.
fn wait(
    reply: &Receiver<Reply>,
    bump: &Receiver<()>,
    stop: &Receiver<()>,
    timeout: Duration,
) -> Reply {
    let mut deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        crossbeam_channel::select! {
            recv(reply) -> got => {
                return got.unwrap_or_else(|_| {
                    Err(RpcFailure::Closed("the reader stopped".to_string()))
                });
            }
            recv(bump) -> _ => deadline = Instant::now() + timeout,
            recv(stop) -> _ => return Err(RpcFailure::Cancelled),
            default(left) => return Err(RpcFailure::Timeout(timeout)),
        }
    }
}

fn client_info() -> Value {
    json!({"name": "agentloop", "version": env!("CARGO_PKG_VERSION")})
}
