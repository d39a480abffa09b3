//! The escape suite's host sockets: a command under `workspace-write` or `read-only`
//! cannot reach a UNIX socket a process outside the sandbox listens on outside the
//! workspace roots — in `/var/tmp`, under `/run`, in the abstract namespace, ssh-agent's —
//! by its path, a symlink or `/proc/<pid>/root`; an allow-listed socket and the
//! workspace's own still connect. The listeners are this test process's (a host
//! daemon's stand-in): whether one was reached is read from its own backlog.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use super::*;

/// A listening socket of this (host) process; [`reached`](Self::reached) takes a queued
/// connection from its backlog, so a connect that succeeded is never missed.
struct Listener(UnixListener);

impl Listener {
    fn at(path: &Path) -> Listener {
        let listener = UnixListener::bind(path).unwrap();
        listener.set_nonblocking(true).unwrap();
        Listener(listener)
    }

    fn abstract_name(name: &str) -> Listener {
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        Listener(listener)
    }

    /// Whether a client connected since the last look.
    fn reached(&self) -> bool {
        self.0.accept().is_ok()
    }
}

/// A command connecting to `target` (a path, or `@name` in the abstract namespace) with
/// python3, printing `connected` when it could.
fn connect(target: &str) -> String {
    format!(
        "python3 -c 'import socket, sys; t = sys.argv[1]; s = socket.socket(socket.AF_UNIX); \
         s.connect(\"\\0\" + t[1:] if t.startswith(\"@\") else t); print(\"connected\")' '{target}'"
    )
}

/// `target` cannot be reached: the command failed, the sandbox is named, nothing queued.
fn assert_unreachable(env: &LocalExecutionEnvironment, target: &str, listener: &Listener) {
    let outcome = sh(env, &connect(target));
    assert!(
        !outcome.text.contains("connected"),
        "{target}: {}",
        outcome.text
    );
    assert_denied(&outcome);
    assert!(
        !listener.reached(),
        "{target}: the host's listener was reached"
    );
}

fn assert_reachable(env: &LocalExecutionEnvironment, target: &str, listener: &Listener) {
    let outcome = sh(env, &connect(target));
    assert_ok(&outcome);
    assert!(
        outcome.text.contains("connected"),
        "{target}: {}",
        outcome.text
    );
    assert!(
        listener.reached(),
        "{target}: the listener saw no connection"
    );
}

/// A socket's temporary directory in `parent`, made by this (host) process.
fn host_dir(parent: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("agentloop-host-")
        .tempdir_in(parent)
        .unwrap()
}

/// Whether this process can make a directory under `/run` (root, as a daemon would);
/// otherwise the test skips with a printed reason.
pub(super) fn can_bind_in_run() -> bool {
    let ok = tempfile::tempdir_in("/run").is_ok();
    if !ok {
        eprintln!("skipped: /run is not writable by this user");
    }
    ok
}

/// Whether `ssh-agent` and `ssh-add` are installed; otherwise the test skips with a
/// printed reason (CI installs openssh).
pub(super) fn have_ssh_agent() -> bool {
    let found = ["ssh-agent", "ssh-add"].iter().all(|p| {
        Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !found {
        assert!(
            std::env::var_os("AGENTLOOP_CI").is_none(),
            "ssh-agent is missing under CI"
        );
        eprintln!("skipped: ssh-agent is not installed");
    }
    found
}

pub(super) fn a_listener_in_var_tmp_is_unreachable(f: &Fixture, env: LocalExecutionEnvironment) {
    let dir = host_dir("/var/tmp");
    let socket = dir.path().join("daemon.sock");
    let listener = Listener::at(&socket);
    // By its path, through a symlink in the workspace, and through the host's root as
    // /proc/<pid>/root shows it.
    symlink(&socket, f.ws.join("link.sock")).unwrap();
    let via_proc = format!("/proc/{}/root{}", std::process::id(), socket.display());
    for target in [socket.to_str().unwrap(), "link.sock", &via_proc] {
        assert_unreachable(&env, target, &listener);
    }
}

pub(super) fn a_listener_under_run_is_unreachable(_: &Fixture, env: LocalExecutionEnvironment) {
    let dir = host_dir("/run");
    let socket = dir.path().join("daemon.sock");
    let listener = Listener::at(&socket);
    assert_unreachable(&env, socket.to_str().unwrap(), &listener);
    // `/var/run` names the same directory on current systems.
    let alias = Path::new("/var/run").join(dir.path().strip_prefix("/run").unwrap());
    if alias.join("daemon.sock").exists() {
        assert_unreachable(&env, alias.join("daemon.sock").to_str().unwrap(), &listener);
    }
}

pub(super) fn an_abstract_listener_is_unreachable(_: &Fixture, env: LocalExecutionEnvironment) {
    let name = format!("agentloop-host-{}-{:?}", std::process::id(), Instant::now());
    let listener = Listener::abstract_name(&name);
    assert_unreachable(&env, &format!("@{name}"), &listener);
}

/// A real `ssh-agent` of this process, its socket in a `/tmp` directory of its own as by
/// default; killed when dropped.
struct SshAgent {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl SshAgent {
    fn start() -> SshAgent {
        let dir = host_dir("/tmp");
        let socket = dir.path().join("agent.sock");
        let child = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + GENEROUS;
        while !socket.exists() {
            assert!(Instant::now() < deadline, "ssh-agent made no socket");
            thread::sleep(Duration::from_millis(5));
        }
        SshAgent {
            child,
            socket,
            _dir: dir,
        }
    }
}

impl Drop for SshAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) fn ssh_agents_socket_is_unreachable(_: &Fixture, env: LocalExecutionEnvironment) {
    let agent = SshAgent::start();
    let list = format!("SSH_AUTH_SOCK='{}' ssh-add -l", agent.socket.display());
    // Outside the sandbox the agent answers (it holds no key: status 1).
    let host = Command::new("sh").args(["-c", &list]).output().unwrap();
    assert_eq!(host.status.code(), Some(1), "{host:?}");
    assert!(String::from_utf8_lossy(&host.stdout).contains("no identities"));
    let outcome = sh(&env, &list);
    assert!(
        outcome.text.contains("Error connecting to agent"),
        "{}",
        outcome.text
    );
    assert!(!outcome.text.contains("no identities"), "{}", outcome.text);
    assert_denied(&outcome);
}

pub(super) fn an_allow_listed_socket_connects(f: &Fixture, env: LocalExecutionEnvironment) {
    let dir = host_dir("/var/tmp");
    let socket = dir.path().join("docker.sock");
    let other = dir.path().join("other.sock");
    let (listener, other_listener) = (Listener::at(&socket), Listener::at(&other));
    let policy = env.sandbox().unwrap().policy().clone();
    let allowing = sandboxed_with(&f.ws, policy, |s| s.with_allowed_socket(&socket))
        .expect("the row's environment was made");
    assert_reachable(&allowing, socket.to_str().unwrap(), &listener);
    // Only that one: its neighbour stays hidden.
    assert_unreachable(&allowing, other.to_str().unwrap(), &other_listener);
}

pub(super) fn a_socket_inside_the_workspace_connects(f: &Fixture, env: LocalExecutionEnvironment) {
    // Made by a host process (a dev server of the user's), in the working directory.
    let listener = Listener::at(&f.ws.join("dev.sock"));
    assert_reachable(&env, "dev.sock", &listener);
}

pub(super) fn read_only_hides_even_the_workspaces_sockets(
    f: &Fixture,
    env: LocalExecutionEnvironment,
) {
    // Read-only has no writable root: every host socket is outside.
    let listener = Listener::at(&f.ws.join("dev.sock"));
    assert_unreachable(&env, "dev.sock", &listener);
}

#[test]
fn below_landlock_abi_6_a_network_namespace_keeps_abstract_sockets_out_of_reach() {
    let f = fixture();
    let Some(env) = sandboxed_with(&f.ws, SandboxPolicy::workspace_write(), |s| {
        s.with_landlock_abi_at_most(5)
    }) else {
        return;
    };
    assert!(env.warnings().is_empty(), "{:?}", env.warnings());
    let name = format!("agentloop-host-{}-{:?}", std::process::id(), Instant::now());
    let listener = Listener::abstract_name(&name);
    let outcome = sh(&env, &connect(&format!("@{name}")));
    // The name does not exist in the command's own network namespace.
    assert!(
        outcome.text.contains("Connection refused"),
        "{}",
        outcome.text
    );
    assert!(!listener.reached());
}

#[test]
fn below_landlock_abi_6_with_the_network_on_abstract_sockets_are_a_named_warning() {
    let f = fixture();
    let env = LocalExecutionEnvironment::new(&f.ws)
        .unwrap()
        .with_sandbox(
            Sandbox::new(SandboxPolicy::workspace_write())
                .with_network(Network::On)
                .with_landlock_abi_at_most(5),
        )
        .expect("a warning, not an error, under Required");
    assert!(
        env.warnings()
            .iter()
            .any(|w| w.contains("Landlock ABI 5 < 6")
                && w.contains("abstract UNIX sockets of host processes")),
        "{:?}",
        env.warnings()
    );
}
