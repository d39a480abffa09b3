//! The `read_many_files` tool: several text files in one call, within a character budget.
//! It reads only through the execution environment and never writes.
//!
//! Each file comes under a header line `--- path ---` with its content as it is (no line
//! numbers). A path containing `*`, `?` or `[` is a glob pattern, expanded relative to the
//! working directory. Files that cannot be read show the reason under their header and do not
//! fail the call. The output stays within 100,000 characters: a file that does not fit is
//! cut, and the files after it are listed as not read.

use crate::llm::tool_schema::tool_schema;
use std::io;

use super::{RegisteredTool, ToolContext, ToolDefinition, ToolInput, ToolOutput, args};

/// The tool's name.
pub const NAME: &str = "read_many_files";

/// What the model reads about the tool.
pub const DESCRIPTION: &str = "\
Read several text files at once. Give file paths or glob patterns (such as `src/**/*.rs`); \
each file is returned under a `--- path ---` header, without line numbers. The total output \
is limited to about 100,000 characters; use read_file for one large file or a specific part \
of it.";

/// Most characters of file content returned by one call.
pub const BUDGET_CHARS: usize = 100_000;

/// Most files read by one call.
pub const MAX_FILES: usize = 200;

/// The tool's definition.
pub fn definition() -> ToolDefinition {
    ToolDefinition {
        name: NAME.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "paths": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "description": "File paths or glob patterns, relative to the working directory."
                }
            },
            "required": ["paths"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

/// The `read_many_files` tool.
pub fn tool() -> RegisteredTool {
    RegisteredTool::new(definition(), execute)
}

fn execute(input: ToolInput, ctx: &ToolContext<'_>) -> Result<ToolOutput, String> {
    let args = args::json(&input)?;
    let requested: Vec<&str> = args
        .get("paths")
        .and_then(|v| v.as_array())
        .map(|items| items.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    if requested.is_empty() {
        return Err("\"paths\" is empty; give at least one file path or glob pattern".into());
    }
    let mut files: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for raw in requested {
        if raw.contains(['*', '?', '[']) {
            let base = ctx.env.working_directory().to_path_buf();
            match ctx.env.glob(raw, &base) {
                Ok(found) if found.is_empty() => notes.push(format!("no files match `{raw}`")),
                Ok(mut found) => {
                    found.sort();
                    files.extend(found);
                }
                Err(e) => notes.push(format!("invalid pattern `{raw}`: {e}")),
            }
        } else if !files.iter().any(|f| f == raw) {
            files.push(raw.to_string());
        }
    }
    let mut out = String::new();
    let mut budget = BUDGET_CHARS;
    let mut read_any = false;
    let mut not_read: Vec<&str> = Vec::new();
    for (index, raw) in files.iter().enumerate() {
        if index >= MAX_FILES || budget == 0 {
            not_read.push(raw);
            continue;
        }
        out.push_str("--- ");
        out.push_str(raw);
        out.push_str(" ---\n");
        match read_one(ctx, raw) {
            Ok(content) => {
                read_any = true;
                let chars = content.chars().count();
                if chars <= budget {
                    out.push_str(&content);
                    budget -= chars;
                } else {
                    let cut = content
                        .char_indices()
                        .nth(budget)
                        .map_or(content.len(), |(i, _)| i);
                    let shown_lines = content[..cut].matches('\n').count();
                    out.push_str(&content[..cut]);
                    out.push_str(&format!(
                        "\n[... cut at the {BUDGET_CHARS}-character budget; read the rest with \
                         read_file offset={}]",
                        shown_lines + 1
                    ));
                    budget = 0;
                }
            }
            Err(message) => {
                out.push_str("[not read: ");
                out.push_str(&message);
                out.push(']');
            }
        }
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    if !not_read.is_empty() {
        out.push_str(&format!(
            "[{} file(s) not read because the output limit was reached: {}. Read them in \
             another call.]\n",
            not_read.len(),
            not_read.join(", ")
        ));
    }
    for note in &notes {
        out.push_str(&format!("[{note}]\n"));
    }
    if !read_any {
        return Err(format!("no file could be read:\n{}", out.trim_end()));
    }
    Ok(ToolOutput::text(out.trim_end().to_string()))
}

fn read_one(ctx: &ToolContext<'_>, raw: &str) -> Result<String, String> {
    let path = args::resolve_path(ctx, raw)?;
    match ctx.env.read_file(&path, None, None) {
        Ok(content) => Ok(content.text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err("the file does not exist".into()),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            let image = ctx
                .env
                .read_bytes(&path)
                .ok()
                .and_then(|bytes| super::read_file::image_media_type(&bytes));
            Err(match image {
                Some(media_type) => format!("{media_type} image; use read_file to view it"),
                None => "a binary file, not text".into(),
            })
        }
        Err(e) => match ctx.env.stat(&path) {
            Ok(stat) if stat.is_dir => Err("a directory; use list_dir or glob".into()),
            _ => Err(e.to_string()),
        },
    }
}
