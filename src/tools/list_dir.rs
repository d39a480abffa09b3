//! The `list_dir` tool: a directory tree with file sizes, through the execution environment.
//! It never walks directories itself.
//!
//! Output: the directory as the first line (`src/`), then one entry per line, indented two
//! spaces per level, directories with a trailing `/`, files with their size (`lib.rs (1.2
//! KB)`). At most 1,000 entries are listed, with a note when there are more.

use crate::llm::tool_schema::tool_schema;
use std::io;

use super::{RegisteredTool, ToolContext, ToolDefinition, ToolInput, ToolOutput, args};

/// The tool's name.
pub const NAME: &str = "list_dir";

/// What the model reads about the tool.
pub const DESCRIPTION: &str = "\
List the files and directories in a directory as an indented tree with file sizes. \
`depth` sets how many levels to show (1 = direct children only, the default). Use glob to \
find files by name across a whole tree.";

/// Entries listed at most.
pub const MAX_ENTRIES: usize = 1000;

/// The tool's definition.
pub fn definition() -> ToolDefinition {
    ToolDefinition {
        name: NAME.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The directory to list (default: the working directory)."
                },
                "depth": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 10,
                    "description": "How many levels to list (default 1)."
                }
            },
            "additionalProperties": false
        }),
        freeform: None,
    }
}

/// The `list_dir` tool.
pub fn tool() -> RegisteredTool {
    RegisteredTool::new(definition(), execute)
}

fn execute(input: ToolInput, ctx: &ToolContext<'_>) -> Result<ToolOutput, String> {
    let args = args::json(&input)?;
    let raw_path = args::optional_str(args, "path").unwrap_or(".");
    let depth = args::optional_u64(args, "depth").unwrap_or(1).clamp(1, 10) as usize;
    let path = args::resolve_path(ctx, raw_path)?;
    let mut entries = ctx
        .env
        .list_directory(&path, depth)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                format!("{raw_path} does not exist; give a directory inside the working directory")
            }
            io::ErrorKind::NotADirectory => {
                format!("{raw_path} is a file, not a directory; use read_file to read it")
            }
            _ => format!("could not list {raw_path}: {e}"),
        })?;
    entries.sort_by(|a, b| a.name.split('/').cmp(b.name.split('/')));
    let mut out = args::display_path(ctx, &path);
    if !out.ends_with('/') {
        out.push('/');
    }
    out.push('\n');
    if entries.is_empty() {
        out.push_str("(empty directory)");
        return Ok(ToolOutput::text(out));
    }
    for entry in entries.iter().take(MAX_ENTRIES) {
        let level = entry.name.matches('/').count();
        let name = entry.name.rsplit('/').next().unwrap_or(&entry.name);
        out.push_str(&"  ".repeat(level + 1));
        out.push_str(name);
        if entry.is_dir {
            out.push('/');
        } else if let Some(size) = entry.size {
            out.push_str(" (");
            out.push_str(&human_size(size));
            out.push(')');
        }
        out.push('\n');
    }
    if entries.len() > MAX_ENTRIES {
        out.push_str(&format!(
            "[{} more entries not shown; list a subdirectory or use a smaller depth.]",
            entries.len() - MAX_ENTRIES
        ));
    } else {
        out.pop();
    }
    Ok(ToolOutput::text(out))
}

/// `512 B`, `1.2 KB`, `3.4 MB`, `1.0 GB`.
pub(crate) fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 3] = ["KB", "MB", "GB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_human_readable() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1536), "1.5 KB");
        assert_eq!(human_size(5 * 1024 * 1024), "5.0 MB");
    }
}
