//! The `grep` tool: searches file contents with a regex through the execution environment
//! (ripgrep or the in-process search). It never reads files itself.
//!
//! Output: one match per line as `path:line:text`, paths relative to the working directory;
//! `No matches found` when there are none and everything was searched; a last line saying
//! the search stopped when it hit `max_results`; the files (or lines) the search could not
//! cover whole, named with what was searched — with no match, the answer then says that an
//! absence was not checked there. Matched lines longer than 500 characters are cut.

use crate::llm::tool_schema::tool_schema;
use std::io;
use std::path::Path;

use serde_json::Value;

use super::{RegisteredTool, ToolContext, ToolDefinition, ToolInput, ToolOutput, args};
use crate::exec::{GrepOptions, GrepOutput};

/// The tool's name.
pub const NAME: &str = "grep";

/// What the model reads about the tool.
pub const DESCRIPTION: &str = "\
Search file contents with a regular expression (Rust regex syntax, like ripgrep). Returns \
matching lines as `path:line:text`. Searches the working directory by default, or the \
directory or file given in `path`; skips .git, binary files and files ignored by .gitignore. \
Narrow the files with `glob_filter` (for example `*.rs` or `src/**/*.ts`).";

/// Matches returned when the call gives no `max_results`.
pub const DEFAULT_MAX_RESULTS: u64 = 100;

const MAX_LINE_CHARS: usize = 500;

/// The shared schema, with more properties after `max_results` for a profile's variant.
macro_rules! grep_schema {
    ($($more:tt)*) => {
        tool_schema!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "description": "The regular expression to search for."
                },
                "path": {
                    "type": "string",
                    "description": "Directory or file to search (default: the working directory)."
                },
                "glob_filter": {
                    "type": "string",
                    "description": "Only search files matching this glob, e.g. `*.py`."
                },
                "case_insensitive": {
                    "type": "boolean",
                    "description": "Ignore case (default false)."
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Maximum number of matching lines (default 100)."
                }
                $($more)*
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    };
}

/// The tool's definition.
pub fn definition() -> ToolDefinition {
    ToolDefinition {
        name: NAME.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: grep_schema!(),
        freeform: None,
    }
}

/// Runs the search; a bad pattern's error tells the model how to fix it (`syntax`).
fn search(
    ctx: &ToolContext<'_>,
    pattern: &str,
    path: &Path,
    options: &GrepOptions,
    syntax: &str,
) -> Result<GrepOutput, String> {
    ctx.env.grep(pattern, path, options).map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidInput {
            format!("{e}. Fix the pattern or glob_filter ({syntax})")
        } else {
            format!("the search failed: {e}")
        }
    })
}

/// The `grep` tool.
pub fn tool() -> RegisteredTool {
    RegisteredTool::new(definition(), execute)
}

fn execute(input: ToolInput, ctx: &ToolContext<'_>) -> Result<ToolOutput, String> {
    let args = args::json(&input)?;
    let pattern = args::required_str(args, "pattern")?;
    let root = args::search_root(ctx, args, "a directory or file")?;
    let max_results = args::optional_u64(args, "max_results").unwrap_or(DEFAULT_MAX_RESULTS);
    let options = GrepOptions {
        case_insensitive: args::optional_bool(args, "case_insensitive").unwrap_or(false),
        glob_filter: args::optional_str(args, "glob_filter").map(str::to_string),
        max_results: usize::try_from(max_results).unwrap_or(usize::MAX),
        ..GrepOptions::default()
    };
    let syntax = "Rust regex syntax: escape `(`, `[`, `.`, `{` and `|` with `\\` to match them \
                  literally";
    let output = search(ctx, pattern, &root.path, &options, syntax)?;
    // A directory's matches name files below it; a file's matches all name the file.
    let base = args::display_path(ctx, &root.path);
    let cut = cut_short(&output, &base, root.is_dir);
    if output.matches.is_empty() {
        return Ok(ToolOutput::text(no_matches(pattern, &cut)));
    }
    let mut out = String::new();
    for m in &output.matches {
        if root.is_dir {
            out.push_str(&args::join_display(&base, &m.path));
        } else {
            out.push_str(&base);
        }
        out.push(':');
        out.push_str(&m.line_number.to_string());
        out.push(':');
        match m.line.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => {
                out.push_str(&m.line[..cut]);
                out.push_str(" [... line cut]");
            }
            None => out.push_str(&m.line),
        }
        out.push('\n');
    }
    if output.truncated {
        out.push_str(&format!(
            "[Stopped at max_results={max_results} matches; more exist. Narrow the pattern, \
             path or glob_filter, or raise max_results.]\n"
        ));
    }
    push_cut_short(&mut out, &cut);
    out.pop();
    Ok(ToolOutput::text(out))
}

/// The parts the search did not cover whole, one line each, their paths shown as the
/// matches' are (`base` joined with a directory's relative paths; `base` for a file).
fn cut_short(output: &GrepOutput, base: &str, is_dir: bool) -> Vec<String> {
    output
        .cut_short
        .iter()
        .map(|(path, what)| match (path.is_empty(), is_dir) {
            (true, _) => what.clone(),
            (false, true) => format!("{}: {what}", args::join_display(base, path)),
            (false, false) => format!("{base}: {what}"),
        })
        .collect()
}

/// The answer when nothing matched: an absence only where everything was searched.
fn no_matches(pattern: &str, cut: &[String]) -> String {
    if cut.is_empty() {
        return format!("No matches found for `{pattern}`.");
    }
    let mut text = format!(
        "No matches found for `{pattern}` in what was searched, but the search did not cover \
         everything, so a match may still be there:\n"
    );
    for note in cut {
        text.push_str("- ");
        text.push_str(note);
        text.push('\n');
    }
    text.push_str(
        "Search those parts another way (read_file with an offset, or a shell command such \
         as `grep -c` on the file).",
    );
    text
}

/// Appends the lines naming what was not searched whole, if anything, each ending in `\n`.
fn push_cut_short(out: &mut String, cut: &[String]) {
    if cut.is_empty() {
        return;
    }
    out.push_str("[Not searched whole; a match there may be missing:\n");
    for note in cut {
        out.push_str("- ");
        out.push_str(note);
        out.push('\n');
    }
    out.push_str("]\n");
}

/// Matching lines scanned at most by grep's `files_with_matches` and `count` modes.
const SUMMARY_SCAN_LINES: usize = 20_000;

/// The shared `grep` with Claude Code's `output_mode` (the Anthropic profile's).
pub(crate) fn claude_code_tool() -> RegisteredTool {
    let shared = tool();
    let mut definition = shared.definition.clone();
    definition.description.push_str(
        " `output_mode` chooses what comes back: `content` (matching lines, the default), \
         `files_with_matches` (only the paths of matching files) or `count` (the number of \
         matching lines per file).",
    );
    definition.parameters = grep_schema!(,
        "output_mode": {
            "type": "string",
            "enum": ["content", "files_with_matches", "count"],
            "description": "What to return (default content). With files_with_matches and \
                            count, max_results limits the files listed."
        }
    );
    let content = shared.executor;
    RegisteredTool::new(definition, move |input, ctx| {
        let mode = match &input {
            ToolInput::Json(map) => map.get("output_mode").and_then(Value::as_str),
            ToolInput::Freeform(_) => None,
        };
        match mode {
            Some(mode @ ("files_with_matches" | "count")) => {
                let count = mode == "count";
                summarize(&input, ctx, count)
            }
            _ => content(input, ctx),
        }
    })
}

/// grep's `files_with_matches` and `count` modes.
fn summarize(input: &ToolInput, ctx: &ToolContext<'_>, count: bool) -> Result<ToolOutput, String> {
    let args = args::json(input)?;
    let pattern = args::required_str(args, "pattern")?;
    let raw_path = args::optional_str(args, "path").unwrap_or(".");
    let path = args::resolve_path(ctx, raw_path)?;
    let is_dir = match ctx.env.stat(&path) {
        Ok(stat) => stat.is_dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!(
                "{raw_path} does not exist; give a directory or file inside the working directory"
            ));
        }
        Err(e) => return Err(format!("could not search {raw_path}: {e}")),
    };
    let max_files = args::optional_u64(args, "max_results")
        .map_or(DEFAULT_MAX_RESULTS as usize, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        });
    let options = GrepOptions {
        case_insensitive: args::optional_bool(args, "case_insensitive").unwrap_or(false),
        glob_filter: args::optional_str(args, "glob_filter").map(str::to_string),
        max_results: SUMMARY_SCAN_LINES,
        ..GrepOptions::default()
    };
    let output = search(ctx, pattern, &path, &options, "Rust regex syntax")?;
    let base = args::display_path(ctx, &path);
    let cut = cut_short(&output, &base, is_dir);
    if output.matches.is_empty() {
        return Ok(ToolOutput::text(no_matches(pattern, &cut)));
    }
    // Matches come ordered by path, so equal paths are adjacent.
    let mut files: Vec<(&str, usize)> = Vec::new();
    for m in &output.matches {
        match files.last_mut() {
            Some((path, n)) if *path == m.path => *n += 1,
            _ => files.push((&m.path, 1)),
        }
    }
    let shown = |file: &str| {
        if !is_dir {
            base.clone()
        } else if base == "." {
            file.to_string()
        } else {
            format!("{base}/{file}")
        }
    };
    let mut out = String::new();
    for (file, n) in files.iter().take(max_files) {
        out.push_str(&shown(file));
        if count {
            out.push(':');
            out.push_str(&n.to_string());
        }
        out.push('\n');
    }
    if files.len() > max_files {
        out.push_str(&format!(
            "[Listed {max_files} of {} files; raise max_results or narrow the search.]\n",
            files.len()
        ));
    }
    if output.truncated {
        out.push_str(&format!(
            "[Only the first {SUMMARY_SCAN_LINES} matching lines were scanned; more files or \
             matches may exist. Narrow the pattern, path or glob_filter.]\n"
        ));
    }
    push_cut_short(&mut out, &cut);
    out.pop();
    Ok(ToolOutput::text(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grep_offers_the_three_output_modes() {
        let tool = claude_code_tool();
        let modes = &tool.definition.parameters["properties"]["output_mode"]["enum"];
        assert_eq!(
            modes,
            &serde_json::json!(["content", "files_with_matches", "count"])
        );
        assert_eq!(tool.definition.name, "grep");
    }
}
