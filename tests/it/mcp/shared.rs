//! A subagent calls its parent's MCP tools over the parent's connection: no second server
//! process (counted through `/proc` and the server's own log).

use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Request, Role};
use serde_json::json;

use super::*;

/// The processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(marker) && !process_gone(pid) {
            pids.push(pid);
        }
    }
    pids
}

fn first_user_text(request: &Request) -> String {
    request
        .messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(|m| m.text())
        .unwrap_or_default()
}

#[test]
fn a_subagent_calls_its_parents_mcp_server_over_the_same_connection() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("shared-server.log");
    let marker = log.to_string_lossy().into_owned();
    // The child's requests start with its task; the parent's with "go".
    let model = ScriptedModel::dynamic(|request| {
        let child = first_user_text(request).contains("CHILD-TASK");
        let answered = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .count();
        match (child, answered) {
            (true, 0) => {
                ScriptedTurn::tool_call("mcp__fake__echo", json!({"text": "from the child"}))
            }
            (true, _) => ScriptedTurn::text("child done"),
            (false, 0) => {
                ScriptedTurn::tool_call("spawn_agent", json!({"task": "CHILD-TASK echo"}))
            }
            (false, 1) => ScriptedTurn::tool_call("wait", json!({"agent_id": "agent-1"})),
            (false, _) => ScriptedTurn::text("parent done"),
        }
    });
    let config = SessionConfig::default().with_mcp_server(fake("fake", &["--log", &marker]));
    let mut parent = profile();
    for tool in agentloop::unstable::subagent_tools() {
        parent = parent.with_tool(tool);
    }
    let mut h = harness_with(model, parent, config);
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    // The child's call reached the server and came back.
    let child_ends: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SubagentEvent { event, .. } => match &event.kind {
                EventKind::ToolCallEnd {
                    tool_name, output, ..
                } => Some((tool_name.clone(), output.clone().unwrap_or_default())),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(
        child_ends,
        [("mcp__fake__echo".to_string(), "from the child".to_string())]
    );
    let child_request = h
        .model
        .requests()
        .into_iter()
        .find(|r| first_user_text(r).contains("CHILD-TASK"))
        .unwrap();
    assert!(offered(&child_request).contains(&"mcp__fake__echo".to_string()));
    // One server process, started once, still running for the parent.
    let (messages, pids) = server_log(&log);
    assert_eq!(pids.len(), 1, "the server started once: {pids:?}");
    assert_eq!(processes_with(&marker), pids, "exactly that process runs");
    let handshakes = messages
        .iter()
        .filter(|m| m["method"] == "server/discover" || m["method"] == "initialize")
        .count();
    assert_eq!(handshakes, 1);
    let calls = messages
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .count();
    assert_eq!(calls, 1);
    h.session.close();
    collect_to_end(&mut h.events);
    assert!(process_gone(pids[0]), "the server ends with the parent");
}
