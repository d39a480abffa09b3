//! Running the repository's programs from a test: where `cargo test` put the library's
//! examples and the CLI's exec-server, running a command to its end under the shared
//! ceiling, and waiting for a child under it.
//!
//! The CLI's own tests name their binaries with `CARGO_BIN_EXE_*`; the `it` tests run
//! programs of other packages (the library's examples, the CLI's exec-server), which
//! `cargo test` at the repository root builds beside the test binaries: into
//! `target/<profile>/examples/` and `target/<profile>/`.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

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

/// A pipe read to its end on a named thread into a buffer that can be looked at before
/// then; tells `done` when the pipe is closed.
fn drain(
    mut pipe: impl Read + Send + 'static,
    done: crossbeam_channel::Sender<Option<ExitStatus>>,
) -> Arc<Mutex<Vec<u8>>> {
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let into = buffer.clone();
    thread::Builder::new()
        .name("program-output".to_string())
        .spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                into.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
            let _ = done.send(None);
        })
        .unwrap();
    buffer
}

/// Runs `command` to its end with piped output and `stdin` as input: until it has exited
/// and its output pipes are closed. Past [`GENEROUS`] it kills the program's whole process
/// group (what it started too: a runner's client would keep the pipes open) and panics
/// with the output it had.
pub fn run_command(mut command: Command, stdin: &str) -> Ran {
    command
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn the program");
    let group = child.id() as i32;
    let mut input = child.stdin.take().unwrap();
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let stdout = drain(child.stdout.take().unwrap(), done_tx.clone());
    let stderr = drain(child.stderr.take().unwrap(), done_tx.clone());
    // A program that exits without reading its input is not an error here.
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    thread::Builder::new()
        .name("program-wait".to_string())
        .spawn(move || {
            let _ = done_tx.send(Some(child.wait().expect("wait for the program")));
        })
        .unwrap();
    let text =
        |buffer: &Mutex<Vec<u8>>| String::from_utf8_lossy(&buffer.lock().unwrap()).into_owned();
    // SAFETY: a plain kill(2) of the group the program leads. Its id is not reused while
    // the leader is unreaped or a process of the group is left; with none left (after a
    // normal end) the kill finds no group (Linux hands out pids in order, not at once again).
    let kill_group = || unsafe { libc::kill(-group, libc::SIGKILL) };
    let mut deadline = Instant::now() + GENEROUS;
    let mut status = None;
    let mut ended = 0;
    while ended < 3 {
        match done_rx.recv_deadline(deadline) {
            Ok(exited) => {
                status = status.or(exited);
                ended += 1;
            }
            Err(_) => {
                kill_group();
                // Whatever the killed processes wrote last, once their pipes close.
                deadline = Instant::now() + GENEROUS;
                while done_rx.recv_deadline(deadline).is_ok() {}
                panic!(
                    "{command:?} did not finish within {GENEROUS:?} (exited: {status:?}); \
                     its process group was killed.\n--- stdout so far ---\n{}\n\
                     --- stderr so far ---\n{}",
                    text(&stdout),
                    text(&stderr)
                );
            }
        }
    }
    // Nothing it started outlives it.
    kill_group();
    Ran {
        status: status.and_then(|s| s.code()),
        stdout: text(&stdout),
        stderr: text(&stderr),
    }
}
