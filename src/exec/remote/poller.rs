//! The host side's one `poll(2)` loop: a single named thread (`agentloop-poll`) reads the
//! stdout and stderr of every open remote transport, frames stdout into lines under a cap
//! and hands each line to its connection ([`Lines`]), keeping stderr as the transport's
//! bounded tail. It starts with the first registration and is stopped and joined when the
//! last one goes, so N sessions cost one thread instead of 2N.
//!
//! It never writes to a transport, never blocks on one pipe (each ready descriptor gets one
//! `read`, which `poll` promised will not block), and never holds a lock while a line is
//! handled. What it calls must not block for long: it is every connection's reader. A
//! connection dropped from inside a [`Lines`] callback (the last reference to it went
//! there) is removed without waiting, and the thread is then joined by the next start.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::{ChildStderr, ChildStdout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::{self, JoinHandle, ThreadId};

use crossbeam_channel::{Receiver, Sender};

use crate::exec::process::child::StderrSink;

/// What one `read` asks for.
const CHUNK: usize = 64 * 1024;
/// A line buffer grown past this is given back once its line is handled.
const KEEP_BUFFER: usize = 1024 * 1024;
/// The most bytes a removal still reads from a transport that has not closed its output.
const DRAIN_LIMIT: usize = 4 * 1024 * 1024;

/// Why a transport's stdout stopped being read.
#[derive(Debug)]
pub(crate) enum End {
    /// It reached end-of-file.
    Eof,
    /// Reading failed.
    Failed(io::Error),
    /// A line went over the cap.
    TooLong,
    /// [`Lines::line`] refused a line (not the protocol).
    Malformed(String),
    /// The connection was closed by its owner before its output ended.
    Removed,
}

/// A connection's side of the loop.
pub(crate) trait Lines: Send {
    /// One complete line without its `\n` (lines of only whitespace never arrive);
    /// `Err` ends the stream as [`End::Malformed`].
    fn line(&mut self, line: &[u8]) -> Result<(), String>;
    /// The stream ended; called exactly once, and no line follows.
    fn end(&mut self, why: End);
}

/// What a transport hands the loop.
pub(crate) struct Streams {
    pub(crate) stdout: ChildStdout,
    /// Bytes of stdout already read (after a bootstrap exchange), handled first.
    pub(crate) leftover: Vec<u8>,
    pub(crate) stderr: Option<ChildStderr>,
    pub(crate) sink: StderrSink,
    /// The longest line accepted.
    pub(crate) cap: usize,
}

/// A transport's place in the loop; dropping it removes the transport (what is already in
/// its pipes is still handled first) and ends [`Lines`] with [`End::Removed`] if its
/// output had not ended.
pub(crate) struct Registration {
    token: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        unregister(self.token);
    }
}

/// Adds a transport to the loop, starting the loop's thread if none runs.
pub(crate) fn register(streams: Streams, lines: Box<dyn Lines>) -> io::Result<Registration> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let token = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut global = lock_global();
    if global.is_none() {
        // A loop that ended on its own thread's last removal is joined before the next.
        if let Some(old) = lock(&ORPHAN).take() {
            let _ = old.join();
        }
        *global = Some(Shared::start()?);
    }
    let shared = global.as_mut().expect("started above");
    shared.count += 1;
    let entry = Entry {
        token,
        stdout: Some(streams.stdout),
        stderr: streams.stderr,
        sink: streams.sink,
        buf: streams.leftover,
        cap: streams.cap,
        lines,
    };
    shared.send(Command::Add(Box::new(entry)));
    Ok(Registration { token })
}

enum Command {
    Add(Box<Entry>),
    /// Remove a transport; the sender hears when it is gone.
    Remove(u64, Option<Sender<()>>),
    Stop,
}

/// The running loop, as its users reach it.
struct Shared {
    commands: Sender<Command>,
    wake: UnixStream,
    thread: Option<JoinHandle<()>>,
    id: ThreadId,
    count: usize,
}

static GLOBAL: Mutex<Option<Shared>> = Mutex::new(None);
/// A loop whose last transport was removed on its own thread, waiting to be joined.
static ORPHAN: Mutex<Option<JoinHandle<()>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock_global() -> MutexGuard<'static, Option<Shared>> {
    lock(&GLOBAL)
}

impl Shared {
    fn start() -> io::Result<Shared> {
        let (wake, woken) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        woken.set_nonblocking(true)?;
        let (commands, rx) = crossbeam_channel::unbounded();
        let thread = thread::Builder::new()
            .name("agentloop-poll".to_string())
            .stack_size(256 * 1024)
            .spawn(move || run(&rx, woken))?;
        Ok(Shared {
            commands,
            wake,
            id: thread.thread().id(),
            thread: Some(thread),
            count: 0,
        })
    }

    fn send(&self, command: Command) {
        let _ = self.commands.send(command);
        // A full socket already wakes the loop.
        let _ = (&self.wake).write(&[1]);
    }
}

fn unregister(token: u64) {
    let on_loop = |shared: &Shared| thread::current().id() == shared.id;
    let (ack, acked) = crossbeam_channel::bounded(1);
    let (stopped, own) = {
        let mut global = lock_global();
        let Some(shared) = global.as_mut() else {
            return;
        };
        let own = on_loop(shared);
        shared.send(Command::Remove(token, (!own).then_some(ack)));
        shared.count = shared.count.saturating_sub(1);
        let stopped = if shared.count == 0 {
            shared.send(Command::Stop);
            global.take()
        } else {
            None
        };
        (stopped, own)
    };
    if own {
        if let Some(mut stopped) = stopped {
            *lock(&ORPHAN) = stopped.thread.take();
        }
        return;
    }
    // Disconnected instead when the loop has already gone.
    let _ = acked.recv();
    if let Some(mut stopped) = stopped
        && let Some(thread) = stopped.thread.take()
    {
        let _ = thread.join();
    }
}

/// One transport as the loop holds it.
struct Entry {
    token: u64,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    sink: StderrSink,
    /// The start of a line whose `\n` has not come yet.
    buf: Vec<u8>,
    cap: usize,
    lines: Box<dyn Lines>,
}

impl Entry {
    /// Handles `chunk` of stdout; `Some` when the stream must end.
    fn feed(&mut self, chunk: &[u8]) -> Option<End> {
        let mut rest = chunk;
        while let Some(at) = crate::bytes::find(b'\n', rest) {
            let part = &rest[..at];
            rest = &rest[at + 1..];
            if self.buf.len() + part.len() > self.cap {
                return Some(End::TooLong);
            }
            let line = if self.buf.is_empty() {
                part
            } else {
                self.buf.extend_from_slice(part);
                &self.buf[..]
            };
            let handled = if line.iter().all(u8::is_ascii_whitespace) {
                Ok(())
            } else {
                // A panic in one connection's handler (a host's exit callback) ends that
                // connection, not the loop every other connection is read by.
                let lines = &mut self.lines;
                catch_unwind(AssertUnwindSafe(|| lines.line(line)))
                    .unwrap_or_else(|_| Err("its handler panicked".to_string()))
            };
            self.buf.clear();
            if self.buf.capacity() > KEEP_BUFFER {
                self.buf = Vec::new();
            }
            if let Err(detail) = handled {
                return Some(End::Malformed(detail));
            }
        }
        if self.buf.len() + rest.len() > self.cap {
            return Some(End::TooLong);
        }
        self.buf.extend_from_slice(rest);
        None
    }

    /// Reads stdout once (it is ready); `Some` when the stream has ended.
    fn read_stdout(&mut self, chunk: &mut [u8]) -> Option<End> {
        let pipe = self.stdout.as_mut()?;
        match pipe.read(chunk) {
            Ok(0) => Some(End::Eof),
            Ok(n) => self.feed(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => None,
            Err(e) => Some(End::Failed(e)),
        }
    }

    /// Stops reading stdout and tells the connection why.
    fn end(&mut self, why: End) {
        if self.stdout.take().is_some() {
            self.buf = Vec::new();
            let lines = &mut self.lines;
            let _ = catch_unwind(AssertUnwindSafe(|| lines.end(why)));
        }
    }

    /// Reads stderr once (it is ready) into the tail.
    fn read_stderr(&mut self, chunk: &mut [u8]) {
        let Some(pipe) = self.stderr.as_mut() else {
            return;
        };
        match pipe.read(chunk) {
            Ok(0) => self.end_stderr(),
            Ok(n) => self.sink.keep(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => self.end_stderr(),
        }
    }

    fn end_stderr(&mut self) {
        self.stderr = None;
        self.sink.end();
    }

    /// A removal: what is already in the pipes is handled (up to [`DRAIN_LIMIT`]), then
    /// both are closed.
    fn remove(mut self, chunk: &mut [u8]) {
        let mut read = 0;
        while read < DRAIN_LIMIT
            && let Some(fd) = self.stdout.as_ref().map(AsRawFd::as_raw_fd)
            && crate::exec::process::readable(fd, 0)
        {
            read += chunk.len();
            if let Some(why) = self.read_stdout(chunk) {
                self.end(why);
            }
        }
        self.end(End::Removed);
        let mut read = 0;
        while read < DRAIN_LIMIT
            && let Some(fd) = self.stderr.as_ref().map(AsRawFd::as_raw_fd)
            && crate::exec::process::readable(fd, 0)
        {
            read += chunk.len();
            self.read_stderr(chunk);
        }
        self.end_stderr();
    }
}

/// The loop: commands, then one `poll` over the wake socket and every open pipe.
fn run(commands: &Receiver<Command>, mut woken: UnixStream) {
    let mut entries: Vec<Entry> = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    let mut fds: Vec<libc::pollfd> = Vec::new();
    // Which entry and pipe each `fds` slot is (after the wake socket's).
    let mut slots: Vec<(usize, bool)> = Vec::new();
    loop {
        let mut stop = false;
        while let Ok(command) = commands.try_recv() {
            match command {
                Command::Add(mut entry) => {
                    let leftover = std::mem::take(&mut entry.buf);
                    if let Some(why) = entry.feed(&leftover) {
                        entry.end(why);
                    }
                    entries.push(*entry);
                }
                Command::Remove(token, ack) => {
                    if let Some(at) = entries.iter().position(|e| e.token == token) {
                        entries.swap_remove(at).remove(&mut chunk);
                    }
                    if let Some(ack) = ack {
                        let _ = ack.send(());
                    }
                }
                Command::Stop => stop = true,
            }
        }
        if stop {
            for entry in entries.drain(..) {
                entry.remove(&mut chunk);
            }
            return;
        }
        fds.clear();
        slots.clear();
        fds.push(pollin(woken.as_raw_fd()));
        for (at, entry) in entries.iter().enumerate() {
            if let Some(pipe) = &entry.stdout {
                fds.push(pollin(pipe.as_raw_fd()));
                slots.push((at, true));
            }
            if let Some(pipe) = &entry.stderr {
                fds.push(pollin(pipe.as_raw_fd()));
                slots.push((at, false));
            }
        }
        // SAFETY: `fds` is a valid, writable array of `fds.len()` pollfds that lives across
        // the call, and every descriptor in it is owned by `woken` or an entry, none of
        // which is closed before the call returns.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if ready <= 0 {
            // EINTR; anything else would repeat at once, so the loop yields first.
            if ready < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                thread::sleep(std::time::Duration::from_millis(10));
            }
            continue;
        }
        if fds[0].revents != 0 {
            while matches!(woken.read(&mut chunk), Ok(n) if n > 0) {}
        }
        for (slot, &(at, stdout)) in fds[1..].iter().zip(&slots) {
            if slot.revents == 0 {
                continue;
            }
            let entry = &mut entries[at];
            if stdout {
                if let Some(why) = entry.read_stdout(&mut chunk) {
                    entry.end(why);
                }
            } else {
                entry.read_stderr(&mut chunk);
            }
        }
    }
}

fn pollin(fd: libc::c_int) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}
