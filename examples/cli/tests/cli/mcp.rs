//! `agentloop --mcp-config FILE --json` with server-everything, end to end: the loopback model
//! server records the requests; the tool is offered as `mcp__everything__echo`, called,
//! and its result is in the next request.

use std::process::Command;

use serde_json::{Value, json};

use support::ci::npm_bin;

use crate::{agentloop, run_command};
use support::turns::{anthropic_sse, function};
use support::{FAKE_KEY, Reply, Server};

#[test]
fn the_cli_offers_calls_and_returns_a_server_everything_tool() {
    let Some(bin) = npm_bin("mcp-server-everything") else {
        return;
    };
    let server = Server::start(vec![
        Reply::sse(anthropic_sse(
            "",
            &[function(
                "call_1",
                "mcp__everything__echo",
                json!({"message": "from the cli"}),
            )],
        )),
        Reply::sse(anthropic_sse("done", &[])),
    ]);
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("mcp.json");
    let file = json!({"mcpServers": {"everything": {
        "command": bin.to_string_lossy(),
        "args": ["stdio"],
        "env": {"EVERYTHING_TEST": "1"}
    }}});
    std::fs::write(&config, file.to_string()).unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(agentloop());
    command
        .args([
            "--provider",
            "anthropic",
            "--base-url",
            &server.url(),
            "--json",
        ])
        .arg("--cwd")
        .arg(work.path())
        .arg("--mcp-config")
        .arg(&config)
        .arg("echo something")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", FAKE_KEY);
    let ran = run_command(command, "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert!(
        ran.stderr.contains("mcp: everything: ") && ran.stderr.contains(" tools ("),
        "the header lists the server: {}",
        ran.stderr
    );
    let events: Vec<Value> = ran
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
        .collect();
    let end = events
        .iter()
        .find(|e| e["kind"] == "tool_call_end")
        .expect("a tool call ended");
    assert_eq!(end["data"]["tool_name"], "mcp__everything__echo");
    assert_eq!(end["data"]["output"], "Echo: from the cli");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let first: Value = serde_json::from_str(&requests[0].body_text()).unwrap();
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(tools.contains(&"mcp__everything__echo"), "{tools:?}");
    assert!(tools.contains(&"mcp__everything__get-sum"), "{tools:?}");
    assert!(requests[1].body_text().contains("Echo: from the cli"));
    assert!(!ran.all_output().contains(FAKE_KEY));
}
