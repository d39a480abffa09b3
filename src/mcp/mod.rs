//! An MCP (Model Context Protocol) client: the tools, resources and prompts of MCP servers
//! for a session and its host. Synchronous (threads and channels), both protocol eras,
//! stdio and Streamable HTTP, OAuth 2.1 for remote servers.
//!
//! - **Servers** are [`McpServer`] configs on [`SessionConfig`](crate::session::SessionConfig)
//!   ([`with_mcp_server`](crate::session::SessionConfig::with_mcp_server)), or read from the
//!   `{"mcpServers": {…}}` file other clients use ([`parse_config`]). A stdio server is
//!   spawned through `exec`'s process hygiene (own process group, stderr kept as a bounded
//!   tail, the group ended with the session) with the core environment variables (`PATH`,
//!   `HOME`, locales; never a secret) plus its configured `env`.
//! - **Startup** runs in parallel, off the host's thread: the first model call waits for
//!   each server at most its `startup_timeout`; a server that fails or is late is reported
//!   by a `WARNING` event (code `"mcp"`, with its stderr tail) and the session goes on.
//!   Over HTTP each request's POST waits for its answer no longer than the request's own
//!   timeout, and a notification's at most 1 s, so a server that never answers is left out
//!   at its startup timeout too. A stdio line over 64 MiB, or an SSE event over 16 MiB,
//!   ends the connection at once with an error naming the cap.
//! - **Eras**: `server/discover` first (`2026-07-28`, every request then carries the
//!   `io.modelcontextprotocol/*` `_meta` keys); on any error other than −32022, or no answer
//!   within two thirds of the startup timeout (a slow-starting server is not mistaken for
//!   an old one; a server that ignores the probe costs that much startup time), the
//!   `initialize` → `notifications/initialized` handshake of `2024-11-05` … `2025-11-25` —
//!   unless `initialize` is refused with −32022 (the probe's answer came late), which means
//!   `2026-07-28` after all.
//! - **Tools** are registered as `mcp__<server>__<tool>` (`names.rs` holds the name and
//!   schema rules per provider), re-listed after `notifications/tools/list_changed`: the
//!   next model call offers the new list, even within one input. Arguments are validated
//!   against the server's own schema before the call. Results: text parts, the first image
//!   as an image part, resource links and embedded text resources as text,
//!   `structuredContent` when there is no text, `isError` as an error result. The session
//!   truncates the model's copy; `TOOL_CALL_END` has it all.
//! - **Resources** reach the model through three tools shaped as Codex's:
//!   `list_mcp_resources` and `list_mcp_resource_templates` (every server's, or one page of
//!   one server's with `cursor`) and `read_mcp_resource` (`server`, `uri`): text as text
//!   (at most 256 KiB for the model, cut with a note), the first small image as an image.
//!   The host lists and reads them whole ([`Session::read_mcp_resource`](crate::session::Session::read_mcp_resource)),
//!   subscribes to changes and lists **prompts** and gets their messages (for slash
//!   commands).
//! - **The host** ([`McpHost`]) answers `elicitation/create` (form and URL modes; fields
//!   left out get the schema's defaults, then the answer is checked against the schema;
//!   without a host the client declares no elicitation and declines), is handed the URL of
//!   a login, and hears of changed lists and resources. **Roots**: the session's working
//!   directory, then the host's, with `notifications/roots/list_changed` when they change.
//!   **Sampling** is declined: the client declares no sampling capability.
//! - **OAuth** (HTTP servers): a 401 is answered per the MCP authorization spec —
//!   discovery from `WWW-Authenticate` (protected-resource metadata, then the authorization
//!   server's), a pre-registered client, a client metadata document or dynamic
//!   registration, authorization code with PKCE `S256` through a redirect to 127.0.0.1,
//!   `resource` indicators, refresh (also before expiry), step-up on `insufficient_scope`,
//!   bounded retries; machine clients (`client_credentials` with a secret or an ES256
//!   client assertion) and enterprise identity assertions (SEP-990); tokens in the token
//!   file (0600, [`McpServer::with_token_file`]), never in an event, error, log or
//!   `Debug`. [`McpServer::login`] and [`McpServer::logout`] do it outside a session.
//! - **Control**: parallel calls to one server are multiplexed by request id; each call
//!   times out after `call_timeout` of silence (a progress notification restarts it);
//!   interrupt and abort send `notifications/cancelled` and return at once; a server that
//!   dies mid-call gives an error result and is restarted for the next call, at most
//!   `max_restarts` times per session.
//!
//! Subagents use their parent's servers: the same connections, no second process.
//! Nothing in this module spawns a process or needs raw system calls itself: `exec` does
//! both.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};

mod connection;
mod handle;
mod host;
mod http;
mod inbound;
pub(crate) mod names;
mod oauth;
mod resources;
mod rpc;
pub(crate) mod server;
mod stdio;
mod tools;

pub use host::{Elicitation, ElicitationResponse, McpHost};

pub(crate) use host::ClientContext;
pub(crate) use server::Registered;

/// One MCP server to connect to: a command (stdio) or a URL (Streamable HTTP).
///
/// ```
/// use agentloop::mcp::McpServer;
/// use std::time::Duration;
///
/// let server = McpServer::stdio("everything", "npx")
///     .with_args(["-y", "@modelcontextprotocol/server-everything"])
///     .with_startup_timeout(Duration::from_secs(60));
/// assert_eq!(server.name, "everything");
/// ```
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct McpServer {
    /// The server's name (the `<server>` of `mcp__<server>__<tool>`).
    pub name: String,
    /// The program to run (stdio); looked up on `PATH`.
    pub command: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to the core environment the server starts with.
    pub env: BTreeMap<String, String>,
    /// Its working directory; the host's when `None`.
    pub cwd: Option<PathBuf>,
    /// The Streamable HTTP endpoint, for a remote server (then `command` is unused).
    pub url: Option<String>,
    /// How long the server may take to start, answer the handshake and list its tools.
    /// Default 30 s (a first `npx` run downloads the package).
    pub startup_timeout: Duration,
    /// How long one call may stay silent (progress notifications restart it). Default 120 s.
    pub call_timeout: Duration,
    /// How many times a server that died is restarted in one session. Default 1.
    pub max_restarts: u32,
    /// How the client logs in to a Streamable HTTP server that answers 401 (OAuth 2.1 per
    /// the MCP authorization spec), set with the `with_oauth_*` methods and
    /// [`with_token_file`](Self::with_token_file). The default registers dynamically and
    /// keeps the tokens in memory only.
    pub(crate) oauth: OAuthSettings,
}

/// The OAuth client settings of one Streamable HTTP server (see the `with_oauth_*`
/// methods of [`McpServer`]). Every field is optional: a server that answers 401 is
/// discovered from its `WWW-Authenticate` header and the client registers itself
/// dynamically, unless a pre-registered client or a client metadata document is set.
#[derive(Clone, Default, PartialEq)]
pub(crate) struct OAuthSettings {
    /// A client id registered beforehand (then no registration is attempted).
    pub(crate) client_id: Option<String>,
    /// The secret of that pre-registered client, if it is a confidential one.
    pub(crate) client_secret: Option<String>,
    /// An HTTPS URL of a client metadata document, the client id where the
    /// authorization server supports that.
    pub(crate) client_metadata_url: Option<String>,
    /// The scopes to ask for instead of those the server names.
    pub(crate) scopes: Option<Vec<String>>,
    /// A fixed port for the loopback redirect.
    pub(crate) callback_port: Option<u16>,
    /// The `client_credentials` grant instead of the authorization code.
    pub(crate) client_credentials: bool,
    /// Where tokens and registrations are kept; in memory when `None`.
    pub(crate) token_file: Option<PathBuf>,
    /// An enterprise identity assertion (SEP-990) instead of a user's login.
    pub(crate) id_jag: Option<IdentityAssertion>,
    /// A PKCS#8 EC P-256 key (PEM) to sign client assertions with (`private_key_jwt`).
    pub(crate) client_key: Option<String>,
}

/// The IdP side of an enterprise identity assertion (SEP-990).
#[derive(Clone, PartialEq)]
pub(crate) struct IdentityAssertion {
    pub(crate) idp_token_endpoint: String,
    pub(crate) idp_client_id: String,
    /// The user's ID token from the IdP (a secret: never printed).
    pub(crate) id_token: String,
}

impl std::fmt::Debug for OAuthSettings {
    /// Never prints the client secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthSettings")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "…"))
            .field("client_metadata_url", &self.client_metadata_url)
            .field("scopes", &self.scopes)
            .field("callback_port", &self.callback_port)
            .field("client_credentials", &self.client_credentials)
            .field("token_file", &self.token_file)
            .field("client_key", &self.client_key.as_ref().map(|_| "…"))
            .field(
                "id_jag",
                &self
                    .id_jag
                    .as_ref()
                    .map(|j| (&j.idp_token_endpoint, &j.idp_client_id)),
            )
            .finish()
    }
}

impl std::fmt::Debug for McpServer {
    /// Never prints `env` values (they may hold tokens).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("url", &self.url.as_ref().map(|_| "…"))
            .field("startup_timeout", &self.startup_timeout)
            .field("call_timeout", &self.call_timeout)
            .field("max_restarts", &self.max_restarts)
            .field("oauth", &self.oauth)
            .finish()
    }
}

impl McpServer {
    fn new(name: impl Into<String>) -> McpServer {
        McpServer {
            name: name.into(),
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            startup_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(120),
            max_restarts: 1,
            oauth: OAuthSettings::default(),
        }
    }

    /// A server run as `command`, spoken to over its stdin and stdout.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>) -> McpServer {
        McpServer {
            command: Some(command.into()),
            ..McpServer::new(name)
        }
    }

    /// A server at a Streamable HTTP endpoint.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> McpServer {
        McpServer {
            url: Some(url.into()),
            ..McpServer::new(name)
        }
    }

    /// Sets the arguments.
    pub fn with_args<I, S>(mut self, args: I) -> McpServer
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Adds an environment variable.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> McpServer {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Sets the working directory.
    pub fn with_cwd(mut self, cwd: impl Into<PathBuf>) -> McpServer {
        self.cwd = Some(cwd.into());
        self
    }

    /// Sets the startup timeout.
    pub fn with_startup_timeout(mut self, timeout: Duration) -> McpServer {
        self.startup_timeout = timeout;
        self
    }

    /// Sets the call timeout.
    pub fn with_call_timeout(mut self, timeout: Duration) -> McpServer {
        self.call_timeout = timeout;
        self
    }

    /// Sets how many times a dead server is restarted per session.
    pub fn with_max_restarts(mut self, restarts: u32) -> McpServer {
        self.max_restarts = restarts;
        self
    }

    /// Logs in as a client registered beforehand with the server's authorization server
    /// (`client_secret` for a confidential client); no registration is attempted then.
    pub fn with_oauth_client(
        mut self,
        client_id: impl Into<String>,
        client_secret: Option<String>,
    ) -> McpServer {
        self.oauth.client_id = Some(client_id.into());
        self.oauth.client_secret = client_secret;
        self
    }

    /// Uses `url` (an HTTPS URL of an OAuth client metadata document) as the client id where
    /// the authorization server supports client metadata documents.
    pub fn with_oauth_client_metadata_url(mut self, url: impl Into<String>) -> McpServer {
        self.oauth.client_metadata_url = Some(url.into());
        self
    }

    /// Asks for these scopes instead of those the server names (its `WWW-Authenticate`
    /// `scope`, else its metadata's `scopes_supported`).
    pub fn with_oauth_scopes<I, S>(mut self, scopes: I) -> McpServer
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.oauth.scopes = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// Listens for the login's redirect at `http://127.0.0.1:PORT/callback` (for a client
    /// registered with that redirect URI) instead of an ephemeral port.
    pub fn with_oauth_callback_port(mut self, port: u16) -> McpServer {
        self.oauth.callback_port = Some(port);
        self
    }

    /// Uses the `client_credentials` grant (a machine client: the client id and secret of
    /// [`with_oauth_client`](Self::with_oauth_client), no user and no browser).
    pub fn with_oauth_client_credentials(mut self) -> McpServer {
        self.oauth.client_credentials = true;
        self
    }

    /// Logs in with an enterprise identity assertion (SEP-990) instead of a user's login:
    /// the user's `id_token` from the enterprise IdP is exchanged at `idp_token_endpoint`
    /// (as the IdP's client `idp_client_id`) for an identity assertion grant, which the
    /// server's authorization server takes from the client set with
    /// [`with_oauth_client`](Self::with_oauth_client). The ID token is never printed.
    pub fn with_oauth_identity_assertion(
        mut self,
        idp_token_endpoint: impl Into<String>,
        idp_client_id: impl Into<String>,
        id_token: impl Into<String>,
    ) -> McpServer {
        self.oauth.id_jag = Some(IdentityAssertion {
            idp_token_endpoint: idp_token_endpoint.into(),
            idp_client_id: idp_client_id.into(),
            id_token: id_token.into(),
        });
        self
    }

    /// Authenticates the client of [`with_oauth_client`](Self::with_oauth_client) (give it
    /// no secret) with client assertions signed by `pem`, a PKCS#8 EC P-256 private key
    /// (`private_key_jwt`, ES256; SEP-1046's machine clients pair it with
    /// [`with_oauth_client_credentials`](Self::with_oauth_client_credentials)). Signing
    /// needs the `tls` feature. The key is never printed.
    pub fn with_oauth_client_key(mut self, pem: impl Into<String>) -> McpServer {
        self.oauth.client_key = Some(pem.into());
        self
    }

    /// Keeps this server's OAuth tokens and client registration in `path`: JSON, mode
    /// 0600, replaced atomically, shared by the servers that name the same file (keyed by
    /// server URL). Without it they live in memory for the session.
    pub fn with_token_file(mut self, path: impl Into<PathBuf>) -> McpServer {
        self.oauth.token_file = Some(path.into());
        self
    }

    /// The token file set with [`with_token_file`](Self::with_token_file).
    pub fn token_file(&self) -> Option<&std::path::Path> {
        self.oauth.token_file.as_deref()
    }

    /// Logs in to this (Streamable HTTP) server now, as `agentloop mcp login NAME` does:
    /// discovers its authorization server, registers if needed, hands the authorization
    /// URL to `host` ([`McpHost::open_url`]), waits up to `timeout` for the browser's
    /// redirect to the loopback listener, and keeps the tokens in the token file.
    ///
    /// The error says what failed (discovery, registration, the user's refusal, the
    /// timeout); it never holds a token.
    pub fn login(&self, host: std::sync::Arc<dyn McpHost>, timeout: Duration) -> Result<()> {
        oauth::login(self, host, timeout)
    }

    /// Forgets the tokens (and the client registration) kept for this server in its
    /// token file. `Ok(false)` when there were none.
    pub fn logout(&self) -> Result<bool> {
        oauth::logout(self)
    }

    /// Whether tokens for this server are kept in its token file (whether or not they
    /// are still valid: the server decides that).
    pub fn has_login(&self) -> bool {
        oauth::has_login(self)
    }
}

/// Where a server stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpServerState {
    /// Still starting.
    Starting,
    /// Connected; its tools are registered.
    Ready,
    /// It failed to start (why, with its stderr tail).
    Failed(String),
    /// It needs a login (OAuth) that did not happen: why, and what to do.
    NeedsLogin(String),
}

/// A server's name, state and tool count.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct McpServerStatus {
    /// The configured name.
    pub name: String,
    /// Where it stands.
    pub state: McpServerState,
    /// How many tools it listed.
    pub tools: usize,
    /// How many resources it listed (0 without the `resources` capability).
    pub resources: usize,
    /// How many resource templates it listed.
    pub resource_templates: usize,
    /// How many prompts it listed (0 without the `prompts` capability).
    pub prompts: usize,
    /// The protocol revision in use (empty unless ready).
    pub protocol_version: String,
}

/// Reads the `{"mcpServers": {"name": {"command", "args", "env", "cwd"} | {"url"}}}` JSON
/// that Claude Code and other clients use. Optional per server: `startup_timeout_ms`,
/// `call_timeout_ms`, `max_restarts`, and for a `url` server `oauth`: `{"client_id",
/// "client_secret", "client_metadata_url", "scopes": [..], "callback_port",
/// "grant_type": "client_credentials"}` (the `with_oauth_*` methods of [`McpServer`]).
/// Servers come out sorted by name.
///
/// ```
/// let servers = agentloop::mcp::parse_config(r#"{"mcpServers": {
///     "time": {"command": "uvx", "args": ["mcp-server-time"]},
///     "remote": {"url": "http://127.0.0.1:8000/mcp"}
/// }}"#)?;
/// assert_eq!(servers[0].name, "remote");
/// assert_eq!(servers[1].args, ["mcp-server-time"]);
/// # Ok::<(), agentloop::Error>(())
/// ```
pub fn parse_config(text: &str) -> Result<Vec<McpServer>> {
    let bad = |why: String| Error::new(ErrorKind::Configuration, format!("MCP config: {why}"));
    let root: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let Some(servers) = root.get("mcpServers").and_then(Value::as_object) else {
        return Err(bad("no `mcpServers` object".to_string()));
    };
    let mut out = Vec::new();
    for (name, entry) in servers {
        let text = |key: &str| entry.get(key).and_then(Value::as_str).map(str::to_owned);
        let mut server = match (text("command"), text("url")) {
            (_, Some(url)) => McpServer::http(name, url),
            (Some(command), None) => McpServer::stdio(name, command),
            (None, None) => return Err(bad(format!("server `{name}` has no command or url"))),
        };
        if let Some(args) = entry.get("args").and_then(Value::as_array) {
            server.args = args
                .iter()
                .map(|a| a.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or_else(|| bad(format!("server `{name}`: `args` must be strings")))?;
        }
        if let Some(env) = entry.get("env").and_then(Value::as_object) {
            for (key, value) in env {
                let value = value
                    .as_str()
                    .ok_or_else(|| bad(format!("server `{name}`: `env.{key}` must be a string")))?;
                server.env.insert(key.clone(), value.to_string());
            }
        }
        server.cwd = text("cwd").map(PathBuf::from);
        let ms = |key: &str| entry.get(key).and_then(Value::as_u64);
        if let Some(ms) = ms("startup_timeout_ms") {
            server.startup_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = ms("call_timeout_ms") {
            server.call_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = ms("max_restarts") {
            server.max_restarts = n.min(u64::from(u32::MAX)) as u32;
        }
        if let Some(oauth) = entry.get("oauth") {
            server.oauth =
                parse_oauth(oauth).map_err(|why| bad(format!("server `{name}`: {why}")))?;
        }
        out.push(server);
    }
    Ok(out)
}

/// The `oauth` object of one server in the config file.
fn parse_oauth(entry: &Value) -> std::result::Result<OAuthSettings, String> {
    let Some(entry) = entry.as_object() else {
        return Err("`oauth` must be an object".to_string());
    };
    let text = |key: &str| -> std::result::Result<Option<String>, String> {
        match entry.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("`oauth.{key}` must be a string")),
        }
    };
    let mut oauth = OAuthSettings {
        client_id: text("client_id")?,
        client_secret: text("client_secret")?,
        client_metadata_url: text("client_metadata_url")?,
        ..OAuthSettings::default()
    };
    if let Some(scopes) = entry.get("scopes") {
        let scopes = scopes
            .as_array()
            .and_then(|list| list.iter().map(|s| s.as_str().map(str::to_owned)).collect())
            .ok_or("`oauth.scopes` must be an array of strings")?;
        oauth.scopes = Some(scopes);
    }
    if let Some(port) = entry.get("callback_port") {
        let port = port
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .ok_or("`oauth.callback_port` must be a port number")?;
        oauth.callback_port = Some(port);
    }
    match text("grant_type")?.as_deref() {
        None | Some("authorization_code") => {}
        Some("client_credentials") => oauth.client_credentials = true,
        Some(other) => return Err(format!("`oauth.grant_type` `{other}` is not supported")),
    }
    Ok(oauth)
}
