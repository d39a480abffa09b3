//! The JSON-RPC pieces both sides of an MCP connection share: the sending half of a
//! transport ([`Outbound`]), why a request got no result ([`RpcFailure`]), and a reply.
//!
//! Types only: nothing here sends, reads or waits.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::cancel::CancelToken;

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
    /// Starts receiving what the server sends outside any request (the Streamable HTTP
    /// GET stream), once the handshake is done.
    fn listen(self: Arc<Self>) {}
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

/// What a waiting request gets: the result, or why there is none.
pub(crate) type Reply = Result<Value, RpcFailure>;
