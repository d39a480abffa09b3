//! Background processes through an `ExecutionEnvironment`: real bash, real pipes, real
//! process groups, checked through `/proc`. The suite's functions take any environment;
//! they run here on the local environment (`local::*`) and under the sandbox
//! (`sandboxed::*`), and in `remote/background.rs` through the exec-server (stdio).

use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::{
    BackgroundProcess, CommandRequest, Enforcement, ExecutionEnvironment,
    LocalExecutionEnvironment, Network, OutputStream, Sandbox, SandboxPolicy,
};
use support::GENEROUS;

/// Output limit of the suite's processes (per stream), unless a test sets its own.
pub const LIMIT: usize = 1 << 20;

/// Declares one test per suite function for an environment made by `$make`.
macro_rules! background_suite {
    ($make:expr) => {
        crate::exec::background::background_suite!($make =>
            a_cat_echoes_its_input_and_ends_at_end_of_input,
            an_exit_is_reported_at_once_with_its_status,
            output_is_read_on_from_where_the_last_read_ended,
            a_flood_stays_within_its_buffer_with_the_dropped_middle_counted,
            kill_ends_the_whole_group,
            dropping_the_handle_ends_the_whole_group,
            a_signal_reaches_the_group,
            writing_to_a_process_that_has_exited_says_so,
            a_read_waits_for_new_output_and_a_cancel_ends_the_wait,
        );
    };
    ($make:expr => $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                if let Some((_keep, env)) = $make {
                    crate::exec::background::$name(&*env);
                }
            }
        )*
    };
}

pub(crate) use background_suite;

/// Keeps whatever an environment needs alive (its directory, its server).
pub type Keep = Box<dyn std::any::Any>;

pub mod local {
    background_suite!(Some(super::local_env()));
}

pub mod sandboxed {
    background_suite!(super::sandboxed_env());
}

fn local_env() -> (Keep, Box<dyn ExecutionEnvironment>) {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_kill_grace(Duration::from_millis(500));
    (Box::new(dir), Box::new(env))
}

/// The local environment under `WorkspaceWrite` (network on); `None`, with the reason
/// printed, where the kernel cannot enforce it.
pub fn sandboxed_env() -> Option<(Keep, Box<dyn ExecutionEnvironment>)> {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxPolicy::workspace_write())
        .with_network(Network::On)
        .with_enforcement(Enforcement::Required);
    match LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_kill_grace(Duration::from_millis(500))
        .with_sandbox(sandbox)
    {
        Ok(env) => Some((Box::new(dir), Box::new(env))),
        Err(err) => {
            eprintln!("skipped: the kernel cannot enforce the sandbox here: {err}");
            None
        }
    }
}

/// Starts `command` with `limit` bytes per stream; exits are sent on the returned channel.
pub fn start(
    env: &dyn ExecutionEnvironment,
    command: &str,
    limit: usize,
) -> (
    Box<dyn BackgroundProcess>,
    crossbeam_channel::Receiver<agentloop::exec::ExecResult>,
) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let request = CommandRequest::new(command, Duration::from_secs(1));
    let process = env
        .start_background(
            &request,
            limit,
            Box::new(move |result| {
                let _ = tx.send(result.clone());
            }),
        )
        .expect("the background command starts");
    (process, rx)
}

/// Reads `stream` from `from` until its text contains `wanted` (under the ceiling);
/// returns everything read and where the next read starts.
pub fn read_until(
    process: &dyn BackgroundProcess,
    stream: OutputStream,
    mut from: u64,
    wanted: &str,
) -> (String, u64) {
    let deadline = Instant::now() + GENEROUS;
    let mut text = String::new();
    while !text.contains(wanted) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no {wanted:?} in {text:?}");
        let slice = process
            .read(stream, from, usize::MAX, left, &CancelToken::new())
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&slice.bytes));
        from = slice.end;
        if process
            .wait(Duration::ZERO, &CancelToken::new())
            .unwrap()
            .is_some()
            && slice.bytes.is_empty()
        {
            assert!(text.contains(wanted), "exited without {wanted:?}: {text:?}");
        }
    }
    (text, from)
}

/// Whether `pid` runs (a zombie does not).
pub fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

/// Waits (under the ceiling) until none of `pids` runs.
pub fn assert_all_gone(pids: &[i32]) {
    let deadline = Instant::now() + GENEROUS;
    while let Some(pid) = pids.iter().find(|&&pid| running(pid)) {
        assert!(Instant::now() < deadline, "process {pid} is still running");
        thread::sleep(Duration::from_millis(10));
    }
}

/// A command that prints `pid N` with its pid as this process sees it (also from inside
/// a PID namespace: `/proc` is the agent's), then sleeps.
const SLEEPER: &str = "sh -c 'echo pid $(cut -d\" \" -f4 /proc/self/stat); exec sleep 300'";

/// The first `n` pids the process printed (as `pid N` lines), waiting for them.
pub fn read_pids(process: &dyn BackgroundProcess, n: usize) -> Vec<i32> {
    let (mut text, mut from) = (String::new(), 0);
    loop {
        let pids: Vec<i32> = text
            .lines()
            .filter_map(|l| l.strip_prefix("pid ")?.trim().parse().ok())
            .collect();
        if pids.len() >= n && text.ends_with('\n') {
            return pids;
        }
        let (more, next) = read_until(process, OutputStream::Stdout, from, "\n");
        text.push_str(&more);
        from = next;
    }
}

pub fn a_cat_echoes_its_input_and_ends_at_end_of_input(env: &dyn ExecutionEnvironment) {
    let (cat, exits) = start(env, "cat", LIMIT);
    cat.write_stdin(b"hello background\n").unwrap();
    let (text, from) = read_until(&*cat, OutputStream::Stdout, 0, "hello background\n");
    assert_eq!(text, "hello background\n");
    cat.write_stdin(b"second line\n").unwrap();
    let (text, _) = read_until(&*cat, OutputStream::Stdout, from, "second line\n");
    assert_eq!(text, "second line\n");
    cat.close_stdin().unwrap();
    let result = exits
        .recv_timeout(GENEROUS)
        .expect("cat exits at end of input");
    assert_eq!((result.exit_code, result.cancelled), (Some(0), false));
    assert_eq!(result.stdout_bytes, 29);
    let waited = cat.wait(GENEROUS, &CancelToken::new()).unwrap();
    assert_eq!(waited, Some(result));
    assert!(!running(cat.pid() as i32));
}

pub fn an_exit_is_reported_at_once_with_its_status(env: &dyn ExecutionEnvironment) {
    let started = Instant::now();
    let (process, exits) = start(env, "echo bye >&2; sleep 0.2; exit 3", LIMIT);
    assert!(
        process
            .wait(Duration::ZERO, &CancelToken::new())
            .unwrap()
            .is_none(),
        "still running right after the start"
    );
    let result = exits.recv_timeout(GENEROUS).expect("the exit is reported");
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(
        (result.exit_code, result.signal, result.cancelled),
        (Some(3), None, false)
    );
    assert_eq!((result.stdout_bytes, result.stderr_bytes), (0, 4));
    let err = process
        .read(
            OutputStream::Stderr,
            0,
            100,
            Duration::ZERO,
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(err.bytes, b"bye\n");
    // Killing what has exited gives the same result.
    assert_eq!(process.kill().unwrap(), result);
}

pub fn output_is_read_on_from_where_the_last_read_ended(env: &dyn ExecutionEnvironment) {
    let (process, _) = start(
        env,
        "while read line; do echo \"out $line\"; echo \"err $line\" >&2; done",
        LIMIT,
    );
    let mut from = [0u64; 2];
    for word in ["one", "two", "three"] {
        process.write_stdin(format!("{word}\n").as_bytes()).unwrap();
        for (i, stream) in [OutputStream::Stdout, OutputStream::Stderr]
            .into_iter()
            .enumerate()
        {
            let prefix = if i == 0 { "out" } else { "err" };
            let (text, next) =
                read_until(&*process, stream, from[i], &format!("{prefix} {word}\n"));
            assert_eq!(text, format!("{prefix} {word}\n"), "only the new line");
            from[i] = next;
        }
    }
    let all = process
        .read(
            OutputStream::Stdout,
            0,
            usize::MAX,
            Duration::ZERO,
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(all.bytes, b"out one\nout two\nout three\n");
    assert_eq!((all.end, all.total, all.dropped), (26, 26, 0));
    let limited = process
        .read(
            OutputStream::Stdout,
            4,
            3,
            Duration::ZERO,
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!((limited.bytes.as_slice(), limited.end), (&b"one"[..], 7));
}

pub fn a_flood_stays_within_its_buffer_with_the_dropped_middle_counted(
    env: &dyn ExecutionEnvironment,
) {
    const SMALL: usize = 64 * 1024;
    let (yes, _) = start(env, "yes flood", SMALL);
    // Wait until it has written far more than its buffer holds.
    let deadline = Instant::now() + GENEROUS;
    let mut total = 0;
    while total < 20 * SMALL as u64 {
        assert!(Instant::now() < deadline, "only {total} bytes in");
        let slice = yes
            .read(
                OutputStream::Stdout,
                total,
                1,
                Duration::from_millis(50),
                &CancelToken::new(),
            )
            .unwrap();
        total = slice.total;
    }
    let all = yes
        .read(
            OutputStream::Stdout,
            0,
            usize::MAX,
            Duration::ZERO,
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(
        all.bytes.len(),
        SMALL,
        "the buffer holds its limit, no more"
    );
    assert!(
        all.dropped > 0 && all.dropped_at == SMALL / 4,
        "{}",
        all.dropped
    );
    assert_eq!(all.end, all.bytes.len() as u64 + all.dropped);
    assert!(all.total >= 20 * SMALL as u64);
    assert!(
        all.bytes[..SMALL / 4].starts_with(b"flood\nflood\n"),
        "the head is kept"
    );
    let result = yes.kill().unwrap();
    assert!(result.cancelled && result.capture_truncated);
    assert!(result.stdout_bytes >= all.total);
    assert!(!running(yes.pid() as i32));
}

pub fn kill_ends_the_whole_group(env: &dyn ExecutionEnvironment) {
    let (process, exits) = start(env, &format!("{SLEEPER} & {SLEEPER} & wait"), LIMIT);
    let mut pids = read_pids(&*process, 2);
    pids.push(process.pid() as i32);
    let started = Instant::now();
    let result = process.kill().unwrap();
    assert!(result.cancelled, "{result:?}");
    assert!(started.elapsed() < GENEROUS);
    assert_all_gone(&pids);
    assert_eq!(exits.recv_timeout(GENEROUS).unwrap(), result);
}

pub fn dropping_the_handle_ends_the_whole_group(env: &dyn ExecutionEnvironment) {
    let (process, exits) = start(env, &format!("{SLEEPER} & wait"), LIMIT);
    let mut pids = read_pids(&*process, 1);
    pids.push(process.pid() as i32);
    drop(process);
    assert_all_gone(&pids);
    let result = exits.recv_timeout(GENEROUS).expect("the exit is reported");
    assert!(result.cancelled);
}

pub fn a_signal_reaches_the_group(env: &dyn ExecutionEnvironment) {
    let (process, _) = start(
        env,
        "trap 'echo got usr1' USR1; echo ready; while :; do sleep 0.02; done",
        LIMIT,
    );
    let (_, from) = read_until(&*process, OutputStream::Stdout, 0, "ready");
    process.signal(libc::SIGUSR1).unwrap();
    read_until(&*process, OutputStream::Stdout, from, "got usr1");
    assert!(
        process
            .wait(Duration::ZERO, &CancelToken::new())
            .unwrap()
            .is_none()
    );
    process.signal(libc::SIGKILL).unwrap();
    let result = process
        .wait(GENEROUS, &CancelToken::new())
        .unwrap()
        .expect("SIGKILL ends it");
    assert_eq!(result.signal, Some(libc::SIGKILL));
}

pub fn writing_to_a_process_that_has_exited_says_so(env: &dyn ExecutionEnvironment) {
    let (process, exits) = start(env, "exit 0", LIMIT);
    exits.recv_timeout(GENEROUS).unwrap();
    let err = process.write_stdin(b"anyone?\n").unwrap_err();
    assert!(err.to_string().contains("exited"), "{err}");
    let (cat, _) = start(env, "cat", LIMIT);
    cat.close_stdin().unwrap();
    let err = cat.write_stdin(b"late\n").unwrap_err();
    assert!(err.to_string().contains("cannot write"), "{err}");
}

pub fn a_read_waits_for_new_output_and_a_cancel_ends_the_wait(env: &dyn ExecutionEnvironment) {
    let (cat, _) = start(env, "cat", LIMIT);
    let cat: Arc<dyn BackgroundProcess> = Arc::from(cat);
    // Nothing comes: the read waits its whole time, then returns nothing.
    let started = Instant::now();
    let nothing = cat
        .read(
            OutputStream::Stdout,
            0,
            100,
            Duration::from_millis(200),
            &CancelToken::new(),
        )
        .unwrap();
    assert!(nothing.bytes.is_empty() && started.elapsed() >= Duration::from_millis(200));
    // Output ends a long wait.
    let cancel = CancelToken::new();
    let waiting = {
        let (cat, cancel) = (Arc::clone(&cat), cancel.clone());
        thread::spawn(move || cat.read(OutputStream::Stdout, 0, 100, GENEROUS * 2, &cancel))
    };
    cat.write_stdin(b"wake\n").unwrap();
    let started = Instant::now();
    let slice = waiting.join().unwrap().unwrap();
    assert_eq!(slice.bytes, b"wake\n");
    assert!(started.elapsed() < GENEROUS);
    // A cancel ends one too.
    let cancelled = {
        let (cat, cancel) = (Arc::clone(&cat), cancel.clone());
        thread::spawn(move || cat.read(OutputStream::Stdout, 5, 100, GENEROUS * 2, &cancel))
    };
    let started = Instant::now();
    cancel.cancel();
    let slice = cancelled.join().unwrap().unwrap();
    assert!(slice.bytes.is_empty() && started.elapsed() < GENEROUS);
}

#[test]
fn an_environment_without_background_processes_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let env = support::session::DirEnv::new(dir.path());
    let request = CommandRequest::new("sleep 1", Duration::from_secs(1));
    let err = env
        .start_background(&request, LIMIT, Box::new(|_| {}))
        .err()
        .expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::Unsupported);
    assert!(err.to_string().contains("foreground"), "{err}");
}

#[test]
fn secrets_are_redacted_from_background_output() {
    const TOKEN: &str = "tok-0123456789abcdefghijklmnop";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("leak.txt"), format!("key={TOKEN}\n")).unwrap();
    let env = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_secret("DEPLOY_TOKEN", TOKEN);
    let (process, exits) = start(&env, "cat leak.txt; cat leak.txt >&2", LIMIT);
    exits.recv_timeout(GENEROUS).unwrap();
    for stream in [OutputStream::Stdout, OutputStream::Stderr] {
        let slice = process
            .read(stream, 0, usize::MAX, Duration::ZERO, &CancelToken::new())
            .unwrap();
        assert_eq!(slice.bytes, b"key=[REDACTED:DEPLOY_TOKEN]\n", "{stream:?}");
    }
}

#[test]
fn a_background_process_runs_where_it_was_asked_to_with_the_filtered_environment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let base = [
        ("PATH", std::env::var("PATH").unwrap()),
        (
            "OPENAI_API_KEY",
            "sk-0123456789abcdefghijklmnop".to_string(),
        ),
    ]
    .map(|(k, v)| (k.to_string(), v))
    .into();
    let env = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_base_env(base);
    let mut request = CommandRequest::new(
        "pwd; echo key=${OPENAI_API_KEY:-none} given=$GIVEN",
        Duration::from_secs(1),
    );
    request.working_dir = Some("sub".into());
    request.env.insert("GIVEN".into(), "yes".into());
    let (tx, rx) = crossbeam_channel::bounded(1);
    let process = env
        .start_background(&request, LIMIT, Box::new(move |r| drop(tx.send(r.clone()))))
        .unwrap();
    rx.recv_timeout(GENEROUS).unwrap();
    let out = process
        .read(
            OutputStream::Stdout,
            0,
            usize::MAX,
            Duration::ZERO,
            &CancelToken::new(),
        )
        .unwrap();
    let sub = dir.path().canonicalize().unwrap().join("sub");
    assert_eq!(
        String::from_utf8_lossy(&out.bytes),
        format!("{}\nkey=none given=yes\n", sub.display())
    );
    let missing = CommandRequest::new("true", Duration::from_secs(1));
    let mut missing = missing;
    missing.working_dir = Some(Path::new("nope").into());
    let err = env
        .start_background(&missing, LIMIT, Box::new(|_| {}))
        .err()
        .unwrap();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
}

/// A background command that prints its own pid in its namespace (`ns N`), starts a daemon
/// that leaves its process group (`setsid`, printing its pid as the agent sees it), and
/// sleeps.
const DAEMONISING: &str = "echo ns $$; setsid sh -c 'echo pid $(cut -d\" \" -f4 /proc/self/stat); exec sleep 300' </dev/null & sleep 300";

#[test]
fn under_the_sandbox_a_daemon_that_left_the_group_ends_with_its_background_process() {
    let Some((_keep, env)) = sandboxed_env() else {
        return;
    };
    let (process, _) = start(&*env, DAEMONISING, LIMIT);
    let daemon = read_pids(&*process, 1)[0];
    let (text, _) = read_until(&*process, OutputStream::Stdout, 0, "ns ");
    if !text.contains("ns 1\n") {
        eprintln!("skipped: no PID namespace for background processes here: {text:?}");
        return;
    }
    assert!(running(daemon));
    let result = process.kill().unwrap();
    assert!(result.cancelled && !result.escaped_processes, "{result:?}");
    assert_all_gone(&[daemon, process.pid() as i32]);
}

#[test]
fn without_the_sandbox_a_daemon_that_left_the_group_is_reported_as_escaped() {
    let (_keep, env) = local_env();
    let (process, _) = start(&*env, DAEMONISING, LIMIT);
    let daemon = read_pids(&*process, 1)[0];
    let result = process.kill().unwrap();
    // It holds the output pipes and left the group: reported, not waited for, as for a
    // foreground command.
    assert!(result.escaped_processes, "{result:?}");
    assert!(running(daemon), "the daemon lives on outside the group");
    // SAFETY: the daemon's pid, read from its own /proc entry just now.
    unsafe { libc::kill(daemon, libc::SIGKILL) };
    assert_all_gone(&[daemon]);
}

#[test]
fn under_the_sandbox_a_background_process_that_ignores_nothing_is_killed_without_the_grace() {
    // As the init of its namespace, `sleep` does not receive the SIGTERM it has no handler
    // for; it gets the SIGKILL that ends it as SIGTERM would have. The grace here is long
    // enough to tell the two apart.
    let dir = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxPolicy::workspace_write()).with_network(Network::On);
    let Ok(env) = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_kill_grace(GENEROUS * 2)
        .with_sandbox(sandbox)
    else {
        eprintln!("skipped: no sandbox here");
        return;
    };
    let (process, _) = start(&env, "exec sleep 300", LIMIT);
    let started = Instant::now();
    let result = process.kill().unwrap();
    assert!(started.elapsed() < GENEROUS * 2, "it waited out the grace");
    assert_eq!(result.signal, Some(libc::SIGKILL));
}
