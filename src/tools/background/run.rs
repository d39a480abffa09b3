//! A foreground command that may move to the background: started as a background process
//! of the session, its output streamed to the call as it comes; if it ends within `after`
//! the call's result is a foreground command's, if not the call returns what it wrote so
//! far and the process runs on as a background process the model is told the id of
//! (Codex's `yield_time_ms`, and the host's `background_after` threshold). An interrupt
//! kills it, as it kills any foreground command.

use std::time::{Duration, Instant};

use super::Shape;
use super::jobs::{BackgroundJobs, Job};
use super::text;
use crate::cancel::CancelToken;
use crate::exec::{CommandRequest, ExecResult, OutputSlice, OutputStream};
use crate::tools::{ToolContext, ToolOutput};

/// The longest pause between two looks at the output while waiting (output on stderr
/// alone is noticed this late; stdout and the exit at once).
const LOOK: Duration = Duration::from_millis(25);

/// Why the wait ended.
enum Ended {
    Exited(ExecResult),
    Moved,
    Cancelled,
}

/// Runs `request` (see the module docs); `None` when it could not start as a background
/// process (the cap, an environment without them): the caller runs it as before.
/// `keep_input`: its stdin stays open for the model to write to (Codex's sessions);
/// otherwise it is closed at once, as a foreground command's is `/dev/null`.
pub(crate) fn run_or_move(
    jobs: &BackgroundJobs,
    ctx: &ToolContext<'_>,
    request: &CommandRequest,
    after: Duration,
    keep_input: bool,
    shape: Option<Shape>,
) -> Option<Result<ToolOutput, String>> {
    let job = jobs.start(ctx.env, request, true).ok()?;
    if !keep_input {
        let _ = job.process.close_stdin();
    }
    let deadline = Instant::now() + after;
    let mut cursor = [0u64; 2];
    let ended = loop {
        // The exit is recorded only once the output is all in: looked at first, the reads
        // below then see everything the command wrote.
        let exit = job.wait(Duration::ZERO, ctx.cancel);
        stream_new(ctx, &job, &mut cursor);
        if let Some(exit) = exit {
            break Ended::Exited(exit);
        }
        if ctx.cancel.is_cancelled() {
            break Ended::Cancelled;
        }
        let now = Instant::now();
        if now >= deadline {
            break Ended::Moved;
        }
        let pause = (deadline - now).min(LOOK);
        let _ = job
            .process
            .read(OutputStream::Stdout, cursor[0], 0, pause, ctx.cancel);
    };
    let exit = match ended {
        Ended::Exited(exit) => exit,
        Ended::Cancelled => {
            let mut exit = job.process.kill().unwrap_or_default();
            exit.cancelled = true;
            exit
        }
        Ended::Moved => {
            let (out, err) = (
                whole(&job, OutputStream::Stdout),
                whole(&job, OutputStream::Stderr),
            );
            stream_new(ctx, &job, &mut cursor);
            if jobs.adopt(job.id, [out.end, err.end]) {
                let mut text = text::sections(&out, &err);
                text.push_str(&moved(&job, after, shape));
                return Some(Ok(ToolOutput::text(text)));
            }
            // It exited between the last look and the move: a foreground result after all.
            job.wait(Duration::ZERO, ctx.cancel).unwrap_or_default()
        }
    };
    let result = foreground_result(&job, exit);
    jobs.forget(job.id);
    let text = format_result(&result, request.timeout);
    Some(if result.cancelled {
        Err(text)
    } else {
        Ok(ToolOutput::text(text))
    })
}

/// Sends what the command wrote past `cursor` to the call's live output.
fn stream_new(ctx: &ToolContext<'_>, job: &Job, cursor: &mut [u64; 2]) {
    for (i, stream) in [OutputStream::Stdout, OutputStream::Stderr]
        .into_iter()
        .enumerate()
    {
        if let Ok(slice) =
            job.process
                .read(stream, cursor[i], usize::MAX, Duration::ZERO, ctx.cancel)
        {
            if !slice.bytes.is_empty() {
                (ctx.on_output)(stream, &slice.bytes);
            }
            cursor[i] = slice.end;
        }
    }
}

/// All that `stream` of `job` keeps.
fn whole(job: &Job, stream: OutputStream) -> OutputSlice {
    job.process
        .read(stream, 0, usize::MAX, Duration::ZERO, &CancelToken::new())
        .unwrap_or_default()
}

/// The result of a command that ended within its call, its whole kept output included.
fn foreground_result(job: &Job, mut exit: ExecResult) -> ExecResult {
    exit.stdout = text::with_marker(&whole(job, OutputStream::Stdout));
    exit.stderr = text::with_marker(&whole(job, OutputStream::Stderr));
    exit
}

/// What the model reads after the output of a command moved to the background.
fn moved(job: &Job, after: Duration, shape: Option<Shape>) -> String {
    let (name, how) = match shape {
        Some(shape) => (
            shape.name_of(job),
            format!(
                "read what it writes next with {}, stop it with {}",
                shape.read_tool(),
                super::KILL
            ),
        ),
        None => (
            format!("id {}", job.id),
            "the background-process tools read its output and stop it".to_string(),
        ),
    };
    format!(
        "[The command is still running after {:.1} s: it now runs in the background as \
         process {name} (pid {}), and its output is kept. {how}; you will be told when it \
         exits. It is stopped when the session ends.]",
        after.as_secs_f64(),
        job.pid,
    )
}

/// The text for a finished command (foreground, or a background one that ended within its
/// wait), in the layout of the shell tool's docs.
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
