//! The worker's side of compaction: when to compact, the summary request (built in
//! [`Worker::summary_request`]), the summary's acceptance (in [`Worker::accept_summary`]:
//! the host's hook, then the guards), the new history, the events and the transcript
//! record.
//!
//! Runs on the worker thread between model calls; never while a tool runs.

use super::account::{BYTES_PER_TOKEN, CompactionLimits, TokenAccount, estimate_turn_tokens};
use super::plan::CompactionPlan;
use super::plan::shrink_outputs;
use super::prompt::{SUMMARY_PROMPT, summary_content};
use super::{CompactionFallback, CompactionReason, ProposedSummary};
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind};
use crate::llm::{Message, Request};
use crate::session::events::EventKind;
use crate::session::history::{History, Turn};
use crate::session::worker::Worker;
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
        }
    }
}

/// The result of asking for a summary.
enum Summary {
    Text(String),
    Failed(String),
    Cancelled,
}

impl Worker {
    /// Before a model call: compacts when the next request would pass the threshold.
    /// Returns whether it compacted.
    pub(crate) fn compact_if_needed(&mut self, cancel: &CancelToken) -> bool {
        let Some(limits) = self.compaction.limits else {
            return false;
        };
        if self.compaction.account.tokens() <= limits.threshold {
            return false;
        }
        self.compact(CompactionReason::Threshold, cancel)
    }

    /// After a failed model call: a context overflow is compacted away once (`Ok`: retry
    /// the call); any other error, a second overflow (as a typed error) or an overflow
    /// nothing could be compacted for is returned.
    pub(crate) fn recover_from_overflow(
        &mut self,
        error: Error,
        retried: &mut bool,
        cancel: &CancelToken,
    ) -> Result<(), Error> {
        if error.kind() != ErrorKind::ContextLength || self.compaction.limits.is_none() {
            return Err(error);
        }
        if *retried {
            return Err(overflow_after_compaction(&error));
        }
        *retried = true;
        if self.compact(CompactionReason::Overflow, cancel) {
            Ok(())
        } else {
            Err(error)
        }
    }

    /// Compacts the history now (unless the per-input bound is reached); returns whether
    /// the history changed.
    pub(crate) fn compact(&mut self, reason: CompactionReason, cancel: &CancelToken) -> bool {
        let Some(mut limits) = self.compaction.limits else {
            return false;
        };
        let bound = self.config.compaction.max_compactions_per_input;
        if reason != CompactionReason::Manual && self.compaction.this_input >= bound {
            if !self.compaction.bound_warned {
                self.compaction.bound_warned = true;
                self.warn(format!(
                    "compaction skipped: {bound} compactions already ran for this input \
                     (max_compactions_per_input)"
                ));
            }
            return false;
        }
        let tokens_before = self.compaction.account.tokens();
        if reason == CompactionReason::Overflow && tokens_before < limits.window {
            // The provider's window is smaller than we were told: plan for what was sent.
            limits = self.config.compaction.limits(tokens_before * 3 / 4);
        }
        let mut turns = lock(&self.shared.history).turns().to_vec();
        let fixed = self.compaction.account.fixed_tokens();
        // The budgets share what the system prompt and tools leave, so that a compaction
        // ends well under the threshold instead of compacting again on the next round.
        let room = limits.threshold.saturating_sub(fixed);
        limits.recent = limits.recent.min(room * 3 / 10);
        limits.users = limits.users.min(room / 5);
        limits.summary_output = limits.summary_output.min(room / 6).max(64);
        let prompt = self
            .config
            .compaction
            .prompt
            .as_deref()
            .unwrap_or(SUMMARY_PROMPT);
        let plan = CompactionPlan::new(&turns, &limits, prompt.len() / BYTES_PER_TOKEN);
        if plan.is_none() {
            // Nothing to summarise: only cutting tool outputs could help.
            let mut probe = turns.clone();
            if !shrink_outputs(&mut probe, self.excess(&turns, fixed, &limits)) {
                return false;
            }
        }
        self.compaction.this_input += 1;
        self.events.emit(EventKind::ContextCompactionStart {
            reason,
            tokens_before,
        });
        let mut fallback = CompactionFallback::None;
        let mut turns_summarised = 0;
        let mut summary_text = String::new();
        let mut model_call = None;
        if let Some(plan) = &plan {
            fallback = plan.fallback();
            turns_summarised = plan.turns_summarised();
            let Some(obtained) =
                self.obtain_summary(plan, prompt, &limits, reason, tokens_before, cancel)
            else {
                self.end_compaction(reason, tokens_before, 0, fallback, String::new());
                return false;
            };
            if obtained.mechanical {
                fallback = CompactionFallback::Dropped;
            }
            summary_text = obtained.text;
            model_call = obtained.call;
            turns = plan.compacted(&turns, summary_content(&summary_text));
            let summary_at = turns
                .iter()
                .position(|t| matches!(t, Turn::Summary(_)))
                .unwrap_or(0);
            let excess = self.excess(&turns, fixed, &limits);
            if excess > 0 && shrink_outputs(&mut turns[summary_at + 1..], excess) {
                fallback = fallback.max_with(CompactionFallback::Truncated);
            }
        } else {
            // Nothing before the recent turns to summarise: cut their tool outputs.
            let excess = self.excess(&turns, fixed, &limits);
            if shrink_outputs(&mut turns, excess) {
                fallback = CompactionFallback::Truncated;
            }
        }
        if self.over(&turns, fixed, &limits) {
            self.warn(format!(
                "compaction could not bring the context under {} tokens (now ~{}); the next \
                 request may be rejected",
                limits.threshold,
                fixed + turns.iter().map(estimate_turn_tokens).sum::<usize>()
            ));
        }
        let call = model_call.as_ref().map(|(r, a)| (r, a.as_str()));
        self.replace_history(turns, reason, call);
        self.end_compaction(
            reason,
            tokens_before,
            turns_summarised,
            fallback,
            summary_text,
        );
        true
    }

    /// The summary for `plan`: the host's summariser's or the model's, then the host's
    /// hook and the guards ([`accept_summary`](Self::accept_summary)); a mechanical record
    /// when it cannot be made. `None` when the input was cancelled meanwhile.
    fn obtain_summary(
        &self,
        plan: &CompactionPlan,
        prompt: &str,
        limits: &CompactionLimits,
        reason: CompactionReason,
        tokens_before: usize,
        cancel: &CancelToken,
    ) -> Option<Obtained> {
        let request = self.summary_request(plan, prompt, limits);
        let mut call = None;
        let summary = match self
            .config
            .compaction
            .summariser
            .as_ref()
            .and_then(|f| f(&request))
        {
            Some(text) => Summary::Text(text),
            None => {
                let answer = self.ask_model(&request, cancel);
                if let Summary::Text(text) = &answer {
                    call = Some((request, text.clone()));
                }
                answer
            }
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
        let proposed = ProposedSummary {
            reason,
            summary,
            input: plan.input().to_string(),
            turns_summarised: plan.turns_summarised(),
            tokens_before,
        };
        let accepted = self.accept_summary(&proposed, plan, limits);
        mechanical |= accepted.mechanical;
        Some(Obtained {
            text: accepted.text,
            mechanical,
            call,
        })
    }

    /// The compaction request for `plan`: our instructions (or the configured ones) and
    /// the plan's input, no tools, the summary's output limit. The place a hook sees the
    /// request before it is sent.
    pub(crate) fn summary_request(
        &self,
        plan: &CompactionPlan,
        prompt: &str,
        limits: &CompactionLimits,
    ) -> Request {
        Request {
            model: self.profile.model.clone(),
            messages: vec![
                Message::system(prompt),
                Message::user(self.with_compact_context(plan.input())),
            ],
            provider: Some(self.profile.id.clone()),
            max_tokens: Some(u32::try_from(limits.summary_output).unwrap_or(u32::MAX)),
            ..Request::default()
        }
    }

    /// The compaction request's input with what the `pre_compact` hooks add.
    fn with_compact_context(&self, input: &str) -> String {
        let mut input = input.to_string();
        for context in self.hooks().pre_compact() {
            input.push_str("\n\n");
            input.push_str(&context);
        }
        input
    }

    /// Decides the summary that goes into the history: the host's hook may replace the
    /// proposal; a summary larger than what it replaces is rejected for the mechanical
    /// record. The place a hook sees the summary before it is accepted.
    fn accept_summary(
        &self,
        proposed: &ProposedSummary,
        plan: &CompactionPlan,
        limits: &CompactionLimits,
    ) -> Accepted {
        let text = match &self.config.compaction.summary_hook {
            Some(hook) => hook(proposed).unwrap_or_else(|| proposed.summary.clone()),
            None => proposed.summary.clone(),
        };
        // The post_compact hooks see (and may replace) the summary after the host's hook.
        let text = self.hooks().post_compact(text);
        let tokens = text.len() / BYTES_PER_TOKEN;
        if tokens > plan.replaced_tokens() || tokens > limits.summary_output * 2 {
            self.warn(format!(
                "the summary (~{tokens} tokens) is larger than what it replaces (~{} tokens) \
                 or its limit; it was rejected and the turns were dropped instead",
                plan.replaced_tokens()
            ));
            return Accepted {
                text: plan.mechanical_summary("its summary was rejected", limits.summary_output),
                mechanical: true,
            };
        }
        Accepted {
            text,
            mechanical: false,
        }
    }

    fn rejected(&self, plan: &CompactionPlan, why: &str, limits: &CompactionLimits) -> String {
        self.warn(format!(
            "the compaction summary could not be made ({why}); the summarised turns were \
             dropped with a record of their actions"
        ));
        plan.mechanical_summary(why, limits.summary_output)
    }

    /// One model call for the summary, without streaming events.
    fn ask_model(&self, request: &Request, cancel: &CancelToken) -> Summary {
        match self.client.complete_with_cancel(request, cancel) {
            Ok(response) => Summary::Text(response.text()),
            Err(_) if cancel.is_cancelled() => Summary::Cancelled,
            Err(error) => Summary::Failed(format!("the summary request failed: {error}")),
        }
    }

    fn over(&self, turns: &[Turn], fixed: usize, limits: &CompactionLimits) -> bool {
        self.excess(turns, fixed, limits) > 0
    }

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
        if let Some(transcript) = &self.transcript {
            if let Some(failure) = transcript.compaction(reason, &history, call) {
                self.events.emit(EventKind::Warning {
                    message: failure,
                    code: "transcript".to_string(),
                });
            }
        }
        let tokens = history.turns().iter().map(estimate_turn_tokens).sum();
        self.compaction.account.reset(tokens);
        self.history_chars = history.approx_chars();
        *lock(&self.shared.history) = history;
    }

    fn end_compaction(
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
            tokens_after: self.compaction.account.tokens(),
            turns_summarised,
            fallback,
            summary,
        });
    }

    fn warn(&self, message: String) {
        self.events.emit(EventKind::Warning {
            message,
            code: "compaction".to_string(),
        });
    }
}

struct Accepted {
    text: String,
    mechanical: bool,
}

/// A summary ready for the history, and the model call that made it (for the transcript).
struct Obtained {
    text: String,
    mechanical: bool,
    call: Option<(Request, String)>,
}

impl CompactionFallback {
    /// The stronger of two fallbacks.
    fn max_with(self, other: CompactionFallback) -> CompactionFallback {
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
