//! The steps of an OAuth login, each one request: discovery into [`Metadata`], dynamic
//! client registration (RFC 7591), the authorization URL (PKCE `S256`, `state`, the RFC
//! 8707 `resource`), and the token endpoint (code exchange, refresh, client credentials)
//! with the client authentication the server accepts.
//!
//! Pure request and answer handling: no state is kept here, no token is put in an error.

use serde_json::{Value, json};

use super::discovery::{self, Challenge, Url, excerpt, form_encode};
use crate::cancel::CancelToken;

/// What the client knows about the authorization server of one MCP server.
#[derive(Debug, Clone)]
pub(crate) struct Metadata {
    /// The authorization server's `issuer` (the audience of an identity assertion).
    pub(crate) issuer: Option<String>,
    pub(crate) authorization_endpoint: String,
    pub(crate) token_endpoint: String,
    pub(crate) registration_endpoint: Option<String>,
    /// The authorization server's `scopes_supported`.
    pub(crate) scopes_supported: Option<Vec<String>>,
    /// The protected resource's `scopes_supported`.
    pub(crate) resource_scopes: Option<Vec<String>>,
    /// `token_endpoint_auth_methods_supported`.
    pub(crate) auth_methods: Option<Vec<String>>,
    /// `client_id_metadata_document_supported`.
    pub(crate) client_metadata_documents: bool,
    /// Whether `S256` is among `code_challenge_methods_supported` (or assumed, for the
    /// `2025-03-26` default endpoints).
    pub(crate) s256: bool,
    /// The `resource` indicator to send.
    pub(crate) resource: String,
}

/// Discovers the authorization server of `server` (see `discovery.rs`): the protected
/// resource metadata, whose `resource` must be this server or a prefix of it; else the
/// `2025-03-26` way (metadata at the server's origin, else its default endpoints).
pub(crate) fn discover(
    server: &Url,
    challenge: &Challenge,
    cancel: &CancelToken,
) -> Result<Metadata, String> {
    let resource_metadata = discovery::resource_metadata(server, challenge, cancel)?;
    let (issuer, resource, resource_scopes) = match &resource_metadata {
        Some(prm) => {
            let resource = match prm.get("resource").and_then(Value::as_str) {
                Some(named) => {
                    let named = Url::parse(named)?;
                    if !server.is_within(&named) {
                        return Err(format!(
                            "the server's resource metadata names `{}`, not this server ({}); \
                             refusing to log in there",
                            excerpt(&named.canonical()),
                            server.canonical()
                        ));
                    }
                    named.canonical()
                }
                None => server.canonical(),
            };
            let issuer = prm
                .get("authorization_servers")
                .and_then(Value::as_array)
                .and_then(|list| list.iter().find_map(Value::as_str))
                .ok_or("the server's resource metadata names no authorization server")?;
            (
                Url::parse(issuer)?,
                resource,
                strings(prm.get("scopes_supported")),
            )
        }
        None => (
            Url {
                origin: server.origin.clone(),
                path: String::new(),
            },
            server.canonical(),
            None,
        ),
    };
    let metadata = discovery::issuer_metadata(&issuer, cancel)?;
    let Some(metadata) = metadata else {
        if resource_metadata.is_some() {
            return Err(format!(
                "the authorization server {} publishes no metadata",
                issuer.canonical()
            ));
        }
        // 2025-03-26: no metadata anywhere, so the default endpoints at the origin.
        let origin = &server.origin;
        return Ok(Metadata {
            issuer: None,
            authorization_endpoint: format!("{origin}/authorize"),
            token_endpoint: format!("{origin}/token"),
            registration_endpoint: Some(format!("{origin}/register")),
            scopes_supported: None,
            resource_scopes: None,
            auth_methods: None,
            client_metadata_documents: false,
            s256: true,
            resource,
        });
    };
    let endpoint = |key: &str| -> Result<Option<String>, String> {
        match metadata.get(key).and_then(Value::as_str) {
            Some(url) => {
                Url::parse(url)?.require_secure()?;
                Ok(Some(url.to_string()))
            }
            None => Ok(None),
        }
    };
    let required = |key: &str| -> Result<String, String> {
        endpoint(key)?.ok_or_else(|| format!("the authorization server metadata has no `{key}`"))
    };
    Ok(Metadata {
        issuer: metadata.get("issuer").and_then(Value::as_str).map(excerpt),
        authorization_endpoint: required("authorization_endpoint")?,
        token_endpoint: required("token_endpoint")?,
        registration_endpoint: endpoint("registration_endpoint")?,
        scopes_supported: strings(metadata.get("scopes_supported")),
        resource_scopes,
        auth_methods: strings(metadata.get("token_endpoint_auth_methods_supported")),
        client_metadata_documents: metadata
            .get("client_id_metadata_document_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        s256: strings(metadata.get("code_challenge_methods_supported"))
            .is_some_and(|methods| methods.iter().any(|m| m == "S256")),
        resource,
    })
}

/// A JSON array of strings (at most 100 of them), or `None`.
fn strings(value: Option<&Value>) -> Option<Vec<String>> {
    let list = value?.as_array()?;
    Some(
        list.iter()
            .filter_map(Value::as_str)
            .take(100)
            .map(str::to_owned)
            .collect(),
    )
}

/// The scopes to ask for: the configured ones, else the challenge's, else the resource's
/// `scopes_supported`; with `offline_access` added when the authorization server offers
/// it (for a refresh token). `None`: the `scope` parameter is left out.
pub(crate) fn choose_scope(
    configured: Option<&[String]>,
    challenged: Option<&str>,
    metadata: &Metadata,
) -> Option<String> {
    let mut scopes: Vec<String> = match (configured, challenged) {
        (Some(configured), _) => configured.to_vec(),
        (None, Some(challenged)) => challenged.split_whitespace().map(str::to_owned).collect(),
        (None, None) => metadata.resource_scopes.clone().unwrap_or_default(),
    };
    let offline = metadata
        .scopes_supported
        .as_ref()
        .is_some_and(|s| s.iter().any(|s| s == "offline_access"));
    if offline && !scopes.is_empty() && !scopes.iter().any(|s| s == "offline_access") {
        scopes.push("offline_access".to_string());
    }
    (!scopes.is_empty()).then(|| scopes.join(" "))
}

/// A client as the token endpoint sees it.
pub(crate) struct Client<'a> {
    pub(crate) id: &'a str,
    pub(crate) secret: Option<&'a str>,
    /// `none`, `client_secret_basic` or `client_secret_post`.
    pub(crate) method: &'a str,
}

/// The authentication method for a client with or without a secret, by what the server
/// supports (RFC 8414's default is `client_secret_basic`).
pub(crate) fn auth_method(has_secret: bool, metadata: &Metadata) -> &'static str {
    if !has_secret {
        return "none";
    }
    let supports = |method: &str| {
        metadata
            .auth_methods
            .as_ref()
            .is_none_or(|methods| methods.iter().any(|m| m == method))
    };
    if !supports("client_secret_basic") && supports("client_secret_post") {
        "client_secret_post"
    } else {
        "client_secret_basic"
    }
}

/// A registered client: its id, secret and authentication method.
pub(crate) struct Registration {
    pub(crate) client_id: String,
    pub(crate) client_secret: Option<String>,
    pub(crate) method: String,
}

/// Registers a public client with `redirect_uri` (RFC 7591).
pub(crate) fn register(
    metadata: &Metadata,
    redirect_uri: &str,
    cancel: &CancelToken,
) -> Result<Registration, String> {
    let Some(endpoint) = &metadata.registration_endpoint else {
        return Err(
            "the authorization server offers no client registration; configure a \
                    pre-registered client (`oauth.client_id`)"
                .to_string(),
        );
    };
    let body = json!({
        "client_name": "agentloop",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    let answer = discovery::post_json(endpoint, &body, cancel)?;
    let client_id = answer.body.get("client_id").and_then(Value::as_str);
    match client_id {
        Some(id) if (200..300).contains(&answer.status) && !id.is_empty() => {
            let secret = answer
                .body
                .get("client_secret")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let method = match answer
                .body
                .get("token_endpoint_auth_method")
                .and_then(Value::as_str)
            {
                Some(m @ ("none" | "client_secret_basic" | "client_secret_post")) => m.to_string(),
                _ => auth_method(secret.is_some(), metadata).to_string(),
            };
            Ok(Registration {
                client_id: id.to_string(),
                client_secret: secret,
                method,
            })
        }
        _ => Err(format!(
            "client registration failed (HTTP {}{})",
            answer.status,
            error_text(&answer.body)
        )),
    }
}

/// The URL the user opens to authorize.
pub(crate) fn authorization_url(
    metadata: &Metadata,
    client_id: &str,
    redirect_uri: &str,
    challenge: &str,
    state: &str,
    scope: Option<&str>,
) -> String {
    let mut params = vec![
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect_uri),
        ("code_challenge", challenge),
        ("code_challenge_method", "S256"),
        ("state", state),
        ("resource", metadata.resource.as_str()),
    ];
    if let Some(scope) = scope {
        params.push(("scope", scope));
    }
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", form_encode(v)))
        .collect();
    let separator = if metadata.authorization_endpoint.contains('?') {
        '&'
    } else {
        '?'
    };
    format!(
        "{}{separator}{}",
        metadata.authorization_endpoint,
        query.join("&")
    )
}

/// What a token endpoint gave.
pub(crate) struct Tokens {
    pub(crate) access_token: String,
    pub(crate) refresh_token: Option<String>,
    pub(crate) expires_in: Option<u64>,
    pub(crate) scope: Option<String>,
}

/// Why a token request failed: the OAuth `error` code when the server gave one.
pub(crate) struct TokenError {
    pub(crate) code: Option<String>,
    pub(crate) message: String,
}

/// One token request with `form` (the grant's fields) and the client's authentication.
pub(crate) fn token_request(
    endpoint: &str,
    form: &[(&str, &str)],
    client: &Client<'_>,
    cancel: &CancelToken,
) -> Result<Tokens, TokenError> {
    let mut fields: Vec<(&str, &str)> = form.to_vec();
    let mut basic = None;
    match (client.method, client.secret) {
        ("client_secret_basic", Some(secret)) => basic = Some((client.id, secret)),
        ("client_secret_post", Some(secret)) => {
            fields.push(("client_id", client.id));
            fields.push(("client_secret", secret));
        }
        _ => fields.push(("client_id", client.id)),
    }
    let answer =
        discovery::post_form(endpoint, &fields, basic, cancel).map_err(|message| TokenError {
            code: None,
            message,
        })?;
    read_tokens(&answer)
}

/// The tokens of a token endpoint's answer, or its OAuth error.
pub(crate) fn read_tokens(answer: &discovery::Answer) -> Result<Tokens, TokenError> {
    let body = &answer.body;
    let token_type = body.get("token_type").and_then(Value::as_str);
    match body.get("access_token").and_then(Value::as_str) {
        Some(token)
            if answer.status == 200
                && !token.is_empty()
                && token.len() <= 16 * 1024
                && token_type.is_none_or(|t| t.eq_ignore_ascii_case("bearer")) =>
        {
            Ok(Tokens {
                access_token: token.to_string(),
                refresh_token: body
                    .get("refresh_token")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty() && t.len() <= 16 * 1024)
                    .map(str::to_owned),
                expires_in: body.get("expires_in").and_then(Value::as_u64),
                scope: body.get("scope").and_then(Value::as_str).map(excerpt),
            })
        }
        _ => Err(TokenError {
            code: body
                .get("error")
                .and_then(Value::as_str)
                .map(|c| c.chars().take(64).collect()),
            message: format!(
                "the token endpoint answered HTTP {}{}",
                answer.status,
                error_text(body)
            ),
        }),
    }
}

/// `: error (description)` from an OAuth error body, bounded and without control
/// characters; empty when there is none.
fn error_text(body: &Value) -> String {
    let text = |key: &str| body.get(key).and_then(Value::as_str).unwrap_or("");
    let (error, description) = (text("error"), text("error_description"));
    if error.is_empty() {
        return String::new();
    }
    let mut out = format!(": {error}");
    if !description.is_empty() {
        out.push_str(&format!(" ({description})"));
    }
    out.chars().filter(|c| !c.is_control()).take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata() -> Metadata {
        Metadata {
            issuer: Some("https://a.example".into()),
            authorization_endpoint: "https://a.example/authorize".into(),
            token_endpoint: "https://a.example/token".into(),
            registration_endpoint: None,
            scopes_supported: None,
            resource_scopes: Some(vec!["r1".into(), "r2".into()]),
            auth_methods: None,
            client_metadata_documents: false,
            s256: true,
            resource: "https://m.example/mcp".into(),
        }
    }

    #[test]
    fn scopes_come_from_config_then_challenge_then_resource_metadata() {
        let mut m = metadata();
        let own = ["mine".to_string()];
        assert_eq!(
            choose_scope(Some(&own), Some("x"), &m).as_deref(),
            Some("mine")
        );
        assert_eq!(choose_scope(None, Some("a b"), &m).as_deref(), Some("a b"));
        assert_eq!(choose_scope(None, None, &m).as_deref(), Some("r1 r2"));
        m.resource_scopes = None;
        assert_eq!(choose_scope(None, None, &m), None);
        m.scopes_supported = Some(vec!["a".into(), "offline_access".into()]);
        assert_eq!(
            choose_scope(None, Some("a"), &m).as_deref(),
            Some("a offline_access")
        );
        assert_eq!(choose_scope(None, None, &m), None);
    }

    #[test]
    fn the_authorization_url_carries_pkce_state_and_resource() {
        let url = authorization_url(
            &metadata(),
            "c 1",
            "http://127.0.0.1:5/callback",
            "ch",
            "st",
            Some("a b"),
        );
        assert_eq!(
            url,
            "https://a.example/authorize?response_type=code&client_id=c+1&\
             redirect_uri=http%3A%2F%2F127.0.0.1%3A5%2Fcallback&code_challenge=ch&\
             code_challenge_method=S256&state=st&resource=https%3A%2F%2Fm.example%2Fmcp&\
             scope=a+b"
        );
    }

    #[test]
    fn the_auth_method_follows_what_the_server_supports() {
        let mut m = metadata();
        assert_eq!(auth_method(false, &m), "none");
        assert_eq!(auth_method(true, &m), "client_secret_basic");
        m.auth_methods = Some(vec!["client_secret_post".into()]);
        assert_eq!(auth_method(true, &m), "client_secret_post");
    }
}
