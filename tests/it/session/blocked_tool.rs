//! A file tool stuck in the kernel (a hung NFS or FUSE mount) cannot keep an interrupt or
//! abort waiting: the round gives up on it, the session ends or goes on, and the stuck
//! call's thread leaves once the file system answers.
//!
//! The stuck mount is played by a real FIFO with no writer, read by a host environment the
//! way a naive one would: a plain blocking `std::fs::read`, which sleeps in `open` until a
//! writer comes.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentloop::exec::{ExecutionEnvironment, FileContent, LocalExecutionEnvironment};
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::session::{
    CloseReason, EventKind, Events, Session, SessionConfig, SessionEvent, StopReason,
};
use serde_json::json;

use support::GENEROUS;
use support::session::*;

/// The tests count this process's call threads: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct BlockingReads(LocalExecutionEnvironment);

impl ExecutionEnvironment for BlockingReads {
    fn read_file(
        &self,
        path: &Path,
        _offset: Option<usize>,
        _limit: Option<usize>,
    ) -> io::Result<FileContent> {
        let bytes = std::fs::read(self.0.working_directory().join(path))?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Ok(FileContent {
            size: bytes.len() as u64,
            total_lines: text.lines().count(),
            text,
        })
    }

    agentloop::forward_execution_environment!(self.0 =>
        read_bytes, write_file, write_file_if_unchanged, remove_file, file_exists, stat,
        list_directory, exec_command, grep, glob, initialize, warnings, cleanup,
        working_directory, platform, os_version, max_command_timeout);
}

/// A temporary directory with the FIFO `stuck.txt`.
struct StuckFile {
    dir: tempfile::TempDir,
    fifo: PathBuf,
}

impl StuckFile {
    fn new() -> StuckFile {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("stuck.txt");
        assert!(
            Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        StuckFile { dir, fifo }
    }
}

/// Lets a reader stuck on `fifo` go: opens the write end without blocking (that fails
/// while nobody reads), writes a line, closes. Whether there was a reader.
fn release(fifo: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    match OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo)
    {
        Ok(mut writer) => writer.write_all(b"late content\n").is_ok(),
        Err(_) => false,
    }
}

/// Releases the FIFO when dropped. Declared after the session, so that it runs first when
/// a failed assertion unwinds: without the fix under test the session's drop would wait
/// for its stuck worker forever.
struct Unstick(PathBuf);

impl Drop for Unstick {
    fn drop(&mut self) {
        release(&self.0);
    }
}

fn session(stuck: &StuckFile) -> (Session, Events) {
    let turns = vec![
        ScriptedTurn::tool_call("read_file", json!({"file_path": "stuck.txt"})),
        ScriptedTurn::text("after the stuck read"),
        ScriptedTurn::text("second answer"),
    ];
    let model = ScriptedModel::new(turns);
    let env = BlockingReads(LocalExecutionEnvironment::new(stuck.dir.path()).unwrap());
    let profile = profile().with_tool(agentloop::tools::read_file());
    let client = support::client_for(model);
    let session = Session::new(profile, Arc::new(env), client, SessionConfig::default()).unwrap();
    let events = session.events();
    (session, events)
}

/// Submits the task and returns once the read is under way: `TOOL_CALL_START` seen and a
/// thread asleep in the kernel waiting for the FIFO's writer.
fn start_the_stuck_read(session: &Session, events: &mut Events) {
    session.submit("read stuck.txt").unwrap();
    collect_until(events, |e| {
        matches!(e.kind, EventKind::ToolCallStart { .. })
    });
    let deadline = Instant::now() + GENEROUS;
    while fifo_waiters() == 0 {
        assert!(Instant::now() < deadline, "the read never reached the FIFO");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How many threads of this process sleep in `open` of a FIFO without a writer (kernel
/// wait channel `wait_for_partner`). Only these tests open a FIFO that way: the library's
/// own reads refuse FIFOs without blocking.
fn fifo_waiters() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("wchan"))
                .is_ok_and(|wchan| wchan.trim() == "wait_for_partner")
        })
        .count()
}

fn tool_call_end(events: &[SessionEvent]) -> (bool, String) {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolCallEnd {
                is_error, error, ..
            } => Some((*is_error, error.clone().unwrap_or_default())),
            _ => None,
        })
        .expect("a TOOL_CALL_END for the stuck call")
}

#[test]
fn abort_ends_the_session_while_a_file_tool_is_blocked() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stuck = StuckFile::new();
    let (session, mut events) = session(&stuck);
    let _unstick = Unstick(stuck.fifo.clone());
    start_the_stuck_read(&session, &mut events);
    let aborted = Instant::now();
    session.abort();
    let rest = collect_to_end(&mut events);
    let took = aborted.elapsed();
    assert!(took < GENEROUS, "SESSION_END after {took:?}");
    let (is_error, error) = tool_call_end(&rest);
    assert!(is_error && error.contains("aborted"), "{error}");
    assert!(matches!(
        rest.last().unwrap().kind,
        EventKind::SessionEnd {
            reason: CloseReason::Aborted,
            ..
        }
    ));
    assert_eq!(stop_reason(&rest), StopReason::Aborted);
    // The file system answers at last: the stuck read returns, and nothing it read
    // reaches the closed stream.
    assert!(release(&stuck.fifo), "the helper still waits on the FIFO");
    let deadline = Instant::now() + GENEROUS;
    while fifo_waiters() > 0 {
        assert!(Instant::now() < deadline, "the call's thread never left");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(events.next().is_none(), "no event after SESSION_END");
}

#[test]
fn interrupt_while_a_file_tool_is_blocked_leaves_a_usable_session() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let stuck = StuckFile::new();
    let (session, mut events) = session(&stuck);
    let _unstick = Unstick(stuck.fifo.clone());
    start_the_stuck_read(&session, &mut events);
    let interrupted = Instant::now();
    session.interrupt();
    let rest = collect_input(&mut events);
    let took = interrupted.elapsed();
    assert!(took < GENEROUS, "INPUT_END after {took:?}");
    let (is_error, error) = tool_call_end(&rest);
    assert!(is_error && error.contains("interrupted"), "{error}");
    assert_eq!(stop_reason(&rest), StopReason::Interrupted);
    assert_eq!(session.history().check_tool_results(), Ok(()));
    // Still stuck, and the session goes on regardless.
    assert_eq!(fifo_waiters(), 1, "the stuck call's thread is still there");
    session.submit("and now?").unwrap();
    let next = collect_input(&mut events);
    let answered = next
        .iter()
        .any(|e| matches!(&e.kind, EventKind::AssistantTextEnd { text, .. } if !text.is_empty()));
    assert!(answered, "{:?}", names(&next));
    assert!(release(&stuck.fifo));
}

/// Truncates its file when dropped.
struct Shorten(PathBuf);

impl Drop for Shorten {
    fn drop(&mut self) {
        let _ = std::fs::File::options()
            .write(true)
            .open(&self.0)
            .and_then(|file| file.set_len(0));
    }
}

/// How far into `path` this process reads it: the offset of a descriptor open on it
/// (`/proc/self/fdinfo`), `None` while none is.
fn read_offset(path: &Path) -> Option<u64> {
    let path = std::fs::canonicalize(path).ok()?;
    std::fs::read_dir("/proc/self/fd")
        .ok()?
        .flatten()
        .find_map(|fd| {
            if std::fs::read_link(fd.path()).ok()? != path {
                return None;
            }
            let info =
                std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.file_name().to_str()?))
                    .ok()?;
            info.lines()
                .find_map(|l| l.strip_prefix("pos:")?.trim().parse().ok())
        })
}

/// A local environment that says whether its files are local as told, and records the
/// name of each thread that reads a file through it.
struct ThreadRecorder {
    inner: LocalExecutionEnvironment,
    local: bool,
    readers: Mutex<Vec<String>>,
}

impl ExecutionEnvironment for ThreadRecorder {
    fn read_file(
        &self,
        path: &Path,
        offset: Option<usize>,
        limit: Option<usize>,
    ) -> io::Result<FileContent> {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.readers.lock().unwrap().push(name);
        self.inner.read_file(path, offset, limit)
    }

    fn files_are_local(&self) -> bool {
        self.local
    }

    agentloop::forward_execution_environment!(self.inner =>
        read_bytes, write_file, write_file_if_unchanged, remove_file, file_exists, stat,
        list_directory, exec_command, grep, glob, initialize, warnings, cleanup,
        working_directory, platform, os_version, max_command_timeout);
}

/// The threads that read `notes.txt`: first through the built-in `read_file`, then through
/// a host tool that reads it the same way, in a session over `ThreadRecorder`.
fn reader_threads(local: bool, allow_outside_working_dir: bool) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
    let env = Arc::new(ThreadRecorder {
        inner: LocalExecutionEnvironment::new(dir.path()).unwrap(),
        local,
        readers: Mutex::new(Vec::new()),
    });
    let host_read = tool("host_read", |_, ctx| {
        let content = ctx
            .env
            .read_file(Path::new("notes.txt"), None, None)
            .map_err(|e| e.to_string())?;
        Ok(content.text.into())
    });
    let turns = vec![
        ScriptedTurn::tool_call("read_file", json!({"file_path": "notes.txt"})),
        ScriptedTurn::tool_call("host_read", json!({})),
        ScriptedTurn::text("done"),
    ];
    let profile = profile()
        .with_tool(agentloop::tools::read_file())
        .with_tool(host_read);
    let mut config = SessionConfig::default();
    config.allow_outside_working_dir = allow_outside_working_dir;
    let client = support::client_for(ScriptedModel::new(turns));
    let session = Session::new(profile, env.clone(), client, config).unwrap();
    let mut events = session.events();
    session.submit("read notes.txt twice").unwrap();
    let seen = collect_input(&mut events);
    assert_eq!(
        stop_reason(&seen),
        StopReason::Completed,
        "{:?}",
        names(&seen)
    );
    drop(session);
    let readers = env.readers.lock().unwrap().clone();
    assert_eq!(readers.len(), 2, "{readers:?}");
    readers
}

#[test]
fn a_single_file_tool_runs_on_the_rounds_thread_where_the_files_are_local() {
    let on = |thread: &str, prefix: &str| thread.starts_with(prefix);
    // Local files: the built-in read runs on the session's own thread; a host tool, which
    // may do anything, still gets a helper thread.
    let readers = reader_threads(true, false);
    assert!(on(&readers[0], "agentloop-session-"), "{readers:?}");
    assert!(on(&readers[1], "agentloop-call-"), "{readers:?}");
    // Files that may not be local, or file tools that may leave the working directory
    // (whose mounts were not judged): a helper thread, which a stuck read cannot hold.
    for (local, outside) in [(false, false), (true, true)] {
        let readers = reader_threads(local, outside);
        assert!(
            readers.iter().all(|r| on(r, "agentloop-call-")),
            "local {local}, outside {outside}: {readers:?}"
        );
    }
}

#[test]
fn the_local_environment_calls_its_files_local_as_their_file_system_type_says() {
    // A fresh temporary directory has nothing mounted below it, so the answer is its own
    // file system's type, which `stat -f` names independently of the mount table.
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();
    let out = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir.path())
        .output()
        .unwrap();
    let kind = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let local = [
        "ext2/ext3",
        "xfs",
        "btrfs",
        "tmpfs",
        "overlayfs",
        "zfs",
        "f2fs",
    ];
    let remote = ["nfs", "fuse", "fuseblk", "cifs", "smb2", "v9fs", "ceph"];
    if local.contains(&kind.as_str()) {
        assert!(env.files_are_local(), "{kind}");
    } else if remote.iter().any(|r| kind.starts_with(r)) {
        assert!(!env.files_are_local(), "{kind}");
    } else {
        eprintln!("skipped: no expectation for a {kind} temporary directory");
    }
    // A working directory that is the root has /proc below it: never local.
    let root = LocalExecutionEnvironment::new("/").unwrap();
    assert!(!root.files_are_local());
}

#[test]
fn an_interrupt_stops_a_huge_local_read_run_without_a_helper_thread() {
    // 64 KiB of text, then 1 TiB of holes: reading it all takes minutes (the holes read as
    // zeros), far past the ceiling; an interrupt must not wait for the line count to finish.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.log");
    let file = std::fs::File::create(&path).unwrap();
    let line = "a line of text\n".repeat(4_400);
    std::io::Write::write_all(&mut &file, line.as_bytes()).unwrap();
    file.set_len(1 << 40).unwrap();
    drop(file);
    let env = Arc::new(ThreadRecorder {
        inner: LocalExecutionEnvironment::new(dir.path()).unwrap(),
        local: true,
        readers: Mutex::new(Vec::new()),
    });
    let turns = vec![
        ScriptedTurn::tool_call("read_file", json!({"file_path": "huge.log"})),
        ScriptedTurn::text("never reached"),
        ScriptedTurn::text("after the interrupt"),
    ];
    let profile = profile().with_tool(agentloop::tools::read_file());
    let client = support::client_for(ScriptedModel::new(turns));
    let session = Session::new(profile, env.clone(), client, SessionConfig::default()).unwrap();
    // Dropped before the session: should the interrupt not stop the read, a failing test
    // cuts the file short so that the read ends and dropping the session does not wait.
    let _shorten = Shorten(path.clone());
    let mut events = session.events();
    session.submit("read huge.log").unwrap();
    collect_until(&mut events, |e| {
        matches!(e.kind, EventKind::ToolCallStart { .. })
    });
    // The read is under way on the session's own thread, past the text and into the holes.
    let deadline = Instant::now() + GENEROUS;
    while read_offset(&path).is_none_or(|at| at <= line.len() as u64) {
        assert!(
            Instant::now() < deadline,
            "the read never reached the holes"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let interrupted = Instant::now();
    session.interrupt();
    let rest = collect_input(&mut events);
    let took = interrupted.elapsed();
    assert!(
        env.readers.lock().unwrap()[0].starts_with("agentloop-session-"),
        "the read ran without a helper thread"
    );
    assert!(took < GENEROUS, "INPUT_END after {took:?}");
    let (is_error, error) = tool_call_end(&rest);
    assert!(is_error && error.contains("interrupted"), "{error}");
    assert_eq!(stop_reason(&rest), StopReason::Interrupted);
    // The session goes on.
    session.submit("and now?").unwrap();
    let next = collect_input(&mut events);
    assert_eq!(
        stop_reason(&next),
        StopReason::Completed,
        "{:?}",
        names(&next)
    );
}
