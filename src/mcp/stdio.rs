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

use serde_json::Value;

use super::connection::{Connection, Inbound, Outbound};
use super::{McpServer, lock};
use crate::cancel::CancelToken;
use crate::exec::child::{StdioChild, StdioChildSpec, stdout_readable};

/// The longest line (one JSON-RPC message) read from a server: 64 MiB.
pub(crate) const MAX_LINE: usize = 64 * 1024 * 1024;
/// How long a server gets to exit after its stdin closes before its group is killed.
const EXIT_GRACE: Duration = Duration::from_millis(200);

struct Shared {
    stdin: Mutex<Option<ChildStdin>>,
    child: Mutex<Option<StdioChild>>,
    stop: AtomicBool,
}

impl Shared {
    fn write(&self, message: &Value) -> Result<(), String> {
        let mut line = serde_json::to_vec(message).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let mut stdin = lock(&self.stdin);
        let Some(stdin) = stdin.as_mut() else {
            return Err("the server's stdin is closed".to_string());
        };
        stdin
            .write_all(&line)
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("writing to the server failed: {e}"))
    }
}

/// The stdio side of a [`Connection`].
pub(crate) struct StdioTransport {
    shared: Arc<Shared>,
    reader: Mutex<Option<thread::JoinHandle<()>>>,
}

impl Outbound for StdioTransport {
    fn send(&self, message: &Value, _cancel: Option<&CancelToken>) -> Result<(), String> {
        self.shared.write(message)
    }

    fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        lock(&self.shared.stdin).take();
        // The child stays (ended) so that its stderr tail can still be read.
        if let Some(child) = lock(&self.shared.child).as_mut() {
            child.terminate(EXIT_GRACE);
        }
        if let Some(reader) = lock(&self.reader).take() {
            if reader.thread().id() != thread::current().id() {
                let _ = reader.join();
            }
        }
    }

    fn stderr_tail(&self) -> String {
        lock(&self.shared.child)
            .as_ref()
            .map(StdioChild::stderr_tail)
            .unwrap_or_default()
    }
}

/// Starts `server`'s command and returns the connection over its pipes (before any
/// handshake).
pub(crate) fn connect(server: &McpServer, command: &str) -> io::Result<Connection> {
    let mut env = crate::exec::core_environment();
    env.extend(server.env.clone());
    let mut child = StdioChild::spawn(&StdioChildSpec {
        program: command,
        args: &server.args,
        cwd: server.cwd.as_deref(),
        env: &env,
        name: &format!("mcp-{}", server.name),
    })?;
    let stdin = child.take_stdin();
    let stdout = child
        .take_stdout()
        .ok_or_else(|| io::Error::other("the server has no stdout"))?;
    let shared = Arc::new(Shared {
        stdin: Mutex::new(stdin),
        child: Mutex::new(Some(child)),
        stop: AtomicBool::new(false),
    });
    let inbound = Arc::new(Inbound::default());
    let reader = {
        let (shared, inbound) = (Arc::clone(&shared), Arc::clone(&inbound));
        thread::Builder::new()
            .name(format!("agentloop-mcp-{}", server.name))
            .spawn(move || read_lines(stdout, &shared, &inbound))?
    };
    let transport = StdioTransport {
        shared,
        reader: Mutex::new(Some(reader)),
    };
    Ok(Connection::new(Box::new(transport), inbound))
}

/// Replies to server requests go back through stdin.
struct Reply<'a>(&'a Shared);

impl Outbound for Reply<'_> {
    fn send(&self, message: &Value, _cancel: Option<&CancelToken>) -> Result<(), String> {
        self.0.write(message)
    }
    fn shutdown(&self) {}
}

/// The reader thread: lines → JSON → [`Inbound::dispatch`], until end-of-file, a read
/// error, an over-long line or `stop`; then every waiting request fails.
fn read_lines(mut stdout: ChildStdout, shared: &Shared, inbound: &Inbound) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut line: Vec<u8> = Vec::new();
    let reply = Reply(shared);
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
        while let Some(end) = memchr::memchr(b'\n', chunk) {
            line.extend_from_slice(&chunk[..end]);
            chunk = &chunk[end + 1..];
            if let Ok(message) = serde_json::from_slice::<Value>(&line) {
                inbound.dispatch(message, &reply);
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
