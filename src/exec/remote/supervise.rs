//! The exec-server's supervisor (`agentloop-exec-server --supervised`, what the container
//! bootstrap starts): a child subreaper that runs the server as its only child and, when
//! the server ends — even by SIGKILL, which gives it no chance to end its commands — kills
//! and reaps every process left beneath it, so nothing the server started outlives it in
//! the container. It never reads stdin or writes stdout (the server has them).

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// How long the supervisor keeps killing what is left before it gives up and exits.
const CLEANUP_LIMIT: Duration = Duration::from_secs(5);

/// Runs `server` (this program without the flag) beneath a subreaper; its exit code.
pub(super) fn supervise(server: &Path) -> io::Result<i32> {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) takes integers and touches no memory of ours.
    let set = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if set != 0 {
        return Err(io::Error::last_os_error());
    }
    let status = Command::new(server).spawn()?.wait()?;
    end_orphans();
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(libc::SIGKILL)))
}

/// Kills and reaps what was reparented to this process (the orphans of a killed server
/// and, as they die, their own children), until none is left or [`CLEANUP_LIMIT`].
fn end_orphans() {
    let me = std::process::id() as i32;
    let deadline = Instant::now() + CLEANUP_LIMIT;
    loop {
        reap();
        let orphans = children_of(me);
        if orphans.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in orphans {
            // SAFETY: kill takes integers; `pid` is our own child (its parent is us, so
            // its id cannot have been reused while it is unreaped).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reaps every child that has exited, without waiting.
fn reap() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes only the status integer we pass.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
    }
}

/// The live (not zombie) processes whose parent is `parent`, from `/proc`.
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
            let mut rest = stat
                .rsplit_once(')')
                .map_or("", |(_, r)| r)
                .split_whitespace();
            let state = rest.next().unwrap_or("");
            let ppid = rest.next().and_then(|p| p.parse::<i32>().ok());
            ppid == Some(parent) && state != "Z" && state != "X"
        })
        .collect()
}
