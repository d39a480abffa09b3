//! `SessionConfig`: limits, budgets, timeouts, truncation overrides, loop detection,
//! approval, fallback models, prompt caching, the transcript file, checkpoints and subagent
//! worktrees.
//!
//! Plain data with the spec's defaults (§2.2). This module never starts anything.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::approval::{Approval, ApprovalHook};
use super::budget::Budget;
use super::checkpoint::CheckpointConfig;
use super::compaction::CompactionConfig;
use super::hooks::Hooks;
use super::mode::SessionMode;
use crate::llm::ToolCall;
use crate::llm::pricing::{Price, PriceTable};
use crate::mcp::{McpHost, McpServer};
use crate::profiles::ProviderProfile;

/// How a session behaves. Build with `SessionConfig::default()` and the `with_*` methods,
/// or set the public fields.
///
/// ```
/// use agentloop::session::{Approval, SessionConfig};
///
/// let config = SessionConfig::default()
///     .with_max_tool_rounds_per_input(20)
///     .with_reasoning_effort("high")
///     .with_approval(|call| match call.name.as_str() {
///         "shell" => Approval::Ask,
///         _ => Approval::Allow,
///     });
/// assert_eq!(config.max_tool_rounds_per_input, 20);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct SessionConfig {
    /// Most model calls (assistant turns) over the whole session; 0 = unlimited.
    ///
    /// A "turn" here is one model response: the count includes every response of every
    /// input, with or without tool calls. When the limit is reached the current input
    /// stops with a `TURN_LIMIT` event, and every later input stops at once the same way.
    pub max_turns: usize,
    /// Most tool rounds per input; 0 = unlimited. A round is one model response with tool
    /// calls and their execution. When reached, the input stops with a `TURN_LIMIT` event
    /// carrying `round` (the model does not see the last round's results until the next
    /// input).
    pub max_tool_rounds_per_input: usize,
    /// Timeout for commands that set none. `None` (the default) uses the profile's default
    /// if it has one, else 10 s (spec §5.4).
    pub default_command_timeout: Option<Duration>,
    /// Upper bound for any command timeout. Default 600 s.
    pub max_command_timeout: Duration,
    /// `"low"`, `"medium"`, `"high"` (or a provider's own value); `None` = provider default.
    /// Changed during a session with `Session::set_reasoning_effort`.
    pub reasoning_effort: Option<String>,
    /// The most tokens one model response may have (the request's `max_tokens`); `None`
    /// (the default) leaves it to the provider. What stops a model that would not stop.
    pub max_output_tokens: Option<u32>,
    /// Per-tool character limits for the model's copy of tool output (spec §5.2 defaults
    /// apply to tools not listed).
    pub tool_output_limits: BTreeMap<String, usize>,
    /// Per-tool line limits, applied after the character limit.
    pub tool_line_limits: BTreeMap<String, usize>,
    /// Whether to warn the model about repeating tool calls. Default on.
    pub enable_loop_detection: bool,
    /// How many recent tool calls loop detection looks at. Default 10.
    pub loop_detection_window: usize,
    /// Deepest subagent nesting. Default 1.
    pub max_subagent_depth: usize,
    /// Most tool calls of one round that run at once when the profile runs them in
    /// parallel; the others wait their turn, in the model's order. Default 8.
    pub max_parallel_tool_calls: usize,
    /// Decides, before each validated tool call runs, whether it may run. `None` allows
    /// everything. The session runs it as the last `pre_tool_use` hook.
    pub approval: Option<ApprovalHook>,
    /// Lifecycle hooks (see [`Hooks`]). Subagents inherit them.
    pub hooks: Hooks,
    /// Prices by model id, for the `cost_usd` of events and [`Outcome`](super::Outcome).
    /// Default: the built-in profiles' default models ([`PriceTable::default`]).
    pub prices: PriceTable,
    /// Whether file tools may touch paths outside the environment's working directory.
    /// Default `false`.
    pub allow_outside_working_dir: bool,
    /// Where to write the session's transcript (JSON Lines, see
    /// [`transcript`](crate::session::transcript)); `None` (the default) writes none.
    /// `Session::new` creates the file and fails if it already exists; `Session::resume`
    /// appends to the transcript it resumes when this is `None` or names that same file.
    pub transcript_path: Option<PathBuf>,
    /// Whether the transcript also records every event (`{"type":"event"}` records), not
    /// only the history and the requests. Default `false`.
    pub transcript_events: bool,
    /// How the history is compacted when it nears the model's context window (on by
    /// default; see [`compaction`](crate::session::compaction)).
    pub compaction: CompactionConfig,
    /// MCP servers whose tools the session offers (see [`mcp`](crate::mcp)). Started in
    /// parallel when the session starts; ended with it.
    pub mcp_servers: Vec<McpServer>,
    /// What one input (with the subagents it starts) may spend; no limit by default. See
    /// [`Budget`]: crossing a limit ends the input with `BUDGET_EXHAUSTED` and
    /// [`StopReason::BudgetExhausted`](super::StopReason::BudgetExhausted).
    pub input_budget: Budget,
    /// What the whole session (with all its subagents) may spend; no limit by default.
    /// Once it is exhausted, every later input stops at once the same way.
    pub session_budget: Budget,
    /// The fraction of a budget at which `BUDGET_WARNING` fires, once per budget (per input
    /// for the input's budgets). Default 0.8.
    pub budget_warning_fraction: f64,
    /// Whether the model gets a note when a budget passes `budget_warning_fraction` (how
    /// much is left, and to wrap up). Default `false`.
    pub budget_note_to_model: bool,
    /// Models to continue with, in order, when the current one keeps failing: after the
    /// client's retries gave up on a rate limit, an overloaded or failing server (5xx, 529)
    /// or an exhausted quota, the input goes on from the current history with the next
    /// profile (a `MODEL_FALLBACK` event says which and why). Each is a whole profile: the
    /// same profile with another model (`profile.clone().with_model(…)`), or another
    /// provider's (whose id the client must have registered). Subagents inherit the chain.
    pub fallback_models: Vec<ProviderProfile>,
    /// How long the provider keeps the prompt-cache entries the session's requests write,
    /// where it lets the caller choose: Anthropic takes 5 minutes (its default) or 1 hour
    /// (`cache_control.ttl`); other values are a configuration error at `Session::new`.
    /// `None` (the default) leaves it to the provider.
    pub prompt_cache_ttl: Option<Duration>,
    /// How many times [`Session::run_structured`](super::Session::run_structured) sends an
    /// answer that is not a valid final answer back to the model before the input fails.
    /// Default 3.
    pub structured_output_retries: usize,
    /// What the MCP servers' questions go to: elicitations, the URL of a login (see
    /// [`McpHost`]). `None` (the default): elicitations are declined and a server that
    /// needs a login is reported as such.
    pub mcp_host: Option<Arc<dyn McpHost>>,
    /// Roots offered to MCP servers (`roots/list`) after the working directory, which is
    /// always the first. Changed during a session with `Session::set_mcp_roots`.
    pub mcp_roots: Vec<PathBuf>,
    /// The mode of the first input (see [`SessionMode`]); `Session::set_mode` switches it
    /// later. Default: [`SessionMode::Default`].
    pub mode: SessionMode,
    /// Most background processes the model may have running at once (the profiles'
    /// background tools, `Session::background`); one more is refused with an error the
    /// model reads. Default 8.
    pub max_background_processes: usize,
    /// Bytes of background output the session keeps at most, over all its processes:
    /// each stream of each of the `max_background_processes` keeps its share (its first
    /// quarter and its newest bytes; the middle is dropped and counted). Default 16 MiB.
    pub background_output_bytes: usize,
    /// Moves a foreground command still running after this long to the background
    /// instead of letting it run on to its timeout (the model is told its id; a command
    /// whose timeout comes first moves then, instead of being killed). `None` (the
    /// default): commands run in the foreground until they end or time out.
    pub background_after: Option<Duration>,
    /// Checkpoints of the working tree, for [`Session::rewind`](super::Session::rewind)
    /// (see [`checkpoint`](super::checkpoint)). Off by default.
    pub checkpoints: CheckpointConfig,
    /// Whether subagents run in their own `git worktree` when `spawn_agent` does not say
    /// (its `isolation` argument). Default `false`: they share the working tree.
    pub subagent_worktrees: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            max_turns: 0,
            max_tool_rounds_per_input: 0,
            default_command_timeout: None,
            max_command_timeout: Duration::from_secs(600),
            reasoning_effort: None,
            max_output_tokens: None,
            tool_output_limits: BTreeMap::new(),
            tool_line_limits: BTreeMap::new(),
            enable_loop_detection: true,
            loop_detection_window: 10,
            max_subagent_depth: 1,
            max_parallel_tool_calls: 8,
            approval: None,
            hooks: Hooks::default(),
            prices: PriceTable::default(),
            allow_outside_working_dir: false,
            transcript_path: None,
            transcript_events: false,
            compaction: CompactionConfig::default(),
            mcp_servers: Vec::new(),
            input_budget: Budget::default(),
            session_budget: Budget::default(),
            budget_warning_fraction: 0.8,
            budget_note_to_model: false,
            fallback_models: Vec::new(),
            prompt_cache_ttl: None,
            structured_output_retries: 3,
            mcp_host: None,
            mcp_roots: Vec::new(),
            mode: SessionMode::Default,
            max_background_processes: 8,
            background_output_bytes: 16 * 1024 * 1024,
            background_after: None,
            checkpoints: CheckpointConfig::default(),
            subagent_worktrees: false,
        }
    }
}

impl fmt::Debug for SessionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionConfig")
            .field("max_turns", &self.max_turns)
            .field("max_tool_rounds_per_input", &self.max_tool_rounds_per_input)
            .field("default_command_timeout", &self.default_command_timeout)
            .field("max_command_timeout", &self.max_command_timeout)
            .field("reasoning_effort", &self.reasoning_effort)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("tool_output_limits", &self.tool_output_limits)
            .field("tool_line_limits", &self.tool_line_limits)
            .field("enable_loop_detection", &self.enable_loop_detection)
            .field("loop_detection_window", &self.loop_detection_window)
            .field("max_subagent_depth", &self.max_subagent_depth)
            .field("max_parallel_tool_calls", &self.max_parallel_tool_calls)
            .field("approval", &self.approval.as_ref().map(|_| "hook"))
            .field("hooks", &self.hooks)
            .field("prices", &self.prices)
            .field("allow_outside_working_dir", &self.allow_outside_working_dir)
            .field("transcript_path", &self.transcript_path)
            .field("transcript_events", &self.transcript_events)
            .field("compaction", &self.compaction)
            .field("mcp_servers", &self.mcp_servers)
            .field("input_budget", &self.input_budget)
            .field("session_budget", &self.session_budget)
            .field("budget_warning_fraction", &self.budget_warning_fraction)
            .field("budget_note_to_model", &self.budget_note_to_model)
            .field("fallback_models", &self.fallback_models)
            .field("prompt_cache_ttl", &self.prompt_cache_ttl)
            .field("structured_output_retries", &self.structured_output_retries)
            .field("mcp_host", &self.mcp_host.as_ref().map(|_| "host"))
            .field("mcp_roots", &self.mcp_roots)
            .field("mode", &self.mode)
            .field("max_background_processes", &self.max_background_processes)
            .field("background_output_bytes", &self.background_output_bytes)
            .field("background_after", &self.background_after)
            .field("checkpoints", &self.checkpoints)
            .field("subagent_worktrees", &self.subagent_worktrees)
            .finish()
    }
}

impl SessionConfig {
    /// Sets `max_parallel_tool_calls` (at least 1).
    pub fn with_max_parallel_tool_calls(mut self, calls: usize) -> SessionConfig {
        self.max_parallel_tool_calls = calls.max(1);
        self
    }

    /// Sets `max_turns`.
    pub fn with_max_turns(mut self, turns: usize) -> SessionConfig {
        self.max_turns = turns;
        self
    }

    /// Sets `max_tool_rounds_per_input`.
    pub fn with_max_tool_rounds_per_input(mut self, rounds: usize) -> SessionConfig {
        self.max_tool_rounds_per_input = rounds;
        self
    }

    /// Sets the timeout for commands that set none.
    pub fn with_default_command_timeout(mut self, timeout: Duration) -> SessionConfig {
        self.default_command_timeout = Some(timeout);
        self
    }

    /// Sets the upper bound for any command timeout.
    pub fn with_max_command_timeout(mut self, timeout: Duration) -> SessionConfig {
        self.max_command_timeout = timeout;
        self
    }

    /// The command timeouts a tool call gets: (default, maximum). The default is this
    /// configuration's, else the profile's, else 10 s (spec §5.4); the maximum is
    /// `max_command_timeout`.
    pub(crate) fn command_timeouts(
        &self,
        profile_default: Option<Duration>,
    ) -> (Duration, Duration) {
        let default = self
            .default_command_timeout
            .or(profile_default)
            .unwrap_or(Duration::from_secs(10));
        (default, self.max_command_timeout)
    }

    /// Sets the reasoning effort.
    pub fn with_reasoning_effort(mut self, effort: impl Into<String>) -> SessionConfig {
        self.reasoning_effort = Some(effort.into());
        self
    }

    /// Caps each model response at `tokens` output tokens (`max_output_tokens`).
    pub fn with_max_output_tokens(mut self, tokens: u32) -> SessionConfig {
        self.max_output_tokens = Some(tokens);
        self
    }

    /// Sets the character limit of one tool's output for the model.
    pub fn with_tool_output_limit(mut self, tool: impl Into<String>, chars: usize) -> Self {
        self.tool_output_limits.insert(tool.into(), chars);
        self
    }

    /// Sets the line limit of one tool's output for the model.
    pub fn with_tool_line_limit(mut self, tool: impl Into<String>, lines: usize) -> Self {
        self.tool_line_limits.insert(tool.into(), lines);
        self
    }

    /// Turns loop detection on or off.
    pub fn with_loop_detection(mut self, enabled: bool) -> SessionConfig {
        self.enable_loop_detection = enabled;
        self
    }

    /// Sets the loop-detection window.
    pub fn with_loop_detection_window(mut self, calls: usize) -> SessionConfig {
        self.loop_detection_window = calls;
        self
    }

    /// Sets the approval hook: a convenience for a `pre_tool_use` hook that allows,
    /// denies or asks the host (it runs after the hooks set with [`with_hooks`](Self::with_hooks)).
    pub fn with_approval(
        mut self,
        hook: impl Fn(&ToolCall) -> Approval + Send + Sync + 'static,
    ) -> SessionConfig {
        self.approval = Some(Arc::new(hook));
        self
    }

    /// Sets the lifecycle hooks (replacing any set before).
    pub fn with_hooks(mut self, hooks: Hooks) -> SessionConfig {
        self.hooks = hooks;
        self
    }

    /// Sets the price of `model` (adding it to the table or replacing its entry).
    pub fn with_price(mut self, model: impl Into<String>, price: Price) -> SessionConfig {
        self.prices = std::mem::take(&mut self.prices).with_price(model, price);
        self
    }

    /// Replaces the whole price table (`PriceTable::empty()` reports no cost at all).
    pub fn with_prices(mut self, prices: PriceTable) -> SessionConfig {
        self.prices = prices;
        self
    }

    /// Writes the session's transcript to `path` (see `transcript_path`).
    pub fn with_transcript(mut self, path: impl Into<PathBuf>) -> SessionConfig {
        self.transcript_path = Some(path.into());
        self
    }

    /// Adds an MCP server (see [`mcp_servers`](Self::mcp_servers)).
    pub fn with_mcp_server(mut self, server: McpServer) -> SessionConfig {
        self.mcp_servers.push(server);
        self
    }

    /// Sets the host that answers MCP servers' questions (see
    /// [`mcp_host`](Self::mcp_host)).
    pub fn with_mcp_host(mut self, host: Arc<dyn McpHost>) -> SessionConfig {
        self.mcp_host = Some(host);
        self
    }

    /// Records every event in the transcript too (see `transcript_events`).
    pub fn with_transcript_events(mut self, enabled: bool) -> SessionConfig {
        self.transcript_events = enabled;
        self
    }

    /// Sets the mode of the first input (see [`mode`](Self::mode)).
    pub fn with_mode(mut self, mode: SessionMode) -> SessionConfig {
        self.mode = mode;
        self
    }

    /// Sets the cap on background processes running at once (at least 1).
    pub fn with_max_background_processes(mut self, processes: usize) -> SessionConfig {
        self.max_background_processes = processes.max(1);
        self
    }

    /// Sets the bytes of background output the session keeps at most.
    pub fn with_background_output_bytes(mut self, bytes: usize) -> SessionConfig {
        self.background_output_bytes = bytes;
        self
    }

    /// Moves foreground commands still running after `after` to the background (see
    /// `background_after`).
    pub fn with_background_after(mut self, after: Duration) -> SessionConfig {
        self.background_after = Some(after);
        self
    }

    /// The limits of the session's background processes.
    pub(crate) fn background_limits(&self) -> crate::tools::background::jobs::Limits {
        let processes = self.max_background_processes.max(1);
        crate::tools::background::jobs::Limits {
            max_processes: processes,
            output_limit: self.background_output_bytes / processes / 2,
            move_after: self.background_after,
        }
    }

    /// Sets the checkpoints of the working tree (see [`checkpoints`](Self::checkpoints)).
    pub fn with_checkpoints(mut self, checkpoints: CheckpointConfig) -> SessionConfig {
        self.checkpoints = checkpoints;
        self
    }

    /// Runs subagents in their own `git worktree` unless `spawn_agent` says otherwise.
    pub fn with_subagent_worktrees(mut self, worktrees: bool) -> SessionConfig {
        self.subagent_worktrees = worktrees;
        self
    }

    /// Sets how the history is compacted ([`CompactionConfig::disabled`] turns it off).
    pub fn with_compaction(mut self, compaction: CompactionConfig) -> SessionConfig {
        self.compaction = compaction;
        self
    }

    /// Sets what one input may spend (see [`input_budget`](Self::input_budget)).
    pub fn with_input_budget(mut self, budget: Budget) -> SessionConfig {
        self.input_budget = budget;
        self
    }

    /// Sets what the whole session may spend (see [`session_budget`](Self::session_budget)).
    pub fn with_session_budget(mut self, budget: Budget) -> SessionConfig {
        self.session_budget = budget;
        self
    }

    /// Sets the fraction at which `BUDGET_WARNING` fires, and whether the model gets a note
    /// then (see [`budget_note_to_model`](Self::budget_note_to_model)).
    pub fn with_budget_warning(mut self, fraction: f64, note_to_model: bool) -> SessionConfig {
        self.budget_warning_fraction = fraction;
        self.budget_note_to_model = note_to_model;
        self
    }

    /// Adds a model to continue with when the ones before it keep failing (see
    /// [`fallback_models`](Self::fallback_models)).
    pub fn with_fallback_model(mut self, profile: ProviderProfile) -> SessionConfig {
        self.fallback_models.push(profile);
        self
    }

    /// Sets the prompt-cache lifetime (see [`prompt_cache_ttl`](Self::prompt_cache_ttl)).
    pub fn with_prompt_cache_ttl(mut self, ttl: Duration) -> SessionConfig {
        self.prompt_cache_ttl = Some(ttl);
        self
    }

    /// Sets how many invalid final answers are sent back to the model (see
    /// [`structured_output_retries`](Self::structured_output_retries)).
    pub fn with_structured_output_retries(mut self, retries: usize) -> SessionConfig {
        self.structured_output_retries = retries;
        self
    }
}
