//! Error classification for OpenAI-style error bodies (`{"error": {message, type, code}}`);
//! it never does I/O and never keeps a key (messages and body excerpts are scrubbed). It is
//! shared by the Responses and Chat Completions formats and by the servers that copy the
//! shape (Groq, OpenRouter, llama.cpp, vLLM, Ollama). Builds on the status and message
//! rules in `llm::status` (unified spec §6.4–6.5) and adds what OpenAI's own codes say.

use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, ErrorKind, scrub_secrets};
use crate::llm::status;

/// The error for an OpenAI-style error body. `status` is `None` for an error that arrived
/// inside a 200 stream (an `error` event or an `{"error": …}` chunk).
pub(crate) fn openai_error(
    provider: &str,
    status: Option<u16>,
    headers: &[(String, String)],
    body: &str,
) -> Error {
    #[derive(Deserialize)]
    struct Envelope {
        error: Option<ErrorBody>,
    }
    #[derive(Deserialize)]
    struct ErrorBody {
        #[serde(default, rename = "type")]
        kind: Option<String>,
        #[serde(default)]
        code: Option<Value>,
        #[serde(default)]
        message: Option<String>,
    }
    let parsed = serde_json::from_str::<Envelope>(body)
        .ok()
        .and_then(|e| e.error);
    let (kind, code, message) = match parsed {
        Some(e) => (e.kind, e.code, e.message),
        None => (None, None, None),
    };
    let message = message
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| status::message_from_body(body, status));
    let mut error = provider_error(provider, status, code.as_ref(), kind.as_deref(), &message);
    if let Some(wait) = status::retry_after_from_headers(headers) {
        error = error.with_retry_after(wait);
    }
    if !body.trim().is_empty() {
        error = error.with_body(body);
    }
    error
}

/// An error from a provider's code, type, status and message.
pub(crate) fn provider_error(
    provider: &str,
    status: Option<u16>,
    code: Option<&Value>,
    kind: Option<&str>,
    message: &str,
) -> Error {
    let code_text = match code {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let error_kind = classify(status, code_text.as_deref(), kind, message);
    let mut error = Error::new(error_kind, scrub_secrets(message)).with_provider(provider);
    if let Some(status) = status {
        error = error.with_status(status);
    }
    // The most specific identifier: a string code, else the type, else a numeric code.
    let shown = match code {
        Some(Value::String(s)) => Some(s.clone()),
        _ => kind.map(str::to_string).or(code_text),
    };
    if let Some(shown) = shown {
        error = error.with_code(shown);
    }
    error
}

/// The error kind: OpenAI's specific codes and types first (a 429 `insufficient_quota` is
/// a quota error, not a rate limit), then the status refined by the message; an in-stream
/// error with nothing recognisable is a server error (retryable, unified spec §6.3).
pub(crate) fn classify(
    status: Option<u16>,
    code: Option<&str>,
    kind: Option<&str>,
    message: &str,
) -> ErrorKind {
    for id in [code, kind].into_iter().flatten() {
        match id {
            "context_length_exceeded" | "exceed_context_size_error" | "string_above_max_length" => {
                return ErrorKind::ContextLength;
            }
            "insufficient_quota" | "billing_hard_limit_reached" => return ErrorKind::Quota,
            "rate_limit_exceeded" | "rate_limit_error" => return ErrorKind::RateLimited,
            "invalid_api_key" | "authentication_error" => return ErrorKind::Authentication,
            "model_not_found" | "not_found_error" => return ErrorKind::NotFound,
            // A generic type under a clear client status (Ollama's 404 `api_error` for a
            // missing model) is that status's error, not a server error to retry.
            "server_error" | "overloaded_error" | "api_error" | "server_is_overloaded"
                if !status.is_some_and(|s| matches!(s, 401 | 403 | 404)) =>
            {
                return ErrorKind::Server;
            }
            "content_filter" | "content_policy_violation" => return ErrorKind::ContentFilter,
            _ => {}
        }
    }
    match status {
        Some(status) => status::classify(status, message),
        None => match (status::kind_from_message(message), kind) {
            (Some(found), _) => found,
            (None, Some("invalid_request_error")) => ErrorKind::InvalidRequest,
            (None, _) => ErrorKind::Server,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_win_over_statuses_and_messages() {
        let k = |status, code, kind, message| classify(status, code, kind, message);
        assert_eq!(
            k(Some(429), Some("insufficient_quota"), None, "x"),
            ErrorKind::Quota
        );
        assert_eq!(
            k(Some(400), Some("context_length_exceeded"), None, "x"),
            ErrorKind::ContextLength
        );
        assert_eq!(
            k(Some(400), None, Some("exceed_context_size_error"), "x"),
            ErrorKind::ContextLength
        );
        assert_eq!(
            k(
                Some(400),
                None,
                Some("invalid_request_error"),
                "This model's maximum context length is 128000 tokens"
            ),
            ErrorKind::ContextLength
        );
        assert_eq!(k(Some(503), None, None, "x"), ErrorKind::Server);
        assert_eq!(k(None, None, None, "something odd"), ErrorKind::Server);
        assert_eq!(
            k(
                None,
                Some("tool_use_failed"),
                Some("invalid_request_error"),
                "x"
            ),
            ErrorKind::InvalidRequest
        );
    }

    #[test]
    fn a_body_that_is_not_json_keeps_its_text() {
        let err = openai_error("openai", Some(502), &[], "Bad Gateway");
        assert_eq!(err.kind(), ErrorKind::Server);
        assert_eq!(err.message(), "Bad Gateway");
        assert_eq!(err.status(), Some(502));
    }

    #[test]
    fn retry_after_headers_are_kept() {
        let headers = vec![("retry-after".to_string(), "2".to_string())];
        let body =
            r#"{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}"#;
        let err = openai_error("openai", Some(429), &headers, body);
        assert_eq!(err.kind(), ErrorKind::RateLimited);
        assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(2)));
        assert_eq!(err.code(), Some("rate_limit_exceeded"));
    }
}
