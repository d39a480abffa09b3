//! The official MCP servers installed by `.ci/run` (npm into `target/ci/node`, pip into
//! the venv `target/ci/mcp-venv`), driven by a session whose scripted model calls their tools.
//! Skipped with a reason when not installed; a failure under `AGENTLOOP_CI=1`.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentloop::llm::scripted::ScriptedTurn;
use agentloop::mcp::McpServerState;
use serde_json::json;

use super::*;
use support::GENEROUS;
use support::ci::{npm_bin, venv_bin};

/// Server-everything over stdio, named `everything`.
pub fn everything() -> Option<McpServer> {
    let bin = npm_bin("mcp-server-everything")?;
    Some(
        McpServer::stdio("everything", bin.to_string_lossy())
            .with_args(["stdio"])
            .with_startup_timeout(Duration::from_secs(60)),
    )
}

/// Runs one session: the model calls each `(tool, arguments)` in one round, then stops.
/// Returns the results the model got, in call order.
fn call_all(server: McpServer, calls: &[(&str, serde_json::Value)]) -> Vec<ToolResult> {
    let mut first = ScriptedTurn::text("");
    for (tool, args) in calls {
        first = first.with_tool_call(*tool, args.clone());
    }
    let mut h = mcp_harness(vec![first, ScriptedTurn::text("done")], vec![server]);
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let status = h.session.mcp_servers();
    assert_eq!(status[0].state, McpServerState::Ready, "{events:?}");
    let requests = h.model.requests();
    let offered = offered(&requests[0]);
    for (tool, _) in calls {
        assert!(
            offered.contains(&tool.to_string()),
            "{tool} not in {offered:?}"
        );
    }
    tool_results(&requests[1])
}

#[test]
fn server_everything_echoes_and_adds() {
    let Some(server) = everything() else { return };
    let results = call_all(
        server,
        &[
            (
                "mcp__everything__echo",
                json!({"message": "hello from agentloop"}),
            ),
            ("mcp__everything__get-sum", json!({"a": 2, "b": 40})),
        ],
    );
    assert_eq!(results[0].content, "Echo: hello from agentloop");
    assert!(!results[0].is_error);
    assert!(results[1].content.contains("42"), "{}", results[1].content);
}

#[test]
fn server_everything_over_streamable_http() {
    let Some(bin) = npm_bin("mcp-server-everything") else {
        return;
    };
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(&bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // npx may fetch and start node first: three times the ceiling.
    let deadline = Instant::now() + GENEROUS * 3;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "server-everything did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let server = McpServer::http("everything", format!("http://127.0.0.1:{port}/mcp"));
    let results = call_all(
        server,
        &[
            ("mcp__everything__echo", json!({"message": "over http"})),
            ("mcp__everything__get-sum", json!({"a": 1, "b": 2})),
        ],
    );
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(results[0].content, "Echo: over http");
    assert!(results[1].content.contains('3'), "{}", results[1].content);
}

#[test]
fn server_filesystem_lists_a_temp_dir() {
    let Some(bin) = npm_bin("mcp-server-filesystem") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hi").unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    let root = dir.path().canonicalize().unwrap();
    let server = McpServer::stdio("fs", bin.to_string_lossy())
        .with_args([root.to_string_lossy()])
        .with_startup_timeout(Duration::from_secs(60));
    let results = call_all(
        server,
        &[(
            "mcp__fs__list_directory",
            json!({"path": root.to_string_lossy()}),
        )],
    );
    let listing = &results[0].content;
    assert!(!results[0].is_error, "{listing}");
    assert!(listing.contains("[FILE] notes.txt"), "{listing}");
    assert!(listing.contains("[DIR] src"), "{listing}");
}

#[test]
fn mcp_server_git_shows_the_log_of_a_temp_repository() {
    let Some(bin) = venv_bin("mcp-server-git") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().canonicalize().unwrap();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(&repo)
            .env("GIT_AUTHOR_NAME", "Test")
            .env("GIT_AUTHOR_EMAIL", "test@example.com")
            .env("GIT_COMMITTER_NAME", "Test")
            .env("GIT_COMMITTER_EMAIL", "test@example.com")
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "a").unwrap();
    git(&["add", "a.txt"]);
    git(&["commit", "-q", "-m", "the first commit of the temp repo"]);
    let server = McpServer::stdio("git", bin.to_string_lossy())
        .with_args([
            "--repository".to_string(),
            repo.to_string_lossy().into_owned(),
        ])
        .with_startup_timeout(Duration::from_secs(60));
    let results = call_all(
        server,
        &[(
            "mcp__git__git_log",
            json!({"repo_path": repo.to_string_lossy()}),
        )],
    );
    let log = &results[0].content;
    assert!(!results[0].is_error, "{log}");
    assert!(log.contains("the first commit of the temp repo"), "{log}");
}

#[test]
fn mcp_server_time_tells_the_time_in_utc() {
    let Some(bin) = venv_bin("mcp-server-time") else {
        return;
    };
    let server = McpServer::stdio("time", bin.to_string_lossy())
        .with_startup_timeout(Duration::from_secs(60));
    let results = call_all(
        server,
        &[("mcp__time__get_current_time", json!({"timezone": "UTC"}))],
    );
    let text = &results[0].content;
    assert!(!results[0].is_error, "{text}");
    assert!(text.contains("UTC"), "{text}");
}
