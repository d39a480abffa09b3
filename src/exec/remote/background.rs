//! The client's [`BackgroundProcess`]: a background process on the exec-server's side,
//! each method one `background/*` call of the protocol (`protocol.rs`), waits cancelled
//! with `process/cancel`, the exit heard from the server's `background/exit`
//! notification. It never touches the local machine; dropping it kills the remote process
//! and makes the server forget it.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use serde_json::{Value, json};

use super::codec::*;
use super::connection::Connection;
use super::{COMMAND_SLACK, RemoteError, RemoteExecutionEnvironment, answer, decoded};
use crate::base64::{decode as decode_base64, encode as encode_base64};
use crate::cancel::CancelToken;
use crate::exec::OutputStream;
use crate::exec::{BackgroundProcess, CommandRequest, ExecResult, ExitCallback, OutputSlice};

/// How often a waiting call looks at its cancel token.
const CANCEL_POLL: Duration = Duration::from_millis(10);
/// The most bytes one read asks for (its answer's base64 stays well within a line).
const MAX_READ: usize = 16 * 1024 * 1024;

/// A background process on the server.
pub(super) struct RemoteBackground {
    connection: Arc<Connection>,
    /// The id of the call that started it: its name on the server.
    id: u64,
    pid: u32,
    call_timeout: Duration,
    /// How long a kill may take on the server: its grace, its settling, slack.
    kill_limit: Duration,
}

impl RemoteExecutionEnvironment {
    /// `start_background` of the trait (see `environment.rs`).
    pub(super) fn start_remote_background(
        &self,
        request: &CommandRequest,
        output_limit: usize,
        on_exit: ExitCallback,
    ) -> io::Result<Box<dyn BackgroundProcess>> {
        let mut params = json!({
            "command": request.command,
            "working_dir": request.working_dir.as_deref().map(super::path_param).transpose()?,
            "env": request.env,
            "output_limit": output_limit,
            "stdin": request.stdin.as_deref().map(encode_base64),
        });
        super::sandbox::per_call_policy(&mut params, request);
        if let Some(policy) = &self.env_policy {
            params["env_policy"] = policy_to_json(policy);
        }
        if let Some(grace) = self.kill_grace {
            params["kill_grace_ms"] = json!(grace.as_millis() as u64);
        }
        self.place(&mut params);
        let connection = self.connection()?;
        let call = connection.start_background(params, on_exit)?;
        let answered = call.rx.recv_timeout(self.call_timeout);
        connection.forget(call.id);
        let result = match answered {
            Ok(incoming) => answer("background/start", incoming, &connection),
            Err(_) => Err(RemoteError::NoAnswer {
                method: "background/start".to_string(),
                waited: self.call_timeout,
            }
            .into()),
        };
        let result = result.inspect_err(|_| connection.forget_exit(call.id))?;
        let pid = decoded("background/start", u64_field(&result, "pid"))?;
        let grace = self.kill_grace.unwrap_or(Duration::from_secs(2));
        Ok(Box::new(RemoteBackground {
            connection,
            id: call.id,
            pid: u32::try_from(pid).unwrap_or(u32::MAX),
            call_timeout: self.call_timeout,
            kill_limit: grace + COMMAND_SLACK,
        }))
    }
}

impl RemoteBackground {
    /// One call about this process, answered within `limit` (plus the call timeout);
    /// `cancel` ends a waiting call on the server (`process/cancel`).
    fn call(
        &self,
        method: &str,
        mut params: Value,
        limit: Duration,
        cancel: Option<&CancelToken>,
    ) -> io::Result<Value> {
        params["id"] = json!(self.id);
        params["sandbox"] = json!(super::FULL_ACCESS);
        let call = self.connection.start(method, params)?;
        let waited = limit + self.call_timeout;
        let deadline = Instant::now() + waited;
        let mut cancel_sent = false;
        let outcome = loop {
            if !cancel_sent && cancel.is_some_and(CancelToken::is_cancelled) {
                cancel_sent = true;
                let _ = self
                    .connection
                    .notify("process/cancel", json!({"call": call.id}));
            }
            match call.rx.recv_timeout(CANCEL_POLL) {
                Ok(incoming) => break answer(method, incoming, &self.connection),
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(_) => {
                    break Err(RemoteError::NoAnswer {
                        method: method.to_string(),
                        waited,
                    }
                    .into());
                }
            }
        };
        self.connection.forget(call.id);
        outcome
    }
}

fn exit_of(method: &str, result: &Value) -> io::Result<Option<ExecResult>> {
    match result.get("exit") {
        None | Some(Value::Null) => Ok(None),
        Some(exit) => decoded(method, exec_result_from_json(exit)).map(Some),
    }
}

impl BackgroundProcess for RemoteBackground {
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
        let stream = match stream {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        };
        let params = json!({
            "stream": stream,
            "from": from,
            "max_bytes": max_bytes.min(MAX_READ),
            "wait_ms": wait.as_millis() as u64,
        });
        let result = self.call("background/read", params, wait, Some(cancel))?;
        let slice = (|| -> Result<OutputSlice, Invalid> {
            let data = str_field(&result, "data")?;
            Ok(OutputSlice {
                bytes: decode_base64(data).ok_or("`data` is not base64")?,
                dropped: u64_field(&result, "dropped")?,
                dropped_at: u64_field(&result, "dropped_at")? as usize,
                end: u64_field(&result, "end")?,
                total: u64_field(&result, "total")?,
            })
        })();
        let slice = decoded("background/read", slice)?;
        if slice.dropped_at > slice.bytes.len() {
            return Err(RemoteError::Malformed {
                detail: "background/read result: `dropped_at` lies past the data".to_string(),
            }
            .into());
        }
        Ok(slice)
    }

    fn write_stdin(&self, bytes: &[u8]) -> io::Result<()> {
        let params = json!({"data": encode_base64(bytes)});
        self.call("background/write", params, Duration::ZERO, None)
            .map(drop)
    }

    fn close_stdin(&self) -> io::Result<()> {
        self.call("background/close_stdin", json!({}), Duration::ZERO, None)
            .map(drop)
    }

    fn wait(&self, timeout: Duration, cancel: &CancelToken) -> io::Result<Option<ExecResult>> {
        let params = json!({"timeout_ms": timeout.as_millis() as u64});
        let result = self.call("background/wait", params, timeout, Some(cancel))?;
        exit_of("background/wait", &result)
    }

    fn signal(&self, signal: i32) -> io::Result<()> {
        self.call(
            "background/signal",
            json!({"signal": signal}),
            Duration::ZERO,
            None,
        )
        .map(drop)
    }

    fn kill(&self) -> io::Result<ExecResult> {
        let result = self.call(
            "background/kill",
            json!({"release": false}),
            self.kill_limit,
            None,
        )?;
        exit_of("background/kill", &result)?.ok_or_else(|| {
            RemoteError::Malformed {
                detail: "background/kill result: no `exit`".to_string(),
            }
            .into()
        })
    }
}

impl Drop for RemoteBackground {
    /// Asks the server to kill the process and forget it, without waiting for the answer:
    /// a drop may happen anywhere, also on the poll loop's thread, every connection's
    /// reader (which a wait would block). On a lost connection there is nothing left to do: the server ended
    /// its processes when its input ended.
    fn drop(&mut self) {
        if self.connection.is_closed() {
            return;
        }
        let params = json!({"id": self.id, "release": true, "sandbox": super::FULL_ACCESS});
        if let Ok(call) = self.connection.start("background/kill", params) {
            self.connection.forget(call.id);
        }
    }
}
