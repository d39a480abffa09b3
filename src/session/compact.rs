//! One compaction of a session's history, as the worker runs it between model calls (never
//! while a tool runs): whether to compact, the summary request, the summary's acceptance
//! (the `post_compact` hooks, then the guards), the new history, the events and the
//! transcript record.
//!
//! [`Compaction`] holds what it needs of the session, borrowed for its duration and built
//! by the worker (`Worker::compaction`), as [`ToolRound`](super::tool_round::ToolRound) is.
//! Counting and planning are pure and live in `compaction/`; this file sends the one
//! summary request and changes the history.

use std::sync::Mutex;

use super::compaction::account::{
    BYTES_PER_TOKEN, CompactionLimits, TokenAccount, estimate_request_tokens, estimate_turn_tokens,
};
use super::compaction::plan::{CompactionPlan, shrink_outputs};
use super::compaction::prompt::{SUMMARY_PROMPT, summary_content};
use super::compaction::{CompactionFallback, CompactionReason};
use super::config::SessionConfig;
use super::delivery::EventSink;
use super::events::EventKind;
use super::history::{History, Turn};
use super::hook_runner::HookRunner;
use super::transcript::TranscriptWriter;
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind};
use crate::exec::ExecutionEnvironment;
use crate::llm::{Client, Message, Request};
use crate::profiles::ProviderProfile;
use crate::sync::lock;

/// A session's compaction state, kept by its worker.
#[derive(Debug, Default)]
pub(crate) struct CompactionState {
    /// The token count of the next request.
    pub(crate) account: TokenAccount,
    /// Budgets, from the configuration and the profile's window.
    pub(crate) limits: Option<CompactionLimits>,
    /// Compactions during the current input.
    pub(crate) this_input: usize,
    /// The bound was hit and the warning given during the current input.
    pub(crate) bound_warned: bool,
    /// How many times the history was replaced (compactions, rewinds to a transcript's
    /// copy): a checkpoint's place in the history holds only within its epoch.
    pub(crate) epoch: usize,
}

impl CompactionState {
    /// The state for a session starting with `history` (a resumed one is not empty).
    pub(crate) fn new(limits: Option<CompactionLimits>, history: &History) -> CompactionState {
        let tokens = history.turns().iter().map(estimate_turn_tokens).sum();
        CompactionState {
            account: TokenAccount::new(tokens),
            limits,
            this_input: 0,
            bound_warned: false,
            epoch: 0,
        }
    }
}

/// The compaction limits of a session with `config` and `profile`: from the configuration
/// and the profile's window; none when compaction is off (or the window unknown).
pub(crate) fn limits_for(
    config: &SessionConfig,
    profile: &ProviderProfile,
) -> Option<CompactionLimits> {
    config
        .compaction
        .enabled
        .then(|| config.compaction.limits(profile.context_window_size))
        .filter(|limits| limits.window > 0)
}

/// What a compaction needs from the session, borrowed for its duration.
pub(crate) struct Compaction<'a> {
    pub(crate) state: &'a mut CompactionState,
    pub(crate) history: &'a Mutex<History>,
    /// The worker's approximate character count of the history, kept in step.
    pub(crate) history_chars: &'a mut usize,
    pub(crate) config: &'a SessionConfig,
    pub(crate) profile: &'a ProviderProfile,
    pub(crate) client: &'a Client,
    pub(crate) env: &'a dyn ExecutionEnvironment,
    pub(crate) events: &'a EventSink,
    pub(crate) transcript: Option<&'a TranscriptWriter>,
    /// The input's token: a cancel ends the summary request.
    pub(crate) cancel: &'a CancelToken,
}

/// The result of asking for a summary.
enum Summary {
    Text(String),
    Failed(String),
    Cancelled,
}

/// What one branch of a compaction made of the history.
struct Compacted {
    turns: Vec<Turn>,
    fallback: CompactionFallback,
    turns_summarised: usize,
    summary: String,
    /// The model call that wrote the summary (for the transcript).
    call: Option<(Request, String)>,
}

/// A summary ready for the history, and the model call that made it.
struct Obtained {
    text: String,
    mechanical: bool,
    call: Option<(Request, String)>,
}

impl Compaction<'_> {
    /// Before a model call: compacts when the next request would pass the threshold.
    /// Returns whether it compacted.
    pub(crate) fn compact_if_needed(&mut self) -> bool {
        let Some(limits) = self.state.limits else {
            return false;
        };
        if self.state.account.tokens() <= limits.threshold {
            return false;
        }
        self.compact(CompactionReason::Threshold)
    }

    /// Before a model call, after any compaction: a request the account puts above the
    /// context window is never sent. The `ContextLength` error says why compaction could
    /// not bring it under (the per-input bound reached, or nothing left to cut).
    pub(crate) fn check_window(&self) -> Result<(), Error> {
        let Some(limits) = self.state.limits else {
            return Ok(());
        };
        let tokens = self.state.account.tokens();
        if tokens <= limits.window {
            return Ok(());
        }
        let bound = self.config.compaction.max_compactions_per_input;
        let why = if self.state.this_input >= bound {
            format!("the {bound} compactions an input may run (max_compactions_per_input) have run")
        } else {
            "nothing left could be summarised or cut (the system prompt, the tools and the \
             newest messages stay whole)"
                .to_string()
        };
        Err(Error::new(
            ErrorKind::ContextLength,
            format!(
                "the next request (~{tokens} tokens) would exceed the model's context window \
                 of {} tokens, and compaction could not bring it under: {why}; it was not sent",
                limits.window
            ),
        )
        .with_provider(&self.profile.id))
    }

    /// After a failed model call: a context overflow is compacted away once (`Ok`: retry
    /// the call); any other error, a second overflow (as a typed error) or an overflow
    /// nothing could be compacted for is returned.
    pub(crate) fn recover_from(&mut self, error: Error, retried: &mut bool) -> Result<(), Error> {
        if error.kind() != ErrorKind::ContextLength || self.state.limits.is_none() {
            return Err(error);
        }
        if *retried {
            return Err(overflow_after_compaction(&error));
        }
        *retried = true;
        if self.compact(CompactionReason::Overflow) {
            Ok(())
        } else {
            Err(error)
        }
    }

    /// Compacts the history now (unless the per-input bound is reached): summarises what
    /// the plan cuts off, or, with nothing to summarise, cuts the recent tool outputs.
    /// Returns whether the history changed.
    pub(crate) fn compact(&mut self, reason: CompactionReason) -> bool {
        let tokens_before = self.state.account.tokens();
        let fixed = self.state.account.fixed_tokens();
        let Some(limits) = self.limits_for(reason, tokens_before, fixed) else {
            return false;
        };
        let turns = lock(self.history).turns().to_vec();
        let prompt = self.prompt();
        let plan = CompactionPlan::new(&turns, &limits, prompt.len() / BYTES_PER_TOKEN);
        if plan.is_none() {
            // Nothing to summarise: only cutting tool outputs could help.
            let mut probe = turns.clone();
            if !shrink_outputs(&mut probe, self.excess(&turns, fixed, &limits)) {
                return false;
            }
        }
        self.state.this_input += 1;
        self.events.emit(EventKind::ContextCompactionStart {
            reason,
            tokens_before,
        });
        let compacted = match &plan {
            Some(plan) => {
                let Some(compacted) = self.summarise(plan, turns, fixed, &limits, reason) else {
                    self.end(reason, tokens_before, 0, plan.fallback(), String::new());
                    return false;
                };
                compacted
            }
            None => self.shrink_recent(turns, fixed, &limits),
        };
        if self.excess(&compacted.turns, fixed, &limits) > 0 {
            self.warn(format!(
                "compaction could not bring the context under {} tokens (now ~{}); the next \
                 request may be rejected",
                limits.threshold,
                fixed
                    + compacted
                        .turns
                        .iter()
                        .map(estimate_turn_tokens)
                        .sum::<usize>()
            ));
        }
        let call = compacted.call.as_ref().map(|(r, a)| (r, a.as_str()));
        self.replace_history(compacted.turns, reason, call);
        self.end(
            reason,
            tokens_before,
            compacted.turns_summarised,
            compacted.fallback,
            compacted.summary,
        );
        true
    }

    /// The budgets of this compaction: the configured ones (for the window that was sent,
    /// when an overflow says the window is smaller than we were told), sharing what the
    /// system prompt and tools leave. `None` when compaction is off or the per-input
    /// bound is reached (with a warning, once per input).
    fn limits_for(
        &mut self,
        reason: CompactionReason,
        tokens_before: usize,
        fixed: usize,
    ) -> Option<CompactionLimits> {
        let mut limits = self.state.limits?;
        let bound = self.config.compaction.max_compactions_per_input;
        if reason != CompactionReason::Manual && self.state.this_input >= bound {
            if !self.state.bound_warned {
                self.state.bound_warned = true;
                self.warn(format!(
                    "compaction skipped: {bound} compactions already ran for this input \
                     (max_compactions_per_input)"
                ));
            }
            return None;
        }
        if reason == CompactionReason::Overflow && tokens_before < limits.window {
            // The provider's window is smaller than we were told: plan for what was sent.
            limits = self.config.compaction.limits(tokens_before * 3 / 4);
        }
        // The budgets share what the system prompt and tools leave, so that a compaction
        // ends well under the threshold instead of compacting again on the next round.
        let room = limits.threshold.saturating_sub(fixed);
        limits.recent = limits.recent.min(room * 3 / 10);
        limits.users = limits.users.min(room / 5);
        limits.summary_output = limits.summary_output.min(room / 6).max(64);
        Some(limits)
    }

    /// The compaction request's instructions: the configured ones, or ours.
    fn prompt(&self) -> &str {
        self.config
            .compaction
            .prompt
            .as_deref()
            .unwrap_or(SUMMARY_PROMPT)
    }

    /// The first branch: the turns before the plan's cut become one summary turn, and the
    /// kept turns' tool outputs are cut if the result is still over the threshold. `None`
    /// when the input was cancelled while the summary was made.
    fn summarise(
        &self,
        plan: &CompactionPlan,
        turns: Vec<Turn>,
        fixed: usize,
        limits: &CompactionLimits,
        reason: CompactionReason,
    ) -> Option<Compacted> {
        let mut fallback = plan.fallback();
        let obtained = self.obtain_summary(plan, limits, reason)?;
        if obtained.mechanical {
            fallback = CompactionFallback::Dropped;
        }
        let mut turns = plan.compacted(&turns, summary_content(&obtained.text));
        let summary_at = turns
            .iter()
            .position(|t| matches!(t, Turn::Summary(_)))
            .unwrap_or(0);
        let excess = self.excess(&turns, fixed, limits);
        if excess > 0 && shrink_outputs(&mut turns[summary_at + 1..], excess) {
            fallback = fallback.max_with(CompactionFallback::Truncated);
        }
        Some(Compacted {
            turns,
            fallback,
            turns_summarised: plan.turns_summarised(),
            summary: obtained.text,
            call: obtained.call,
        })
    }

    /// The second branch: nothing before the recent turns to summarise, so their tool
    /// outputs are cut middle-out.
    fn shrink_recent(
        &self,
        mut turns: Vec<Turn>,
        fixed: usize,
        limits: &CompactionLimits,
    ) -> Compacted {
        let excess = self.excess(&turns, fixed, limits);
        let fallback = if shrink_outputs(&mut turns, excess) {
            CompactionFallback::Truncated
        } else {
            CompactionFallback::None
        };
        Compacted {
            turns,
            fallback,
            turns_summarised: 0,
            summary: String::new(),
            call: None,
        }
    }

    /// The summary for `plan`: the host's summariser's or the model's, then the
    /// `post_compact` hooks and the guards ([`accept_summary`](Self::accept_summary)); a
    /// mechanical record when it cannot be made. `None` when the input was cancelled
    /// meanwhile.
    fn obtain_summary(
        &self,
        plan: &CompactionPlan,
        limits: &CompactionLimits,
        reason: CompactionReason,
    ) -> Option<Obtained> {
        let request = self.summary_request(plan, limits, reason);
        let mut call = None;
        let size = estimate_request_tokens(&request);
        let summary = if size > limits.window {
            // The plan fits its input to the window; what the `pre_compact` hooks added
            // may not. Such a request is not sent either.
            Summary::Failed(format!(
                "the summary request (~{size} tokens with what the pre_compact hooks added) \
                 would exceed the context window of {} tokens",
                limits.window
            ))
        } else {
            self.summary_from(&request, &mut call)
        };
        let (summary, mut mechanical) = match summary {
            Summary::Cancelled => return None,
            Summary::Text(text) if !text.trim().is_empty() => (text, false),
            Summary::Text(_) => (
                self.rejected(plan, "the model's summary was empty", limits),
                true,
            ),
            Summary::Failed(why) => (self.rejected(plan, &why, limits), true),
        };
        let (text, rejected) = self.accept_summary(summary, plan, limits, reason);
        mechanical |= rejected;
        Some(Obtained {
            text,
            mechanical,
            call,
        })
    }

    /// The summary of `request` from the host's summariser, else the model (the call kept
    /// for the transcript in `call`).
    fn summary_from(&self, request: &Request, call: &mut Option<(Request, String)>) -> Summary {
        match self
            .config
            .compaction
            .summariser
            .as_ref()
            .and_then(|f| f(request))
        {
            Some(text) => Summary::Text(text),
            None => {
                let answer = self.ask_model(request);
                if let Summary::Text(text) = &answer {
                    *call = Some((request.clone(), text.clone()));
                }
                answer
            }
        }
    }

    /// The compaction request for `plan`: our instructions (or the configured ones) and
    /// the plan's input with what the `pre_compact` hooks add, no tools, the summary's
    /// output limit.
    fn summary_request(
        &self,
        plan: &CompactionPlan,
        limits: &CompactionLimits,
        reason: CompactionReason,
    ) -> Request {
        let mut input = plan.input().to_string();
        for context in self.hooks().pre_compact(reason, plan.input()) {
            input.push_str("\n\n");
            input.push_str(&context);
        }
        Request {
            model: self.profile.model.clone(),
            messages: vec![Message::system(self.prompt()), Message::user(input)],
            provider: Some(self.profile.id.clone()),
            max_tokens: Some(u32::try_from(limits.summary_output).unwrap_or(u32::MAX)),
            ..Request::default()
        }
    }

    /// Decides the summary that goes into the history: the `post_compact` hooks may
    /// replace it; a summary larger than what it replaces is rejected for the mechanical
    /// record (the second value says so).
    fn accept_summary(
        &self,
        summary: String,
        plan: &CompactionPlan,
        limits: &CompactionLimits,
        reason: CompactionReason,
    ) -> (String, bool) {
        let text = self.hooks().post_compact(summary, reason, plan.input());
        let tokens = text.len() / BYTES_PER_TOKEN;
        if tokens > plan.replaced_tokens() || tokens > limits.summary_output * 2 {
            self.warn(format!(
                "the summary (~{tokens} tokens) is larger than what it replaces (~{} tokens) \
                 or its limit; it was rejected and the turns were dropped instead",
                plan.replaced_tokens()
            ));
            let record = plan.mechanical_summary("its summary was rejected", limits.summary_output);
            return (record, true);
        }
        (text, false)
    }

    fn rejected(&self, plan: &CompactionPlan, why: &str, limits: &CompactionLimits) -> String {
        self.warn(format!(
            "the compaction summary could not be made ({why}); the summarised turns were \
             dropped with a record of their actions"
        ));
        plan.mechanical_summary(why, limits.summary_output)
    }

    /// One model call for the summary, without streaming events.
    fn ask_model(&self, request: &Request) -> Summary {
        match self.client.complete_with_cancel(request, self.cancel) {
            Ok(response) => Summary::Text(response.text()),
            Err(_) if self.cancel.is_cancelled() => Summary::Cancelled,
            Err(error) => Summary::Failed(format!("the summary request failed: {error}")),
        }
    }

    /// Tokens of `turns` (with the fixed part) above the threshold.
    fn excess(&self, turns: &[Turn], fixed: usize, limits: &CompactionLimits) -> usize {
        let tokens = fixed + turns.iter().map(estimate_turn_tokens).sum::<usize>();
        tokens.saturating_sub(limits.threshold)
    }

    fn replace_history(
        &mut self,
        turns: Vec<Turn>,
        reason: CompactionReason,
        call: Option<(&Request, &str)>,
    ) {
        let history = History::from_turns(turns);
        if let Some(transcript) = self.transcript {
            if let Some(failure) = transcript.compaction(reason, &history, call) {
                self.events.emit(EventKind::Warning {
                    message: failure,
                    code: "transcript".to_string(),
                });
            }
        }
        let tokens = history.turns().iter().map(estimate_turn_tokens).sum();
        self.state.account.reset(tokens);
        self.state.epoch += 1;
        *self.history_chars = history.approx_chars();
        *lock(self.history) = history;
    }

    /// Emits `CONTEXT_COMPACTION_END`.
    fn end(
        &self,
        reason: CompactionReason,
        tokens_before: usize,
        turns_summarised: usize,
        fallback: CompactionFallback,
        summary: String,
    ) {
        self.events.emit(EventKind::ContextCompactionEnd {
            reason,
            tokens_before,
            tokens_after: self.state.account.tokens(),
            turns_summarised,
            fallback,
            summary,
        });
    }

    fn hooks(&self) -> HookRunner<'_> {
        HookRunner::new(&self.config.hooks, self.events, self.env)
    }

    fn warn(&self, message: String) {
        self.events.emit(EventKind::Warning {
            message,
            code: "compaction".to_string(),
        });
    }
}

/// The typed error of a request that overflows again right after a compaction.
fn overflow_after_compaction(error: &Error) -> Error {
    Error::new(
        ErrorKind::ContextLength,
        format!(
            "the request still exceeds the model's context window after compacting the \
             history: {error}"
        ),
    )
}
