//! One MCP connection: JSON-RPC 2.0 requests multiplexed by id over a transport, the
//! two protocol eras (the `2026-07-28` `server/discover` probe, then the `initialize`
//! handshake of the earlier revisions), progress-reset timeouts and cancellation, and the
//! `2026-07-28` retry of a request whose result asks for input first.
//!
//! It never spawns a process or opens a socket itself (the transports in `stdio.rs` and
//! `http.rs` do) and never blocks without a deadline or a cancel token to end the wait.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::{Map, Value, json};

use crate::cancel::CancelToken;

use super::inbound::Inbound;
use super::rpc::{Outbound, Reply, RpcFailure};
use crate::sync::lock;

/// The revision with `server/discover` and per-request `_meta` (no handshake).
pub(crate) const MODERN_VERSION: &str = "2026-07-28";
/// The handshake revisions this client speaks, newest first.
pub(crate) const LEGACY_VERSIONS: [&str; 4] =
    ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// The error code a `2026-07-28` server answers an unsupported revision with.
pub(crate) const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// What the server told about itself when the connection was set up.
#[derive(Debug, Clone)]
pub(crate) struct ServerInfo {
    /// The revision in use.
    pub version: String,
    /// The server's `capabilities` (`tools`, `resources`, `prompts`, …).
    pub capabilities: Value,
}

impl ServerInfo {
    /// Whether the server declared the capability `name`.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.capabilities.get(name).is_some_and(|c| !c.is_null())
    }
}

/// How many times one request is retried with the input its result asked for.
const MAX_INPUT_ROUNDS: usize = 8;

/// A live connection to one server.
pub(crate) struct Connection {
    out: Arc<dyn Outbound>,
    inbound: Arc<Inbound>,
    next_id: AtomicU64,
    modern: AtomicBool,
}

impl Connection {
    /// A connection over `out`, whose reader feeds `inbound` (which answers the server's
    /// requests through `out`).
    pub(crate) fn new(out: Arc<dyn Outbound>, inbound: Arc<Inbound>) -> Connection {
        inbound.set_responder(Arc::downgrade(&out));
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
        let modern = |result: Option<&Value>| ServerInfo {
            version: MODERN_VERSION.to_string(),
            capabilities: result
                .and_then(|r| r.get("capabilities"))
                .cloned()
                .unwrap_or(Value::Null),
        };
        self.modern.store(true, Ordering::SeqCst);
        self.out.set_version(MODERN_VERSION);
        let left = deadline.saturating_duration_since(Instant::now());
        // Most of the startup budget: a server that is merely slow to start (Python,
        // `npx`) answers the probe late, and one that answered it is committed to it.
        let probe_timeout = left * 2 / 3;
        // A late answer is kept: it still tells the capabilities (`late_capabilities`).
        let probe_id = self.next_id.load(Ordering::Relaxed);
        self.inbound.keep_late.store(probe_id, Ordering::SeqCst);
        let probe = self.request("server/discover", json!({}), probe_timeout, cancel);
        match &probe {
            // A handshake-era server may answer any method with an empty result: only an
            // answer naming this revision counts.
            Ok(result) => {
                let versions = result.get("supportedVersions").and_then(Value::as_array);
                if versions.is_some_and(|v| v.iter().any(|v| v == MODERN_VERSION)) {
                    return Ok(modern(Some(result)));
                }
            }
            Err(RpcFailure::Error { code, .. }) if *code == UNSUPPORTED_PROTOCOL_VERSION => {
                return Ok(modern(None));
            }
            Err(RpcFailure::Cancelled | RpcFailure::Closed(_)) => {
                return probe.map(|r| modern(Some(&r)));
            }
            // Any other error, a timeout, or an HTTP server refusing the probe (400).
            Err(_) => {}
        }
        self.modern.store(false, Ordering::SeqCst);
        self.out.set_version(LEGACY_VERSIONS[0]);
        let left = deadline.saturating_duration_since(Instant::now());
        let params = json!({
            "protocolVersion": LEGACY_VERSIONS[0],
            "capabilities": self.inbound.context().capabilities(),
            "clientInfo": client_info(),
        });
        let result = match self.request("initialize", params, left, cancel) {
            Ok(result) => result,
            // The probe's answer came after its timeout and the server now serves
            // 2026-07-28 on this connection.
            Err(RpcFailure::Error { code, .. }) if code == UNSUPPORTED_PROTOCOL_VERSION => {
                self.modern.store(true, Ordering::SeqCst);
                self.out.set_version(MODERN_VERSION);
                return Ok(modern(None));
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
        Arc::clone(&self.out).listen();
        Ok(ServerInfo {
            version,
            capabilities: result.get("capabilities").cloned().unwrap_or(Value::Null),
        })
    }

    /// The capabilities from a `server/discover` answer that came after the probe timed
    /// out, once it has come.
    pub(crate) fn late_capabilities(&self) -> Option<Value> {
        lock(&self.inbound.late)
            .as_ref()
            .and_then(|r| r.get("capabilities"))
            .cloned()
    }

    /// Whether the server sent `notifications/<list>/list_changed` since the last look
    /// (`list`: `"tools"`, `"resources"` or `"prompts"`); the flag is cleared.
    pub(crate) fn take_changed(&self, list: &str) -> bool {
        let flag = match list {
            "tools" => &self.inbound.changed.tools,
            "resources" => &self.inbound.changed.resources,
            _ => &self.inbound.changed.prompts,
        };
        flag.swap(false, Ordering::SeqCst)
    }

    /// Whether the server said its tools changed, without clearing the flag.
    pub(crate) fn tools_changed(&self) -> bool {
        self.inbound.changed.tools.load(Ordering::SeqCst)
    }

    /// Sends `request` and, while its result asks for input first (`2026-07-28`
    /// `input_required`: elicitations, roots), gathers that input from the client side
    /// and retries with it (at most [`MAX_INPUT_ROUNDS`] times).
    pub(crate) fn request_with_input(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        cancel: &CancelToken,
    ) -> Result<Value, RpcFailure> {
        let mut result = self.request(method, params.clone(), timeout, cancel)?;
        for _ in 0..MAX_INPUT_ROUNDS {
            if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
                return Ok(result);
            }
            let mut retry = params.clone();
            let context = self.inbound.context();
            let mut responses = Map::new();
            let requests = result.get("inputRequests").and_then(Value::as_object);
            for (key, input) in requests.into_iter().flatten().take(16) {
                let method = input.get("method").and_then(Value::as_str).unwrap_or("");
                let empty = json!({});
                let params = input.get("params").unwrap_or(&empty);
                let answer = context.answer(self.inbound.server(), method, params, cancel);
                // A refused input (sampling, an invalid form) is left out: the server
                // asks again or fails the request.
                if let Ok(answer) = answer {
                    responses.insert(key.clone(), answer);
                }
            }
            if cancel.is_cancelled() {
                return Err(RpcFailure::Cancelled);
            }
            if let Value::Object(retry) = &mut retry {
                retry.insert("inputResponses".to_string(), Value::Object(responses));
                if let Some(state) = result.get("requestState") {
                    retry.insert("requestState".to_string(), state.clone());
                }
            }
            result = self.request(method, retry, timeout, cancel)?;
        }
        Err(RpcFailure::Error {
            code: -32603,
            message: format!("the server asked for input more than {MAX_INPUT_ROUNDS} times"),
        })
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
                self.inbound.context().capabilities(),
            );
            meta.insert(
                "io.modelcontextprotocol/clientInfo".to_string(),
                client_info(),
            );
        }
        meta
    }

    /// Tells the server that the roots changed (it lists them again).
    pub(crate) fn roots_changed(&self) {
        let _ = self.notify("notifications/roots/list_changed", json!({}));
    }

    /// Ends the transport (and the server) and the thread answering its requests.
    pub(crate) fn shutdown(&self) {
        self.out.shutdown();
        self.inbound
            .close("the client shut the connection down".to_string());
        self.inbound.stop_worker();
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
