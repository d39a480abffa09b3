//! HTTP statuses and error bodies → [`Error`]s, shared by every wire format (unified spec
//! §6.4–6.5): the kind of a status, refinement by message, `Retry-After`, the message and
//! code of a JSON error body, key redaction. No I/O: the transport (`http.rs`) hands the
//! status, headers and body here.

use std::time::{Duration, SystemTime};

use crate::error::{Error, ErrorKind, scrub_secrets};
use crate::time::parse_http_date;

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
        // A redirect is a wrong URL, not a server fault: never retried.
        300..=399 => ErrorKind::Configuration,
        _ => ErrorKind::Server,
    }
}

/// The error kind a provider's message implies, if it implies one (unified spec §6.5, plus
/// the phrasings providers actually use for an over-long prompt).
///
/// A request the provider rejects as too long becomes [`ErrorKind::ContextLength`], from
/// its status (413) or from its message, whatever the wire format; the session compacts
/// and retries it once. The shapes recognised (real or documented bodies of each are in
/// `tests/data/conformance/errors/`, with their sources in that folder's README):
///
/// | provider | status | type / code | message text |
/// |---|---|---|---|
/// | Anthropic | 400 | `invalid_request_error` | "prompt is too long" |
/// | Anthropic | 413 | `request_too_large` | (the status) |
/// | OpenAI Responses | 400 | `context_length_exceeded` | "exceeds the context window" |
/// | OpenAI Chat Completions | 400 | `context_length_exceeded` | "maximum context length" |
/// | Ollama (`/v1`) | 400 | `invalid_request_error` | "prompt too long; exceeded max context length" |
/// | llama.cpp server | 400 | `exceed_context_size_error` | "exceeds the available context size" |
/// | vLLM | 400 | `BadRequestError` | "maximum context length", "maximum model length" |
/// | LM Studio | 200 with an SSE `error` event, or 400 | — | "context length" ("loaded with context length of only …", "greater than the context length") |
/// | OpenRouter | 400 | numeric `code` | "maximum context length" |
/// | Groq | 400 | `context_length_exceeded` | "reduce the length of the messages" |
/// | DeepSeek | 400 | `invalid_request_error` | "maximum context length" |
/// | Gemini | 400 | `INVALID_ARGUMENT` | "exceeds the maximum number of tokens" |
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
        // Gemini, vLLM, Groq/DeepSeek, LM Studio, Ollama (see the table above).
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
    use std::time::UNIX_EPOCH;

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
}
