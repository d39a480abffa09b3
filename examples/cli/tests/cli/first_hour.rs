//! What a new user meets in the first hour: a closed pipe (`agentloop … 2>&1 | head -1`)
//! is exit status 1, never a panic or SIGABRT; `--network off` is never ignored; the
//! output-token cap; a local server found from the environment; hints for the usual
//! base-URL mistakes; `--resume FILE` alone.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};

use crate::{Wire, agent};
use support::{Reply, Server};

/// Runs the CLI with stdout and stderr (or stderr alone) on a pipe whose reader is gone:
/// what `… 2>&1 | head -1` leaves once `head` has its line.
fn with_closed_pipe(args: &[&str], stdout_too: bool) -> ExitStatus {
    let home = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut command = agent(args, &[], home.path());
    command
        .stdin(Stdio::null())
        .stderr(writer.try_clone().unwrap());
    if stdout_too {
        command.stdout(writer);
    } else {
        command.stdout(Stdio::null());
    }
    command.status().unwrap()
}

#[test]
fn agent_2_to_1_into_a_closed_pipe_exits_1_without_a_panic() {
    let server = Server::start(vec![Reply::sse(Wire::OpenAiChat.turn("done", &[]))]);
    let work = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", server.url());
    let real = [
        "--provider",
        "openai-chat",
        "--base-url",
        &base,
        "--cwd",
        work.path().to_str().unwrap(),
        "say done",
    ];
    let cases: [(&str, &[&str]); 4] = [
        ("the demo", &[]),
        ("the demo, --json", &["--json"]),
        ("a usage error", &["--no-such-option"]),
        ("a real run", &real),
    ];
    for (what, args) in cases {
        let status = with_closed_pipe(args, true);
        assert_eq!(status.signal(), None, "{what}: {status:?}");
        assert_eq!(status.code(), Some(1), "{what}: {status:?}");
    }
}

#[test]
fn a_closed_stderr_alone_exits_1_without_a_panic() {
    for (what, args) in [
        ("a usage error", &["--no-such-option"][..]),
        ("the demo", &["--json"]),
    ] {
        let status = with_closed_pipe(args, false);
        assert_eq!(status.signal(), None, "{what}: {status:?}");
        assert_eq!(status.code(), Some(1), "{what}: {status:?}");
    }
}

/// The same through a real `head -1`: bash points both streams at `head` and waits for
/// it to take its line and leave before the CLI starts, so that every write fails.
#[test]
fn agent_2_to_1_piped_into_head_1_exits_1_and_head_shows_nothing_of_a_panic() {
    let home = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new("/bin/bash");
    command
        .args([
            "-c",
            "exec 3>&1; exec > >(head -1 >&3) 2>&1; head_pid=$!; echo first; wait $head_pid; \
             \"$0\"; echo \"status $?\" >&3",
        ])
        .arg(crate::agentloop())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path());
    let ran = crate::run_command(command, "");
    assert_eq!(ran.stdout, "first\nstatus 1\n", "{}", ran.all_output());
}

/// `--network off` cannot hold without a sandbox: refused before anything starts (and
/// before any request), never silently ignored; the message names the fix.
#[test]
fn network_off_with_full_access_is_refused_with_exit_2() {
    let server = Server::start(vec![Reply::sse(Wire::OpenAiChat.turn("done", &[]))]);
    let work = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", server.url());
    let ran = crate::run_agent(
        &[
            "--provider",
            "openai-chat",
            "--base-url",
            &base,
            "--cwd",
            work.path().to_str().unwrap(),
            "--sandbox",
            "full-access",
            "--network",
            "off",
            "curl http://127.0.0.1:9/",
        ],
        &[],
        "",
    );
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    assert!(
        ran.stderr.contains("--network off needs a sandbox"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("workspace-write"), "{}", ran.stderr);
    assert!(server.requests().is_empty(), "the run started");
    // With the network on, full access runs.
    let ran = crate::run_agent(
        &[
            "--provider",
            "openai-chat",
            "--base-url",
            &base,
            "--cwd",
            work.path().to_str().unwrap(),
            "--sandbox",
            "full-access",
            "--network",
            "on",
            "say done",
        ],
        &[],
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
}
