//! OAuth 2.1 for Streamable HTTP servers, as the MCP authorization spec asks: an
//! [`Authorizer`] per server gives the bearer token of each request, refreshes it when it
//! expires, and answers a 401 (or a 403 `insufficient_scope`) by trying, in order, a token
//! another process stored meanwhile, the refresh token, and a new authorization — the
//! user's login through [`McpHost::open_url`] and the loopback redirect, or a grant without
//! a user (`grants.rs`: client credentials, an enterprise identity assertion).
//!
//! Tokens live in the authorizer (and the token file when configured); they go into the
//! `Authorization` header and nowhere else: errors are scrubbed of them, no `Debug` shows
//! them. A login is bounded (the host's wait, [`MAX_FLOWS`] per server and session, one
//! retry per scope set) so a server cannot loop the client through authorizations.

mod discovery;
mod flow;
mod grants;
mod loopback;
mod pkce;
mod store;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use self::discovery::{Challenge, Url, parse_challenge};
use self::flow::{Client, Metadata, TokenError, Tokens};
use self::store::Entry;
use super::{McpHost, McpServer, OAuthSettings};
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::mcp::connection::LEGACY_VERSIONS;
use crate::sync::lock;

/// A token is refreshed this many seconds before it expires.
const EXPIRY_MARGIN: u64 = 30;
/// The most authorizations (logins, client-credential grants) one server's authorizer
/// starts: a server that keeps refusing tokens cannot keep the user logging in.
const MAX_FLOWS: u32 = 4;

/// The OAuth side of one Streamable HTTP server (shared by its connections, so that a
/// restart keeps the tokens).
pub(crate) struct Authorizer {
    name: String,
    server: Url,
    config: OAuthSettings,
    host: Option<Arc<dyn McpHost>>,
    /// How long a login in progress waits for the browser's redirect.
    login_wait: Duration,
    state: Mutex<State>,
    /// Held while a refresh or an authorization runs: parallel requests that all got a
    /// 401 wait for the one login instead of starting their own.
    flow: Mutex<()>,
}

#[derive(Default)]
struct State {
    entry: Entry,
    loaded: bool,
    flows: u32,
    /// The scope sets a step-up authorization was already run for.
    stepped_up: Vec<String>,
    /// Why the server needs a login that could not happen.
    needs_login: Option<String>,
    /// The error code of the last refused refresh (for the message of the login needed).
    refused: Option<String>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("server", &self.name)
            .finish_non_exhaustive()
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Authorizer {
    /// The authorizer of `server` (an HTTP server), asking `host` for logins.
    pub(crate) fn new(
        server: &McpServer,
        host: Option<Arc<dyn McpHost>>,
        login_wait: Duration,
    ) -> std::result::Result<Authorizer, String> {
        let url = server.url.as_deref().unwrap_or_default();
        Ok(Authorizer {
            name: server.name.clone(),
            server: Url::parse(url)?,
            config: server.oauth.clone(),
            host,
            login_wait,
            state: Mutex::new(State::default()),
            flow: Mutex::new(()),
        })
    }

    /// The store's key for this server.
    fn key(&self) -> String {
        self.server.canonical()
    }

    fn load(&self) -> Entry {
        match &self.config.token_file {
            Some(path) => store::get(path, &self.key()).unwrap_or_default(),
            None => Entry::default(),
        }
    }

    fn save(&self, entry: &Entry) -> std::result::Result<(), String> {
        if let Some(path) = &self.config.token_file {
            store::put(path, &self.key(), Some(entry)).map_err(|e| {
                format!(
                    "the token file {} could not be written: {e}",
                    path.display()
                )
            })?;
        }
        Ok(())
    }

    /// Why the server needs a login that could not happen, if it does.
    pub(crate) fn needs_login(&self) -> Option<String> {
        lock(&self.state).needs_login.clone()
    }

    /// The `Authorization` header value for the next request, if a token is held; an
    /// expired token is refreshed first (a failed refresh leaves the 401 to decide).
    pub(crate) fn header(&self, cancel: &CancelToken) -> Option<String> {
        {
            let mut state = lock(&self.state);
            if !state.loaded {
                state.entry = self.load();
                state.loaded = true;
            }
            let token = state.entry.access_token.as_deref()?;
            let fresh = state
                .entry
                .expires_at
                .is_none_or(|at| now() + EXPIRY_MARGIN < at);
            if fresh || state.entry.refresh_token.is_none() {
                return Some(format!("Bearer {token}"));
            }
        }
        let _flow = lock(&self.flow);
        match self.refresh(cancel) {
            Ok(()) => {}
            // The authorization server refused the refresh token: it is dead, and so is
            // the access token it would have renewed.
            Err(TokenError {
                code: Some(code), ..
            }) => {
                self.forget_tokens();
                lock(&self.state).refused = Some(code);
                return None;
            }
            // It could not be reached: the token held may still be good.
            Err(_) => {}
        }
        let state = lock(&self.state);
        state
            .entry
            .access_token
            .as_ref()
            .map(|t| format!("Bearer {t}"))
    }

    /// The header of the token held now, without refreshing or loading anything.
    pub(crate) fn held(&self) -> Option<String> {
        let state = lock(&self.state);
        state
            .entry
            .access_token
            .as_ref()
            .map(|t| format!("Bearer {t}"))
    }

    /// Answers a 401 or 403 of the server: `Ok` when a new token is held and the request
    /// may be sent again, else why not (for the model and the host; no secret in it).
    pub(crate) fn challenge(
        &self,
        status: u16,
        header: Option<&str>,
        sent: Option<&str>,
        cancel: &CancelToken,
    ) -> std::result::Result<(), String> {
        let challenge = header.map(parse_challenge).unwrap_or_default();
        let _flow = lock(&self.flow);
        let outcome = self.bounded(cancel, |cancel| {
            if status == 401 {
                self.unauthorized(&challenge, sent, cancel)
            } else if challenge.error.as_deref() == Some("insufficient_scope") {
                self.step_up(&challenge, cancel)
            } else {
                Err(format!(
                    "the MCP server `{}` refused the request (HTTP {status})",
                    self.name
                ))
            }
        });
        outcome.map_err(|why| self.scrub(why))
    }

    /// Runs `flow` with a token that also fires after `login_wait`: a discovery, a token
    /// endpoint or a user that does not answer ends the flow at that time.
    fn bounded(
        &self,
        cancel: &CancelToken,
        flow: impl FnOnce(&CancelToken) -> std::result::Result<(), String>,
    ) -> std::result::Result<(), String> {
        let child = cancel.child();
        let (done, finished) = crossbeam_channel::bounded::<()>(0);
        std::thread::scope(|scope| {
            let timer = std::thread::Builder::new()
                .name(format!("agentloop-mcp-auth-{}", self.name))
                .stack_size(64 * 1024)
                .spawn_scoped(scope, || {
                    if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                        finished.recv_timeout(self.login_wait)
                    {
                        child.cancel();
                    }
                });
            let outcome = flow(&child);
            drop(done);
            if let Ok(timer) = timer {
                let _ = timer.join();
            }
            match outcome {
                Err(_) if child.is_cancelled() && !cancel.is_cancelled() => Err(format!(
                    "authorizing with the MCP server `{}` did not finish within {} s",
                    self.name,
                    self.login_wait.as_secs()
                )),
                other => other,
            }
        })
    }

    fn unauthorized(
        &self,
        challenge: &Challenge,
        sent: Option<&str>,
        cancel: &CancelToken,
    ) -> std::result::Result<(), String> {
        let sent = sent.and_then(|h| h.strip_prefix("Bearer "));
        // A token newer than the refused one: from a parallel request's login, or from
        // another process (`mcp login`) through the token file.
        {
            let mut state = lock(&self.state);
            let stored = self.load();
            if stored.access_token.is_some() && stored.access_token.as_deref() != sent {
                state.entry = stored;
                state.loaded = true;
            }
            if state.entry.access_token.is_some() && state.entry.access_token.as_deref() != sent {
                state.needs_login = None;
                return Ok(());
            }
        }
        // A login already found impossible here stays so until a token appears.
        if let Some(why) = lock(&self.state).needs_login.clone() {
            return Err(why);
        }
        let mut refused = match lock(&self.state).refused.take() {
            Some(code) => format!(" (its refresh token was refused: {code})"),
            None => String::new(),
        };
        if lock(&self.state).entry.refresh_token.is_some() {
            match self.refresh(cancel) {
                Ok(()) => return Ok(()),
                // The authorization server answered: the refresh token is dead.
                Err(TokenError {
                    code: Some(code), ..
                }) => {
                    refused = format!(" (its refresh token was refused: {code})");
                    self.forget_tokens();
                }
                // It could not be reached: the tokens may still be good later.
                Err(error) => {
                    return Err(format!(
                        "the MCP server `{}` refused the token and refreshing it failed: {}",
                        self.name, error.message
                    ));
                }
            }
        }
        self.authorize(challenge.scope.as_deref(), challenge, &refused, cancel)
    }

    fn step_up(
        &self,
        challenge: &Challenge,
        cancel: &CancelToken,
    ) -> std::result::Result<(), String> {
        let scope = challenge.scope.clone().unwrap_or_default();
        {
            let mut state = lock(&self.state);
            if state.stepped_up.contains(&scope) {
                return Err(format!(
                    "the MCP server `{}` still refuses the request for lack of scope `{scope}` \
                     after an authorization for it",
                    self.name
                ));
            }
            state.stepped_up.push(scope.clone());
        }
        let scope = (!scope.is_empty()).then_some(scope);
        self.authorize(scope.as_deref(), challenge, "", cancel)
    }

    /// Removes the tokens (keeping the client registration).
    fn forget_tokens(&self) {
        let mut state = lock(&self.state);
        state.entry.access_token = None;
        state.entry.refresh_token = None;
        state.entry.expires_at = None;
        let entry = state.entry.clone();
        drop(state);
        let _ = self.save(&entry);
    }

    /// Refreshes the access token with the refresh token.
    fn refresh(&self, cancel: &CancelToken) -> std::result::Result<(), TokenError> {
        let entry = lock(&self.state).entry.clone();
        let missing = |what: &str| TokenError {
            code: None,
            message: format!("no {what} is kept"),
        };
        let refresh = entry
            .refresh_token
            .as_deref()
            .ok_or_else(|| missing("refresh token"))?;
        let endpoint = entry
            .token_endpoint
            .as_deref()
            .ok_or_else(|| missing("token endpoint"))?;
        let client_id = entry
            .client_id
            .as_deref()
            .ok_or_else(|| missing("client id"))?;
        let client = Client {
            id: client_id,
            secret: entry.client_secret.as_deref(),
            method: entry.auth_method.as_deref().unwrap_or("none"),
        };
        let mut form = vec![("grant_type", "refresh_token"), ("refresh_token", refresh)];
        if let Some(resource) = entry.resource.as_deref() {
            form.push(("resource", resource));
        }
        let tokens = flow::token_request(endpoint, &form, &client, cancel)?;
        let scope = entry.scope.clone();
        self.keep_tokens(tokens, scope, None)
            .map_err(|message| TokenError {
                code: None,
                message,
            })
    }

    /// Stores new tokens (a refresh that gives no new refresh token keeps the old one).
    fn keep_tokens(
        &self,
        tokens: Tokens,
        asked: Option<String>,
        metadata: Option<&Metadata>,
    ) -> std::result::Result<(), String> {
        let mut state = lock(&self.state);
        let entry = &mut state.entry;
        entry.access_token = Some(tokens.access_token);
        if tokens.refresh_token.is_some() {
            entry.refresh_token = tokens.refresh_token;
        }
        entry.expires_at = tokens.expires_in.map(|s| now().saturating_add(s));
        entry.scope = tokens.scope.or(asked);
        if let Some(metadata) = metadata {
            entry.token_endpoint = Some(metadata.token_endpoint.clone());
            entry.resource = Some(metadata.resource.clone());
        }
        state.loaded = true;
        state.needs_login = None;
        let entry = state.entry.clone();
        drop(state);
        self.save(&entry)
    }

    /// Runs a new authorization (see the module docs).
    fn authorize(
        &self,
        scope: Option<&str>,
        challenge: &Challenge,
        refused: &str,
        cancel: &CancelToken,
    ) -> std::result::Result<(), String> {
        {
            let mut state = lock(&self.state);
            if state.flows >= MAX_FLOWS {
                return Err(format!(
                    "the MCP server `{}` refused {MAX_FLOWS} authorizations in this session; \
                     not trying again",
                    self.name
                ));
            }
            state.flows += 1;
        }
        let machine = self.config.client_credentials || self.config.id_jag.is_some();
        if self.host.is_none() && !machine {
            return Err(self.login_needed(refused));
        }
        let metadata = flow::discover(&self.server, challenge, cancel).map_err(|why| {
            format!(
                "OAuth discovery for the MCP server `{}` failed: {why}",
                self.name
            )
        })?;
        let scope = flow::choose_scope(self.config.scopes.as_deref(), scope, &metadata);
        if self.config.id_jag.is_some() {
            return self.identity_assertion(&metadata, scope, cancel);
        }
        if self.config.client_credentials {
            return self.client_credentials(&metadata, scope, cancel);
        }
        let Some(host) = self.host.clone() else {
            return Err(self.login_needed(refused));
        };
        if !metadata.s256 {
            return Err(format!(
                "the authorization server of the MCP server `{}` does not support PKCE with \
                 S256; refusing to log in",
                self.name
            ));
        }
        self.authorization_code(&metadata, scope, host.as_ref(), refused, cancel)
    }

    /// The authorization code flow: client, PKCE, the user's login, the code exchange.
    fn authorization_code(
        &self,
        metadata: &Metadata,
        scope: Option<String>,
        host: &dyn McpHost,
        refused: &str,
        cancel: &CancelToken,
    ) -> std::result::Result<(), String> {
        let stored_port = {
            let state = lock(&self.state);
            state
                .entry
                .redirect_uri
                .as_deref()
                .and_then(|uri| uri.rsplit(':').next())
                .and_then(|tail| tail.trim_end_matches("/callback").parse::<u16>().ok())
        };
        let loopback = match self.config.callback_port.or(stored_port) {
            Some(port) if self.config.callback_port.is_none() => {
                loopback::Loopback::bind(Some(port)).or_else(|_| loopback::Loopback::bind(None))
            }
            port => loopback::Loopback::bind(port),
        }
        .map_err(|e| format!("could not listen for the login's redirect on 127.0.0.1: {e}"))?;
        let client = self.client(metadata, &loopback.redirect_uri, cancel)?;
        let pkce = pkce::Pkce::new().map_err(|e| format!("no random bytes for PKCE: {e}"))?;
        let state = pkce::random_token(16).map_err(|e| format!("no random bytes: {e}"))?;
        let url = flow::authorization_url(
            metadata,
            &client.0,
            &loopback.redirect_uri,
            &pkce.challenge,
            &state,
            scope.as_deref(),
        );
        if !host.open_url(&self.name, &url) {
            return Err(self.login_needed(refused));
        }
        let deadline = Instant::now() + self.login_wait;
        let code = loopback
            .wait(&state, deadline, cancel)
            .map_err(|why| format!("logging in to the MCP server `{}` failed: {why}", self.name))?;
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", loopback.redirect_uri.as_str()),
            ("code_verifier", pkce.verifier.as_str()),
            ("resource", metadata.resource.as_str()),
        ];
        let tokens = flow::token_request(
            &metadata.token_endpoint,
            &form,
            &Client {
                id: &client.0,
                secret: client.1.as_deref(),
                method: &client.2,
            },
            cancel,
        )
        .map_err(|e| {
            format!(
                "the code exchange of the MCP server `{}` failed: {}",
                self.name, e.message
            )
        })?;
        self.keep_tokens(tokens, scope, Some(metadata))
    }

    /// The client to log in as: the configured one, a client metadata document where
    /// the server takes one, the stored registration when it fits the redirect URI, else
    /// a new dynamic registration. Returns (id, secret, method).
    fn client(
        &self,
        metadata: &Metadata,
        redirect_uri: &str,
        cancel: &CancelToken,
    ) -> std::result::Result<(String, Option<String>, String), String> {
        let mut state = lock(&self.state);
        let entry = &mut state.entry;
        if let Some(id) = &self.config.client_id {
            let secret = self.config.client_secret.clone();
            let method = flow::auth_method(secret.is_some(), metadata).to_string();
            entry.client_id = Some(id.clone());
            entry.client_secret = secret.clone();
            entry.auth_method = Some(method.clone());
            entry.registered = false;
            return Ok((id.clone(), secret, method));
        }
        if let Some(url) = self
            .config
            .client_metadata_url
            .as_ref()
            .filter(|_| metadata.client_metadata_documents)
        {
            entry.client_id = Some(url.clone());
            entry.client_secret = None;
            entry.auth_method = Some("none".to_string());
            entry.registered = false;
            return Ok((url.clone(), None, "none".to_string()));
        }
        if entry.registered && entry.redirect_uri.as_deref() == Some(redirect_uri) {
            if let Some(id) = &entry.client_id {
                let method = entry
                    .auth_method
                    .clone()
                    .unwrap_or_else(|| "none".to_string());
                return Ok((id.clone(), entry.client_secret.clone(), method));
            }
        }
        drop(state);
        let registration = flow::register(metadata, redirect_uri, cancel).map_err(|why| {
            format!(
                "registering with the MCP server `{}`'s authorization server failed: {why}",
                self.name
            )
        })?;
        let mut state = lock(&self.state);
        let entry = &mut state.entry;
        entry.client_id = Some(registration.client_id.clone());
        entry.client_secret = registration.client_secret.clone();
        entry.auth_method = Some(registration.method.clone());
        entry.redirect_uri = Some(redirect_uri.to_string());
        entry.registered = true;
        let saved = entry.clone();
        drop(state);
        self.save(&saved)?;
        Ok((
            registration.client_id,
            registration.client_secret,
            registration.method,
        ))
    }

    /// Records (and returns) that the server needs a login nobody can do here.
    fn login_needed(&self, refused: &str) -> String {
        let name = &self.name;
        let why = format!(
            "the MCP server `{name}` needs a login{refused}; the user must log in to it \
             (`agentloop mcp login {name}` in the agentloop CLI)"
        );
        lock(&self.state).needs_login = Some(why.clone());
        why
    }

    /// `text` with every secret of this server replaced by `…`.
    fn scrub(&self, mut text: String) -> String {
        let state = lock(&self.state);
        let entry = &state.entry;
        let secrets = [
            entry.access_token.as_deref(),
            entry.refresh_token.as_deref(),
            entry.client_secret.as_deref(),
            self.config.client_secret.as_deref(),
            self.config.id_jag.as_ref().map(|j| j.id_token.as_str()),
            self.config.client_key.as_deref(),
        ];
        for secret in secrets.into_iter().flatten().filter(|s| s.len() >= 4) {
            text = text.replace(secret, "…");
        }
        text
    }

    /// Runs a login now (for [`McpServer::login`]): the server is probed without a token
    /// and its challenge answered with a new authorization.
    fn login_now(&self, cancel: &CancelToken) -> std::result::Result<(), String> {
        let (status, header) = probe(&self.server, cancel)?;
        if !(status == 401 || status == 403) {
            return Err(format!(
                "the MCP server `{}` answered HTTP {status} without a login: it needs none",
                self.name
            ));
        }
        let challenge = header.as_deref().map(parse_challenge).unwrap_or_default();
        let _flow = lock(&self.flow);
        // The kept registration is used again (its tokens are replaced).
        {
            let mut state = lock(&self.state);
            state.entry = self.load();
            state.loaded = true;
        }
        self.bounded(cancel, |cancel| {
            self.authorize(challenge.scope.as_deref(), &challenge, "", cancel)
        })
        .map_err(|why| self.scrub(why))
    }
}

/// An unauthenticated `initialize` POST: the status and the `WWW-Authenticate` header.
fn probe(server: &Url, cancel: &CancelToken) -> std::result::Result<(u16, Option<String>), String> {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY_VERSIONS[0], "capabilities": {},
        "clientInfo": {"name": "agentloop", "version": env!("CARGO_PKG_VERSION")}}});
    discovery::probe(&server.canonical(), &body, cancel)
}

fn login_error(why: String) -> Error {
    Error::new(ErrorKind::Authentication, why)
}

/// [`McpServer::login`].
pub(crate) fn login(server: &McpServer, host: Arc<dyn McpHost>, timeout: Duration) -> Result<()> {
    if server.url.is_none() {
        return Err(Error::new(
            ErrorKind::Configuration,
            format!(
                "the MCP server `{}` is not an HTTP server: it has no login",
                server.name
            ),
        ));
    }
    let authorizer = Authorizer::new(server, Some(host), timeout).map_err(login_error)?;
    authorizer
        .login_now(&CancelToken::new())
        .map_err(login_error)
}

/// [`McpServer::logout`].
pub(crate) fn logout(server: &McpServer) -> Result<bool> {
    let (Some(url), Some(path)) = (&server.url, &server.oauth.token_file) else {
        return Ok(false);
    };
    let key = Url::parse(url).map_err(login_error)?.canonical();
    if store::get(path, &key).is_none() {
        return Ok(false);
    }
    store::put(path, &key, None).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!(
                "the token file {} could not be written: {e}",
                path.display()
            ),
        )
    })
}

/// [`McpServer::has_login`].
pub(crate) fn has_login(server: &McpServer) -> bool {
    let (Some(url), Some(path)) = (&server.url, &server.oauth.token_file) else {
        return false;
    };
    let Ok(url) = Url::parse(url) else {
        return false;
    };
    store::get(path, &url.canonical())
        .is_some_and(|e| e.access_token.is_some() || e.refresh_token.is_some())
}
