//! A session with one Streamable HTTP MCP server whose every tool the (scripted) model calls
//! once, with arguments made up from the tool's schema; then it prints the results. The
//! official conformance runner launches it with the server URL as the last argument.
//!
//! ```text
//! cargo run --example mcp_client -- http://127.0.0.1:3001/mcp
//! npx @modelcontextprotocol/conformance client --scenario tools_call \
//!     --command target/debug/examples/mcp_client
//! ```

use std::sync::Arc;

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Client, Role};
use agentloop::mcp::{McpServer, McpServerState};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Session, SessionConfig};
use serde_json::{Map, Value, json};

/// A value of the schema's type (numbers 1, strings "test", …).
fn sample(schema: &Value) -> Value {
    match schema.get("type").and_then(Value::as_str) {
        Some("number") | Some("integer") => json!(1),
        Some("string") => json!("test"),
        Some("boolean") => json!(true),
        Some("array") => json!([]),
        Some("object") => {
            let mut out = Map::new();
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    if required.contains(&name.as_str()) {
                        out.insert(name.clone(), sample(property));
                    }
                }
            }
            Value::Object(out)
        }
        _ => Value::Null,
    }
}

fn main() {
    // The runner appends the URL as the last argument.
    let Some(url) = std::env::args()
        .skip(1)
        .next_back()
        .filter(|a| a.starts_with("http"))
    else {
        eprintln!("usage: mcp_client <server URL>");
        std::process::exit(2);
    };
    // First answer: call every MCP tool offered; then stop.
    let model = ScriptedModel::dynamic(|request| {
        if request.messages.iter().any(|m| m.role == Role::Tool) {
            return ScriptedTurn::text("done");
        }
        let mut turn = ScriptedTurn::text("");
        for tool in request.tools.iter().filter(|t| t.name.starts_with("mcp__")) {
            turn = turn.with_tool_call(tool.name.clone(), sample(&tool.parameters));
        }
        turn
    });
    let config = SessionConfig::default().with_mcp_server(McpServer::http("server", url));
    let env = Arc::new(LocalExecutionEnvironment::new(std::env::temp_dir()).expect("the temp dir"));
    let profile = ProviderProfile::new("scripted", "conformance");
    let session = match Session::new(profile, env, Client::new().with_provider(model), config) {
        Ok(session) => session,
        Err(err) => {
            eprintln!("mcp_client: {err}");
            std::process::exit(1);
        }
    };
    for status in session.mcp_servers() {
        eprintln!(
            "server {}: {:?}, {} tools",
            status.name, status.state, status.tools
        );
        if status.state != McpServerState::Ready {
            std::process::exit(1);
        }
    }
    let events = session.events();
    let _ = session.submit("call the tools");
    session.close();
    for event in events {
        match event.kind {
            EventKind::ToolCallEnd {
                tool_name,
                output,
                error,
                ..
            } => println!("{tool_name}: {}", output.or(error).unwrap_or_default()),
            EventKind::Warning { message, .. } => eprintln!("warning: {message}"),
            _ => {}
        }
    }
}
