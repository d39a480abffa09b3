//! The process's limit on open descriptors (`RLIMIT_NOFILE`), raised for many sessions and
//! given back to every child.
//!
//! Each live session holds a few descriptors (its model connection, and while a command
//! runs, the command's pipes), so a host running hundreds of sessions at once needs more
//! than the soft limit most systems start a process with (1,024, under a hard limit that
//! is usually far higher). At a soft limit of 1,024 (hard 20,000) the `scale` bench lost 25
//! and 4 of 1,000 sessions in two runs, their commands failing to start with `EMFILE`.
//! So the first session (or local execution environment) raises the soft limit to the
//! hard limit, capped at [`CEILING`], once per process; the hard limit is never touched,
//! and a soft limit already that high is left alone. This is what the Go runtime does at
//! start-up for the same reason.
//!
//! A raised limit stays ours: every process the library starts (commands, `rg`, MCP
//! servers, `ssh`) gets the soft limit the host had, set again in the child before it
//! execs, so a program that sizes a table by the limit or uses `select(2)` behaves as it
//! would have without the agent.
//!
//! The host's own code is not covered: once the process holds more than 1,024 descriptors,
//! a library of the host's that still uses `select(2)` (whose sets hold descriptors below
//! 1,024 only) would fail or overrun. A host that cannot rule that out calls
//! [`keep`] (`LocalExecutionEnvironment::keep_open_file_limit`): no raise happens after it,
//! and one already made is undone.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Once, OnceLock};

/// The highest soft limit set (the kernel's default `nr_open`): far more than a thousand
/// sessions need, without handing a table-sizing library a limit of a billion.
const CEILING: libc::rlim_t = 1 << 20;

static RAISE: Once = Once::new();
/// The limit before the raise (soft, hard), when the raise changed it, and the soft limit
/// it set.
static BEFORE: OnceLock<(libc::rlimit, libc::rlim_t)> = OnceLock::new();
/// Set by [`keep`]: the host keeps its own limit.
static KEEP: AtomicBool = AtomicBool::new(false);

/// The process's limit on open descriptors now; `None` when it cannot be read.
fn current() -> Option<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into `limit`, valid for the call.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0).then_some(limit)
}

/// Raises the soft limit on open descriptors (see the module documentation); at most once
/// per process, never after [`keep`], and a failure leaves the limit as it was.
pub(crate) fn raise() {
    RAISE.call_once(|| {
        if KEEP.load(Ordering::SeqCst) {
            return;
        }
        let Some(limit) = current() else {
            return;
        };
        let target = limit.rlim_max.min(CEILING);
        if limit.rlim_cur >= target {
            return;
        }
        let raised = libc::rlimit {
            rlim_cur: target,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads `raised`, valid for the call; raising the soft limit up
        // to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            let _ = BEFORE.set((limit, target));
        }
    });
}

/// No raise from now on, and the host's own soft limit back if [`raise`] changed it and
/// nothing has changed it since (a limit the host set after the raise is its own choice
/// and stays).
pub(crate) fn keep() {
    KEEP.store(true, Ordering::SeqCst);
    // Waits for a raise under way on another thread, and makes any later call a no-op.
    RAISE.call_once(|| {});
    let (Some(&(before, raised_to)), Some(now)) = (BEFORE.get(), current()) else {
        return;
    };
    if now.rlim_cur != raised_to {
        return;
    }
    let back = libc::rlimit {
        rlim_cur: before.rlim_cur.min(now.rlim_max),
        rlim_max: now.rlim_max,
    };
    // SAFETY: setrlimit reads `back`, valid for the call; lowering the soft limit needs no
    // privilege.
    unsafe {
        libc::setrlimit(libc::RLIMIT_NOFILE, &back);
    }
}

/// The limit a child is to get back: the host's own, when [`raise`] changed it and the
/// host has not called [`keep`] since.
pub(crate) fn before() -> Option<libc::rlimit> {
    if KEEP.load(Ordering::SeqCst) {
        return None;
    }
    BEFORE.get().map(|&(limit, _)| limit)
}

/// Sets `limit` as the calling process's open-descriptor limit; for a child between its
/// clone and `execve`. One syscall: it allocates nothing and takes no lock. A failure (the
/// host lowered the hard limit since) leaves the child with the raised soft limit, which
/// is harmless.
pub(crate) fn restore_in_child(limit: &libc::rlimit) {
    // SAFETY: setrlimit reads `limit`, valid for the call.
    unsafe {
        libc::setrlimit(libc::RLIMIT_NOFILE, limit);
    }
}

/// What an error says, and for `EMFILE` (this process is at its limit) also what the limit
/// is, so that a host running many sessions sees which limit to raise.
pub(crate) fn explain(err: &io::Error) -> String {
    if err.raw_os_error() != Some(libc::EMFILE) {
        return err.to_string();
    }
    let Some(limit) = current() else {
        return err.to_string();
    };
    format!(
        "{err}: this process may have {} open descriptors (RLIMIT_NOFILE, hard limit {}); \
         run fewer sessions at once or raise the hard limit",
        limit.rlim_cur, limit.rlim_max
    )
}

/// Makes `command`'s child start with the host's own soft limit, when [`raise`] changed it
/// (otherwise `command` is left as it is, so that the standard library may still start it
/// with `posix_spawn`).
pub(crate) fn restore_for(command: &mut Command) {
    let Some(limit) = before() else {
        return;
    };
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit(2),
    // which is async-signal-safe, with a value it owns; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            restore_in_child(&limit);
            Ok(())
        });
    }
}
