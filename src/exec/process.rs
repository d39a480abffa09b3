//! Process-group spawning and killing: the only place in the crate that spawns processes
//! or uses `unsafe`. (Command execution lands in the next commit.)

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io;
use std::path::Path;
use std::time::Duration;

use super::{ExecResult, OutputCallback};
use crate::cancel::CancelToken;

/// What to run and how.
pub(crate) struct Spawn<'a> {
    pub command: &'a str,
    pub cwd: &'a Path,
    pub env: &'a BTreeMap<String, String>,
    pub timeout: Duration,
    pub kill_grace: Duration,
}

/// Runs a command (not implemented yet).
pub(crate) fn run(
    spec: &Spawn<'_>,
    on_output: OutputCallback<'_>,
    cancel: &CancelToken,
) -> io::Result<ExecResult> {
    let _ = (
        spec.command,
        spec.cwd,
        spec.env,
        spec.timeout,
        spec.kill_grace,
    );
    let _ = (on_output, cancel);
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "running commands is not implemented yet",
    ))
}

/// The kernel's name and release (`"Linux 6.8.0-45-generic"`), from `uname(2)`.
pub(crate) fn os_version() -> String {
    // SAFETY: `utsname` is plain data (arrays of c_char), so all-zero is a valid value.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable `utsname` that outlives the call.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return String::from("unknown");
    }
    // SAFETY: on success uname fills each field with a NUL-terminated string that fits in
    // its array, and the array lives as long as `uts`.
    let field = |chars: &[libc::c_char]| {
        unsafe { CStr::from_ptr(chars.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    format!("{} {}", field(&uts.sysname), field(&uts.release))
}
