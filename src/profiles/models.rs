//! What a profile assumes about a model from its id: context window size and whether it
//! reasons. An advisory table by model family; it never calls a provider.

/// What a profile assumes about one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) struct ModelInfo {
    /// The context window in tokens (advisory: used for the 80 % usage warning).
    pub(crate) context_window: usize,
    /// Whether the model reasons (thinking, reasoning effort).
    pub(crate) supports_reasoning: bool,
}

const TABLE: &[(&str, usize, bool)] = &[
    ("claude-3-7", 200_000, true),
    ("claude-3", 200_000, false),
    ("claude-", 200_000, true),
    ("gpt-5", 400_000, true),
    ("gpt-4.1", 1_047_576, false),
    ("gpt-4o", 128_000, false),
    ("gpt-4", 128_000, false),
    ("gpt-3.5", 16_385, false),
    ("o1", 200_000, true),
    ("o3", 200_000, true),
    ("o4", 200_000, true),
    ("codex-", 200_000, true),
    ("gemini-1.5-pro", 2_097_152, false),
    ("gemini-1.5", 1_048_576, false),
    ("gemini-2.0", 1_048_576, false),
    ("gemini-", 1_048_576, true),
];

/// The models a profile of `family` knows by name, newest first: what a host offers in a
/// model picker (the ACP `model` option). Any other id works too.
pub(crate) fn known_models(family: &str) -> &'static [&'static str] {
    match family {
        "anthropic" => &["claude-opus-4-6", "claude-sonnet-4-5", "claude-haiku-4-5"],
        "openai" => &["gpt-5.2-codex", "gpt-5", "gpt-5-mini"],
        "gemini" => &["gemini-3-pro-preview", "gemini-2.5-pro", "gemini-2.5-flash"],
        _ => &[],
    }
}

/// What the profile assumes about `model`, or `None` for a model of no known family: the
/// longest matching prefix of the table (see
/// [`ProviderProfile::with_model`](crate::profiles::ProviderProfile::with_model)), a
/// provider prefix such as `models/` or `openai/` ignored.
pub(crate) fn model_info(model: &str) -> Option<ModelInfo> {
    let name = model.rsplit('/').next().unwrap_or(model);
    TABLE
        .iter()
        .filter(|(prefix, _, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _, _)| prefix.len())
        .map(|&(_, context_window, supports_reasoning)| ModelInfo {
            context_window,
            supports_reasoning,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_wins_and_provider_prefixes_are_ignored() {
        assert_eq!(model_info("gpt-5.2-codex").unwrap().context_window, 400_000);
        assert!(
            !model_info("claude-3-5-haiku-latest")
                .unwrap()
                .supports_reasoning
        );
        assert_eq!(
            model_info("models/gemini-2.5-pro").unwrap().context_window,
            1_048_576
        );
        assert!(model_info("qwen2.5-coder").is_none());
    }

    #[test]
    fn the_longest_prefix_wins() {
        assert!(
            model_info("claude-3-7-sonnet-latest")
                .unwrap()
                .supports_reasoning
        );
        assert!(!model_info("claude-3-opus").unwrap().supports_reasoning);
        assert!(model_info("claude-opus-4-6").unwrap().supports_reasoning);
        assert_eq!(
            model_info("gemini-1.5-pro-002").unwrap().context_window,
            2_097_152
        );
        assert_eq!(
            model_info("gemini-1.5-flash").unwrap().context_window,
            1_048_576
        );
        assert_eq!(
            model_info("gpt-4.1-mini").unwrap().context_window,
            1_047_576
        );
        assert_eq!(model_info("gpt-4o-mini").unwrap().context_window, 128_000);
    }

    #[test]
    fn provider_prefixes_are_ignored_and_unknown_models_have_no_entry() {
        assert_eq!(model_info("openai/gpt-5").unwrap().context_window, 400_000);
        assert_eq!(model_info("llama3.1"), None);
        assert_eq!(model_info(""), None);
    }
}
