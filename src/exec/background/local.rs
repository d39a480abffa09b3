//! The local [`BackgroundProcess`]: a command started on this machine that a named thread of
//! its own (`agentloop-bg-N`) waits for, as a foreground command's caller would
//! (`exec/process/`: its own process group, its pipes read as they come, SIGTERM → grace →
//! SIGKILL on a kill, a bounded drain of what it left behind), keeping its output in a
//! bounded buffer per stream that readers read from.
//!
//! The thread lives exactly as long as the process; dropping the handle kills the process
//! and joins it. It never reads the process environment or touches files.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::buffer::StreamBuffer;
use super::{BackgroundProcess, ExitCallback, OutputSlice};
use crate::cancel::CancelToken;
use crate::exec::local::redact::{Redactor, StreamRedactor};
use crate::exec::process::detached::{self, Detached, Started};
use crate::exec::process::{self, NO_TIMEOUT};
use crate::exec::sandbox::spawn::Prepared;
use crate::exec::{ExecResult, OutputStream};
use crate::sync::lock;

/// How long a write to the process's stdin may wait for it to read.
const STDIN_WAIT: Duration = Duration::from_secs(5);
/// The waiting thread's stack: the wait loop's frames and the read buffer's bookkeeping
/// (the buffers themselves are on the heap).
const THREAD_STACK: usize = 256 * 1024;

/// What the local environment hands over to start a background process.
pub(crate) struct Start {
    pub(crate) command: String,
    pub(crate) cwd: PathBuf,
    /// The whole environment of the command (filtered, with the request's own variables).
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) kill_grace: Duration,
    /// The sandbox, prepared for a background process (with its PID namespace, where one
    /// can be made).
    pub(crate) sandbox: Option<Prepared>,
    /// The secrets replaced in the output before it is kept.
    pub(crate) redactor: Arc<Redactor>,
    /// Bytes each stream's buffer keeps at most.
    pub(crate) output_limit: usize,
}

/// What the handle and the waiting thread share.
struct Shared {
    state: Mutex<State>,
    /// Signalled on new output and on the exit.
    changed: Condvar,
    /// Cancelled to end the process (`kill`, drop).
    stop: CancelToken,
    control: Detached,
    stdin: Mutex<Option<File>>,
}

struct State {
    streams: [StreamBuffer; 2],
    exit: Option<ExecResult>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn push(&self, stream: OutputStream, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.lock().streams[index(stream)].push(bytes);
        self.changed.notify_all();
    }

    /// Waits until `done` holds, `deadline` passes or `cancel` fires; returns the state.
    fn wait_until(
        self: &Arc<Self>,
        deadline: Instant,
        cancel: &CancelToken,
        done: impl Fn(&State) -> bool,
    ) -> MutexGuard<'_, State> {
        let waker = Arc::clone(self);
        let _guard = cancel.on_cancel(move || {
            // Under the lock: a waiter between its check and its wait cannot miss this.
            let _state = waker.lock();
            waker.changed.notify_all();
        });
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            if done(&state) || cancel.is_cancelled() || now >= deadline {
                return state;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

fn index(stream: OutputStream) -> usize {
    match stream {
        OutputStream::Stdout => 0,
        OutputStream::Stderr => 1,
    }
}

/// A background process on this machine.
pub(crate) struct LocalBackground {
    shared: Arc<Shared>,
    pid: u32,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// Starts `start` on a thread of its own; returns once the shell runs (or could not be
/// started). `on_exit` is called on that thread when the process has exited.
pub(crate) fn start(start: Start, on_exit: ExitCallback) -> io::Result<LocalBackground> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let (started_tx, started_rx) = crossbeam_channel::bounded::<io::Result<Started>>(1);
    let told = started_tx.clone();
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            streams: [
                StreamBuffer::new(start.output_limit),
                StreamBuffer::new(start.output_limit),
            ],
            exit: None,
        }),
        changed: Condvar::new(),
        stop: CancelToken::new(),
        control: Detached::new(move |started| {
            let _ = told.try_send(Ok(started));
        }),
        stdin: Mutex::new(None),
    });
    let thread = {
        let shared = Arc::clone(&shared);
        thread::Builder::new()
            .name(format!(
                "agentloop-bg-{}",
                NEXT.fetch_add(1, Ordering::Relaxed)
            ))
            .stack_size(THREAD_STACK)
            .spawn(move || supervise(start, &shared, on_exit, started_tx))?
    };
    match started_rx.recv() {
        Ok(Ok(started)) => {
            // The pipe is kept only while the process runs: the waiting thread records
            // the exit first, then takes the pipe (under this lock), so a process that
            // ended at once never gets a pipe left open here.
            let mut stdin = lock(&shared.stdin);
            if shared.lock().exit.is_none() {
                *stdin = started.stdin.map(File::from);
            }
            drop(stdin);
            Ok(LocalBackground {
                shared,
                pid: started.pid,
                thread: Mutex::new(Some(thread)),
            })
        }
        Ok(Err(err)) => {
            let _ = thread.join();
            Err(err)
        }
        Err(_) => {
            let _ = thread.join();
            Err(io::Error::other(
                "the background process ended before it could be started",
            ))
        }
    }
}

/// The waiting thread: runs the command to its end (or kill), keeping its redacted output;
/// then records the result and tells `on_exit`.
fn supervise(
    start: Start,
    shared: &Shared,
    on_exit: ExitCallback,
    started: crossbeam_channel::Sender<io::Result<Started>>,
) {
    let redactor = &*start.redactor;
    let pending = [
        Mutex::new(StreamRedactor::default()),
        Mutex::new(StreamRedactor::default()),
    ];
    let sink = |stream: OutputStream, piece: &[u8]| {
        if redactor.is_empty() {
            shared.push(stream, piece);
        } else {
            let shown = lock(&pending[index(stream)]).push(redactor, piece);
            shared.push(stream, &shown);
        }
    };
    let spec = process::Spawn {
        command: &start.command,
        cwd: &start.cwd,
        env: &start.env,
        timeout: NO_TIMEOUT,
        kill_grace: start.kill_grace,
        stdin: None,
        sandbox: start.sandbox.as_ref().map(Prepared::hook),
        detached: Some(&shared.control),
    };
    let mut result = match process::run(&spec, &sink, &shared.stop) {
        Ok(result) => result,
        Err(err) => {
            let _ = started.send(Err(err));
            return;
        }
    };
    for stream in [OutputStream::Stdout, OutputStream::Stderr] {
        let rest = lock(&pending[index(stream)]).finish();
        shared.push(stream, &rest);
    }
    {
        let mut state = shared.lock();
        let [out, err] = &state.streams;
        result.stdout_bytes = out.total();
        result.stderr_bytes = err.total();
        result.capture_truncated = out.dropped() > 0 || err.dropped() > 0;
        state.exit = Some(result.clone());
    }
    lock(&shared.stdin).take();
    shared.changed.notify_all();
    on_exit(&result);
}

impl BackgroundProcess for LocalBackground {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn read(
        &self,
        stream: OutputStream,
        from: u64,
        max_bytes: usize,
        wait: Duration,
        cancel: &CancelToken,
    ) -> io::Result<OutputSlice> {
        let i = index(stream);
        let state = if wait.is_zero() {
            self.shared.lock()
        } else {
            self.shared
                .wait_until(Instant::now() + wait, cancel, |state| {
                    state.streams[i].total() > from || state.exit.is_some()
                })
        };
        Ok(state.streams[i].read(from, max_bytes))
    }

    fn write_stdin(&self, bytes: &[u8]) -> io::Result<()> {
        let stdin = lock(&self.shared.stdin);
        let Some(pipe) = stdin.as_ref() else {
            let why = if self.shared.lock().exit.is_some() {
                "the process has exited"
            } else {
                "its standard input was closed"
            };
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                format!("cannot write to the process: {why}"),
            ));
        };
        let deadline = Instant::now() + STDIN_WAIT;
        let written =
            detached::write_until(pipe, bytes, deadline, &self.shared.stop).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot write to the process: it closed its standard input ({e})"),
                )
            })?;
        if written < bytes.len() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the process did not read its input for {} s: {written} of {} bytes were \
                     written",
                    STDIN_WAIT.as_secs(),
                    bytes.len()
                ),
            ));
        }
        Ok(())
    }

    fn close_stdin(&self) -> io::Result<()> {
        lock(&self.shared.stdin).take();
        Ok(())
    }

    fn wait(&self, timeout: Duration, cancel: &CancelToken) -> io::Result<Option<ExecResult>> {
        let state = self
            .shared
            .wait_until(Instant::now() + timeout, cancel, |state| {
                state.exit.is_some()
            });
        Ok(state.exit.clone())
    }

    fn signal(&self, signal: i32) -> io::Result<()> {
        if self.shared.lock().exit.is_none() {
            self.shared.control.signal(signal);
        }
        Ok(())
    }

    fn kill(&self) -> io::Result<ExecResult> {
        self.shared.stop.cancel();
        let mut state = self.shared.lock();
        loop {
            if let Some(exit) = &state.exit {
                return Ok(exit.clone());
            }
            state = self
                .shared
                .changed
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for LocalBackground {
    /// Ends the process (its whole group) and joins its thread.
    fn drop(&mut self) {
        let thread = lock(&self.thread).take();
        let Some(thread) = thread else { return };
        // Dropped by its own exit callback: the thread is ending, the process is gone.
        if thread.thread().id() == thread::current().id() {
            return;
        }
        let _ = self.kill();
        let _ = thread.join();
    }
}
