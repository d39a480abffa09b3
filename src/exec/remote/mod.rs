//! Tools on another machine: [`RemoteExecutionEnvironment`] talks to an exec-server over
//! any child process's stdin/stdout ([`Transport`]: `ssh`, `podman exec -i`, `docker exec
//! -i`, `kubectl exec -i` — [`Transport::container`] and the `podman://`, `docker://`,
//! `kubectl://` URLs — or the server itself), and [`RemoteExecutionEnvironment::serve_stdio`] is the server.
//! A [`RemoteHost`] shares one connection among environments in several directories.
//!
//! The protocol is specified in one place, the `protocol` module's source
//! (`src/exec/remote/protocol.rs`). The transport is started only through `StdioChild`
//! (own process group, bounded stderr tail, group ended on drop). This module never reads
//! the local machine on the remote environment's behalf: platform, OS version and
//! working directory come from the server's `hello`. A session's sandbox travels in
//! `hello` ([`RemoteExecutionEnvironment::connect_sandboxed`]): the server enforces it.

mod background;
mod bootstrap;
mod codec;
mod connection;
mod container;
mod host;
// unsafe: the host side's one poll(2) over every transport's pipes.
#[allow(unsafe_code)]
mod poller;
pub mod protocol;
mod serve_background;
mod server;
// unsafe: the exec-server program installs its signal handler with sigaction.
#[allow(unsafe_code)]
mod signals;
// unsafe: the supervisor becomes a child subreaper (prctl), kills and reaps orphans.
#[allow(unsafe_code)]
mod supervise;

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use self::codec::*;
use self::connection::{Connection, Incoming};
use self::protocol::{FULL_ACCESS, PROTOCOL_VERSION, sandbox_to_json};
use super::local::env;
use super::process::child::StdioChildSpec;
use super::{EnvPolicy, LocalExecutionEnvironment, Sandbox, SandboxPolicy};
use crate::base64::encode as encode_base64;

pub use container::{ContainerKind, ContainerOptions};
pub use host::RemoteHost;
pub use server::SERVER_NAME;

/// The exec-server command a transport runs when none is given.
pub const DEFAULT_SERVER_COMMAND: &str = "agentloop-exec-server";
/// How long a call other than a command may go unanswered before it fails.
const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a new connection waits for the server's answer to `hello`: an ssh key
/// exchange and login shell took about 1.1 s here, a `podman exec` well under that, so
/// this leaves a slow link and a busy cluster room while a transport that never starts the
/// server (a prompt, a wrong command, a shell printing a banner forever) fails in seconds.
pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_secs(20);
/// Slack a command's answer gets beyond its timeout and kill grace.
const COMMAND_SLACK: Duration = Duration::from_secs(30);

/// Why a remote call failed for a reason of the connection rather than the operation.
/// It travels inside the `io::Error` the trait returns: [`RemoteError::of`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteError {
    /// The transport could not be started.
    Spawn {
        /// The transport, as its label shows it.
        transport: String,
        /// What failed.
        detail: String,
    },
    /// The connection ended (the transport or the server died, or closed its output).
    Closed {
        /// The transport, as its label shows it.
        transport: String,
        /// What happened, with the transport's stderr tail.
        detail: String,
    },
    /// The server sent a line that is not the protocol.
    Malformed {
        /// What was wrong, with the start of the line.
        detail: String,
    },
    /// A protocol line exceeded the limit.
    LineTooLong {
        /// The limit in bytes.
        limit: usize,
    },
    /// The server speaks another protocol version.
    Version {
        /// The server's name, as it reported it.
        server: String,
        /// Its protocol version (0 when it does not know `hello`).
        server_version: u64,
        /// Ours.
        client_version: u64,
    },
    /// The transport started but no `hello` answer came within its
    /// [`hello_timeout`](Transport::hello_timeout).
    NoHello {
        /// The transport, as its label shows it.
        transport: String,
        /// How long it waited.
        waited: Duration,
        /// The transport's stderr tail, if it said anything.
        detail: String,
    },
    /// The server did not answer in time.
    NoAnswer {
        /// The method called.
        method: String,
        /// How long the call waited.
        waited: Duration,
    },
    /// Copying the exec-server into the target or starting it there failed.
    Bootstrap {
        /// The transport, as its label shows it.
        transport: String,
        /// What failed (a target that cannot run the binary says its machine).
        detail: String,
    },
    /// The session's sandbox cannot run there: the server applies no sandbox policies (a
    /// version 2 server from before they travelled), its kernel cannot enforce a
    /// [`Required`](crate::exec::Enforcement::Required) one, or it would loosen the server's own.
    Sandbox {
        /// The transport, as its label shows it.
        transport: String,
        /// Why, in the server's words where it gave them.
        detail: String,
    },
    /// The server refused a call (a protocol error code other than a failed operation).
    Refused {
        /// The method called.
        method: String,
        /// The JSON-RPC error code.
        code: i64,
        /// The server's message.
        message: String,
    },
}

impl RemoteError {
    /// The remote error inside an error returned by [`RemoteExecutionEnvironment`].
    pub fn of(error: &io::Error) -> Option<&RemoteError> {
        error.get_ref()?.downcast_ref::<RemoteError>()
    }

    fn kind(&self) -> io::ErrorKind {
        match self {
            RemoteError::Spawn { .. } | RemoteError::Bootstrap { .. } => {
                io::ErrorKind::NotConnected
            }
            RemoteError::Closed { .. } => io::ErrorKind::ConnectionAborted,
            RemoteError::Malformed { .. } | RemoteError::LineTooLong { .. } => {
                io::ErrorKind::InvalidData
            }
            RemoteError::Version { .. } | RemoteError::Sandbox { .. } => io::ErrorKind::Unsupported,
            RemoteError::NoAnswer { .. } | RemoteError::NoHello { .. } => io::ErrorKind::TimedOut,
            RemoteError::Refused { .. } => io::ErrorKind::InvalidInput,
        }
    }
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteError::Spawn { transport, detail } => {
                write!(
                    f,
                    "cannot start the exec-server transport `{transport}`: {detail}"
                )
            }
            RemoteError::Closed { transport, detail } => write!(
                f,
                "the connection to the exec-server (`{transport}`) was lost: {detail}; what \
                 the call did on the remote side is unknown, the next call reconnects"
            ),
            RemoteError::Bootstrap { transport, detail } => {
                write!(f, "cannot place the exec-server in `{transport}`: {detail}")
            }
            RemoteError::Malformed { detail } => {
                write!(f, "the exec-server broke the protocol: {detail}")
            }
            RemoteError::Sandbox { transport, detail } => write!(
                f,
                "the session's sandbox cannot be applied by the exec-server (`{transport}`): \
                 {detail}"
            ),
            RemoteError::LineTooLong { limit } => write!(
                f,
                "the exec-server sent a protocol line over the {limit}-byte cap; the \
                 connection was ended, the next call reconnects"
            ),
            RemoteError::NoHello {
                transport,
                waited,
                detail,
            } => write!(
                f,
                "the exec-server transport `{transport}` gave no answer to `hello` within \
                 {} s (its hello timeout): is the exec-server what it runs, and does \
                 nothing wait for input?{detail}",
                waited.as_secs_f64()
            ),
            RemoteError::Version {
                server,
                server_version,
                client_version,
            } => write!(
                f,
                "the exec-server `{server}` speaks protocol version {server_version}, this \
                 client speaks version {client_version}: install the exec-server of the same \
                 agentloop release"
            ),
            RemoteError::NoAnswer { method, waited } => {
                write!(
                    f,
                    "the exec-server did not answer `{method}` within {waited:?}"
                )
            }
            RemoteError::Refused {
                method,
                code,
                message,
            } => write!(
                f,
                "the exec-server refused `{method}` (code {code}): {message}"
            ),
        }
    }
}

impl std::error::Error for RemoteError {}

impl From<RemoteError> for io::Error {
    fn from(error: RemoteError) -> io::Error {
        io::Error::new(error.kind(), error)
    }
}

/// How to reach an exec-server: a program whose stdin/stdout are the server's.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transport {
    /// The program and its arguments, the server command included.
    pub argv: Vec<String>,
    /// The transport process's whole environment.
    pub env: BTreeMap<String, String>,
    /// How headers and errors name it (`ssh://user@host:2222`, `podman exec -i ctr`).
    pub label: String,
    /// How long each connection waits for the server's `hello` answer
    /// ([`DEFAULT_HELLO_TIMEOUT`] unless set); the transport is ended when it passes.
    pub hello_timeout: Duration,
    /// The exec-server binary copied in when the target has none of this build.
    bootstrap: Option<bootstrap::Bootstrap>,
    /// The runtime's command that says what became of the target after a lost connection.
    status: Option<Vec<String>>,
}

impl fmt::Debug for Transport {
    // Variable values are left out: they may hold secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("argv", &self.argv)
            .field("variables", &self.env.len())
            .field("label", &self.label)
            .field("hello_timeout", &self.hello_timeout)
            .finish()
    }
}

impl Transport {
    /// Runs `argv` as given: the exec-server itself as a direct child, or any command
    /// line that already ends with the server command. Its environment is this process's
    /// without secrets (the default [`EnvPolicy`]).
    pub fn direct(argv: Vec<String>) -> Transport {
        let label = argv.join(" ");
        let base = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Transport {
            argv,
            env: env::filter(&base, &EnvPolicy::default()),
            label,
            hello_timeout: DEFAULT_HELLO_TIMEOUT,
            bootstrap: None,
            status: None,
        }
    }

    /// Runs `argv` (`podman exec -i ctr`, `kubectl exec -i pod --`) followed by the
    /// server command ([`DEFAULT_SERVER_COMMAND`] unless `server_command` is given).
    pub fn command(argv: Vec<String>, server_command: Option<&str>) -> Transport {
        let label = argv.join(" ");
        let mut transport = Transport::direct(argv);
        transport
            .argv
            .push(server_command.unwrap_or(DEFAULT_SERVER_COMMAND).to_string());
        transport.label = label;
        transport
    }

    /// `ssh -T -o BatchMode=yes [-p port] [extra options] destination -- server_command`:
    /// no password prompt (keys or an agent only), keepalives so a dead peer is noticed
    /// within about 45 s, and the server command run by the remote user's shell.
    pub fn ssh(
        destination: &str,
        port: Option<u16>,
        options: &[String],
        server_command: Option<&str>,
    ) -> Transport {
        let mut argv: Vec<String> = [
            "ssh",
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            "ServerAliveInterval=15",
            "-o",
            "ServerAliveCountMax=3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(port) = port {
            argv.extend(["-p".to_string(), port.to_string()]);
        }
        argv.extend(options.iter().cloned());
        argv.extend([destination.to_string(), "--".to_string()]);
        argv.push(server_command.unwrap_or(DEFAULT_SERVER_COMMAND).to_string());
        let mut transport = Transport::direct(argv);
        transport.label = match port {
            Some(port) => format!("ssh://{destination}:{port}"),
            None => format!("ssh://{destination}"),
        };
        transport
    }

    /// Parses `ssh://[user@]host[:port][/path]` into an SSH transport and the remote
    /// working directory (`None` when the URL has no path: the server's own directory).
    pub fn parse_ssh_url(
        url: &str,
        options: &[String],
        server_command: Option<&str>,
    ) -> io::Result<(Transport, Option<PathBuf>)> {
        let bad = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{url}` is not an ssh URL: {why}"),
            )
        };
        let rest = url
            .strip_prefix("ssh://")
            .ok_or_else(|| bad("it must start with ssh://"))?;
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], Some(PathBuf::from(&rest[at..]))),
            None => (rest, None),
        };
        let (userhost, port) = match authority.rsplit_once(':') {
            Some((host, port)) => {
                let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
                (host, Some(port))
            }
            None => (authority, None),
        };
        if userhost.is_empty() || userhost.ends_with('@') || userhost.starts_with('-') {
            return Err(bad("it names no host"));
        }
        Ok((
            Transport::ssh(userhost, port, options, server_command),
            path,
        ))
    }

    /// Replaces the transport process's environment.
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Transport {
        self.env = env;
        self
    }

    /// Replaces the label.
    pub fn with_label(mut self, label: impl Into<String>) -> Transport {
        self.label = label.into();
        self
    }

    /// Sets [`hello_timeout`](Self::hello_timeout).
    pub fn with_hello_timeout(mut self, timeout: Duration) -> Transport {
        self.hello_timeout = timeout;
        self
    }
}

/// What the server said about itself.
#[derive(Debug, Clone)]
struct ServerInfo {
    working_dir: PathBuf,
    platform: String,
    os_version: String,
    max_timeout: Duration,
    /// The sandbox the server applied, as the header names it (`None`: none asked).
    applied: Option<String>,
    /// What the server's kernel does not enforce of it.
    warnings: Vec<String>,
}

/// Runs tools through an exec-server (see the module docs).
///
/// Connects and shakes hands in [`connect`](Self::connect); every call then goes over that
/// one connection, in parallel, each waiting for its own answer. Commands' timeouts are
/// enforced by the server; cancelling a command asks the server to end its process group
/// (SIGTERM, grace, SIGKILL on the remote side), not just the local transport.
///
/// When the connection is lost, the calls in flight fail with a [`RemoteError::Closed`]
/// inside their `io::Error` (the tools turn it into an error result the model sees; the
/// session lives on) and the next call starts a new connection to the same working
/// directory. If that fails too, the call fails with the reason; nothing hangs.
pub struct RemoteExecutionEnvironment {
    /// The connection, shared with the other environments of its [`RemoteHost`].
    host: RemoteHost,
    /// This environment's view: its working directory, the server's other facts.
    info: ServerInfo,
    env_policy: Option<EnvPolicy>,
    kill_grace: Option<Duration>,
    call_timeout: Duration,
}

impl fmt::Debug for RemoteExecutionEnvironment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteExecutionEnvironment")
            .field("transport", &self.host.inner.transport)
            .field("info", &self.info)
            .finish()
    }
}

impl RemoteExecutionEnvironment {
    /// Starts `transport`, checks the server's protocol version and sets its working
    /// directory (`None`: the server's own). Errors carry a [`RemoteError`].
    pub fn connect(
        transport: Transport,
        working_dir: Option<&Path>,
    ) -> io::Result<RemoteExecutionEnvironment> {
        RemoteExecutionEnvironment::connect_sandboxed(
            transport,
            working_dir,
            Sandbox::new(SandboxPolicy::FullAccess),
        )
    }

    /// [`connect`](Self::connect), with every command and file write of the connection
    /// run under `sandbox` on the server's side, as the local sandbox runs them: its paths
    /// are the target's, the remote working directory its writable root. What the server's
    /// kernel does not enforce is refused ([`Enforcement::Required`]: a
    /// [`RemoteError::Sandbox`]) or named by [`warnings`](crate::exec::ExecutionEnvironment::warnings)
    /// ([`Enforcement::BestEffort`]), as locally; so is a server that applies no sandbox.
    ///
    /// [`Enforcement::Required`]: crate::exec::Enforcement::Required
    /// [`Enforcement::BestEffort`]: crate::exec::Enforcement::BestEffort
    pub fn connect_sandboxed(
        transport: Transport,
        working_dir: Option<&Path>,
        sandbox: Sandbox,
    ) -> io::Result<RemoteExecutionEnvironment> {
        let sandbox = (*sandbox.policy() != SandboxPolicy::FullAccess).then_some(sandbox);
        let host = RemoteHost::open(transport, working_dir, sandbox)?;
        Ok(RemoteExecutionEnvironment {
            info: host.inner.info.clone(),
            host,
            env_policy: None,
            kill_grace: None,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        })
    }

    /// The sandbox the exec-server applies, as it described it with its Landlock ABI
    /// (`workspace-write, network off; Landlock ABI 7`); `None` without one.
    pub fn applied_sandbox(&self) -> Option<&str> {
        self.info.applied.as_deref()
    }

    /// Sends this env policy with every command (the server's default otherwise).
    pub fn with_env_policy(mut self, policy: EnvPolicy) -> RemoteExecutionEnvironment {
        self.env_policy = Some(policy);
        self
    }

    /// Sends this SIGTERM→SIGKILL grace with every command (the server's default, 2 s,
    /// otherwise).
    pub fn with_kill_grace(mut self, grace: Duration) -> RemoteExecutionEnvironment {
        self.kill_grace = Some(grace);
        self
    }

    /// How long a call other than a command may go unanswered (default 120 s).
    pub fn with_call_timeout(mut self, timeout: Duration) -> RemoteExecutionEnvironment {
        self.call_timeout = timeout;
        self
    }

    /// The transport's label (`ssh://user@host:2222`), for headers.
    pub fn label(&self) -> &str {
        self.host.label()
    }

    /// The process id of the current transport child, if connected (for tests that kill
    /// it and for diagnostics).
    pub fn transport_pid(&self) -> Option<u32> {
        self.host.transport_pid()
    }

    /// The server side: serves `local` over this process's stdin and stdout until end of
    /// input, the exec-server program's `main` (see
    /// `examples/cli/src/bin/agentloop-exec-server.rs`). Commands run in `local` (its
    /// working directory is the default the client's `hello` may change). End of input,
    /// SIGTERM, SIGHUP and SIGINT end every running command's group (SIGTERM, the grace,
    /// SIGKILL) and answer its call before the server stops; on a signal it exits the
    /// process with status 128 + the signal. It installs a handler
    /// for those three signals: call it only from a program that is the server.
    pub fn serve_stdio(local: LocalExecutionEnvironment) -> io::Result<()> {
        server::serve_stdio(local)
    }

    /// The exec-server program's `--supervised` mode (what the container bootstrap
    /// starts): runs `server` (the program itself, without the flag) as its one child,
    /// as a child subreaper, and when the server ends — even by SIGKILL — kills and reaps
    /// whatever it left running. Returns the server's exit code (128 + signal). Linux.
    pub fn serve_supervised(server: &Path) -> io::Result<i32> {
        supervise::supervise(server)
    }

    /// The live connection, reconnecting when the last one was lost.
    fn connection(&self) -> Result<Arc<Connection>, RemoteError> {
        self.host.inner.connection()
    }

    /// One call: its answer, or the reason it has none.
    fn call(&self, method: &str, mut params: Value) -> io::Result<Value> {
        params["sandbox"] = json!(FULL_ACCESS);
        self.place(&mut params);
        let connection = self.connection()?;
        let call = connection.start(method, params)?;
        let deadline = Instant::now() + self.call_timeout;
        let incoming = call.rx.recv_deadline(deadline);
        connection.forget(call.id);
        match incoming {
            Ok(incoming) => answer(method, incoming, &connection),
            Err(_) => Err(RemoteError::NoAnswer {
                method: method.to_string(),
                waited: self.call_timeout,
            }
            .into()),
        }
    }
}

/// Starts the transport and says hello.
fn handshake(
    transport: &Transport,
    working_dir: Option<&Path>,
    sandbox: Option<&Sandbox>,
) -> Result<(Connection, ServerInfo), RemoteError> {
    let (program, args) = transport
        .argv
        .split_first()
        .ok_or_else(|| RemoteError::Spawn {
            transport: transport.label.clone(),
            detail: "the transport has no program".to_string(),
        })?;
    let spec = StdioChildSpec {
        program,
        args,
        cwd: None,
        env: &transport.env,
        name: "exec-server",
    };
    let bootstrap = transport.bootstrap.as_ref();
    let connection = Connection::open(
        &spec,
        &transport.label,
        bootstrap.map(|b| (b, transport.hello_timeout)),
        transport.status.clone(),
    )?;
    // A failed handshake leaves no command running: the transport is ended at once.
    let info = hello(&connection, transport, working_dir, sandbox)
        .inspect_err(|_| connection.abandon())?;
    Ok((connection, info))
}

/// Says hello on a new connection; what the server said about itself.
fn hello(
    connection: &Connection,
    transport: &Transport,
    working_dir: Option<&Path>,
    sandbox: Option<&Sandbox>,
) -> Result<ServerInfo, RemoteError> {
    let mut params = json!({"protocol_version": PROTOCOL_VERSION, "client": SERVER_NAME});
    if let Some(dir) = working_dir {
        params["working_directory"] = json!(dir.to_string_lossy());
    }
    if let Some(sandbox) = sandbox {
        params["sandbox"] = sandbox_to_json(sandbox);
    }
    let call = connection.start("hello", params)?;
    let waited = transport.hello_timeout;
    let incoming = call
        .rx
        .recv_timeout(waited)
        .map_err(|_| RemoteError::NoHello {
            transport: transport.label.clone(),
            waited,
            detail: connection.stderr_note(),
        })?;
    let version_error = |server: &str, version: u64| RemoteError::Version {
        server: server.to_string(),
        server_version: version,
        client_version: PROTOCOL_VERSION,
    };
    let result = match incoming {
        Incoming::Result(result) => result,
        Incoming::Failed(protocol::METHOD_NOT_FOUND, ..) => {
            return Err(version_error("(an exec-server without `hello`)", 0));
        }
        Incoming::Failed(protocol::VERSION_MISMATCH, _, data) => {
            let supported = data.and_then(|d| d["supported"].as_u64()).unwrap_or(0);
            return Err(version_error("(refused our version)", supported));
        }
        Incoming::Failed(protocol::IO_ERROR, message, Some(data))
            if sandbox.is_some() && sandbox::refused_by_server(&data) =>
        {
            return Err(sandbox::refused(transport, message));
        }
        Incoming::Failed(code, message, _) => {
            return Err(RemoteError::Refused {
                method: "hello".to_string(),
                code,
                message,
            });
        }
        Incoming::Closed(reason) => return Err(with_stderr(reason, connection)),
        Incoming::Output(..) => {
            return Err(RemoteError::Malformed {
                detail: "output before the handshake".to_string(),
            });
        }
    };
    let server = result["server"].as_str().unwrap_or("(unnamed)");
    let version = result["protocol_version"].as_u64().unwrap_or(0);
    if version != PROTOCOL_VERSION {
        return Err(version_error(server, version));
    }
    let malformed = |detail: Invalid| RemoteError::Malformed {
        detail: format!("hello: {detail}"),
    };
    let (applied, warnings) = sandbox::applied(sandbox, &result, server, transport)?;
    let info = ServerInfo {
        working_dir: PathBuf::from(str_field(&result, "working_directory").map_err(malformed)?),
        platform: str_field(&result, "platform")
            .map_err(malformed)?
            .to_string(),
        os_version: str_field(&result, "os_version")
            .map_err(malformed)?
            .to_string(),
        max_timeout: Duration::from_millis(
            u64_field(&result, "max_command_timeout_ms").map_err(malformed)?,
        ),
        applied,
        warnings,
    };
    Ok(info)
}

/// A lost connection's error, with the transport's last words when the reader had none.
fn with_stderr(reason: RemoteError, connection: &Connection) -> RemoteError {
    match reason {
        RemoteError::Closed { transport, detail } => RemoteError::Closed {
            transport,
            detail: format!("{detail}{}", connection.stderr_note()),
        },
        other => other,
    }
}

/// Turns what arrived for a call into its result.
fn answer(method: &str, incoming: Incoming, connection: &Connection) -> io::Result<Value> {
    match incoming {
        Incoming::Result(value) => Ok(value),
        Incoming::Failed(protocol::IO_ERROR, message, data) => {
            let kind = data
                .as_ref()
                .and_then(|d| d["kind"].as_str())
                .map(protocol::kind_from_name)
                .unwrap_or(io::ErrorKind::Other);
            Err(io::Error::new(kind, message))
        }
        Incoming::Failed(code, message, _) => Err(RemoteError::Refused {
            method: method.to_string(),
            code,
            message,
        }
        .into()),
        Incoming::Closed(reason) => Err(with_stderr(reason, connection).into()),
        Incoming::Output(..) => Err(RemoteError::Malformed {
            detail: format!("output for `{method}`, which is not a command"),
        }
        .into()),
    }
}

fn decoded<T>(method: &str, value: Result<T, Invalid>) -> io::Result<T> {
    value.map_err(|detail| {
        RemoteError::Malformed {
            detail: format!("{method} result: {detail}"),
        }
        .into()
    })
}

fn path_param(path: &Path) -> io::Result<Value> {
    path.to_str().map(|p| json!(p)).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "`{}` is not UTF-8; the exec-server protocol carries UTF-8 paths",
                path.display()
            ),
        )
    })
}

mod environment;
mod sandbox;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_urls_give_the_destination_port_and_directory() {
        let (t, dir) =
            Transport::parse_ssh_url("ssh://dev@build-7:2222/src/app", &[], None).unwrap();
        assert_eq!(dir.as_deref(), Some(Path::new("/src/app")));
        assert_eq!(t.label, "ssh://dev@build-7:2222");
        let tail: Vec<&str> = t.argv.iter().rev().take(3).map(String::as_str).collect();
        assert_eq!(tail, [DEFAULT_SERVER_COMMAND, "--", "dev@build-7"]);
        assert!(t.argv.windows(2).any(|w| w == ["-p", "2222"]));
        assert!(t.argv.iter().any(|a| a == "BatchMode=yes"));

        let (t, dir) = Transport::parse_ssh_url("ssh://host", &[], Some("/opt/x")).unwrap();
        assert_eq!(dir, None);
        assert_eq!(t.argv.last().map(String::as_str), Some("/opt/x"));
        assert!(!t.argv.iter().any(|a| a == "-p"));
    }

    #[test]
    fn bad_ssh_urls_say_why() {
        for (url, why) in [
            ("http://host", "ssh://"),
            ("ssh://host:port/x", "port"),
            ("ssh://user@/x", "no host"),
            ("ssh://-oProxyCommand=x/y", "no host"),
        ] {
            let err = Transport::parse_ssh_url(url, &[], None).unwrap_err();
            assert!(err.to_string().contains(why), "{url}: {err}");
        }
    }

    #[test]
    fn the_transport_environment_has_no_secrets_and_debug_shows_no_values() {
        let t = Transport::direct(vec!["x".into()]).with_env(BTreeMap::from([(
            "OPENAI_API_KEY".to_string(),
            "sk-abcdefghijklmnopqrstuvwxyz012345".to_string(),
        )]));
        assert!(!format!("{t:?}").contains("sk-abc"));
        let inherited = Transport::direct(vec!["x".into()]);
        assert!(inherited.env.keys().all(|k| !k.ends_with("_API_KEY")));
    }
}
