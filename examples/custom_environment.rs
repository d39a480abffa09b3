//! A host-written execution environment: every file and command operation of the tools goes
//! through the `ExecutionEnvironment` trait, so a host can run the agent in a container,
//! over SSH, or — as here — wrap the local environment with its own policy. This one keeps
//! an audit log of writes and commands and refuses `sudo`.
//!
//! ```text
//! cargo run --example custom_environment
//! ```

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use agentloop::CancelToken;
use agentloop::exec::{
    CommandRequest, ExecResult, ExecutionEnvironment, LocalExecutionEnvironment, OutputCallback,
};
use agentloop::llm::Client;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Session, SessionConfig};
use agentloop::tools;
use serde_json::json;

/// The local environment, audited, without `sudo`.
struct Audited {
    inner: LocalExecutionEnvironment,
    log: Mutex<Vec<String>>,
}

impl Audited {
    fn note(&self, line: String) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }
}

impl ExecutionEnvironment for Audited {
    fn exec_command(
        &self,
        request: &CommandRequest,
        on_output: OutputCallback<'_>,
        cancel: &CancelToken,
    ) -> io::Result<ExecResult> {
        self.note(format!("exec: {}", request.command));
        if request
            .command
            .split_whitespace()
            .any(|word| word == "sudo")
        {
            // The message reaches the model as the tool's error result.
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "sudo is not available here; do it without elevated rights",
            ));
        }
        self.inner.exec_command(request, on_output, cancel)
    }

    fn write_file(&self, path: &Path, content: &[u8]) -> io::Result<()> {
        self.note(format!(
            "write: {} ({} bytes)",
            path.display(),
            content.len()
        ));
        self.inner.write_file(path, content)
    }

    // The rest goes to the local environment unchanged. `write_file_if_unchanged` is left
    // out on purpose: its default checks and then calls the audited `write_file` above.
    agentloop::forward_execution_environment!(self.inner =>
        read_file, read_bytes, remove_file, file_exists, stat, list_directory, grep, glob,
        initialize, warnings, cleanup, working_directory, platform, os_version,
        max_command_timeout, files_are_local);
}

fn main() -> agentloop::Result<()> {
    let dir = tempfile::tempdir()?;
    let env = Arc::new(Audited {
        inner: LocalExecutionEnvironment::new(dir.path())?,
        log: Mutex::new(Vec::new()),
    });
    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_call("shell", json!({"command": "sudo apt-get install cowsay"})),
        ScriptedTurn::tool_call(
            "write_file",
            json!({"file_path": "hi.txt", "content": "hi\n"}),
        ),
        ScriptedTurn::tool_call("shell", json!({"command": "cat hi.txt"})),
        ScriptedTurn::text("Wrote and printed hi.txt without sudo."),
    ]);
    let profile = ProviderProfile::new("scripted", "demo")
        .with_tool(tools::shell())
        .with_tool(tools::write_file());
    let client = Client::new().with_provider(model);
    let session = Session::new(profile, env.clone(), client, SessionConfig::default())?;

    let events = session.events();
    session.submit("install cowsay, then write hi.txt and print it")?;
    session.close();
    for event in events {
        if let EventKind::ToolCallEnd {
            tool_name,
            is_error,
            output,
            error,
            ..
        } = event.kind
        {
            let text = output.or(error).unwrap_or_default();
            let first = text.lines().next().unwrap_or_default().to_string();
            println!(
                "{tool_name} ({}): {first}",
                if is_error { "error" } else { "ok" }
            );
        }
    }
    println!("audit log:");
    for line in env.log.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        println!("  {line}");
    }
    Ok(())
}
