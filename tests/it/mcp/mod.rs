//! The MCP client: our scripted fake server (faults, both eras), hostile transports, the
//! official servers installed by `.ci/run`, and the official conformance runner.

mod conformance;
mod fake;
mod features;
mod oauth;
mod real;
mod shared;
mod streams;
mod transports;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{ContentPart, Request, Role, ToolResult};
use agentloop::mcp::McpServer;
use agentloop::session::{EventKind, SessionConfig, SessionEvent};
use serde_json::Value;

use support::session::*;

/// The fake server with `args`, as server `name`.
pub fn fake(name: &str, args: &[&str]) -> McpServer {
    let script = support::data_dir().join("mcp/fake_server.py");
    let mut all = vec![script.to_string_lossy().into_owned()];
    all.extend(args.iter().map(|a| a.to_string()));
    McpServer::stdio(name, "python3")
        .with_args(all)
        .with_startup_timeout(Duration::from_secs(30))
}

/// A harness whose scripted model plays `turns`, with `servers`.
pub fn mcp_harness(turns: Vec<ScriptedTurn>, servers: Vec<McpServer>) -> Harness {
    let mut config = SessionConfig::default();
    for server in servers {
        config = config.with_mcp_server(server);
    }
    harness_with(ScriptedModel::new(turns), profile(), config)
}

/// The tool results the model received in `request`.
pub fn tool_results(request: &Request) -> Vec<ToolResult> {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .flat_map(|m| m.content.iter())
        .filter_map(|p| match p {
            ContentPart::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// The newest tool result the model received in `request`.
pub fn last_result(request: &Request) -> ToolResult {
    tool_results(request).pop().expect("a tool result")
}

/// The tool names offered in `request`.
pub fn offered(request: &Request) -> Vec<String> {
    request.tools.iter().map(|t| t.name.clone()).collect()
}

/// The `TOOL_CALL_END` events: (tool name, full text, is_error).
pub fn ends(events: &[SessionEvent]) -> Vec<(String, String, bool)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnd {
                tool_name,
                output,
                error,
                is_error,
                ..
            } => Some((
                tool_name.clone(),
                output.clone().or(error.clone()).unwrap_or_default(),
                *is_error,
            )),
            _ => None,
        })
        .collect()
}

/// The `WARNING` messages with code `mcp`.
pub fn mcp_warnings(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Warning { message, code } if code == "mcp" => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// The messages the fake server logged (its `--log` file), and its pids.
pub fn server_log(path: &Path) -> (Vec<Value>, Vec<u32>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut messages = Vec::new();
    let mut pids = Vec::new();
    for line in text.lines() {
        if let Some(pid) = line.strip_prefix("pid ") {
            pids.push(pid.parse().unwrap());
        } else if let Ok(value) = serde_json::from_str(line) {
            messages.push(value);
        }
    }
    (messages, pids)
}

/// Whether process `pid` is gone (or a zombie about to be reaped).
pub fn process_gone(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .trim_start()
        .chars()
        .next();
    matches!(state, None | Some('Z'))
}
