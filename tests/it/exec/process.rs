//! Commands through LocalExecutionEnvironment: real bash, real process groups, real pipes.
//!
//! Time bounds are generous ceilings that catch hangs; the speed figures come from
//! `cargo run --release --example bench -- exec`.

use std::fs;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::{
    CommandRequest, ExecResult, ExecutionEnvironment, LocalExecutionEnvironment, OutputStream,
};
use support::GENEROUS;

fn workspace() -> (tempfile::TempDir, LocalExecutionEnvironment) {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();
    (dir, env)
}

fn run(env: &LocalExecutionEnvironment, command: &str, timeout_ms: u64) -> (ExecResult, Duration) {
    let request = CommandRequest::new(command, Duration::from_millis(timeout_ms));
    let start = Instant::now();
    let result = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .expect("the command starts");
    (result, start.elapsed())
}

/// The first line of output that is a pid.
fn pid_in(text: &str) -> libc::pid_t {
    text.lines()
        .find_map(|line| line.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text:?}"))
}

fn kill_fails_with_esrch(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 sends nothing; it only asks whether `pid` exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

fn is_zombie(pid: libc::pid_t) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = stat.rsplit_once(')')?.1.trim_start().to_string();
            after.chars().next()
        })
        == Some('Z')
}

/// Asserts that `pid` no longer runs. A killed grandchild is orphaned and reaped by init;
/// some container inits reap only every few seconds, so at first it may still be a zombie
/// (dead, not running). The test then waits, with a ceiling, for `kill(pid, 0)` to fail
/// with ESRCH.
fn assert_gone(pid: libc::pid_t) {
    assert!(
        kill_fails_with_esrch(pid) || is_zombie(pid),
        "process {pid} is still running"
    );
    let deadline = Instant::now() + GENEROUS;
    while !kill_fails_with_esrch(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} was never reaped (kill(pid, 0) did not fail with ESRCH)"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn exit_code_stdout_and_stderr_are_reported_separately() {
    let (_dir, env) = workspace();
    let (result, _) = run(&env, "echo out; echo err >&2; exit 3", 10_000);
    assert_eq!(result.stdout, "out\n");
    assert_eq!(result.stderr, "err\n");
    assert_eq!((result.exit_code, result.signal), (Some(3), None));
    assert!(!result.timed_out && !result.cancelled && !result.escaped_processes);
    assert_eq!((result.stdout_bytes, result.stderr_bytes), (4, 4));
    assert!(!result.capture_truncated);
}

#[test]
fn the_shell_is_reaped_before_the_call_returns() {
    let (_dir, env) = workspace();
    let (result, _) = run(&env, "echo $$", 10_000);
    // Our own child: if we had not reaped it, it would be a zombie and kill would succeed.
    assert!(kill_fails_with_esrch(pid_in(&result.stdout)));
}

#[test]
fn commands_run_in_the_working_directory_or_the_requested_subdirectory() {
    let (dir, env) = workspace();
    let root = fs::canonicalize(dir.path()).unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    let (result, _) = run(&env, "pwd -P", 10_000);
    assert_eq!(PathBuf::from(result.stdout.trim()), root);

    let mut request = CommandRequest::new("pwd -P", Duration::from_secs(10));
    request.working_dir = Some("sub".into());
    let result = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .unwrap();
    assert_eq!(PathBuf::from(result.stdout.trim()), root.join("sub"));

    request.working_dir = Some("missing".into());
    let err = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn timeout_kills_the_whole_process_group() {
    let (_dir, env) = workspace();
    let (result, elapsed) = run(&env, "sleep 30 & echo $!; wait", 1000);
    assert!(result.timed_out, "{result:?}");
    assert!(elapsed < GENEROUS, "took {elapsed:?}");
    assert!(elapsed >= Duration::from_millis(1000), "took {elapsed:?}");
    assert_eq!(
        ExecResult::timeout_message(Duration::from_millis(1000)),
        "[ERROR: Command timed out after 1000ms. Partial output is shown above.\n\
         You can retry with a longer timeout by setting the timeout_ms parameter.]"
    );
    // The partial output is kept, and the grandchild it names is gone.
    assert_gone(pid_in(&result.stdout));
}

#[test]
fn a_command_ignoring_sigterm_is_killed_with_sigkill_after_the_grace() {
    let (_dir, env) = workspace();
    let grace = Duration::from_secs(2); // the default
    let (result, elapsed) = run(&env, "trap '' TERM; sleep 30 & echo $!; wait", 500);
    assert!(result.timed_out);
    assert_eq!(result.signal, Some(libc::SIGKILL), "{result:?}");
    assert!(
        elapsed >= Duration::from_millis(500) + grace,
        "returned before the grace ended: {elapsed:?}"
    );
    assert!(elapsed < GENEROUS, "took {elapsed:?}");
    assert_gone(pid_in(&result.stdout));
}

#[test]
fn the_kill_grace_is_configurable() {
    // A grace longer than the default 2 s: that the call took at least the timeout plus
    // this grace shows the configured one applied (a lower bound, not a speed).
    let (dir, _) = workspace();
    let grace = Duration::from_secs(3);
    let env = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_kill_grace(grace);
    let (result, elapsed) = run(&env, "trap '' TERM; sleep 30", 300);
    assert_eq!(result.signal, Some(libc::SIGKILL));
    assert!(
        elapsed >= Duration::from_millis(300) + grace,
        "killed before the configured grace ended: {elapsed:?}"
    );
    assert!(elapsed < GENEROUS, "{elapsed:?}");
}

#[test]
fn a_background_job_holding_the_pipes_does_not_delay_the_return() {
    let (_dir, env) = workspace();
    let (result, elapsed) = run(&env, "sleep 30 & echo $!; echo done", 10_000);
    assert!(elapsed < GENEROUS, "took {elapsed:?}");
    assert!(result.stdout.ends_with("done\n"), "{:?}", result.stdout);
    assert_eq!(result.exit_code, Some(0));
    assert!(!result.escaped_processes);
    assert_gone(pid_in(&result.stdout));
}

#[test]
fn a_background_job_without_the_pipes_is_terminated_when_the_command_ends() {
    let (_dir, env) = workspace();
    let (result, elapsed) = run(&env, "sleep 30 >/dev/null 2>&1 & echo $!", 10_000);
    assert!(elapsed < GENEROUS, "took {elapsed:?}");
    assert_gone(pid_in(&result.stdout));
}

#[test]
fn a_process_that_escaped_the_group_is_reported_and_not_waited_for() {
    let (_dir, env) = workspace();
    let (result, elapsed) = run(&env, "setsid sleep 30 & echo $!; echo done", 10_000);
    let escaped = pid_in(&result.stdout);
    // Clean up what the library deliberately left alone.
    // SAFETY: `escaped` is the pid the command printed for its setsid'd sleep.
    unsafe { libc::kill(escaped, libc::SIGKILL) };
    assert!(elapsed < GENEROUS, "took {elapsed:?}");
    assert!(result.escaped_processes, "{result:?}");
    assert!(result.stdout.ends_with("done\n"));
}

#[test]
fn cat_without_arguments_returns_at_once_with_empty_output() {
    let (_dir, env) = workspace();
    let (result, elapsed) = run(&env, "cat", 10_000);
    assert!(elapsed < GENEROUS, "took {elapsed:?}");
    assert_eq!((result.stdout.as_str(), result.exit_code), ("", Some(0)));
}

#[test]
fn output_printed_before_a_timeout_is_kept() {
    let (_dir, env) = workspace();
    let streamed = Mutex::new(Vec::new());
    let request = CommandRequest::new(
        // Three lines at once, then nothing until long after the timeout: what was printed
        // before it is kept whatever the machine's load.
        "echo line1; echo line2; echo line3; sleep 30; echo line10",
        Duration::from_millis(350),
    );
    let result = env
        .exec_command(
            &request,
            &|stream, chunk| {
                assert_eq!(stream, OutputStream::Stdout);
                streamed.lock().unwrap().extend_from_slice(chunk);
            },
            &CancelToken::new(),
        )
        .unwrap();
    assert!(result.timed_out);
    assert!(
        result.stdout.starts_with("line1\nline2\nline3\n"),
        "{:?}",
        result.stdout
    );
    assert!(!result.stdout.contains("line10"));
    assert_eq!(streamed.into_inner().unwrap(), result.stdout.as_bytes());
    let shown = format!(
        "{}\n{}",
        result.stdout,
        ExecResult::timeout_message(request.timeout)
    );
    assert!(shown.contains("line3\n") && shown.contains("timed out after 350ms"));
}

#[test]
fn output_reaches_the_callback_while_the_command_is_still_running() {
    let (_dir, env) = workspace();
    let cancel = CancelToken::new();
    let (seen_tx, seen_rx) = crossbeam_channel::unbounded::<Vec<u8>>();
    let request = CommandRequest::new("echo first; sleep 30; echo never", Duration::from_secs(20));
    let result = thread::scope(|scope| {
        let running = scope.spawn(|| {
            env.exec_command(
                &request,
                &|_, chunk| seen_tx.send(chunk.to_vec()).unwrap(),
                &cancel,
            )
        });
        let first = seen_rx
            .recv_timeout(GENEROUS)
            .expect("the first line arrives while the command sleeps");
        assert_eq!(first, b"first\n");
        cancel.cancel();
        running.join().unwrap().unwrap()
    });
    assert!(result.cancelled);
    assert_eq!(result.stdout, "first\n");
}

#[test]
fn fifty_megabytes_on_both_pipes_at_once_finish_with_exact_totals_and_a_bounded_capture() {
    let (_dir, env) = workspace();
    const SIZE: u64 = 50 * 1024 * 1024;
    let streamed = [AtomicU64::new(0), AtomicU64::new(0)];
    let request = CommandRequest::new(
        format!(
            "yes 0123456789abcdef | head -c {SIZE} & yes fedcba9876543210 | head -c {SIZE} >&2; wait"
        ),
        Duration::from_secs(120),
    );
    let result = env
        .exec_command(
            &request,
            &|stream, chunk| {
                let i = usize::from(stream == OutputStream::Stderr);
                streamed[i].fetch_add(chunk.len() as u64, Ordering::Relaxed);
            },
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(result.exit_code, Some(0));
    assert_eq!((result.stdout_bytes, result.stderr_bytes), (SIZE, SIZE));
    assert_eq!(streamed[0].load(Ordering::Relaxed), SIZE);
    assert_eq!(streamed[1].load(Ordering::Relaxed), SIZE);
    assert!(result.capture_truncated);
    // 1 MiB head + 1 MiB tail + the omission marker line.
    let cap = 2 * 1024 * 1024 + 100;
    assert!(result.stdout.len() <= cap, "{}", result.stdout.len());
    assert!(result.stderr.len() <= cap, "{}", result.stderr.len());
    assert!(result.stdout.starts_with("0123456789abcdef\n"));
    assert!(result.stderr.starts_with("fedcba9876543210\n"));
    assert!(result.stdout.contains("bytes of output omitted"));
}

#[test]
fn cancelling_a_running_command_returns_quickly_and_the_group_is_gone() {
    let (_dir, env) = workspace();
    let cancel = CancelToken::new();
    let (line_tx, line_rx) = crossbeam_channel::unbounded::<Vec<u8>>();
    let request = CommandRequest::new("sleep 30 & echo $!; wait", Duration::from_secs(60));
    let (result, after_cancel) = thread::scope(|scope| {
        let running = scope.spawn(|| {
            let result = env.exec_command(
                &request,
                &|_, chunk| line_tx.send(chunk.to_vec()).unwrap(),
                &cancel,
            );
            (result, Instant::now())
        });
        line_rx
            .recv_timeout(GENEROUS)
            .expect("the command prints its background pid");
        let cancelled_at = Instant::now();
        cancel.cancel();
        let (result, returned_at) = running.join().unwrap();
        (result.unwrap(), returned_at - cancelled_at)
    });
    assert!(result.cancelled && !result.timed_out, "{result:?}");
    // A ceiling that catches a hang (the command sleeps 30 s), generous for a loaded machine;
    // the bench measures the real latency.
    assert!(after_cancel < GENEROUS, "took {after_cancel:?}");
    assert_gone(pid_in(&result.stdout));
}

#[test]
fn a_command_cancelled_before_it_starts_never_runs() {
    let (dir, env) = workspace();
    let cancel = CancelToken::new();
    cancel.cancel();
    let request = CommandRequest::new("touch ran", Duration::from_secs(10));
    let result = env.exec_command(&request, &|_, _| {}, &cancel).unwrap();
    assert!(result.cancelled);
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn timeouts_are_clamped_to_the_maximum() {
    let (dir, _) = workspace();
    let env = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_max_command_timeout(Duration::from_millis(300));
    assert_eq!(env.max_command_timeout(), Duration::from_millis(300));
    let (result, elapsed) = run(&env, "sleep 30", 60_000);
    assert!(result.timed_out);
    assert!(elapsed < GENEROUS, "took {elapsed:?}");
}

#[test]
fn invalid_utf8_output_is_replaced_not_rejected() {
    let (_dir, env) = workspace();
    let (result, _) = run(&env, r"printf 'ok\377\n'", 10_000);
    assert_eq!(result.stdout, "ok\u{fffd}\n");
    assert_eq!(result.stdout_bytes, 4);
}

#[test]
fn a_running_command_costs_no_thread_and_its_output_reaches_the_callback_on_the_calling_thread() {
    // The thread that runs the command reads its pipes while it waits: no output reader
    // thread exists while the command runs, and the callback runs on the caller.
    let (_dir, env) = workspace();
    let caller = thread::current().id();
    let seen: Mutex<Option<(thread::ThreadId, Vec<String>)>> = Mutex::new(None);
    let request = CommandRequest::new("echo started; sleep 0.3", Duration::from_secs(10));
    let result = env
        .exec_command(
            &request,
            &|_, _| {
                let names = fs::read_dir("/proc/self/task")
                    .unwrap()
                    .filter_map(|task| fs::read_to_string(task.ok()?.path().join("comm")).ok())
                    .map(|name| name.trim().to_string())
                    .collect();
                seen.lock()
                    .unwrap()
                    .get_or_insert((thread::current().id(), names));
            },
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(result.stdout, "started\n");
    let (on, names) = seen.into_inner().unwrap().expect("the callback ran");
    assert_eq!(on, caller, "the callback ran on another thread");
    assert!(
        !names.iter().any(|n| n.starts_with("agentloop-exec")),
        "a thread for the command: {names:?}"
    );
}

#[test]
fn output_written_during_the_grace_period_is_read_so_the_command_can_finish() {
    // After SIGTERM the command's trap writes 200 KB (more than a pipe holds) and exits 0:
    // unless the pipes are read during the grace period, it blocks until SIGKILL.
    let (_dir, env) = workspace();
    let script = "trap 'head -c 200000 /dev/zero | tr \"\\0\" x; exit 0' TERM; \
                  echo ready; while :; do sleep 0.05; done";
    let (result, elapsed) = run(&env, script, 300);
    assert!(result.timed_out, "{result:?}");
    assert_eq!(
        result.signal, None,
        "killed instead of finishing: {result:?}"
    );
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(result.stdout_bytes, "ready\n".len() as u64 + 200_000);
    assert!(elapsed < GENEROUS, "{elapsed:?}");
}
