//! `--transcript` and `--resume`: the CLI saves a session as JSON Lines, refuses to
//! overwrite a file, and resumes with the earlier conversation in the next request.

use std::path::Path;

use agentloop::session::transcript::Transcript;
use support::session_sse::anthropic_sse;
use support::{FAKE_KEY, Reply, Server};

use crate::{Ran, agentloop, run_command};

/// The CLI against `server`, working in `cwd`, with `args` after the provider ones.
fn agent_cli(server: &Server, cwd: &Path, home: &Path, args: &[&str]) -> Ran {
    let mut command = std::process::Command::new(agentloop());
    command
        .args([
            "--provider",
            "anthropic",
            "--base-url",
            &server.url(),
            "--cwd",
        ])
        .arg(cwd)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("ANTHROPIC_API_KEY", FAKE_KEY);
    run_command(command, "")
}

#[test]
fn the_agent_cli_saves_a_transcript_and_resumes_it_with_the_earlier_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cli.jsonl");
    let path_arg = path.to_str().unwrap();
    let first = Server::start(vec![Reply::sse(anthropic_sse("The answer is 42.", &[]))]);
    let ran = agent_cli(
        &first,
        dir.path(),
        dir.path(),
        &["--transcript", path_arg, "what is the answer?"],
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert_eq!(
        Transcript::read(&path).unwrap().user_inputs(),
        ["what is the answer?"]
    );

    // An existing file is refused before anything starts (bad usage): nothing is
    // overwritten.
    let again = agent_cli(
        &first,
        dir.path(),
        dir.path(),
        &["--transcript", path_arg, "x"],
    );
    assert_eq!(again.status, Some(2), "{}", again.all_output());
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);

    let second = Server::start(vec![Reply::sse(anthropic_sse("Still 42.", &[]))]);
    let ran = agent_cli(
        &second,
        dir.path(),
        dir.path(),
        &["--resume", path_arg, "are you sure?"],
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let body = second.requests()[0].body_text();
    assert!(
        body.contains("what is the answer?") && body.contains("The answer is 42."),
        "{body}"
    );
    let transcript = Transcript::read(&path).unwrap();
    assert_eq!(transcript.resumes().len(), 1);
    assert_eq!(
        transcript.user_inputs(),
        ["what is the answer?", "are you sure?"]
    );
    assert!(!std::fs::read_to_string(&path).unwrap().contains(FAKE_KEY));
}
