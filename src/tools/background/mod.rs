//! The tools of background processes, in the shapes the models' own agents give them:
//! Codex's (`shell` with `yield_time_ms`, `write_stdin` with `session_id`), gemini-cli's
//! (`shell` with `is_background`, `read_background_output` by `pid`) and a common set
//! (`shell` with `run_in_background`, `read_background_output`, `write_background_input`
//! by `id`), with `list_background_processes` and `kill_background_process` in every
//! shape. Descriptions are ours.
//!
//! The processes themselves are the session's ([`jobs::BackgroundJobs`], reached through
//! the [`ToolContext`]); outside a session the tools answer that there are none. Here:
//! the definitions and executors (`mod.rs`), the registry (`jobs.rs`), a foreground
//! command that may move to the background (`run.rs`) and the texts (`text.rs`). Nothing
//! here spawns a process or a thread.

use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::cancel::CancelToken;
use crate::exec::OutputStream;
use crate::llm::ToolDefinition;
use crate::llm::tool_schema::tool_schema;
use crate::tools::{RegisteredTool, ToolContext, ToolOutput, args};
use jobs::{BackgroundJobs, Job, Key};

pub(crate) mod jobs;
pub(crate) mod run;
pub(crate) mod text;

/// The tool that lists background processes (every shape).
pub(crate) const LIST: &str = "list_background_processes";
/// The tool that reads a background process's output (common and gemini-cli shapes).
pub(crate) const READ: &str = "read_background_output";
/// The tool that writes to a background process's stdin (common and gemini-cli shapes).
pub(crate) const WRITE: &str = "write_background_input";
/// Codex's tool that writes to a process's stdin and returns its new output.
pub(crate) const WRITE_STDIN: &str = "write_stdin";
/// The tool that stops a background process (every shape).
pub(crate) const KILL: &str = "kill_background_process";

/// Whose agent's tools a profile's background tools look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Codex: `shell` with `yield_time_ms`, `write_stdin` by `session_id`.
    Codex,
    /// gemini-cli: `shell` with `is_background`, processes named by `pid`.
    GeminiCli,
    /// The common set (the Anthropic profile's): `shell` with `run_in_background`.
    Common,
}

impl Shape {
    /// The parameter that names a process in this shape's tools.
    fn key_name(self) -> &'static str {
        match self {
            Shape::Codex => "session_id",
            Shape::GeminiCli => "pid",
            Shape::Common => "id",
        }
    }

    fn key(self, args: &Map<String, Value>) -> Result<Key, String> {
        let name = self.key_name();
        let value = args::optional_u64(args, name)
            .ok_or_else(|| format!("`{name}` is required: the process to act on"))?;
        Ok(match self {
            Shape::GeminiCli => Key::Pid(u32::try_from(value).unwrap_or(u32::MAX)),
            _ => Key::Id(value),
        })
    }

    /// How this shape's model names a process, for the texts it reads.
    pub(crate) fn name_of(self, job: &Job) -> String {
        match self {
            Shape::Codex => format!("session_id {}", job.id),
            Shape::GeminiCli => format!("pid {}", job.pid),
            Shape::Common => format!("id {}", job.id),
        }
    }

    /// The tool that reads more output, in this shape.
    pub(crate) fn read_tool(self) -> &'static str {
        match self {
            Shape::Codex => WRITE_STDIN,
            _ => READ,
        }
    }
}

/// The background tools of `shape` besides its `shell` (see `shell::tool_for`), in the
/// order profiles list them.
pub(crate) fn tools(shape: Shape) -> Vec<RegisteredTool> {
    let definitions = match shape {
        Shape::Codex => vec![write_stdin_codex(), list(), kill_codex()],
        Shape::GeminiCli => vec![list(), read_gemini(), write_gemini(), kill_gemini()],
        Shape::Common => vec![list(), read_common(), write_common(), kill_common()],
    };
    definitions
        .into_iter()
        .map(|definition| {
            let name = definition.name.clone();
            RegisteredTool::new(definition, move |input, ctx| {
                let args = args::json(&input)?;
                let jobs = ctx.background.ok_or(
                    "background processes are not available here; run commands in the \
                     foreground",
                )?;
                execute(shape, &name, args, jobs, ctx).map(ToolOutput::text)
            })
            .returning_on_cancel()
        })
        .collect()
}

fn execute(
    shape: Shape,
    name: &str,
    args: &Map<String, Value>,
    jobs: &BackgroundJobs,
    ctx: &ToolContext<'_>,
) -> Result<String, String> {
    if name == LIST {
        return Ok(text::list(&jobs.jobs()));
    }
    let job = jobs.find(shape.key(args)?)?;
    let ms = |key: &str| Duration::from_millis(args::optional_u64(args, key).unwrap_or(0));
    match name {
        READ => {
            let wait = ms(if shape == Shape::GeminiCli {
                "delay_ms"
            } else {
                "wait_ms"
            });
            let lines = args::optional_u64(args, "lines").map(|n| n as usize);
            Ok(read(jobs, &job, wait, lines, ctx))
        }
        WRITE | WRITE_STDIN => {
            let (input, close) = if name == WRITE_STDIN {
                (args::optional_str(args, "chars").unwrap_or(""), false)
            } else {
                (
                    args::required_str(args, "input")?,
                    args::optional_bool(args, "close_input").unwrap_or(false),
                )
            };
            if !input.is_empty() {
                job.process
                    .write_stdin(input.as_bytes())
                    .map_err(|e| e.to_string())?;
            }
            if close {
                job.process.close_stdin().map_err(|e| e.to_string())?;
            }
            let wait = ms(if name == WRITE_STDIN {
                "yield_time_ms"
            } else {
                "wait_ms"
            });
            let mut text = format!(
                "Wrote {} bytes to the input of process {}{}.\n",
                input.len(),
                shape.name_of(&job),
                if close { " and closed it" } else { "" }
            );
            text.push_str(&read(jobs, &job, wait, None, ctx));
            Ok(text)
        }
        _ => {
            jobs.kill_job(&job).map_err(|e| e.to_string())?;
            let mut text = format!("Stopped process {}.\n", shape.name_of(&job));
            text.push_str(&read(jobs, &job, Duration::ZERO, None, ctx));
            Ok(text)
        }
    }
}

/// What the model reads of `job`: after waiting up to `wait` for it to exit, its output
/// since its last read (or its last `lines` lines), and its status.
pub(crate) fn read(
    jobs: &BackgroundJobs,
    job: &Job,
    wait: Duration,
    lines: Option<usize>,
    ctx: &ToolContext<'_>,
) -> String {
    if !wait.is_zero() {
        wait_for_output(job, wait, ctx.cancel);
    }
    let exit = job.wait(Duration::ZERO, ctx.cancel);
    let from = if lines.is_some() { [0, 0] } else { job.cursor };
    let read = |stream, from| {
        job.process
            .read(stream, from, usize::MAX, Duration::ZERO, ctx.cancel)
            .unwrap_or_default()
    };
    let mut out = read(OutputStream::Stdout, from[0]);
    let mut err = read(OutputStream::Stderr, from[1]);
    if let Some(lines) = lines {
        out = text::last_lines(out, lines.max(1));
        err = text::last_lines(err, lines.max(1));
    }
    let ends = [out.end.max(job.cursor[0]), err.end.max(job.cursor[1])];
    jobs.advance(job.id, ends, exit.is_some());
    let mut text = text::sections(&out, &err);
    text.push_str(&text::status(job, exit.as_ref()));
    text
}

/// How long output must pause before a wait for it ends early.
const QUIET: Duration = Duration::from_millis(100);
/// How often a wait for output looks at the streams' totals.
const LOOK: Duration = Duration::from_millis(20);

/// Waits up to `wait` for `job` to write something the model has not read and then pause
/// for [`QUIET`] (an answer, a server's start-up lines), or to exit, or `cancel`.
fn wait_for_output(job: &Job, wait: Duration, cancel: &CancelToken) {
    let deadline = Instant::now() + wait;
    let total = || {
        [OutputStream::Stdout, OutputStream::Stderr]
            .map(|stream| {
                job.process
                    .read(stream, u64::MAX, 0, Duration::ZERO, cancel)
                    .map_or(0, |slice| slice.total)
            })
            .iter()
            .sum::<u64>()
    };
    let seen = job.cursor[0] + job.cursor[1];
    let (mut last, mut changed) = (seen, Instant::now());
    loop {
        let now = Instant::now();
        if now >= deadline || cancel.is_cancelled() {
            return;
        }
        let now_total = total();
        if now_total != last {
            (last, changed) = (now_total, now);
        } else if last > seen && now.duration_since(changed) >= QUIET {
            return;
        }
        if job.wait((deadline - now).min(LOOK), cancel).is_some() {
            return;
        }
    }
}

/// The exit notes for the model's next turn: each exited process it has not heard of,
/// with the end of the output it has not read.
pub(crate) fn exit_notes(jobs: &BackgroundJobs) -> Vec<String> {
    /// At most this much of each stream's unread output goes into a note.
    const TAIL: usize = 2_000;
    jobs.take_unseen()
        .into_iter()
        .filter_map(|job| {
            let exit = job.exit.clone()?;
            let tail = |stream, from: u64| {
                let mut slice = job
                    .process
                    .read(
                        stream,
                        from,
                        usize::MAX,
                        Duration::ZERO,
                        &CancelToken::new(),
                    )
                    .unwrap_or_default();
                let cut = slice.bytes.len().saturating_sub(TAIL);
                if cut > 0 {
                    slice.bytes.drain(..cut);
                    slice.dropped_at = slice.dropped_at.saturating_sub(cut);
                    if slice.dropped_at == 0 {
                        slice.dropped = 0;
                    }
                }
                text::last_lines(slice, 20)
            };
            let out = tail(OutputStream::Stdout, job.cursor[0]);
            let err = tail(OutputStream::Stderr, job.cursor[1]);
            Some(text::exit_note(&job, &exit, &out, &err))
        })
        .collect()
}

fn list() -> ToolDefinition {
    ToolDefinition {
        name: LIST.to_string(),
        description: "List the processes started in the background in this session: for each, \
                      its id, pid, command, and whether it still runs (for how long) or how it \
                      ended."
            .to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {},
            "additionalProperties": false
        }),
        freeform: None,
    }
}

const READ_DESCRIPTION: &str = "Read what a background process wrote since you last read \
it (standard output and standard error), and whether it still runs. Give `wait_ms` to wait \
up to that long for new output first (it returns once the output pauses, or the process \
exits): useful right after starting a server or a build. \
`lines` shows only the last lines of everything kept instead. A process that writes a lot \
keeps its first and its newest output; a marker says how much was dropped between them.";

fn read_common() -> ToolDefinition {
    ToolDefinition {
        name: READ.to_string(),
        description: READ_DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "id": {"type": "integer", "description": "The process's id (from shell or the list)."},
                "wait_ms": {"type": "integer", "minimum": 0, "description": "How long to wait for new output, in milliseconds; it returns once the output pauses or the process exits."},
                "lines": {"type": "integer", "minimum": 1, "description": "Show only the last this many lines of each stream."}
            },
            "required": ["id"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

fn read_gemini() -> ToolDefinition {
    ToolDefinition {
        name: READ.to_string(),
        description: READ_DESCRIPTION.replace("`wait_ms`", "`delay_ms`"),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "pid": {"type": "integer", "description": "The process id that run_shell_command reported (or the list shows)."},
                "lines": {"type": "integer", "minimum": 1, "description": "Show only the last this many lines of each stream."},
                "delay_ms": {"type": "integer", "minimum": 0, "description": "How long to wait for new output, in milliseconds; it returns once the output pauses or the process exits."}
            },
            "required": ["pid"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

const WRITE_DESCRIPTION: &str = "Write text to the standard input of a background process \
(a pipe, not a terminal: programs that need a terminal will not prompt), then show what it \
wrote since you last read it. Include the newline a line-reading program waits for. \
`close_input` closes its input afterwards, so that it reads end-of-file.";

fn write_common() -> ToolDefinition {
    ToolDefinition {
        name: WRITE.to_string(),
        description: WRITE_DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "id": {"type": "integer", "description": "The process's id."},
                "input": {"type": "string", "description": "The text to write, newlines included."},
                "close_input": {"type": "boolean", "description": "Close the process's input after writing."},
                "wait_ms": {"type": "integer", "minimum": 0, "description": "How long to wait for its answer, in milliseconds; it returns once the output pauses."}
            },
            "required": ["id", "input"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

fn write_gemini() -> ToolDefinition {
    ToolDefinition {
        name: WRITE.to_string(),
        description: WRITE_DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "pid": {"type": "integer", "description": "The process id."},
                "input": {"type": "string", "description": "The text to write, newlines included."},
                "close_input": {"type": "boolean", "description": "Close the process's input after writing."}
            },
            "required": ["pid", "input"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

fn write_stdin_codex() -> ToolDefinition {
    ToolDefinition {
        name: WRITE_STDIN.to_string(),
        description: "Continue a command that is still running (its session_id came from \
                      shell): write `chars` to its standard input (a pipe; may be empty to \
                      only poll), wait up to `yield_time_ms`, and return what it wrote since \
                      you last read it, with whether it still runs."
            .to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "session_id": {"type": "integer", "description": "The running command's session id."},
                "chars": {"type": "string", "description": "Text for its input, newlines included; empty to only read."},
                "yield_time_ms": {"type": "integer", "minimum": 0, "description": "How long to wait for output, in milliseconds; it returns once the output pauses or the command exits."}
            },
            "required": ["session_id"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

const KILL_DESCRIPTION: &str = "Stop a background process and everything it started (its \
whole process group: SIGTERM, then SIGKILL after a grace period), and show the output it \
wrote since you last read it. Processes still running are stopped anyway when the session \
ends.";

fn kill_common() -> ToolDefinition {
    ToolDefinition {
        name: KILL.to_string(),
        description: KILL_DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {"id": {"type": "integer", "description": "The process's id."}},
            "required": ["id"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

fn kill_gemini() -> ToolDefinition {
    ToolDefinition {
        name: KILL.to_string(),
        description: KILL_DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {"pid": {"type": "integer", "description": "The process id."}},
            "required": ["pid"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

fn kill_codex() -> ToolDefinition {
    ToolDefinition {
        name: KILL.to_string(),
        description: KILL_DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {"session_id": {"type": "integer", "description": "The running command's session id."}},
            "required": ["session_id"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}
