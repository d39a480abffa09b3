//! The quick start: a session, one task, the event stream. Runs offline: a scripted model
//! stands in for a real one (see the comment below for the real thing).
//!
//! ```text
//! cargo run --example minimal
//! ```

use std::sync::Arc;

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::Client;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Session, SessionConfig};
use serde_json::json;

fn main() -> agentloop::Result<()> {
    // With a real provider: `Client::from_env()?` and a provider profile instead.
    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_call("shell", json!({"command": "echo hello from the tool"})),
        ScriptedTurn::text("The command printed a greeting."),
    ]);
    let client = Client::new().with_provider(model);
    let profile = ProviderProfile::new("scripted", "demo").with_tool(agentloop::tools::shell());
    let env = Arc::new(LocalExecutionEnvironment::new(std::env::temp_dir())?);
    let session = Session::new(profile, env, client, SessionConfig::default())?;

    let events = session.events();
    session.submit("say hello")?;
    session.close(); // after the queued input
    for event in events {
        match event.kind {
            EventKind::AssistantTextDelta { delta } => print!("{delta}"),
            EventKind::ToolCallStart {
                tool_name,
                arguments,
                ..
            } => {
                println!("[{tool_name}] {arguments}")
            }
            EventKind::ToolCallEnd { output, .. } => {
                println!("{}", output.unwrap_or_default())
            }
            EventKind::ProcessingEnd { stop_reason, .. } => println!("\n({stop_reason:?})"),
            _ => {}
        }
    }
    Ok(())
}
