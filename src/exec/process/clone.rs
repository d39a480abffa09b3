//! The raw `clone(2)` of a child on a stack of its own, `waitpid` for it, and descriptors
//! moved above the standard three: what the launcher (`launch.rs`) and the sandbox's probe
//! for mount namespaces (`sandbox/spawn.rs`) share. Below both of them, so that neither
//! imports the other's file.
//!
//! It never starts a child that does more than its entry function says, and never waits for
//! a process it did not clone.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The child's stack: it holds the frames of its entry function only (the launcher's child,
/// which applies the sandbox, or the namespace probe).
const CHILD_STACK: usize = 64 * 1024;

/// `r`, or the last OS error when it is negative.
pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `fd` moved to a number ≥ 3 (close-on-exec), so that putting the child's three
/// descriptors on 0, 1 and 2 can never overwrite one of them or a descriptor the sandbox
/// uses (a host that closed its own stdin makes the next pipe land on 0).
pub(crate) fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC duplicates an open descriptor we own; no memory is passed.
    let moved = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) })?;
    // SAFETY: the duplicate is a new open descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// Clones a child running `entry(arg)` onto a fresh stack, in new `namespaces`, with all
/// signals blocked in the calling thread; returns once the child has called `execve` or
/// exited.
///
/// # Safety
/// `entry` must make only raw syscalls (no allocation, no lock, no unwinding) and end in
/// `execve` or `_exit`; whatever `arg` points to must stay valid until this returns.
pub(crate) unsafe fn clone_child(
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    namespaces: libc::c_int,
) -> io::Result<libc::pid_t> {
    // SAFETY: an anonymous private mapping; the result is checked before use.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            CHILD_STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sigset_t is plain data; sigfillset initialises `all`, and pthread_sigmask
    // only reads `all` and writes `old`, both valid for the call.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
    }
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD | namespaces;
    // SAFETY: the stack is CHILD_STACK writable bytes and grows down from its end (16-byte
    // aligned: mmap returns page-aligned memory). With CLONE_VFORK clone returns after the
    // child's execve or exit, so `arg` outlives the child's use of it (the caller's
    // contract), as does the stack.
    let pid = unsafe {
        libc::clone(
            entry,
            stack.cast::<u8>().add(CHILD_STACK).cast(),
            flags,
            arg,
        )
    };
    let cloned = if pid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(pid)
    };
    // SAFETY: restores the mask saved above; the child no longer uses its stack (it has
    // called execve, which replaced its memory, or exited).
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        libc::munmap(stack, CHILD_STACK);
    }
    cloned
}

/// Whether a child cloned into new `namespaces` (a mount namespace, in a user namespace
/// unless root) can make its mounts private: what the sandbox's read-only bind mounts
/// need. The probe is a clone that exits at once, not a copy of the process.
pub(crate) fn namespaces_available(namespaces: libc::c_int) -> bool {
    extern "C" fn probe(_: *mut libc::c_void) -> libc::c_int {
        let null = std::ptr::null();
        // SAFETY: raw syscalls with static strings and null pointers, then _exit.
        unsafe {
            let ok = libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                null.cast(),
            ) == 0;
            libc::_exit(if ok { 0 } else { 1 })
        }
    }
    // SAFETY: `probe` makes one raw syscall and exits; it reads nothing through `arg`.
    let Ok(pid) = (unsafe { clone_child(probe, std::ptr::null_mut(), namespaces) }) else {
        return false;
    };
    matches!(wait_for(pid, 0), Ok(Some(status))
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0)
}

/// Whether a child can be cloned into new `namespaces` at all (a PID namespace, in a user
/// namespace unless root): the probe exits at once, in them, without touching anything.
pub(crate) fn clone_succeeds(namespaces: libc::c_int) -> bool {
    extern "C" fn probe(_: *mut libc::c_void) -> libc::c_int {
        // SAFETY: _exit ends the probe at once.
        unsafe { libc::_exit(0) }
    }
    // SAFETY: `probe` only exits; it reads nothing through `arg`.
    let Ok(pid) = (unsafe { clone_child(probe, std::ptr::null_mut(), namespaces) }) else {
        return false;
    };
    matches!(wait_for(pid, 0), Ok(Some(status))
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0)
}

/// `waitpid(pid, options)` for a child of ours, retried on `EINTR`: its raw wait status once
/// it has exited, `None` while it runs (with `WNOHANG`), `Err` when it is not ours to wait
/// for (any more).
pub(crate) fn wait_for(pid: libc::pid_t, options: libc::c_int) -> io::Result<Option<libc::c_int>> {
    let mut status = 0;
    loop {
        // SAFETY: waits only for `pid`; `status` is a valid out-pointer.
        match unsafe { libc::waitpid(pid, &mut status, options) } {
            0 => return Ok(None),
            reaped if reaped == pid => return Ok(Some(status)),
            _ => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
}
