//! A session's side of MCP: its servers started with the session's host and roots (or,
//! for a subagent, the parent's servers shared), and the host's requests about them —
//! statuses, resources, prompts, subscriptions and roots.
//!
//! Nothing here holds the session's lock on its servers while a server answers: requests
//! go to a snapshot of the ready servers.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::{Session, SessionConfig, lock};
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::Message;
use crate::mcp::server::McpServers;
use crate::mcp::{ClientContext, McpServerStatus};

/// The MCP servers of a session, shared with its subagents.
pub(crate) type SharedMcp = Arc<Mutex<McpServers>>;

/// The servers a new session uses: the parent's, for a subagent; else its own, started
/// now (in parallel, off the host's thread) with the working directory and the
/// configured roots. `None` without servers.
pub(crate) fn start(
    config: &SessionConfig,
    working_directory: &std::path::Path,
    inherited: Option<SharedMcp>,
    abort: &CancelToken,
) -> Option<SharedMcp> {
    if inherited.is_some() {
        return inherited;
    }
    if config.mcp_servers.is_empty() {
        return None;
    }
    let mut roots = vec![working_directory.to_path_buf()];
    roots.extend(config.mcp_roots.iter().cloned());
    let context = Arc::new(ClientContext::new(config.mcp_host.clone(), roots));
    let servers = McpServers::start_with(&config.mcp_servers, abort, context);
    Some(Arc::new(Mutex::new(servers)))
}

impl Session {
    /// The configured MCP servers: each one's state and its tool, resource and prompt
    /// counts. Waits for the servers still starting (each at most its startup timeout).
    pub fn mcp_servers(&self) -> Vec<McpServerStatus> {
        match &self.mcp {
            Some(mcp) => lock(mcp).statuses(),
            None => Vec::new(),
        }
    }

    /// Every resource of the ready MCP servers, each as its server listed it (`uri`,
    /// `name`, `title`, `description`, `mimeType`, `size`, …, see the MCP specification's
    /// `Resource`) with `"server"` added; a server whose listing fails is left out.
    /// `templates` lists the resource templates instead (`uriTemplate`, …).
    pub fn mcp_resources(&self, templates: bool) -> Vec<Value> {
        match &self.mcp {
            Some(mcp) => lock(mcp).ready().resources(templates),
            None => Vec::new(),
        }
    }

    /// Reads the resource `uri` of the MCP server `server`: its `contents` as the server
    /// sent them (`uri`, `mimeType`, and `text` or base64 `blob`), all of it (the model's
    /// `read_mcp_resource` gets a bounded copy).
    pub fn read_mcp_resource(&self, server: &str, uri: &str) -> Result<Vec<Value>> {
        let mcp = self.mcp_or_error()?;
        let ready = lock(mcp).ready();
        ready.read_resource(server, uri)
    }

    /// Every prompt of the ready MCP servers, each as its server listed it (`name`,
    /// `title`, `description`, `arguments`: `[{name, description, required}]`) with
    /// `"server"` added: what a host offers as slash commands.
    pub fn mcp_prompts(&self) -> Vec<Value> {
        match &self.mcp {
            Some(mcp) => lock(mcp).ready().prompts(),
            None => Vec::new(),
        }
    }

    /// Gets the prompt `name` of the MCP server `server` with `arguments` (strings): its
    /// messages, to submit or show.
    pub fn get_mcp_prompt(
        &self,
        server: &str,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Vec<Message>> {
        let mcp = self.mcp_or_error()?;
        let ready = lock(mcp).ready();
        ready.get_prompt(server, name, arguments)
    }

    /// Subscribes to changes of the resource `uri` of `server` (`subscribe` false ends
    /// the subscription); changes reach
    /// [`McpHost::resource_updated`](crate::mcp::McpHost::resource_updated).
    pub fn subscribe_mcp_resource(&self, server: &str, uri: &str, subscribe: bool) -> Result<()> {
        let mcp = self.mcp_or_error()?;
        let ready = lock(mcp).ready();
        ready.subscribe_resource(server, uri, subscribe)
    }

    /// Replaces the roots offered to MCP servers after the working directory (the
    /// servers are told with `notifications/roots/list_changed`).
    pub fn set_mcp_roots(&self, roots: Vec<PathBuf>) {
        if let Some(mcp) = &self.mcp {
            let mut servers = lock(mcp);
            let mut all = servers.roots().into_iter().take(1).collect::<Vec<_>>();
            all.extend(roots);
            servers.set_roots(all);
        }
    }

    fn mcp_or_error(&self) -> Result<&SharedMcp> {
        self.mcp.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                "the session has no MCP servers".to_string(),
            )
        })
    }
}
