//! An Agent Client Protocol (ACP v1) agent over any `Read`/`Write` pair: editors (Zed,
//! JetBrains IDEs, Neovim and Emacs plugins, …) launch it and drive [`Session`]s through it.
//!
//! A host builds its agent from a factory that makes the parts of a session for a working
//! directory (profile, environment, client, configuration: its own tools, hooks and
//! sandbox), and serves it on its standard streams:
//!
//! ```no_run
//! use std::sync::Arc;
//! use agentloop::acp::{AcpAgent, SessionParts};
//! use agentloop::exec::LocalExecutionEnvironment;
//! use agentloop::llm::Client;
//! use agentloop::profiles;
//! use agentloop::session::SessionConfig;
//!
//! let agent = AcpAgent::new("my-agent", "0.1.0", |cwd| {
//!     let env = Arc::new(LocalExecutionEnvironment::new(cwd)?);
//!     let client = Client::from_env()?;
//!     let profile = profiles::for_client(&client)?;
//!     Ok(SessionParts::new(profile, env, client, SessionConfig::default()))
//! })
//! .with_sessions_dir("/home/me/.local/state/my-agent/sessions");
//! agent.serve(std::io::stdin(), std::io::stdout())?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # What it does
//!
//! - **Framing**: JSON-RPC 2.0, one message per line; nothing but protocol is written to
//!   the output. A line over the size cap ([`AcpAgent::with_max_message_bytes`], 32 MiB by
//!   default) is refused without being kept; a malformed line, an unknown method, an
//!   unknown session, a second prompt while one runs and params of the wrong shape each get
//!   their JSON-RPC error, and the agent goes on.
//! - **Sessions**: `session/new` (with the client's `mcpServers`, stdio and HTTP), and,
//!   with a sessions directory, `session/load` (the history replayed as updates before the
//!   answer, also in a new process), `session/resume`, `session/list`; `session/close` on
//!   any. Each session keeps its transcript at `DIR/<sessionId>.jsonl`.
//! - **Prompts**: `session/prompt` streams `session/update`s and answers with its
//!   `stopReason` and `usage` after the last one; `session/cancel` interrupts the input
//!   (its commands are killed) and the answer is `cancelled`; the history stays valid for
//!   the next prompt. How each event maps is one table, in `mapping.rs`.
//! - **Modes**: `default` (the host's sandbox; asks with `session/request_permission`
//!   before each edit and command, "always" answers remembered for the session),
//!   `read-only`, `full-access` and `plan`, as [`SessionMode`] enforces them; switched with
//!   `session/set_mode`. The host's own approvals (`Approval::Ask`, a `pre_tool_use` hook
//!   that asks) become permission requests too.
//! - **Model**: a `model` config option listing the profile's known models
//!   (`session/set_config_option`).
//! - **The editor's files**: when the client offers `fs.readTextFile` / `fs.writeTextFile`,
//!   the file tools read and write through it (unsaved buffers included); commands and
//!   searches stay local.
//!
//! # Threads
//!
//! [`serve`](AcpAgent::serve) reads on the calling thread and never blocks on a model or a
//! tool. Each session has its worker and one more thread, `agentloop-acp-<id>`, that maps
//! its events and answers its prompts, so prompts of different sessions run at once. The
//! output is one locked writer. When the input ends, every session is aborted (its
//! commands and MCP servers ended) and every thread joined before `serve` returns.
//!
//! Not yet: the client's terminals (`terminal/*`: commands run in the agent's own sandbox),
//! images in prompts, the headers of HTTP MCP servers.

mod files;
mod mapping;
mod pump;
mod rpc;
mod server;
mod session;
mod state;
mod store;

use std::fmt;
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Result;
use crate::exec::ExecutionEnvironment;
use crate::llm::Client;
use crate::profiles::ProviderProfile;
use crate::session::SessionConfig;
#[cfg(doc)]
use crate::session::{Session, SessionMode};

/// What a session is made of: the host's factory returns one per `session/new` (and per
/// load), for the working directory the client named.
#[non_exhaustive]
pub struct SessionParts {
    /// The model and its tools.
    pub profile: ProviderProfile,
    /// Where the tools run (rooted at the client's working directory).
    pub env: Arc<dyn ExecutionEnvironment>,
    /// The providers.
    pub client: Client,
    /// Limits, hooks, approval, sandbox mode, MCP servers of the host's own; the agent adds
    /// its hooks after the host's and the client's MCP servers after the host's.
    pub config: SessionConfig,
}

impl SessionParts {
    /// The parts of one session.
    pub fn new(
        profile: ProviderProfile,
        env: Arc<dyn ExecutionEnvironment>,
        client: Client,
        config: SessionConfig,
    ) -> SessionParts {
        SessionParts {
            profile,
            env,
            client,
            config,
        }
    }
}

/// The factory of an [`AcpAgent`]: the parts of a session for a working directory.
type Factory = dyn Fn(&Path) -> Result<SessionParts> + Send + Sync;

/// An ACP agent: how to make its sessions, where to keep them, how large a message may
/// be. See the [module documentation](self).
pub struct AcpAgent {
    name: String,
    version: String,
    factory: Box<Factory>,
    store: Option<store::Store>,
    max_message_bytes: usize,
}

impl fmt::Debug for AcpAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcpAgent")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("sessions_dir", &self.store.as_ref().map(|s| &s.dir))
            .field("max_message_bytes", &self.max_message_bytes)
            .finish_non_exhaustive()
    }
}

impl AcpAgent {
    /// An agent called `name` (its `agentInfo`) at `version`, whose sessions `factory`
    /// makes. Without [`with_sessions_dir`](Self::with_sessions_dir) it keeps no sessions
    /// (`loadSession` is false).
    pub fn new(
        name: impl Into<String>,
        version: impl Into<String>,
        factory: impl Fn(&Path) -> Result<SessionParts> + Send + Sync + 'static,
    ) -> AcpAgent {
        AcpAgent {
            name: name.into(),
            version: version.into(),
            factory: Box::new(factory),
            store: None,
            max_message_bytes: 32 * 1024 * 1024,
        }
    }

    /// Keeps each session's transcript in `dir` (created when the first session starts),
    /// which enables `session/load`, `session/resume` and `session/list`.
    pub fn with_sessions_dir(mut self, dir: impl Into<PathBuf>) -> AcpAgent {
        self.store = Some(store::Store { dir: dir.into() });
        self
    }

    /// Refuses messages longer than `bytes` (default 32 MiB) without keeping them.
    pub fn with_max_message_bytes(mut self, bytes: usize) -> AcpAgent {
        self.max_message_bytes = bytes.max(1024);
        self
    }

    /// Serves one client: reads its messages from `input` on this thread, writes to
    /// `output`, until `input` ends; then ends every session and joins every thread it
    /// started. Fails only when reading `input` fails.
    pub fn serve(&self, input: impl Read, output: impl Write + Send + 'static) -> io::Result<()> {
        let connection = rpc::Connection::new(Box::new(output));
        let mut input = BufReader::with_capacity(64 * 1024, input);
        server::Server::new(self, connection).run(&mut input)
    }
}

/// The models the `model` option offers: the profile's own first, then the known models
/// of its family.
pub(crate) fn models_for(profile: &ProviderProfile) -> Vec<String> {
    let mut models = vec![profile.model.clone()];
    for model in crate::profiles::known_models(&profile.family) {
        if !models.iter().any(|m| m == model) {
            models.push(model.to_string());
        }
    }
    models
}
