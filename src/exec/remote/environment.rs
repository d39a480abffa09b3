//! [`ExecutionEnvironment`] for [`RemoteExecutionEnvironment`]: each method is one call of
//! the exec-server protocol; commands stream their output and forward cancellation.
//! It never touches the local file system or spawns anything but the transport.

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use serde_json::{Value, json};

use super::codec::*;
use super::connection::Incoming;
use super::{
    COMMAND_SLACK, RemoteError, RemoteExecutionEnvironment, answer, decoded, encode_base64,
    path_param,
};
use crate::cancel::CancelToken;
use crate::exec::{
    CommandRequest, DirEntry, ExecResult, ExecutionEnvironment, FileContent, FileStat, GrepOptions,
    GrepOutput, OutputCallback,
};

/// How often a waiting command looks at its cancel token.
const CANCEL_POLL: Duration = Duration::from_millis(10);

impl ExecutionEnvironment for RemoteExecutionEnvironment {
    fn read_file(
        &self,
        path: &Path,
        offset: Option<usize>,
        limit: Option<usize>,
    ) -> io::Result<FileContent> {
        let params = json!({"path": path_param(path)?, "offset": offset, "limit": limit});
        let result = self.call("fs/readFile", params)?;
        decoded("fs/readFile", file_content_from_json(&result))
    }

    fn read_bytes(&self, path: &Path) -> io::Result<Vec<u8>> {
        let result = self.call("fs/readBytes", json!({"path": path_param(path)?}))?;
        decoded("fs/readBytes", bytes_field(&result, "data"))
    }

    fn write_file(&self, path: &Path, content: &[u8]) -> io::Result<()> {
        let params = json!({"path": path_param(path)?, "data": encode_base64(content)});
        self.call("fs/writeFile", params).map(drop)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.call("fs/remove", json!({"path": path_param(path)?}))
            .map(drop)
    }

    fn file_exists(&self, path: &Path) -> bool {
        let Ok(path) = path_param(path) else {
            return false;
        };
        self.call("fs/exists", json!({ "path": path }))
            .map(|r| r["exists"].as_bool().unwrap_or(false))
            .unwrap_or(false)
    }

    fn stat(&self, path: &Path) -> io::Result<FileStat> {
        let result = self.call("fs/stat", json!({"path": path_param(path)?}))?;
        decoded("fs/stat", stat_from_json(&result))
    }

    fn list_directory(&self, path: &Path, depth: usize) -> io::Result<Vec<DirEntry>> {
        let params = json!({"path": path_param(path)?, "depth": depth});
        let result = self.call("fs/list", params)?;
        decoded("fs/list", entries_from_json(&result))
    }

    fn exec_command(
        &self,
        request: &CommandRequest,
        on_output: OutputCallback<'_>,
        cancel: &CancelToken,
    ) -> io::Result<ExecResult> {
        if cancel.is_cancelled() {
            // Never started, as locally.
            return Ok(ExecResult {
                cancelled: true,
                ..ExecResult::default()
            });
        }
        let mut params = json!({
            "command": request.command,
            "timeout_ms": request.timeout.as_millis() as u64,
            "working_dir": request.working_dir.as_deref().map(path_param).transpose()?,
            "env": request.env,
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
        let call = connection.start("process/start", params)?;
        let grace = self.kill_grace.unwrap_or(Duration::from_secs(2));
        let limit = request.timeout.min(self.info.max_timeout) + grace + COMMAND_SLACK;
        let mut deadline = Instant::now() + limit;
        let mut cancel_sent = false;
        let outcome = loop {
            if cancel.is_cancelled() && !cancel_sent {
                cancel_sent = true;
                // The server ends the remote group and answers with the partial result.
                let _ = connection.notify("process/cancel", json!({"call": call.id}));
                deadline = deadline.min(Instant::now() + grace + COMMAND_SLACK);
            }
            match call.rx.recv_timeout(CANCEL_POLL) {
                Ok(Incoming::Output(stream, chunk)) => on_output(stream, &chunk),
                Ok(incoming) => break answer("process/start", incoming, &connection),
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(_) => {
                    break Err(RemoteError::NoAnswer {
                        method: "process/start".to_string(),
                        waited: limit,
                    }
                    .into());
                }
            }
        };
        connection.forget(call.id);
        let result: Value = outcome?;
        decoded("process/start", exec_result_from_json(&result))
    }

    fn start_background(
        &self,
        request: &CommandRequest,
        output_limit: usize,
        on_exit: crate::exec::ExitCallback,
    ) -> io::Result<Box<dyn crate::exec::BackgroundProcess>> {
        self.start_remote_background(request, output_limit, on_exit)
    }

    fn grep(&self, pattern: &str, path: &Path, options: &GrepOptions) -> io::Result<GrepOutput> {
        let params = json!({
            "pattern": pattern,
            "path": path_param(path)?,
            "case_insensitive": options.case_insensitive,
            "glob": options.glob_filter,
            "max_results": options.max_results,
        });
        let result = self.call("search/grep", params)?;
        decoded("search/grep", grep_from_json(&result))
    }

    fn glob(&self, pattern: &str, path: &Path) -> io::Result<Vec<String>> {
        let params = json!({"pattern": pattern, "path": path_param(path)?});
        let result = self.call("search/glob", params)?;
        decoded("search/glob", strings_from_json(&result, "paths"))
    }

    fn warnings(&self) -> Vec<String> {
        self.info.warnings.clone()
    }

    fn working_directory(&self) -> &Path {
        &self.info.working_dir
    }

    fn platform(&self) -> String {
        self.info.platform.clone()
    }

    fn os_version(&self) -> String {
        self.info.os_version.clone()
    }

    fn max_command_timeout(&self) -> Duration {
        self.info.max_timeout
    }
}
