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

use super::background::run::format_result;
use super::background::{self, Shape};
use super::{RegisteredTool, ToolContext, ToolDefinition, ToolInput, ToolOutput, args};
use crate::exec::CommandRequest;

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
    RegisteredTool::new(definition(), |input, ctx| execute(input, ctx, None)).returning_on_cancel()
}

/// The `shell` tool with the background option of `shape` (see `tools/background/`).
pub(crate) fn tool_for(shape: Shape) -> RegisteredTool {
    let definition = ToolDefinition {
        parameters: match shape {
            Shape::Codex => tool_schema!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line to run."},
                    "timeout_ms": {"type": "integer", "minimum": 1, "description": "How long the command may run, in milliseconds (without yield_time_ms)."},
                    "yield_time_ms": {"type": "integer", "minimum": 0, "description": "Return after this many milliseconds even if the command still runs: it then goes on in the background as a session you continue with write_stdin."},
                    "description": {"type": "string", "description": "A short description of what the command does, for the user."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
            Shape::GeminiCli => tool_schema!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line to run."},
                    "timeout_ms": {"type": "integer", "minimum": 1, "description": "How long the command may run, in milliseconds (not in the background)."},
                    "is_background": {"type": "boolean", "description": "Start it in the background (servers, watchers) and return its PID at once."},
                    "delay_ms": {"type": "integer", "minimum": 0, "description": "With is_background: wait up to this long for its first output and include it."},
                    "description": {"type": "string", "description": "A short description of what the command does, for the user."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
            Shape::Common => tool_schema!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line to run."},
                    "timeout_ms": {"type": "integer", "minimum": 1, "description": "How long the command may run, in milliseconds (not in the background)."},
                    "run_in_background": {"type": "boolean", "description": "Start it in the background (servers, watchers, long builds) and return its id at once."},
                    "description": {"type": "string", "description": "A short description of what the command does, for the user."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        },
        description: format!(
            "{DESCRIPTION} {}",
            match shape {
                Shape::Codex => BACKGROUND_CODEX,
                Shape::GeminiCli => BACKGROUND_GEMINI,
                Shape::Common => BACKGROUND_COMMON,
            }
        ),
        ..definition()
    };
    RegisteredTool::new(definition, move |input, ctx| {
        execute(input, ctx, Some(shape))
    })
    .returning_on_cancel()
}

const BACKGROUND_COMMON: &str = "For a command that must keep running (a dev server, a \
watcher), set `run_in_background`: it starts at once and you get its id; read its output with \
read_background_output, stop it with kill_background_process. You are told when it exits; \
everything still running is stopped when the session ends. Do not use `&` or `nohup` for this.";

const BACKGROUND_GEMINI: &str = "For a command that must keep running (a dev server, a \
watcher), set `is_background`: it starts at once and you get its PID; read its output with \
read_background_output, stop it with kill_background_process. You are told when it exits; \
everything still running is stopped when the session ends. Do not use `&` or `nohup` for this.";

const BACKGROUND_CODEX: &str = "With `yield_time_ms`, the call returns after that long even \
if the command still runs (a dev server, a watcher, a long build): it keeps running as a \
session whose id you get; continue it with write_stdin (input, or empty to poll its output), \
stop it with kill_background_process. You are told when it exits; everything still running \
is stopped when the session ends.";

fn execute(
    input: ToolInput,
    ctx: &ToolContext<'_>,
    shape: Option<Shape>,
) -> Result<ToolOutput, String> {
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
    if ["run_in_background", "is_background"]
        .iter()
        .any(|flag| args::optional_bool(args, flag) == Some(true))
    {
        let delay = args::optional_u64(args, "delay_ms").map(Duration::from_millis);
        return start_in_background(ctx, &request, shape.unwrap_or(Shape::Common), delay);
    }
    if let Some(jobs) = ctx.background {
        let yielded = args::optional_u64(args, "yield_time_ms").map(Duration::from_millis);
        let moved = match (yielded, jobs.limits().move_after) {
            (Some(after), _) => {
                background::run::run_or_move(jobs, ctx, &request, after, true, shape)
            }
            (None, Some(after)) => {
                background::run::run_or_move(jobs, ctx, &request, after.min(timeout), false, shape)
            }
            (None, None) => None,
        };
        if let Some(result) = moved {
            return result;
        }
    }
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

/// Starts `request` as a background process of the session and says how the model reaches
/// it (with its first output after `delay`, when given).
fn start_in_background(
    ctx: &ToolContext<'_>,
    request: &CommandRequest,
    shape: Shape,
    delay: Option<Duration>,
) -> Result<ToolOutput, String> {
    let jobs = ctx
        .background
        .ok_or("background processes are not available here; run the command in the foreground")?;
    let job = jobs.start(ctx.env, request, false)?;
    let mut text = format!(
        "Started in the background as process {} (pid {}). It runs until it exits or you \
         stop it with {}; read its output with {}. You will be told when it exits.",
        shape.name_of(&job),
        job.pid,
        background::KILL,
        shape.read_tool(),
    );
    if let Some(delay) = delay.filter(|d| !d.is_zero()) {
        text.push('\n');
        text.push_str(&background::read(jobs, &job, delay, None, ctx));
    }
    Ok(ToolOutput::text(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::ExecResult;

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
