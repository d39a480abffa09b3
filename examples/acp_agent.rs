//! A custom ACP agent: the provider from the environment, its profile, and one tool of its
//! own (`rust_lines`), served on stdin and stdout for an editor to launch. Sessions are
//! kept in `./.acp-sessions` so the editor can load them again.
//!
//! ```text
//! ANTHROPIC_API_KEY=… cargo run --example acp_agent    # launched by the editor
//! ```

use std::path::Path;
use std::sync::Arc;

use agentloop::acp::{AcpAgent, SessionParts};
use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::{Client, ToolDefinition};
use agentloop::profiles;
use agentloop::session::SessionConfig;
use agentloop::tools::{RegisteredTool, ToolOutput};
use serde_json::json;

/// Counts the lines of the project's Rust files, through the session's environment.
fn rust_lines() -> RegisteredTool {
    let definition = ToolDefinition {
        name: "rust_lines".to_string(),
        description: "Count the lines of every Rust file in the project.".to_string(),
        parameters: json!({"type": "object", "properties": {}}).into(),
        freeform: None,
    };
    RegisteredTool::fallible(definition, |_input, ctx| {
        let mut total = 0;
        let files = ctx.env.glob("**/*.rs", Path::new("."))?;
        for file in &files {
            total += ctx.env.read_file(Path::new(file), None, None)?.total_lines;
        }
        Ok(ToolOutput::text(format!(
            "{total} lines in {} files",
            files.len()
        )))
    })
}

fn main() -> std::io::Result<()> {
    let agent = AcpAgent::new("rust-lines", "0.1.0", |cwd| {
        let client = Client::from_env()?;
        let mut profile = profiles::for_client(&client)?;
        profile.tool_registry.register(rust_lines());
        let env = Arc::new(LocalExecutionEnvironment::new(cwd)?);
        Ok(SessionParts::new(
            profile,
            env,
            client,
            SessionConfig::default(),
        ))
    })
    .with_sessions_dir(".acp-sessions");
    agent.serve(std::io::stdin(), std::io::stdout())
}
