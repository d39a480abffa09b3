//! Running one shell command in its own process group: spawn, its output read as it comes,
//! timeout and cancel, SIGTERM → grace → SIGKILL of the whole group, and a bounded drain of
//! background jobs. The shell is started by `launch.rs` (a `posix_spawn`-style clone that
//! applies the sandbox in the child).
//!
//! It never installs a signal handler, never changes the process's working directory or
//! environment (the child's are set between the clone and `execve`), never waits on a process it did not
//! spawn, and always reaps the process it spawned.
//!
//! How a call ends:
//!
//! 1. The shell runs as `/bin/bash -c COMMAND` (`/bin/sh` without bash) as the leader of
//!    a new process group, so it and everything it starts share a process group whose id
//!    is the shell's pid. No thread is started for it: the calling thread reads the stdout
//!    and stderr pipes whenever it waits (`pump.rs`: one `ppoll(2)` on both pipes and a
//!    wake descriptor), also during the grace period and the drain below.
//! 2. The calling thread checks the shell with `waitpid(WNOHANG)` (0.25 ms, doubling to
//!    20 ms) and reads the pipes between checks; the shell's exit (a pidfd in the same
//!    `ppoll`), a pipe's end-of-file or a cancel (a callback on the token writes the wake
//!    descriptor) cuts the pause short. We poll rather than use the wait-timeout crate,
//!    whose SIGCHLD handler would be a process-wide signal handler; this way the library
//!    installs none.
//! 3. On timeout or cancel the group gets SIGTERM; once the shell is reaped and no live
//!    member is left the call goes on, otherwise after the grace period the group gets
//!    SIGKILL.
//! 4. After the shell exits, jobs it left in the background that still hold the pipes get
//!    [`DRAIN`] to finish; then whatever is still alive in the group is terminated the same
//!    way. If the pipes are still open once no live member is left, a process that left the
//!    group (`setsid`) holds them: the call reports `escaped_processes` and stops reading
//!    instead of waiting for it.
//!
//! A "live member" is a process of the group that is not a zombie. On Linux that is read
//! from `/proc`, because an orphaned zombie stays in its group until init reaps it, which
//! some container inits do only every few seconds; elsewhere any member counts.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::cancel::CancelToken;
use crate::exec::{ExecResult, OutputCallback};
use detached::Detached;
use launch::Launch;
use pump::Pump;

// No unsafe: a long-lived child is started with std's `Command`.
#[deny(unsafe_code)]
pub(crate) mod child;
pub(crate) mod clone;
pub(crate) mod detached;
mod launch;
pub(crate) mod open_files;
mod pump;

/// How long background jobs that still hold the pipes get after the shell exits.
pub(crate) const DRAIN: Duration = Duration::from_millis(150);
/// How long the pipes get to reach end-of-file once the group is gone.
const SETTLE: Duration = Duration::from_millis(50);
/// How long to wait for a SIGKILLed group to disappear (a process in uninterruptible sleep
/// can outlive SIGKILL for a while); after that the call returns anyway.
const KILL_SETTLE: Duration = Duration::from_secs(2);
/// The stdin writer's `poll(2)` timeout: the longest it takes to notice it should stop.
const WRITER_POLL_MS: libc::c_int = 25;
/// The first pause between two checks of the shell, and the pause after a wake-up.
const MIN_POLL: Duration = Duration::from_micros(250);
/// The longest pause between two checks of the shell while it runs.
const MAX_POLL: Duration = Duration::from_millis(20);
/// Stack of the stdin writer thread (it only writes from the caller's buffer); the default
/// 2 MiB would be address space reserved per command given input.
const WRITER_STACK: usize = 64 * 1024;

/// What to run and how.
pub(crate) struct Spawn<'a> {
    /// The shell command line.
    pub command: &'a str,
    /// Where it runs.
    pub cwd: &'a Path,
    /// Its whole environment.
    pub env: &'a BTreeMap<String, String>,
    /// When to stop it.
    pub timeout: Duration,
    /// Time between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// Bytes for the command's standard input; `None` gives it `/dev/null`.
    pub stdin: Option<&'a [u8]>,
    /// The sandbox to apply in the child between the clone and exec.
    pub sandbox: Option<crate::exec::sandbox::spawn::Hook>,
    /// A background process: its pid and stdin go to the handle, signals come from it, its
    /// output is not captured (the callback keeps it), and it gets the parent-death
    /// signal. `None` for a foreground command.
    pub detached: Option<&'a Detached>,
}

/// The timeout of a background process, which has none: it runs until it exits or is
/// killed (about 30 years, far from any overflow of an `Instant`).
pub(crate) const NO_TIMEOUT: Duration = Duration::from_secs(1 << 30);

/// The shell: `/bin/bash`, or `/bin/sh` where bash is missing.
fn shell() -> &'static CStr {
    static SHELL: OnceLock<&'static CStr> = OnceLock::new();
    SHELL.get_or_init(|| {
        if Path::new("/bin/bash").exists() {
            c"/bin/bash"
        } else {
            c"/bin/sh"
        }
    })
}

/// Runs `spec` to completion, timeout or cancel. `Err` only when the shell cannot be
/// spawned; everything after that is reported in the [`ExecResult`].
pub(crate) fn run(
    spec: &Spawn<'_>,
    on_output: OutputCallback<'_>,
    cancel: &CancelToken,
) -> io::Result<ExecResult> {
    let started = Instant::now();
    if cancel.is_cancelled() {
        return Ok(ExecResult {
            cancelled: true,
            duration: started.elapsed(),
            ..ExecResult::default()
        });
    }
    let deadline = started + spec.timeout;
    let child = launch::launch(&Launch {
        program: shell(),
        args: &["-c", spec.command],
        env: spec.env,
        cwd: spec.cwd,
        stdin_piped: spec.stdin.is_some() || spec.detached.is_some(),
        sandbox: spec.sandbox,
        parent_death: spec.detached.is_some(),
    })
    .map_err(|e| {
        let shell = shell().to_string_lossy();
        let why = open_files::explain(&e);
        io::Error::new(e.kind(), format!("failed to spawn `{shell}`: {why}"))
    })?;
    let mut group = Group::new(child.pid);
    group.init_of_namespace = spec
        .sandbox
        .is_some_and(|hook| hook.clone_flags() & libc::CLONE_NEWPID != 0);
    let mut input = child.stdin;
    // The calling thread reads both pipes while it waits: no reader thread per command.
    let mut pump = Pump::new(child.stdout, child.stderr, on_output)?;
    pump.watch_exit(child.pid);
    if let Some(detached) = spec.detached {
        pump.without_capture();
        detached.attach(child.pid, input.take(), pump.waker());
    }
    let waker = pump.waker();
    let cancel_guard = cancel.on_cancel(move || waker.wake());
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        let stop = &stop;
        // Standard input, when there is some, is fed by a thread of its own, which stops at
        // the end of the input, a closed pipe, or `stop`: it never outlives the run.
        let writer = match (input, spec.stdin) {
            (Some(pipe), Some(bytes)) => thread::Builder::new()
                .name("agentloop-exec-stdin".into())
                .stack_size(WRITER_STACK)
                .spawn_scoped(scope, move || write_input(pipe, bytes, stop))
                .ok(),
            _ => None,
        };
        let ending = group.wait_main(&mut pump, deadline, cancel, spec.detached);
        if ending != Ending::Exited {
            group.terminate_while(spec.kill_grace, &mut |pause| pump.pass(pause));
        }
        pump.wait_until(Instant::now() + DRAIN);
        if group.has_live_members() {
            group.terminate_while(spec.kill_grace, &mut |pause| pump.pass(pause));
        }
        pump.wait_until(Instant::now() + SETTLE);
        let escaped_processes = pump.open() > 0 && !group.has_live_members();
        stop.store(true, Ordering::SeqCst);
        if let Some(writer) = writer {
            let _ = writer.join();
        }
        drop(cancel_guard);
        let [stdout, stderr] = pump.finish();
        let status = group.status;
        let refused = spec.sandbox.is_some_and(|hook| hook.refusal_is_denial());
        let sandbox_denied = spec.sandbox.is_some()
            && status.is_some_and(|s| !s.success())
            && [&stdout, &stderr]
                .iter()
                .any(|c| looks_denied(&c.head, refused) || looks_denied(&c.tail, refused));
        Ok(ExecResult {
            sandbox_denied,
            exit_code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            timed_out: ending == Ending::TimedOut,
            cancelled: ending == Ending::Cancelled,
            duration: started.elapsed(),
            stdout_bytes: stdout.total,
            stderr_bytes: stderr.total,
            capture_truncated: stdout.dropped() > 0 || stderr.dropped() > 0,
            escaped_processes,
            stdout: stdout.into_text(),
            stderr: stderr.into_text(),
        })
    })
}

/// How the shell's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Exited,
    TimedOut,
    Cancelled,
}

/// The spawned shell and its process group. Dropping it before the shell was reaped (an
/// early return or a panic) kills the group and reaps the shell.
pub(super) struct Group {
    /// The child's pid, which is also the group's id.
    pgid: libc::pid_t,
    reaped: bool,
    /// The shell's status; `None` if someone else reaped it.
    status: Option<ExitStatus>,
    /// The shell is the init of a PID namespace of its own: a signal it has no handler for
    /// is not delivered to it (but SIGKILL), and its end ends every process of the
    /// namespace.
    init_of_namespace: bool,
}

impl Group {
    /// The group of our child `pid`, which was started as the leader of a new group.
    pub(super) fn new(pid: libc::pid_t) -> Group {
        Group {
            pgid: pid,
            reaped: false,
            status: None,
            init_of_namespace: false,
        }
    }

    /// The child's pid, which is also the group's id.
    pub(super) fn pid(&self) -> u32 {
        self.pgid as u32
    }

    /// The child's status once reaped; `None` before, or if someone else reaped it.
    pub(super) fn status(&self) -> Option<ExitStatus> {
        self.status
    }

    /// Reaps the shell if it has exited. Returns whether it has been reaped.
    pub(super) fn try_reap(&mut self) -> bool {
        if self.reaped {
            return true;
        }
        match self.wait(libc::WNOHANG) {
            Ok(Some(status)) => self.status = Some(status),
            Ok(None) => return false,
            // ECHILD: someone else reaped it (a host calling waitpid(-1)); it is gone.
            Err(_) => {}
        }
        self.reaped = true;
        true
    }

    /// `waitpid` for the child with `options`: its status once it exited, `None` while it
    /// runs (`WNOHANG`), `Err` when it is not ours to wait for any more (reaped elsewhere).
    fn wait(&self, options: libc::c_int) -> io::Result<Option<ExitStatus>> {
        Ok(clone::wait_for(self.pgid, options)?.map(ExitStatus::from_raw))
    }

    /// Waits for the shell to exit, the deadline, or the cancel, whichever comes first.
    /// The shell is polled with a growing pause; a pipe reaching end-of-file (usually the
    /// shell exiting) or a cancel cuts the pause short. A background process's queued
    /// signals are sent here, while the shell is not yet reaped.
    fn wait_main(
        &mut self,
        pump: &mut Pump<'_>,
        deadline: Instant,
        cancel: &CancelToken,
        detached: Option<&Detached>,
    ) -> Ending {
        let mut pause = MIN_POLL;
        loop {
            if self.try_reap() {
                return Ending::Exited;
            }
            for signal in detached.map(Detached::take_signals).unwrap_or_default() {
                self.signal(signal);
            }
            if cancel.is_cancelled() {
                return Ending::Cancelled;
            }
            let now = Instant::now();
            if now >= deadline {
                return Ending::TimedOut;
            }
            if pump.wait(pause.min(deadline - now)) {
                pause = MIN_POLL;
            } else {
                pause = (pause * 2).min(MAX_POLL);
            }
        }
    }

    /// SIGTERM to the group; SIGKILL once `grace` has passed with the shell or another live
    /// member still there; then waits (bounded) for the shell to be reaped.
    pub(super) fn terminate(&mut self, grace: Duration) {
        self.terminate_while(grace, &mut thread::sleep);
    }

    /// [`terminate`](Self::terminate), calling `pause` to let time pass between two
    /// checks (a command's pump keeps reading its pipes meanwhile).
    fn terminate_while(&mut self, grace: Duration, pause: &mut dyn FnMut(Duration)) {
        self.signal(libc::SIGTERM);
        if self.wait_for_group_end(Instant::now() + grace, pause) {
            return;
        }
        self.signal(libc::SIGKILL);
        if !self.wait_for_group_end(Instant::now() + KILL_SETTLE, pause) && !self.reaped {
            // SIGKILL was sent; the shell dies as soon as the kernel lets it.
            self.status = self.wait(0).ok().flatten();
            self.reaped = true;
        }
    }

    /// Polls until the shell is reaped and the group has no live member, or `deadline`.
    fn wait_for_group_end(&mut self, deadline: Instant, sleep: &mut dyn FnMut(Duration)) -> bool {
        let mut pause = Duration::from_millis(1);
        loop {
            if self.try_reap() && !self.has_live_members() {
                return true;
            }
            self.kill_deaf_init();
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            sleep(pause.min(deadline - now));
            pause = (pause * 2).min(MAX_POLL);
        }
    }

    /// The init of a PID namespace does not receive the SIGTERM it has no handler for,
    /// where any other process would die of it. Once it is the last live process of its
    /// group (the others had their SIGTERM), and it neither catches nor ignores SIGTERM,
    /// it gets the SIGKILL that ends it as SIGTERM would have, instead of lasting out the
    /// grace period.
    fn kill_deaf_init(&self) {
        if !self.init_of_namespace || self.reaped {
            return;
        }
        let others = live_members_from_proc(self.pgid, Some(self.pgid)).unwrap_or(true);
        if !others && !handles_sigterm(self.pgid) {
            // SAFETY: kill only sends a signal; `pgid` is our unreaped child's pid, which
            // cannot have been reused.
            unsafe {
                libc::kill(self.pgid, libc::SIGKILL);
            }
        }
    }

    /// Sends `signal` to every process of the group.
    fn signal(&self, signal: libc::c_int) {
        // SAFETY: killpg only sends a signal; it touches no memory of ours. The group id is
        // our child's pid: while the child is unreaped the id cannot be reused, and after
        // that we only signal after seeing live members in the group, which also keeps
        // the id from being reused.
        unsafe {
            libc::killpg(self.pgid, signal);
        }
    }

    /// Whether a process of the group is alive (not a zombie).
    pub(super) fn has_live_members(&self) -> bool {
        // SAFETY: signal 0 only checks that the group exists and may be signalled.
        let exists = unsafe { libc::killpg(self.pgid, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        exists && live_members_from_proc(self.pgid, None).unwrap_or(true)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.reaped {
            self.signal(libc::SIGKILL);
            let _ = self.wait(0);
        }
    }
}

/// Whether `/proc` lists a process of group `pgid` that is not a zombie (other than
/// `except`); `None` where `/proc` cannot tell (not Linux, or not mounted).
fn live_members_from_proc(pgid: libc::pid_t, except: Option<libc::pid_t>) -> Option<bool> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let entries = std::fs::read_dir("/proc").ok()?;
    let mut stat = Vec::with_capacity(512);
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        if except.is_some_and(|pid| name.to_str() == Some(pid.to_string().as_str())) {
            continue;
        }
        stat.clear();
        let read = std::fs::File::open(entry.path().join("stat"))
            .and_then(|mut file| file.read_to_end(&mut stat));
        if read.is_err() {
            continue; // the process ended while we looked
        }
        if let Some((state, group)) = parse_stat(&stat)
            && group == pgid
            && state != b'Z'
            && state != b'X'
        {
            return Some(true);
        }
    }
    Some(false)
}

/// Whether process `pid` catches or ignores SIGTERM (`SigCgt`/`SigIgn` of
/// `/proc/PID/status`); `true` when that cannot be read, so that nothing is killed early.
fn handles_sigterm(pid: libc::pid_t) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let bit = 1u64 << (libc::SIGTERM - 1);
    let mask = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    };
    match (mask("SigCgt:"), mask("SigIgn:")) {
        (Some(caught), Some(ignored)) => (caught | ignored) & bit != 0,
        _ => true,
    }
}

/// State and process group from a `/proc/PID/stat` line: `pid (comm) state ppid pgrp …`.
/// The command name may contain spaces and parentheses, so fields are counted from the
/// last `)`.
fn parse_stat(stat: &[u8]) -> Option<(u8, libc::pid_t)> {
    let close = crate::bytes::rfind(b')', stat)?;
    let rest = std::str::from_utf8(stat.get(close + 2..)?).ok()?;
    let mut fields = rest.split(' ');
    let state = *fields.next()?.as_bytes().first()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Writes `bytes` to the command's standard input, then closes it. Non-blocking with
/// `poll(2)`, so that a command that never reads cannot hold the writer past `stop`.
fn write_input(pipe: std::os::fd::OwnedFd, mut bytes: &[u8], stop: &AtomicBool) {
    let mut pipe = std::fs::File::from(pipe);
    let fd = pipe.as_raw_fd();
    // SAFETY: `fd` is the open write end of the stdin pipe, owned by `pipe` for the whole
    // call; F_GETFL/F_SETFL only change its status flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return;
        }
    }
    while !bytes.is_empty() && !stop.load(Ordering::SeqCst) {
        match pipe.write(bytes) {
            Ok(0) => return,
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: `pfd` is one valid, writable pollfd that lives across the call,
                // and `fd` stays open (owned by `pipe`) for the whole call.
                unsafe { libc::poll(&mut pfd, 1, WRITER_POLL_MS) };
            }
            // The command closed its end (EPIPE) or the pipe failed: stop feeding it.
            Err(_) => return,
        }
    }
}

/// Waits up to `timeout_ms` for `fd` to have data or reach end-of-file.
pub(crate) fn readable(fd: libc::c_int, timeout_ms: libc::c_int) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid, writable pollfd that lives across the call, and `fd` is
    // an open pipe owned by the calling reader for the whole call.
    let ready = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    ready > 0
}

/// Makes the child of `command` fail its allocations past `bytes` of data memory
/// (`RLIMIT_DATA`: heap and private mappings), so that a helper such as `rg` given a
/// hostile input (a 300 MB line) ends with an error instead of taking the machine's memory.
pub(super) fn limit_child_data(command: &mut Command, bytes: u64) {
    let limit = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: bytes as libc::rlim_t,
    };
    // SAFETY: the closure runs in the forked child before exec and only calls
    // setrlimit(2), which is async-signal-safe, with a value it owns; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
}

/// Clears `O_NONBLOCK` on `fd` (an open file `files::open_regular` opened non-blocking so
/// that opening a FIFO or device never waits), keeping its other status flags.
pub(super) fn clear_nonblocking(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: F_GETFL and F_SETFL only read and set the status flags of `fd`, an open
    // descriptor the caller owns for the whole call; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether command output carries the message of a refused operation (`EACCES`, `EPERM`,
/// `EROFS`; `ECONNREFUSED` too when `refused` says the sandbox hid host sockets with the
/// network off), the signs of a sandbox denial.
fn looks_denied(bytes: &[u8], refused: bool) -> bool {
    let found = |needle: &[u8]| crate::bytes::find_slice(bytes, needle).is_some();
    [
        &b"Permission denied"[..],
        b"Operation not permitted",
        b"Read-only file system",
        b"Device or resource busy",
        b"PermissionError",
    ]
    .iter()
    .any(|needle| found(needle))
        || (refused && (found(b"Connection refused") || found(b"ConnectionRefusedError")))
}

/// The kernel's name and release (`"Linux 6.8.0-45-generic"`), from `uname(2)`.
pub(crate) fn os_version() -> String {
    // SAFETY: `utsname` is plain data (arrays of c_char), so all-zero is a valid value.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid, writable `utsname` that outlives the call.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return String::from("unknown");
    }
    let field = |chars: &[libc::c_char]| {
        // SAFETY: on success uname fills each field with a NUL-terminated string that fits
        // in its array, and the array lives as long as `uts`.
        unsafe { CStr::from_ptr(chars.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    format!("{} {}", field(&uts.sysname), field(&uts.release))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_lines_parse_even_with_odd_command_names() {
        assert_eq!(parse_stat(b"42 (sleep) S 1 40 40 0"), Some((b'S', 40)));
        assert_eq!(parse_stat(b"42 (a) b (c) Z 7 9 9 0"), Some((b'Z', 9)));
        assert_eq!(parse_stat(b"garbage"), None);
    }
}
