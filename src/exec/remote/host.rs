//! [`RemoteHost`]: one exec-server connection shared by several
//! [`RemoteExecutionEnvironment`]s, each with its own working directory (a container or
//! machine that serves many sessions runs one exec-server, not one per session).
//!
//! Calls are already multiplexed by id, so sharing needs nothing from the server: each
//! environment sends its working directory with every command and makes every relative
//! path absolute against it before it leaves, and its cancellations name only its own
//! calls. The connection (and with it the exec-server) ends when the host and the last
//! environment made from it are dropped. This file never spawns anything itself.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::connection::Connection;
use super::{
    DEFAULT_CALL_TIMEOUT, RemoteError, RemoteExecutionEnvironment, ServerInfo, Transport, handshake,
};
use crate::exec::ExecutionEnvironment as _;
use crate::exec::sandbox::{Sandbox, SandboxPolicy};

/// One exec-server connection that several environments share (see the module docs):
/// cheap to clone; [`environment`](Self::environment) makes an environment rooted at a
/// directory of the target.
///
/// A lost connection fails the calls in flight of every environment on it; the next call
/// of any of them reconnects for all.
#[derive(Clone)]
pub struct RemoteHost {
    pub(super) inner: Arc<Host>,
}

/// What the environments of one host share.
pub(super) struct Host {
    pub(super) transport: Transport,
    /// The directory the `hello` of each new connection names.
    hello_dir: Option<PathBuf>,
    /// The sandbox every `hello` carries (`None`: full access, nothing sent).
    sandbox: Option<Sandbox>,
    /// What the server said about itself on the first connection.
    pub(super) info: ServerInfo,
    connection: Mutex<Option<Arc<Connection>>>,
}

impl fmt::Debug for RemoteHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteHost")
            .field("transport", &self.inner.transport)
            .field("info", &self.inner.info)
            .finish()
    }
}

impl RemoteHost {
    /// Starts `transport` and checks the server's protocol version, as
    /// [`RemoteExecutionEnvironment::connect`] does, leaving the server in its own
    /// directory. Errors carry a [`RemoteError`].
    pub fn connect(transport: Transport) -> io::Result<RemoteHost> {
        Ok(RemoteHost::open(transport, None, None)?)
    }

    /// [`connect`](Self::connect) in `working_dir` (`None`: the server's), with every
    /// command and file write of every environment of the host run under `sandbox` on the
    /// server's side, as [`RemoteExecutionEnvironment::connect_sandboxed`] does. The
    /// sandbox's writable root is the host's directory: environments in other directories
    /// beneath it write there; one outside it is read-only for the sandbox (give it a host
    /// of its own).
    pub fn connect_sandboxed(
        transport: Transport,
        working_dir: Option<&Path>,
        sandbox: Sandbox,
    ) -> io::Result<RemoteHost> {
        let sandbox = (*sandbox.policy() != SandboxPolicy::FullAccess).then_some(sandbox);
        Ok(RemoteHost::open(transport, working_dir, sandbox)?)
    }

    pub(super) fn open(
        transport: Transport,
        working_dir: Option<&Path>,
        sandbox: Option<Sandbox>,
    ) -> Result<RemoteHost, RemoteError> {
        let (connection, info) = handshake(&transport, working_dir, sandbox.as_ref())?;
        Ok(RemoteHost {
            inner: Arc::new(Host {
                transport,
                sandbox,
                hello_dir: Some(
                    working_dir.map_or_else(|| info.working_dir.clone(), Path::to_path_buf),
                ),
                info,
                connection: Mutex::new(Some(Arc::new(connection))),
            }),
        })
    }

    /// An environment on this host's connection rooted at `working_dir` (absolute, or
    /// relative to the server's directory; `None`: the server's directory). Fails with
    /// [`io::ErrorKind::NotFound`] when the target has no such directory.
    pub fn environment(
        &self,
        working_dir: Option<&Path>,
    ) -> io::Result<RemoteExecutionEnvironment> {
        let server_dir = &self.inner.info.working_dir;
        let mut info = self.inner.info.clone();
        if let Some(dir) = working_dir {
            info.working_dir = server_dir.join(dir);
        }
        let env = RemoteExecutionEnvironment {
            host: self.clone(),
            info,
            env_policy: None,
            kill_grace: None,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        };
        if working_dir.is_some() {
            let dir = env.info.working_dir.clone();
            let found = env.stat(&dir).map_err(|e| {
                if RemoteError::of(&e).is_some() {
                    return e;
                }
                io::Error::new(e.kind(), format!("`{}` in the target: {e}", dir.display()))
            })?;
            if !found.is_dir {
                let text = format!("`{}` is not a directory in the target", dir.display());
                return Err(io::Error::new(io::ErrorKind::NotFound, text));
            }
        }
        Ok(env)
    }

    /// The transport's label.
    pub fn label(&self) -> &str {
        &self.inner.transport.label
    }

    /// The process id of the current transport child, if connected.
    pub fn transport_pid(&self) -> Option<u32> {
        let connection = self.inner.lock();
        connection.as_ref().map(|c| c.pid())
    }
}

impl Host {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Connection>>> {
        self.connection.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live connection, reconnecting when the last one was lost.
    pub(super) fn connection(&self) -> Result<Arc<Connection>, RemoteError> {
        let mut slot = self.lock();
        if let Some(connection) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(Arc::clone(connection));
        }
        slot.take();
        let dir = self.hello_dir.as_deref();
        let (connection, _) = handshake(&self.transport, dir, self.sandbox.as_ref())?;
        let connection = Arc::new(connection);
        *slot = Some(Arc::clone(&connection));
        Ok(connection)
    }
}

impl RemoteExecutionEnvironment {
    /// Roots a request at this environment: its directory as the command's when none is
    /// given, and a relative `path` made absolute against it (the server is shared by
    /// environments in other directories).
    pub(super) fn place(&self, params: &mut Value) {
        let dir = &self.info.working_dir;
        if params.get("command").is_some() && params["working_dir"].is_null() {
            params["working_dir"] = json!(dir.to_string_lossy());
        }
        for key in ["path", "working_dir"] {
            if let Some(path) = params.get(key).and_then(Value::as_str)
                && Path::new(path).is_relative()
            {
                params[key] = json!(dir.join(path).to_string_lossy());
            }
        }
    }

    /// The host whose connection this environment uses: clone it for another
    /// environment on the same exec-server.
    pub fn host(&self) -> &RemoteHost {
        &self.host
    }
}
