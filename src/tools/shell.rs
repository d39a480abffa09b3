//! The `shell` tool: runs a command line through the execution environment, with a timeout,
//! live output and cancellation. It never spawns a process itself.
//!
//! Output layout (fixed, so hosts and tests can rely on it):
//!
//! ```text
//! <stdout>
//! …standard output…
//! </stdout>
//! <stderr>
//! …standard error…
//! </stderr>
//! exit code: 0
//! duration: 12 ms
//! ```
//!
//! A section appears only when its stream wrote something; with neither, the output starts
//! with `(no output)`. A process killed by a signal shows `killed by signal N` instead of an
//! exit code. Notes follow for output dropped from the capture and for processes that left
//! the process group. A timeout appends the spec's message (§5.4) byte for byte; an
//! interruption appends a note that the command was interrupted.
//!
//! A non-zero exit code is not a tool error (`is_error` stays false): many commands answer
//! with their exit code (`grep` finding nothing, `test`, `diff`), the code is in the text, and
//! the model reads it. A timeout, an interruption, or a failure to start is an error result.

use crate::llm::tool_schema::tool_schema;
use std::time::Duration;

use super::{RegisteredTool, ToolContext, ToolDefinition, ToolInput, ToolOutput, args};
use crate::exec::{CommandRequest, ExecResult};

/// The tool's name.
pub const NAME: &str = "shell";

/// What the model reads about the tool.
pub const DESCRIPTION: &str = "\
Run a shell command (bash) in the working directory and return its standard output, standard \
error, exit code and duration. Each call starts a fresh shell: `cd` and variables do not carry \
over to the next call. The command gets no input (stdin is empty), so avoid interactive \
programs. Commands stop after a timeout (`timeout_ms`, with a default set by the session); \
set a longer one for slow builds or test runs. Prefer the dedicated tools for reading, \
writing, editing and searching files.";

/// The tool's definition.
pub fn definition() -> ToolDefinition {
    ToolDefinition {
        name: NAME.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "description": "The command line to run."
                },
                "timeout_ms": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "How long the command may run, in milliseconds."
                },
                "description": {
                    "type": "string",
                    "description": "A short description of what the command does, for the user."
                }
            },
            "required": ["command"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

/// The `shell` tool.
pub fn tool() -> RegisteredTool {
    RegisteredTool::new(definition(), execute).returning_on_cancel()
}

fn execute(input: ToolInput, ctx: &ToolContext<'_>) -> Result<ToolOutput, String> {
    let args = args::json(&input)?;
    let command = args::required_str(args, "command")?;
    if command.trim().is_empty() {
        return Err("the command is empty; give a command line to run".into());
    }
    let timeout = args::optional_u64(args, "timeout_ms")
        .map_or(ctx.default_timeout, Duration::from_millis)
        .min(ctx.max_timeout)
        .min(ctx.env.max_command_timeout());
    let request = CommandRequest::new(command, timeout);
    let result = ctx
        .env
        .exec_command(&request, ctx.on_output, ctx.cancel)
        .map_err(|e| format!("the command could not be started: {e}"))?;
    let text = format_result(&result, timeout);
    if result.timed_out || result.cancelled {
        Err(text)
    } else {
        Ok(ToolOutput::text(text))
    }
}

/// The text for a finished command, in the layout of the module docs.
pub fn format_result(result: &ExecResult, timeout: Duration) -> String {
    let mut out = String::with_capacity(result.stdout.len() + result.stderr.len() + 200);
    for (tag, text) in [("stdout", &result.stdout), ("stderr", &result.stderr)] {
        if text.is_empty() {
            continue;
        }
        out.push('<');
        out.push_str(tag);
        out.push_str(">\n");
        out.push_str(text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("</");
        out.push_str(tag);
        out.push_str(">\n");
    }
    if out.is_empty() {
        out.push_str("(no output)\n");
    }
    match (result.exit_code, result.signal) {
        (Some(code), _) => out.push_str(&format!("exit code: {code}\n")),
        (None, Some(signal)) => out.push_str(&format!("killed by signal {signal}\n")),
        (None, None) => out.push_str("exit code: unknown\n"),
    }
    out.push_str(&format!("duration: {} ms", result.duration.as_millis()));
    if result.capture_truncated {
        out.push_str(&format!(
            "\n[note: the command wrote {} bytes to stdout and {} bytes to stderr; only the \
             beginning and the end of each were kept. Redirect output to a file and search it \
             if you need the middle.]",
            result.stdout_bytes, result.stderr_bytes
        ));
    }
    if result.escaped_processes {
        out.push_str(
            "\n[note: a process left the command's process group (for example with setsid) and \
             may still be running; it was not waited for or stopped.]",
        );
    }
    if result.sandbox_denied {
        out.push_str(
            "\n[sandbox: denied — the command ran in a sandbox and something it tried was \
             refused (writing outside the writable roots or to a protected path such as .git, \
             the network, a host's UNIX socket such as Docker's or ssh-agent's, ptrace); do it \
             inside the working directory, or ask the user.]",
        );
    }
    if result.timed_out {
        out.push_str(&format!(
            "\n[ERROR: Command timed out after {}ms. Partial output is shown above.\nYou can \
             retry with a longer timeout by setting the timeout_ms parameter.]",
            timeout.as_millis()
        ));
    } else if result.cancelled {
        out.push_str(
            "\n[Command interrupted: it was stopped because the session was interrupted. \
             Partial output is shown above.]",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_shows_nonempty_streams_then_status() {
        let result = ExecResult {
            stdout: "hello\n".into(),
            stderr: "warn".into(),
            exit_code: Some(2),
            duration: Duration::from_millis(15),
            ..ExecResult::default()
        };
        assert_eq!(
            format_result(&result, Duration::from_secs(1)),
            "<stdout>\nhello\n</stdout>\n<stderr>\nwarn\n</stderr>\nexit code: 2\nduration: 15 ms"
        );
        let quiet = ExecResult {
            exit_code: Some(0),
            ..ExecResult::default()
        };
        assert_eq!(
            format_result(&quiet, Duration::from_secs(1)),
            "(no output)\nexit code: 0\nduration: 0 ms"
        );
    }

    #[test]
    fn a_timeout_ends_with_the_spec_message() {
        let result = ExecResult {
            stdout: "partial\n".into(),
            signal: Some(15),
            timed_out: true,
            ..ExecResult::default()
        };
        let text = format_result(&result, Duration::from_millis(1500));
        assert!(text.ends_with(
            "\n[ERROR: Command timed out after 1500ms. Partial output is shown above.\nYou can retry with a longer timeout by setting the timeout_ms parameter.]"
        ), "{text}");
        assert!(text.contains("killed by signal 15\n"));
    }
}
