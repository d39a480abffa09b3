//! The Gemini profile (spec §3.6), aligned with gemini-cli: batch reading, directory
//! listings and gemini-cli's search-and-replace parameters. It assembles tools and
//! settings; its `edit_file` delegates to the shared executor.
//!
//! - Tools, in order: `read_file`, `read_many_files`, `write_file`, `edit_file`, `shell`,
//!   `grep`, `glob`, `list_dir`, `write_todos` (gemini-cli's plan tool), then the subagent
//!   tools.
//! - `edit_file` takes gemini-cli's `replace` parameters under the spec's name:
//!   `file_path`, `old_string`, `new_string`, `allow_multiple` (replace every occurrence)
//!   and an optional `instruction` (what the edit is for, shown to the user).
//! - Commands default to the session's 10 s timeout.
//! - Provider options: `gemini.safetySettings` blocks only content of high probability of
//!   harm in the four adjustable categories, since source code about security, exploits or
//!   medicine trips the stricter defaults; grounding with Google Search is left to the
//!   host (`merge_provider_options`), because it changes what the model may cite.
//! - Project instructions: `AGENTS.md` and `GEMINI.md`.
//!
//! `web_search` and `web_fetch` (optional in the spec) are not included: they need network
//! access that a coding session's execution environment does not grant by default.

use serde_json::{Value, json};

use crate::tools::{
    edit_file, glob, grep, list_dir, plan, read_file, read_many_files, shell, write_file,
};

use super::{ModelInfo, ProviderProfile, aligned, register_all, with_background};
use crate::tools::background::Shape;

/// The provider id (and family) of the profile: the Gemini API provider
/// [`crate::llm::gemini::Gemini`].
pub const ID: &str = "gemini";

/// What the profile assumes about a model missing from the [`model_info`](super::model_info)
/// table: 1 048 576 tokens, reasoning.
pub const DEFAULT_MODEL_INFO: ModelInfo = ModelInfo {
    context_window: 1_048_576,
    supports_reasoning: true,
};

/// The harm categories whose threshold the profile sets.
const HARM_CATEGORIES: [&str; 4] = [
    "HARM_CATEGORY_HARASSMENT",
    "HARM_CATEGORY_HATE_SPEECH",
    "HARM_CATEGORY_SEXUALLY_EXPLICIT",
    "HARM_CATEGORY_DANGEROUS_CONTENT",
];

/// The Gemini profile for `model` (for example `"gemini-3-pro-preview"`).
///
/// ```
/// let profile = agentloop::profiles::gemini("gemini-2.5-pro");
/// assert_eq!(profile.id, "gemini");
/// let names = profile.tool_registry.names();
/// for tool in ["read_many_files", "list_dir", "edit_file"] {
///     assert!(names.contains(&tool.to_string()));
/// }
/// let options = profile.provider_options().unwrap();
/// assert_eq!(options["gemini"]["safetySettings"][0]["threshold"], "BLOCK_ONLY_HIGH");
/// ```
pub fn gemini(model: impl Into<String>) -> ProviderProfile {
    let safety: Vec<Value> = HARM_CATEGORIES
        .iter()
        .map(|category| json!({"category": category, "threshold": "BLOCK_ONLY_HIGH"}))
        .collect();
    let mut profile = aligned(ID, model.into(), DEFAULT_MODEL_INFO)
        .with_provider_options(json!({ ID: { "safetySettings": safety } }));
    register_all(
        &mut profile,
        with_background(
            Shape::GeminiCli,
            [
                read_file::tool(),
                read_many_files::tool(),
                write_file::tool(),
                edit_file::gemini_cli_tool(),
                shell::tool_for(Shape::GeminiCli),
                grep::tool(),
                glob::tool(),
                list_dir::tool(),
                plan::write_todos(),
            ],
        ),
    );
    profile
}
