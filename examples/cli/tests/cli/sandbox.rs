//! The CLI's sandbox options: the default policy in the header, the options' validation,
//! a denied write under `--sandbox read-only` seen in the `--json` events, and `--plan`
//! (nothing written, reads and `git status` still work).

use std::process::Command;

use crate::{agentloop, run_command};

fn agent(args: &[&str], home: &std::path::Path) -> Command {
    let mut command = Command::new(agentloop());
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home);
    command
}

#[test]
fn the_cli_header_shows_the_default_sandbox_workspace_write_network_off() {
    let home = tempfile::tempdir().unwrap();
    let ran = run_command(agent(&[], home.path()), "");
    assert_eq!(ran.status, Some(0), "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("sandbox workspace-write, network off"),
        "{}",
        ran.stdout
    );
}

#[test]
fn the_cli_header_shows_full_access_when_asked() {
    let home = tempfile::tempdir().unwrap();
    let ran = run_command(agent(&["--sandbox", "full-access"], home.path()), "");
    assert_eq!(ran.status, Some(0), "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("no sandbox (full access)"),
        "{}",
        ran.stdout
    );
}

#[test]
fn unknown_sandbox_and_network_values_are_usage_errors() {
    let home = tempfile::tempdir().unwrap();
    for args in [&["--sandbox", "open"][..], &["--network", "maybe"][..]] {
        let ran = run_command(agent(args, home.path()), "");
        assert_eq!(ran.status, Some(2), "{args:?}: {}", ran.stderr);
    }
}

#[test]
fn the_demo_under_read_only_sees_its_write_refused() {
    let home = tempfile::tempdir().unwrap();
    let ran = run_command(
        agent(&["--sandbox", "read-only", "--json"], home.path()),
        "",
    );
    assert!(
        ran.stdout.contains("the sandbox is read-only"),
        "{}{}",
        ran.stdout,
        ran.stderr
    );
}

/// Issue 37's Done-when 5 at the CLI: `--plan` with a model that tries `write_file`,
/// `apply_patch` and `touch x` changes nothing on disk, while a read, a grep and
/// `git status` work.
#[test]
fn with_plan_writes_change_nothing_while_read_grep_and_git_status_work() {
    use serde_json::{Value, json};
    use support::turns::{anthropic_sse, function};
    use support::{FAKE_KEY, Reply, Server};

    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("notes.txt"), "needle in the notes\n").unwrap();
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(work.path())
        .status()
        .unwrap();
    assert!(git.success());
    let before = std::fs::read_dir(work.path()).unwrap().count();
    let call = |id: &str, name: &str, args: Value| {
        Reply::sse(anthropic_sse("", &[function(id, name, args)]))
    };
    let patch = "*** Begin Patch\n*** Add File: p.txt\n+x\n*** End Patch\n";
    let server = Server::start(vec![
        call(
            "w",
            "write_file",
            json!({"file_path": "new.txt", "content": "x"}),
        ),
        call("p", "apply_patch", json!({"patch": patch})),
        call("t", "shell", json!({"command": "touch x"})),
        call("r", "read_file", json!({"file_path": "notes.txt"})),
        call("g", "grep", json!({"pattern": "needle"})),
        call(
            "s",
            "shell",
            json!({"command": "git status --short --branch"}),
        ),
        Reply::sse(anthropic_sse("here is the plan", &[])),
    ]);
    let home = tempfile::tempdir().unwrap();
    let mut command = agent(
        &[
            "--plan",
            "--provider",
            "anthropic",
            "--base-url",
            &server.url(),
            "--cwd",
            work.path().to_str().unwrap(),
            "--json",
            "plan the change",
        ],
        home.path(),
    );
    command.env("ANTHROPIC_API_KEY", FAKE_KEY);
    let ran = run_command(command, "");
    assert_eq!(ran.status, Some(0), "{}{}", ran.stdout, ran.stderr);

    // Nothing changed on disk.
    assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), before);
    for name in ["new.txt", "p.txt", "x"] {
        assert!(!work.path().join(name).exists(), "{name} was written");
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 7, "{}", ran.stderr);
    // The editing tools were not offered.
    let first: Value = serde_json::from_slice(&requests[0].body).unwrap();
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for withdrawn in ["write_file", "edit_file", "apply_patch"] {
        assert!(!offered.contains(&withdrawn), "{offered:?}");
    }
    // Each tool's result, as the model read it in the next request.
    let result = |round: usize| -> (String, bool) {
        let body: Value = serde_json::from_slice(&requests[round + 1].body).unwrap();
        let last = body["messages"].as_array().unwrap().last().unwrap().clone();
        let block = last["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_result")
            .unwrap()
            .clone();
        (block["content"].to_string(), block["is_error"] == true)
    };
    assert!(result(0).1, "write_file: {:?}", result(0));
    assert!(result(1).1, "apply_patch: {:?}", result(1));
    let (touch, _) = result(2);
    assert!(!touch.contains("exit code: 0"), "{touch}");
    assert!(
        result(3).0.contains("needle in the notes"),
        "{:?}",
        result(3)
    );
    assert!(result(4).0.contains("notes.txt"), "{:?}", result(4));
    let (status, failed) = result(5);
    assert!(
        !failed && status.contains("exit code: 0") && status.contains("## "),
        "{status}"
    );
}
