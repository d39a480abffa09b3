//! The exec-server's background processes (protocol version 2, `background/*` in
//! `protocol.rs`): started in the served [`LocalExecutionEnvironment`], named by the id of
//! the request that started them, their exits forwarded to the client as notifications.
//! It never outlives the server's serving function: the processes end when the input
//! does ([`Processes::end_all`]), and the exit forwarder with them.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{Value, json};

use super::codec::*;
use super::protocol::{Failure, invalid, io_failure, notification, sandbox_policy_from_json};
use crate::base64::encode as encode_base64;
use crate::cancel::CancelToken;
use crate::exec::{
    BackgroundProcess, CommandRequest, ExecutionEnvironment, LocalExecutionEnvironment,
    OutputStream, SandboxPolicy,
};
use crate::sync::lock;

/// How often the exit forwarder looks whether the server is closing.
const FORWARD_POLL: Duration = Duration::from_millis(50);
/// The most bytes one `background/read` returns (its base64 stays well within a line).
const MAX_READ: usize = 16 * 1024 * 1024;

/// The background processes of one connection.
pub(super) struct Processes {
    running: Mutex<HashMap<u64, Arc<dyn BackgroundProcess>>>,
    /// No process starts any more: the server is ending.
    closed: AtomicBool,
    exits: Sender<Value>,
    exits_rx: Receiver<Value>,
}

/// Whether `method` may wait, and so is cancellable with `process/cancel`.
pub(super) fn waits(method: &str) -> bool {
    matches!(method, "background/read" | "background/wait")
}

/// The command a `process/start` or `background/start` call asks for, and the environment
/// to run it in when the call sets its own env policy or kill grace.
pub(super) fn command_of(
    env: &LocalExecutionEnvironment,
    params: &Value,
    timeout: Duration,
) -> Result<(CommandRequest, Option<LocalExecutionEnvironment>), Failure> {
    let command = str_field(params, "command").map_err(invalid)?;
    let mut request = CommandRequest::new(command, timeout);
    request.working_dir = params
        .get("working_dir")
        .and_then(Value::as_str)
        .map(Into::into);
    request.env = env_map_from_json(params.get("env")).map_err(invalid)?;
    // The command's own policy (a session's mode), which may only narrow the connection's
    // sandbox; `full-access` by name is the connection's own.
    request.sandbox = match params.get("sandbox_policy").filter(|p| !p.is_null()) {
        Some(policy) => Some(sandbox_policy_from_json(policy).map_err(invalid)?),
        None => match params.get("sandbox").and_then(Value::as_str) {
            Some("read-only") => Some(SandboxPolicy::ReadOnly),
            Some("workspace-write") => Some(SandboxPolicy::workspace_write()),
            _ => None,
        },
    };
    let mut local = None;
    if let Some(policy) = params.get("env_policy").filter(|p| !p.is_null()) {
        let policy = policy_from_json(policy).map_err(invalid)?;
        local = Some(env.clone().with_env_policy(policy));
    }
    if let Some(ms) = opt_u64(params, "kill_grace_ms").map_err(invalid)? {
        let base = local.take().unwrap_or_else(|| env.clone());
        local = Some(base.with_kill_grace(Duration::from_millis(ms)));
    }
    Ok((request, local))
}

impl Processes {
    pub(super) fn new() -> Processes {
        let (exits, exits_rx) = crossbeam_channel::unbounded();
        Processes {
            running: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            exits,
            exits_rx,
        }
    }

    /// Runs one `background/*` call (`id`: the request's id; `cancel`: its token).
    pub(super) fn call(
        &self,
        env: &LocalExecutionEnvironment,
        method: &str,
        id: u64,
        params: &Value,
        cancel: &CancelToken,
    ) -> Result<Value, Failure> {
        if method == "background/start" {
            return self.start(env, id, params);
        }
        let process = self.find(params)?;
        let ms = |name: &str| -> Result<Duration, Failure> {
            Ok(Duration::from_millis(
                opt_u64(params, name).map_err(invalid)?.unwrap_or(0),
            ))
        };
        match method {
            "background/read" => {
                let stream = match str_field(params, "stream").map_err(invalid)? {
                    "stdout" => OutputStream::Stdout,
                    "stderr" => OutputStream::Stderr,
                    other => return Err(invalid(format!("unknown stream `{other}`"))),
                };
                let from = u64_field(params, "from").map_err(invalid)?;
                let max = u64_field(params, "max_bytes").map_err(invalid)?;
                let max = usize::try_from(max).unwrap_or(usize::MAX).min(MAX_READ);
                let slice = process
                    .read(stream, from, max, ms("wait_ms")?, cancel)
                    .map_err(io_failure)?;
                Ok(json!({
                    "data": encode_base64(&slice.bytes),
                    "dropped": slice.dropped,
                    "dropped_at": slice.dropped_at,
                    "end": slice.end,
                    "total": slice.total,
                }))
            }
            "background/write" => {
                let data = bytes_field(params, "data").map_err(invalid)?;
                process.write_stdin(&data).map_err(io_failure)?;
                Ok(json!({}))
            }
            "background/close_stdin" => {
                process.close_stdin().map_err(io_failure)?;
                Ok(json!({}))
            }
            "background/wait" => {
                let exit = process
                    .wait(ms("timeout_ms")?, cancel)
                    .map_err(io_failure)?;
                Ok(json!({"exit": exit.as_ref().map(exec_result_to_json)}))
            }
            "background/signal" => {
                let signal = u64_field(params, "signal").map_err(invalid)?;
                let signal = i32::try_from(signal).map_err(|_| invalid("no such signal".into()))?;
                process.signal(signal).map_err(io_failure)?;
                Ok(json!({}))
            }
            "background/kill" => {
                let exit = process.kill().map_err(io_failure)?;
                if bool_field(params, "release") {
                    if let Some(key) = params.get("id").and_then(Value::as_u64) {
                        lock(&self.running).remove(&key);
                    }
                }
                Ok(json!({"exit": exec_result_to_json(&exit)}))
            }
            other => Err((
                super::protocol::METHOD_NOT_FOUND,
                format!("unknown method `{other}`"),
                None,
            )),
        }
    }

    fn find(&self, params: &Value) -> Result<Arc<dyn BackgroundProcess>, Failure> {
        let key = u64_field(params, "id").map_err(invalid)?;
        lock(&self.running).get(&key).cloned().ok_or_else(|| {
            io_failure(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no background process {key}"),
            ))
        })
    }

    fn start(
        &self,
        env: &LocalExecutionEnvironment,
        id: u64,
        params: &Value,
    ) -> Result<Value, Failure> {
        let (mut request, local) = command_of(env, params, Duration::ZERO)?;
        if params.get("stdin").is_some_and(|v| !v.is_null()) {
            request.stdin = Some(bytes_field(params, "stdin").map_err(invalid)?);
        }
        let limit = u64_field(params, "output_limit").map_err(invalid)?;
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let env = local.as_ref().unwrap_or(env);
        let exits = self.exits.clone();
        let on_exit = Box::new(move |result: &crate::exec::ExecResult| {
            let params = json!({"id": id, "exit": exec_result_to_json(result)});
            let _ = exits.send(notification("background/exit", params));
        });
        let process: Arc<dyn BackgroundProcess> = Arc::from(
            env.start_background(&request, limit, on_exit)
                .map_err(io_failure)?,
        );
        let pid = process.pid();
        let mut running = lock(&self.running);
        if self.closed.load(Ordering::SeqCst) {
            drop(running);
            let _ = process.kill();
            return Err(io_failure(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the exec-server is ending",
            )));
        }
        running.insert(id, process);
        Ok(json!({"pid": pid}))
    }

    /// Sends each exit notification with `send` until the server is closing (then the
    /// ones still queued).
    pub(super) fn forward_exits(&self, send: impl Fn(&Value)) {
        loop {
            match self.exits_rx.recv_timeout(FORWARD_POLL) {
                Ok(message) => send(&message),
                Err(RecvTimeoutError::Timeout) if !self.closed.load(Ordering::SeqCst) => {}
                Err(_) => break,
            }
        }
        for message in self.exits_rx.try_iter() {
            send(&message);
        }
    }

    /// Ends every process (their groups, as a kill does) and starts no more.
    pub(super) fn end_all(&self) {
        let processes: Vec<Arc<dyn BackgroundProcess>> = {
            let mut running = lock(&self.running);
            self.closed.store(true, Ordering::SeqCst);
            running.drain().map(|(_, process)| process).collect()
        };
        crate::exec::background::kill_all(processes);
    }
}
