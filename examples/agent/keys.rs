//! Keeps API keys out of the CLI's own process environment: read once at start, then the
//! program re-executes itself without them and receives them through a pipe.
//!
//! Why: any command the agent runs can read its parent's initial environment
//! (`tr '\0' '\n' < /proc/$PPID/environ`), and `unsetenv` does not change what
//! `/proc/<pid>/environ` shows. After the re-exec the process image (same pid) was started
//! with an environment that holds no key. This module never prints a key and never passes
//! one on the command line; the pipe is read once and closed before anything else runs.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;

/// The variables holding keys the CLI reads.
pub const KEY_VARS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_COMPATIBLE_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
];

/// Names the descriptor the keys arrive on after the re-exec.
const FD_VAR: &str = "AGENTLOOP_AGENT_KEYS_FD";

/// Far above any real set of keys; more is not passed through the pipe (whose buffer must
/// hold it all before the exec).
const MAX_BYTES: usize = 32 * 1024;

/// The keys, taken out of the process environment. Call first thing in `main`, before any
/// thread starts: it may replace the process image (and so never return) once.
pub fn take_from_environment() -> HashMap<String, String> {
    if let Some(fd) = std::env::var(FD_VAR)
        .ok()
        .and_then(|v| v.parse::<RawFd>().ok())
        .filter(|fd| *fd > 2)
    {
        // SAFETY: single-threaded start of main; the variable only names the descriptor.
        unsafe { std::env::remove_var(FD_VAR) };
        return read_keys(fd);
    }
    let keys: Vec<(String, String)> = KEY_VARS
        .iter()
        .filter_map(|name| Some((name.to_string(), std::env::var(name).ok()?)))
        .collect();
    if keys.is_empty() {
        return HashMap::new();
    }
    match reexec_without(&keys) {
        // `reexec_without` only returns when the exec failed: keep going with the keys.
        Err(why) => {
            eprintln!(
                "agent: warning: could not restart without the API keys in the environment \
                 ({why}); commands the agent runs may read them from /proc"
            );
            keys.into_iter().collect()
        }
    }
}

/// Replaces this process with itself, minus the key variables, the keys in a pipe.
fn reexec_without(keys: &[(String, String)]) -> Result<std::convert::Infallible, String> {
    let mut payload = Vec::new();
    for (name, value) in keys {
        payload.extend_from_slice(name.as_bytes());
        payload.push(b'=');
        payload.extend_from_slice(value.as_bytes());
        payload.push(0);
    }
    if payload.len() > MAX_BYTES {
        return Err(format!("the keys are longer than {MAX_BYTES} bytes"));
    }
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints. The write end is close-on-exec; the read
    // end is inherited by the new image only (it is read and closed at its start).
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    let (read_end, write_end) = (fds[0], fds[1]);
    // SAFETY: clearing FD_CLOEXEC on a descriptor we just created.
    unsafe { libc::fcntl(read_end, libc::F_SETFD, 0) };
    // SAFETY: we own `write_end`; the File closes it when dropped.
    let mut writer = unsafe { std::fs::File::from_raw_fd(write_end) };
    let written = writer.write_all(&payload);
    drop(writer);
    if let Err(err) = written {
        // SAFETY: closing the read end we own.
        unsafe { libc::close(read_end) };
        return Err(err.to_string());
    }
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_default();
    let mut command = std::process::Command::new("/proc/self/exe");
    command
        .arg0(arg0)
        .args(args)
        .env(FD_VAR, read_end.to_string());
    for (name, _) in keys {
        command.env_remove(name);
    }
    let err = command.exec();
    // SAFETY: the exec failed; the read end is still ours.
    unsafe { libc::close(read_end) };
    Err(err.to_string())
}

/// Reads `NAME=value\0` records from `fd` and closes it.
fn read_keys(fd: RawFd) -> HashMap<String, String> {
    // SAFETY: the descriptor was passed to this image for exactly this read; the File owns
    // and closes it.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut bytes = Vec::new();
    let _ = file.take(MAX_BYTES as u64 + 1).read_to_end(&mut bytes);
    bytes
        .split(|&b| b == 0)
        .filter_map(|record| {
            let text = std::str::from_utf8(record).ok()?;
            let (name, value) = text.split_once('=')?;
            KEY_VARS
                .contains(&name)
                .then(|| (name.to_string(), value.to_string()))
        })
        .collect()
}
