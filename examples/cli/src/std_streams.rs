//! Writing to stdout and stderr without panicking: the functions behind `say!` and `out!`.
//!
//! A closed pipe (`agentloop … 2>&1 | head -1`) or a full disk makes a write fail; std's
//! print macros panic then, and a panic cannot unwind out of the C `main` (SIGABRT, exit
//! 134). Here a failed stream is remembered, never written again, and turns the exit status
//! into 1 ([`failed`]). This module never decides anything else about the run.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static STDERR_FAILED: AtomicBool = AtomicBool::new(false);
static STDOUT_FAILED: AtomicBool = AtomicBool::new(false);

/// Writes `args` (and a newline with `line`) to stderr, unless stderr failed before.
pub fn stderr(args: fmt::Arguments<'_>, line: bool) {
    if STDERR_FAILED.load(Ordering::Relaxed) {
        return;
    }
    let mut err = io::stderr().lock();
    let written = if line {
        writeln!(err, "{args}")
    } else {
        write!(err, "{args}").and_then(|()| err.flush())
    };
    if written.is_err() {
        STDERR_FAILED.store(true, Ordering::Relaxed);
    }
}

/// Writes `args` and a newline to stdout; `false` (said once on stderr) when it cannot.
pub fn stdout(args: fmt::Arguments<'_>) -> bool {
    if STDOUT_FAILED.load(Ordering::Relaxed) {
        return false;
    }
    let mut out = io::stdout().lock();
    match writeln!(out, "{args}").and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(err) => {
            stdout_failed(&err);
            false
        }
    }
}

/// Records that stdout cannot be written, and says so on stderr (once).
pub fn stdout_failed(err: &io::Error) {
    if !STDOUT_FAILED.swap(true, Ordering::Relaxed) {
        stderr(
            format_args!("agentloop: cannot write to stdout ({err}); stopped"),
            true,
        );
    }
}

/// Whether stdout or stderr failed: the run then exits with status 1.
pub fn failed() -> bool {
    STDERR_FAILED.load(Ordering::Relaxed) || STDOUT_FAILED.load(Ordering::Relaxed)
}
