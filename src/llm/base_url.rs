//! Checking a provider's base URL when it is set, and naming the URL a request went to in
//! transport errors; it never sends anything and never shows a URL's query (keys travel
//! there) or its user information.

use crate::error::{Error, ErrorKind, Result};

/// Checks that `url` can be a provider's base URL: an `http://` or `https://` URL with a
/// host and no whitespace. The error ([`ErrorKind::Configuration`]) names the URL and the
/// likely fix, for example `127.0.0.1:11434/v1` → "write `http://127.0.0.1:11434/v1`".
///
/// ```
/// assert!(agentloop::llm::check_base_url("http://127.0.0.1:11434/v1").is_ok());
/// let err = agentloop::llm::check_base_url("localhost:11434").unwrap_err();
/// assert!(err.to_string().contains("http://localhost:11434"));
/// ```
pub fn check_base_url(url: &str) -> Result<()> {
    match problem(url) {
        None => Ok(()),
        Some(problem) => Err(Error::new(
            ErrorKind::Configuration,
            format!("the base URL `{}` {problem}", shown(url)),
        )),
    }
}

/// [`check_base_url`] for a URL read from the variable `name`.
pub(crate) fn check_variable(name: &str, url: &str) -> Result<()> {
    match problem(url) {
        None => Ok(()),
        Some(problem) => Err(Error::new(
            ErrorKind::Configuration,
            format!("{name}: the base URL `{}` {problem}", shown(url)),
        )),
    }
}

/// What is wrong with `url`, with the fix, or `None`.
fn problem(url: &str) -> Option<String> {
    if url.trim().is_empty() {
        return Some(
            "is empty: give the provider's address, e.g. `https://api.example.com/v1`".into(),
        );
    }
    if url.chars().any(char::is_whitespace) {
        return Some(format!(
            "contains whitespace: remove it (`{}`)",
            shown(&url.split_whitespace().collect::<String>())
        ));
    }
    if url.chars().any(char::is_control) {
        return Some("contains control characters: remove them".into());
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Some(format!(
            "has no scheme: write `http://{0}` (a server on this machine or your network) or \
             `https://{0}`",
            shown(url)
        ));
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Some(format!(
            "has the scheme `{scheme}`: providers are reached over `http://` or `https://`"
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() || host.starts_with(':') {
        return Some("has no host: write it as `http://HOST:PORT/PATH`".into());
    }
    let port = match host.strip_prefix('[') {
        Some(v6) => v6.split_once("]:").map(|(_, port)| port),
        None => host.rsplit_once(':').map(|(_, port)| port),
    };
    if port.is_some_and(|port| port.parse::<u16>().is_err()) {
        return Some("has an invalid port: ports are numbers from 1 to 65535".into());
    }
    if url.parse::<ureq::http::Uri>().is_err() {
        return Some("is not a valid URL: check its characters and its port".into());
    }
    None
}

/// `url` without its query and fragment and without user information, for messages.
pub(crate) fn shown(url: &str) -> String {
    let cut = url.split(['?', '#']).next().unwrap_or("");
    match cut.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => cut.to_string(),
    }
}

/// Adds the URL a failed connection tried to `err`'s message, and, for an `https://` URL
/// whose TLS handshake failed, that the server may speak plain HTTP.
pub(crate) fn name_url(err: Error, url: &str, transport: &str) -> Error {
    if matches!(err.kind(), ErrorKind::Aborted) {
        return err;
    }
    let mut message = format!("{} ({})", err.message(), shown(url));
    let lower = transport.to_ascii_lowercase();
    let tls = [
        "tls",
        "rustls",
        "certificate",
        "handshake",
        "corrupt message",
    ]
    .iter()
    .any(|w| lower.contains(w));
    let https = url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    if https && tls {
        message.push_str(
            "; the TLS handshake failed: if the server speaks plain HTTP (a local model server \
             usually does), use an `http://` URL",
        );
    } else if https && err.kind() == ErrorKind::Timeout {
        // A plain-HTTP server reads the TLS hello as the start of a request and waits for
        // the rest: the handshake times out instead of failing.
        message.push_str(
            "; no answer in time: if the server speaks plain HTTP (a local model server \
             usually does), it waits silently on a TLS handshake; use an `http://` URL",
        );
    }
    err.with_message(message)
}

/// Adds to a 404's error the URL tried and the likely fix: a model the server does not
/// have when its answer says so, else a wrong path in the base URL (most servers answer
/// under `…/v1`).
pub(crate) fn not_found(err: Error, url: &str, model: &str) -> Error {
    let tried = shown(url);
    let lower = err.message().to_ascii_lowercase();
    let fix = if lower.contains("model") && !model.is_empty() {
        format!("the server may not have the model `{model}`: choose one it serves")
    } else {
        let (scheme, rest) = tried.split_once("://").unwrap_or(("http", &tried));
        let host = rest.split('/').next().unwrap_or(rest);
        if rest.split('/').any(|segment| segment == "v1") {
            "check the base URL's path".to_string()
        } else {
            format!(
                "check the base URL's path: most servers answer under `/v1` (did you mean \
                 `{scheme}://{host}/v1`?)"
            )
        }
    };
    let message = format!("{} (404 from {tried}; {fix})", err.message());
    err.with_message(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_urls_lose_query_and_user_information() {
        assert_eq!(shown("https://u:p@x.test/v1?key=k"), "https://x.test/v1");
        assert_eq!(shown("localhost:1"), "localhost:1");
    }
}
