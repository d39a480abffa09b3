//! Signals for the `agentloop` CLI: SIGINT (Ctrl-C), SIGTERM and SIGHUP handlers that only
//! write one byte to a self-pipe, a named watcher thread that turns each into the CLI's
//! reaction, and a line reader that a signal wakes up.
//!
//! Three steps, so that start-up does not wait for a thread: [`CtrlC::new`] makes the
//! pipes (the default actions still apply: a signal ends the program at once),
//! [`CtrlC::handle`] installs the handlers (a signal is now a byte waiting in the pipe),
//! [`CtrlC::watch`] starts the watcher, which reads the bytes that came meanwhile first.
//!
//! The handler does nothing but `write(2)` (async-signal-safe); everything else happens on
//! the watcher thread. This module never kills a process and never exits the program: the
//! reaction is the caller's closure.

use std::io;
use std::os::fd::RawFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread::JoinHandle;

/// The write end of the self-pipe, for the signal handler (-1 when none is installed).
static SELF_PIPE: AtomicI32 = AtomicI32::new(-1);

const PRESS: u8 = b'i';
const TERM: u8 = b't';
const HANGUP: u8 = b'h';
const QUIT: u8 = b'q';

/// The signals handled, with their byte on the self-pipe.
const HANDLED: [(libc::c_int, u8); 3] = [
    (libc::SIGINT, PRESS),
    (libc::SIGTERM, TERM),
    (libc::SIGHUP, HANGUP),
];

/// A signal the watcher reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT: Ctrl-C.
    Interrupt,
    /// SIGTERM or SIGHUP (the number): end like an abort.
    Terminate(i32),
}

extern "C" fn handle_signal(signal: libc::c_int) {
    let fd = SELF_PIPE.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    let byte = match signal {
        libc::SIGTERM => &TERM,
        libc::SIGHUP => &HANGUP,
        _ => &PRESS,
    };
    // SAFETY: errno is thread-local; saving and restoring it keeps the interrupted code's
    // errno intact. write(2) is async-signal-safe, the fd is non-blocking (a full pipe
    // drops the byte instead of blocking) and the buffer outlives the call.
    unsafe {
        let errno = libc::__errno_location();
        let saved = *errno;
        libc::write(fd, (byte as *const u8).cast(), 1);
        *errno = saved;
    }
}

/// Creates a pipe with both ends close-on-exec (so commands the agent runs never inherit
/// them) and the given ends non-blocking.
fn pipe(nonblocking_read: bool, nonblocking_write: bool) -> io::Result<(RawFd, RawFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    for (fd, nonblocking) in [(fds[0], nonblocking_read), (fds[1], nonblocking_write)] {
        if nonblocking {
            // SAFETY: fcntl on a descriptor we just created and own.
            unsafe {
                let flags = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
    }
    Ok((fds[0], fds[1]))
}

fn write_byte(fd: RawFd, byte: u8) {
    // SAFETY: a one-byte write from a live buffer to a descriptor this module owns.
    unsafe {
        libc::write(fd, (&byte as *const u8).cast(), 1);
    }
}

fn close(fd: RawFd) {
    // SAFETY: closing a descriptor this module created, exactly once (in Drop).
    unsafe {
        libc::close(fd);
    }
}

/// The installed handlers. Dropping them restores the default actions, stops and joins the
/// watcher thread and closes the pipes.
pub struct CtrlC {
    self_read: RawFd,
    self_write: RawFd,
    wake_read: RawFd,
    wake_write: RawFd,
    watcher: Mutex<Option<JoinHandle<()>>>,
}

impl CtrlC {
    /// The pipes, with no handler installed yet.
    pub fn new() -> io::Result<CtrlC> {
        let (self_read, self_write) = pipe(false, true)?;
        let (wake_read, wake_write) = pipe(true, true)?;
        Ok(CtrlC {
            self_read,
            self_write,
            wake_read,
            wake_write,
            watcher: Mutex::new(None),
        })
    }

    /// Installs the handlers: from now on a signal waits in the pipe for the watcher.
    pub fn handle(&self) -> io::Result<()> {
        SELF_PIPE.store(self.self_write, Ordering::SeqCst);
        // SAFETY: a zeroed sigaction is a valid starting point; the handler is an
        // `extern "C" fn(c_int)` that only does async-signal-safe work. SA_RESTART keeps
        // blocking calls elsewhere from failing with EINTR.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handle_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            for (signal, _) in HANDLED {
                if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }

    /// Starts the watcher thread: `on_signal` runs on it for each signal, those that came
    /// since [`handle`](Self::handle) first. Every signal also wakes a [`LineReader`]
    /// waiting through [`wake_fd`](Self::wake_fd).
    pub fn watch(&self, on_signal: impl Fn(Signal) + Send + 'static) -> io::Result<()> {
        let (self_read, wake_write) = (self.self_read, self.wake_write);
        let watcher = std::thread::Builder::new()
            .name("agent-ctrl-c".to_string())
            .stack_size(256 * 1024)
            .spawn(move || {
                let mut buf = [0u8; 64];
                loop {
                    // SAFETY: reading into a live buffer of the given length.
                    let n = unsafe { libc::read(self_read, buf.as_mut_ptr().cast(), buf.len()) };
                    if n < 0 {
                        if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                            continue;
                        }
                        return;
                    }
                    if n == 0 {
                        return;
                    }
                    for &byte in &buf[..n as usize] {
                        let signal = match byte {
                            QUIT => return,
                            TERM => Signal::Terminate(libc::SIGTERM),
                            HANGUP => Signal::Terminate(libc::SIGHUP),
                            _ => Signal::Interrupt,
                        };
                        on_signal(signal);
                        write_byte(wake_write, PRESS);
                    }
                }
            })?;
        *self.watcher.lock().unwrap_or_else(|e| e.into_inner()) = Some(watcher);
        Ok(())
    }

    /// The descriptor that becomes readable on each press (for [`LineReader::read_line`]).
    pub fn wake_fd(&self) -> RawFd {
        self.wake_read
    }

    /// Forgets presses nobody waited for (call before waiting for a line).
    pub fn forget_presses(&self) {
        drain(self.wake_read);
    }
}

/// Restores the default actions: the next Ctrl-C, SIGTERM or SIGHUP ends the program at
/// once.
pub fn restore_default() {
    for (signal, _) in HANDLED {
        // SAFETY: SIG_DFL is always a valid disposition for these signals.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
}

/// Ends the program the default way for `signal` (for a signal that arrives before there
/// is anything to clean up): restores the default action and raises it again.
pub fn die_by(signal: Signal) -> ! {
    let number = match signal {
        Signal::Interrupt => libc::SIGINT,
        Signal::Terminate(number) => number,
    };
    restore_default();
    // SAFETY: sending a signal with its default (terminating) action to this process.
    unsafe {
        libc::kill(libc::getpid(), number);
    }
    // Unreachable in practice; if the signal is blocked, exit with its conventional status.
    std::process::exit(128 + number)
}

impl Drop for CtrlC {
    fn drop(&mut self) {
        restore_default();
        SELF_PIPE.store(-1, Ordering::SeqCst);
        write_byte(self.self_write, QUIT);
        let watcher = self
            .watcher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(watcher) = watcher {
            let _ = watcher.join();
        }
        for fd in [
            self.self_read,
            self.self_write,
            self.wake_read,
            self.wake_write,
        ] {
            close(fd);
        }
    }
}

/// Reads everything waiting on a non-blocking descriptor.
fn drain(fd: RawFd) {
    let mut buf = [0u8; 64];
    // SAFETY: reading into a live buffer; the descriptor is non-blocking.
    while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}

/// What waiting for a line gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line, without its line ending.
    Text(String),
    /// The input ended.
    End,
    /// Ctrl-C was pressed while waiting.
    Interrupted,
}

/// Reads lines from a descriptor (stdin, /dev/tty), waking up on Ctrl-C.
pub struct LineReader {
    fd: RawFd,
    buffer: Vec<u8>,
    ended: bool,
}

impl LineReader {
    /// A reader of `fd` (not owned: the caller keeps it open).
    pub fn new(fd: RawFd) -> LineReader {
        LineReader {
            fd,
            buffer: Vec::new(),
            ended: false,
        }
    }

    /// The next line, or `Interrupted` as soon as `wake_fd` becomes readable.
    pub fn read_line(&mut self, wake_fd: RawFd) -> io::Result<Line> {
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                let text = String::from_utf8_lossy(&line[..end]);
                return Ok(Line::Text(text.trim_end_matches('\r').to_string()));
            }
            if self.ended {
                if self.buffer.is_empty() {
                    return Ok(Line::End);
                }
                let rest = std::mem::take(&mut self.buffer);
                return Ok(Line::Text(String::from_utf8_lossy(&rest).into_owned()));
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: wake_fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: `fds` is a valid array of two pollfd structs.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if ready < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if fds[1].revents & libc::POLLIN != 0 {
                drain(wake_fd);
                return Ok(Line::Interrupted);
            }
            if fds[0].revents != 0 {
                let mut chunk = [0u8; 4096];
                // SAFETY: reading into a live buffer of the given length.
                let n = unsafe { libc::read(self.fd, chunk.as_mut_ptr().cast(), chunk.len()) };
                if n < 0 {
                    let err = io::Error::last_os_error();
                    if err.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(err);
                }
                if n == 0 {
                    self.ended = true;
                } else {
                    self.buffer.extend_from_slice(&chunk[..n as usize]);
                }
            }
        }
    }
}

/// Reads `fd` as a stream that ends when `wake_fd` becomes readable (a signal came): how
/// `agentloop acp` treats SIGTERM, SIGHUP and Ctrl-C like the end of its input, so that
/// every session ends the orderly way.
pub struct UntilSignal {
    pub fd: RawFd,
    pub wake_fd: RawFd,
}

impl io::Read for UntilSignal {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut fds = [self.fd, self.wake_fd].map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            // SAFETY: `fds` is a valid array of two pollfd structs.
            if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if fds[1].revents != 0 {
                return Ok(0);
            }
            // SAFETY: reading into a live buffer of the given length.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

/// Whether `fd` is a terminal.
pub fn is_terminal(fd: RawFd) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}
