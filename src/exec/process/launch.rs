//! Starting the shell the way `posix_spawn` starts a process: `clone(CLONE_VM |
//! CLONE_VFORK)`, so that the agent's address space is shared with the child until it
//! calls `execve` instead of being copied page table by page table as `fork` does (0.4–0.7
//! ms per command on a small VM; `-- sandbox` and `-- e2e` in the bench). The standard
//! library uses `posix_spawn` only for commands without a `pre_exec` hook, and the sandbox
//! needs one; here the child applies the sandbox itself, between the clone and `execve`.
//!
//! Everything the child needs is prepared in the parent ([`Launch`]: C strings, pointer
//! arrays, descriptors ≥ 3, the sandbox's ruleset, filter and mount list). The child runs
//! on its own small stack and makes only raw syscalls: it allocates nothing, takes no lock
//! and never unwinds; the parent thread is suspended by the kernel until the child has
//! called `execve` or exited. In the child, in order:
//!
//! 1. every signal with a handler (and `SIGPIPE`, which the Rust runtime ignores) back to
//!    its default, so that no handler of the host runs on the shared memory; the parent
//!    blocked all signals around the clone, and the child unblocks them only at the end;
//! 2. its own process group (`setpgid(0, 0)`), and for a background process the parent-death
//!    signal SIGKILL (`PR_SET_PDEATHSIG`: when the thread that started it dies, with the
//!    agent killed by SIGKILL say, it dies too; as the init of a PID namespace of its own,
//!    everything it started goes with it);
//! 3. the three standard descriptors;
//! 4. the working directory, and the host's own limit on open descriptors when the
//!    library raised it (`open_files.rs`);
//! 5. the sandbox ([`spawn::apply`]), the mount namespace already made by the clone flags;
//! 6. an empty signal mask, then `execve`.
//!
//! A failed step writes its number and `errno` into memory the parent reads once the clone
//! returned, then `_exit(127)`s; the parent reaps it and returns the error.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use super::clone::{above_stdio, clone_child, cvt, wait_for};
use super::open_files;
use crate::exec::sandbox::spawn::{self, Hook};

/// What to start.
pub(crate) struct Launch<'a> {
    /// The program (an absolute path: no `PATH` search is made).
    pub program: &'a CStr,
    /// The arguments after `argv[0]` (which is `program`).
    pub args: &'a [&'a str],
    /// The child's whole environment.
    pub env: &'a BTreeMap<String, String>,
    /// Where it starts.
    pub cwd: &'a Path,
    /// A pipe for its standard input (`false`: `/dev/null`).
    pub stdin_piped: bool,
    /// The sandbox to apply in the child.
    pub sandbox: Option<Hook>,
    /// Give the child the parent-death signal SIGKILL (a background process, started by
    /// a thread that lives as long as it does).
    pub parent_death: bool,
}

/// A started child, in its own process group, and the parent's ends of its pipes.
pub(crate) struct Launched {
    pub pid: libc::pid_t,
    pub stdin: Option<OwnedFd>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// The steps of the child that can fail, as reported to the parent.
const STEPS: [&str; 6] = [
    "",
    "setpgid",
    "dup2",
    "chdir to the working directory",
    "apply the sandbox",
    "execve",
];

/// What the child reads (raw pointers into the parent's [`launch`] frame, alive while the
/// parent is suspended) and writes (`step` and `errno` of a failure).
struct Shared {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// Descriptors for the child's stdin, stdout and stderr (all ≥ 3).
    fds: [libc::c_int; 3],
    sandbox: Option<Hook>,
    parent_death: bool,
    /// The host's own open-descriptor limit, when the library raised it.
    open_files: Option<libc::rlimit>,
    step: AtomicI32,
    errno: AtomicI32,
}

fn c_string(bytes: &[u8], what: &str) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the {what} contains a NUL byte"),
        )
    })
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two ints, as pipe2 requires.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both are open descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Starts `spec`; `Err` when the child could not be started (nothing is left running).
pub(crate) fn launch(spec: &Launch<'_>) -> io::Result<Launched> {
    let mut argv_c = Vec::with_capacity(spec.args.len() + 1);
    argv_c.push(spec.program.to_owned());
    for arg in spec.args {
        argv_c.push(c_string(arg.as_bytes(), "command")?);
    }
    let mut env_c = Vec::with_capacity(spec.env.len());
    for (name, value) in spec.env {
        let mut entry = Vec::with_capacity(name.len() + value.len() + 1);
        entry.extend_from_slice(name.as_bytes());
        entry.push(b'=');
        entry.extend_from_slice(value.as_bytes());
        env_c.push(c_string(&entry, "environment")?);
    }
    let argv: Vec<*const libc::c_char> = argv_c
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = env_c
        .iter()
        .map(|e| e.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let cwd = c_string(spec.cwd.as_os_str().as_bytes(), "working directory")?;

    let (stdout, stdout_child) = pipe()?;
    let (stderr, stderr_child) = pipe()?;
    let (stdin, stdin_child) = if spec.stdin_piped {
        let (read, write) = pipe()?;
        (Some(write), read)
    } else {
        // SAFETY: a NUL-terminated path and flags; the result is checked.
        let fd =
            cvt(unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) })?;
        // SAFETY: open succeeded: a new descriptor nothing else owns.
        (None, unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let child_fds = [
        above_stdio(stdin_child)?,
        above_stdio(stdout_child)?,
        above_stdio(stderr_child)?,
    ];
    let shared = Shared {
        program: spec.program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: cwd.as_ptr(),
        fds: [0, 1, 2].map(|i| child_fds[i].as_raw_fd()),
        sandbox: spec.sandbox,
        parent_death: spec.parent_death,
        open_files: open_files::before(),
        step: AtomicI32::new(0),
        errno: AtomicI32::new(0),
    };
    let namespaces = spec.sandbox.map_or(0, |hook| hook.clone_flags());
    let arg = (&shared as *const Shared).cast_mut().cast();
    // SAFETY: `child_main` reads `shared` (alive until the clone returns) and makes only
    // raw syscalls.
    let pid = unsafe { clone_child(child_main, arg, namespaces)? };
    drop(child_fds);
    let step = shared.step.load(Ordering::SeqCst);
    if step != 0 {
        let errno = shared.errno.load(Ordering::SeqCst);
        let _ = wait_for(pid, 0); // reaps it
        let cause = io::Error::from_raw_os_error(errno);
        let what = STEPS.get(step as usize).copied().unwrap_or("start");
        return Err(io::Error::new(
            cause.kind(),
            format!("{what} failed: {cause}"),
        ));
    }
    Ok(Launched {
        pid,
        stdin,
        stdout,
        stderr,
    })
}

/// The kernel's `struct sigaction` (x86_64 and aarch64 layout), for raw `rt_sigaction`:
/// glibc's wrapper refuses the two signals it uses internally.
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// The child: see the module documentation. Never returns.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Shared` the parent passed to clone, alive while it is suspended.
    let shared = unsafe { &*arg.cast::<Shared>() };
    // SAFETY: called once, in the cloned child, before execve.
    let step = unsafe { start_child(shared) };
    shared.errno.store(
        io::Error::last_os_error().raw_os_error().unwrap_or(0),
        Ordering::SeqCst,
    );
    shared.step.store(step, Ordering::SeqCst);
    // SAFETY: ends the child at once (no atexit handlers, no unwinding).
    unsafe { libc::_exit(127) }
}

/// Steps 1 to 6 in the child; returns the number of the step that failed (`errno` says
/// why), or does not return (execve).
///
/// # Safety
/// Only in the child cloned by [`clone_child`], with the pointers in `shared` valid.
unsafe fn start_child(shared: &Shared) -> libc::c_int {
    // SAFETY: per the function's contract; every call is a raw syscall on values owned by
    // the suspended parent.
    unsafe {
        for signal in 1..=64 {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            let mut old = KernelSigaction {
                handler: 0,
                flags: 0,
                restorer: 0,
                mask: 0,
            };
            let read = libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                std::ptr::null::<KernelSigaction>(),
                &mut old as *mut KernelSigaction,
                8usize,
            );
            let handled = old.handler != libc::SIG_DFL && old.handler != libc::SIG_IGN;
            if read == 0 && (handled || signal == libc::SIGPIPE) {
                let default = KernelSigaction {
                    handler: libc::SIG_DFL,
                    flags: 0,
                    restorer: 0,
                    mask: 0,
                };
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    signal,
                    &default as *const KernelSigaction,
                    std::ptr::null_mut::<KernelSigaction>(),
                    8usize,
                );
            }
        }
        if libc::setpgid(0, 0) < 0 {
            return 1;
        }
        if shared.parent_death {
            // Best effort: without it the process still ends with its session, only not
            // with an agent killed by SIGKILL.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        }
        for (target, &fd) in shared.fds.iter().enumerate() {
            if libc::dup2(fd, target as libc::c_int) < 0 {
                return 2;
            }
        }
        if libc::chdir(shared.cwd) < 0 {
            return 3;
        }
        if let Some(limit) = &shared.open_files {
            open_files::restore_in_child(limit);
        }
        if let Some(hook) = shared.sandbox
            && spawn::apply(hook).is_err()
        {
            return 4;
        }
        let empty = 0u64;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty as *const u64,
            std::ptr::null_mut::<u64>(),
            8usize,
        );
        libc::execve(shared.program, shared.argv, shared.envp);
        5
    }
}
