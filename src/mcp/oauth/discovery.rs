//! Finding a server's authorization server: the `WWW-Authenticate` challenge, protected
//! resource metadata (RFC 9728: the challenge's `resource_metadata`, else the well-known
//! URIs, path first), the authorization server's metadata (RFC 8414 and OpenID Connect
//! discovery, in the MCP spec's order), and the `2025-03-26` fallback to the server's
//! own origin. Also the small HTTP and URL helpers the flows share.
//!
//! Every request here has a deadline and reads at most [`MAX_BODY`] bytes; no redirect
//! is followed; an endpoint must be `https` unless it is on a loopback host. Errors name
//! the URL and status, never a header value or a form field.

use std::io::Read;
use std::time::Duration;

use serde_json::Value;
use ureq::http::Uri;

use crate::cancel::CancelToken;
use crate::mcp::connection::LEGACY_VERSIONS;

/// The largest metadata, registration or token answer read.
pub(crate) const MAX_BODY: u64 = 256 * 1024;
/// How long one discovery or token request may take.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// The parameters of a `Bearer` challenge.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Challenge {
    pub(crate) resource_metadata: Option<String>,
    pub(crate) scope: Option<String>,
    pub(crate) error: Option<String>,
}

/// Reads the `Bearer` challenge of a `WWW-Authenticate` value (RFC 6750 §3, RFC 9728
/// §5.1); unknown parameters and other schemes are ignored.
pub(crate) fn parse_challenge(header: &str) -> Challenge {
    let mut challenge = Challenge::default();
    let header = &header[..header.len().min(8192)];
    let Some(start) = find_scheme(header, "bearer") else {
        return challenge;
    };
    let mut rest = header[start + "bearer".len()..].trim_start();
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else { break };
        let name = rest[..eq]
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        // A new scheme (a token without `=` before the next comma) ends this challenge.
        if name.contains(' ') {
            break;
        }
        let after = rest[eq + 1..].trim_start();
        let (value, remaining) = match after.strip_prefix('"') {
            Some(quoted) => read_quoted(quoted),
            None => {
                let end = after.find(',').unwrap_or(after.len());
                (after[..end].trim().to_string(), &after[end..])
            }
        };
        match name.as_str() {
            "resource_metadata" => challenge.resource_metadata = Some(value),
            "scope" => challenge.scope = Some(value),
            "error" => challenge.error = Some(value),
            _ => {}
        }
        rest = remaining.trim_start().trim_start_matches(',').trim_start();
    }
    challenge
}

/// Where the scheme `name` starts as a whole word (case-insensitive).
fn find_scheme(header: &str, name: &str) -> Option<usize> {
    let lower = header.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find(name) {
        let at = from + at;
        let before_ok = at == 0 || matches!(lower.as_bytes()[at - 1], b' ' | b',');
        let after = lower.as_bytes().get(at + name.len());
        if before_ok && matches!(after, None | Some(b' ')) {
            return Some(at);
        }
        from = at + name.len();
    }
    None
}

/// A quoted string's value (backslash escapes undone) and what follows its closing quote.
fn read_quoted(text: &str) -> (String, &str) {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            }
            '"' => return (value, &text[i + 1..]),
            c => value.push(c),
        }
    }
    (value, "")
}

/// A URL split into what discovery needs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Url {
    /// `scheme://authority`, lower-cased.
    pub(crate) origin: String,
    /// The path without a trailing `/` (empty for the root).
    pub(crate) path: String,
}

impl Url {
    /// Parses an absolute `http` or `https` URL (a fragment and query are dropped).
    pub(crate) fn parse(text: &str) -> Result<Url, String> {
        let text = text.split('#').next().unwrap_or("");
        let bad = || format!("`{}` is not an absolute http(s) URL", excerpt(text));
        let uri: Uri = text.parse().map_err(|_| bad())?;
        let scheme = uri.scheme_str().ok_or_else(bad)?.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(bad());
        }
        let authority = uri
            .authority()
            .ok_or_else(bad)?
            .as_str()
            .to_ascii_lowercase();
        if authority.contains('@') {
            return Err(format!("`{}` carries credentials", excerpt(text)));
        }
        Ok(Url {
            origin: format!("{scheme}://{authority}"),
            path: uri.path().trim_end_matches('/').to_string(),
        })
    }

    /// The canonical URI (RFC 8707 §2 as the MCP spec reads it): no trailing slash, no
    /// query or fragment.
    pub(crate) fn canonical(&self) -> String {
        format!("{}{}", self.origin, self.path)
    }

    /// Whether this is a loopback host (where plain `http` is allowed).
    pub(crate) fn is_loopback(&self) -> bool {
        let authority = self.origin.split_once("://").map_or("", |(_, a)| a);
        let host = match authority.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => authority,
        };
        matches!(host, "localhost" | "127.0.0.1" | "[::1]")
    }

    /// Refuses plain `http` to anything but a loopback host (OAuth 2.1 §1.5).
    pub(crate) fn require_secure(&self) -> Result<(), String> {
        if self.origin.starts_with("https://") || self.is_loopback() {
            return Ok(());
        }
        Err(format!(
            "`{}` is not https (authorization endpoints must be)",
            self.canonical()
        ))
    }

    /// Whether `self` (a server URL) is the resource `resource` or below it.
    pub(crate) fn is_within(&self, resource: &Url) -> bool {
        self.origin == resource.origin
            && (resource.path.is_empty()
                || self.path == resource.path
                || self
                    .path
                    .strip_prefix(&resource.path)
                    .is_some_and(|rest| rest.starts_with('/')))
    }

    /// The well-known protected-resource metadata URIs of a server URL, path first.
    pub(crate) fn resource_metadata_candidates(&self) -> Vec<String> {
        let root = format!("{}/.well-known/oauth-protected-resource", self.origin);
        if self.path.is_empty() {
            vec![root]
        } else {
            vec![format!("{root}{}", self.path), root]
        }
    }

    /// The authorization-server metadata URIs of an issuer, in the MCP spec's order.
    pub(crate) fn issuer_metadata_candidates(&self) -> Vec<String> {
        let o = &self.origin;
        if self.path.is_empty() {
            vec![
                format!("{o}/.well-known/oauth-authorization-server"),
                format!("{o}/.well-known/openid-configuration"),
            ]
        } else {
            let p = &self.path;
            vec![
                format!("{o}/.well-known/oauth-authorization-server{p}"),
                format!("{o}/.well-known/openid-configuration{p}"),
                format!("{o}{p}/.well-known/openid-configuration"),
            ]
        }
    }
}

/// At most 200 characters of `text`, for messages.
pub(crate) fn excerpt(text: &str) -> String {
    text.chars().take(200).collect()
}

/// An answer: its status and its body parsed as JSON (`Null` when it is not JSON).
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Value,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(REQUEST_TIMEOUT))
        .timeout_connect(Some(Duration::from_secs(10)))
        .user_agent(concat!("agentloop/", env!("CARGO_PKG_VERSION")))
        .max_redirects(0)
        .proxy(None)
        .build()
        .new_agent()
}

fn read(response: ureq::http::Response<ureq::Body>, url: &str) -> Result<Answer, String> {
    let status = response.status().as_u16();
    let mut text = String::new();
    response
        .into_body()
        .into_with_config()
        .limit(MAX_BODY)
        .lossy_utf8(true)
        .reader()
        .read_to_string(&mut text)
        .map_err(|e| format!("reading the answer of {} failed: {e}", excerpt(url)))?;
    Ok(Answer {
        status,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
    })
}

/// An agent whose sockets close when `cancel` fires (kept alive by the guard).
fn cancellable(cancel: &CancelToken) -> (ureq::Agent, crate::cancel::CancelGuard) {
    let agent = agent();
    let closer = agent.clone();
    let guard = cancel.on_cancel(move || closer.shutdown());
    (agent, guard)
}

/// `GET url` accepting JSON.
pub(crate) fn get_json(url: &str, cancel: &CancelToken) -> Result<Answer, String> {
    let (agent, _guard) = cancellable(cancel);
    let response = agent
        .get(url)
        .header("accept", "application/json")
        .call()
        .map_err(|e| format!("GET {} failed: {e}", excerpt(url)))?;
    read(response, url)
}

/// `POST url` with a JSON body.
pub(crate) fn post_json(url: &str, body: &Value, cancel: &CancelToken) -> Result<Answer, String> {
    let (agent, _guard) = cancellable(cancel);
    let response = agent
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .send(body.to_string().as_bytes())
        .map_err(|e| format!("POST {} failed: {e}", excerpt(url)))?;
    read(response, url)
}

/// `POST url` with a JSON-RPC message and no token, as an MCP client's first request:
/// the status and the `WWW-Authenticate` challenge (the body is not read).
pub(crate) fn probe(
    url: &str,
    body: &Value,
    cancel: &CancelToken,
) -> Result<(u16, Option<String>), String> {
    let (agent, _guard) = cancellable(cancel);
    let response = agent
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", LEGACY_VERSIONS[0])
        .send(body.to_string().as_bytes())
        .map_err(|e| format!("POST {} failed: {e}", excerpt(url)))?;
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok((response.status().as_u16(), challenge))
}

/// `POST url` with a form body, and HTTP Basic client authentication when given.
pub(crate) fn post_form(
    url: &str,
    form: &[(&str, &str)],
    basic: Option<(&str, &str)>,
    cancel: &CancelToken,
) -> Result<Answer, String> {
    let (agent, _guard) = cancellable(cancel);
    let body: Vec<String> = form
        .iter()
        .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
        .collect();
    let mut request = agent
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json");
    if let Some((id, secret)) = basic {
        // RFC 6749 §2.3.1: both parts form-encoded before the base64.
        let pair = format!("{}:{}", form_encode(id), form_encode(secret));
        let header = format!("Basic {}", crate::base64::encode(pair.as_bytes()));
        request = request.header("authorization", header.as_str());
    }
    let response = request
        .send(body.join("&").as_bytes())
        .map_err(|e| format!("POST {} failed: {e}", excerpt(url)))?;
    read(response, url)
}

/// `application/x-www-form-urlencoded` encoding of one name or value.
pub(crate) fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Undoes [`form_encode`] (and plain percent-encoding); `None` for bad escapes or
/// text that is not UTF-8.
pub(crate) fn form_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The protected resource metadata of the server at `server`: from the challenge's
/// `resource_metadata`, else the well-known URIs. `Ok(None)` when the server publishes
/// none (a `2025-03-26` server).
pub(crate) fn resource_metadata(
    server: &Url,
    challenge: &Challenge,
    cancel: &CancelToken,
) -> Result<Option<Value>, String> {
    let candidates = match &challenge.resource_metadata {
        Some(url) => {
            Url::parse(url)?.require_secure()?;
            vec![url.clone()]
        }
        None => server.resource_metadata_candidates(),
    };
    for url in candidates {
        let answer = get_json(&url, cancel)?;
        if answer.status == 200 && answer.body.is_object() {
            return Ok(Some(answer.body));
        }
    }
    Ok(None)
}

/// The authorization server metadata of `issuer`, trying the URIs in order; `Ok(None)`
/// when none answers with a JSON object.
pub(crate) fn issuer_metadata(issuer: &Url, cancel: &CancelToken) -> Result<Option<Value>, String> {
    issuer.require_secure()?;
    for url in issuer.issuer_metadata_candidates() {
        let answer = get_json(&url, cancel)?;
        if answer.status == 200 && answer.body.is_object() {
            return Ok(Some(answer.body));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_are_read_with_quotes_escapes_and_other_schemes() {
        let c = parse_challenge(
            r#"Basic realm="x", Bearer error="insufficient_scope", scope="a b", resource_metadata="https://h/.well-known/oauth-protected-resource/mcp", error_description="say \"hi\"""#,
        );
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(c.scope.as_deref(), Some("a b"));
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://h/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            parse_challenge("bearer scope=read").scope.as_deref(),
            Some("read")
        );
        assert_eq!(
            parse_challenge("Basic realm=\"bearer\""),
            Challenge::default()
        );
        assert_eq!(parse_challenge(""), Challenge::default());
        // Unterminated quotes and junk end the parse without a panic.
        let _ = parse_challenge("Bearer scope=\"open");
        let _ = parse_challenge("Bearer ===,,,\"\\");
    }

    #[test]
    fn well_known_uris_follow_the_specs_order() {
        let server = Url::parse("HTTPS://Example.com/public/mcp/").unwrap();
        assert_eq!(server.canonical(), "https://example.com/public/mcp");
        assert_eq!(
            server.resource_metadata_candidates(),
            [
                "https://example.com/.well-known/oauth-protected-resource/public/mcp",
                "https://example.com/.well-known/oauth-protected-resource"
            ]
        );
        let issuer = Url::parse("https://auth.example.com/tenant1").unwrap();
        assert_eq!(
            issuer.issuer_metadata_candidates(),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/.well-known/openid-configuration/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            Url::parse("https://a.example#frag").unwrap().canonical(),
            "https://a.example"
        );
        assert!(Url::parse("ftp://a.example/x").is_err());
        assert!(Url::parse("https://user:pw@a.example/").is_err());
    }

    #[test]
    fn resources_match_by_origin_and_path_prefix_and_http_only_on_loopback() {
        let server = Url::parse("http://localhost:3000/mcp").unwrap();
        assert!(server.is_within(&Url::parse("http://localhost:3000").unwrap()));
        assert!(server.is_within(&Url::parse("http://localhost:3000/mcp").unwrap()));
        assert!(!server.is_within(&Url::parse("https://evil.example.com/mcp").unwrap()));
        assert!(!server.is_within(&Url::parse("http://localhost:3000/mc").unwrap()));
        assert!(server.require_secure().is_ok());
        assert!(
            Url::parse("http://127.0.0.1:9/x")
                .unwrap()
                .require_secure()
                .is_ok()
        );
        assert!(
            Url::parse("http://example.com/x")
                .unwrap()
                .require_secure()
                .is_err()
        );
    }

    #[test]
    fn form_encoding_round_trips() {
        let text = "a b&c=d/é+%";
        assert_eq!(form_encode(text), "a+b%26c%3Dd%2F%C3%A9%2B%25");
        assert_eq!(form_decode(&form_encode(text)).unwrap(), text);
        assert_eq!(form_decode("%zz"), None);
        assert_eq!(form_decode("%4"), None);
    }
}
