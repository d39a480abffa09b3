//! Approval gates: a hook decides per tool call — allow, deny with a reason the model reads,
//! or ask the host, which answers the `APPROVAL_REQUESTED` event through its responder.
//!
//! ```text
//! cargo run --example approvals
//! ```

use std::sync::Arc;

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::Client;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{Approval, EventKind, Session, SessionConfig};
use agentloop::tools;
use serde_json::json;

fn main() -> agentloop::Result<()> {
    let dir = tempfile::tempdir()?;
    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_call("shell", json!({"command": "rm -rf build"})),
        ScriptedTurn::tool_call(
            "write_file",
            json!({"file_path": "notes.txt", "content": "remember the milk\n"}),
        ),
        ScriptedTurn::text("I kept the build directory and wrote notes.txt."),
    ]);
    let client = Client::new().with_provider(model);
    let profile = ProviderProfile::new("scripted", "demo")
        .with_tool(tools::shell())
        .with_tool(tools::write_file());
    let config = SessionConfig::default().with_approval(|call| {
        let command = call.arguments["command"].as_str().unwrap_or_default();
        match call.name.as_str() {
            "shell" if command.contains("rm ") => {
                Approval::Deny("deleting files is not allowed in this session".to_string())
            }
            "write_file" => Approval::Ask,
            _ => Approval::Allow,
        }
    });
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path())?);
    let session = Session::new(profile, env, client, config)?;

    let events = session.events();
    session.submit("clean up and take a note")?;
    session.close();
    for event in events {
        match event.kind {
            EventKind::ApprovalRequested {
                tool_name,
                arguments,
                responder,
                ..
            } => {
                // A real host asks its user here; this one approves writes to notes.txt.
                let path = arguments["file_path"].as_str().unwrap_or_default();
                println!("asked: may {tool_name} write {path}? yes");
                responder.approve();
            }
            EventKind::ToolCallEnd {
                tool_name,
                is_error,
                output,
                error,
                ..
            } => {
                let text = output.or(error).unwrap_or_default();
                let verdict = if is_error { "refused" } else { "ran" };
                println!("{tool_name} {verdict}: {text}");
            }
            EventKind::AssistantTextDelta { delta } => print!("{delta}"),
            _ => {}
        }
    }
    println!();
    let notes = std::fs::read_to_string(dir.path().join("notes.txt"))?;
    println!("notes.txt: {notes}");
    Ok(())
}
