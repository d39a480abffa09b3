//! HTTP plumbing over ureq, shared by every wire format.
//!
//! One `ureq::Agent` per request, so that a [`CancelToken`] callback can call
//! `Agent::shutdown()` from another thread and end a blocked read at once. Statuses are not
//! errors to ureq (`http_status_as_error(false)`): this module reads the body of a failed
//! response and lets the wire format classify it. Connect, time-to-first-byte and
//! stream-stall (`timeout_per_read`) timeouts come from [`HttpOptions`].
//!
//! A wire format (one file per format in `llm/`) implements [`WireFormat`] (request
//! building and error classification) and [`Decoder`] (SSE events to [`StreamEvent`]s);
//! this module does everything between.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::llm::sse;
use crate::llm::{Request, StreamEvent};

/// Timeouts and transport settings of an HTTP provider.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HttpOptions {
    /// TCP (and TLS) connect timeout. ureq cannot interrupt a connect in progress, so keep
    /// it modest. Default 10 s.
    pub connect_timeout: Duration,
    /// From sending the request to receiving the response headers. Default 120 s.
    pub first_byte_timeout: Duration,
    /// Longest silence allowed between two reads of a streaming body. Default 120 s.
    pub stall_timeout: Duration,
    /// Whether to honour `HTTPS_PROXY`/`NO_PROXY` from the environment. Default `true`.
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

/// A request ready to send: everything a wire format decides.
#[allow(dead_code)] // used by the wire formats as they land
pub(crate) struct HttpRequest {
    /// Full URL.
    pub(crate) url: String,
    /// Headers, including authentication. Never printed or logged.
    pub(crate) headers: Vec<(String, String)>,
    /// JSON body.
    pub(crate) body: Vec<u8>,
}

/// What a wire format knows: how to build its request and how to read its errors.
#[allow(dead_code)] // implemented by the wire formats as they land
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
#[allow(dead_code)] // implemented by the wire formats as they land
pub(crate) trait Decoder: Send {
    /// Handles one SSE event. An in-stream error event returns `Err`.
    fn event(&mut self, event: sse::Event, out: &mut Vec<StreamEvent>) -> Result<()>;
    /// The body ended. Emits the final `Finish` (or returns a stream error if the stream
    /// ended before the provider's terminal event where it has one).
    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<()>;
}
