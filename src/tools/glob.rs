//! The `glob` tool: finds files by name pattern through the execution environment. It never
//! walks directories itself.
//!
//! Output: one path per line, relative to the working directory, newest first; `No files
//! found` when nothing matches.

use std::io;

use serde_json::json;

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
        parameters: json!({
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
    let raw_path = args::optional_str(args, "path").unwrap_or(".");
    let path = args::resolve_path(ctx, raw_path)?;
    match ctx.env.stat(&path) {
        Ok(stat) if !stat.is_dir => {
            return Err(format!(
                "{raw_path} is a file; give a directory as path, or put the file name in the pattern"
            ));
        }
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!(
                "{raw_path} does not exist; give a directory inside the working directory"
            ));
        }
        Err(e) => return Err(format!("could not search {raw_path}: {e}")),
    }
    let files = ctx.env.glob(pattern, &path).map_err(|e| {
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
    let base = args::display_path(ctx, &path);
    let lines: Vec<String> = files
        .iter()
        .map(|file| {
            if base == "." {
                file.clone()
            } else {
                format!("{base}/{file}")
            }
        })
        .collect();
    Ok(ToolOutput::text(lines.join("\n")))
}
