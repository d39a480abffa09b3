//! Subagents: the model hands a scoped task to a child session with `spawn_agent`, waits for
//! its result with `wait`, and the child's events reach the host wrapped in
//! `SUBAGENT_EVENT`. One scripted model serves both: a request that offers `spawn_agent`
//! comes from the parent, one without it from the child (a child at the depth limit has
//! no subagent tools).
//!
//! ```text
//! cargo run --example subagents
//! ```

use std::sync::Arc;

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Client, ContentPart, Request};
use agentloop::profiles;
use agentloop::session::{EventKind, Session, SessionConfig};
use serde_json::{Value, json};

/// The tool results of the conversation so far, in order.
fn results(request: &Request) -> Vec<String> {
    let parts = request.messages.iter().flat_map(|m| &m.content);
    parts
        .filter_map(|p| match p {
            ContentPart::ToolResult(r) => Some(r.content.clone()),
            _ => None,
        })
        .collect()
}

fn script(request: &Request) -> ScriptedTurn {
    let results = results(request);
    let is_parent = request.tools.iter().any(|t| t.name == "spawn_agent");
    match (is_parent, results.len()) {
        (true, 0) => ScriptedTurn::text("I'll delegate the test plan.").with_tool_call(
            "spawn_agent",
            json!({"task": "Write TESTS.md with two test cases for greet.sh"}),
        ),
        (true, 1) => {
            let spawned: Value = serde_json::from_str(&results[0]).unwrap_or_default();
            ScriptedTurn::tool_call("wait", json!({"agent_id": spawned["agent_id"]}))
        }
        (true, _) => {
            let report: Value = serde_json::from_str(&results[1]).unwrap_or_default();
            ScriptedTurn::text(format!("The subagent reports: {}", report["output"]))
        }
        (false, 0) => ScriptedTurn::tool_call(
            "write_file",
            json!({"file_path": "TESTS.md", "content": "- greets a name\n- greets the world\n"}),
        ),
        (false, _) => ScriptedTurn::text("TESTS.md lists two cases."),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let client = Client::new().with_provider(ScriptedModel::dynamic(script));
    let profile = profiles::anthropic("scripted-demo").with_provider_id("scripted");
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path())?);
    let session = Session::new(profile, env, client, SessionConfig::default())?;

    let events = session.events();
    session.submit("plan the tests for greet.sh")?;
    session.close();
    for event in events {
        match event.kind {
            EventKind::ToolCallEnd {
                tool_name,
                output,
                error,
                ..
            } => {
                println!(
                    "[parent] {tool_name}: {}",
                    output.or(error).unwrap_or_default()
                );
            }
            EventKind::SubagentEvent { agent_id, event } => {
                if let EventKind::ToolCallEnd { tool_name, .. } = &event.kind {
                    println!("[{agent_id}] {tool_name} done");
                }
            }
            EventKind::AssistantTextEnd { text, .. } if !text.is_empty() => {
                println!("[parent] {text}")
            }
            _ => {}
        }
    }
    print!(
        "TESTS.md:\n{}",
        std::fs::read_to_string(dir.path().join("TESTS.md"))?
    );
    Ok(())
}
