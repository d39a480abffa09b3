//! What the model reads about background processes: output sections (with the buffer's
//! dropped middle marked), status lines, the list, the exit note of its next turn. Pure
//! formatting of values; it never reads a process.

use std::fmt::Write as _;
use std::time::Duration;

use super::jobs::Job;
use crate::exec::{ExecResult, OutputSlice};

/// `<stdout>…</stdout>` and `<stderr>…</stderr>` for what was read (a section only for a
/// stream that had something), or `(no new output)`.
pub(crate) fn sections(out: &OutputSlice, err: &OutputSlice) -> String {
    let mut text = String::new();
    for (tag, slice) in [("stdout", out), ("stderr", err)] {
        if slice.bytes.is_empty() && slice.dropped == 0 {
            continue;
        }
        let _ = writeln!(text, "<{tag}>");
        text.push_str(&with_marker(slice));
        if !text.ends_with('\n') {
            text.push('\n');
        }
        let _ = writeln!(text, "</{tag}>");
    }
    if text.is_empty() {
        text.push_str("(no new output)\n");
    }
    text
}

/// The slice as text, with a line where the buffer had dropped bytes.
pub(crate) fn with_marker(slice: &OutputSlice) -> String {
    let (before, after) = slice
        .bytes
        .split_at(slice.dropped_at.min(slice.bytes.len()));
    let mut text = String::from_utf8_lossy(before).into_owned();
    if slice.dropped > 0 {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        let _ = writeln!(
            text,
            "[... {} bytes of output dropped here: the process wrote more than its buffer \
             keeps (its first bytes and its newest ones) ...]",
            slice.dropped
        );
    }
    text.push_str(&String::from_utf8_lossy(after));
    text
}

/// The last `lines` lines of `slice` (its end moved past all of it).
pub(crate) fn last_lines(mut slice: OutputSlice, lines: usize) -> OutputSlice {
    let body = slice.bytes.strip_suffix(b"\n").unwrap_or(&slice.bytes);
    let start = body
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
        .nth(lines.saturating_sub(1))
        .map_or(0, |(at, _)| at + 1);
    if start > 0 {
        slice.bytes.drain(..start);
        if slice.dropped_at <= start {
            slice.dropped = 0;
            slice.dropped_at = 0;
        } else {
            slice.dropped_at -= start;
        }
    }
    slice
}

fn seconds(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs < 10.0 {
        format!("{secs:.1} s")
    } else {
        format!("{} s", duration.as_secs())
    }
}

/// How a process ended, in a few words: `exited with code 3`, `was killed by signal 9`,
/// `was stopped`.
pub(crate) fn ending(exit: &ExecResult) -> String {
    match (exit.exit_code, exit.signal) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) if exit.cancelled => format!("was stopped (signal {signal})"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "was stopped".to_string(),
    }
}

/// `process 3 (pid 4242): running for 12 s` or `…: exited with code 3 after 0.2 s`.
pub(crate) fn status(job: &Job, exit: Option<&ExecResult>) -> String {
    let name = format!("process {} (pid {})", job.id, job.pid);
    match exit {
        None => format!("{name}: running for {}", seconds(job.since.elapsed())),
        Some(exit) => format!("{name}: {} after {}", ending(exit), seconds(exit.duration)),
    }
}

/// One line per process, oldest first.
pub(crate) fn list(jobs: &[Job]) -> String {
    if jobs.is_empty() {
        return "No background processes in this session.".to_string();
    }
    let mut text = String::new();
    for job in jobs {
        let exit = job
            .process
            .wait(Duration::ZERO, &crate::cancel::CancelToken::new());
        let exit = exit.ok().flatten().or_else(|| job.exit.clone());
        let _ = writeln!(text, "{}: `{}`", status(job, exit.as_ref()), job.command);
    }
    text.pop();
    text
}

/// The note the model gets at its next turn about a process that exited unseen.
pub(crate) fn exit_note(
    job: &Job,
    exit: &ExecResult,
    out: &OutputSlice,
    err: &OutputSlice,
) -> String {
    let mut text = format!(
        "[Background process {} (pid {}, `{}`) {} after {}.",
        job.id,
        job.pid,
        job.command,
        ending(exit),
        seconds(exit.duration)
    );
    if exit.cancelled {
        text.push_str(" It was stopped by the host or the session, not by you.");
    }
    if out.bytes.is_empty() && err.bytes.is_empty() {
        text.push_str(" It wrote nothing you have not read.]");
        return text;
    }
    text.push_str(" The end of its output that you have not read:\n");
    text.push_str(&sections(out, err));
    text.push(']');
    text
}
