//! The servers of one session: started in parallel on named threads, waited for (each at
//! most its startup timeout) before the first model call, their tools registered, re-listed
//! on `list_changed`, restarted (at most `max_restarts` times) after dying, and all ended
//! with the session.
//!
//! It never waits without a deadline and never keeps a server past [`McpServers::shutdown`].

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use serde_json::{Value, json};

use super::connection::{Connection, RpcFailure};
use super::tools::{self, ListedTool};
use super::{McpServer, McpServerState, McpServerStatus};
use crate::cancel::CancelToken;
use crate::sync::lock;
use crate::tools::ToolRegistry;

/// Most `tools/list` pages read (a server paginating forever is cut off).
const MAX_PAGES: usize = 100;
/// Most stderr bytes quoted in a warning or an error.
const TAIL_IN_MESSAGES: usize = 2000;

/// One configured server, shared by its tools' executors (through [`tools::CallTool`]).
struct ServerHandle {
    config: McpServer,
    conn: Mutex<Option<Arc<Connection>>>,
    restarts: AtomicU32,
    closed: AtomicBool,
    /// The session's token: ends a startup in progress.
    abort: CancelToken,
}

type Started = Result<(Arc<Connection>, Vec<ListedTool>, String), String>;

impl ServerHandle {
    /// Starts the server, runs the handshake and lists its tools, all within the startup
    /// timeout. The error says why, with the server's stderr tail.
    fn start(&self) -> Started {
        let deadline = Instant::now() + self.config.startup_timeout;
        let conn = match (&self.config.url, &self.config.command) {
            (Some(url), _) => {
                super::http::connect(url, self.config.startup_timeout, self.config.call_timeout)
            }
            (None, Some(command)) => super::stdio::connect(&self.config, command)
                .map_err(|e| format!("could not start: {e}"))?,
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
        Ok((Arc::new(conn), tools, info.version))
    }

    /// Calls `tool` with `arguments`; the result object, or an error text for the model.
    fn call(&self, tool: &str, arguments: Value, cancel: &CancelToken) -> Result<Value, String> {
        let conn = self.connection()?;
        let params = json!({"name": tool, "arguments": arguments});
        let name = &self.config.name;
        match conn.request("tools/call", params, self.config.call_timeout, cancel) {
            Ok(result) => Ok(result),
            Err(RpcFailure::Cancelled) => Err("the call was cancelled".to_string()),
            Err(RpcFailure::Timeout(t)) => Err(format!(
                "the MCP server `{name}` did not answer within {} ms (and sent no progress); \
                 the call was cancelled",
                t.as_millis()
            )),
            Err(RpcFailure::Error { code, message }) => Err(format!(
                "the MCP server `{name}` answered with error {code}: {message}"
            )),
            Err(why @ (RpcFailure::Closed(_) | RpcFailure::Send(_))) => {
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
                Err(format!(
                    "the MCP server `{name}` stopped during the call ({why}); {next}{}",
                    tail_note(&conn.stderr_tail())
                ))
            }
        }
    }

    /// The live connection, restarting a dead server when restarts are left.
    fn connection(&self) -> Result<Arc<Connection>, String> {
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
        let (conn, _tools, _version) = self
            .start()
            .map_err(|why| format!("restarting the MCP server `{name}`: {why}"))?;
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
    }

    fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(conn) = lock(&self.conn).take() {
            conn.shutdown();
        }
    }
}

/// `tools/list`, every page (at most [`MAX_PAGES`]), by `deadline`.
fn list_tools(
    conn: &Connection,
    deadline: Instant,
    cancel: &CancelToken,
) -> Result<Vec<ListedTool>, RpcFailure> {
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

enum Phase {
    Starting(JoinHandle<Started>),
    Ready {
        tools: Vec<ListedTool>,
        registered: Vec<String>,
        version: String,
    },
    Failed(String),
}

struct Slot {
    handle: Arc<ServerHandle>,
    phase: Phase,
    reported: bool,
}

/// The MCP servers of one session (see the module docs).
pub struct McpServers {
    slots: Vec<Slot>,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServers")
            .field("servers", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl McpServers {
    /// Starts every server of `configs` on its own thread and returns at once. `abort`
    /// ends startups in progress.
    pub fn start(configs: &[McpServer], abort: &CancelToken) -> McpServers {
        let slots = configs
            .iter()
            .map(|config| {
                let handle = Arc::new(ServerHandle {
                    config: config.clone(),
                    conn: Mutex::new(None),
                    restarts: AtomicU32::new(0),
                    closed: AtomicBool::new(false),
                    abort: abort.child(),
                });
                let starter = Arc::clone(&handle);
                let phase = thread::Builder::new()
                    .name(format!("agentloop-mcp-start-{}", config.name))
                    .spawn(move || starter.start())
                    .map(Phase::Starting)
                    .unwrap_or_else(|e| Phase::Failed(format!("could not start a thread: {e}")));
                Slot {
                    handle,
                    phase,
                    reported: false,
                }
            })
            .collect();
        McpServers { slots }
    }

    /// Waits for the servers still starting (each ends by its own startup timeout).
    pub fn wait(&mut self) {
        for slot in &mut self.slots {
            let phase = std::mem::replace(&mut slot.phase, Phase::Failed(String::new()));
            slot.phase = match phase {
                Phase::Starting(starter) => match starter.join() {
                    Ok(Ok((conn, tools, version))) => {
                        *lock(&slot.handle.conn) = Some(conn);
                        Phase::Ready {
                            tools,
                            registered: Vec::new(),
                            version,
                        }
                    }
                    Ok(Err(why)) => Phase::Failed(why),
                    Err(_) => Phase::Failed("its startup thread panicked".to_string()),
                },
                other => other,
            };
        }
    }

    /// Waits for the startups, registers the tools of servers that became ready, re-lists
    /// the tools of servers that announced `list_changed`; returns a warning for each
    /// server that failed (once per server).
    pub fn prepare(&mut self, registry: &mut ToolRegistry) -> Vec<String> {
        self.wait();
        let mut warnings = Vec::new();
        for slot in &mut self.slots {
            let name = slot.handle.config.name.clone();
            match &mut slot.phase {
                Phase::Ready {
                    tools, registered, ..
                } => {
                    let changed = lock(&slot.handle.conn)
                        .as_ref()
                        .is_some_and(|c| c.take_tools_changed());
                    if changed {
                        let conn = lock(&slot.handle.conn).clone();
                        let deadline = Instant::now() + slot.handle.config.call_timeout;
                        if let Some(conn) = conn {
                            match list_tools(&conn, deadline, &slot.handle.abort) {
                                Ok(new) => {
                                    for old in registered.drain(..) {
                                        registry.unregister(&old);
                                    }
                                    *tools = new;
                                }
                                Err(why) => warnings.push(format!(
                                    "MCP server `{name}`: re-listing its tools failed: {why}"
                                )),
                            }
                        }
                    }
                    if registered.is_empty() && !tools.is_empty() {
                        let server = Arc::clone(&slot.handle);
                        let call: tools::CallTool = Arc::new(move |tool, arguments, cancel| {
                            server.call(tool, arguments, cancel)
                        });
                        *registered = tools::register(registry, &name, &call, tools);
                    }
                }
                Phase::Failed(why) if !slot.reported => {
                    slot.reported = true;
                    warnings.push(format!(
                        "MCP server `{name}` is not available, the session goes on without \
                         it: {why}"
                    ));
                }
                _ => {}
            }
        }
        warnings
    }

    /// Every server's state and tool count (waits for the startups first).
    pub fn statuses(&mut self) -> Vec<McpServerStatus> {
        self.wait();
        self.slots
            .iter()
            .map(|slot| {
                let (state, tools, version) = match &slot.phase {
                    Phase::Ready { tools, version, .. } => {
                        (McpServerState::Ready, tools.len(), version.clone())
                    }
                    Phase::Failed(why) => (McpServerState::Failed(why.clone()), 0, String::new()),
                    Phase::Starting(_) => (McpServerState::Starting, 0, String::new()),
                };
                McpServerStatus {
                    name: slot.handle.config.name.clone(),
                    state,
                    tools,
                    protocol_version: version,
                }
            })
            .collect()
    }

    /// Ends every server (its process group) and waits for the startups still running.
    pub fn shutdown(&mut self) {
        for slot in &self.slots {
            slot.handle.abort.cancel();
            slot.handle.shutdown();
        }
        self.wait();
        for slot in &self.slots {
            slot.handle.shutdown();
        }
    }
}

impl Drop for McpServers {
    fn drop(&mut self) {
        self.shutdown();
    }
}
