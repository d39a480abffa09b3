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

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_channel::{Receiver, Sender};

use super::Outcome;
use super::checkpoint::lifecycle::{CheckpointParts, Checkpoints};
use super::compact::{Compaction, CompactionState};
use super::compaction::CompactionReason;
use super::config::SessionConfig;
use super::delivery::EventSink;
use super::events::{CloseReason, EventKind, SessionState, StopReason};
use super::fallback::{self, Chain};
use super::history::Turn;
use super::hook_runner::{HookRunner, Submit};
use super::hooks::{HookEvent, PromptSource};
use super::inbox::InputEnd;
pub(crate) use super::inbox::{Input, Shared};
use super::ledger::{self, Meter};
use super::loop_detection::LoopDetector;
use super::mode::ModeState;
use super::model_call::{ModelCall, RoundEnd, assistant_turn, report_error};
use super::structured::{AfterText, Structured};
use super::tool_round::{ToolRound, cancelled_text};
use super::transcript::TranscriptWriter;
use super::usage::Totals;
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind};
use crate::exec::ExecutionEnvironment;
use crate::llm::{
    Client, Message, Request, Response, ToolCall, ToolChoice, ToolDefinition, ToolResult,
};
use crate::profiles::ProviderProfile;
use crate::session::subagents::Subagents;
use crate::sync::lock;
use crate::tools::background::jobs::BackgroundJobs;

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
    /// The session's MCP servers (for a subagent, its parent's), registered into the
    /// tool registry before each input and again when their tools change.
    pub(crate) mcp: Option<super::mcp::SharedMcp>,
    /// Whether this session started the servers (and ends them).
    pub(crate) mcp_owner: bool,
    /// What of the servers' tools this session's registry holds.
    pub(crate) mcp_registered: crate::mcp::Registered,
    /// Budgets: what the session and its subagents spent (see `budget.rs`).
    pub(crate) budget: Meter,
    /// The models left to fall back to.
    pub(crate) fallback: Chain,
    /// The structured final answer the current input must give, if any.
    pub(crate) structured: Option<Box<Structured>>,
    /// The requests' prompt-cache key (see `Start::cache_key`).
    pub(crate) cache_key: String,
    /// The mode in force and the environment the model's tool calls use.
    pub(crate) mode: ModeState,
    /// The session's background processes.
    pub(crate) background: Arc<BackgroundJobs>,
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
                            tool_calls: 0,
                            duration_ms: 0,
                            output: None,
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
                Input::Submit {
                    text,
                    reply,
                    structured,
                } => {
                    self.structured = structured;
                    self.cycle(Some(text), reply)
                }
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
            output: None,
            budget: None,
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
            outcome.output = end.output.or(outcome.output);
            outcome.budget = end.budget;
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
        self.hooks().subagent_stopped(&outcome.text);
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
        let warnings =
            lock(mcp).prepare_into(&mut self.profile.tool_registry, &mut self.mcp_registered);
        for message in warnings {
            self.events.emit(EventKind::Warning {
                message,
                code: "mcp".to_string(),
            });
        }
    }

    /// Before a model call: when an MCP server's tools changed, registers the new list and
    /// puts it in `request`, with the system prompt made again (it may name the tools).
    fn mcp_tools_changed(&mut self, request: &mut Request, system_prompt: &mut String) {
        let Some(mcp) = &self.mcp else { return };
        if !lock(mcp).tools_changed(&self.mcp_registered) {
            return;
        }
        self.prepare_mcp();
        (*system_prompt, *request) = self.input_request();
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
        self.budget.start_input();
        let mut end = InputEnd::default();
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
        self.drain_steering_and_exits();

        // Same bytes on every round (the cacheable prefix) unless MCP tools change.
        self.prepare_mcp();
        self.apply_mode_and_model();
        let (mut system_prompt, mut request) = self.input_request();
        self.compaction.this_input = 0;
        self.compaction.bound_warned = false;
        // At most one compaction before each model call; one retry after an overflow.
        let mut overflow_retried = false;
        let mut stop_hook_active = false;
        end.stop = loop {
            if let Some(stop) = self.check_limits(end.rounds) {
                break stop;
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
            if let Err(error) = self.compaction(&cancel).check_window() {
                break self.fail_input(&mut end, error);
            }
            self.refresh_request(&mut request, &mut system_prompt);
            self.record_request(&request);
            let history_at_request = self.compaction.account.history_tokens();
            let response = match self.stream_round(&request, &cancel) {
                RoundEnd::Response(response) => response,
                RoundEnd::Cancelled => break self.cancelled_stop(),
                RoundEnd::Failed(error) => {
                    let mut compaction = self.compaction(&cancel);
                    let Err(error) = compaction.recover_from(error, &mut overflow_retried) else {
                        continue;
                    };
                    match self.fall_back(error) {
                        Ok(()) => (system_prompt, request) = self.input_request(),
                        Err(error) => break self.fail_input(&mut end, error),
                    }
                    continue;
                }
            };
            request.messages = Vec::new(); // no copy of the history while tools run
            overflow_retried = false;
            self.account_call(&response, &mut end, history_at_request);
            let calls: Vec<_> = response.tool_calls().into_iter().cloned().collect();
            self.push_turn(assistant_turn(*response, calls.clone()));
            if calls.is_empty() {
                match self.after_answer(&mut end, &cancel, &mut stop_hook_active) {
                    Some(stop) => break stop,
                    None => continue,
                }
            }
            end.rounds += 1;
            let results = self.run_tools(&calls, &cancel);
            self.push_turn(Turn::tool_results(results));
            if cancel.is_cancelled() {
                break self.cancelled_stop();
            }
            if let Some(stop) = self.structured.as_ref().and_then(|s| s.stop_after_round()) {
                break stop;
            }
            self.drain_steering_and_exits();
            self.detect_loop(&calls);
        };
        self.end_input(end)
    }

    /// Ends the input with `error`: reported as events, kept in `end`.
    fn fail_input(&self, end: &mut InputEnd, error: Error) -> StopReason {
        end.fatal = report_error(&self.events, &error);
        end.error = Some(error);
        StopReason::Error
    }

    /// The system prompt and request of an input, without messages (rounds refill them):
    /// the same bytes on every round, the cacheable prefix. Made again after a fallback.
    fn input_request(&mut self) -> (String, Request) {
        let mut tools = self.profile.tools();
        if let Some(structured) = &self.structured {
            tools.push(structured.tool());
        }
        let mut system_prompt = self.profile.system_prompt_with(&*self.env, &tools);
        if let Some(note) = self.mode.mode.instructions() {
            system_prompt.push_str("\n\n");
            system_prompt.push_str(note);
        }
        self.compaction.account.set_fixed(&system_prompt, &tools);
        (system_prompt, self.build_request(tools))
    }

    /// The limits before a model call (rounds, turns, budgets); pushes a budget note for
    /// the model when one is due. `Some` when the input must stop.
    fn check_limits(&mut self, rounds: usize) -> Option<StopReason> {
        let checked = ledger::check_limits(
            &self.config,
            &mut self.budget,
            &self.events,
            rounds,
            self.assistant_turns,
        );
        if let Some(note) = checked.note {
            self.push_turn(Turn::steering(note));
        }
        checked.stop
    }

    /// Counts a model call: the token account, the input's totals, the budgets.
    fn account_call(&mut self, response: &Response, end: &mut InputEnd, history_at_request: usize) {
        self.compaction
            .account
            .report(&response.usage, &self.profile.id, history_at_request);
        let cost = self.model_call().cost(response);
        end.totals.add(response.usage, cost);
        self.budget
            .charge_call(&response.usage, &response.provider, cost);
        end.text = response.text();
    }

    /// After an answer without tool calls: a steer to answer, a stop hook that continues,
    /// a structured answer still missing. `None` to go on; else why the input stops.
    fn after_answer(
        &mut self,
        end: &mut InputEnd,
        cancel: &CancelToken,
        stop_hook_active: &mut bool,
    ) -> Option<StopReason> {
        // A steer that arrived while the final answer streamed is not deferred to the next
        // input: inject it and let the model answer it now.
        if !cancel.is_cancelled() && self.drain_steering() > 0 {
            return None;
        }
        // A stop hook may continue the input; each continuation counts as a round, so
        // `max_tool_rounds_per_input` bounds it.
        if !cancel.is_cancelled() {
            if let Some(message) = self.hooks().stop(&end.text, *stop_hook_active) {
                *stop_hook_active = true;
                end.rounds += 1;
                self.push_turn(Turn::steering(message));
                return None;
            }
        }
        let Some(structured) = &mut self.structured else {
            return Some(StopReason::Completed);
        };
        match structured.after_text(&end.text) {
            AfterText::Done => Some(StopReason::Completed),
            AfterText::GiveUp => Some(StopReason::StructuredOutputFailed),
            AfterText::Remind(message) => {
                self.push_turn(Turn::steering(message));
                None
            }
        }
    }

    /// One tool round: a `final_answer` call checked, calls beyond the tool-call budget
    /// answered without running, the others run; the calls run are charged.
    fn run_tools(&mut self, calls: &[ToolCall], cancel: &CancelToken) -> Vec<ToolResult> {
        let mut structured = self.structured.take();
        let allowed = self.budget.tool_calls_left();
        let (results, ran) =
            self.tool_round(cancel)
                .run_within(calls, allowed, &mut |call: &ToolCall| {
                    let structured = structured.as_mut()?;
                    (call.name == super::structured::TOOL_NAME).then(|| structured.answer(call))
                });
        self.structured = structured;
        self.budget.charge_tool_calls(ran);
        results
    }

    /// Hands the input to the next model of the chain after `error`, with a
    /// `MODEL_FALLBACK` event and transcript record; `Err(error)` when none takes over.
    fn fall_back(&mut self, error: Error) -> Result<(), Error> {
        let Some(next) = self.fallback.next_after(&error) else {
            return Err(error);
        };
        let mut next = fallback::adopt(next, &self.profile, &*self.env);
        self.subagents.connect(&mut next.tool_registry);
        let from = std::mem::replace(&mut self.profile, next);
        self.mode.withdraw_from(&mut self.profile);
        // The next profile's registry holds none of the MCP servers' tools yet.
        self.mcp_registered = Default::default();
        self.prepare_mcp();
        self.compaction.limits = super::compact::limits_for(&self.config, &self.profile);
        let event = fallback::event(&from, &self.profile, &error);
        if let Some(transcript) = &self.transcript {
            if let Some(failure) = transcript.fallback(&event) {
                self.transcript_warning(failure);
            }
        }
        self.events.emit(event);
        Ok(())
    }

    /// Takes in what the host set since the last input: the mode (`Session::set_mode`) and
    /// the model (`Session::set_model`).
    fn apply_mode_and_model(&mut self) {
        let mode = *lock(&self.shared.mode);
        self.mode.apply(mode, &mut self.profile, &self.env);
        if let Some(model) = lock(&self.shared.model).take() {
            self.profile = std::mem::replace(&mut self.profile, ProviderProfile::new("", ""))
                .with_model(model);
        }
    }

    /// The end of every input: answer open calls, leave the processing state, emit
    /// `PROCESSING_END` with the input's totals.
    fn end_input(&mut self, mut end: InputEnd) -> InputEnd {
        self.answer_open_calls();
        self.checkpoint_parts().end_input();
        if let Some(structured) = self.structured.take() {
            (end.output, end.error) = structured.finish(end.stop, end.error);
        }
        end.budget = self.budget.stopped_by();
        let (tool_calls, took) = self.budget.end_input();
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
            tool_calls,
            duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            output: end.output.clone(),
        });
        end
    }

    fn hooks(&self) -> HookRunner<'_> {
        HookRunner::new(&self.config.hooks, &self.events, &*self.env)
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
            env: &self.mode.tool_env,
            config: &self.config,
            events: &self.events,
            state: &self.shared.state,
            awaiting: &self.shared.awaiting,
            cancel,
            abort: &self.abort,
            short_id: &self.short_id,
            background: &self.background,
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

    /// [`drain_steering`](Self::drain_steering), then a note for the model about each
    /// background process that exited since its last turn (and that it has not seen exit).
    fn drain_steering_and_exits(&mut self) {
        self.drain_steering();
        for note in crate::tools::background::exit_notes(&self.background) {
            self.push_turn(Turn::steering(note));
        }
    }

    fn detect_loop(&mut self, calls: &[crate::llm::ToolCall]) {
        if !self.config.enable_loop_detection {
            return;
        }
        if let Some(message) = self.loop_detector.after_round(calls) {
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
            cache_key: Some(self.cache_key.clone()),
            cache_ttl_secs: self.config.prompt_cache_ttl.map(|ttl| ttl.as_secs()),
            max_tokens: self.config.max_output_tokens,
            ..Request::default()
        }
    }

    /// Fills `request` for the next model call: the system prompt and the whole history,
    /// the reasoning effort and provider options as they are now, and the tools again when
    /// an MCP server's changed.
    fn refresh_request(&mut self, request: &mut Request, system_prompt: &mut String) {
        self.mcp_tools_changed(request, system_prompt);
        let history = lock(&self.shared.history);
        request.messages.clear();
        request.messages.reserve(history.len() + 1);
        request
            .messages
            .push(Message::system(system_prompt.as_str()));
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
        self.model_call().stream(request, cancel)
    }

    /// The parts a model call works with, borrowed for its duration.
    fn model_call(&self) -> ModelCall<'_> {
        ModelCall {
            client: &self.client,
            events: &self.events,
            profile: &self.profile,
            prices: &self.config.prices,
        }
    }

    /// Appendix B graceful shutdown: the stream and processes are already stopped (the
    /// token's callbacks did that); release the environment, end the event stream.
    fn shutdown(&mut self, reason: CloseReason) {
        self.shared.closed.store(true, Ordering::SeqCst);
        // Cancel whatever might still hold a registration on the session token.
        self.abort.cancel();
        // Background processes end with the session (their groups; their exits are
        // told before SESSION_END).
        self.background.end_all();
        // Step 6: close every subagent (each one's SESSION_END precedes ours).
        self.subagents.close_all();
        if let Some(mcp) = self.mcp.as_ref().filter(|_| self.mcp_owner) {
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
        let (tool_calls, lived) = self.budget.session_figures();
        self.events.emit(EventKind::SessionEnd {
            final_state: SessionState::Closed,
            reason,
            usage: self.totals.usage,
            cost_usd: self.totals.cost(),
            tool_calls,
            duration_ms: u64::try_from(lived.as_millis()).unwrap_or(u64::MAX),
        });
        // Inputs still queued are dropped with the inbox: their `run()` callers see the
        // session closed.
    }
}
