//! One configured MCP server as its session (and the session's subagents) share it: its
//! live connection, started within the startup timeout and restarted (at most
//! `max_restarts` times) after it died, what it said about itself, and the requests made
//! through it: tool calls, resource listings and reads, prompts. The registered tools reach
//! it through [`tools::CallTool`] and [`ResourceServer`].
//!
//! It never waits without a deadline, and never starts a process or opens a socket
//! itself: the transports do.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::McpServer;
use super::connection::{Connection, ServerInfo};
use super::host::ClientContext;
use super::oauth::Authorizer;
use super::resources::{self, MAX_PAGES};
use super::rpc::RpcFailure;
use super::tools::{ListedTool, ResourceServer};
use crate::cancel::CancelToken;
use crate::llm::Message;
use crate::sync::lock;

/// Most stderr bytes quoted in a warning or an error.
const TAIL_IN_MESSAGES: usize = 2000;

/// One configured server, shared by its tools' executors (a session's and its
/// subagents'; through [`tools::CallTool`] and [`ResourceServer`]).
pub(crate) struct ServerHandle {
    pub(crate) config: McpServer,
    pub(crate) conn: Mutex<Option<Arc<Connection>>>,
    /// What the server said about itself at its last start.
    pub(crate) info: Mutex<Option<ServerInfo>>,
    pub(crate) restarts: AtomicU32,
    pub(crate) closed: AtomicBool,
    /// The session's token: ends a startup in progress.
    pub(crate) abort: CancelToken,
    pub(crate) context: Arc<ClientContext>,
    pub(crate) auth: Option<Arc<Authorizer>>,
}

/// What a start gives: the connection, its tools and what the server said.
pub(crate) struct Ready {
    pub(crate) conn: Arc<Connection>,
    pub(crate) tools: Vec<ListedTool>,
    pub(crate) info: ServerInfo,
}

pub(crate) type Started = std::result::Result<Ready, String>;

impl ServerHandle {
    /// Starts the server, runs the handshake and lists its tools, all within the startup
    /// timeout. The error says why, with the server's stderr tail.
    pub(crate) fn start(&self) -> Started {
        let deadline = Instant::now() + self.config.startup_timeout;
        let conn = match (&self.config.url, &self.config.command) {
            (Some(url), _) => {
                let target = super::http::Target {
                    name: &self.config.name,
                    url,
                    startup: self.config.startup_timeout,
                    call: self.config.call_timeout,
                };
                super::http::connect(&target, Arc::clone(&self.context), self.auth.clone())
            }
            (None, Some(command)) => {
                super::stdio::connect(&self.config, command, Arc::clone(&self.context))
                    .map_err(|e| format!("could not start: {e}"))?
            }
            (None, None) => return Err("neither a command nor a url is configured".to_string()),
        };
        let failed = |conn: &Connection, what: &str, why: RpcFailure| {
            let why = match why {
                RpcFailure::Timeout(_) => format!(
                    "not ready within its startup timeout of {} ms",
                    self.config.startup_timeout.as_millis()
                ),
                other => other.to_string(),
            };
            // Ended first, so that its stderr tail is complete.
            conn.shutdown();
            format!("{what} failed: {why}{}", tail_note(&conn.stderr_tail()))
        };
        let info = match conn.handshake(deadline, &self.abort) {
            Ok(info) => info,
            Err(why) => return Err(failed(&conn, "the handshake", why)),
        };
        let tools = match list_tools(&conn, deadline, &self.abort) {
            Ok(tools) => tools,
            Err(why) => return Err(failed(&conn, "tools/list", why)),
        };
        Ok(Ready {
            conn: Arc::new(conn),
            tools,
            info,
        })
    }

    /// Whether the server declared the capability `name` (`resources`, `prompts`, …).
    pub(crate) fn has(&self, name: &str) -> bool {
        // Taken before `info` (the order `connection` takes them in).
        let live = self.live();
        let mut info = lock(&self.info);
        let Some(info) = info.as_mut() else {
            return false;
        };
        // A server whose probe answer came late: its capabilities arrive with it.
        if info.capabilities.is_null() {
            if let Some(late) = live.and_then(|c| c.late_capabilities()) {
                info.capabilities = late;
            }
        }
        info.has(name)
    }

    /// Sends `method` on the live connection (answering any input it asks for); an error
    /// text for the model or the host.
    pub(crate) fn send(
        &self,
        method: &str,
        params: Value,
        cancel: &CancelToken,
    ) -> std::result::Result<Value, String> {
        let conn = self.connection()?;
        conn.request_with_input(method, params, self.config.call_timeout, cancel)
            .map_err(|why| self.failure(&conn, why))
    }

    /// Calls `tool` with `arguments`; the result object, or an error text for the model.
    pub(crate) fn call(
        &self,
        tool: &str,
        arguments: Value,
        cancel: &CancelToken,
    ) -> std::result::Result<Value, String> {
        self.send(
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
            cancel,
        )
    }

    /// Reads the resource `uri`.
    pub(crate) fn read_resource(
        &self,
        uri: &str,
        cancel: &CancelToken,
    ) -> std::result::Result<Vec<Value>, String> {
        let conn = self.connection()?;
        resources::read(&conn, uri, self.config.call_timeout, cancel)
            .map_err(|why| self.failure(&conn, why))
    }

    /// Lists the resources (`templates`: the templates), every page.
    pub(crate) fn resources(
        &self,
        templates: bool,
        cancel: &CancelToken,
    ) -> std::result::Result<Vec<Value>, String> {
        if !self.has("resources") {
            return Ok(Vec::new());
        }
        let conn = self.connection()?;
        let (name, timeout) = (&self.config.name, self.config.call_timeout);
        resources::list_resources(&conn, name, templates, timeout, cancel)
            .map_err(|why| self.failure(&conn, why))
    }

    /// One page of a listing for the model: `resources/list` or
    /// `resources/templates/list` from `cursor`.
    pub(crate) fn page(
        &self,
        method: &str,
        cursor: Option<&str>,
        cancel: &CancelToken,
    ) -> std::result::Result<Value, String> {
        let params = match cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let conn = self.connection()?;
        conn.request(method, params, self.config.call_timeout, cancel)
            .map_err(|why| self.failure(&conn, why))
    }

    /// Lists the prompts, every page.
    pub(crate) fn prompts(&self, cancel: &CancelToken) -> std::result::Result<Vec<Value>, String> {
        if !self.has("prompts") {
            return Ok(Vec::new());
        }
        let conn = self.connection()?;
        resources::list_prompts(&conn, &self.config.name, self.config.call_timeout, cancel)
            .map_err(|why| self.failure(&conn, why))
    }

    /// Gets the prompt `name` with `arguments`.
    pub(crate) fn get_prompt(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
        cancel: &CancelToken,
    ) -> std::result::Result<Vec<Message>, String> {
        let conn = self.connection()?;
        resources::get_prompt(&conn, name, arguments, self.config.call_timeout, cancel)
            .map_err(|why| self.failure(&conn, why))
    }

    /// What a failed request says to the model or the host.
    fn failure(&self, conn: &Connection, why: RpcFailure) -> String {
        let name = &self.config.name;
        match why {
            RpcFailure::Cancelled => "the call was cancelled".to_string(),
            RpcFailure::Timeout(t) => format!(
                "the MCP server `{name}` did not answer within {} ms (and sent no progress); \
                 the call was cancelled",
                t.as_millis()
            ),
            RpcFailure::Error { code, message } => {
                format!("the MCP server `{name}` answered with error {code}: {message}")
            }
            // A refused login is the authorizer's own message, meant as it is.
            RpcFailure::Send(why) if why.contains("needs a login") || why.contains("OAuth") => why,
            why @ (RpcFailure::Closed(_) | RpcFailure::Send(_)) => {
                let left = self.config.max_restarts
                    - self
                        .restarts
                        .load(Ordering::SeqCst)
                        .min(self.config.max_restarts);
                let next = if left > 0 && !self.closed.load(Ordering::SeqCst) {
                    "it is restarted for the next call"
                } else {
                    "it is not restarted again"
                };
                format!(
                    "the MCP server `{name}` stopped during the call ({why}); {next}{}",
                    tail_note(&conn.stderr_tail())
                )
            }
        }
    }

    /// The live connection, restarting a dead server when restarts are left.
    pub(crate) fn connection(&self) -> std::result::Result<Arc<Connection>, String> {
        let mut slot = lock(&self.conn);
        if let Some(conn) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(Arc::clone(conn));
        }
        let name = &self.config.name;
        if self.closed.load(Ordering::SeqCst) {
            return Err(format!("the MCP server `{name}` is shut down"));
        }
        if self.restarts.load(Ordering::SeqCst) >= self.config.max_restarts {
            return Err(format!(
                "the MCP server `{name}` stopped and has used its {} restart(s) for this session",
                self.config.max_restarts
            ));
        }
        self.restarts.fetch_add(1, Ordering::SeqCst);
        slot.take();
        let ready = self
            .start()
            .map_err(|why| format!("restarting the MCP server `{name}`: {why}"))?;
        *lock(&self.info) = Some(ready.info);
        *slot = Some(Arc::clone(&ready.conn));
        Ok(ready.conn)
    }

    /// The connection if it is live, without restarting anything.
    pub(crate) fn live(&self) -> Option<Arc<Connection>> {
        lock(&self.conn)
            .as_ref()
            .filter(|c| !c.is_closed())
            .cloned()
    }

    pub(crate) fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(conn) = lock(&self.conn).take() {
            conn.shutdown();
        }
    }
}

impl ResourceServer for ServerHandle {
    fn name(&self) -> &str {
        &self.config.name
    }
    fn page(
        &self,
        method: &str,
        cursor: Option<&str>,
        cancel: &CancelToken,
    ) -> std::result::Result<Value, String> {
        ServerHandle::page(self, method, cursor, cancel)
    }
    fn list(
        &self,
        templates: bool,
        cancel: &CancelToken,
    ) -> std::result::Result<Vec<Value>, String> {
        self.resources(templates, cancel)
    }
    fn read(&self, uri: &str, cancel: &CancelToken) -> std::result::Result<Vec<Value>, String> {
        self.read_resource(uri, cancel)
    }
}

/// `tools/list`, every page (at most [`MAX_PAGES`]), by `deadline`.
pub(crate) fn list_tools(
    conn: &Connection,
    deadline: Instant,
    cancel: &CancelToken,
) -> std::result::Result<Vec<ListedTool>, RpcFailure> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let page = conn.request("tools/list", params, left, cancel)?;
        tools.extend(
            page.get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(ListedTool::from_json),
        );
        cursor = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    Ok(tools)
}

fn tail_note(tail: &str) -> String {
    let tail = tail.trim();
    if tail.is_empty() {
        return String::new();
    }
    let start = tail.len().saturating_sub(TAIL_IN_MESSAGES);
    let start = (start..=tail.len())
        .find(|i| tail.is_char_boundary(*i))
        .unwrap_or(tail.len());
    format!("; its stderr ends with:\n{}", &tail[start..])
}
