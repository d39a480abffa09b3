//! A command's stdout and stderr read on the thread that waits for it: one `ppoll(2)` on
//! both pipes and a wake descriptor, so that a running command costs its session no thread
//! of its own (the thread it replaced cost a spawn and a hand-off per command, about 0.1
//! ms on the bench machine, and a thread per running command at scale).
//!
//! The waiting thread calls [`Pump::wait`] wherever it used to sleep: while the shell runs,
//! during the grace period after SIGTERM, while background jobs drain. Each chunk goes to
//! the output callback as it arrives and into a [`Capture`]. A cancel writes to the wake
//! descriptor (an eventfd), which ends the current wait at once.
//!
//! The shell's exit ends the wait at once too: the pump also polls a pidfd of the shell
//! ([`Pump::watch_exit`], Linux ≥ 5.3), readable once the shell is a zombie. The pipes'
//! end-of-file alone does not say that: the kernel closes an exiting process's descriptors
//! before it makes it a zombie, so a `waitpid` right after the end-of-file often found the
//! shell still running and the wait went on for a whole polling pause (0.25 ms, in most
//! commands after a process's first on the bench machine: bench `sandbox`, `true` 1.55 →
//! 1.25 ms; up to 20 ms for a command that closed its pipes early).
//! Without a pidfd (an older kernel, or a host's seccomp policy) the polling pauses remain.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::exec::{OutputCallback, OutputStream};

/// Bytes kept from the start of each stream.
const HEAD_CAPTURE: usize = 1024 * 1024;
/// Bytes kept from the end of each stream once the head is full.
const TAIL_CAPTURE: usize = 1024 * 1024;
/// The read buffer starts at this size and doubles while reads fill it.
const FIRST_CHUNK: usize = 8 * 1024;
/// The read buffer's largest size.
const CHUNK: usize = 64 * 1024;

/// The two pipes of a running command, read by the thread that waits for it.
pub(super) struct Pump<'a> {
    pipes: [File; 2],
    open: [bool; 2],
    captures: [Capture; 2],
    /// Whether output is kept in `captures` (a background process keeps its own buffers).
    capture: bool,
    on_output: OutputCallback<'a>,
    /// Readable once a [`Waker`] wrote to it: a cancel. Shared with the wakers, so that a
    /// cancel callback running late never writes to a closed (and reused) number.
    wake: Arc<OwnedFd>,
    /// A pidfd of the shell, readable once it has exited; dropped once it was (`None`:
    /// nothing to watch).
    exit: Option<OwnedFd>,
    buf: Vec<u8>,
}

/// Wakes a [`Pump`] from another thread (the cancel token's callback).
pub(super) struct Waker(Arc<OwnedFd>);

impl Waker {
    /// Ends the pump's current (or next) wait.
    pub(super) fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: an 8-byte write from a live u64 to the eventfd this waker keeps open.
        unsafe {
            libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }
}

impl<'a> Pump<'a> {
    /// A pump for `stdout` and `stderr` (the read ends of the command's pipes).
    pub(super) fn new(
        stdout: OwnedFd,
        stderr: OwnedFd,
        on_output: OutputCallback<'a>,
    ) -> io::Result<Pump<'a>> {
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Pump {
            pipes: [File::from(stdout), File::from(stderr)],
            open: [true, true],
            captures: [Capture::default(), Capture::default()],
            capture: true,
            on_output,
            // SAFETY: eventfd succeeded: a new descriptor nothing else owns.
            wake: Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }),
            exit: None,
            buf: Vec::new(),
        })
    }

    /// Keeps no capture: the output goes to the callback only (a background process's
    /// callback keeps it in buffers of its own, which its reader reads from).
    pub(super) fn without_capture(&mut self) {
        self.capture = false;
    }

    /// Makes the exit of our child `pid` end the current wait, once. Without a pidfd
    /// (kernel < 5.3, or the call is filtered) nothing changes: the caller's polling
    /// pauses still find the exit.
    pub(super) fn watch_exit(&mut self, pid: libc::pid_t) {
        // SAFETY: pidfd_open takes a pid and flags; the result is checked. `pid` is our
        // unreaped child, so the number cannot name another process.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
        if fd >= 0 {
            // SAFETY: the kernel returned a new descriptor that nobody else owns (pidfds
            // are close-on-exec).
            self.exit = Some(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        }
    }

    /// What wakes this pump from another thread.
    pub(super) fn waker(&self) -> Waker {
        Waker(Arc::clone(&self.wake))
    }

    /// How many pipes have not reached end-of-file.
    pub(super) fn open(&self) -> usize {
        self.open.iter().filter(|&&open| open).count()
    }

    /// Reads what arrives for up to `timeout`. Returns `true` as soon as a pipe reaches
    /// end-of-file, the watched child exits or the waker fires, `false` when the time is
    /// up.
    pub(super) fn wait(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut fds = [
                self.pollfd(0),
                self.pollfd(1),
                libc::pollfd {
                    fd: self.wake.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.exit.as_ref().map_or(-1, AsRawFd::as_raw_fd),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let limit = libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            };
            // SAFETY: `fds` is an array of four valid, writable pollfds that lives across
            // the call (a negative fd is ignored), its length is passed as the count, and
            // `limit` is a valid timespec; no signal mask is passed.
            let ready = unsafe {
                libc::ppoll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    &limit,
                    std::ptr::null(),
                )
            };
            if ready < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return false;
            }
            if ready == 0 {
                return false;
            }
            let mut woke = false;
            if fds[2].revents != 0 {
                let mut count = 0u64;
                // SAFETY: an 8-byte read into a live u64 from our own non-blocking eventfd.
                unsafe { libc::read(self.wake.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
                woke = true;
            }
            if fds[3].revents != 0 {
                // Readable for good once the child exited: watched once, then closed.
                self.exit = None;
                woke = true;
            }
            for (i, fd) in fds[..2].iter().enumerate() {
                if fd.revents != 0 {
                    woke |= self.read_once(i);
                }
            }
            if woke {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }

    /// Reads until both pipes reach end-of-file or `deadline` passes.
    pub(super) fn wait_until(&mut self, deadline: Instant) {
        while self.open() > 0 {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            self.wait(deadline - now);
        }
    }

    /// Reads what arrives for `duration`, whatever happens meanwhile (a pause that keeps
    /// the pipes from filling up).
    pub(super) fn pass(&mut self, duration: Duration) {
        let deadline = Instant::now() + duration;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            self.wait(deadline - now);
        }
    }

    /// The captures of stdout and stderr.
    pub(super) fn finish(self) -> [Capture; 2] {
        self.captures
    }

    fn pollfd(&self, i: usize) -> libc::pollfd {
        libc::pollfd {
            fd: if self.open[i] {
                self.pipes[i].as_raw_fd()
            } else {
                -1
            },
            events: libc::POLLIN,
            revents: 0,
        }
    }

    /// One read from pipe `i`, which `poll` said is ready; returns whether it ended.
    fn read_once(&mut self, i: usize) -> bool {
        const STREAMS: [OutputStream; 2] = [OutputStream::Stdout, OutputStream::Stderr];
        if self.buf.is_empty() {
            self.buf = vec![0; FIRST_CHUNK];
        }
        match self.pipes[i].read(&mut self.buf) {
            Ok(n) if n > 0 => {
                (self.on_output)(STREAMS[i], &self.buf[..n]);
                if self.capture {
                    self.captures[i].push(&self.buf[..n]);
                }
                if n == self.buf.len() && n < CHUNK {
                    self.buf.resize(n * 2, 0);
                }
                false
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
            // End-of-file or a read error: this pipe is done.
            _ => {
                self.open[i] = false;
                true
            }
        }
    }
}

/// The first [`HEAD_CAPTURE`] and the last [`TAIL_CAPTURE`] bytes of a stream, and its
/// exact length.
#[derive(Default)]
pub(super) struct Capture {
    pub(super) head: Vec<u8>,
    /// A ring once full: the oldest byte is at `tail_start`.
    pub(super) tail: Vec<u8>,
    tail_start: usize,
    pub(super) total: u64,
}

impl Capture {
    pub(super) fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let to_head = (HEAD_CAPTURE - self.head.len()).min(data.len());
        self.head.extend_from_slice(&data[..to_head]);
        data = &data[to_head..];
        if data.is_empty() {
            return;
        }
        if self.tail.len() < TAIL_CAPTURE {
            let fill = (TAIL_CAPTURE - self.tail.len()).min(data.len());
            self.tail.extend_from_slice(&data[..fill]);
            data = &data[fill..];
        }
        if data.len() >= TAIL_CAPTURE {
            self.tail
                .copy_from_slice(&data[data.len() - TAIL_CAPTURE..]);
            self.tail_start = 0;
            return;
        }
        while !data.is_empty() {
            let n = (TAIL_CAPTURE - self.tail_start).min(data.len());
            self.tail[self.tail_start..self.tail_start + n].copy_from_slice(&data[..n]);
            self.tail_start = (self.tail_start + n) % TAIL_CAPTURE;
            data = &data[n..];
        }
    }

    /// Bytes that were neither in the head nor in the tail.
    pub(super) fn dropped(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// The capture as text (invalid UTF-8 replaced), with a marker where bytes were
    /// dropped. Consumes the capture so that its buffers are reused, not copied.
    pub(super) fn into_text(self) -> String {
        let dropped = self.dropped();
        let Capture {
            mut head,
            mut tail,
            tail_start,
            ..
        } = self;
        tail.rotate_left(tail_start);
        if dropped == 0 {
            head.append(&mut tail);
            return bytes_to_text(head);
        }
        let mut text = bytes_to_text(head);
        text.push_str(&format!("\n[... {dropped} bytes of output omitted ...]\n"));
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

/// `bytes` as a `String`, without copying when they are valid UTF-8.
fn bytes_to_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;
    use crate::exec::process::Group;
    use crate::exec::process::launch::{Launch, launch};

    fn captured(chunks: &[&[u8]]) -> Capture {
        let mut capture = Capture::default();
        for chunk in chunks {
            capture.push(chunk);
        }
        capture
    }

    #[test]
    fn small_output_is_kept_whole() {
        let capture = captured(&[b"hello ", b"world"]);
        assert_eq!((capture.total, capture.dropped()), (11, 0));
        assert_eq!(capture.into_text(), "hello world");
    }

    #[test]
    fn output_up_to_both_caps_is_kept_whole_across_the_seam() {
        let data: Vec<u8> = (0..HEAD_CAPTURE + TAIL_CAPTURE)
            .map(|i| b'a' + (i % 26) as u8)
            .collect();
        let capture = captured(&[
            &data[..10],
            &data[10..HEAD_CAPTURE + 7],
            &data[HEAD_CAPTURE + 7..],
        ]);
        assert_eq!(capture.dropped(), 0);
        assert_eq!(capture.into_text().as_bytes(), &data[..]);
    }

    #[test]
    fn long_output_keeps_the_exact_head_and_tail_with_a_marker() {
        let data: Vec<u8> = (0..5 * 1024 * 1024 + 333)
            .map(|i: usize| b'a' + (i % 26) as u8)
            .collect();
        // Odd chunk sizes so the ring wraps at arbitrary points.
        let mut capture = Capture::default();
        for chunk in data.chunks(70_001) {
            capture.push(chunk);
        }
        let dropped = data.len() - HEAD_CAPTURE - TAIL_CAPTURE;
        assert_eq!(capture.dropped(), dropped as u64);
        let text = capture.into_text();
        let marker = format!("\n[... {dropped} bytes of output omitted ...]\n");
        let expected = [
            &data[..HEAD_CAPTURE],
            marker.as_bytes(),
            &data[data.len() - TAIL_CAPTURE..],
        ]
        .concat();
        assert!(text.as_bytes() == expected.as_slice());
    }

    #[test]
    fn one_huge_chunk_keeps_its_last_bytes() {
        let data: Vec<u8> = (0..3 * 1024 * 1024)
            .map(|i: usize| (i % 251) as u8)
            .collect();
        let capture = captured(&[&data]);
        let (newer, older) = capture.tail.split_at(capture.tail_start);
        assert_eq!([older, newer].concat(), &data[data.len() - TAIL_CAPTURE..]);
    }

    #[test]
    fn the_shells_exit_ends_a_wait_after_its_pipes_closed_and_only_once() {
        let env = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        // The shell closes both pipes, then lives on a little: the end-of-file says nothing
        // about its exit.
        let child = launch(&Launch {
            program: c"/bin/sh",
            args: &["-c", "exec >&- 2>&-; sleep 0.5"],
            env: &env,
            cwd: Path::new("/"),
            stdin_piped: false,
            sandbox: None,
            parent_death: false,
        })
        .unwrap();
        let mut group = Group::new(child.pid);
        let on_output = |_: OutputStream, _: &[u8]| {};
        let mut pump = Pump::new(child.stdout, child.stderr, &on_output).unwrap();
        pump.watch_exit(child.pid);
        pump.wait_until(Instant::now() + Duration::from_secs(30));
        assert_eq!(pump.open(), 0, "both pipes reach end-of-file first");
        // The shell sleeps on (unless this thread was held up for half a second, when
        // the wait above already saw the exit). Nothing but the exit can end this wait
        // early (no output, no waker): without the watch it would time out.
        let exited = group.try_reap() || pump.wait(Duration::from_secs(20));
        assert!(exited, "the exit ended the wait");
        assert!(
            group.try_reap(),
            "the shell is a zombie once the wait ended"
        );
        assert_eq!(group.status().and_then(|s| s.code()), Some(0));
        // The exit is reported once: the next wait does not return at once for it again.
        assert!(!pump.wait(Duration::from_millis(30)));
    }
}
