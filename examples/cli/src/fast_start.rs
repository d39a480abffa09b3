//! The CLI's start-up and exit shortcuts, gathered here: each saves time on every start or
//! end of a short-lived process, and none belongs in a library host (a host that runs for
//! hours keeps std's start-up, its allocator's defaults and joins its threads). Each says
//! why in one line; the figures are in BENCHMARKS.md (`e2e`). `#![no_main]` itself must
//! sit in `main.rs`, the crate root.

use std::sync::Arc;

use agentloop::session::Session;

// Why: the dynamic build then loads no libgcc_s.so, whose constructor runs `cpuid` a dozen
// times (5.2 µs each in a VM; `--version` 1.06 → 0.98 ms). libgcc's unwinder is linked in
// as `gcc -static-libgcc` does, and with rustc's `--as-needed` libgcc_s is no longer linked;
// the static build gets the same from std.
#[cfg(all(
    target_os = "linux",
    target_env = "gnu",
    not(target_feature = "crt-static")
))]
#[link(name = "gcc_eh", kind = "static", modifiers = "+whole-archive,-bundle")]
unsafe extern "C" {}

/// The program's entry point, called by the C runtime instead of std's start-up.
///
/// Why: std's start-up parses `/proc/self/maps` to find the main thread's stack (for its
/// stack-overflow message) and maps an alternate signal stack, 0.1–0.2 ms of every start
/// (`perf stat -r 400` of an empty program, with and without `#![no_main]`: 0.94–1.07 ms
/// against 0.85–0.91 ms). [`start`] keeps what the CLI needs of it. `std::env::args` works
/// without it (glibc hands the arguments to std at load time); a stack overflow still
/// stops at the guard page, silently.
#[cfg(not(test))]
#[unsafe(no_mangle)]
extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    start();
    crate::run_main()
}

/// What the CLI keeps of std's start-up (see [`main`]), and one allocator setting.
#[cfg_attr(test, allow(dead_code))]
fn start() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // Why: closed standard descriptors reopened on /dev/null, so that no file the CLI opens
    // becomes its stdout; SIGPIPE ignored, so that a closed stdout is a write error to
    // report, not sudden death.
    // SAFETY: `fds` is a valid array of three pollfds for the call; the opened /dev/null
    // takes the lowest free number, the closed descriptor it replaces; SIG_IGN is always a
    // valid disposition for SIGPIPE.
    unsafe {
        if libc::poll(fds.as_mut_ptr(), 3, 0) >= 0 {
            for pfd in fds {
                if pfd.revents & libc::POLLNVAL != 0 {
                    libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                }
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // Why: one malloc arena, because each thread's first allocation would otherwise map and
    // trim an arena of its own (four syscalls, on the worker's way to its first request);
    // the CLI runs one session, whose threads rarely allocate at the same moment.
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt before any thread exists; M_ARENA_MAX takes any positive count.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Lets go of a session that has ended without joining its worker.
///
/// Why: all that is left of an ended session (its commands ended, `session_end` seen, its
/// transcript written) is its worker freeing memory, and the process exit right after
/// this does that faster than a join would. A library host drops its sessions instead.
pub fn leave_ended(session: Arc<Session>) {
    std::mem::forget(session);
}
