//! The stdio transport: the server as a child process (through `exec`'s [`StdioChild`]:
//! own process group, bounded stderr tail, group ended on drop), newline-delimited JSON-RPC
//! on its stdin and stdout, one named reader thread dispatching what it reads.
//!
//! It never spawns anything itself and never keeps an unbounded line: a line longer than
//! [`MAX_LINE`] closes the connection; a line that is not JSON is skipped.

use std::io::{self, Read, Write};
use std::process::{ChildStdin, ChildStdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use serde_json::Value;

use super::McpServer;
use super::connection::Connection;
use super::host::ClientContext;
use super::inbound::Inbound;
use super::rpc::Outbound;
use crate::cancel::CancelToken;
use crate::exec::process::child::{StdioChild, StdioChildSpec, stdout_readable};
use crate::sync::lock;

/// The longest line (one JSON-RPC message) read from a server: 64 MiB.
pub(crate) const MAX_LINE: usize = 64 * 1024 * 1024;
/// How long a server gets to exit after its stdin closes before its group is killed.
const EXIT_GRACE: Duration = Duration::from_millis(200);

/// How long an error message waits for an exited server's stderr to end.
const STDERR_SETTLE: Duration = Duration::from_millis(250);

/// Messages waiting for the writer thread; a server that stops reading its stdin fills
/// this and further sends fail instead of blocking the caller.
const OUTBOX: usize = 256;

struct Shared {
    outbox: Mutex<Option<Sender<Vec<u8>>>>,
    child: Mutex<Option<StdioChild>>,
    stop: AtomicBool,
}

impl Shared {
    /// Queues `message` for the writer thread; never blocks.
    fn write(&self, message: &Value) -> Result<(), String> {
        let mut line = serde_json::to_vec(message).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let outbox = lock(&self.outbox);
        let Some(outbox) = outbox.as_ref() else {
            return Err("the server's stdin is closed".to_string());
        };
        outbox.try_send(line).map_err(|e| match e {
            TrySendError::Full(_) => "the server is not reading its stdin".to_string(),
            TrySendError::Disconnected(_) => "writing to the server failed".to_string(),
        })
    }
}

/// The stdio side of a [`Connection`].
pub(crate) struct StdioTransport {
    shared: Arc<Shared>,
    threads: Mutex<Vec<thread::JoinHandle<()>>>,
}

impl Outbound for StdioTransport {
    fn send(&self, message: &Value, _cancel: Option<&CancelToken>) -> Result<(), String> {
        self.shared.write(message)
    }

    fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // No more messages: the writer closes stdin once the queue is written (a
        // well-behaved server exits on end-of-file); ending the group unblocks a writer
        // stuck on a server that does not read.
        lock(&self.shared.outbox).take();
        // The child stays (ended) so that its stderr tail can still be read.
        if let Some(child) = lock(&self.shared.child).as_mut() {
            child.terminate(EXIT_GRACE);
        }
        for handle in lock(&self.threads).drain(..) {
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
    }

    /// For error messages: a server that just exited has usually said why, and its last
    /// words may still be in the pipe, so this waits (briefly) for its stderr to end, as
    /// the remote transport does.
    fn stderr_tail(&self) -> String {
        lock(&self.shared.child)
            .as_ref()
            .map(|child| child.stderr_tail_after_exit(STDERR_SETTLE))
            .unwrap_or_default()
    }
}

/// Starts `server`'s command and returns the connection over its pipes (before any
/// handshake).
pub(crate) fn connect(
    server: &McpServer,
    command: &str,
    context: Arc<ClientContext>,
) -> io::Result<Connection> {
    let mut env = crate::exec::process::child::core_environment();
    env.extend(server.env.clone());
    let mut child = StdioChild::spawn(&StdioChildSpec {
        program: command,
        args: &server.args,
        cwd: server.cwd.as_deref(),
        env: &env,
        name: &format!("mcp-{}", server.name),
    })?;
    let stdin = child
        .take_stdin()
        .ok_or_else(|| io::Error::other("the server has no stdin"))?;
    let stdout = child
        .take_stdout()
        .ok_or_else(|| io::Error::other("the server has no stdout"))?;
    let (outbox, queue) = crossbeam_channel::bounded(OUTBOX);
    let shared = Arc::new(Shared {
        outbox: Mutex::new(Some(outbox)),
        child: Mutex::new(Some(child)),
        stop: AtomicBool::new(false),
    });
    let inbound = Arc::new(Inbound::new(&server.name, context));
    let transport = StdioTransport {
        shared: Arc::clone(&shared),
        threads: Mutex::new(Vec::new()),
    };
    let writer = thread::Builder::new()
        .name(format!("agentloop-mcp-w-{}", server.name))
        // It only writes queued lines; the default 2 MiB would be address space idle.
        .stack_size(64 * 1024)
        .spawn(move || write_lines(stdin, &queue));
    match writer {
        Ok(handle) => lock(&transport.threads).push(handle),
        Err(e) => {
            transport.shutdown();
            return Err(e);
        }
    }
    let reader = {
        let (shared, inbound) = (Arc::clone(&shared), Arc::clone(&inbound));
        thread::Builder::new()
            .name(format!("agentloop-mcp-{}", server.name))
            .spawn(move || read_lines(stdout, &shared, &inbound))
    };
    match reader {
        Ok(handle) => lock(&transport.threads).push(handle),
        Err(e) => {
            transport.shutdown();
            return Err(e);
        }
    }
    Ok(Connection::new(Arc::new(transport), inbound))
}

/// The writer thread: queued lines to the server's stdin until the queue closes or a
/// write fails (the server is gone); stdin closes when it returns.
fn write_lines(mut stdin: ChildStdin, queue: &Receiver<Vec<u8>>) {
    for line in queue {
        if stdin.write_all(&line).and_then(|()| stdin.flush()).is_err() {
            break;
        }
    }
}

/// The reader thread: lines → JSON → [`Inbound::dispatch`], until end-of-file, a read
/// error, an over-long line or `stop`; then every waiting request fails.
fn read_lines(mut stdout: ChildStdout, shared: &Shared, inbound: &Inbound) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut line: Vec<u8> = Vec::new();
    let why = loop {
        if shared.stop.load(Ordering::SeqCst) {
            break "the client closed the connection".to_string();
        }
        if !stdout_readable(&stdout, 50) {
            continue;
        }
        let n = match stdout.read(&mut buf) {
            Ok(0) => break "the server exited (end of its stdout)".to_string(),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break format!("reading the server's stdout failed: {e}"),
        };
        let mut chunk = &buf[..n];
        while let Some(end) = crate::bytes::find(b'\n', chunk) {
            line.extend_from_slice(&chunk[..end]);
            chunk = &chunk[end + 1..];
            if let Ok(message) = serde_json::from_slice::<Value>(&line) {
                inbound.dispatch(message);
            }
            line.clear();
        }
        line.extend_from_slice(chunk);
        if line.len() > MAX_LINE {
            break format!("the server sent a line longer than {MAX_LINE} bytes");
        }
    };
    inbound.close(why);
}
