//! The worker thread: the agentic loop of spec §2.5, streaming, with limits, steering,
//! loop detection, error handling and graceful shutdown.
//!
//! The worker owns the profile, the environment, the client and the configuration; it
//! waits on one channel of [`Input`]s and runs each input to its end. Host calls that must
//! act while the worker is busy do not go through the channel: steering and follow-ups sit
//! in shared queues drained at the spec's points, `interrupt()` cancels the input's
//! [`CancelToken`] and `abort()` the session's (which closes the HTTP socket and kills
//! process groups through the callbacks registered on it). This module never blocks the
//! host and never leaves a thread running when it returns.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crossbeam_channel::{Receiver, Sender};

use super::Outcome;
use super::checkpoint::lifecycle::{CheckpointJob, CheckpointParts, Checkpoints};
use super::compact::{Compaction, CompactionState};
use super::compaction::CompactionReason;
use super::config::SessionConfig;
use super::delivery::EventSink;
use super::events::{CloseReason, EventKind, SessionState, StopReason};
use super::history::{AssistantTurn, History, Turn};
use super::hook_runner::{HookRunner, Submit};
use super::hooks::{HookEvent, PromptSource};
use super::loop_detection::LoopDetector;
use super::tool_round::{ToolRound, cancelled_text};
use super::transcript::TranscriptWriter;
use super::usage::Totals;
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind};
use crate::exec::ExecutionEnvironment;
use crate::llm::{
    Client, FinishKind, FinishReason, Message, Request, Response, StreamEvent, ToolChoice,
    ToolDefinition, ToolResult,
};
use crate::profiles::ProviderProfile;
use crate::session::subagents::Subagents;
use crate::sync::lock;

/// What the host sends the worker through the inbox.
pub(crate) enum Input {
    /// Process this input; send the outcome (after the follow-ups it triggers) to `reply`.
    Submit {
        text: String,
        reply: Option<Sender<Outcome>>,
    },
    /// A follow-up was queued: process the queue if idle.
    FollowUp,
    /// Compact the history now (`Session::compact`); reply when done.
    Compact { reply: Sender<()> },
    /// Rewind (`Session::rewind`) or fork (`Session::fork`): the job replies itself.
    Checkpoint(CheckpointJob),
    /// Shut down cleanly after the inputs before this one.
    Close,
    /// Shut down now (the session token is already cancelled).
    Abort,
}

/// State the host and the worker share.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) state: Mutex<SessionState>,
    pub(crate) steering: Mutex<VecDeque<String>>,
    pub(crate) follow_ups: Mutex<VecDeque<String>>,
    /// The token of the input being processed (what `interrupt()` cancels).
    pub(crate) current_input: Mutex<Option<CancelToken>>,
    pub(crate) reasoning_effort: Mutex<Option<String>>,
    pub(crate) history: Mutex<History>,
    /// Tool calls waiting for an approval answer.
    pub(crate) awaiting: AtomicUsize,
    pub(crate) closed: AtomicBool,
}

/// How one input ended.
struct InputEnd {
    text: String,
    stop: StopReason,
    rounds: usize,
    totals: Totals,
    error: Option<Error>,
    fatal: bool,
    /// Why a `user_prompt_submit` hook blocked the input.
    blocked: Option<String>,
}

/// How one model call ended.
enum RoundEnd {
    Response(Box<Response>),
    Cancelled,
    Failed(Error),
}

pub(crate) struct Worker {
    pub(crate) short_id: String,
    pub(crate) profile: ProviderProfile,
    pub(crate) env: Arc<dyn ExecutionEnvironment>,
    pub(crate) client: Client,
    pub(crate) config: SessionConfig,
    pub(crate) shared: Arc<Shared>,
    pub(crate) events: EventSink,
    /// This session's children (spawn_agent and friends).
    pub(crate) subagents: Arc<Subagents>,
    pub(crate) inbox: Receiver<Input>,
    pub(crate) abort: CancelToken,
    pub(crate) loop_detector: LoopDetector,
    /// Approximate characters in the history (kept as turns are added).
    pub(crate) history_chars: usize,
    /// Model calls (assistant turns) so far: what `max_turns` limits.
    pub(crate) assistant_turns: usize,
    /// The context-usage warning fired and usage has not dropped below the threshold since.
    pub(crate) context_warned: bool,
    /// Token accounting and compaction state (see `compact.rs`).
    pub(crate) compaction: CompactionState,
    /// Where turns and requests are recorded, if anywhere.
    pub(crate) transcript: Option<Arc<TranscriptWriter>>,
    /// Warnings to emit right after `SESSION_START` (from resuming a transcript).
    pub(crate) startup_warnings: Vec<String>,
    /// Usage and cost of every model call so far (for `SESSION_END`).
    pub(crate) totals: Totals,
    /// The session's MCP servers, registered into the tool registry before each input.
    pub(crate) mcp: Option<Arc<Mutex<crate::mcp::server::McpServers>>>,
    /// Marks, file checkpoints and the store (see `checkpoint/`).
    pub(crate) checkpoints: Checkpoints,
}

impl Worker {
    /// The thread's body: start, serve inputs, shut down.
    pub(crate) fn run(mut self) {
        self.events.emit(EventKind::SessionStart {
            provider: self.profile.id.clone(),
            model: self.profile.model.clone(),
        });
        for message in std::mem::take(&mut self.startup_warnings) {
            self.transcript_warning(message);
        }
        self.hooks().observe(HookEvent::SessionStart);
        let reason = match self.env.initialize() {
            Ok(()) => {
                for message in self.env.warnings() {
                    self.events.emit(EventKind::Warning {
                        message,
                        code: "sandbox".to_string(),
                    });
                }
                // Spec §6.3: the environment block is generated once, at session start.
                self.profile.capture_environment(&*self.env);

                // A bug in the loop must still end the event stream properly.
                let served =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.serve()));
                served.unwrap_or_else(|_| {
                    self.events.emit(EventKind::Error {
                        message: "the session worker failed unexpectedly".to_string(),
                        error_kind: ErrorKind::Io.as_str().to_string(),
                        fatal: true,
                    });
                    // Keep the history valid (every call answered) and end the input that
                    // was running, as any other stop does.
                    self.answer_open_calls();
                    if lock(&self.shared.current_input).take().is_some() {
                        self.events.emit(EventKind::ProcessingEnd {
                            stop_reason: StopReason::Error,
                            rounds: 0,
                            usage: Default::default(),
                            cost_usd: None,
                        });
                    }
                    CloseReason::Error
                })
            }
            Err(err) => {
                self.events.emit(EventKind::Error {
                    message: format!("the execution environment failed to start: {err}"),
                    error_kind: ErrorKind::Io.as_str().to_string(),
                    fatal: true,
                });
                CloseReason::Error
            }
        };
        self.shutdown(reason);
    }

    fn serve(&mut self) -> CloseReason {
        loop {
            if self.abort.is_cancelled() {
                return CloseReason::Aborted;
            }
            let Ok(input) = self.inbox.recv() else {
                // The handle is gone without a word: treat it as an abort.
                return CloseReason::Aborted;
            };
            let closing = match input {
                Input::Submit { text, reply } => self.cycle(Some(text), reply),
                Input::FollowUp => self.cycle(None, None),
                Input::Compact { reply } => {
                    let cancel = self.abort.child();
                    self.compaction(&cancel).compact(CompactionReason::Manual);
                    let _ = reply.send(());
                    None
                }
                Input::Checkpoint(job) => job(&mut self.checkpoint_parts()),
                Input::Close => return CloseReason::Closed,
                Input::Abort => return CloseReason::Aborted,
            };
            if let Some(reason) = closing {
                return reason;
            }
        }
    }

    /// Processes `first` (or the next follow-up) and then every queued follow-up; replies
    /// with the summary. `Some` when the session must close.
    fn cycle(
        &mut self,
        first: Option<String>,
        reply: Option<Sender<Outcome>>,
    ) -> Option<CloseReason> {
        let mut totals = Totals::default();
        let mut outcome = Outcome {
            text: String::new(),
            stop_reason: StopReason::Completed,
            rounds: 0,
            usage: Default::default(),
            cost_usd: None,
            blocked: None,
            inputs: 0,
            error: None,
        };
        let mut closing = None;
        let follow_up = |worker: &Self| {
            lock(&worker.shared.follow_ups)
                .pop_front()
                .map(|text| (text, PromptSource::FollowUp))
        };
        let mut next = first
            .map(|text| (text, PromptSource::Input))
            .or_else(|| follow_up(self));
        while let Some((text, source)) = next {
            let end = self.process_input(text, source);
            outcome.text = end.text;
            outcome.stop_reason = end.stop;
            outcome.rounds += end.rounds;
            totals += end.totals;
            outcome.usage = totals.usage;
            outcome.cost_usd = totals.cost();
            outcome.blocked = end.blocked;
            outcome.inputs += 1;
            outcome.error = end.error;
            if self.abort.is_cancelled() {
                closing = Some(CloseReason::Aborted);
                break;
            }
            if end.fatal {
                closing = Some(CloseReason::Error);
                break;
            }
            next = follow_up(self);
        }
        if closing.is_none() {
            *lock(&self.shared.state) = SessionState::Idle;
        }
        self.subagent_stopped(&outcome.text);
        if let Some(reply) = reply {
            let _ = reply.send(outcome);
        }
        closing
    }

    fn transcript_warning(&self, message: String) {
        self.events.emit(EventKind::Warning {
            message,
            code: "transcript".to_string(),
        });
    }

    /// Waits for the MCP servers still starting (each at most its startup timeout),
    /// registers their tools, re-lists changed ones, warns about failed ones.
    fn prepare_mcp(&mut self) {
        let Some(mcp) = &self.mcp else { return };
        let warnings = lock(mcp).prepare(&mut self.profile.tool_registry);
        for message in warnings {
            self.events.emit(EventKind::Warning {
                message,
                code: "mcp".to_string(),
            });
        }
    }

    fn push_turn(&mut self, turn: Turn) {
        // A user turn starts an input, a response with tool calls a round: checkpoints.
        match &turn {
            Turn::User(_) => self.checkpoint_parts().begin(false),
            Turn::Assistant(reply) if !reply.tool_calls.is_empty() => {
                self.checkpoint_parts().begin(true)
            }
            _ => {}
        }
        if let Some(transcript) = &self.transcript {
            if let Some(failure) = transcript.turn(&turn) {
                self.transcript_warning(failure);
            }
        }
        self.history_chars += turn.approx_chars();
        self.compaction.account.push(&turn);
        if matches!(turn, Turn::Assistant(_)) {
            self.assistant_turns += 1;
        }
        lock(&self.shared.history).push(turn);
    }

    /// The spec's `process_input`, for one input (follow-ups are separate inputs).
    fn process_input(&mut self, text: String, source: PromptSource) -> InputEnd {
        let cancel = self.abort.child();
        *lock(&self.shared.current_input) = Some(cancel.clone());
        *lock(&self.shared.state) = SessionState::Processing;
        let mut end = InputEnd {
            text: String::new(),
            stop: StopReason::Completed,
            rounds: 0,
            totals: Totals::default(),
            error: None,
            fatal: false,
            blocked: None,
        };
        let text = match self.hooks().user_prompt_submit(text.clone(), source) {
            Submit::Accept(text) => text,
            Submit::Block(reason) => {
                self.events.emit(EventKind::UserInput { content: text });
                end.stop = StopReason::Blocked;
                end.blocked = Some(reason);
                return self.end_input(end);
            }
        };
        self.push_turn(Turn::user(text.clone()));
        self.events.emit(EventKind::UserInput { content: text });
        self.drain_steering();

        // Same bytes on every round of this input: the cacheable prefix.
        self.prepare_mcp();
        let tools = self.profile.tools();
        let system_prompt = self.profile.system_prompt_with(&*self.env, &tools);
        self.compaction.account.set_fixed(&system_prompt, &tools);
        let mut request = self.build_request(tools); // once per input; rounds refill it
        self.compaction.this_input = 0;
        self.compaction.bound_warned = false;
        // At most one compaction before each model call; one retry after an overflow.
        let mut overflow_retried = false;
        let mut stop_hook_active = false;
        end.stop = loop {
            let max_rounds = self.config.max_tool_rounds_per_input;
            if max_rounds > 0 && end.rounds >= max_rounds {
                self.events.emit(EventKind::TurnLimit {
                    round: Some(end.rounds),
                    total_turns: None,
                });
                break StopReason::RoundLimit;
            }
            let max_turns = self.config.max_turns;
            if max_turns > 0 && self.assistant_turns >= max_turns {
                self.events.emit(EventKind::TurnLimit {
                    round: None,
                    total_turns: Some(self.assistant_turns),
                });
                break StopReason::TurnLimit;
            }
            if cancel.is_cancelled() {
                break self.cancelled_stop();
            }
            if !overflow_retried {
                self.compaction(&cancel).compact_if_needed();
            }
            if cancel.is_cancelled() {
                break self.cancelled_stop();
            }
            self.check_context_usage();
            self.refresh_request(&mut request, &system_prompt);
            self.record_request(&request);
            let history_at_request = self.compaction.account.history_tokens();
            let response = match self.stream_round(&request, &cancel) {
                RoundEnd::Response(response) => response,
                RoundEnd::Cancelled => break self.cancelled_stop(),
                RoundEnd::Failed(error) => {
                    let mut compaction = self.compaction(&cancel);
                    match compaction.recover_from(error, &mut overflow_retried) {
                        Ok(()) => continue,
                        Err(error) => {
                            end.fatal = self.report_error(&error);
                            end.error = Some(error);
                            break StopReason::Error;
                        }
                    }
                }
            };
            request.messages = Vec::new(); // no copy of the history while tools run
            overflow_retried = false;
            self.compaction
                .account
                .report(&response.usage, &self.profile.id, history_at_request);
            end.totals.add(response.usage, self.call_cost(&response));
            end.text = response.text();
            let calls: Vec<_> = response.tool_calls().into_iter().cloned().collect();
            self.push_turn(assistant_turn(*response, calls.clone()));
            if calls.is_empty() {
                // A steer that arrived while the final answer streamed is not deferred to
                // the next input: inject it and let the model answer it now.
                if !cancel.is_cancelled() && self.drain_steering() > 0 {
                    continue;
                }
                // A stop hook may continue the input; each continuation counts as a round,
                // so `max_tool_rounds_per_input` bounds it.
                if !cancel.is_cancelled() {
                    if let Some(message) = self.hooks().stop(&end.text, stop_hook_active) {
                        stop_hook_active = true;
                        end.rounds += 1;
                        self.push_turn(Turn::steering(message));
                        continue;
                    }
                }
                break StopReason::Completed;
            }
            end.rounds += 1;
            let results = self.tool_round(&cancel).run(&calls);
            self.push_turn(Turn::tool_results(results));
            if cancel.is_cancelled() {
                break self.cancelled_stop();
            }
            self.drain_steering();
            self.detect_loop(&calls);
        };
        self.end_input(end)
    }

    /// The end of every input: answer open calls, leave the processing state, emit
    /// `PROCESSING_END` with the input's totals.
    fn end_input(&mut self, end: InputEnd) -> InputEnd {
        self.answer_open_calls();
        self.checkpoint_parts().end_input();
        *lock(&self.shared.current_input) = None;
        // A host that sees PROCESSING_END sees the state it leads to (unless a follow-up
        // is queued, which starts processing again at once).
        if !end.fatal && !self.abort.is_cancelled() && lock(&self.shared.follow_ups).is_empty() {
            *lock(&self.shared.state) = SessionState::Idle;
        }
        self.totals += end.totals;
        self.events.emit(EventKind::ProcessingEnd {
            stop_reason: end.stop,
            rounds: end.rounds,
            usage: end.totals.usage,
            cost_usd: end.totals.cost(),
        });
        end
    }

    /// In a subagent: the parent's `subagent_stop` hooks, on the parent's stream.
    fn subagent_stopped(&self, answer: &str) {
        if let Some((parent, agent_id)) = self.events.parent() {
            let runner = HookRunner {
                events: parent,
                ..self.hooks()
            };
            runner.subagent(HookEvent::SubagentStop, agent_id, None, Some(answer));
        }
    }

    fn hooks(&self) -> HookRunner<'_> {
        HookRunner::new(&self.config.hooks, &self.events, &*self.env)
    }

    /// The cost of one model call, by the model that answered (else the profile's).
    fn call_cost(&self, response: &Response) -> Option<f64> {
        let model = if response.model.is_empty() {
            &self.profile.model
        } else {
            &response.model
        };
        self.config.prices.cost(model, &response.usage)
    }

    fn cancelled_stop(&self) -> StopReason {
        if self.abort.is_cancelled() {
            StopReason::Aborted
        } else {
            StopReason::Interrupted
        }
    }

    fn tool_round<'a>(&'a self, cancel: &'a CancelToken) -> ToolRound<'a> {
        ToolRound {
            profile: &self.profile,
            env: &self.env,
            config: &self.config,
            events: &self.events,
            state: &self.shared.state,
            awaiting: &self.shared.awaiting,
            cancel,
            abort: &self.abort,
            short_id: &self.short_id,
        }
    }

    /// The session's parts a compaction works with, borrowed for its duration.
    fn compaction<'a>(&'a mut self, cancel: &'a CancelToken) -> Compaction<'a> {
        Compaction {
            state: &mut self.compaction,
            history: &self.shared.history,
            history_chars: &mut self.history_chars,
            config: &self.config,
            profile: &self.profile,
            client: &self.client,
            env: &*self.env,
            events: &self.events,
            transcript: self.transcript.as_deref(),
            cancel,
        }
    }

    /// The session's parts a checkpoint, rewind or fork works with (`checkpoint/`).
    fn checkpoint_parts(&mut self) -> CheckpointParts<'_> {
        CheckpointParts {
            checkpoints: &mut self.checkpoints,
            history: &self.shared.history,
            compaction: &mut self.compaction,
            history_chars: &mut self.history_chars,
            transcript: self.transcript.as_ref(),
            events: &self.events,
            cancel: &self.abort,
            profile: &self.profile,
            client: &self.client,
            config: &self.config,
        }
    }

    /// Moves every queued steering message into the history; returns how many.
    fn drain_steering(&mut self) -> usize {
        let mut count = 0;
        loop {
            let Some(message) = lock(&self.shared.steering).pop_front() else {
                return count;
            };
            let message = match self
                .hooks()
                .user_prompt_submit(message, PromptSource::Steering)
            {
                Submit::Accept(message) => message,
                Submit::Block(_) => continue,
            };
            self.push_turn(Turn::steering(message.clone()));
            self.events
                .emit(EventKind::SteeringInjected { content: message });
            count += 1;
        }
    }

    fn detect_loop(&mut self, calls: &[crate::llm::ToolCall]) {
        if !self.config.enable_loop_detection {
            return;
        }
        for call in calls {
            self.loop_detector.record(call);
        }
        if self.loop_detector.check() {
            let message = format!(
                "Loop detected: the last {} tool calls follow a repeating pattern. \
                 Try a different approach.",
                self.config.loop_detection_window
            );
            self.push_turn(Turn::steering(message.clone()));
            self.events.emit(EventKind::LoopDetection { message });
        }
    }

    /// Structural guard of the invariant: any call without a result gets one now.
    fn answer_open_calls(&mut self) {
        let open = lock(&self.shared.history).unanswered_calls();
        if open.is_empty() {
            return;
        }
        let text = cancelled_text(self.abort.is_cancelled());
        let results = open
            .iter()
            .map(|call| ToolResult::for_call(call, text, true))
            .collect();
        self.push_turn(Turn::tool_results(results));
    }

    /// Spec §5.5: warn once when the history passes 80 % of the context window; re-arm
    /// when it drops below.
    fn check_context_usage(&mut self) {
        let window = self.profile.context_window_size;
        if window == 0 {
            return;
        }
        let approx_tokens = self.history_chars / 4;
        let above = approx_tokens.saturating_mul(10) > window.saturating_mul(8);
        if above && !self.context_warned {
            let percent = (approx_tokens as f64 / window as f64 * 100.0).round();
            self.events.emit(EventKind::Warning {
                message: format!("Context usage at ~{percent}% of context window"),
                code: "context_usage".to_string(),
            });
        }
        self.context_warned = above;
    }

    /// The request of an input, without messages ([`refresh_request`](Self::refresh_request)
    /// adds them before each model call).
    fn build_request(&self, tools: Vec<ToolDefinition>) -> Request {
        Request {
            model: self.profile.model.clone(),
            provider: Some(self.profile.id.clone()),
            tool_choice: (!tools.is_empty()).then_some(ToolChoice::Auto),
            tools,
            ..Request::default()
        }
    }

    /// Fills `request` for the next model call: the system prompt and the whole history,
    /// the reasoning effort and provider options as they are now.
    fn refresh_request(&self, request: &mut Request, system_prompt: &str) {
        let history = lock(&self.shared.history);
        request.messages.clear();
        request.messages.reserve(history.len() + 1);
        request.messages.push(Message::system(system_prompt));
        request.messages.extend(history.to_messages());
        drop(history);
        request.reasoning_effort = lock(&self.shared.reasoning_effort).clone();
        request.provider_options = self.profile.provider_options();
    }

    /// Records a model call in the transcript: the request's one leading message is the
    /// system prompt, the rest is the whole history.
    fn record_request(&self, request: &Request) {
        let Some(transcript) = &self.transcript else {
            return;
        };
        let turns = lock(&self.shared.history).len();
        if let Some(failure) = transcript.request(request, 1, turns) {
            self.transcript_warning(failure);
        }
    }

    /// One model call, streamed: text and reasoning deltas go out live.
    fn stream_round(&self, request: &Request, cancel: &CancelToken) -> RoundEnd {
        let stream = match self.client.stream_with_cancel(request, cancel) {
            Ok(stream) => stream,
            Err(_) if cancel.is_cancelled() => return RoundEnd::Cancelled,
            Err(error) => return RoundEnd::Failed(error),
        };
        self.events.emit(EventKind::AssistantTextStart {});
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut failure = None;
        for event in stream {
            match event {
                Ok(StreamEvent::TextDelta { delta, .. }) => {
                    text.push_str(&delta);
                    self.events.emit(EventKind::AssistantTextDelta { delta });
                }
                Ok(StreamEvent::ReasoningDelta { delta }) => {
                    reasoning.push_str(&delta);
                    self.events
                        .emit(EventKind::AssistantReasoningDelta { delta });
                }
                Ok(StreamEvent::Finish { response, .. }) => {
                    self.events.emit(EventKind::AssistantTextEnd {
                        text: response.text(),
                        reasoning: response.reasoning(),
                        refusal: response.refusal.clone(),
                        finish_reason: response.finish_reason.clone(),
                        usage: response.usage,
                        tool_calls: response.tool_calls().len(),
                        cost_usd: self.call_cost(&response),
                    });
                    return RoundEnd::Response(response);
                }
                Ok(_) => {}
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        let cancelled = cancel.is_cancelled();
        let raw = if cancelled {
            "cancelled"
        } else {
            "stream_error"
        };
        self.events.emit(EventKind::AssistantTextEnd {
            text,
            reasoning: (!reasoning.is_empty()).then_some(reasoning),
            refusal: None,
            finish_reason: FinishReason::new(FinishKind::Other, Some(raw.to_string())),
            usage: Default::default(),
            tool_calls: 0,
            cost_usd: None,
        });
        if cancelled {
            return RoundEnd::Cancelled;
        }
        RoundEnd::Failed(failure.unwrap_or_else(|| {
            Error::new(ErrorKind::Stream, "the stream ended without a finish event")
                .with_provider(self.profile.id.clone())
        }))
    }

    /// Emits the events of a provider error; returns whether the session must close.
    fn report_error(&self, error: &Error) -> bool {
        let fatal = is_fatal(error.kind());
        if error.kind() == ErrorKind::ContextLength {
            self.events.emit(EventKind::Warning {
                message: format!(
                    "the request exceeded the model's context window; shorten the history \
                     or start a new session ({error})"
                ),
                code: "context_length".to_string(),
            });
        }
        self.events.emit(EventKind::Error {
            message: error.to_string(),
            error_kind: error.kind().as_str().to_string(),
            fatal,
        });
        fatal
    }

    /// Appendix B graceful shutdown: the stream and processes are already stopped (the
    /// token's callbacks did that); release the environment, end the event stream.
    fn shutdown(&mut self, reason: CloseReason) {
        self.shared.closed.store(true, Ordering::SeqCst);
        // Cancel whatever might still hold a registration on the session token.
        self.abort.cancel();
        // Step 6: close every subagent (each one's SESSION_END precedes ours).
        self.subagents.close_all();
        if let Some(mcp) = &self.mcp {
            lock(mcp).shutdown();
        }
        if let Err(err) = self.env.cleanup() {
            self.events.emit(EventKind::Warning {
                message: format!("the execution environment failed to clean up: {err}"),
                code: "cleanup".to_string(),
            });
        }
        self.hooks().observe(HookEvent::SessionEnd);
        *lock(&self.shared.state) = SessionState::Closed;
        self.events.emit(EventKind::SessionEnd {
            final_state: SessionState::Closed,
            reason,
            usage: self.totals.usage,
            cost_usd: self.totals.cost(),
        });
        // Inputs still queued are dropped with the inbox: their `run()` callers see the
        // session closed.
    }
}

/// Errors after which the session cannot go on (spec §2.8, Appendix B).
fn is_fatal(kind: ErrorKind) -> bool {
    match kind {
        ErrorKind::Authentication
        | ErrorKind::AccessDenied
        | ErrorKind::NotFound
        | ErrorKind::InvalidRequest
        | ErrorKind::Quota
        | ErrorKind::Configuration
        | ErrorKind::SessionClosed => true,
        ErrorKind::ContextLength
        | ErrorKind::RateLimited
        | ErrorKind::Server
        | ErrorKind::ContentFilter
        | ErrorKind::Network
        | ErrorKind::Timeout
        | ErrorKind::Stream
        | ErrorKind::Aborted
        | ErrorKind::Io => false,
    }
}

fn assistant_turn(response: Response, tool_calls: Vec<crate::llm::ToolCall>) -> Turn {
    let content = response.text();
    let reasoning = response.reasoning();
    Turn::Assistant(AssistantTurn {
        content,
        tool_calls,
        reasoning,
        usage: response.usage,
        response_id: (!response.id.is_empty()).then_some(response.id),
        finish_reason: response.finish_reason,
        parts: response.message.content,
        timestamp: SystemTime::now(),
    })
}
