//! What a command that runs detached from its caller (a background process, `exec/background/`)
//! needs from the process code beyond a foreground command: its pid and the write end of
//! its stdin pipe handed out once it runs, signals for its group queued by other threads
//! and sent by the thread that waits for it, and bounded writes to its stdin.
//!
//! The waiting thread is the only one that signals the group (between two checks of the
//! shell, before it is reaped), so that a signal can never reach a reused process group
//! id. Nothing here waits for a process or starts a thread.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Instant;

use super::pump::Waker;
use crate::cancel::CancelToken;
use crate::sync::lock;

/// A started background command: its shell's pid (the group id) and its stdin pipe.
pub(crate) struct Started {
    pub(crate) pid: u32,
    pub(crate) stdin: Option<OwnedFd>,
}

/// The link between a background command's waiting thread and its handle.
pub(crate) struct Detached {
    /// Told once, when the shell runs.
    started: Box<dyn Fn(Started) + Send + Sync>,
    /// Signals for the group, in order, not yet sent.
    signals: Mutex<Vec<libc::c_int>>,
    /// Wakes the waiting thread; set once the command runs.
    waker: Mutex<Option<Waker>>,
}

impl Detached {
    /// A link whose `started` is called once the command's shell runs.
    pub(crate) fn new(started: impl Fn(Started) + Send + Sync + 'static) -> Detached {
        Detached {
            started: Box::new(started),
            signals: Mutex::new(Vec::new()),
            waker: Mutex::new(None),
        }
    }

    /// Queues `signal` for the command's process group; the waiting thread sends it at
    /// once (unless the shell has exited meanwhile: then it is dropped).
    pub(crate) fn signal(&self, signal: libc::c_int) {
        lock(&self.signals).push(signal);
        if let Some(waker) = lock(&self.waker).as_ref() {
            waker.wake();
        }
    }

    /// Called by the waiting thread once the shell runs.
    pub(super) fn attach(&self, pid: libc::pid_t, stdin: Option<OwnedFd>, waker: Waker) {
        *lock(&self.waker) = Some(waker);
        (self.started)(Started {
            pid: pid as u32,
            stdin,
        });
    }

    /// The signals queued since the last call.
    pub(super) fn take_signals(&self) -> Vec<libc::c_int> {
        std::mem::take(&mut *lock(&self.signals))
    }
}

/// The `poll(2)` timeout of a stdin write: how long a cancel may wait to be noticed.
const WRITE_POLL_MS: libc::c_int = 20;

/// Writes all of `bytes` to `pipe` (a background command's stdin) unless `deadline` passes,
/// `cancel` fires or the reader closes its end; returns how many bytes were written. The
/// pipe is made non-blocking, so that a command that does not read its input cannot hold
/// the caller past the deadline.
pub(crate) fn write_until(
    pipe: &File,
    mut bytes: &[u8],
    deadline: Instant,
    cancel: &CancelToken,
) -> io::Result<usize> {
    let fd = pipe.as_raw_fd();
    // SAFETY: `fd` is the open write end of the pipe `pipe` owns for the whole call;
    // F_GETFL/F_SETFL only change its status flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let mut written = 0;
    let mut out = pipe;
    while !bytes.is_empty() {
        match out.write(bytes) {
            Ok(0) => break,
            Ok(n) => {
                written += n;
                bytes = &bytes[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if cancel.is_cancelled() || Instant::now() >= deadline {
                    break;
                }
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: `pfd` is one valid, writable pollfd that lives across the call,
                // and `fd` stays open (owned by `pipe`) for the whole call.
                unsafe { libc::poll(&mut pfd, 1, WRITE_POLL_MS) };
            }
            Err(e) if written == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(written)
}
