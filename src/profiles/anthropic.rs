//! The Anthropic profile (spec §3.5), aligned with Claude Code: exact-string `edit_file`
//! is the way to edit. It assembles tools and settings (grep's summary modes are
//! `tools::grep`'s Claude Code variant).
//!
//! - Tools, in order: `read_file`, `write_file`, `edit_file`, `shell`, `grep`, `glob`,
//!   `todo_write` (Claude Code's `TodoWrite`), then the subagent tools. Parameter names are Claude Code's where the spec asks for it:
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

use std::time::Duration;

use serde_json::json;

use crate::tools::{edit_file, glob, grep, plan, read_file, shell, write_file};

use super::{ModelInfo, ProviderProfile, aligned, register_all, with_background};
use crate::tools::background::Shape;

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
        with_background(
            Shape::Common,
            [
                read_file::tool(),
                write_file::tool(),
                edit_file::tool(),
                shell::tool_for(Shape::Common),
                grep::claude_code_tool(),
                glob::tool(),
                plan::todo_write(),
            ],
        ),
    );
    profile
}

/// Claude 4 and later (not the 3.x models) take the interleaved-thinking beta.
fn thinks_between_tool_calls(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model);
    name.starts_with("claude-") && !name.starts_with("claude-3")
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
}
