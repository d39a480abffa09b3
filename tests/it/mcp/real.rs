//! The official MCP servers installed by `.ci/run` (npm into `target/ci/node`, pip into
//! the venv `target/ci/mcp-venv`), driven by a session whose scripted model calls their tools.
//! Skipped with a reason when not installed; a failure under `AGENTLOOP_CI=1`.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::mcp::McpServerState;
use agentloop::session::SessionConfig;
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
    // The server replaces its directories with the client's roots once it has them (the
    // working directory, then the host's): the directory is a root too.
    let mut config = SessionConfig::default().with_mcp_server(server);
    config.mcp_roots = vec![root.clone()];
    let turns = vec![
        ScriptedTurn::tool_call(
            "mcp__fs__list_directory",
            json!({"path": root.to_string_lossy()}),
        ),
        ScriptedTurn::text("done"),
    ];
    let mut h = harness_with(ScriptedModel::new(turns), profile(), config);
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    let results = tool_results(&h.model.requests()[1]);
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

#[test]
fn server_everything_resources_are_listed_and_read_by_the_model_and_the_host() {
    let Some(server) = everything() else { return };
    let text = "demo://resource/dynamic/text/1";
    let blob = "demo://resource/dynamic/blob/2";
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call("list_mcp_resources", json!({"server": "everything"}))
                .with_tool_call("list_mcp_resource_templates", json!({}))
                .with_tool_call(
                    "read_mcp_resource",
                    json!({"server": "everything", "uri": text}),
                )
                .with_tool_call(
                    "read_mcp_resource",
                    json!({"server": "everything", "uri": blob}),
                ),
            ScriptedTurn::text("done"),
        ],
        vec![server],
    );
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let results = tool_results(&h.model.requests()[1]);
    for result in &results {
        assert!(!result.is_error, "{}: {events:?}", result.content);
    }
    let listed: serde_json::Value = serde_json::from_str(&results[0].content).unwrap();
    assert!(
        !listed["resources"].as_array().unwrap().is_empty(),
        "{listed}"
    );
    assert!(
        results[1]
            .content
            .contains("demo://resource/dynamic/text/{resourceId}")
    );
    assert!(
        results[2]
            .content
            .contains("Resource 1: This is a plaintext resource"),
        "{}",
        results[2].content
    );
    assert!(results[3].content.contains(blob), "{}", results[3].content);
    // The host lists and reads too (every page of the listing).
    let resources = h.session.mcp_resources(false);
    assert!(resources.iter().all(|r| r["server"] == "everything"));
    let first = resources[0]["uri"].as_str().unwrap();
    let read = h.session.read_mcp_resource("everything", first).unwrap();
    assert!(
        read[0]["text"].as_str().is_some_and(|t| !t.is_empty()),
        "{read:?}"
    );
    let status = &h.session.mcp_servers()[0];
    assert_eq!(status.resources, resources.len());
    assert!(
        status.resource_templates >= 2 && status.prompts >= 2,
        "{status:?}"
    );
}

#[test]
fn server_everything_prompts_are_listed_and_fetched() {
    let Some(server) = everything() else { return };
    let h = mcp_harness(vec![], vec![server]);
    let prompts = h.session.mcp_prompts();
    let args_prompt = prompts
        .iter()
        .find(|p| p["name"] == "args-prompt")
        .expect("args-prompt");
    let arguments = args_prompt["arguments"].as_array().unwrap();
    assert!(
        arguments
            .iter()
            .any(|a| a["name"] == "city" && a["required"] == true)
    );
    let arguments = serde_json::Map::from_iter([("city".to_string(), json!("Paris"))]);
    let messages = h
        .session
        .get_mcp_prompt("everything", "args-prompt", &arguments)
        .unwrap();
    assert_eq!(messages[0].text(), "What's weather in Paris?");
    let simple = h
        .session
        .get_mcp_prompt("everything", "simple-prompt", &Default::default())
        .unwrap();
    assert_eq!(
        simple[0].text(),
        "This is a simple prompt without arguments."
    );
}

#[test]
fn an_elicitation_of_server_everything_reaches_the_host_and_its_answer_the_server() {
    use agentloop::llm::Role;
    let Some(server) = everything() else { return };
    let asks = "mcp__everything__trigger-elicitation-request";
    // The server registers its elicitation tool once it knows the client can answer, and
    // says so with list_changed: the model calls it once it is offered.
    let model = ScriptedModel::dynamic(move |request| {
        let rounds = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .count();
        let offered = request.tools.iter().any(|t| t.name == asks);
        let asked = request
            .messages
            .iter()
            .any(|m| m.tool_calls().iter().any(|c| c.name == asks));
        if asked || rounds >= 5 {
            ScriptedTurn::text("done")
        } else if offered {
            ScriptedTurn::tool_call(asks, json!({}))
        } else {
            ScriptedTurn::tool_call("mcp__everything__echo", json!({"message": "waiting"}))
        }
    });
    let host = std::sync::Arc::new(super::features::RecordingHost {
        answer: Some(serde_json::Map::from_iter([
            ("name".to_string(), json!("Ada Lovelace")),
            ("check".to_string(), json!(true)),
        ])),
        ..Default::default()
    });
    let config = SessionConfig::default()
        .with_mcp_server(server)
        .with_mcp_host(host.clone());
    let mut h = harness_with(model, profile(), config);
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let answer = ends(&events)
        .into_iter()
        .find(|(name, _, _)| name == asks)
        .expect("the elicitation tool was called");
    assert!(!answer.2, "{}", answer.1);
    // The user's answer and the defaults the client filled in reached the server.
    assert!(answer.1.contains("- Name: Ada Lovelace"), "{}", answer.1);
    assert!(answer.1.contains("- Agreed to terms: true"), "{}", answer.1);
    assert!(answer.1.contains("- Favorite Integer: 42"), "{}", answer.1);
    let asked = host.asked.lock().unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].server, "everything");
    assert!(asked[0].schema.as_ref().unwrap()["properties"]["name"].is_object());
}

#[test]
fn server_filesystem_works_in_the_roots_the_client_offers() {
    use agentloop::llm::Role;
    let Some(bin) = npm_bin("mcp-server-filesystem") else {
        return;
    };
    // No directory argument: the server takes the client's roots (the working
    // directory, then the host's).
    let server =
        McpServer::stdio("fs", bin.to_string_lossy()).with_startup_timeout(Duration::from_secs(60));
    let model = ScriptedModel::dynamic(|request| {
        if request
            .messages
            .last()
            .is_some_and(|m| m.role == Role::Tool)
        {
            return ScriptedTurn::text("done");
        }
        let path = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.text())
            .unwrap_or_default();
        ScriptedTurn::tool_call("mcp__fs__list_directory", json!({ "path": path }))
    });
    let config = SessionConfig::default().with_mcp_server(server);
    let mut h = harness_with(model, profile(), config);
    let cwd = h.dir.path().canonicalize().unwrap();
    std::fs::write(cwd.join("in-cwd.txt"), "x").unwrap();
    let extra = tempfile::tempdir().unwrap();
    let extra_path = extra.path().canonicalize().unwrap();
    std::fs::write(extra_path.join("in-extra.txt"), "y").unwrap();
    fn list(h: &mut Harness, path: &std::path::Path) -> (String, bool) {
        h.session.submit(path.to_string_lossy()).unwrap();
        let events = collect_input(&mut h.events);
        let (_, text, is_error) = ends(&events).pop().unwrap();
        (text, is_error)
    }
    // The server asks for the roots once it is initialized, on its own time: a listing
    // is tried until it works (or the generous ceiling passes).
    fn until_listed(h: &mut Harness, path: &std::path::Path, file: &str) {
        let deadline = Instant::now() + support::GENEROUS;
        loop {
            let (listing, is_error) = list(h, path);
            if !is_error && listing.contains(&format!("[FILE] {file}")) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} never listed: {listing}",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    until_listed(&mut h, &cwd, "in-cwd.txt");
    let (refused, is_error) = list(&mut h, &extra_path);
    assert!(
        is_error && refused.contains("outside allowed directories"),
        "{refused}"
    );
    // A new root: the server is told, asks again, and allows it.
    h.session.set_mcp_roots(vec![extra_path.clone()]);
    until_listed(&mut h, &extra_path, "in-extra.txt");
}
