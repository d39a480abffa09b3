//! A long-lived child process that is talked to over its stdin and stdout (an MCP server,
//! an exec-server behind `ssh`): spawned in its own process group with the same hygiene as
//! commands, its stderr kept as a bounded tail, and the whole group ended with it.
//!
//! It never installs a signal handler and never waits on a process it did not spawn.
//! Dropping a [`StdioChild`] ends its group (SIGTERM, a short grace, SIGKILL), reaps the
//! child and joins the stderr reader, so nothing it started outlives it.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::{Group, readable};

/// How much of the child's stderr is kept (the newest bytes).
pub(crate) const STDERR_TAIL: usize = 16 * 1024;
/// The grace between SIGTERM and SIGKILL when a child is dropped.
const DROP_GRACE: Duration = Duration::from_millis(500);

/// What to start.
pub(crate) struct StdioChildSpec<'a> {
    /// The program (looked up on the `PATH` of `env` when it has no slash).
    pub program: &'a str,
    /// Its arguments.
    pub args: &'a [String],
    /// Where it runs; the parent's working directory when `None`.
    pub cwd: Option<&'a Path>,
    /// Its whole environment (nothing is inherited beyond this map).
    pub env: &'a BTreeMap<String, String>,
    /// A name for the stderr reader thread (`agentloop-stderr-<name>`).
    pub name: &'a str,
}

/// A running child in its own process group, with piped stdin and stdout.
pub(crate) struct StdioChild {
    group: Group,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    /// The stderr pipe while no one reads it yet (a polled child's, until taken).
    stderr_pipe: Option<ChildStderr>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    /// Set when the stderr reader has seen end-of-file (or stopped).
    stderr_done: Arc<AtomicBool>,
    reader: Option<thread::JoinHandle<()>>,
}

impl StdioChild {
    /// Spawns the child. `Err` when it cannot be started (no such program, no permission).
    pub(crate) fn spawn(spec: &StdioChildSpec<'_>) -> io::Result<StdioChild> {
        StdioChild::spawn_with(spec, true)
    }

    /// Spawns the child without a stderr reader thread: the caller takes the pipe
    /// ([`take_stderr`](Self::take_stderr)) and feeds [`StderrSink`] itself (the remote
    /// transports' one poll loop reads every transport's stderr).
    pub(crate) fn spawn_polled(spec: &StdioChildSpec<'_>) -> io::Result<StdioChild> {
        StdioChild::spawn_with(spec, false)
    }

    fn spawn_with(spec: &StdioChildSpec<'_>, reader_thread: bool) -> io::Result<StdioChild> {
        let mut command = Command::new(spec.program);
        command
            .args(spec.args)
            .env_clear()
            .envs(spec.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(cwd) = spec.cwd {
            command.current_dir(cwd);
        }
        super::open_files::restore_for(&mut command);
        let mut child = command.spawn().map_err(|e| {
            let why = super::open_files::explain(&e);
            io::Error::new(
                e.kind(),
                format!("failed to spawn `{}`: {why}", spec.program),
            )
        })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let mut stderr_pipe = child.stderr.take();
        let handed = if reader_thread {
            None
        } else {
            stderr_pipe.take()
        };
        // The group waits for the child by pid; the `Child` itself holds nothing more.
        let group = Group::new(child.id() as libc::pid_t);
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let stderr_done = Arc::new(AtomicBool::new(stderr_pipe.is_none() && handed.is_none()));
        let reader = match stderr_pipe {
            Some(pipe) => {
                let (tail, stop) = (Arc::clone(&stderr), Arc::clone(&stop));
                let done = Arc::clone(&stderr_done);
                Some(
                    thread::Builder::new()
                        .name(format!("agentloop-stderr-{}", spec.name))
                        .stack_size(64 * 1024)
                        .spawn(move || {
                            keep_tail(pipe, &tail, &stop);
                            done.store(true, Ordering::SeqCst);
                        })?,
                )
            }
            None => None,
        };
        Ok(StdioChild {
            group,
            stdin,
            stdout,
            stderr_pipe: handed,
            stderr,
            stop,
            stderr_done,
            reader,
        })
    }

    /// The child's stderr pipe, when it was spawned with [`spawn_polled`](Self::spawn_polled)
    /// (once).
    pub(crate) fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.stderr_pipe.take()
    }

    /// Where an outside reader of the stderr pipe keeps the tail and says it has ended.
    pub(crate) fn stderr_sink(&self) -> StderrSink {
        StderrSink {
            tail: Arc::clone(&self.stderr),
            done: Arc::clone(&self.stderr_done),
        }
    }

    /// The child's stdin (once).
    pub(crate) fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    /// The child's stdout (once).
    pub(crate) fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// The newest bytes the child wrote to stderr, as text.
    pub(crate) fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&tail).into_owned()
    }

    /// [`stderr_tail`](Self::stderr_tail) once the reader has seen stderr end, waiting at
    /// most `wait` for that: a child that just exited has usually said why, and its last
    /// words may still be in the pipe.
    pub(crate) fn stderr_tail_after_exit(&self, wait: Duration) -> String {
        let deadline = std::time::Instant::now() + wait;
        while !self.stderr_done.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
        }
        self.stderr_tail()
    }

    /// The child's process id (also its process group id).
    pub(crate) fn id(&self) -> u32 {
        self.group.pid()
    }

    /// Whether the child has exited (reaping it) or is exiting: its main thread already a
    /// zombie while its other threads end, which `waitpid` does not report until the last
    /// one is gone (a multithreaded server killed by a signal shows this for a moment).
    pub(crate) fn has_ended(&mut self) -> bool {
        if self.try_exited().is_some() {
            return true;
        }
        // `/proc/PID/stat`: the state follows the last `)`. One small read, no allocation.
        let mut path = [0u8; 32];
        let mut rest = &mut path[..];
        if write!(rest, "/proc/{}/stat", self.id()).is_err() {
            return false;
        }
        let at = 32 - rest.len();
        let Ok(path) = std::str::from_utf8(&path[..at]) else {
            return false;
        };
        let mut stat = [0u8; 512];
        let read = std::fs::File::open(path).and_then(|mut f| f.read(&mut stat));
        let Ok(n) = read else {
            return false;
        };
        let stat = &stat[..n];
        let state = stat
            .iter()
            .rposition(|&b| b == b')')
            .and_then(|close| stat[close + 1..].iter().find(|b| !b.is_ascii_whitespace()));
        matches!(state, Some(b'Z' | b'X'))
    }

    /// The child's exit status if it has exited (reaping it), `None` while it runs.
    pub(crate) fn try_exited(&mut self) -> Option<ExitStatus> {
        if self.group.try_reap() {
            self.group.status()
        } else {
            None
        }
    }

    /// Ends the whole group: SIGTERM, `grace`, SIGKILL; reaps the child and joins the
    /// stderr reader. Returns the child's status when it could be read.
    pub(crate) fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        // Closing stdin first lets a well-behaved server exit on end-of-file.
        self.stdin.take();
        // A group that is already gone is not signalled: its id may have been reused.
        if !self.group.try_reap() || self.group.has_live_members() {
            self.group.terminate(grace);
        }
        self.stop.store(true, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.group.status()
    }
}

impl Drop for StdioChild {
    fn drop(&mut self) {
        self.terminate(DROP_GRACE);
    }
}

/// A polled child's stderr tail, fed by whoever reads its pipe.
#[derive(Clone)]
pub(crate) struct StderrSink {
    tail: Arc<Mutex<Vec<u8>>>,
    done: Arc<AtomicBool>,
}

impl StderrSink {
    /// Keeps `bytes`, dropping the oldest past [`STDERR_TAIL`].
    pub(crate) fn keep(&self, bytes: &[u8]) {
        let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        push_tail(&mut tail, bytes);
    }

    /// The pipe has ended (or will not be read any more).
    pub(crate) fn end(&self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

fn push_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    tail.extend_from_slice(bytes);
    if tail.len() > STDERR_TAIL {
        let excess = tail.len() - STDERR_TAIL;
        tail.drain(..excess);
    }
}

/// The core variables of this process's environment (`PATH`, `HOME`, locales, toolchain
/// homes; never a secret): what a long-lived child such as an MCP server starts from.
pub(crate) fn core_environment() -> BTreeMap<String, String> {
    let base: BTreeMap<String, String> = std::env::vars().collect();
    crate::exec::local::env::filter(&base, &crate::exec::EnvPolicy::core_only())
}

/// Waits up to `timeout_ms` for a child's stdout to have data or reach end-of-file, so a
/// reader can also watch a stop flag.
pub(crate) fn stdout_readable(stdout: &ChildStdout, timeout_ms: i32) -> bool {
    readable(stdout.as_raw_fd(), timeout_ms)
}

/// Keeps what a polled child's stderr pipe already holds (a transport that failed before
/// its pipe was handed to a reader has usually said why), waiting at most 50 ms for each
/// read, so a pipe still held open elsewhere cannot hold the caller.
pub(crate) fn drain_stderr(pipe: &mut ChildStderr, sink: &StderrSink) {
    let mut buf = [0u8; 4096];
    let mut read = 0;
    while read < 4 * STDERR_TAIL && readable(pipe.as_raw_fd(), 50) {
        match pipe.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                read += n;
                sink.keep(&buf[..n]);
            }
        }
    }
    sink.end();
}

/// Reads `pipe` until end-of-file or `stop`, keeping the newest [`STDERR_TAIL`] bytes.
fn keep_tail(mut pipe: impl Read + AsRawFd, tail: &Mutex<Vec<u8>>, stop: &AtomicBool) {
    let mut buf = [0u8; 4096];
    loop {
        // After `stop`, what is already in the pipe is still kept (a child that failed at
        // once has usually said why), without waiting for more.
        let wait_ms = if stop.load(Ordering::SeqCst) { 0 } else { 25 };
        if !readable(pipe.as_raw_fd(), wait_ms) {
            if wait_ms == 0 {
                break;
            }
            continue;
        }
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                push_tail(&mut tail, &buf[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};

    fn env() -> BTreeMap<String, String> {
        BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())])
    }

    #[test]
    fn a_child_echoes_over_its_pipes_and_keeps_its_stderr_tail() {
        let env = env();
        let args = [
            "-c".to_string(),
            "echo oops >&2; while read l; do echo \"got $l\"; done".to_string(),
        ];
        let mut child = StdioChild::spawn(&StdioChildSpec {
            program: "bash",
            args: &args,
            cwd: None,
            env: &env,
            name: "test",
        })
        .unwrap();
        let mut stdin = child.take_stdin().unwrap();
        let mut stdout = BufReader::new(child.take_stdout().unwrap());
        writeln!(stdin, "hello").unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "got hello\n");
        drop(stdin);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while child.try_exited().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "child did not exit on EOF"
            );
            thread::sleep(Duration::from_millis(5));
        }
        child.terminate(Duration::from_millis(100));
        assert!(child.stderr_tail().contains("oops"));
    }

    #[test]
    fn dropping_a_child_ends_its_whole_group() {
        let env = env();
        let args = ["-c".to_string(), "sleep 30 & echo $!; wait".to_string()];
        let mut child = StdioChild::spawn(&StdioChildSpec {
            program: "bash",
            args: &args,
            cwd: None,
            env: &env,
            name: "test",
        })
        .unwrap();
        let mut stdout = BufReader::new(child.take_stdout().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        drop(child);
        // Gone, or a zombie waiting for init to reap it.
        let stat = std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .chars()
            .next();
        assert!(
            matches!(state, None | Some('Z')),
            "the background job outlived its group: {stat}"
        );
    }
}
