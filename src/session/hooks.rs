//! Lifecycle hooks: the host's closures called at fixed points of the loop and what they
//! may decide. The values only: `hook_runner.rs` calls them.
//!
//! See [`Hooks`] for the events, the decisions and the order of events.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::approval::{Approval, ApprovalHook};
use super::compaction::CompactionReason;
use crate::llm::ToolCall;

/// The points of the loop a hook can attach to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HookEvent {
    /// Before a validated tool call runs.
    PreToolUse,
    /// After a tool call ran.
    PostToolUse,
    /// Before an input, follow-up or steering message reaches the history.
    UserPromptSubmit,
    /// The model answered with text only: the input is about to end.
    Stop,
    /// The session started (after `SESSION_START`).
    SessionStart,
    /// The session is ending (before `SESSION_END`).
    SessionEnd,
    /// A subagent was started.
    SubagentStart,
    /// A subagent finished an input.
    SubagentStop,
    /// A history compaction is about to ask for a summary.
    PreCompact,
    /// A history compaction produced its summary.
    PostCompact,
}

impl HookEvent {
    /// Every event, in the order of the table in the module docs.
    pub const ALL: [HookEvent; 10] = [
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::UserPromptSubmit,
        HookEvent::Stop,
        HookEvent::PreCompact,
        HookEvent::PostCompact,
        HookEvent::SessionStart,
        HookEvent::SessionEnd,
        HookEvent::SubagentStart,
        HookEvent::SubagentStop,
    ];

    /// The snake-case name (`pre_tool_use`), as in `HOOK_DECISION` events.
    pub fn name(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "pre_tool_use",
            HookEvent::PostToolUse => "post_tool_use",
            HookEvent::UserPromptSubmit => "user_prompt_submit",
            HookEvent::Stop => "stop",
            HookEvent::SessionStart => "session_start",
            HookEvent::SessionEnd => "session_end",
            HookEvent::SubagentStart => "subagent_start",
            HookEvent::SubagentStop => "subagent_stop",
            HookEvent::PreCompact => "pre_compact",
            HookEvent::PostCompact => "post_compact",
        }
    }

    /// The name Claude Code and Codex hook files use (`PreToolUse`).
    pub fn pascal_name(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::Stop => "Stop",
            HookEvent::SessionStart => "SessionStart",
            HookEvent::SessionEnd => "SessionEnd",
            HookEvent::SubagentStart => "SubagentStart",
            HookEvent::SubagentStop => "SubagentStop",
            HookEvent::PreCompact => "PreCompact",
            HookEvent::PostCompact => "PostCompact",
        }
    }

    /// Whether a failure of this hook denies what it guards.
    pub(crate) fn blocking(self) -> bool {
        matches!(self, HookEvent::PreToolUse | HookEvent::UserPromptSubmit)
    }
}

/// Where a `user_prompt_submit` message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PromptSource {
    /// `submit` or `run`.
    Input,
    /// `follow_up`.
    FollowUp,
    /// `steer`.
    Steering,
}

/// What a hook is told. Fields that do not apply to the event are `None`.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct HookInput {
    /// Which hook point.
    pub event: HookEvent,
    /// The session the hook fires in (a subagent's own id inside a subagent).
    pub session_id: String,
    /// The execution environment's working directory.
    pub cwd: String,
    /// The tool (tool hooks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// The tool call id (tool hooks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The call's arguments, as replaced by earlier hooks (tool hooks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// The full output or error text of the call (`post_tool_use`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Whether the call failed (`post_tool_use`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// The message (`user_prompt_submit`) or the subagent's task (`subagent_start`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Where the message came from (`user_prompt_submit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<PromptSource>,
    /// The model's final text (`stop`, `subagent_stop`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Whether a `stop` hook already continued this input (`stop`): a hook that always
    /// continues should check it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_hook_active: Option<bool>,
    /// The summary (`post_compact`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The subagent (`subagent_start`, `subagent_stop`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The tool call (tool hooks), kept in step with `arguments`.
    #[serde(skip)]
    pub(crate) call: Option<ToolCall>,
    /// Why the compaction runs and its summary request's input (compaction hooks).
    #[serde(skip)]
    pub(crate) compaction: Option<(CompactionReason, String)>,
}

impl HookInput {
    pub(crate) fn new(event: HookEvent, session_id: &str, cwd: &str) -> HookInput {
        HookInput {
            event,
            session_id: session_id.to_string(),
            cwd: cwd.to_string(),
            tool_name: None,
            call_id: None,
            arguments: None,
            output: None,
            is_error: None,
            prompt: None,
            source: None,
            answer: None,
            stop_hook_active: None,
            summary: None,
            agent_id: None,
            call: None,
            compaction: None,
        }
    }

    pub(crate) fn for_call(mut self, call: &ToolCall) -> HookInput {
        self.tool_name = Some(call.name.clone());
        self.call_id = Some(call.id.clone());
        self.arguments = Some(call.arguments.clone());
        self.call = Some(call.clone());
        self
    }

    /// The tool call (tool hooks), with the arguments as replaced by earlier hooks.
    pub fn tool_call(&self) -> Option<&ToolCall> {
        self.call.as_ref()
    }

    /// Why the compaction runs (`pre_compact`, `post_compact`). Not in the JSON form.
    pub fn compaction_reason(&self) -> Option<CompactionReason> {
        self.compaction.as_ref().map(|(reason, _)| *reason)
    }

    /// The summary request's input (`pre_compact`, `post_compact`): the summarised turns as
    /// text, their completed actions and the previous summary, before what `pre_compact`
    /// hooks add. A `post_compact` hook can check the summary against it. Not in the JSON
    /// form.
    pub fn compaction_input(&self) -> Option<&str> {
        self.compaction.as_ref().map(|(_, input)| input.as_str())
    }
}

/// What a hook decides. Which decisions an event honours is in the
/// [`Hooks`] documentation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", content = "value", rename_all = "snake_case")]
#[non_exhaustive]
pub enum HookDecision {
    /// Nothing to change.
    Continue,
    /// Refuse: the tool call gets an error result the model reads, or the message is
    /// dropped. The string is the reason.
    Deny(String),
    /// Ask the host (`APPROVAL_REQUESTED`) before the tool call runs.
    Ask,
    /// Run the tool call with these arguments instead (validated against the schema).
    ReplaceArguments(Value),
    /// Append this text to what the model sees (tool output, message, summary request).
    AddContext(String),
    /// Show the model this text instead of the tool's output.
    ReplaceOutput(String),
    /// Use this message instead of the submitted one.
    ReplacePrompt(String),
    /// Do not end the input: add this message and let the model go on.
    ContinueWith(String),
    /// Use this summary instead of the compaction's.
    ReplaceSummary(String),
    /// Go on, but show the host this warning.
    Warn(String),
    /// The hook itself failed (a timeout, say): a warning, and a denial for blocking
    /// hooks.
    Fail(String),
}

/// One hook: a closure over [`HookInput`].
pub type Hook = Arc<dyn Fn(&HookInput) -> HookDecision + Send + Sync>;

/// The host's hooks. Build with [`Hooks::new`] and the `with_*` methods (or [`on`](Self::on)).
///
/// A [`Hooks`] value on [`SessionConfig`](crate::session::SessionConfig) holds closures
/// `Fn(&HookInput) -> HookDecision` for each [`HookEvent`]. Several closures may serve one
/// event: they run in the order they were added, each seeing what the earlier ones
/// decided (replaced arguments, a rewritten prompt); the first denial wins.
///
/// | event | fires | may decide |
/// |---|---|---|
/// | `pre_tool_use` | before each validated tool call runs (every tool kind, sequential and parallel rounds) | `Continue`, `Deny` (the model gets an error result with the reason), `Ask` (the host's approval, `APPROVAL_REQUESTED`), `ReplaceArguments` (re-validated against the tool's schema) |
/// | `post_tool_use` | after a tool call ran, with its full output | `AddContext` (appended to what the model sees), `ReplaceOutput` (what the model sees instead); `TOOL_CALL_END` still carries the full output |
/// | `user_prompt_submit` | for each input, follow-up and steering message | `ReplacePrompt`, `AddContext` (appended to the message), `Deny` (the message is dropped; an input then ends with stop reason `blocked`) |
/// | `stop` | when the model answers with text only | `ContinueWith(message)`: the message is added and the input goes on (each continuation counts as a round, so the round limit bounds it) |
/// | `pre_compact` / `post_compact` | around a history compaction | `AddContext` (appended to the summary request's input) / `ReplaceSummary` (the replacement goes through the same guards as the model's summary) |
/// | `session_start`, `session_end`, `subagent_start`, `subagent_stop` | as named | observe only |
///
/// Every decision is visible as a `HOOK_DECISION` event. A hook that panics, or answers
/// [`HookDecision::Fail`] (a command hook that timed out, say), is a `WARNING` event (code
/// `"hook"`) and — for the blocking hooks `pre_tool_use` and `user_prompt_submit` — a
/// denial; it never ends the worker. [`HookDecision::Warn`] is a warning and nothing
/// else. A decision an event cannot take (`ReplaceOutput` before a tool runs) is a warning
/// and otherwise ignored. The text of every decision (context, a replaced output, prompt
/// or summary, a reason, a message, a warning) is cut like a tool's output before anything
/// sees it — 30,000 characters, head and tail, with the tool-output marker — so a hook
/// adds no more to a request than a tool can, whatever it wrote. Hooks run on the thread that reaches the point (a tool thread
/// in a parallel round), so they must be `Send + Sync`; this module never spawns.
///
/// A syntax or lint check after every edit is one use of `post_tool_use`:
///
/// ```
/// use agentloop::session::{HookDecision, Hooks, SessionConfig};
///
/// let hooks = Hooks::new().with_post_tool_use(|input| {
///     let edited = matches!(input.tool_name.as_deref(), Some("edit_file" | "write_file"));
///     let path = input.arguments.as_ref().and_then(|a| a["file_path"].as_str());
///     match path {
///         // Run the project's linter on `path` here; report what it found.
///         Some(path) if edited && path.ends_with(".json") => {
///             HookDecision::AddContext(format!("lint: {path} checked, no problems"))
///         }
///         _ => HookDecision::Continue,
///     }
/// });
/// let config = SessionConfig::default().with_hooks(hooks);
/// # let _ = config;
/// ```
#[derive(Clone, Default)]
pub struct Hooks {
    entries: Vec<(HookEvent, Hook)>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(event, _)| event.name()))
            .finish()
    }
}

macro_rules! with_hook {
    ($(#[$doc:meta] $method:ident => $event:ident),* $(,)?) => {$(
        #[$doc]
        pub fn $method(
            self,
            hook: impl Fn(&HookInput) -> HookDecision + Send + Sync + 'static,
        ) -> Hooks {
            self.on(HookEvent::$event, hook)
        }
    )*};
}

impl Hooks {
    /// No hooks.
    pub fn new() -> Hooks {
        Hooks::default()
    }

    /// Adds `hook` for `event`, after the hooks already there.
    pub fn on(
        mut self,
        event: HookEvent,
        hook: impl Fn(&HookInput) -> HookDecision + Send + Sync + 'static,
    ) -> Hooks {
        self.entries.push((event, Arc::new(hook)));
        self
    }

    with_hook! {
        /// Adds a `pre_tool_use` hook.
        with_pre_tool_use => PreToolUse,
        /// Adds a `post_tool_use` hook.
        with_post_tool_use => PostToolUse,
        /// Adds a `user_prompt_submit` hook.
        with_user_prompt_submit => UserPromptSubmit,
        /// Adds a `stop` hook.
        with_stop => Stop,
        /// Adds a `session_start` hook.
        with_session_start => SessionStart,
        /// Adds a `session_end` hook.
        with_session_end => SessionEnd,
        /// Adds a `subagent_start` hook.
        with_subagent_start => SubagentStart,
        /// Adds a `subagent_stop` hook.
        with_subagent_stop => SubagentStop,
        /// Adds a `pre_compact` hook.
        with_pre_compact => PreCompact,
        /// Adds a `post_compact` hook.
        with_post_compact => PostCompact,
    }

    /// Whether no hook is set.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The events that have hooks, each once, in the order of [`HookEvent::ALL`].
    pub fn events(&self) -> Vec<HookEvent> {
        HookEvent::ALL
            .into_iter()
            .filter(|event| self.handles(*event))
            .collect()
    }

    /// Whether a hook is set for `event`.
    pub fn handles(&self, event: HookEvent) -> bool {
        self.entries.iter().any(|(e, _)| *e == event)
    }

    /// The approval policy as a `pre_tool_use` hook (what `with_approval` sets up).
    pub(crate) fn with_approval(self, approval: ApprovalHook) -> Hooks {
        self.with_pre_tool_use(move |input| match input.tool_call() {
            Some(call) => match approval(call) {
                Approval::Allow => HookDecision::Continue,
                Approval::Deny(reason) => HookDecision::Deny(reason),
                Approval::Ask => HookDecision::Ask,
            },
            None => HookDecision::Continue,
        })
    }

    pub(crate) fn for_event(&self, event: HookEvent) -> impl Iterator<Item = &Hook> {
        self.entries
            .iter()
            .filter(move |(e, _)| *e == event)
            .map(|(_, hook)| hook)
    }
}
