//! The OpenAI profile (spec §3.4), aligned with OpenAI's codex agent: `apply_patch` is the
//! way to edit. It only assembles tools and settings; it never talks to a provider.
//!
//! - Tools, in order: `read_file`, `apply_patch`, `write_file` (for new files without patch
//!   overhead), `shell`, `grep`, `glob`, `update_plan` (Codex's plan tool), then the subagent
//!   tools.
//! - `apply_patch` carries a Lark grammar ([`apply_patch::GRAMMAR`]): on the Responses API
//!   it is a freeform (`custom`) tool whose input is the patch text itself, as codex offers
//!   it; other wire formats send it as a JSON function with one string parameter `patch`
//!   (see [`ProviderProfile::without_freeform_tools`] to make the prompt say so too).
//! - Commands default to the session's 10 s timeout (codex's default).
//! - `reasoning_effort` reaches the Responses body as `reasoning.effort`, with a reasoning
//!   summary and encrypted reasoning asked for, so that reasoning carries over between
//!   rounds of a stateless (`store: false`) conversation.
//! - Project instructions: `AGENTS.md` and `.codex/instructions.md`.

use crate::tools::{apply_patch, glob, grep, plan, read_file, shell, write_file};

use super::{ModelInfo, ProviderProfile, aligned, register_all, with_background};
use crate::tools::background::Shape;

/// The provider id (and family) of the profile: the Responses API provider
/// [`crate::llm::openai::OpenAi`].
pub const ID: &str = "openai";

/// What the profile assumes about a model missing from the [`model_info`](super::model_info)
/// table: a GPT-5-class model (400 000 tokens, reasoning).
pub const DEFAULT_MODEL_INFO: ModelInfo = ModelInfo {
    context_window: 400_000,
    supports_reasoning: true,
};

/// The OpenAI profile for `model` (for example `"gpt-5.2-codex"`).
///
/// ```
/// let profile = agentloop::profiles::openai("gpt-5.2-codex");
/// assert_eq!(profile.id, "openai");
/// let names = profile.tool_registry.names();
/// assert!(names.contains(&"apply_patch".to_string()));
/// assert!(!names.contains(&"edit_file".to_string()));
/// assert!(profile.tools().iter().any(|t| t.name == "apply_patch" && t.freeform.is_some()));
/// ```
pub fn openai(model: impl Into<String>) -> ProviderProfile {
    let mut profile = aligned(ID, model.into(), DEFAULT_MODEL_INFO);
    register_all(
        &mut profile,
        with_background(
            Shape::Codex,
            [
                read_file::tool(),
                apply_patch::tool(),
                write_file::tool(),
                shell::tool_for(Shape::Codex),
                grep::tool(),
                glob::tool(),
                plan::update_plan(),
            ],
        ),
    );
    profile
}
