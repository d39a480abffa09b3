//! An MCP (Model Context Protocol) client: the tools of MCP servers as ordinary tools of a
//! session. Synchronous (threads and channels), both protocol eras, stdio and Streamable
//! HTTP.
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
//!   an old one; a server that ignores the probe costs that much startup time), the `initialize` → `notifications/initialized` handshake of
//!   `2024-11-05` … `2025-11-25` — unless `initialize` is refused with −32022 (the probe's
//!   answer came late), which means `2026-07-28` after all.
//! - **Tools** are registered as `mcp__<server>__<tool>` (`names.rs` holds the name and
//!   schema rules per provider), re-listed after `notifications/tools/list_changed` (at the
//!   next input). Arguments are validated against the server's own schema before the call.
//!   Results: text parts, the first image as an image part, resource links and embedded
//!   text resources as text, `structuredContent` when there is no text, `isError` as an
//!   error result. The session truncates the model's copy; `TOOL_CALL_END` has it all.
//! - **Control**: parallel calls to one server are multiplexed by request id; each call
//!   times out after `call_timeout` of silence (a progress notification restarts it);
//!   interrupt and abort send `notifications/cancelled` and return at once; a server that
//!   dies mid-call gives an error result and is restarted for the next call, at most
//!   `max_restarts` times per session.
//!
//! Subagents do not get the parent's MCP tools. Nothing in this module spawns a process or
//! needs raw system calls itself: `exec` does both.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};

mod connection;
mod http;
pub(crate) mod names;
pub(crate) mod server;
mod stdio;
mod tools;

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
    /// The protocol revision in use (empty unless ready).
    pub protocol_version: String,
}

/// Reads the `{"mcpServers": {"name": {"command", "args", "env", "cwd"} | {"url"}}}` JSON
/// that Claude Code and other clients use. Optional per server: `startup_timeout_ms`,
/// `call_timeout_ms`, `max_restarts`. Servers come out sorted by name.
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
        out.push(server);
    }
    Ok(out)
}
