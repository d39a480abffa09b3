//! The four subagent tools (spec §7) as the model sees them: `spawn_agent`, `send_input`,
//! `wait` and `close_agent`, their definitions and the parsing of their arguments.
//!
//! The children themselves live in the session (`session/subagents.rs`): when a session
//! launches it connects these tools to its children, or removes them when it is at
//! `SessionConfig::max_subagent_depth`. Outside a session the tools answer that subagents
//! are not available. This module never starts a session or a thread.

use crate::llm::tool_schema::tool_schema;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::llm::ToolDefinition;
use crate::tools::{RegisteredTool, ToolContext, ToolOutput, ToolRegistry, args};

/// The name of the tool that starts a subagent.
pub(crate) const SPAWN_AGENT: &str = "spawn_agent";
/// The name of the tool that sends a subagent a message.
pub(crate) const SEND_INPUT: &str = "send_input";
/// The name of the tool that waits for a subagent's result.
pub(crate) const WAIT: &str = "wait";
/// The name of the tool that ends a subagent.
pub(crate) const CLOSE_AGENT: &str = "close_agent";

/// One parsed call of a subagent tool.
pub(crate) enum SubagentCall<'a> {
    /// `spawn_agent`.
    Spawn(SpawnRequest<'a>),
    /// `send_input`.
    SendInput { id: &'a str, message: &'a str },
    /// `wait`, with `timeout_ms` as a duration.
    Wait {
        id: &'a str,
        timeout: Option<Duration>,
    },
    /// `close_agent`.
    Close { id: &'a str },
}

/// The arguments of `spawn_agent`.
pub(crate) struct SpawnRequest<'a> {
    pub(crate) task: &'a str,
    pub(crate) working_dir: Option<&'a str>,
    pub(crate) model: Option<&'a str>,
    pub(crate) max_turns: u64,
    /// `Some(true)`: its own git worktree; `Some(false)`: the shared tree; `None`: the
    /// session's default.
    pub(crate) worktree: Option<bool>,
}

/// What runs a parsed subagent call: the session's children.
pub(crate) type SubagentHandler =
    Arc<dyn Fn(SubagentCall<'_>, &ToolContext<'_>) -> Result<ToolOutput, String> + Send + Sync>;

/// The subagent tools `spawn_agent`, `send_input`, `wait` and `close_agent` (spec §7), in
/// the order profiles list them, not yet connected to a session: each answers that
/// subagents are not available. Every built-in profile has them; a session connects them
/// to its children when it starts, or removes them at `SessionConfig::max_subagent_depth`.
pub fn tools() -> Vec<RegisteredTool> {
    with_handler(Arc::new(|_, _| {
        Err("subagents are not available in this session; do the work yourself".to_string())
    }))
}

/// The four tools, running their parsed calls with `handler`.
fn with_handler(handler: SubagentHandler) -> Vec<RegisteredTool> {
    [
        spawn_definition(),
        send_input_definition(),
        wait_definition(),
        close_definition(),
    ]
    .into_iter()
    .map(|definition| {
        let handler = handler.clone();
        let name = definition.name.clone();
        RegisteredTool::new(definition, move |input, ctx| {
            let args = args::json(&input)?;
            handler(parse(&name, args)?, ctx)
        })
    })
    .collect()
}

fn parse<'a>(name: &str, args: &'a Map<String, Value>) -> Result<SubagentCall<'a>, String> {
    let id = || args::required_str(args, "agent_id");
    Ok(match name {
        SPAWN_AGENT => SubagentCall::Spawn(SpawnRequest {
            task: args::required_str(args, "task")?,
            working_dir: args::optional_str(args, "working_dir"),
            model: args::optional_str(args, "model").filter(|m| !m.trim().is_empty()),
            max_turns: args::optional_u64(args, "max_turns").unwrap_or(0),
            worktree: match args::optional_str(args, "isolation") {
                None => None,
                Some("worktree") => Some(true),
                Some("none") => Some(false),
                Some(other) => {
                    return Err(format!(
                        "isolation `{other}` is not known; use \"worktree\" or \"none\""
                    ));
                }
            },
        }),
        SEND_INPUT => SubagentCall::SendInput {
            id: id()?,
            message: args::required_str(args, "message")?,
        },
        WAIT => SubagentCall::Wait {
            id: id()?,
            timeout: args::optional_u64(args, "timeout_ms").map(Duration::from_millis),
        },
        _ => SubagentCall::Close { id: id()? },
    })
}

/// Connects the four tools in `registry` — the ones this module defines, not a host's own
/// tools that happen to share a name — to `handler`.
pub(crate) fn connect(registry: &mut ToolRegistry, handler: SubagentHandler) {
    for tool in with_handler(handler) {
        if is_ours(registry, &tool.definition) {
            registry.register(tool);
        }
    }
}

/// Removes the four subagent tools from `registry` — the ones this module defines, not a
/// host's own tools that happen to share a name.
pub(crate) fn remove(registry: &mut ToolRegistry) {
    for tool in tools() {
        if is_ours(registry, &tool.definition) {
            registry.unregister(&tool.definition.name);
        }
    }
}

fn is_ours(registry: &ToolRegistry, definition: &ToolDefinition) -> bool {
    registry
        .get(&definition.name)
        .is_some_and(|tool| tool.definition == *definition)
}

fn spawn_definition() -> ToolDefinition {
    ToolDefinition {
        name: SPAWN_AGENT.to_string(),
        description: "\
Start a subagent: a separate agent with its own conversation that works on the same files \
and runs at the same time as you. It does not see this conversation, so describe the task \
completely. Returns the agent id at once; collect the result with wait, send more \
instructions with send_input, stop it with close_agent."
            .to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "task": {
                    "type": "string",
                    "description": "The complete task for the subagent, in plain language."
                },
                "working_dir": {
                    "type": "string",
                    "description": "A subdirectory to confine the subagent to (default: your working directory)."
                },
                "model": {
                    "type": "string",
                    "description": "A different model for the subagent (default: yours)."
                },
                "max_turns": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Most model calls the subagent may make (default 0: no limit)."
                },
                "isolation": {
                    "type": "string",
                    "enum": ["none", "worktree"],
                    "description": "worktree: the subagent works in its own git worktree, a copy of your files, and wait returns its changes as a patch for you to apply or leave; none: it edits your files directly."
                }
            },
            "required": ["task"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

fn send_input_definition() -> ToolDefinition {
    ToolDefinition {
        name: SEND_INPUT.to_string(),
        description: "\
Send a message to a subagent. While it works, the message reaches it at its next step; once \
it has finished, the message starts a new piece of work (collect it with wait)."
            .to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "agent_id": {"type": "string", "description": "The id spawn_agent returned."},
                "message": {"type": "string", "description": "The message for the subagent."}
            },
            "required": ["agent_id", "message"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

fn wait_definition() -> ToolDefinition {
    ToolDefinition {
        name: WAIT.to_string(),
        description: "\
Wait for a subagent to finish its work and return its result as JSON: output (its final \
answer), success and turns_used. With timeout_ms, returns status running if it has not \
finished by then."
            .to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "agent_id": {"type": "string", "description": "The id spawn_agent returned."},
                "timeout_ms": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "How long to wait at most, in milliseconds (default: until it finishes)."
                }
            },
            "required": ["agent_id"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

fn close_definition() -> ToolDefinition {
    ToolDefinition {
        name: CLOSE_AGENT.to_string(),
        description: "Stop a subagent and discard it. Returns its final status.".to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "agent_id": {"type": "string", "description": "The id spawn_agent returned."}
            },
            "required": ["agent_id"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_modules_own_tools_are_removed() {
        let mut registry = ToolRegistry::new();
        for tool in tools() {
            registry.register(tool);
        }
        let mut hosts_wait = wait_definition();
        hosts_wait.description = "the host's own wait".into();
        registry.register(RegisteredTool::new(hosts_wait, |_, _| {
            Ok(ToolOutput::default())
        }));
        remove(&mut registry);
        assert_eq!(registry.names(), ["wait"]);
    }
}
