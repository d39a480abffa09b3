//! [`ToolError`]: what a custom tool's executor may fail with, so that `?` works on ordinary
//! errors inside it; it never reaches the host as an [`Error`](crate::Error) — the message
//! goes to the model as an error result.

use std::fmt;

/// A tool failure: a message for the model (the tool result has `is_error = true`).
///
/// Anything that implements [`Display`](fmt::Display) converts into it, so `?` works on
/// `std::io::Error`, `serde_json::Error`, `String`, `&str` and every other error type
/// inside an executor given to [`RegisteredTool::fallible`](crate::tools::RegisteredTool::fallible):
///
/// ```
/// use agentloop::llm::ToolDefinition;
/// use agentloop::tools::{RegisteredTool, ToolInput, ToolOutput};
/// use agentloop::serde_json::json;
///
/// let definition = ToolDefinition {
///     name: "line_count".to_string(),
///     description: "Count the lines of a file.".to_string(),
///     parameters: json!({
///         "type": "object",
///         "properties": {"path": {"type": "string"}},
///         "required": ["path"]
///     }).into(),
///     freeform: None,
/// };
/// let tool = RegisteredTool::fallible(definition, |input, _ctx| {
///     let ToolInput::Json(args) = input else {
///         return Err("line_count takes JSON arguments".into());
///     };
///     let path = args["path"].as_str().ok_or("`path` must be a string")?;
///     let text = std::fs::read_to_string(path)?; // an io::Error becomes the message
///     Ok(ToolOutput::text(text.lines().count().to_string()))
/// });
/// # let _ = tool;
/// ```
///
/// It deliberately does not implement `Display` or `std::error::Error` itself (that would
/// conflict with the blanket conversion); read the text with [`message`](Self::message).
pub struct ToolError {
    message: String,
}

impl ToolError {
    /// The message the model reads.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The message, owned.
    pub fn into_message(self) -> String {
        self.message
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ToolError").field(&self.message).finish()
    }
}

impl<E: fmt::Display> From<E> for ToolError {
    fn from(err: E) -> ToolError {
        ToolError {
            message: err.to_string(),
        }
    }
}
