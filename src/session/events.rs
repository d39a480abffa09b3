//! Session events: what the agent did, as typed values and as JSON lines.
//!
//! Every action of a session emits a [`SessionEvent`] (spec §2.9); the host reads them from
//! [`Session::events`](super::Session::events), an [`Events`](super::Events) iterator over
//! a crossbeam channel (`delivery.rs`). The order of events is documented on [`EventKind`]. The JSON form of an event is
//!
//! ```json
//! {"kind":"tool_call_end","session_id":"…","timestamp":"2026-01-01T00:00:00.000Z","data":{…}}
//! ```
//!
//! with kind names in lower snake case and RFC 3339 UTC timestamps with milliseconds; events
//! deserialise from the same form (transcripts read them back). This module only describes
//! events; it never sends one.

use std::fmt;
use std::time::SystemTime;

use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::approval::ApprovalResponder;
use super::budget::{BudgetKind, BudgetScope};
use super::checkpoint::{Rewind, RewindReport};
use super::compaction::{CompactionFallback, CompactionReason};
use super::hooks::HookDecision;
use crate::llm::{FinishReason, Usage};
use crate::tools::PlanEntry;

/// Where a session is in its lifecycle (spec §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Waiting for input.
    #[default]
    Idle,
    /// Running the agentic loop.
    Processing,
    /// Waiting for the host to answer an approval request.
    AwaitingInput,
    /// Terminated; accepts no more input.
    Closed,
}

/// Why the processing of one input stopped.
///
/// This is the one list of stop reasons; each serialises as the lower snake case word in
/// brackets, which is what the `stop_reason` of a `processing_end` JSON event holds and
/// what a harness can show. The `agentloop` CLI's exit status for each is in its `--help`.
///
/// | reason | word | what it means |
/// |---|---|---|
/// | `Completed` | `completed` | the model answered (with the value, for [`Session::run_structured`](super::Session::run_structured)) |
/// | `TurnLimit` | `turn_limit` | `max_turns` model calls were made in the session |
/// | `RoundLimit` | `round_limit` | `max_tool_rounds_per_input` tool rounds ran in the input |
/// | `BudgetExhausted` | `budget_exhausted` | a budget was used up: the `budget_exhausted` event before `processing_end` says which (`tokens`, `cost`, `wall_time`, `tool_calls`), whose (`input`, `session`), its limit and what was used |
/// | `StructuredOutputFailed` | `structured_output_failed` | the model gave no final answer valid against the output schema within the retries; the error (kind `structured_output`) says why |
/// | `Interrupted` | `interrupted` | the host called `interrupt()` |
/// | `Aborted` | `aborted` | the host called `abort()` or dropped the session |
/// | `Error` | `error` | a provider error ended the input (the `error` event's `error_kind`) |
/// | `Blocked` | `blocked` | a `user_prompt_submit` hook blocked the input |
///
/// After every one of them the history is valid (each tool call has its result) and the
/// session can take another input, unless it closed (a fatal error, an abort).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model answered with text only (natural completion), possibly cut by its
    /// output-token limit.
    Completed,
    /// The session's `max_turns` was reached.
    TurnLimit,
    /// The input's `max_tool_rounds_per_input` was reached.
    RoundLimit,
    /// The host called `interrupt()`.
    Interrupted,
    /// The host called `abort()` (or dropped the session).
    Aborted,
    /// A provider error ended the input (see the `ERROR` event).
    Error,
    /// A `user_prompt_submit` hook blocked the input (its reason is in the
    /// `HOOK_DECISION` event and in [`Outcome::blocked`](super::Outcome::blocked)).
    Blocked,
    /// A budget ([`SessionConfig::input_budget`](super::SessionConfig::input_budget),
    /// [`session_budget`](super::SessionConfig::session_budget)) was used up; the
    /// `BUDGET_EXHAUSTED` event and [`Outcome::budget`](super::Outcome::budget) say which.
    BudgetExhausted,
    /// The model gave no final answer valid against the output schema of
    /// [`Session::run_structured`](super::Session::run_structured) within
    /// [`structured_output_retries`](super::SessionConfig::structured_output_retries).
    StructuredOutputFailed,
}

/// Why a session closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CloseReason {
    /// The host called `close()`.
    Closed,
    /// The host called `abort()` or dropped the session.
    Aborted,
    /// An unrecoverable error (authentication, access, configuration, …).
    Error,
}

/// What happened, with the data of each kind.
///
/// # Order
///
/// - `SessionStart` is always first, `SessionEnd` always last; nothing follows it.
/// - Each input (from `submit`, `run`, or a follow-up) is bracketed by `UserInput` …
///   `ProcessingEnd`: every input ends with exactly one `ProcessingEnd`, also when it is
///   interrupted, aborted or fails.
/// - Inside an input, each model call is a round: `SteeringInjected`* (steering drained
///   before the call), `Warning`* (context usage), then `AssistantTextStart`,
///   `AssistantTextDelta` / `AssistantReasoningDelta`*, `AssistantTextEnd` (also when the
///   stream was cut short). Then, for each tool call of the response, `ToolCallStart`,
///   `ApprovalRequested`?, `ToolCallOutputDelta`*, `PlanUpdate`? (a plan tool's call that
///   succeeded), `ToolCallEnd`. With parallel tool calls
///   the events of different calls interleave, but each call's `ToolCallStart` precedes its
///   `ToolCallEnd`. After the round: `SteeringInjected`*, `LoopDetection`?.
/// - A compaction is `ContextCompactionStart` … `ContextCompactionEnd` (with `Warning`s
///   between when a guard fired): before a model call (inside an input), after a call
///   the provider rejected as too long (then the call is retried once), or between inputs
///   for `Session::compact`.
/// - `BudgetWarning` comes before a model call (once per budget: per input for the input's
///   budgets), and `TurnLimit` or `BudgetExhausted` precedes the `ProcessingEnd` of the
///   input it stopped. `ModelFallback` follows the `AssistantTextEnd` of the model call
///   that failed, and the next model's round follows it. `Error` (preceded
///   by a `Warning` for a context-length error) precedes the `ProcessingEnd` of the input
///   it ended, and a fatal `Error` is followed by `SessionEnd`.
/// - `SubagentEvent`s arrive whenever a subagent of this session emits something: while
///   the tool call that spawned it runs, between rounds, or while the session is idle.
///   Each subagent's events keep their own order, and every subagent's `SessionEnd`
///   arrives before this session's `SessionEnd`.
/// - `BackgroundExit` arrives as soon as a background process exits: between any two
///   events, also while the session is idle. The session ends its processes before it
///   ends, so their `BackgroundExit`s come before `SessionEnd`.
/// - `Rewound` follows a rewind ([`Session::rewind`](super::Session::rewind)); rewinds run
///   between inputs, so it is never inside a `UserInput` … `ProcessingEnd` bracket.
/// - `HookDecision` follows each hook call at its point: `session_start` after
///   `SessionStart`; `user_prompt_submit` before the `UserInput` (or `SteeringInjected`) it
///   is about (a blocked input has `UserInput` and `ProcessingEnd` with stop reason
///   `blocked`); `pre_tool_use` after `ToolCallStart` and before `ApprovalRequested`;
///   `post_tool_use` before `ToolCallEnd`; `stop` after the final `AssistantTextEnd`;
///   `session_end` before `SessionEnd`. A failed hook adds a `Warning` (code `"hook"`)
///   before its `HookDecision`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// The session was created.
    SessionStart {
        /// The provider id requests go to.
        provider: String,
        /// The model.
        model: String,
    },
    /// The session closed; always the last event.
    SessionEnd {
        /// The state the session ended in (always `closed`).
        final_state: SessionState,
        /// Why it closed.
        reason: CloseReason,
        /// Token counts summed over every model call of the session (subagents' calls are
        /// in their own `SESSION_END`).
        #[serde(default)]
        usage: Usage,
        /// What those calls cost in US dollars, when every call's model has a price.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// Tool calls run in the session and its subagents.
        #[serde(default)]
        tool_calls: u64,
        /// How long the session lived, in milliseconds.
        #[serde(default)]
        duration_ms: u64,
    },
    /// An input (submitted or follow-up) began processing.
    UserInput {
        /// The input text.
        content: String,
    },
    /// The processing of one input ended.
    ProcessingEnd {
        /// Why it stopped.
        stop_reason: StopReason,
        /// Tool rounds run for this input.
        rounds: usize,
        /// Token counts summed over the model calls of this input.
        #[serde(default)]
        usage: Usage,
        /// What those calls cost in US dollars, when every call's model has a price.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// Tool calls run for this input, by this session and the subagents it started.
        #[serde(default)]
        tool_calls: u64,
        /// How long the input took, in milliseconds.
        #[serde(default)]
        duration_ms: u64,
        /// The final answer's value, for [`Session::run_structured`](super::Session::run_structured).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<Value>,
    },
    /// A model call began streaming.
    AssistantTextStart {},
    /// More answer text.
    AssistantTextDelta {
        /// The new text.
        delta: String,
    },
    /// More reasoning text.
    AssistantReasoningDelta {
        /// The new reasoning text.
        delta: String,
    },
    /// A model call finished (or was cut short): the whole text of the response.
    AssistantTextEnd {
        /// The full answer text (what had streamed, if the stream was cut short).
        text: String,
        /// The reasoning text, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
        /// The model's refusal text, when it declined to answer: the answer `text` is then
        /// usually empty, and the host shows this instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refusal: Option<String>,
        /// Why the model stopped; `length` means the answer was cut by the output-token
        /// limit; `error`/`other` when the stream was cut short.
        finish_reason: FinishReason,
        /// Token counts of this call (zero if the stream was cut short).
        usage: Usage,
        /// How many tool calls the response asked for.
        tool_calls: usize,
        /// What this call cost in US dollars, when the model has a price
        /// ([`SessionConfig::prices`](super::SessionConfig::prices)).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
    /// A tool call began.
    ToolCallStart {
        /// The call id.
        call_id: String,
        /// The tool name.
        tool_name: String,
        /// The arguments as the model sent them.
        arguments: Value,
    },
    /// Live output of a running command.
    ToolCallOutputDelta {
        /// The call id.
        call_id: String,
        /// `"stdout"` or `"stderr"`.
        stream: String,
        /// The new output (UTF-8; invalid bytes replaced).
        delta: String,
    },
    /// A tool call finished: the full, untruncated output (the model got the truncated
    /// one).
    ToolCallEnd {
        /// The call id.
        call_id: String,
        /// The tool name.
        tool_name: String,
        /// The full output, when the call succeeded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<String>,
        /// The full error text, when the call failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Whether the call failed.
        is_error: bool,
        /// Wall-clock time of the call in milliseconds (approval wait included).
        duration_ms: u64,
        /// Whether the model got a truncated text.
        truncated: bool,
        /// Characters removed from the model's text by character truncation.
        removed_chars: usize,
        /// Lines removed from the model's text by line truncation.
        removed_lines: usize,
    },
    /// A steering message was added to the history.
    SteeringInjected {
        /// The message.
        content: String,
    },
    /// A limit stopped the input.
    TurnLimit {
        /// The tool rounds of this input, when `max_tool_rounds_per_input` was hit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        round: Option<usize>,
        /// The model calls of the session, when `max_turns` was hit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total_turns: Option<usize>,
    },
    /// A budget passed its warning fraction
    /// ([`SessionConfig::budget_warning_fraction`](super::SessionConfig::budget_warning_fraction)).
    BudgetWarning {
        /// Which budget.
        which: BudgetKind,
        /// The input's or the session's.
        scope: BudgetScope,
        /// Its limit (tokens, US dollars, seconds or tool calls).
        limit: f64,
        /// What was used, in the same unit.
        used: f64,
    },
    /// A budget is used up: the input stops (stop reason `budget_exhausted`).
    BudgetExhausted {
        /// Which budget.
        which: BudgetKind,
        /// The input's or the session's (or a parent session's, in a subagent).
        scope: BudgetScope,
        /// Its limit (tokens, US dollars, seconds or tool calls).
        limit: f64,
        /// What was used, in the same unit.
        used: f64,
    },
    /// The model kept failing; the input continues from the current history with the next
    /// model of [`SessionConfig::fallback_models`](super::SessionConfig::fallback_models).
    ModelFallback {
        /// The provider that failed.
        from_provider: String,
        /// The model that failed.
        from_model: String,
        /// The provider that takes over.
        to_provider: String,
        /// The model that takes over.
        to_model: String,
        /// The failure's kind in snake case (`rate_limited`, `server`, `quota`).
        error_kind: String,
        /// The failure (never contains a secret).
        message: String,
    },
    /// The recent tool calls repeat; a warning was added to the history for the model.
    LoopDetection {
        /// The warning the model gets.
        message: String,
    },
    /// The history is being compacted (see [`compaction`](crate::session::compaction)).
    ContextCompactionStart {
        /// Why: `threshold`, `overflow` or `manual`.
        reason: CompactionReason,
        /// Tokens of the next request before compacting (the library's count).
        tokens_before: usize,
    },
    /// The compaction ended; the history now holds the summary.
    ContextCompactionEnd {
        /// Why it ran.
        reason: CompactionReason,
        /// Tokens before.
        tokens_before: usize,
        /// Tokens after (estimated).
        tokens_after: usize,
        /// History turns the summary replaced (0 when nothing was summarised).
        turns_summarised: usize,
        /// What had to give beyond summarising: `none`, `truncated` or `dropped`.
        fallback: CompactionFallback,
        /// The summary put into the history.
        summary: String,
    },
    /// A non-fatal issue.
    Warning {
        /// What happened.
        message: String,
        /// `"context_usage"` (history above 80 % of the context window), `"compaction"`
        /// (a compaction summary was rejected or could not be made, a compaction left the
        /// history above the threshold, or the per-input bound stopped compacting),
        /// `"context_length"` (the provider rejected the request as too long) or
        /// `"mcp"` (an MCP server failed to start or to re-list its tools),
        /// `"transcript"` (writing the transcript failed, or resuming it found something to
        /// report), or `"checkpoint"` (checkpoints are off, a snapshot failed, a checkpoint
        /// was dropped to stay within the store's cap).
        code: String,
    },
    /// An error ended the current input (and, when `fatal`, the session).
    Error {
        /// What went wrong (never contains a secret).
        message: String,
        /// The error kind in snake case (`authentication`, `rate_limited`, …).
        error_kind: String,
        /// Whether the session closes because of it.
        fatal: bool,
    },
    /// The approval hook asked the host about a tool call; answer through `responder`.
    ApprovalRequested {
        /// The call id.
        call_id: String,
        /// The tool name.
        tool_name: String,
        /// The arguments as the model sent them.
        arguments: Value,
        /// Approves or denies the call (not serialised).
        #[serde(skip)]
        responder: ApprovalResponder,
    },
    /// A hook decided something (see [`Hooks`](super::Hooks)); emitted for every call of
    /// every hook, right after it returns.
    HookDecision {
        /// The hook point in snake case (`"pre_tool_use"`).
        hook: String,
        /// The tool call the hook was about, for tool hooks.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// What it decided (a failed hook shows as the denial or `continue` it became).
        decision: HookDecision,
    },
    /// The model set its plan (a successful call of the profile's plan tool): the whole
    /// list, each step with its status.
    PlanUpdate {
        /// The plan tool's call id.
        call_id: String,
        /// Every step, in order.
        entries: Vec<PlanEntry>,
        /// Why the plan changed, when the model said (Codex's `explanation`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        explanation: Option<String>,
    },
    /// A background process of this session exited (also one stopped by a kill, by the
    /// host, or by the end of the session). The model hears of it at its next turn,
    /// unless it saw the exit already.
    BackgroundExit {
        /// The process's id in the session (what the model names it by).
        id: u64,
        /// Its process id (on the machine it ran on).
        pid: u32,
        /// The command line.
        command: String,
        /// Its exit code, when it exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// The signal that ended it, when one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// It was stopped (a kill by the model or the host, or the session's end).
        stopped: bool,
        /// How long it ran, in milliseconds.
        duration_ms: u64,
    },
    /// The files and/or the history were put back as they were before an input (see
    /// [`checkpoint`](crate::session::checkpoint)).
    Rewound {
        /// What was asked.
        rewind: Rewind,
        /// What was done: restored, removed, conflicts left, what is not covered.
        report: RewindReport,
    },
    /// An event of a subagent this session started (see `spawn_agent` in [`profiles`](crate::profiles)), in the
    /// order the subagent emitted it. The inner event carries the subagent's own session
    /// id; a subagent's own children arrive nested one level deeper.
    SubagentEvent {
        /// The id `spawn_agent` returned (`"agent-1"`, …).
        agent_id: String,
        /// The subagent's event.
        event: Box<SessionEvent>,
    },
}

impl EventKind {
    /// The kind's name in lower snake case (`"tool_call_end"`), as in the JSON form.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::SessionStart { .. } => "session_start",
            EventKind::SessionEnd { .. } => "session_end",
            EventKind::UserInput { .. } => "user_input",
            EventKind::ProcessingEnd { .. } => "processing_end",
            EventKind::AssistantTextStart { .. } => "assistant_text_start",
            EventKind::AssistantTextDelta { .. } => "assistant_text_delta",
            EventKind::AssistantReasoningDelta { .. } => "assistant_reasoning_delta",
            EventKind::AssistantTextEnd { .. } => "assistant_text_end",
            EventKind::ToolCallStart { .. } => "tool_call_start",
            EventKind::ToolCallOutputDelta { .. } => "tool_call_output_delta",
            EventKind::ToolCallEnd { .. } => "tool_call_end",
            EventKind::SteeringInjected { .. } => "steering_injected",
            EventKind::TurnLimit { .. } => "turn_limit",
            EventKind::BudgetWarning { .. } => "budget_warning",
            EventKind::BudgetExhausted { .. } => "budget_exhausted",
            EventKind::ModelFallback { .. } => "model_fallback",
            EventKind::LoopDetection { .. } => "loop_detection",
            EventKind::ContextCompactionStart { .. } => "context_compaction_start",
            EventKind::ContextCompactionEnd { .. } => "context_compaction_end",
            EventKind::Warning { .. } => "warning",
            EventKind::Error { .. } => "error",
            EventKind::ApprovalRequested { .. } => "approval_requested",
            EventKind::SubagentEvent { .. } => "subagent_event",
            EventKind::HookDecision { .. } => "hook_decision",
            EventKind::PlanUpdate { .. } => "plan_update",
            EventKind::BackgroundExit { .. } => "background_exit",
            EventKind::Rewound { .. } => "rewound",
        }
    }
}

/// One event of a session.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SessionEvent {
    /// What happened.
    pub kind: EventKind,
    /// When (wall clock).
    pub timestamp: SystemTime,
    /// The session's id.
    pub session_id: String,
}

impl SessionEvent {
    /// An event of `kind` for `session_id`, stamped now.
    pub fn new(kind: EventKind, session_id: impl Into<String>) -> SessionEvent {
        SessionEvent {
            kind,
            timestamp: SystemTime::now(),
            session_id: session_id.into(),
        }
    }

    /// The timestamp as RFC 3339 UTC with milliseconds (`2026-01-01T00:00:00.000Z`).
    pub fn timestamp_rfc3339(&self) -> String {
        crate::time::format_rfc3339(self.timestamp)
    }
}

impl Serialize for SessionEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("kind", self.kind.name())?;
        map.serialize_entry("session_id", &self.session_id)?;
        map.serialize_entry("timestamp", &self.timestamp_rfc3339())?;
        map.serialize_entry("data", &DataOf(&self.kind))?;
        map.end()
    }
}

/// Serialises only the `data` half of an [`EventKind`]'s adjacently tagged form, keeping
/// the fields in declaration order (no intermediate `Value`, whose maps are sorted).
struct DataOf<'a>(&'a EventKind);

impl Serialize for DataOf<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(data_only::DataOnly(serializer))
    }
}

/// A serializer that receives the derive's `{"kind": …, "data": …}` struct and passes
/// only `data` (or `{}` when a kind has none) to the real serializer.
mod data_only {
    use serde::Serialize;
    use serde::ser::{Error, Impossible, SerializeMap, SerializeStruct, Serializer};

    pub(super) struct DataOnly<S>(pub(super) S);

    pub(super) struct Fields<S: Serializer> {
        inner: Option<S>,
        done: Option<S::Ok>,
    }

    fn unexpected<E: Error>() -> E {
        E::custom("an event kind serialises as a struct")
    }

    macro_rules! reject {
        ($($name:ident($($ty:ty),*)),* $(,)?) => {
            $(fn $name(self, $(_: $ty),*) -> Result<S::Ok, S::Error> {
                Err(unexpected())
            })*
        };
    }

    impl<S: Serializer> Serializer for DataOnly<S> {
        type Ok = S::Ok;
        type Error = S::Error;
        type SerializeSeq = Impossible<S::Ok, S::Error>;
        type SerializeTuple = Impossible<S::Ok, S::Error>;
        type SerializeTupleStruct = Impossible<S::Ok, S::Error>;
        type SerializeTupleVariant = Impossible<S::Ok, S::Error>;
        type SerializeMap = Impossible<S::Ok, S::Error>;
        type SerializeStruct = Fields<S>;
        type SerializeStructVariant = Impossible<S::Ok, S::Error>;

        reject! {
            serialize_bool(bool), serialize_i8(i8), serialize_i16(i16), serialize_i32(i32),
            serialize_i64(i64), serialize_u8(u8), serialize_u16(u16), serialize_u32(u32),
            serialize_u64(u64), serialize_f32(f32), serialize_f64(f64), serialize_char(char),
            serialize_str(&str), serialize_bytes(&[u8]), serialize_none(), serialize_unit(),
            serialize_unit_struct(&'static str),
            serialize_unit_variant(&'static str, u32, &'static str),
        }

        fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<S::Ok, S::Error> {
            Err(unexpected())
        }

        fn serialize_newtype_struct<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            _: &T,
        ) -> Result<S::Ok, S::Error> {
            Err(unexpected())
        }

        fn serialize_newtype_variant<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<S::Ok, S::Error> {
            Err(unexpected())
        }

        fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
            Err(unexpected())
        }

        fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, S::Error> {
            Err(unexpected())
        }

        fn serialize_tuple_struct(
            self,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleStruct, S::Error> {
            Err(unexpected())
        }

        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant, S::Error> {
            Err(unexpected())
        }

        fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
            Err(unexpected())
        }

        fn serialize_struct(
            self,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStruct, S::Error> {
            Ok(Fields {
                inner: Some(self.0),
                done: None,
            })
        }

        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant, S::Error> {
            Err(unexpected())
        }
    }

    impl<S: Serializer> SerializeStruct for Fields<S> {
        type Ok = S::Ok;
        type Error = S::Error;

        fn serialize_field<T: ?Sized + Serialize>(
            &mut self,
            key: &'static str,
            value: &T,
        ) -> Result<(), S::Error> {
            if key == "data" {
                let inner = self.inner.take().ok_or_else(unexpected)?;
                self.done = Some(value.serialize(inner)?);
            }
            Ok(())
        }

        fn end(self) -> Result<S::Ok, S::Error> {
            match (self.done, self.inner) {
                (Some(done), _) => Ok(done),
                (None, Some(inner)) => inner.serialize_map(Some(0))?.end(),
                (None, None) => Err(unexpected()),
            }
        }
    }
}

impl<'de> Deserialize<'de> for SessionEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            kind: String,
            session_id: String,
            #[serde(with = "crate::time::rfc3339")]
            timestamp: SystemTime,
            #[serde(default)]
            data: Option<Value>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let data = raw
            .data
            .unwrap_or_else(|| Value::Object(Default::default()));
        let mut tagged = serde_json::Map::new();
        tagged.insert("kind".to_string(), Value::String(raw.kind));
        tagged.insert("data".to_string(), data);
        let kind = EventKind::deserialize(Value::Object(tagged)).map_err(D::Error::custom)?;
        Ok(SessionEvent {
            kind,
            timestamp: raw.timestamp,
            session_id: raw.session_id,
        })
    }
}

impl fmt::Display for SessionEvent {
    /// The event as one line of JSON.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match serde_json::to_string(self) {
            Ok(line) => f.write_str(&line),
            Err(_) => write!(f, "{{\"kind\":\"{}\"}}", self.kind.name()),
        }
    }
}
