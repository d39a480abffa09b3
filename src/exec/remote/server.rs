//! The exec-server loop: serves a [`LocalExecutionEnvironment`] over the protocol of
//! `protocol.rs` on a reader and a writer (stdin and stdout in `agentloop-exec-server`).
//!
//! One named thread per call, all scoped to the serving function: it never returns while a call runs.
//! End of input cancels every running command (their groups are ended as on a timeout)
//! and returns once all calls have answered. It never reads the client's machine: every
//! operation is the local environment's, on the server's side.

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

use super::codec::*;
use super::protocol::*;
use super::serve_background::{self, Processes};
use super::signals;
use crate::base64::encode as encode_base64;
use crate::cancel::CancelToken;
use crate::exec::{ExecutionEnvironment, GrepOptions, LocalExecutionEnvironment, OutputStream};
use crate::sync::lock;

/// The server's name and version, as `hello` reports it.
pub const SERVER_NAME: &str = concat!("agentloop-exec-server ", env!("CARGO_PKG_VERSION"));

/// Shared state of one connection.
struct Server<'w, W: Write + Send> {
    out: Mutex<&'w mut W>,
    broken: AtomicBool,
    env: OnceLock<LocalExecutionEnvironment>,
    template: LocalExecutionEnvironment,
    running: Mutex<HashMap<u64, CancelToken>>,
    in_flight: AtomicUsize,
    background: Processes,
}

/// Serves `template` on this process's stdin and stdout: the exec-server's `main`.
///
/// Until end of input; SIGTERM, SIGHUP and SIGINT end the server cleanly: every running
/// command's group is ended as on a timeout (SIGTERM, the grace, SIGKILL), the calls are
/// answered, and the process exits with status 128 + the signal. (SIGKILL cannot be
/// handled: a server killed with it leaves its running commands to finish on their own.)
pub(crate) fn serve_stdio(template: LocalExecutionEnvironment) -> io::Result<()> {
    let input = io::BufReader::with_capacity(64 * 1024, io::stdin());
    run(template, input, io::stdout(), true)
}

fn run<R: BufRead, W: Write + Send>(
    template: LocalExecutionEnvironment,
    mut input: R,
    mut output: W,
    handle_signals: bool,
) -> io::Result<()> {
    if handle_signals {
        signals::install()?;
    }
    let finished = AtomicBool::new(false);
    let server = Server {
        out: Mutex::new(&mut output),
        broken: AtomicBool::new(false),
        env: OnceLock::new(),
        template,
        running: Mutex::new(HashMap::new()),
        in_flight: AtomicUsize::new(0),
        background: Processes::new(),
    };
    let server = &server;
    thread::scope(|scope| {
        if handle_signals {
            let finished = &finished;
            thread::Builder::new()
                .name("agentloop-serve-signals".to_string())
                .stack_size(64 * 1024)
                .spawn_scoped(scope, move || {
                    if let Some(signal) = signals::wait(finished) {
                        server.stop_all();
                        std::process::exit(128 + signal);
                    }
                })?;
        }
        thread::Builder::new()
            .name("agentloop-serve-exits".to_string())
            .stack_size(64 * 1024)
            .spawn_scoped(scope, || {
                server
                    .background
                    .forward_exits(|message| server.send(message))
            })?;
        let mut buf = Vec::new();
        loop {
            let line = match read_line(&mut input, &mut buf, MAX_LINE) {
                Ok(Line::Complete) => buf.as_slice(),
                Ok(Line::TooLong) => {
                    let message = format!("protocol line longer than {MAX_LINE} bytes");
                    server.send(&error_response(&Value::Null, PARSE_ERROR, &message, None));
                    // The client's line is dropped; the next one is served.
                    match skip_line(&mut input) {
                        Ok(true) => continue,
                        Ok(false) | Err(_) => break,
                    }
                }
                Ok(Line::Eof) | Err(_) => break,
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let message: Value = match serde_json::from_slice(line) {
                Ok(value) => value,
                Err(e) => {
                    let message = format!("not JSON: {e}");
                    server.send(&error_response(&Value::Null, PARSE_ERROR, &message, None));
                    continue;
                }
            };
            server.dispatch(scope, message);
        }
        // End of input: the client is gone; stop everything still running.
        server.cancel_all();
        server.background.end_all();
        finished.store(true, Ordering::SeqCst);
        Ok(())
    })
}

/// `env` under the sandbox a client's `hello` asked for: an error when the server's own
/// sandbox (a host's `serve_stdio` template) would be loosened, or when the kernel here
/// cannot enforce a `required` one.
fn sandboxed(
    env: LocalExecutionEnvironment,
    asked: &Value,
) -> Result<LocalExecutionEnvironment, Failure> {
    let sandbox = sandbox_from_json(asked).map_err(invalid)?;
    if let Some(own) = env.sandbox() {
        if !sandbox.narrows(own) {
            let text = format!(
                "the sandbox asked for ({sandbox}) is looser than this server's own ({own})"
            );
            return Err(io_failure(io::Error::new(
                io::ErrorKind::PermissionDenied,
                text,
            )));
        }
    }
    env.with_sandbox(sandbox)
        .map_err(|e| io_failure(io::Error::from(e)))
}

impl<'w, W: Write + Send> Server<'w, W> {
    fn send(&self, message: &Value) {
        if self.broken.load(Ordering::SeqCst) {
            return;
        }
        let mut line = serde_json::to_vec(message).unwrap_or_default();
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if out.write_all(&line).and_then(|()| out.flush()).is_err() {
            self.broken.store(true, Ordering::SeqCst);
        }
    }

    fn dispatch<'s>(&'s self, scope: &'s thread::Scope<'s, '_>, message: Value) {
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id").cloned();
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let (Some(method), Some(id)) = (method, id) else {
            if method == Some("process/cancel") {
                self.cancel(&params);
            } else if message.get("id").is_some() || method.is_none() {
                let id = message.get("id").cloned().unwrap_or(Value::Null);
                let text = "not a JSON-RPC request (needs `method` and `id`)";
                self.send(&error_response(&id, INVALID_REQUEST, text, None));
            }
            return;
        };
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_IN_FLIGHT {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let text = format!("more than {MAX_IN_FLIGHT} calls in flight");
            self.send(&error_response(&id, BUSY, &text, None));
            return;
        }
        if method == "process/start" || serve_background::waits(method) {
            if let Some(call) = id.as_u64() {
                // Registered before the call's thread starts, so a cancel that follows
                // the request at once is never lost.
                let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
                running.insert(call, CancelToken::new());
            }
        }
        let method = method.to_string();
        let spawned = thread::Builder::new()
            .name("agentloop-serve-call".to_string())
            .spawn_scoped(scope, move || {
                let reply = match self.call(&method, &id, &params) {
                    Ok(result) => response(&id, result),
                    Err((code, text, data)) => error_response(&id, code, &text, data),
                };
                self.send(&reply);
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let id = message.get("id").cloned().unwrap_or(Value::Null);
            self.send(&error_response(&id, IO_ERROR, &e.to_string(), None));
        }
    }

    fn cancel_all(&self) {
        for token in self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            token.cancel();
        }
    }

    /// Cancels every command and waits (bounded) until every call has answered.
    fn stop_all(&self) {
        self.background.end_all();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.in_flight.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            // Again each time: a command may have been starting while we cancelled.
            self.cancel_all();
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// The cancel token of call `call` (registered when the call arrived).
    fn token(&self, call: u64) -> CancelToken {
        lock(&self.running).entry(call).or_default().clone()
    }

    fn cancel(&self, params: &Value) {
        if let Some(call) = params.get("call").and_then(Value::as_u64) {
            let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(token) = running.get(&call) {
                token.cancel();
            }
        }
    }

    fn call(&self, method: &str, id: &Value, params: &Value) -> Result<Value, Failure> {
        if method == "hello" {
            return self.hello(params);
        }
        let Some(env) = self.env.get() else {
            return Err((NOT_INITIALIZED, "call `hello` first".to_string(), None));
        };
        match params.get("sandbox") {
            None => {}
            Some(Value::String(name)) if POLICIES.contains(&name.as_str()) => {}
            Some(other) => {
                return Err(invalid(format!(
                    "sandbox policy {other} is not known to this server (it knows {})",
                    POLICIES.join(", ")
                )));
            }
        }
        let path = || {
            str_field(params, "path")
                .map(PathBuf::from)
                .map_err(invalid)
        };
        match method {
            "process/start" => self.start(env, id, params),
            background if background.starts_with("background/") => {
                let call = id
                    .as_u64()
                    .ok_or_else(|| invalid("`id` must be an integer".into()))?;
                let cancel = self.token(call);
                let result = self.background.call(env, background, call, params, &cancel);
                lock(&self.running).remove(&call);
                result
            }
            "fs/readFile" => {
                let offset = opt_u64(params, "offset")
                    .map_err(invalid)?
                    .map(|n| n as usize);
                let limit = opt_u64(params, "limit")
                    .map_err(invalid)?
                    .map(|n| n as usize);
                let content = env.read_file(&path()?, offset, limit).map_err(io_failure)?;
                Ok(file_content_to_json(&content))
            }
            "fs/readBytes" => Ok(bytes_to_json(
                &env.read_bytes(&path()?).map_err(io_failure)?,
            )),
            "fs/writeFile" => {
                let data = bytes_field(params, "data").map_err(invalid)?;
                env.write_file(&path()?, &data).map_err(io_failure)?;
                Ok(json!({}))
            }
            "fs/remove" => {
                env.remove_file(&path()?).map_err(io_failure)?;
                Ok(json!({}))
            }
            "fs/exists" => Ok(json!({"exists": env.file_exists(&path()?)})),
            "fs/stat" => Ok(stat_to_json(&env.stat(&path()?).map_err(io_failure)?)),
            "fs/list" => {
                let depth = u64_field(params, "depth").map_err(invalid)? as usize;
                let entries = env.list_directory(&path()?, depth).map_err(io_failure)?;
                Ok(entries_to_json(&entries))
            }
            "search/grep" => {
                let options = GrepOptions {
                    case_insensitive: bool_field(params, "case_insensitive"),
                    glob_filter: params.get("glob").and_then(Value::as_str).map(Into::into),
                    max_results: u64_field(params, "max_results").map_err(invalid)? as usize,
                    ..GrepOptions::default()
                };
                let pattern = str_field(params, "pattern").map_err(invalid)?;
                let found = env.grep(pattern, &path()?, &options).map_err(io_failure)?;
                Ok(grep_to_json(&found))
            }
            "search/glob" => {
                let pattern = str_field(params, "pattern").map_err(invalid)?;
                Ok(json!({"paths": env.glob(pattern, &path()?).map_err(io_failure)?}))
            }
            other => Err((METHOD_NOT_FOUND, format!("unknown method `{other}`"), None)),
        }
    }

    fn hello(&self, params: &Value) -> Result<Value, Failure> {
        let version = u64_field(params, "protocol_version").map_err(invalid)?;
        if version != PROTOCOL_VERSION {
            let text = format!(
                "protocol version {version} is not supported; {SERVER_NAME} speaks version \
                 {PROTOCOL_VERSION}"
            );
            let data = json!({"supported": PROTOCOL_VERSION});
            return Err((VERSION_MISMATCH, text, Some(data)));
        }
        let mut env = self.template.clone();
        if let Some(dir) = params.get("working_directory").and_then(Value::as_str) {
            let dir = Path::new(dir);
            if !dir.is_absolute() || !dir.is_dir() {
                let text = format!("`{}` is not an existing absolute directory", dir.display());
                return Err(io_failure(io::Error::new(io::ErrorKind::NotFound, text)));
            }
            env = env.with_working_dir(dir);
        }
        let asked = params.get("sandbox").filter(|s| !s.is_null());
        if let Some(asked) = asked {
            env = sandboxed(env, asked)?;
        }
        let env = self.env.get_or_init(|| env);
        let mut result = json!({
            "protocol_version": PROTOCOL_VERSION,
            "server": SERVER_NAME,
            "working_directory": env.working_directory().to_string_lossy(),
            "platform": env.platform(),
            "os_version": env.os_version(),
            "max_command_timeout_ms": env.max_command_timeout().as_millis() as u64,
            "max_line_bytes": MAX_LINE,
            "sandbox": POLICIES,
        });
        if asked.is_some() {
            result["sandbox_applied"] = json!({
                "description": env.sandbox().map_or_else(
                    || "full-access, network on".to_string(),
                    ToString::to_string,
                ),
                "landlock_abi": env.landlock_abi(),
                "warnings": env.sandbox_warnings(),
            });
        }
        Ok(result)
    }

    fn start(
        &self,
        env: &LocalExecutionEnvironment,
        id: &Value,
        params: &Value,
    ) -> Result<Value, Failure> {
        let call = id
            .as_u64()
            .ok_or_else(|| invalid("`id` must be an integer".into()))?;
        let timeout = Duration::from_millis(u64_field(params, "timeout_ms").map_err(invalid)?);
        let (request, local) = serve_background::command_of(env, params, timeout)?;
        let env = local.as_ref().unwrap_or(env);
        let cancel = self.token(call);
        let on_output = |stream: OutputStream, chunk: &[u8]| {
            let stream = match stream {
                OutputStream::Stdout => "stdout",
                OutputStream::Stderr => "stderr",
            };
            let params = json!({"call": call, "stream": stream, "data": encode_base64(chunk)});
            self.send(&notification("process/output", params));
        };
        let result = env.exec_command(&request, &on_output, &cancel);
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&call);
        Ok(exec_result_to_json(&result.map_err(io_failure)?))
    }
}
