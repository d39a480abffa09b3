//! RemoteExecutionEnvironment against real exec-servers: the CLI package's
//! `agentloop-exec-server` as a direct child (every run), behind a private `sshd` on
//! 127.0.0.1 (when Debian's `openssh-server` is installed; required under
//! `AGENTLOOP_CI=1`) and through `podman://` into a container of the local test image
//! (when podman is installed; required under CI); container transports in `containers.rs`; hostile transports (floods, no `hello`) in `hostile.rs`.
//!
//! The sshd is started by the tests themselves: throwaway host and user keys made with
//! `ssh-keygen` in a temp dir, a free high port, `ListenAddress 127.0.0.1`, its own config
//! (`-f`), `-D -e`, `StrictModes no`, `UsePAM no`, the current user, the authorized key in
//! the temp dir. The "remote side" is this machine, so the tests can check with `/proc`
//! that nothing is left running there.

mod background;
mod container_faults;
mod containers;
mod faults;
mod hostile;
mod scale;
mod session;
mod suite;

pub use support::sshd::Sshd;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::remote::{
    ContainerKind, ContainerOptions, RemoteExecutionEnvironment, Transport,
};
use agentloop::exec::{CommandRequest, ExecutionEnvironment};

use support::GENEROUS;
use support::podman::{Container, stripped_server};

/// A secret the transport's environment carries; commands must never see it.
pub const SECRET: &str = "sk-remote-test-0123456789abcdefghijklmnop";

/// The CLI package's `agentloop-exec-server`, as `cargo test` at the root builds it.
pub fn server_binary() -> PathBuf {
    support::programs::exec_server()
}

/// How a suite test reaches its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The exec-server as a direct child.
    Stdio,
    /// `ssh` to the private sshd.
    Ssh,
    /// `podman://` into a container of the test image, the exec-server copied in. The
    /// container shares the host's pid namespace and sees the temp dir at the same path,
    /// so the suite's checks (`/proc`, the files) read what they read for the others.
    Podman,
}

/// A connected remote environment in a fresh temp dir, with what it needs to stay alive.
pub struct Fixture {
    pub env: RemoteExecutionEnvironment,
    pub dir: tempfile::TempDir,
    /// The exec-server's pid on the "remote" side.
    pub server_pid: i32,
    pub sshd: Option<Sshd>,
    /// The container (removed on drop, after the environment).
    pub container: Option<Container>,
}

impl Fixture {
    /// Connects via `via`; `None` when sshd is not installed (outside CI).
    pub fn new(via: Via) -> Option<Fixture> {
        Fixture::with(via, |t| t)
    }

    /// As [`new`](Self::new), the transport adjusted by `adjust` first.
    pub fn with(via: Via, adjust: impl FnOnce(Transport) -> Transport) -> Option<Fixture> {
        let dir = tempfile::tempdir().expect("temp dir");
        let (transport, sshd, container) = match via {
            Via::Stdio => (stdio_transport(), None, None),
            Via::Ssh => {
                let sshd = Sshd::start()?;
                (ssh_transport(&sshd), Some(sshd), None)
            }
            Via::Podman => {
                let (transport, container) = podman_transport(dir.path())?;
                (transport, None, Some(container))
            }
        };
        let env = RemoteExecutionEnvironment::connect(adjust(transport), Some(dir.path()))
            .expect("the exec-server answers hello")
            .with_kill_grace(Duration::from_millis(500));
        let server_pid = server_pid(&env);
        Some(Fixture {
            env,
            dir,
            server_pid,
            sshd,
            container,
        })
    }

    /// Ends the connection and asserts that the server (and so everything it ran) is gone.
    pub fn finish(self) {
        let pid = self.server_pid;
        drop(self.env);
        assert_gone(pid);
    }
}

/// The exec-server as a direct child, with a secret in its environment.
pub fn stdio_transport() -> Transport {
    let mut env = base_env();
    env.insert("OPENAI_API_KEY".to_string(), SECRET.to_string());
    let server = server_binary().to_string_lossy().into_owned();
    Transport::direct(vec![server]).with_env(env)
}

/// A container sharing the host's pid namespace with `dir` mounted at its own path, and
/// a `podman://` transport to it that copies the exec-server in (the image has none),
/// with a secret in the exec-server's environment.
pub fn podman_transport(dir: &Path) -> Option<(Transport, Container)> {
    let mount = format!("{0}:{0}", dir.display());
    let container = Container::start(&["--pid", "host", "-v", &mount])?;
    let mut options = ContainerOptions::new();
    options.bootstrap = Some(stripped_server());
    options.env = BTreeMap::from([
        ("OPENAI_API_KEY".to_string(), SECRET.to_string()),
        ("VISIBLE_MARKER".to_string(), "plain-value".to_string()),
    ]);
    let transport = Transport::container(ContainerKind::Podman, &container.name, &options, None)
        .expect("podman is on PATH and the exec-server readable")
        .with_env(base_env());
    Some((transport, container))
}

/// PATH and HOME, enough for bash, ssh and the server.
pub fn base_env() -> BTreeMap<String, String> {
    ["PATH", "HOME", "USER", "LANG"]
        .iter()
        .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
        .chain([("VISIBLE_MARKER".to_string(), "plain-value".to_string())])
        .collect()
}

/// The server's pid: a command's shell is its direct child.
fn server_pid(env: &RemoteExecutionEnvironment) -> i32 {
    let request = CommandRequest::new("echo $PPID", Duration::from_secs(20));
    let result = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .expect("echo runs");
    result.stdout.trim().parse().expect("a pid")
}

pub fn run(
    env: &dyn ExecutionEnvironment,
    command: &str,
    timeout_ms: u64,
) -> agentloop::exec::ExecResult {
    let request = CommandRequest::new(command, Duration::from_millis(timeout_ms));
    env.exec_command(&request, &|_, _| {}, &CancelToken::new())
        .expect("the command runs")
}

/// Whether `pid` runs (a zombie does not).
pub fn running(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

/// Waits (bounded) until `pid` no longer runs.
pub fn assert_gone(pid: i32) {
    let deadline = Instant::now() + GENEROUS;
    while running(pid) {
        assert!(Instant::now() < deadline, "process {pid} is still running");
        thread::sleep(Duration::from_millis(20));
    }
}

/// The pids on the first line of `text` that starts with `pids `.
pub fn pids_in(text: &str) -> Vec<i32> {
    let line = text
        .lines()
        .find(|l| l.starts_with("pids "))
        .unwrap_or_else(|| panic!("no pids in {text:?}"));
    line["pids ".len()..]
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// An ssh transport to the exec-server behind `sshd`, a secret in the server's environment.
pub fn ssh_transport(sshd: &Sshd) -> Transport {
    let server = format!(
        "env OPENAI_API_KEY={SECRET} VISIBLE_MARKER=plain-value {}",
        server_binary().display()
    );
    Transport::ssh(
        &sshd.destination(),
        Some(sshd.port),
        &sshd.options(),
        Some(&server),
    )
    .with_env(base_env())
}
