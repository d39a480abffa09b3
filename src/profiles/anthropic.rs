//! The Anthropic profile (spec §3.5), aligned with Claude Code: exact-string `edit_file`
//! is the way to edit. It assembles tools and settings; its one executor of its own (grep's
//! summary modes) reads only through the execution environment.
//!
//! - Tools, in order: `read_file`, `write_file`, `edit_file`, `shell`, `grep`, `glob`, then
//!   the subagent tools. Parameter names are Claude Code's where the spec asks for it:
//!   `file_path`, `old_string`, `new_string`, `replace_all`; `read_file` takes `offset` and
//!   `limit`.
//! - `grep` has Claude Code's `output_mode`: `content` (matching lines, the default),
//!   `files_with_matches` (one path per matching file) or `count` (matches per file).
//! - Commands default to a 120 s timeout (Claude Code's), unless the session configures
//!   its own default or the call sets `timeout_ms`; the session maximum still applies.
//! - Provider options: `anthropic.beta_headers` carries
//!   [`INTERLEAVED_THINKING_BETA`] for Claude 4 and later models, so the model can think
//!   between tool calls when reasoning is on. Add others (such as [`CONTEXT_1M_BETA`])
//!   with [`ProviderProfile::merge_provider_options`] — a list given that way replaces the
//!   profile's, so repeat the ones to keep.
//! - Project instructions: `AGENTS.md` and `CLAUDE.md`.

use std::io;
use std::time::Duration;

use serde_json::{Value, json};

use crate::exec::GrepOptions;
use crate::tools::{
    RegisteredTool, ToolContext, ToolInput, ToolOutput, args, edit_file, glob, grep, read_file,
    shell, write_file,
};

use super::{ModelInfo, ProviderProfile, aligned, register_all};

/// The provider id (and family) of the profile: the Messages API provider
/// [`crate::llm::anthropic::Anthropic`].
pub const ID: &str = "anthropic";

/// The shell timeout for commands that set none (Claude Code's default).
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// The beta that lets Claude 4 models think between tool calls.
pub const INTERLEAVED_THINKING_BETA: &str = "interleaved-thinking-2025-05-14";

/// The beta of the 1M-token context window (on the models that offer it).
pub const CONTEXT_1M_BETA: &str = "context-1m-2025-08-07";

/// What the profile assumes about a model missing from the [`model_info`](super::model_info)
/// table: 200 000 tokens, reasoning.
pub const DEFAULT_MODEL_INFO: ModelInfo = ModelInfo {
    context_window: 200_000,
    supports_reasoning: true,
};

/// Matching lines scanned at most by grep's `files_with_matches` and `count` modes.
const SUMMARY_SCAN_LINES: usize = 20_000;

/// The Anthropic profile for `model` (for example `"claude-opus-4-6"`).
///
/// ```
/// use std::time::Duration;
/// let profile = agentloop::profiles::anthropic("claude-sonnet-4-5");
/// assert_eq!(profile.id, "anthropic");
/// assert_eq!(profile.default_command_timeout, Some(Duration::from_secs(120)));
/// assert!(profile.tool_registry.names().contains(&"edit_file".to_string()));
/// assert!(!profile.tool_registry.names().contains(&"apply_patch".to_string()));
/// ```
pub fn anthropic(model: impl Into<String>) -> ProviderProfile {
    let model = model.into();
    let interleaved = thinks_between_tool_calls(&model);
    let mut profile = aligned(ID, model, DEFAULT_MODEL_INFO)
        .with_default_command_timeout(DEFAULT_COMMAND_TIMEOUT);
    if interleaved {
        profile = profile
            .with_provider_options(json!({ ID: { "beta_headers": [INTERLEAVED_THINKING_BETA] } }));
    }
    register_all(
        &mut profile,
        [
            read_file::tool(),
            write_file::tool(),
            edit_file::tool(),
            shell::tool(),
            grep_tool(),
            glob::tool(),
        ],
    );
    profile
}

/// Claude 4 and later (not the 3.x models) take the interleaved-thinking beta.
fn thinks_between_tool_calls(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model);
    name.starts_with("claude-") && !name.starts_with("claude-3")
}

/// The shared `grep` with Claude Code's `output_mode`.
pub fn grep_tool() -> RegisteredTool {
    let shared = grep::tool();
    let mut definition = shared.definition.clone();
    definition.description.push_str(
        " `output_mode` chooses what comes back: `content` (matching lines, the default), \
         `files_with_matches` (only the paths of matching files) or `count` (the number of \
         matching lines per file).",
    );
    if let Some(properties) = definition.parameters["properties"].as_object_mut() {
        properties.insert(
            "output_mode".to_string(),
            json!({
                "type": "string",
                "enum": ["content", "files_with_matches", "count"],
                "description": "What to return (default content). With files_with_matches \
                                and count, max_results limits the files listed."
            }),
        );
    }
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
        .map_or(grep::DEFAULT_MAX_RESULTS as usize, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        });
    let options = GrepOptions {
        case_insensitive: args::optional_bool(args, "case_insensitive").unwrap_or(false),
        glob_filter: args::optional_str(args, "glob_filter").map(str::to_string),
        max_results: SUMMARY_SCAN_LINES,
        ..GrepOptions::default()
    };
    let output = ctx.env.grep(pattern, &path, &options).map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidInput {
            format!("{e}. Fix the pattern or glob_filter (Rust regex syntax)")
        } else {
            format!("the search failed: {e}")
        }
    })?;
    if output.matches.is_empty() {
        return Ok(ToolOutput::text(format!(
            "No matches found for `{pattern}`."
        )));
    }
    // Matches come ordered by path, so equal paths are adjacent.
    let mut files: Vec<(&str, usize)> = Vec::new();
    for m in &output.matches {
        match files.last_mut() {
            Some((path, n)) if *path == m.path => *n += 1,
            _ => files.push((&m.path, 1)),
        }
    }
    let base = args::display_path(ctx, &path);
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
    out.pop();
    Ok(ToolOutput::text(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_claude_4_and_later_get_the_interleaved_thinking_beta() {
        assert!(thinks_between_tool_calls("claude-opus-4-6"));
        assert!(thinks_between_tool_calls("claude-sonnet-4-5-20250929"));
        assert!(!thinks_between_tool_calls("claude-3-7-sonnet-latest"));
        assert!(!thinks_between_tool_calls("my-proxy-model"));
    }

    #[test]
    fn grep_offers_the_three_output_modes() {
        let tool = grep_tool();
        let modes = &tool.definition.parameters["properties"]["output_mode"]["enum"];
        assert_eq!(modes, &json!(["content", "files_with_matches", "count"]));
        assert_eq!(tool.definition.name, "grep");
    }
}
