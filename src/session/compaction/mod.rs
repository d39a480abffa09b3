//! Context compaction: token accounting, the compaction settings and the plan (what is
//! kept, where the cut falls, the summary request's input).
//!
//! A session keeps its history under the model's context window. Before each model call the
//! worker compares its token count (the last reported input tokens plus an estimate of what
//! was appended since) with the threshold (`window − reserve`); above it, or when the
//! provider rejects a request as too long, it compacts:
//!
//! - the system prompt and project docs are rebuilt for every request, never summarised;
//! - user and host steering messages are kept verbatim up to a budget (the oldest beyond
//!   it go into the summary request instead);
//! - the most recent turns are kept verbatim down to a cut point that never separates a
//!   tool call from its result (turns are atomic, so thinking signatures stay with theirs);
//! - the rest is replaced by one summary turn, written by the session's own model from a
//!   compaction request with our prompt (fixed sections; completed actions with their
//!   outcome), updating the previous summary rather than summarising it.
//!
//! The compaction request is planned to fit the window: tool outputs of the summarised part
//! are cut middle-out first, then the oldest turns are dropped with a marker. A summary that
//! is larger than what it replaced, or that leaves the history above the threshold, is
//! rejected in favour of a mechanical record. This module plans and measures; it never
//! sends a request (the session does, in `session/compact.rs`) and never touches files.
//!
//! The host has three seams: [`CompactionConfig::with_summariser`] writes the summary
//! instead of the model, and the `pre_compact` and `post_compact` hooks
//! ([`Hooks`](crate::session::Hooks)) add to the summary request and see (or replace) the
//! summary before it is accepted.
//!
//! # Guards
//!
//! At most one compaction runs before each model call, and one more after the provider
//! rejects that call as too long; the call is then retried once, and a second rejection
//! ends the input with a [`ContextLength`](crate::ErrorKind::ContextLength) error. A
//! compaction whose summary is larger than what it replaced is rejected (a `WARNING`
//! with code `compaction`, then a mechanical record of the completed actions instead);
//! one that leaves the history above the threshold cuts the kept tool outputs
//! middle-out, and warns if even that is not enough. At most
//! [`max_compactions_per_input`](CompactionConfig::max_compactions_per_input) run per
//! input.
//!
//! # Context-overflow errors
//!
//! A request the provider rejects as too long is an error of kind
//! [`ContextLength`](crate::ErrorKind::ContextLength), whatever the wire format (the
//! statuses and messages recognised, provider by provider, are listed beside the code that
//! recognises them, in `llm/status.rs`); the session compacts and retries it once.
//!
//! A server that truncates the prompt silently (Ollama with a small `num_ctx`) reports no
//! error at all: give the session the server's real window
//! ([`CompactionConfig::with_context_window`], the CLI's `--context-window`) and the
//! threshold keeps requests under it.

pub(crate) mod account;
pub(crate) mod plan;
pub(crate) mod prompt;

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::llm::Request;
use account::CompactionLimits;

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompactionReason {
    /// The next request would have passed `window − reserve`.
    Threshold,
    /// The provider rejected a request as longer than the model's context window.
    Overflow,
    /// The host called `Session::compact`.
    Manual,
}

impl CompactionReason {
    /// The reason in snake case, as in the JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionReason::Threshold => "threshold",
            CompactionReason::Overflow => "overflow",
            CompactionReason::Manual => "manual",
        }
    }
}

/// What a compaction had to give up beyond summarising.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompactionFallback {
    /// Nothing: the whole summarised part reached the summariser.
    #[default]
    None,
    /// Tool outputs were cut in the middle (in the compaction request, or in the kept
    /// turns) to fit.
    Truncated,
    /// Turns were dropped with a marker: from the compaction request because even cut they
    /// did not fit, or because the summary was rejected or could not be made.
    Dropped,
}

impl CompactionFallback {
    /// The fallback in snake case, as in the JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionFallback::None => "none",
            CompactionFallback::Truncated => "truncated",
            CompactionFallback::Dropped => "dropped",
        }
    }

    /// The stronger of two fallbacks.
    pub(crate) fn max_with(self, other: CompactionFallback) -> CompactionFallback {
        let rank = |f: CompactionFallback| match f {
            CompactionFallback::None => 0,
            CompactionFallback::Truncated => 1,
            CompactionFallback::Dropped => 2,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// Writes the summary instead of the model: gets the compaction request, returns the
/// summary text (`None`: ask the model after all).
pub type Summariser = Arc<dyn Fn(&Request) -> Option<String> + Send + Sync>;

/// How a session compacts its history. On by default; see the [module docs](self).
///
/// Token figures left `None` are derived from the window: the reserve is
/// `min(16 384, window / 4)`, the recent-turn budget `min(20 000, 30 % of the threshold)`,
/// the user-message budget `min(20 000, 20 % of the threshold)` and the summary's output
/// limit `min(8 192, threshold / 6)`.
///
/// The host sees each summary before it is accepted, and may replace it, with a
/// `post_compact` hook:
///
/// ```
/// use agentloop::session::compaction::CompactionConfig;
/// use agentloop::session::{HookDecision, Hooks, SessionConfig};
///
/// let config = SessionConfig::default()
///     .with_compaction(
///         CompactionConfig::default()
///             .with_context_window(32_000)
///             .with_reserve_tokens(6_000),
///     )
///     .with_hooks(Hooks::new().with_post_compact(|input| {
///         let summary = input.summary.as_deref().unwrap_or_default();
///         HookDecision::ReplaceSummary(format!("{summary}\n(Reviewed by the host.)"))
///     }));
/// assert!(config.compaction.enabled);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct CompactionConfig {
    /// Whether the session compacts at all (default `true`). Off, a request that passes the
    /// window fails with a context-length error as before.
    pub enabled: bool,
    /// The model's context window in tokens; `None` uses the profile's.
    pub context_window: Option<usize>,
    /// Tokens kept free below the window for the answer; the threshold is `window −
    /// reserve`.
    pub reserve_tokens: Option<usize>,
    /// Tokens of recent turns kept verbatim.
    pub recent_tokens: Option<usize>,
    /// Tokens of user and steering messages kept verbatim (newest first).
    pub user_message_tokens: Option<usize>,
    /// Output-token limit of the summary request.
    pub summary_max_tokens: Option<usize>,
    /// Most compactions per input (default 64); beyond it the session stops compacting
    /// for that input, with a `WARNING`.
    pub max_compactions_per_input: usize,
    /// The compaction request's instructions; `None` uses ours.
    pub prompt: Option<String>,
    /// Writes summaries instead of the model.
    pub summariser: Option<Summariser>,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            enabled: true,
            context_window: None,
            reserve_tokens: None,
            recent_tokens: None,
            user_message_tokens: None,
            summary_max_tokens: None,
            max_compactions_per_input: 64,
            prompt: None,
            summariser: None,
        }
    }
}

impl fmt::Debug for CompactionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactionConfig")
            .field("enabled", &self.enabled)
            .field("context_window", &self.context_window)
            .field("reserve_tokens", &self.reserve_tokens)
            .field("recent_tokens", &self.recent_tokens)
            .field("user_message_tokens", &self.user_message_tokens)
            .field("summary_max_tokens", &self.summary_max_tokens)
            .field("max_compactions_per_input", &self.max_compactions_per_input)
            .field("prompt", &self.prompt.as_ref().map(|_| "custom"))
            .field("summariser", &self.summariser.as_ref().map(|_| "closure"))
            .finish()
    }
}

impl CompactionConfig {
    /// Compaction off.
    pub fn disabled() -> CompactionConfig {
        CompactionConfig {
            enabled: false,
            ..CompactionConfig::default()
        }
    }

    /// Overrides the model's context window.
    pub fn with_context_window(mut self, tokens: usize) -> CompactionConfig {
        self.context_window = Some(tokens);
        self
    }

    /// Sets the reserve below the window.
    pub fn with_reserve_tokens(mut self, tokens: usize) -> CompactionConfig {
        self.reserve_tokens = Some(tokens);
        self
    }

    /// Sets the recent-turn budget.
    pub fn with_recent_tokens(mut self, tokens: usize) -> CompactionConfig {
        self.recent_tokens = Some(tokens);
        self
    }

    /// Sets the user-message budget.
    pub fn with_user_message_tokens(mut self, tokens: usize) -> CompactionConfig {
        self.user_message_tokens = Some(tokens);
        self
    }

    /// Sets the summary's output-token limit.
    pub fn with_summary_max_tokens(mut self, tokens: usize) -> CompactionConfig {
        self.summary_max_tokens = Some(tokens);
        self
    }

    /// Sets the most compactions per input.
    pub fn with_max_compactions_per_input(mut self, count: usize) -> CompactionConfig {
        self.max_compactions_per_input = count;
        self
    }

    /// Replaces our compaction instructions.
    pub fn with_prompt(mut self, prompt: impl Into<String>) -> CompactionConfig {
        self.prompt = Some(prompt.into());
        self
    }

    /// Writes summaries with `summariser` instead of the model (`None` from it: ask the
    /// model).
    pub fn with_summariser(
        mut self,
        summariser: impl Fn(&Request) -> Option<String> + Send + Sync + 'static,
    ) -> CompactionConfig {
        self.summariser = Some(Arc::new(summariser));
        self
    }

    /// The token budgets for a model whose profile says `profile_window`.
    pub(crate) fn limits(&self, profile_window: usize) -> CompactionLimits {
        let window = self.context_window.unwrap_or(profile_window);
        let reserve = self.reserve_tokens.unwrap_or((window / 4).min(16_384));
        let threshold = window.saturating_sub(reserve).max(1);
        CompactionLimits {
            window,
            threshold,
            recent: self
                .recent_tokens
                .unwrap_or((threshold * 3 / 10).min(20_000)),
            users: self
                .user_message_tokens
                .unwrap_or((threshold / 5).min(20_000)),
            summary_output: self
                .summary_max_tokens
                .unwrap_or((threshold / 6).min(8_192))
                .max(64),
        }
    }
}

#[cfg(test)]
mod tests;
