//! The `write_file` tool: writes a whole file atomically through the execution environment.
//! It never writes part of a file and never writes over a directory.

use crate::llm::tool_schema::tool_schema;
use std::io;

use super::{RegisteredTool, ToolContext, ToolDefinition, ToolInput, ToolOutput, args};

/// The tool's name.
pub const NAME: &str = "write_file";

/// What the model reads about the tool.
pub const DESCRIPTION: &str = "\
Write a whole file: create it (with any missing parent directories) or replace its entire \
content. Prefer editing tools for changes to existing files; read an existing file before \
replacing it. The write is atomic: the file holds either the old or the new content.";

/// The tool's definition.
pub fn definition() -> ToolDefinition {
    ToolDefinition {
        name: NAME.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "file_path": {
                    "type": "string",
                    "description": "Path of the file, absolute or relative to the working directory."
                },
                "content": {
                    "type": "string",
                    "description": "The complete new content of the file."
                }
            },
            "required": ["file_path", "content"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

/// The `write_file` tool.
pub fn tool() -> RegisteredTool {
    RegisteredTool::new(definition(), execute).doing_bounded_file_io()
}

fn execute(input: ToolInput, ctx: &ToolContext<'_>) -> Result<ToolOutput, String> {
    let args = args::json(&input)?;
    let raw_path = args::required_str(args, "file_path")?;
    let content = args::required_str(args, "content")?;
    let path = args::resolve_path(ctx, raw_path)?;
    let previous_size = match ctx.env.stat(&path) {
        Ok(stat) if stat.is_dir => {
            return Err(format!(
                "{raw_path} is a directory; give the path of a file inside it"
            ));
        }
        Ok(stat) => Some(stat.size),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("could not check {raw_path}: {e}")),
    };
    ctx.env
        .write_file(&path, content.as_bytes())
        .map_err(|e| format!("could not write {raw_path}: {e}"))?;
    let bytes = content.len();
    let lines = content.lines().count();
    let size = format!("{}, {}", count(bytes, "byte"), count(lines, "line"));
    Ok(ToolOutput::text(match previous_size {
        None => format!("Created {raw_path} ({size})."),
        Some(old) => format!(
            "Overwrote {raw_path} ({size}; it had {}).",
            count(old as usize, "byte")
        ),
    }))
}

/// `1 byte`, `2 bytes`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
