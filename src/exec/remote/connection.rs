//! One live connection to an exec-server: the transport child (a [`StdioChild`]), a
//! writer shared by the calling threads, and its place in the process-wide poll loop
//! (`poller.rs`), which dispatches responses and output notifications to the waiting
//! callers by request id.
//!
//! When the transport ends or sends something that is not the protocol, every waiting
//! call gets a [`RemoteError`] at once and the connection is dead for good; it never
//! retries by itself (the environment reconnects on the next call).

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufReader, Write};
use std::process::ChildStdin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde_json::Value;

use super::RemoteError;
use super::bootstrap::Bootstrap;
use super::poller::{self, End, Lines, Registration, Streams};
use super::protocol::{self, MAX_LINE};
use crate::base64::decode as decode_base64;
use crate::exec::process::child::{StdioChild, StdioChildSpec, drain_stderr};
use crate::exec::{ExecResult, ExitCallback, OutputStream};

/// How long a closed connection waits for the server to exit on its own (it ends its
/// running commands first) before its group is terminated.
const EXIT_WAIT: Duration = Duration::from_secs(5);
/// The SIGTERM → SIGKILL grace of a transport ended for breaking the protocol or the
/// handshake: it runs no command of ours, so it gets no time to end any.
const ABANDON_GRACE: Duration = Duration::from_millis(200);

/// What the reader hands a waiting call.
pub(crate) enum Incoming {
    /// Live output of a running command.
    Output(OutputStream, Vec<u8>),
    /// The call's result.
    Result(Value),
    /// The call failed on the server: code, message, data.
    Failed(i64, String, Option<Value>),
    /// The connection ended.
    Closed(RemoteError),
}

#[derive(Default)]
struct Pending {
    waiting: HashMap<u64, Sender<Incoming>>,
    /// What to tell when a background process (named by the id of the call that started
    /// it) exits: called on the poll loop's thread, or with a lost-connection result when the
    /// connection ends first.
    exits: HashMap<u64, ExitCallback>,
    /// Why the connection ended, once it has.
    closed: Option<RemoteError>,
}

/// A running exec-server connection.
pub(crate) struct Connection {
    label: String,
    /// Shared with the reader, which ends the transport when it breaks the protocol.
    child: Arc<Mutex<StdioChild>>,
    stdin: Mutex<Option<ChildStdin>>,
    pending: Arc<Mutex<Pending>>,
    next_id: AtomicU64,
    /// Its place in the poll loop, which reads its stdout and stderr.
    registration: Option<Registration>,
    /// The thread that ends a transport that broke the protocol (the poll loop never
    /// waits out a grace), joined on drop.
    abandon: Abandon,
    /// The runtime's status command and the environment to run it with, for a
    /// container transport.
    status: Option<(Vec<String>, BTreeMap<String, String>)>,
}

impl Connection {
    /// Starts the transport, runs the bootstrap exchange when there is one (waiting up to
    /// the given time for each answer), and hands its output to the poll loop (no
    /// handshake yet).
    pub(crate) fn open(
        spec: &StdioChildSpec<'_>,
        label: &str,
        bootstrap: Option<(&Bootstrap, Duration)>,
        status: Option<Vec<String>>,
    ) -> Result<Connection, RemoteError> {
        let spawn_error = |detail: String| RemoteError::Spawn {
            transport: label.to_string(),
            detail,
        };
        let mut child = StdioChild::spawn_polled(spec).map_err(|e| spawn_error(e.to_string()))?;
        let mut stdin = child.take_stdin();
        let mut stderr = child.take_stderr();
        let stdout = child
            .take_stdout()
            .ok_or_else(|| spawn_error("no stdout pipe".to_string()))?;
        let mut stdout = BufReader::with_capacity(64 * 1024, stdout);
        if let Some(((bootstrap, wait), pipe)) =
            bootstrap.zip(stdin.take_if(|_| bootstrap.is_some()))
        {
            let mut end = || {
                child.terminate(ABANDON_GRACE);
            };
            match bootstrap.run(pipe, &mut stdout, wait, label, &mut end) {
                Ok(pipe) => stdin = Some(pipe),
                Err(RemoteError::Bootstrap { transport, detail }) => {
                    child.terminate(ABANDON_GRACE);
                    if let Some(pipe) = stderr.as_mut() {
                        drain_stderr(pipe, &child.stderr_sink());
                    }
                    let said = child.stderr_tail();
                    let said = said.trim();
                    let detail = if said.is_empty() {
                        detail
                    } else {
                        format!("{detail}; the transport said: {said}")
                    };
                    return Err(RemoteError::Bootstrap { transport, detail });
                }
                Err(other) => return Err(other),
            }
        }
        let pending = Arc::new(Mutex::new(Pending::default()));
        let sink = child.stderr_sink();
        let child = Arc::new(Mutex::new(child));
        let abandon = Arc::new(Mutex::new(None));
        let feed = Feed {
            pending: Arc::clone(&pending),
            label: label.to_string(),
            child: Arc::clone(&child),
            abandon: Arc::clone(&abandon),
        };
        let streams = Streams {
            leftover: stdout.buffer().to_vec(),
            stdout: stdout.into_inner(),
            stderr,
            sink,
            cap: MAX_LINE,
        };
        let registration =
            poller::register(streams, Box::new(feed)).map_err(|e| spawn_error(e.to_string()))?;
        Ok(Connection {
            label: label.to_string(),
            child,
            stdin: Mutex::new(stdin),
            pending,
            next_id: AtomicU64::new(1),
            registration: Some(registration),
            abandon,
            status: status.map(|argv| (argv, spec.env.clone())),
        })
    }

    /// The transport child's process id.
    pub(crate) fn pid(&self) -> u32 {
        lock_child(&self.child).id()
    }

    /// Ends the transport's group now (SIGTERM, a short grace, SIGKILL): for a connection
    /// whose handshake failed, which runs nothing that needs time to end.
    pub(crate) fn abandon(&self) {
        lock_child(&self.child).terminate(ABANDON_GRACE);
    }

    /// Whether the connection has ended: the poll loop has seen its end, or the transport
    /// has exited or is exiting (its main thread a zombie while the others end; the loop
    /// may not have read its end-of-file yet, and a call sent now would fail on the dead
    /// pipe instead of reconnecting).
    pub(crate) fn is_closed(&self) -> bool {
        self.lock_pending().closed.is_some() || lock_child(&self.child).has_ended()
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends a request; the returned receiver gets its output and its answer.
    pub(crate) fn start(&self, method: &str, params: Value) -> Result<Call, RemoteError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = crossbeam_channel::unbounded();
        {
            let mut pending = self.lock_pending();
            if pending.closed.is_some() {
                drop(pending);
                // The reader's reason, with the transport's last words (a transport that
                // exited at once is seen here, before its first request).
                return Err(self.closed(String::new()));
            }
            pending.waiting.insert(id, tx);
        }
        if let Err(e) = self.send(&protocol::request(id, method, params)) {
            self.lock_pending().waiting.remove(&id);
            return Err(e);
        }
        Ok(Call { id, rx })
    }

    /// Sends a `background/start` request whose process's exit `on_exit` hears: registered
    /// before the request is sent, so that an exit right after the start is never missed.
    pub(crate) fn start_background(
        &self,
        params: Value,
        on_exit: ExitCallback,
    ) -> Result<Call, RemoteError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = crossbeam_channel::unbounded();
        {
            let mut pending = self.lock_pending();
            if pending.closed.is_some() {
                drop(pending);
                return Err(self.closed(String::new()));
            }
            pending.waiting.insert(id, tx);
            pending.exits.insert(id, on_exit);
        }
        let request = protocol::request(id, "background/start", params);
        if let Err(e) = self.send(&request) {
            let mut pending = self.lock_pending();
            pending.waiting.remove(&id);
            pending.exits.remove(&id);
            return Err(e);
        }
        Ok(Call { id, rx })
    }

    /// Forgets the exit callback of background process `id` (it never started).
    pub(crate) fn forget_exit(&self, id: u64) {
        self.lock_pending().exits.remove(&id);
    }

    /// Sends a notification (no answer).
    pub(crate) fn notify(&self, method: &str, params: Value) -> Result<(), RemoteError> {
        self.send(&protocol::notification(method, params))
    }

    fn send(&self, message: &Value) -> Result<(), RemoteError> {
        let mut line = serde_json::to_vec(message).unwrap_or_default();
        if line.len() > MAX_LINE {
            return Err(RemoteError::LineTooLong { limit: MAX_LINE });
        }
        line.push(b'\n');
        let mut stdin = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
        let written = match stdin.as_mut() {
            Some(pipe) => pipe.write_all(&line).and_then(|()| pipe.flush()),
            None => Err(io::Error::from(io::ErrorKind::BrokenPipe)),
        };
        written.map_err(|e| {
            stdin.take();
            self.closed(format!("writing to it failed: {e}"))
        })
    }

    /// The error a call sees once the connection has ended (the reader's reason if it
    /// has one, else `detail`), with the transport's stderr tail.
    pub(crate) fn closed(&self, detail: String) -> RemoteError {
        let reason = self.lock_pending().closed.clone();
        match reason {
            // The reader saw the end first (a transport that exited at once): its reason,
            // with the transport's last words, which the reader does not add.
            Some(RemoteError::Closed { transport, detail }) => RemoteError::Closed {
                transport,
                detail: format!("{detail}{}", self.stderr_note()),
            },
            Some(other) => other,
            None => RemoteError::Closed {
                transport: self.label.clone(),
                detail: format!("{detail}{}", self.stderr_note()),
            },
        }
    }

    /// The last lines of the transport's stderr, for error messages.
    pub(crate) fn stderr_note(&self) -> String {
        let tail =
            lock_child(&self.child).stderr_tail_after_exit(std::time::Duration::from_millis(250));
        let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
        let last = &lines[lines.len().saturating_sub(3)..];
        let mut note = if last.is_empty() {
            String::new()
        } else {
            format!("; its stderr ends with: {}", last.join(" | "))
        };
        // A container runtime is asked what became of the target (stopped, removed,
        // OOM-killed): `podman exec` itself often ends without a word.
        if let Some((argv, env)) = &self.status
            && let Some(state) = super::container::ask_runtime(argv, env)
        {
            note.push_str(&format!("; the runtime says the container is: {state}"));
        }
        note
    }

    /// Forgets a call that no longer waits.
    pub(crate) fn forget(&self, id: u64) {
        self.lock_pending().waiting.remove(&id);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // End of input asks the server to end its commands and exit; it gets a moment to
        // do so before its whole group is terminated.
        self.stdin.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut child = lock_child(&self.child);
        let deadline = Instant::now() + EXIT_WAIT;
        while child.try_exited().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(2));
        }
        child.terminate(Duration::from_millis(500));
        drop(child);
        // What the server said last is still handled, then the loop lets go of its pipes.
        self.registration.take();
        let abandon = self
            .abandon
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(thread) = abandon {
            let _ = thread.join();
        }
    }
}

/// A call in flight.
pub(crate) struct Call {
    pub(crate) id: u64,
    pub(crate) rx: Receiver<Incoming>,
}

fn lock_child(child: &Mutex<StdioChild>) -> std::sync::MutexGuard<'_, StdioChild> {
    child.lock().unwrap_or_else(|e| e.into_inner())
}

/// A connection's side of the poll loop: lines go to their callers, the end to all.
struct Feed {
    pending: Arc<Mutex<Pending>>,
    label: String,
    child: Arc<Mutex<StdioChild>>,
    abandon: Abandon,
}

type Abandon = Arc<Mutex<Option<thread::JoinHandle<()>>>>;

impl Lines for Feed {
    fn line(&mut self, line: &[u8]) -> Result<(), String> {
        dispatch(line, &self.pending)
    }

    fn end(&mut self, why: End) {
        let closed = |detail: String| RemoteError::Closed {
            transport: self.label.clone(),
            detail,
        };
        let reason = match why {
            End::Eof => closed("the transport closed its output".to_string()),
            End::Failed(e) => closed(format!("reading from it failed: {e}")),
            End::Removed => closed("the connection was closed".to_string()),
            End::TooLong => RemoteError::LineTooLong { limit: MAX_LINE },
            End::Malformed(detail) => RemoteError::Malformed { detail },
        };
        // A server that broke the protocol (a line over the cap, not JSON) is not left
        // writing: its group is ended now, on a thread of its own so that the loop,
        // every connection's reader, does not wait out the grace.
        if matches!(
            reason,
            RemoteError::LineTooLong { .. } | RemoteError::Malformed { .. }
        ) {
            let child = Arc::clone(&self.child);
            let ending = thread::Builder::new()
                .name("agentloop-remote-abandon".to_string())
                .stack_size(64 * 1024)
                .spawn(move || {
                    lock_child(&child).terminate(ABANDON_GRACE);
                });
            // Without a thread to spare the group is ended when the connection is dropped.
            if let Ok(thread) = ending {
                *self.abandon.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
            }
        }
        end_calls(&self.pending, reason);
    }
}

/// Tells every waiting call why the connection ended, and every background process's
/// listener that its process is gone.
fn end_calls(pending: &Mutex<Pending>, reason: RemoteError) {
    let exits = {
        let mut pending = pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.closed = Some(reason.clone());
        for (_, waiting) in pending.waiting.drain() {
            let _ = waiting.send(Incoming::Closed(reason.clone()));
        }
        std::mem::take(&mut pending.exits)
    };
    // The server ends its background processes when its input ends: they are gone.
    let lost = ExecResult {
        cancelled: true,
        ..ExecResult::default()
    };
    for (_, on_exit) in exits {
        on_exit(&lost);
    }
}

/// Hands one line to its caller; `Err` when it is not the protocol.
fn dispatch(line: &[u8], pending: &Mutex<Pending>) -> Result<(), String> {
    let shown = || String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
    let message: Value =
        serde_json::from_slice(line).map_err(|e| format!("not JSON ({e}): {}", shown()))?;
    let waiting = |id: u64| {
        let pending = pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.waiting.get(&id).cloned()
    };
    if message.get("method").and_then(Value::as_str) == Some("process/output") {
        let params = &message["params"];
        let call = params["call"]
            .as_u64()
            .ok_or_else(|| format!("output without a call: {}", shown()))?;
        let stream = match params["stream"].as_str() {
            Some("stdout") => OutputStream::Stdout,
            Some("stderr") => OutputStream::Stderr,
            _ => return Err(format!("output of an unknown stream: {}", shown())),
        };
        let data = params["data"]
            .as_str()
            .and_then(decode_base64)
            .ok_or_else(|| format!("output that is not base64: {}", shown()))?;
        if let Some(tx) = waiting(call) {
            let _ = tx.send(Incoming::Output(stream, data));
        }
        return Ok(());
    }
    if message.get("method").and_then(Value::as_str) == Some("background/exit") {
        let params = &message["params"];
        let (Some(id), Ok(exit)) = (
            params["id"].as_u64(),
            super::codec::exec_result_from_json(&params["exit"]),
        ) else {
            return Err(format!(
                "a background exit without its id or result: {}",
                shown()
            ));
        };
        let on_exit = pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .exits
            .remove(&id);
        if let Some(on_exit) = on_exit {
            on_exit(&exit);
        }
        return Ok(());
    }
    let Some(id) = message.get("id").and_then(Value::as_u64) else {
        // A server-side parse error (`id` null) means we sent something it could not read.
        if let Some(error) = message.get("error") {
            return Err(format!("the server could not read a request: {error}"));
        }
        return Err(format!("a message without a request id: {}", shown()));
    };
    let incoming = if let Some(result) = message.get("result") {
        Incoming::Result(result.clone())
    } else if let Some(error) = message.get("error") {
        Incoming::Failed(
            error["code"].as_i64().unwrap_or(0),
            error["message"].as_str().unwrap_or("").to_string(),
            error.get("data").cloned(),
        )
    } else {
        return Err(format!(
            "a response with neither result nor error: {}",
            shown()
        ));
    };
    let tx = pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .waiting
        .remove(&id);
    if let Some(tx) = tx {
        let _ = tx.send(incoming);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn a_request_after_the_transport_ended_carries_its_last_words() {
        // The transport says why and exits before the first request is started; the
        // request's error must still name the reason (the handshake of a transport that
        // exits at once sees exactly this when the reader is quicker than the caller).
        let env = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        let args = [
            "-c".to_string(),
            "echo 'Permission denied (publickey).' >&2; exit 255".to_string(),
        ];
        let spec = StdioChildSpec {
            program: "/bin/sh",
            args: &args,
            cwd: None,
            env: &env,
            name: "test-transport",
        };
        let connection = Connection::open(&spec, "test-transport", None, None).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !connection.is_closed() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
        }
        assert!(connection.is_closed(), "the reader never saw the end");
        let Err(error) = connection.start("hello", Value::Null) else {
            panic!("a request on an ended connection was started");
        };
        assert!(matches!(error, RemoteError::Closed { .. }), "{error:?}");
        assert!(
            error.to_string().contains("Permission denied (publickey)"),
            "{error}"
        );
    }
}
