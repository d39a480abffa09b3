//! A tool call on its way through the session's pipeline: looked up and validated
//! ([`prepare_call`]), ready to run ([`PreparedCall`]), run ([`ToolOutcome`], before
//! truncation). The session drives it; the bench and the tests reach it through
//! `unstable`. It never truncates and never decides about approval.

use std::sync::Arc;

use serde_json::Value;

use super::{RegisteredTool, ToolContext, ToolInput, ToolRegistry, schema};
use crate::llm::{ImageData, ToolCall, ToolDefinition, ToolKind};

/// Looks up `call` in `registry` and validates its arguments against the tool's schema.
/// An `Err` is the error text for the model (unknown tool, invalid JSON, schema
/// violation).
pub fn prepare_call(registry: &ToolRegistry, call: &ToolCall) -> Result<PreparedCall, String> {
    let Some((_, tool)) = registry.tools.get(&call.name) else {
        let mut names = registry.names();
        names.sort();
        return Err(format!(
            "Unknown tool: {}. Available tools: {}.",
            call.name,
            names.join(", ")
        ));
    };
    let input = match (call.kind, &call.arguments) {
        (ToolKind::Custom, Value::String(raw)) => ToolInput::Freeform(raw.clone()),
        (_, args) => ToolInput::Json(schema::parse_arguments(
            &call.name,
            args,
            &tool.definition.parameters,
        )?),
    };
    Ok(PreparedCall {
        tool: Arc::clone(tool),
        input,
    })
}

/// A call that passed lookup and validation, ready to run.
#[derive(Debug, Clone)]
pub struct PreparedCall {
    tool: Arc<RegisteredTool>,
    input: ToolInput,
}

/// The result of running one tool call, before truncation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutcome {
    /// The full output or error text.
    pub text: String,
    /// Whether the tool failed.
    pub is_error: bool,
    /// An image for the model, if the tool returned one.
    pub image: Option<ImageData>,
}

impl PreparedCall {
    /// Whether the tool returns promptly on cancel ([`RegisteredTool::returns_on_cancel`]).
    pub(crate) fn returns_on_cancel(&self) -> bool {
        self.tool.returns_on_cancel
    }

    /// Whether the tool does only bounded file operations ([`RegisteredTool::bounded_file_io`]).
    pub(crate) fn bounded_file_io(&self) -> bool {
        self.tool.bounded_file_io
    }

    /// The validated input.
    pub fn input(&self) -> &ToolInput {
        &self.input
    }

    /// The tool's definition.
    pub fn definition(&self) -> &ToolDefinition {
        &self.tool.definition
    }

    /// Runs the executor. A panic in the executor becomes an error outcome.
    pub fn run(self, ctx: &ToolContext<'_>) -> ToolOutcome {
        let name = self.tool.definition.name.clone();
        let executor = &self.tool.executor;
        let input = self.input;
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| executor(input, ctx)));
        match result {
            Ok(Ok(output)) => ToolOutcome {
                text: output.text,
                is_error: false,
                image: output.image,
            },
            Ok(Err(message)) => ToolOutcome {
                text: format!("Tool error ({name}): {message}"),
                is_error: true,
                image: None,
            },
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".to_string());
                ToolOutcome {
                    text: format!("Tool error ({name}): the tool crashed: {what}"),
                    is_error: true,
                    image: None,
                }
            }
        }
    }
}
