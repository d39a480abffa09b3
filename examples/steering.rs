//! Steering and follow-ups: the host redirects the agent while a command runs, then queues a
//! second task for after the first. The scripted model answers whatever the last user
//! message says, so the output shows where each message landed.
//!
//! ```text
//! cargo run --example steering
//! ```

use std::sync::Arc;

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Client, ContentPart, Role};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Session, SessionConfig};
use serde_json::json;

fn main() -> agentloop::Result<()> {
    let model = ScriptedModel::dynamic(|request| {
        let last = request.messages.last().expect("a request has messages");
        if last
            .content
            .iter()
            .any(|p| matches!(p, ContentPart::ToolResult(_)))
        {
            // The steer had not arrived when the command finished: it comes next.
            return ScriptedTurn::text("The draft is written with spaces.");
        }
        let said = if last.role == Role::User {
            last.text()
        } else {
            String::new()
        };
        if said.contains("reformat") {
            ScriptedTurn::text("Formatting the draft.").with_tool_call(
                "shell",
                json!({"command": "sleep 0.3; echo draft formatted"}),
            )
        } else if said.contains("tabs") {
            ScriptedTurn::text("Understood: tabs instead of spaces.")
        } else {
            ScriptedTurn::text(format!("Follow-up done: {said}"))
        }
    });
    let client = Client::new().with_provider(model);
    let profile = ProviderProfile::new("scripted", "demo").with_tool(agentloop::tools::shell());
    let env = Arc::new(LocalExecutionEnvironment::new(std::env::temp_dir())?);
    let session = Session::new(profile, env, client, SessionConfig::default())?;

    let events = session.events();
    session.submit("reformat the draft")?;
    for event in events {
        match event.kind {
            EventKind::ToolCallStart { .. } => {
                // While the command runs: a steer joins this input after the tool round,
                // a follow-up runs as a new input once this one is done.
                session.steer("use tabs, not spaces")?;
                session.follow_up("count the lines")?;
                session.close(); // after the follow-up
            }
            EventKind::SteeringInjected { content } => println!("[steered: {content}]"),
            EventKind::UserInput { content } => println!("> {content}"),
            EventKind::AssistantTextEnd { text, .. } if !text.is_empty() => println!("{text}"),
            _ => {}
        }
    }
    Ok(())
}
