//! `--rewind N` (with `--dry-run`, `--force`, a prompt) and `--fork` on a saved session,
//! end to end: the CLI saves a session whose agent wrote files, then puts the files and the
//! conversation back, leaves a file the user changed since, and forks without touching the
//! saved session.

use std::path::Path;
use std::process::Command;

use agentloop::session::Turn;
use agentloop::session::transcript::{Step, Transcript};
use serde_json::json;
use support::turns::{anthropic_sse, function};
use support::{FAKE_KEY, Reply, Server};

use crate::{Ran, agentloop, run_command};

/// The CLI against `server`, working in `cwd`, with `args` after the provider ones.
fn agent_cli(server: &Server, cwd: &Path, args: &[&str]) -> Ran {
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(agentloop());
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
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", FAKE_KEY);
    run_command(command, "")
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

/// A saved session (`s.jsonl` in its own directory) whose one input had the agent
/// overwrite `a.txt` and create `new.txt` in `work`.
fn saved_session(work: &Path, saved: &Path) {
    std::fs::write(work.join("a.txt"), "the user's\n").unwrap();
    let server = Server::start(vec![
        Reply::sse(anthropic_sse(
            "",
            &[
                function(
                    "c1",
                    "write_file",
                    json!({"file_path": "a.txt", "content": "the agent's\n"}),
                ),
                function(
                    "c2",
                    "write_file",
                    json!({"file_path": "new.txt", "content": "made\n"}),
                ),
            ],
        )),
        Reply::sse(anthropic_sse("wrote them", &[])),
    ]);
    let ran = agent_cli(
        &server,
        work,
        &["--transcript", saved.to_str().unwrap(), "write the files"],
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert_eq!(read(work, "a.txt"), "the agent's\n");
    assert_eq!(read(work, "new.txt"), "made\n");
}

#[test]
fn rewind_dry_run_lists_then_rewind_restores_leaves_the_users_change_and_runs_the_prompt() {
    let work = tempfile::tempdir().unwrap();
    let keep = tempfile::tempdir().unwrap();
    let saved = keep.path().join("s.jsonl");
    let saved_arg = saved.to_str().unwrap();
    saved_session(work.path(), &saved);
    // The user changes the file the agent created.
    std::fs::write(work.path().join("new.txt"), "the user's since\n").unwrap();

    let idle = Server::start(vec![]);
    let dry = agent_cli(
        &idle,
        work.path(),
        &["--resume", saved_arg, "--rewind", "1", "--dry-run"],
    );
    assert_eq!(dry.status, Some(0), "{}", dry.all_output());
    assert!(
        dry.stdout.contains("dry run: rewind to before input 1"),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout.contains("would restore  a.txt"),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout
            .contains("conflict (left as you left it)  new.txt"),
        "{}",
        dry.stdout
    );
    assert!(idle.requests().is_empty(), "a dry run asks no model");
    assert_eq!(
        read(work.path(), "a.txt"),
        "the agent's\n",
        "a dry run changes nothing"
    );
    assert!(
        !Transcript::read(&saved)
            .unwrap()
            .steps()
            .iter()
            .any(|s| matches!(s, Step::Rewind(_)))
    );

    let server = Server::start(vec![Reply::sse(anthropic_sse("fresh start", &[]))]);
    let ran = agent_cli(
        &server,
        work.path(),
        &[
            "--resume",
            saved_arg,
            "--rewind",
            "1",
            "--json",
            "try again",
        ],
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert_eq!(read(work.path(), "a.txt"), "the user's\n");
    assert_eq!(
        read(work.path(), "new.txt"),
        "the user's since\n",
        "the user's change stays"
    );
    assert!(ran.stdout.contains("\"rewound\""), "{}", ran.stdout);
    let body = server.requests()[0].body_text();
    assert!(
        body.contains("try again") && !body.contains("write the files"),
        "{body}"
    );
    let transcript = Transcript::read(&saved).unwrap();
    assert!(
        transcript
            .steps()
            .iter()
            .any(|s| matches!(s, Step::Rewind(_)))
    );
    // The history the transcript resumes with starts again at "try again".
    let users: Vec<&str> = transcript
        .history()
        .turns()
        .iter()
        .filter_map(|turn| match turn {
            Turn::User(user) => Some(user.content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(users, ["try again"]);
}

#[test]
fn force_puts_back_the_users_change_and_a_rewind_alone_runs_no_prompt() {
    let work = tempfile::tempdir().unwrap();
    let keep = tempfile::tempdir().unwrap();
    let saved = keep.path().join("s.jsonl");
    saved_session(work.path(), &saved);
    std::fs::write(work.path().join("a.txt"), "the user's since\n").unwrap();

    let idle = Server::start(vec![]);
    let ran = agent_cli(
        &idle,
        work.path(),
        &[
            "--resume",
            saved.to_str().unwrap(),
            "--rewind",
            "1",
            "--force",
        ],
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert!(
        ran.stdout
            .contains("conflict (overwrote your change)  a.txt"),
        "{}",
        ran.stdout
    );
    assert!(ran.stdout.contains("removed  new.txt"), "{}", ran.stdout);
    assert!(!ran.stdout.contains("--force puts"), "{}", ran.stdout);
    assert_eq!(read(work.path(), "a.txt"), "the user's\n");
    assert!(!work.path().join("new.txt").exists());
    assert!(idle.requests().is_empty(), "no prompt, no request");
}

#[test]
fn fork_continues_in_a_new_transcript_and_leaves_the_saved_session_and_files() {
    let work = tempfile::tempdir().unwrap();
    let keep = tempfile::tempdir().unwrap();
    let saved = keep.path().join("s.jsonl");
    saved_session(work.path(), &saved);
    let before = std::fs::read(&saved).unwrap();

    let server = Server::start(vec![Reply::sse(anthropic_sse("forked answer", &[]))]);
    let ran = agent_cli(
        &server,
        work.path(),
        &["--resume", saved.to_str().unwrap(), "--fork", "another way"],
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let fork = keep.path().join("s.fork-1.jsonl");
    assert!(ran.stderr.contains("s.fork-1.jsonl"), "{}", ran.stderr);
    let body = server.requests()[0].body_text();
    assert!(
        body.contains("write the files") && body.contains("another way"),
        "{body}"
    );
    assert_eq!(
        std::fs::read(&saved).unwrap(),
        before,
        "the saved session is untouched"
    );
    let forked = Transcript::read(&fork).unwrap();
    // The copied prefix is history, not inputs of the fork.
    assert_eq!(forked.user_inputs(), ["another way"]);
    assert!(
        std::fs::read_to_string(&fork)
            .unwrap()
            .contains("write the files")
    );
    assert_ne!(
        forked.header().session_id,
        Transcript::read(&saved).unwrap().header().session_id
    );
    assert_eq!(
        read(work.path(), "a.txt"),
        "the agent's\n",
        "a fork rewinds no file"
    );

    // A fork before input 1 starts from an empty conversation.
    let server = Server::start(vec![Reply::sse(anthropic_sse("from scratch", &[]))]);
    let ran = agent_cli(
        &server,
        work.path(),
        &[
            "--resume",
            saved.to_str().unwrap(),
            "--fork",
            "--rewind",
            "1",
            "anew",
        ],
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let body = server.requests()[0].body_text();
    assert!(
        !body.contains("write the files") && body.contains("anew"),
        "{body}"
    );
    assert_eq!(
        Transcript::read(keep.path().join("s.fork-2.jsonl"))
            .unwrap()
            .user_inputs(),
        ["anew"]
    );
}
