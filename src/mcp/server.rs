//! The servers of one session: started in parallel on named threads, waited for (each at
//! most its startup timeout) before the first model call, their tools registered (into the
//! session's registry and its subagents', which share the connections), re-listed on
//! `list_changed`, restarted (at most `max_restarts` times) after dying, and all ended
//! with the session.
//!
//! It never waits without a deadline and never keeps a server past [`McpServers::shutdown`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::handle::{ServerHandle, Started, list_tools};
use super::host::ClientContext;
use super::oauth::Authorizer;
use super::tools::{self, ListedTool, ResourceServer};
use super::{McpServer, McpServerState, McpServerStatus};
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::Message;
use crate::sync::lock;
use crate::tools::ToolRegistry;

/// The resource and prompt counts shown in a server's status.
#[derive(Default, Clone, Copy)]
struct Counts {
    resources: usize,
    templates: usize,
    prompts: usize,
}

enum Phase {
    Starting(JoinHandle<Started>),
    Ready {
        tools: Vec<ListedTool>,
        /// Bumped each time the tools are listed again.
        generation: u64,
        version: String,
        counts: Option<Counts>,
    },
    Failed(String),
    NeedsLogin(String),
}

struct Slot {
    handle: Arc<ServerHandle>,
    phase: Phase,
    reported: bool,
}

/// What one tool registry holds of the servers' tools: per server, the generation of the
/// list registered and the names given (a session and each of its subagents keep one).
#[derive(Debug, Default)]
pub(crate) struct Registered {
    servers: HashMap<String, (u64, Vec<String>)>,
    resource_tools: bool,
}

/// The MCP servers of one session (see the module docs).
pub struct McpServers {
    slots: Vec<Slot>,
    context: Arc<ClientContext>,
    /// What [`prepare`](Self::prepare) registered into the host's registry.
    host_view: Registered,
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
    /// ends startups in progress. The servers get no host (no elicitation, no
    /// interactive login) and no roots; a session gives them its own.
    pub fn start(configs: &[McpServer], abort: &CancelToken) -> McpServers {
        McpServers::start_with(configs, abort, Arc::new(ClientContext::default()))
    }

    /// [`start`](Self::start) with the session's host and roots.
    pub(crate) fn start_with(
        configs: &[McpServer],
        abort: &CancelToken,
        context: Arc<ClientContext>,
    ) -> McpServers {
        let slots = configs
            .iter()
            .map(|config| {
                let auth = match &config.url {
                    Some(_) => {
                        Authorizer::new(config, context.host.clone(), config.startup_timeout)
                            .map(|a| Some(Arc::new(a)))
                    }
                    None => Ok(None),
                };
                let auth_failure = auth.as_ref().err().cloned();
                let handle = Arc::new(ServerHandle {
                    config: config.clone(),
                    conn: Mutex::new(None),
                    info: Mutex::new(None),
                    restarts: AtomicU32::new(0),
                    closed: AtomicBool::new(false),
                    abort: abort.child(),
                    context: Arc::clone(&context),
                    auth: auth.unwrap_or(None),
                });
                let starter = Arc::clone(&handle);
                let phase = match auth_failure {
                    Some(why) => Phase::Failed(why),
                    None => thread::Builder::new()
                        .name(format!("agentloop-mcp-start-{}", config.name))
                        .spawn(move || starter.start())
                        .map(Phase::Starting)
                        .unwrap_or_else(|e| {
                            Phase::Failed(format!("could not start a thread: {e}"))
                        }),
                };
                Slot {
                    handle,
                    phase,
                    reported: false,
                }
            })
            .collect();
        McpServers {
            slots,
            context,
            host_view: Registered::default(),
        }
    }

    /// Waits for the servers still starting (each ends by its own startup timeout).
    pub fn wait(&mut self) {
        for slot in &mut self.slots {
            let phase = std::mem::replace(&mut slot.phase, Phase::Failed(String::new()));
            slot.phase = match phase {
                Phase::Starting(starter) => match starter.join() {
                    Ok(Ok(ready)) => {
                        *lock(&slot.handle.conn) = Some(ready.conn);
                        let version = ready.info.version.clone();
                        *lock(&slot.handle.info) = Some(ready.info);
                        Phase::Ready {
                            tools: ready.tools,
                            generation: 1,
                            version,
                            counts: None,
                        }
                    }
                    Ok(Err(why)) => match slot.handle.auth.as_ref().and_then(|a| a.needs_login()) {
                        Some(login) => Phase::NeedsLogin(login),
                        None => Phase::Failed(why),
                    },
                    Err(_) => Phase::Failed("its startup thread panicked".to_string()),
                },
                other => other,
            };
        }
    }

    /// Waits for the startups, registers the tools of servers that became ready (and the
    /// resource tools, once a server offers resources), re-lists the tools of servers that
    /// announced `list_changed`; returns a warning for each server that failed (once per
    /// server).
    pub fn prepare(&mut self, registry: &mut ToolRegistry) -> Vec<String> {
        let mut view = std::mem::take(&mut self.host_view);
        let warnings = self.prepare_into(registry, &mut view);
        self.host_view = view;
        warnings
    }

    /// [`prepare`](Self::prepare) for one of several registries sharing the servers (a
    /// session's and its subagents'), each with its own `view`.
    pub(crate) fn prepare_into(
        &mut self,
        registry: &mut ToolRegistry,
        view: &mut Registered,
    ) -> Vec<String> {
        self.wait();
        let mut warnings = Vec::new();
        let mut with_resources = Vec::new();
        for slot in &mut self.slots {
            let name = slot.handle.config.name.clone();
            match &mut slot.phase {
                Phase::Ready {
                    tools, generation, ..
                } => {
                    let changed = slot.handle.live().is_some_and(|c| c.take_changed("tools"));
                    if changed {
                        if let Some(conn) = slot.handle.live() {
                            let deadline = Instant::now() + slot.handle.config.call_timeout;
                            match list_tools(&conn, deadline, &slot.handle.abort) {
                                Ok(new) => {
                                    *tools = new;
                                    *generation += 1;
                                }
                                Err(why) => warnings.push(format!(
                                    "MCP server `{name}`: re-listing its tools failed: {why}"
                                )),
                            }
                        }
                    }
                    let seen = view.servers.entry(name.clone()).or_default();
                    if seen.0 != *generation {
                        for old in seen.1.drain(..) {
                            registry.unregister(&old);
                        }
                        let server = Arc::clone(&slot.handle);
                        let call: tools::CallTool = Arc::new(move |tool, arguments, cancel| {
                            server.call(tool, arguments, cancel)
                        });
                        seen.1 = tools::register(registry, &name, &call, tools);
                        seen.0 = *generation;
                    }
                    if slot.handle.has("resources") {
                        let server: Arc<dyn ResourceServer> = slot.handle.clone();
                        with_resources.push(server);
                    }
                }
                Phase::Failed(why) | Phase::NeedsLogin(why) if !slot.reported => {
                    slot.reported = true;
                    warnings.push(format!(
                        "MCP server `{name}` is not available, the session goes on without \
                         it: {why}"
                    ));
                }
                _ => {}
            }
        }
        if !with_resources.is_empty() && !view.resource_tools {
            tools::register_resource_tools(registry, with_resources);
            view.resource_tools = true;
        }
        warnings
    }

    /// Whether a server's tools changed since `view` was brought up to date (a cheap
    /// look before each model call; [`prepare`](Self::prepare) does the work).
    pub(crate) fn tools_changed(&self, view: &Registered) -> bool {
        self.slots.iter().any(|slot| match &slot.phase {
            Phase::Ready { generation, .. } => {
                slot.handle.live().is_some_and(|c| c.tools_changed())
                    || view
                        .servers
                        .get(&slot.handle.config.name)
                        .is_none_or(|seen| seen.0 != *generation)
            }
            _ => false,
        })
    }

    /// The ready servers (waits for the startups first), to ask without holding any lock.
    pub(crate) fn ready(&mut self) -> ReadyServers {
        self.wait();
        ReadyServers(
            self.slots
                .iter()
                .filter(|slot| matches!(slot.phase, Phase::Ready { .. }))
                .map(|slot| Arc::clone(&slot.handle))
                .collect(),
        )
    }

    /// Every server's state and its tool, resource and prompt counts (waits for the
    /// startups first; the resources and prompts are listed the first time, and again
    /// after the server said they changed).
    pub fn statuses(&mut self) -> Vec<McpServerStatus> {
        self.wait();
        let cancel = CancelToken::new();
        self.slots
            .iter_mut()
            .map(|slot| {
                let handle = &slot.handle;
                let (state, tools, version, counts) = match &mut slot.phase {
                    Phase::Ready {
                        tools,
                        version,
                        counts,
                        ..
                    } => {
                        let conn = handle.live();
                        let stale = conn.as_ref().is_some_and(|c| {
                            c.take_changed("resources") | c.take_changed("prompts")
                        });
                        if counts.is_none() || stale {
                            *counts = Some(count(handle, &cancel));
                        }
                        let counts = counts.unwrap_or_default();
                        (McpServerState::Ready, tools.len(), version.clone(), counts)
                    }
                    Phase::Failed(why) => (
                        McpServerState::Failed(why.clone()),
                        0,
                        String::new(),
                        Counts::default(),
                    ),
                    Phase::NeedsLogin(why) => (
                        McpServerState::NeedsLogin(why.clone()),
                        0,
                        String::new(),
                        Counts::default(),
                    ),
                    Phase::Starting(_) => (
                        McpServerState::Starting,
                        0,
                        String::new(),
                        Counts::default(),
                    ),
                };
                McpServerStatus {
                    name: handle.config.name.clone(),
                    state,
                    tools,
                    resources: counts.resources,
                    resource_templates: counts.templates,
                    prompts: counts.prompts,
                    protocol_version: version,
                }
            })
            .collect()
    }

    /// Every resource of every ready server (templates with `templates`); a server whose
    /// listing fails is left out.
    pub fn resources(&mut self, templates: bool) -> Vec<Value> {
        self.ready().resources(templates)
    }

    /// Every prompt of every ready server; a server whose listing fails is left out.
    pub fn prompts(&mut self) -> Vec<Value> {
        self.ready().prompts()
    }

    /// Reads the resource `uri` of `server`.
    pub fn read_resource(&mut self, server: &str, uri: &str) -> Result<Vec<Value>> {
        self.ready().read_resource(server, uri)
    }

    /// Gets the prompt `name` of `server` with `arguments` (string values): its
    /// messages, ready to submit or show.
    pub fn get_prompt(
        &mut self,
        server: &str,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Vec<Message>> {
        self.ready().get_prompt(server, name, arguments)
    }

    /// Subscribes to (or with `subscribe` false, unsubscribes from) changes of the
    /// resource `uri` of `server`; changes reach
    /// [`McpHost::resource_updated`](super::McpHost::resource_updated).
    pub fn subscribe_resource(&mut self, server: &str, uri: &str, subscribe: bool) -> Result<()> {
        self.ready().subscribe_resource(server, uri, subscribe)
    }

    /// The roots offered to the servers now.
    pub(crate) fn roots(&self) -> Vec<PathBuf> {
        self.context.roots()
    }

    /// Replaces the roots offered to the servers (`roots/list`) and tells the connected
    /// ones that they changed.
    pub fn set_roots(&mut self, roots: Vec<PathBuf>) {
        if self.context.set_roots(roots) {
            for slot in &self.slots {
                if let Some(conn) = slot.handle.live() {
                    conn.roots_changed();
                }
            }
        }
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

fn count(handle: &ServerHandle, cancel: &CancelToken) -> Counts {
    Counts {
        resources: handle.resources(false, cancel).map_or(0, |r| r.len()),
        templates: handle.resources(true, cancel).map_or(0, |r| r.len()),
        prompts: handle.prompts(cancel).map_or(0, |p| p.len()),
    }
}

/// The ready servers at one moment: what the host's requests go through, so that no
/// lock of the session is held while a server answers.
pub(crate) struct ReadyServers(Vec<Arc<ServerHandle>>);

impl ReadyServers {
    fn each<T>(
        &self,
        list: impl Fn(&ServerHandle, &CancelToken) -> std::result::Result<Vec<T>, String>,
    ) -> Vec<T> {
        let cancel = CancelToken::new();
        self.0
            .iter()
            .flat_map(|h| list(h, &cancel).unwrap_or_default())
            .collect()
    }

    fn find(&self, server: &str) -> Result<&ServerHandle> {
        self.0
            .iter()
            .find(|h| h.config.name == server)
            .map(|h| &**h)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("no ready MCP server is called `{server}`"),
                )
            })
    }

    pub(crate) fn resources(&self, templates: bool) -> Vec<Value> {
        self.each(|h, c| h.resources(templates, c))
    }

    pub(crate) fn prompts(&self) -> Vec<Value> {
        self.each(|h, c| h.prompts(c))
    }

    pub(crate) fn read_resource(&self, server: &str, uri: &str) -> Result<Vec<Value>> {
        self.find(server)?
            .read_resource(uri, &CancelToken::new())
            .map_err(host_error)
    }

    pub(crate) fn get_prompt(
        &self,
        server: &str,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Vec<Message>> {
        self.find(server)?
            .get_prompt(name, arguments, &CancelToken::new())
            .map_err(host_error)
    }

    pub(crate) fn subscribe_resource(
        &self,
        server: &str,
        uri: &str,
        subscribe: bool,
    ) -> Result<()> {
        let method = if subscribe {
            "resources/subscribe"
        } else {
            "resources/unsubscribe"
        };
        self.find(server)?
            .send(method, json!({ "uri": uri }), &CancelToken::new())
            .map(|_| ())
            .map_err(host_error)
    }
}

fn host_error(why: String) -> Error {
    Error::new(ErrorKind::Server, why)
}

impl Drop for McpServers {
    fn drop(&mut self) {
        self.shutdown();
    }
}
