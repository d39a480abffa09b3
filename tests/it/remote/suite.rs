//! The exec suite through RemoteExecutionEnvironment, once per transport: the exec-server
//! as a direct child (`stdio::*`), behind ssh to a private sshd (`ssh::*`) and through
//! `podman://` into a container (`podman::*`). Each test
//! ends by dropping the environment and checking that the server is gone; the ones that
//! start background processes check those too.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::{
    CommandRequest, ExecResult, ExecutionEnvironment, GrepOptions, OutputStream,
};
use agentloop::unstable::EnvironmentContext;

use super::{Fixture, SECRET, Via, assert_gone, pids_in, run};

use support::GENEROUS;

/// Declares `stdio::<name>`, `ssh::<name>` and `podman::<name>` running `body` with a fresh fixture.
macro_rules! both_transports {
    ($($name:ident),* $(,)?) => {
        pub mod stdio {
            $(#[test] fn $name() { if let Some(f) = super::Fixture::new(super::Via::Stdio) { super::$name(f) } })*
        }
        pub mod ssh {
            $(#[test] fn $name() { if let Some(f) = super::Fixture::new(super::Via::Ssh) { super::$name(f) } })*
        }
        pub mod podman {
            $(#[test] fn $name() { if let Some(f) = super::Fixture::new(super::Via::Podman) { super::$name(f) } })*
        }
    };
}

both_transports!(
    commands_report_exit_codes_streams_and_run_in_the_working_directory,
    file_operations_behave_as_locally,
    a_timeout_keeps_and_streams_the_partial_output,
    a_command_ignoring_sigterm_is_killed_after_the_grace,
    a_background_job_does_not_hang_the_call,
    fifty_megabytes_of_output_stay_bounded_with_exact_totals,
    secrets_in_the_server_environment_never_reach_commands,
    cancelling_kills_the_remote_group,
    parallel_calls_share_one_connection,
    the_prompt_describes_the_remote_side,
);

fn commands_report_exit_codes_streams_and_run_in_the_working_directory(f: Fixture) {
    let r = run(&f.env, "echo out; echo err >&2; pwd; exit 3", 20_000);
    let dir = f.dir.path().canonicalize().unwrap();
    assert_eq!(r.stdout, format!("out\n{}\n", dir.display()));
    assert_eq!((r.stderr.as_str(), r.exit_code), ("err\n", Some(3)));
    f.env.write_file(Path::new("sub/keep"), b"").unwrap();
    let mut request = CommandRequest::new("pwd", Duration::from_secs(20));
    request.working_dir = Some("sub".into());
    request.env.insert("EXPLICIT".into(), "given".into());
    request.command = "pwd; echo $EXPLICIT".into();
    let r = f
        .env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .unwrap();
    assert_eq!(r.stdout, format!("{}/sub\ngiven\n", dir.display()));
    f.finish();
}

fn file_operations_behave_as_locally(f: Fixture) {
    let env = &f.env;
    env.write_file(Path::new("a/b.txt"), b"one\ntwo\nthree\n")
        .unwrap();
    let content = env
        .read_file(Path::new("a/b.txt"), Some(2), Some(1))
        .unwrap();
    assert_eq!((content.text.as_str(), content.total_lines), ("two\n", 3));
    let binary: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    env.write_file(Path::new("bin.dat"), &binary).unwrap();
    assert_eq!(env.read_bytes(Path::new("bin.dat")).unwrap(), binary);
    let err = env.read_file(Path::new("bin.dat"), None, None).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    let missing = env
        .read_file(Path::new("nope.txt"), None, None)
        .unwrap_err();
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound, "{missing}");
    // Writes replace atomically and keep the permissions of the file they replace.
    run(env, "chmod 751 a/b.txt", 20_000);
    env.write_file(Path::new("a/b.txt"), b"new\n").unwrap();
    assert_eq!(
        run(env, "stat -c %a a/b.txt; cat a/b.txt", 20_000).stdout,
        "751\nnew\n"
    );
    let stat = env.stat(Path::new("a")).unwrap();
    assert!(stat.is_dir && stat.modified.is_some());
    assert_eq!(env.stat(Path::new("bin.dat")).unwrap().size, 5000);
    let names: Vec<String> = env
        .list_directory(Path::new("."), 2)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["a", "a/b.txt", "bin.dat"]);
    let found = env
        .grep("ne", Path::new("."), &GrepOptions::default())
        .unwrap();
    assert_eq!(found.matches.len(), 1);
    assert_eq!(
        (found.matches[0].path.as_str(), found.matches[0].line_number),
        ("a/b.txt", 1)
    );
    assert_eq!(env.glob("**/*.txt", Path::new(".")).unwrap(), ["a/b.txt"]);
    assert!(env.file_exists(Path::new("bin.dat")));
    env.remove_file(Path::new("bin.dat")).unwrap();
    assert!(!env.file_exists(Path::new("bin.dat")));
    assert!(!f.dir.path().join("bin.dat").exists());
    f.finish();
}

fn a_timeout_keeps_and_streams_the_partial_output(f: Fixture) {
    let streamed = Mutex::new(Vec::new());
    let request = CommandRequest::new(
        "for i in 1 2 3 4 5 6 7 8 9 10; do echo line$i; sleep 0.2; done",
        Duration::from_millis(700),
    );
    let r = f
        .env
        .exec_command(
            &request,
            &|stream, chunk| {
                assert_eq!(stream, OutputStream::Stdout);
                streamed.lock().unwrap().extend_from_slice(chunk);
            },
            &CancelToken::new(),
        )
        .unwrap();
    assert!(r.timed_out, "{r:?}");
    assert!(r.stdout.starts_with("line1\nline2\n"), "{:?}", r.stdout);
    assert!(!r.stdout.contains("line10"));
    assert_eq!(streamed.into_inner().unwrap(), r.stdout.as_bytes());
    f.finish();
}

fn a_command_ignoring_sigterm_is_killed_after_the_grace(f: Fixture) {
    let started = Instant::now();
    let r = run(
        &f.env,
        "trap '' TERM; echo \"pids $$\"; while :; do sleep 0.05; done",
        500,
    );
    let elapsed = started.elapsed();
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.signal, Some(9), "{r:?}");
    // At least the timeout (0.5 s) plus the grace (0.5 s); the ceiling catches a hang.
    assert!(elapsed >= Duration::from_millis(1000), "{elapsed:?}");
    assert!(elapsed < GENEROUS, "{elapsed:?}");
    assert_gone(pids_in(&r.stdout)[0]);
    f.finish();
}

fn a_background_job_does_not_hang_the_call(f: Fixture) {
    let started = Instant::now();
    let r = run(&f.env, "sleep 30 & echo \"pids $!\"", 60_000);
    assert!(started.elapsed() < GENEROUS, "{:?}", started.elapsed());
    assert_eq!(r.exit_code, Some(0));
    let pid = pids_in(&r.stdout)[0];
    assert_gone(pid);
    f.finish();
}

fn fifty_megabytes_of_output_stay_bounded_with_exact_totals(f: Fixture) {
    const SIZE: u64 = 50 * 1024 * 1024;
    let streamed = [AtomicU64::new(0), AtomicU64::new(0)];
    let request = CommandRequest::new(
        format!(
            "yes 0123456789abcdef | head -c {SIZE} & yes fedcba9876543210 | head -c {SIZE} >&2; wait"
        ),
        Duration::from_secs(300),
    );
    let r = f
        .env
        .exec_command(
            &request,
            &|stream, chunk| {
                let i = usize::from(stream == OutputStream::Stderr);
                streamed[i].fetch_add(chunk.len() as u64, Ordering::Relaxed);
            },
            &CancelToken::new(),
        )
        .unwrap();
    assert_eq!(r.exit_code, Some(0));
    assert_eq!((r.stdout_bytes, r.stderr_bytes), (SIZE, SIZE));
    assert_eq!(streamed[0].load(Ordering::Relaxed), SIZE);
    assert_eq!(streamed[1].load(Ordering::Relaxed), SIZE);
    assert!(r.capture_truncated);
    let cap = 2 * 1024 * 1024 + 100;
    assert!(r.stdout.len() <= cap && r.stderr.len() <= cap);
    assert!(r.stdout.contains("bytes of output omitted"));
    f.finish();
}

fn secrets_in_the_server_environment_never_reach_commands(f: Fixture) {
    let r = run(&f.env, "env", 20_000);
    assert!(
        r.stdout.contains("VISIBLE_MARKER=plain-value"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains(SECRET), "a secret reached a command");
    assert!(!r.stdout.contains("OPENAI_API_KEY"));
    // Behind sshd, SSH_CLIENT would make Debian's bash source ~/.bashrc for `bash -c`:
    // the exec-server leaves it out so commands start as they would locally.
    assert_eq!(
        run(&f.env, "echo ${SSH_CLIENT:-unset}", 20_000).stdout,
        "unset\n"
    );
    f.finish();
}

fn cancelling_kills_the_remote_group(f: Fixture) {
    let cancel = CancelToken::new();
    let (tx, rx) = crossbeam_channel::unbounded::<Vec<u8>>();
    let request = CommandRequest::new(
        "sleep 30 & echo \"pids $$ $!\"; wait",
        Duration::from_secs(60),
    );
    let (result, after_cancel): (ExecResult, Duration) = thread::scope(|s| {
        let running = s.spawn(|| {
            let r = f
                .env
                .exec_command(&request, &|_, c| tx.send(c.to_vec()).unwrap(), &cancel);
            (r, Instant::now())
        });
        rx.recv_timeout(GENEROUS).expect("the pids arrive");
        let at = Instant::now();
        cancel.cancel();
        let (r, returned) = running.join().unwrap();
        (r.unwrap(), returned - at)
    });
    assert!(result.cancelled && !result.timed_out, "{result:?}");
    assert!(after_cancel < GENEROUS, "{after_cancel:?}");
    for pid in pids_in(&result.stdout) {
        assert_gone(pid);
    }
    // The connection is still usable.
    assert_eq!(run(&f.env, "echo again", 20_000).stdout, "again\n");
    f.finish();
}

fn parallel_calls_share_one_connection(f: Fixture) {
    // Each command waits until all have started: run one after another, they would time out.
    const N: usize = 8;
    let results: Vec<ExecResult> = thread::scope(|s| {
        let handles: Vec<_> = (0..N)
            .map(|i| {
                let env = &f.env;
                s.spawn(move || {
                    let command = format!(
                        "touch started.{i}; while [ $(ls started.* | wc -l) -lt {N} ]; do sleep 0.01; done; echo {i}"
                    );
                    run(env, &command, 30_000)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, r) in results.iter().enumerate() {
        assert!(!r.timed_out, "call {i} waited for the others: {r:?}");
        assert_eq!(r.stdout, format!("{i}\n"));
    }
    // All through the one server.
    assert_eq!(super::server_pid(&f.env), f.server_pid);
    f.finish();
}

fn the_prompt_describes_the_remote_side(f: Fixture) {
    let context = EnvironmentContext::capture(&f.env, "scripted-model");
    assert_eq!(context.working_directory, f.dir.path());
    assert_eq!(context.platform, "linux");
    assert!(!context.os_version.is_empty());
    assert!(!context.is_git_repository);
    f.finish();
}
