//! Running the repository's programs from a test: where `cargo test` put the library's
//! examples and the CLI's exec-server, running a command to its end under the shared
//! ceiling, and waiting for a child under it.
//!
//! The CLI's own tests name their binaries with `CARGO_BIN_EXE_*`; the `it` tests run
//! programs of other packages (the library's examples, the CLI's exec-server), which
//! `cargo test` at the repository root builds beside the test binaries: into
//! `target/<profile>/examples/` and `target/<profile>/`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;

use serde_json::Value;

use crate::GENEROUS;

/// `target/<profile>`: the directory above the running test binary's `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps")
        .to_path_buf()
}

fn built(binary: PathBuf, build: &str) -> PathBuf {
    assert!(
        binary.is_file(),
        "{} is missing: `cargo test` at the repository root builds it; after a filtered \
         build run `{build}`",
        binary.display()
    );
    binary
}

/// The library's example `name` (`minimal`, `mcp_client`, …), as `cargo test` builds it.
pub fn example(name: &str) -> PathBuf {
    built(
        profile_dir().join("examples").join(name),
        "cargo build -p agentloop --examples",
    )
}

/// The CLI package's `agentloop-exec-server`, as `cargo test` builds it.
pub fn exec_server() -> PathBuf {
    built(
        profile_dir().join("agentloop-exec-server"),
        "cargo build -p agentloop-cli",
    )
}

/// How a run of a program ended.
pub struct Ran {
    /// The exit status (`None`: ended by a signal).
    pub status: Option<i32>,
    /// Everything it wrote to stdout.
    pub stdout: String,
    /// Everything it wrote to stderr.
    pub stderr: String,
}

impl Ran {
    /// Stdout as JSON Lines (the CLI's `--json` events); panics on a line that is not JSON.
    pub fn events(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .enumerate()
            .map(|(n, line)| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("stdout line {} is not JSON ({e}): {line}", n + 1))
            })
            .collect()
    }

    /// Stdout then stderr, for failure messages.
    pub fn all_output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `wait` (a child's `wait` or `wait_with_output`) on a named thread and returns
/// what it gave; panics with `what` if it takes longer than [`GENEROUS`].
pub fn exit_within<T: Send + 'static>(
    what: &str,
    wait: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> T {
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    let waiter = thread::Builder::new()
        .name("agent-cli-wait".to_string())
        .spawn(move || {
            let _ = done_tx.send(wait());
        })
        .unwrap();
    let exited = done_rx
        .recv_timeout(GENEROUS)
        .unwrap_or_else(|_| panic!("{what}: no exit within {GENEROUS:?}"))
        .unwrap();
    waiter.join().unwrap();
    exited
}

/// Runs `command` to its end with piped output and `stdin` as input; panics if it takes
/// longer than [`GENEROUS`] (after killing it).
pub fn run_command(mut command: Command, stdin: &str) -> Ran {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn the program");
    let pid = child.id();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    let waiter = thread::Builder::new()
        .name("example-wait".to_string())
        .spawn(move || {
            let output = child.wait_with_output();
            let _ = done_tx.send(output);
        })
        .unwrap();
    let output = match done_rx.recv_timeout(GENEROUS) {
        Ok(output) => output.expect("wait for the program"),
        Err(_) => {
            // SAFETY: the pid is our child's, not yet reaped (the waiter still waits).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let _ = waiter.join();
            panic!("{command:?} did not finish within {GENEROUS:?}");
        }
    };
    waiter.join().unwrap();
    Ran {
        status: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
