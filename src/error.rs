//! The crate's one public error type.
//!
//! Every fallible public function returns [`Result<T>`](crate::Result). An [`Error`] has a
//! [`kind`](Error::kind) a host can match on, a short human message, and — for errors that
//! came from a provider — the provider id, HTTP status, provider error code and a short
//! excerpt of the response body. It never carries a secret: API keys and bearer tokens are
//! not stored anywhere an error can reach, and body excerpts are scrubbed of anything that
//! looks like a key (see [`scrub_secrets`]).
//!
//! Tool failures are *not* `Error`s: they become tool results with `is_error = true` that
//! the model sees (see `tools`).

use std::fmt;
use std::time::Duration;

/// `Result` with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, as a value a host can `match` on.
///
/// The provider kinds follow the unified LLM specification's error taxonomy (§6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// 401: missing, invalid or expired API key.
    Authentication,
    /// 403: the key is valid but may not do this.
    AccessDenied,
    /// 404: unknown model or endpoint.
    NotFound,
    /// 400 or 422: the request was malformed or used an unsupported parameter.
    InvalidRequest,
    /// 413, or a 400 whose body says the prompt is too long.
    ContextLength,
    /// 429: too many requests; see [`Error::retry_after`].
    RateLimited,
    /// 500–504, 529 and other 5xx: the provider failed or is overloaded.
    Server,
    /// The account's quota or credit is exhausted (retrying will not help).
    Quota,
    /// The provider refused the content (safety filter).
    ContentFilter,
    /// Connecting, sending or receiving failed below HTTP.
    Network,
    /// A connect, first-byte or stall timeout fired, or the provider said 408.
    Timeout,
    /// The stream was malformed or ended early after events had been delivered.
    Stream,
    /// The operation was cancelled through a cancel handle, `interrupt()` or `abort()`.
    Aborted,
    /// The library was configured wrongly (unknown provider, missing key, bad URL).
    Configuration,
    /// The session is closed and accepts no more input.
    SessionClosed,
    /// A local I/O operation of the library itself failed (for example writing a transcript).
    Io,
    /// The model gave no final answer valid against the output schema of
    /// `Session::run_structured` (the message says what was wrong with the last one).
    StructuredOutput,
}

impl ErrorKind {
    /// The kind's name in lower snake case, as used in JSON events (`"rate_limited"`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Authentication => "authentication",
            ErrorKind::AccessDenied => "access_denied",
            ErrorKind::NotFound => "not_found",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::ContextLength => "context_length",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Server => "server",
            ErrorKind::Quota => "quota",
            ErrorKind::ContentFilter => "content_filter",
            ErrorKind::Network => "network",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Stream => "stream",
            ErrorKind::Aborted => "aborted",
            ErrorKind::Configuration => "configuration",
            ErrorKind::SessionClosed => "session_closed",
            ErrorKind::Io => "io",
            ErrorKind::StructuredOutput => "structured_output",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The crate's error: a [`kind`](Self::kind), a message, and provider details when a
/// provider produced it.
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    message: String,
    provider: Option<String>,
    status: Option<u16>,
    code: Option<String>,
    body_excerpt: Option<String>,
    retry_after: Option<Duration>,
    /// The failure already spent its retries (a recorded one, replayed): never retried.
    final_attempt: bool,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// How much of a provider's error body an [`Error`] keeps.
const BODY_EXCERPT_CHARS: usize = 400;

impl Error {
    /// A new error of `kind` with `message` (lower-case, no trailing period).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                provider: None,
                status: None,
                code: None,
                body_excerpt: None,
                retry_after: None,
                final_attempt: false,
                source: None,
            }),
        }
    }

    /// Sets the provider id (`"anthropic"`, `"openai"`, ...).
    pub fn with_provider(mut self, provider: impl Into<String>) -> Error {
        self.inner.provider = Some(provider.into());
        self
    }

    /// Sets the HTTP status.
    pub fn with_status(mut self, status: u16) -> Error {
        self.inner.status = Some(status);
        self
    }

    /// Sets the provider's own error code or type (`"rate_limit_error"`, `"invalid_api_key"`).
    pub fn with_code(mut self, code: impl Into<String>) -> Error {
        self.inner.code = Some(code.into());
        self
    }

    /// Keeps a short, secret-scrubbed excerpt of a response body.
    pub fn with_body(mut self, body: &str) -> Error {
        let scrubbed = scrub_secrets(body.trim());
        let excerpt: String = scrubbed.chars().take(BODY_EXCERPT_CHARS).collect();
        self.inner.body_excerpt = Some(excerpt);
        self
    }

    /// Sets how long the provider asked us to wait before retrying.
    pub fn with_retry_after(mut self, retry_after: Duration) -> Error {
        self.inner.retry_after = Some(retry_after);
        self
    }

    /// Marks the failure as final: the retries it deserved were already spent (a replay of
    /// a recorded failure), so [`is_retryable`](Self::is_retryable) says no.
    pub(crate) fn marked_final(mut self) -> Error {
        self.inner.final_attempt = true;
        self
    }

    /// Replaces the message, keeping everything else (for an adapter that adds what only it
    /// knows to a classified error).
    pub(crate) fn with_message(mut self, message: impl Into<String>) -> Error {
        self.inner.message = message.into();
        self
    }

    /// Sets the underlying cause.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Error {
        self.inner.source = Some(Box::new(source));
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// The provider that produced the error, if any.
    pub fn provider(&self) -> Option<&str> {
        self.inner.provider.as_deref()
    }

    /// The HTTP status, if the error came from an HTTP response.
    pub fn status(&self) -> Option<u16> {
        self.inner.status
    }

    /// The provider's error code or type, if it sent one.
    pub fn code(&self) -> Option<&str> {
        self.inner.code.as_deref()
    }

    /// A short excerpt of the provider's response body, scrubbed of secrets.
    pub fn body_excerpt(&self) -> Option<&str> {
        self.inner.body_excerpt.as_deref()
    }

    /// How long the provider asked to wait (`retry-after` header or body hint).
    pub fn retry_after(&self) -> Option<Duration> {
        self.inner.retry_after
    }

    /// Whether retrying the same request may succeed (unified spec §6.3): never for a
    /// replayed recording of a failure, whose retries were spent when it was recorded.
    pub fn is_retryable(&self) -> bool {
        if self.inner.final_attempt {
            return false;
        }
        match self.inner.kind {
            ErrorKind::RateLimited | ErrorKind::Server | ErrorKind::Network | ErrorKind::Stream => {
                true
            }
            ErrorKind::Authentication
            | ErrorKind::AccessDenied
            | ErrorKind::NotFound
            | ErrorKind::InvalidRequest
            | ErrorKind::ContextLength
            | ErrorKind::Quota
            | ErrorKind::ContentFilter
            | ErrorKind::Timeout
            | ErrorKind::Aborted
            | ErrorKind::Configuration
            | ErrorKind::SessionClosed
            | ErrorKind::Io
            | ErrorKind::StructuredOutput => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.inner.provider, self.inner.status) {
            (Some(provider), Some(status)) => write!(f, "{provider} returned {status}: ")?,
            (Some(provider), None) => write!(f, "{provider}: ")?,
            (None, Some(status)) => write!(f, "status {status}: ")?,
            (None, None) => {}
        }
        f.write_str(&self.inner.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Error");
        s.field("kind", &self.inner.kind)
            .field("message", &self.inner.message);
        if let Some(p) = &self.inner.provider {
            s.field("provider", p);
        }
        if let Some(st) = self.inner.status {
            s.field("status", &st);
        }
        if let Some(c) = &self.inner.code {
            s.field("code", c);
        }
        if let Some(b) = &self.inner.body_excerpt {
            s.field("body_excerpt", b);
        }
        if let Some(r) = self.inner.retry_after {
            s.field("retry_after", &r);
        }
        if let Some(src) = &self.inner.source {
            s.field("source", &src.to_string());
        }
        s.finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_ref()
            .map(|e| e.as_ref() as &(dyn std::error::Error + 'static))
    }
}

impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Error {
        Error::new(ErrorKind::Io, err.to_string()).with_source(err)
    }
}

/// Replaces anything in `text` that has the shape of a well-known credential with
/// `[REDACTED]`: `sk-…`, `sk-ant-…`, `ghp_…`, `github_pat_…`, `xoxb-…`/`xoxp-…`, `AKIA…`,
/// `AIza…` and `Bearer …` tokens.
///
/// Used on every provider body excerpt kept in an [`Error`], so that a server that echoes a
/// request header back cannot leak the key through an error message.
pub(crate) fn scrub_secrets(text: &str) -> String {
    use std::sync::OnceLock;
    static PATTERN: OnceLock<regex::Regex> = OnceLock::new();
    let re = PATTERN.get_or_init(|| {
        regex::Regex::new(
            r"(?x)
              (?:sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,})
            | (?:gh[pousr]_[A-Za-z0-9]{30,})
            | (?:github_pat_[A-Za-z0-9_]{30,})
            | (?:xox[bpas]-[A-Za-z0-9\-]{10,})
            | (?:AKIA[0-9A-Z]{16})
            | (?:AIza[0-9A-Za-z_\-]{30,})
            | (?:(?i:bearer)\s+[A-Za-z0-9._\-]{16,})",
        )
        .expect("the secret pattern is valid")
    });
    re.replace_all(text, "[REDACTED]").into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryability_follows_the_taxonomy() {
        assert!(Error::new(ErrorKind::RateLimited, "x").is_retryable());
        assert!(Error::new(ErrorKind::Server, "x").is_retryable());
        assert!(!Error::new(ErrorKind::Authentication, "x").is_retryable());
        assert!(!Error::new(ErrorKind::ContextLength, "x").is_retryable());
    }

    #[test]
    fn body_excerpts_are_scrubbed_and_short() {
        let key = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789";
        let body = format!("{{\"error\":\"bad key {key}\"}}{}", "x".repeat(1000));
        let err = Error::new(ErrorKind::Authentication, "invalid key").with_body(&body);
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(key), "{shown}");
        assert!(err.body_excerpt().unwrap().contains("[REDACTED]"));
        assert!(err.body_excerpt().unwrap().chars().count() <= BODY_EXCERPT_CHARS);
    }

    #[test]
    fn display_names_provider_and_status() {
        let err = Error::new(ErrorKind::NotFound, "model: nope")
            .with_provider("anthropic")
            .with_status(404);
        assert_eq!(err.to_string(), "anthropic returned 404: model: nope");
    }
}
