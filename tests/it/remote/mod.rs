//! RemoteExecutionEnvironment against real exec-servers: the `exec_server` example as a
//! direct child (every run) and behind a private `sshd` on 127.0.0.1 (when Debian's
//! `openssh-server` is installed; required under `AGENTLOOP_CI=1`).
//!
//! The sshd is started by the tests themselves: throwaway host and user keys made with
//! `ssh-keygen` in a temp dir, a free high port, `ListenAddress 127.0.0.1`, its own config
//! (`-f`), `-D -e`, `StrictModes no`, `UsePAM no`, the current user, the authorized key in
//! the temp dir. The "remote side" is this machine, so the tests can check with `/proc`
//! that nothing is left running there.

mod cli;
mod faults;
mod session;
mod suite;

use std::collections::BTreeMap;
use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::{
    CommandRequest, ExecutionEnvironment, RemoteExecutionEnvironment, Transport,
};

/// A secret the transport's environment carries; commands must never see it.
pub const SECRET: &str = "sk-remote-test-0123456789abcdefghijklmnop";

/// The `exec_server` example, as `cargo test` builds it.
pub fn server_binary() -> PathBuf {
    crate::agent_cli::example_binary("exec_server")
}

/// Whether CI requires every tool (`AGENTLOOP_CI=1`).
fn ci() -> bool {
    std::env::var("AGENTLOOP_CI").is_ok_and(|v| v == "1")
}

/// Skips (returns `None` after a printed reason) or, under CI, fails.
fn missing(reason: &str) -> Option<Sshd> {
    assert!(!ci(), "AGENTLOOP_CI=1 and {reason}");
    eprintln!("skipped: {reason}");
    None
}

/// How a suite test reaches its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The exec-server as a direct child.
    Stdio,
    /// `ssh` to the private sshd.
    Ssh,
}

/// A connected remote environment in a fresh temp dir, with what it needs to stay alive.
pub struct Fixture {
    pub env: RemoteExecutionEnvironment,
    pub dir: tempfile::TempDir,
    /// The exec-server's pid on the "remote" side.
    pub server_pid: i32,
    pub sshd: Option<Sshd>,
}

impl Fixture {
    /// Connects via `via`; `None` when sshd is not installed (outside CI).
    pub fn new(via: Via) -> Option<Fixture> {
        Fixture::with(via, |t| t)
    }

    /// As [`new`](Self::new), the transport adjusted by `adjust` first.
    pub fn with(via: Via, adjust: impl FnOnce(Transport) -> Transport) -> Option<Fixture> {
        let dir = tempfile::tempdir().expect("temp dir");
        let (transport, sshd) = match via {
            Via::Stdio => (stdio_transport(), None),
            Via::Ssh => {
                let sshd = Sshd::start()?;
                (sshd.transport(), Some(sshd))
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

pub fn run(env: &dyn ExecutionEnvironment, command: &str, timeout_ms: u64) -> agentloop::exec::ExecResult {
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
    let deadline = Instant::now() + Duration::from_secs(15);
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

/// A private sshd on 127.0.0.1, killed on drop.
pub struct Sshd {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
    pub user: String,
}

impl Sshd {
    /// Starts one, or `None` (with a printed reason) when sshd is not installed.
    pub fn start() -> Option<Sshd> {
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.is_file() {
            return missing("/usr/sbin/sshd is missing (apt-get install openssh-server)");
        }
        if Command::new("ssh").arg("-V").output().is_err() {
            return missing("the ssh client is missing (apt-get install openssh-client)");
        }
        // sshd insists on its privilege separation directory.
        let _ = fs::create_dir_all("/run/sshd");
        let dir = tempfile::tempdir().expect("temp dir");
        for key in ["host_key", "id"] {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.path().join(key))
                .status()
                .expect("ssh-keygen runs");
            assert!(made.success(), "ssh-keygen failed");
        }
        fs::copy(dir.path().join("id.pub"), dir.path().join("authorized_keys")).unwrap();
        let port = free_port();
        let d = dir.path().display();
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nLogLevel ERROR\n\
             MaxStartups 100:30:200\nMaxSessions 100\n"
        );
        fs::write(dir.path().join("sshd_config"), config).unwrap();
        let child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(dir.path().join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.path().join("sshd.log")).unwrap())
            .spawn()
            .expect("sshd starts");
        let user = std::env::var("USER").unwrap_or_else(|_| "root".to_string());
        let mut sshd = Sshd {
            child,
            port,
            dir,
            user,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = sshd.child.try_wait() {
                let log = fs::read_to_string(sshd.dir.path().join("sshd.log")).unwrap_or_default();
                panic!("sshd exited with {status}: {log}");
            }
            assert!(Instant::now() < deadline, "sshd never listened on {port}");
            thread::sleep(Duration::from_millis(20));
        }
        Some(sshd)
    }

    /// The ssh client options: our key, no known-hosts file, no user config.
    pub fn options(&self) -> Vec<String> {
        let d = self.dir.path().display();
        [
            "-F",
            "/dev/null",
            "-i",
            &format!("{d}/id"),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "LogLevel=ERROR",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// `user@127.0.0.1`.
    pub fn destination(&self) -> String {
        format!("{}@127.0.0.1", self.user)
    }

    /// An ssh transport to the exec-server, a secret in the server's environment.
    pub fn transport(&self) -> Transport {
        let server = format!(
            "env OPENAI_API_KEY={SECRET} VISIBLE_MARKER=plain-value {}",
            server_binary().display()
        );
        Transport::ssh(&self.destination(), Some(self.port), &self.options(), Some(&server))
            .with_env(base_env())
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().unwrap().port()
}
