//! Context compaction: token accounting, the compaction settings, the plan (what is kept,
//! where the cut falls, the summary request's input) and the recognition of a provider's
//! context-overflow error.
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
//! sends a request (the worker does, in `run.rs`) and never touches files.
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
//! [`ContextLength`](crate::ErrorKind::ContextLength), whatever the wire format; the
//! session compacts and retries it once. Recognised shapes (real or documented bodies of
//! each are in `tests/data/conformance/errors/`, with their sources in that folder's
//! README):
//!
//! | provider | status | type / code | message text |
//! |---|---|---|---|
//! | Anthropic | 400 | `invalid_request_error` | "prompt is too long" |
//! | Anthropic | 413 | `request_too_large` | (the status) |
//! | OpenAI Responses | 400 | `context_length_exceeded` | "exceeds the context window" |
//! | OpenAI Chat Completions | 400 | `context_length_exceeded` | "maximum context length" |
//! | Ollama (`/v1`) | 400 | `invalid_request_error` | "prompt too long; exceeded max context length" |
//! | llama.cpp server | 400 | `exceed_context_size_error` | "exceeds the available context size" |
//! | vLLM | 400 | `BadRequestError` | "maximum context length", "maximum model length" |
//! | LM Studio | 200 with an SSE `error` event, or 400 | — | "context length" ("loaded with context length of only …", "greater than the context length") |
//! | OpenRouter | 400 | numeric `code` | "maximum context length" |
//! | Groq | 400 | `context_length_exceeded` | "reduce the length of the messages" |
//! | DeepSeek | 400 | `invalid_request_error` | "maximum context length" |
//! | Gemini | 400 | `INVALID_ARGUMENT` | "exceeds the maximum number of tokens" |
//!
//! A server that truncates the prompt silently (Ollama with a small `num_ctx`) reports no
//! error at all: give the session the server's real window
//! ([`CompactionConfig::with_context_window`], the CLI's `--context-window`) and the
//! threshold keeps requests under it.

pub(crate) mod account;
pub(crate) mod plan;
mod prompt;
pub(crate) mod run;

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
}

/// The summary a compaction is about to put into the history, shown to the host's summary
/// hook ([`CompactionConfig::with_summary_hook`]) before it is accepted.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProposedSummary {
    /// Why the compaction runs.
    pub reason: CompactionReason,
    /// The summary text (the model's answer, or the mechanical record when the model's was
    /// rejected or could not be made).
    pub summary: String,
    /// The compaction request's user input (the conversation as text, the completed
    /// actions, the previous summary).
    pub input: String,
    /// History turns the summary replaces.
    pub turns_summarised: usize,
    /// Estimated tokens of the history before the compaction.
    pub tokens_before: usize,
}

/// Sees each proposed summary; `Some(text)` replaces it.
pub type SummaryHook = Arc<dyn Fn(&ProposedSummary) -> Option<String> + Send + Sync>;

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
/// ```
/// use agentloop::session::SessionConfig;
/// use agentloop::session::compaction::CompactionConfig;
///
/// let config = SessionConfig::default().with_compaction(
///     CompactionConfig::default()
///         .with_context_window(32_000)
///         .with_reserve_tokens(6_000)
///         .with_summary_hook(|proposed| {
///             Some(format!("{}\n(Reviewed by the host.)", proposed.summary))
///         }),
/// );
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
    /// The host's look at each proposed summary.
    pub summary_hook: Option<SummaryHook>,
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
            summary_hook: None,
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
            .field("summary_hook", &self.summary_hook.as_ref().map(|_| "hook"))
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

    /// Shows each proposed summary to `hook` before it is accepted; `Some(text)` replaces
    /// it. The replacement goes through the same guards as the model's summary.
    pub fn with_summary_hook(
        mut self,
        hook: impl Fn(&ProposedSummary) -> Option<String> + Send + Sync + 'static,
    ) -> CompactionConfig {
        self.summary_hook = Some(Arc::new(hook));
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
