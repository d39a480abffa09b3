//! The `glob` tool: finds files by name pattern through the execution environment. It never
//! walks directories itself.
//!
//! Output: one path per line, relative to the working directory, newest first; `No files
//! found` when nothing matches.

use crate::llm::tool_schema::tool_schema;
use std::io;

use super::{RegisteredTool, ToolContext, ToolDefinition, ToolInput, ToolOutput, args};

/// The tool's name.
pub const NAME: &str = "glob";

/// What the model reads about the tool.
pub const DESCRIPTION: &str = "\
Find files whose path matches a glob pattern, such as `**/*.rs` or `src/**/test_*.py`. \
Returns matching file paths, most recently modified first. Searches the working directory \
by default, or the directory given in `path`; skips .git and files ignored by .gitignore.";

/// The tool's definition.
pub fn definition() -> ToolDefinition {
    ToolDefinition {
        name: NAME.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "description": "The glob pattern to match file paths against."
                },
                "path": {
                    "type": "string",
                    "description": "Directory to search in (default: the working directory)."
                }
            },
            "required": ["pattern"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

/// The `glob` tool.
pub fn tool() -> RegisteredTool {
    RegisteredTool::new(definition(), execute)
}

fn execute(input: ToolInput, ctx: &ToolContext<'_>) -> Result<ToolOutput, String> {
    let args = args::json(&input)?;
    let pattern = args::required_str(args, "pattern")?;
    let root = args::search_root(ctx, args, "a directory")?;
    if !root.is_dir {
        return Err(format!(
            "{} is a file; give a directory as path, or put the file name in the pattern",
            root.raw
        ));
    }
    let files = ctx.env.glob(pattern, &root.path).map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidInput {
            e.to_string()
        } else {
            format!("the search failed: {e}")
        }
    })?;
    if files.is_empty() {
        return Ok(ToolOutput::text(format!(
            "No files found matching `{pattern}`."
        )));
    }
    let base = args::display_path(ctx, &root.path);
    let lines: Vec<String> = files
        .iter()
        .map(|file| args::join_display(&base, file))
        .collect();
    Ok(ToolOutput::text(lines.join("\n")))
}
