//! Background processes: commands that outlive the call that started them (a dev server,
//! a watcher, a long test run), started with
//! [`ExecutionEnvironment::start_background`](super::ExecutionEnvironment::start_background)
//! and driven through their [`BackgroundProcess`] handle: output read incrementally from a
//! bounded buffer per stream, input written to a pipe, a wait with a timeout, signals, and
//! the kill of the whole process group.
//!
//! Here: the handle's trait and the value a read returns (`mod.rs`), one stream's bounded
//! buffer (`buffer.rs`), and the local implementation (`local.rs`). The process hygiene is
//! `exec/process/`'s, as for a foreground command: its own process group, the same
//! environment filtering, sandbox and redaction, SIGTERM → grace → SIGKILL of the group.
//! This module never decides how long a process may live: its owner does (a session ends
//! its processes when it ends).

use std::io;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::exec::{ExecResult, OutputStream};

mod buffer;
pub(crate) mod local;

/// Called once, on another thread, as soon as a background process has exited (also when
/// it was killed): its result, with empty `stdout` and `stderr` (read those through the
/// handle) and the streams' byte totals.
pub type ExitCallback = Box<dyn FnOnce(&ExecResult) + Send>;

/// Part of one output stream of a background process, read by
/// [`BackgroundProcess::read`].
///
/// A stream's buffer keeps its first bytes and its newest ones; when the process writes
/// more than the buffer holds, the middle is dropped, and a read across it says how many
/// bytes it skipped and where.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct OutputSlice {
    /// The bytes read, in stream order (redacted as a foreground command's output is).
    pub bytes: Vec<u8>,
    /// Bytes between the read's start and [`end`](Self::end) that the buffer had dropped.
    pub dropped: u64,
    /// Where the dropped bytes were: between `bytes[..dropped_at]` and `bytes[dropped_at..]`.
    pub dropped_at: usize,
    /// The offset after the last byte read: where the next read starts.
    pub end: u64,
    /// Bytes the stream has had so far, dropped ones included.
    pub total: u64,
}

/// A command running in the background, started by
/// [`ExecutionEnvironment::start_background`](super::ExecutionEnvironment::start_background).
///
/// Dropping the handle ends the process (its whole group, as [`kill`](Self::kill) does):
/// whoever holds it decides how long it lives. Every method may be called from any thread.
///
/// ```
/// use std::time::Duration;
/// use agentloop::CancelToken;
/// use agentloop::exec::{CommandRequest, ExecutionEnvironment, LocalExecutionEnvironment, OutputStream};
///
/// let dir = std::env::temp_dir().join(format!("agentloop-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let env = LocalExecutionEnvironment::new(dir.as_path())?;
/// let request = CommandRequest::new(
///     "while read line; do echo \"got $line\"; done",
///     Duration::from_secs(10), // no timeout applies in the background
/// );
/// // Each stream keeps at most 64 KiB; nothing to do when it exits.
/// let cat = env.start_background(&request, 64 * 1024, Box::new(|_| {}))?;
/// cat.write_stdin(b"hello\n")?;
/// let cancel = CancelToken::new();
/// let out = cat.read(OutputStream::Stdout, 0, 1024, Duration::from_secs(20), &cancel)?;
/// assert_eq!(out.bytes, b"got hello\n");
/// let result = cat.kill()?;
/// assert!(result.cancelled);
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait BackgroundProcess: Send + Sync {
    /// The process id of the command's shell, which is also its process group's id, on the
    /// machine it runs on.
    fn pid(&self) -> u32;

    /// What `stream` holds from byte offset `from` on, at most `max_bytes` (the oldest
    /// first). When there is nothing past `from` yet and the process runs, waits up to
    /// `wait` for more (or its exit, or `cancel`); `Duration::ZERO` only looks.
    fn read(
        &self,
        stream: OutputStream,
        from: u64,
        max_bytes: usize,
        wait: Duration,
        cancel: &CancelToken,
    ) -> io::Result<OutputSlice>;

    /// Writes `bytes` to the process's standard input (a pipe, not a terminal). Fails when
    /// the input was closed, the process has ended, or it does not read for a while (then
    /// nothing more is written and the error says how much was).
    fn write_stdin(&self, bytes: &[u8]) -> io::Result<()>;

    /// Closes the process's standard input: it reads end-of-file from now on.
    fn close_stdin(&self) -> io::Result<()>;

    /// Waits up to `timeout` (or until `cancel`) for the process to exit; its result once
    /// it has (see [`ExitCallback`]), `None` while it runs. `Duration::ZERO` only looks.
    fn wait(&self, timeout: Duration, cancel: &CancelToken) -> io::Result<Option<ExecResult>>;

    /// Sends `signal` to the process group (dropped once the process has exited).
    fn signal(&self, signal: i32) -> io::Result<()>;

    /// Ends the process group (SIGTERM, the environment's grace period, SIGKILL) and
    /// returns the result, with `cancelled` set when this stopped it; the result it
    /// already had when it had exited before.
    fn kill(&self) -> io::Result<ExecResult>;
}

/// Threads that end processes at once in [`kill_all`]: enough that processes ignoring
/// SIGTERM do not serve their grace periods one after another.
const KILLERS: usize = 8;

/// Kills every process of `processes`, up to [`KILLERS`] at a time on named scoped
/// threads, and returns once all have ended.
pub(crate) fn kill_all(processes: Vec<Arc<dyn BackgroundProcess>>) {
    let queue = Mutex::new(processes);
    let next = || crate::sync::lock(&queue).pop();
    let work = || {
        while let Some(process) = next() {
            let _ = process.kill();
        }
    };
    let threads = crate::sync::lock(&queue).len().min(KILLERS);
    thread::scope(|scope| {
        for _ in 1..threads {
            let _ = thread::Builder::new()
                .name("agentloop-bg-kill".to_string())
                .stack_size(64 * 1024)
                .spawn_scoped(scope, work);
        }
        work();
    });
}

/// The error of an environment that has no background processes.
pub(crate) fn unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "this execution environment cannot run commands in the background; run the \
         command in the foreground instead",
    )
}
