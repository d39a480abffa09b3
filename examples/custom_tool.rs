//! A host's own tool: `word_count`, registered on a profile next to the built-in tools. The
//! model calls it once with good arguments and once with bad ones; the bad call becomes an
//! error result the model reads (a tool failure is never an `Err` of the session).
//!
//! ```text
//! cargo run --example custom_tool
//! ```

use std::sync::Arc;

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::Client;
use agentloop::llm::ToolDefinition;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Session, SessionConfig};
use agentloop::tools::{RegisteredTool, ToolInput, ToolOutput};
use serde_json::json;

/// Counts the words of a text.
fn word_count() -> RegisteredTool {
    let definition = ToolDefinition {
        name: "word_count".to_string(),
        description: "Count the words of a text.".to_string(),
        parameters: json!({
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The text to count."}},
            "required": ["text"],
            "additionalProperties": false
        })
        .into(),
        freeform: None,
    };
    // Arguments arrive validated against the schema; an `Err` is a message for the model.
    RegisteredTool::new(definition, |input, _ctx| {
        let ToolInput::Json(args) = input else {
            return Err("word_count takes JSON arguments".to_string());
        };
        let text = args["text"].as_str().unwrap_or_default();
        Ok(ToolOutput::text(format!(
            "{} words",
            text.split_whitespace().count()
        )))
    })
}

fn main() -> agentloop::Result<()> {
    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_call("word_count", json!({"text": "the quick brown fox"})),
        // `text` must be a string: the registry refuses the call before the tool runs.
        ScriptedTurn::tool_call("word_count", json!({"text": 42})),
        ScriptedTurn::text("The sentence has four words."),
    ]);
    let client = Client::new().with_provider(model);
    let profile = ProviderProfile::new("scripted", "demo").with_tool(word_count());
    let env = Arc::new(LocalExecutionEnvironment::new(std::env::temp_dir())?);
    let session = Session::new(profile, env, client, SessionConfig::default())?;

    let events = session.events();
    session.submit("how many words are in 'the quick brown fox'?")?;
    session.close();
    for event in events {
        match event.kind {
            EventKind::ToolCallEnd {
                tool_name,
                output,
                error,
                ..
            } => match (output, error) {
                (Some(output), _) => println!("{tool_name} -> {output}"),
                (_, Some(error)) => println!("{tool_name} failed -> {error}"),
                _ => {}
            },
            EventKind::AssistantTextDelta { delta } => print!("{delta}"),
            _ => {}
        }
    }
    println!();
    Ok(())
}
