//! One round of tool calls: start event, lookup and validation, `pre_tool_use` hooks (the
//! approval policy among them), execution, `post_tool_use` hooks, truncation, end event —
//! sequentially or on named scoped threads.
//!
//! Every call of a round gets exactly one [`ToolResult`], in call order, whatever happens:
//! unknown tools, invalid arguments, denials, panics, interrupts and aborts all become error
//! results the model sees (spec Appendix B). Each call emits `TOOL_CALL_START` before its
//! `TOOL_CALL_END`, which carries the full output; the model gets the truncated text. Every
//! thread this module starts is joined before the round returns, but for the helper of a
//! call the round gave up on after a cancel (see `execute_on_helper`): that one ends when
//! its tool returns, and nothing it does afterwards reaches the session.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::select;

use super::approval::{ApprovalResponder, Decision};
use super::config::SessionConfig;
use super::delivery::EventSink;
use super::events::{EventKind, SessionState};
use super::hook_runner::{HookRunner, PostToolUse, PreToolUse};
use crate::cancel::CancelToken;
use crate::exec::{ExecutionEnvironment, OutputStream};
use crate::llm::{ToolCall, ToolResult};
use crate::profiles::ProviderProfile;
use crate::sync::lock;
use crate::tools::background::jobs::BackgroundJobs;
use crate::tools::prepared::{PreparedCall, ToolOutcome};
use crate::tools::truncate::truncate_tool_output;
use crate::tools::{ToolContext, plan};

/// What the round needs from the session, borrowed for its duration.
pub(crate) struct ToolRound<'a> {
    pub(crate) profile: &'a ProviderProfile,
    pub(crate) env: &'a Arc<dyn ExecutionEnvironment>,
    pub(crate) config: &'a SessionConfig,
    pub(crate) events: &'a EventSink,
    pub(crate) state: &'a Mutex<SessionState>,
    pub(crate) awaiting: &'a AtomicUsize,
    /// The input's token: cancelled by `interrupt()` and by `abort()`.
    pub(crate) cancel: &'a CancelToken,
    /// The session's token: cancelled by `abort()` only.
    pub(crate) abort: &'a CancelToken,
    /// For thread names.
    pub(crate) short_id: &'a str,
    /// The session's background processes.
    pub(crate) background: &'a Arc<BackgroundJobs>,
}

impl ToolRound<'_> {
    /// Runs `calls` and returns one result per call, in call order.
    ///
    /// In parallel, every `TOOL_CALL_START` is emitted first, in the model's order, then at
    /// most [`SessionConfig::max_parallel_tool_calls`] named scoped threads take the calls
    /// in that order; the rest wait their turn.
    pub(crate) fn run(&self, calls: &[ToolCall]) -> Vec<ToolResult> {
        if !(self.profile.supports_parallel_tool_calls && calls.len() > 1) {
            return calls.iter().map(|call| self.run_guarded(call)).collect();
        }
        let started: Vec<Instant> = calls.iter().map(|call| self.start(call)).collect();
        let results: Vec<Mutex<Option<ToolResult>>> =
            calls.iter().map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        let take_calls = || {
            loop {
                let index = next.fetch_add(1, Ordering::SeqCst);
                let Some(call) = calls.get(index) else { break };
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.run_started(call, started[index])
                }))
                .unwrap_or_else(|_| self.crashed(call));
                *lock(&results[index]) = Some(result);
            }
        };
        let workers = self.config.max_parallel_tool_calls.clamp(1, calls.len());
        thread::scope(|scope| {
            let spawned = (0..workers)
                .filter(|worker| {
                    thread::Builder::new()
                        .name(format!("agentloop-tool-{}-{worker}", self.short_id))
                        .spawn_scoped(scope, take_calls)
                        .is_ok()
                })
                .count();
            if spawned == 0 {
                // The system refused every thread: run the calls here instead.
                take_calls();
            }
        });
        results
            .into_iter()
            .zip(calls)
            .map(|(slot, call)| {
                let slot = slot.into_inner().unwrap_or_else(|e| e.into_inner());
                slot.unwrap_or_else(|| self.crashed(call))
            })
            .collect()
    }

    /// [`run`](Self::run) for the calls `answer` leaves alone and at most `allowed` of
    /// them (`None`: all): a call `answer` takes (`Some((text, is_error))`) and a call
    /// beyond `allowed` are answered without running, with their start and end events.
    /// Returns one result per call, in call order, and how many calls ran.
    pub(crate) fn run_within(
        &self,
        calls: &[ToolCall],
        allowed: Option<u64>,
        answer: &mut dyn FnMut(&ToolCall) -> Option<(String, bool)>,
    ) -> (Vec<ToolResult>, u64) {
        let mut answered: Vec<Option<ToolResult>> = Vec::with_capacity(calls.len());
        let mut to_run = Vec::new();
        for call in calls {
            let result = match answer(call) {
                Some((text, is_error)) => Some(self.answer(call, text, is_error)),
                None if allowed.is_some_and(|n| to_run.len() as u64 >= n) => Some(
                    self.answer(
                        call,
                        "Tool call not run: the tool-call budget is used up. Do not call more \
                     tools; give your final answer with what you have."
                            .to_string(),
                        true,
                    ),
                ),
                None => {
                    to_run.push(call.clone());
                    None
                }
            };
            answered.push(result);
        }
        let ran = to_run.len() as u64;
        let mut results = self.run(&to_run).into_iter();
        let all = answered
            .into_iter()
            .zip(calls)
            .map(|(result, call)| {
                result
                    .or_else(|| results.next())
                    .unwrap_or_else(|| self.crashed(call))
            })
            .collect();
        (all, ran)
    }

    /// A call answered without running it: `TOOL_CALL_START`, then `TOOL_CALL_END` with
    /// `text`.
    fn answer(&self, call: &ToolCall, text: String, is_error: bool) -> ToolResult {
        let started = self.start(call);
        let outcome = ToolOutcome {
            text,
            is_error,
            image: None,
        };
        self.finish(call, outcome, started)
    }

    /// [`run_one`](Self::run_one), with a panic outside the executor (in the host's
    /// approval hook, say) turned into an error result instead of unwinding the worker.
    fn run_guarded(&self, call: &ToolCall) -> ToolResult {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_one(call)))
            .unwrap_or_else(|_| self.crashed(call))
    }

    fn run_one(&self, call: &ToolCall) -> ToolResult {
        let started = self.start(call);
        self.run_started(call, started)
    }

    /// Emits `TOOL_CALL_START`; returns when, for the call's duration.
    fn start(&self, call: &ToolCall) -> Instant {
        self.events.emit(EventKind::ToolCallStart {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        Instant::now()
    }

    /// Everything after `TOOL_CALL_START`: lookup, approval, execution, `TOOL_CALL_END`.
    fn run_started(&self, call: &ToolCall, started: Instant) -> ToolResult {
        if self.cancel.is_cancelled() {
            return self.finish(call, self.cancelled_outcome(), started);
        }
        let prepared = match self.profile.tool_registry.prepare(call) {
            Ok(prepared) => prepared,
            Err(message) => return self.finish(call, error_outcome(message), started),
        };
        let hooks = self.hooks();
        // The hooks (and the approval policy, the last of them) decide; replaced arguments
        // are validated against the schema again.
        let prepared = match hooks.pre_tool_use(call) {
            PreToolUse::Run(None) => prepared,
            PreToolUse::Run(Some(arguments)) => {
                let replaced = ToolCall {
                    arguments,
                    ..call.clone()
                };
                match self.profile.tool_registry.prepare(&replaced) {
                    Ok(prepared) => prepared,
                    Err(message) => {
                        let message = format!(
                            "The arguments a pre_tool_use hook substituted are not valid: {message}"
                        );
                        return self.finish(call, error_outcome(message), started);
                    }
                }
            }
            PreToolUse::Deny(reason) => {
                return self.finish(call, denied(DeniedBy::Policy, &reason), started);
            }
            PreToolUse::Ask => match self.ask_host(call) {
                Some(outcome) => return self.finish(call, outcome, started),
                None => prepared,
            },
        };
        // A single-file call on local files runs here too (no helper thread), with the
        // round's token as this thread's current one: the local environment's reads look
        // at it between pieces, so that a huge file stops an interrupt no longer than the
        // helper's grace would.
        let file_io = !prepared.returns_on_cancel() && self.file_io_is_prompt(&prepared);
        let outcome = if prepared.returns_on_cancel() || file_io {
            let events = self.events;
            let run = || {
                execute(prepared, &self.call_setup(call), &|stream, delta| {
                    emit_output(events, call, stream, delta)
                })
            };
            if !file_io {
                run()
            } else {
                let outcome = crate::cancel::with_current(self.cancel, run);
                if outcome.is_error && self.cancel.is_cancelled() {
                    self.cancelled_outcome()
                } else {
                    outcome
                }
            }
        } else {
            self.execute_on_helper(call, prepared)
        };
        if !outcome.is_error {
            if let Some((entries, explanation)) = plan::plan_of(&call.name, &call.arguments) {
                self.events.emit(EventKind::PlanUpdate {
                    call_id: call.id.clone(),
                    entries,
                    explanation,
                });
            }
        }
        let post = hooks.post_tool_use(call, &outcome.text, outcome.is_error);
        self.finish_with(call, outcome, started, post)
    }

    /// Whether `prepared` does only bounded file operations on local files: then it runs
    /// on this thread, without a helper (see `RegisteredTool::bounded_file_io`). Never for
    /// a session whose file tools may leave the working directory: the mount table is
    /// judged at and below it.
    fn file_io_is_prompt(&self, prepared: &PreparedCall) -> bool {
        prepared.bounded_file_io()
            && !self.config.allow_outside_working_dir
            && self.env.files_are_local()
    }

    fn hooks(&self) -> HookRunner<'_> {
        HookRunner::new(&self.config.hooks, self.events, &**self.env)
    }

    /// What a call's [`ToolContext`] is made of, owned (a helper thread takes it along).
    fn call_setup(&self, call: &ToolCall) -> CallSetup {
        let (default_timeout, max_timeout) = self
            .config
            .command_timeouts(self.profile.default_command_timeout);
        CallSetup {
            env: Arc::clone(self.env),
            call_id: call.id.clone(),
            cancel: self.cancel.clone(),
            default_timeout,
            max_timeout,
            allow_outside_working_dir: self.config.allow_outside_working_dir,
            background: Arc::clone(self.background),
        }
    }

    /// Runs a tool that may not return on cancel on a helper thread, and waits for it, an
    /// interrupt or an abort. After a cancel the tool gets [`ABANDON_GRACE`] to finish;
    /// then the round gives up on it: the call ends as cancelled, the helper's later
    /// output is dropped, and the helper ends whenever the tool does (holding only its
    /// own clones of the environment and the event sink).
    fn execute_on_helper(&self, call: &ToolCall, prepared: PreparedCall) -> ToolOutcome {
        // Open while the round still listens; output is emitted under the lock, so none
        // follows the call's `TOOL_CALL_END`.
        let listening = Arc::new(Mutex::new(true));
        let (done_tx, done) = crossbeam_channel::bounded::<ToolOutcome>(1);
        let job = {
            let setup = self.call_setup(call);
            let (events, call, listening) =
                (self.events.clone(), call.clone(), Arc::clone(&listening));
            move || {
                let outcome = execute(prepared, &setup, &|stream, delta| {
                    if *lock(&listening) {
                        emit_output(&events, &call, stream, delta);
                    }
                });
                let _ = done_tx.send(outcome);
            }
        };
        let helper = match thread::Builder::new()
            .name(format!("agentloop-call-{}", self.short_id))
            .spawn(job)
        {
            Ok(helper) => helper,
            Err(e) => {
                return error_outcome(format!(
                    "Tool error ({}): the tool could not be started (no thread: {e}).",
                    call.name
                ));
            }
        };
        let (cancelled_tx, cancelled) = crossbeam_channel::bounded::<()>(1);
        let _guard = self.cancel.on_cancel(move || {
            let _ = cancelled_tx.try_send(());
        });
        let finished = select! {
            recv(done) -> outcome => outcome.map_err(|_| false),
            recv(cancelled) -> _ => done.recv_timeout(ABANDON_GRACE).map_err(|e| e.is_timeout()),
        };
        match finished {
            Ok(outcome) => {
                // The helper has sent its last word and is ending: joined, like every
                // thread of a round but one given up on.
                let _ = helper.join();
                outcome
            }
            // Given up on: the helper is detached, and what it emits from now on dropped.
            Err(true) => {
                *lock(&listening) = false;
                self.cancelled_outcome()
            }
            // The channel closed without an outcome: the helper panicked and is gone.
            Err(false) => {
                let _ = helper.join();
                crashed_outcome(call)
            }
        }
    }

    /// Emits `APPROVAL_REQUESTED` and waits for the host's answer, an interrupt or an abort.
    fn ask_host(&self, call: &ToolCall) -> Option<ToolOutcome> {
        let (responder, answers) = ApprovalResponder::pair();
        let (cancelled_tx, cancelled) = crossbeam_channel::bounded::<()>(1);
        let _guard = self.cancel.on_cancel(move || {
            let _ = cancelled_tx.try_send(());
        });
        self.set_awaiting(1);
        self.events.emit(EventKind::ApprovalRequested {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            arguments: call.arguments.clone(),
            responder,
        });
        let verdict = select! {
            recv(answers) -> answer => match answer {
                Ok(Decision::Approve) => None,
                Ok(Decision::Deny(reason)) => Some(denied(DeniedBy::Answer, &reason)),
                Err(_) => Some(denied(
                    DeniedBy::Answer,
                    "nobody answered the approval request",
                )),
            },
            recv(cancelled) -> _ => Some(self.cancelled_outcome()),
        };
        self.set_awaiting(-1);
        verdict
    }

    fn set_awaiting(&self, delta: isize) {
        let mut state = lock(self.state);
        let waiting = if delta > 0 {
            self.awaiting.fetch_add(1, Ordering::SeqCst) + 1
        } else {
            self.awaiting.fetch_sub(1, Ordering::SeqCst) - 1
        };
        if *state != SessionState::Closed {
            *state = if waiting > 0 {
                SessionState::AwaitingInput
            } else {
                SessionState::Processing
            };
        }
    }

    /// The result of a call that was not (fully) run because of an interrupt or abort.
    fn cancelled_outcome(&self) -> ToolOutcome {
        error_outcome(cancelled_text(self.abort.is_cancelled()).to_string())
    }

    /// The result of a call whose thread panicked outside the executor.
    fn crashed(&self, call: &ToolCall) -> ToolResult {
        self.finish(call, crashed_outcome(call), Instant::now())
    }

    /// [`finish_with`](Self::finish_with) for a call that did not run (no post hook).
    fn finish(&self, call: &ToolCall, outcome: ToolOutcome, started: Instant) -> ToolResult {
        self.finish_with(call, outcome, started, PostToolUse::default())
    }

    /// Truncates for the model (then applies what the `post_tool_use` hooks decided), emits
    /// `TOOL_CALL_END` with the full text, returns the result.
    fn finish_with(
        &self,
        call: &ToolCall,
        outcome: ToolOutcome,
        started: Instant,
        post: PostToolUse,
    ) -> ToolResult {
        let truncated = truncate_tool_output(
            &outcome.text,
            &call.name,
            &self.config.tool_output_limits,
            &self.config.tool_line_limits,
        );
        let model_text = post.apply(truncated.text);
        let mut result = ToolResult::for_call(call, model_text, outcome.is_error);
        result.image = outcome.image;
        let (output, error) = if outcome.is_error {
            (None, Some(outcome.text))
        } else {
            (Some(outcome.text), None)
        };
        self.events.emit(EventKind::ToolCallEnd {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            output,
            error,
            is_error: result.is_error,
            duration_ms: started.elapsed().as_millis() as u64,
            truncated: truncated.removed_chars > 0 || truncated.removed_lines > 0,
            removed_chars: truncated.removed_chars,
            removed_lines: truncated.removed_lines,
        });
        result
    }
}

/// How long a tool that does not return on cancel gets to finish after an interrupt or
/// abort before the round gives up on it (a file tool finishes in microseconds; one still
/// running after this is taken to be stuck).
const ABANDON_GRACE: Duration = Duration::from_millis(100);

/// The owned parts of a call's [`ToolContext`].
struct CallSetup {
    env: Arc<dyn ExecutionEnvironment>,
    call_id: String,
    cancel: CancelToken,
    default_timeout: Duration,
    max_timeout: Duration,
    allow_outside_working_dir: bool,
    background: Arc<BackgroundJobs>,
}

/// Runs `prepared`, turning its output chunks into text deltas for `emit` (a character
/// split across chunks is held back until complete, and flushed at the end).
fn execute(
    prepared: PreparedCall,
    setup: &CallSetup,
    emit: &(dyn Fn(OutputStream, String) + Sync),
) -> ToolOutcome {
    let decoder = OutputDecoder::default();
    let on_output = |stream: OutputStream, bytes: &[u8]| {
        let delta = decoder.decode(stream, bytes);
        if !delta.is_empty() {
            emit(stream, delta);
        }
    };
    let ctx = ToolContext {
        env: &*setup.env,
        call_id: &setup.call_id,
        cancel: &setup.cancel,
        on_output: &on_output,
        default_timeout: setup.default_timeout,
        max_timeout: setup.max_timeout,
        allow_outside_working_dir: setup.allow_outside_working_dir,
        background: Some(&setup.background),
    };
    let outcome = prepared.run(&ctx);
    for (stream, rest) in decoder.flush() {
        emit(stream, rest);
    }
    outcome
}

fn emit_output(events: &EventSink, call: &ToolCall, stream: OutputStream, delta: String) {
    let stream = match stream {
        OutputStream::Stdout => "stdout",
        OutputStream::Stderr => "stderr",
    };
    events.emit(EventKind::ToolCallOutputDelta {
        call_id: call.id.clone(),
        stream: stream.to_string(),
        delta,
    });
}

/// The text the model gets for a call that an interrupt (or abort) kept from completing.
pub(crate) fn cancelled_text(aborted: bool) -> &'static str {
    if aborted {
        "Tool call not completed: the session was aborted before it finished."
    } else {
        "Tool call not completed: the user interrupted the agent before it finished. \
         Its effects, if any, are unknown; check before repeating it."
    }
}

/// What the model reads for a call whose tool (or its thread) panicked.
fn crashed_outcome(call: &ToolCall) -> ToolOutcome {
    error_outcome(format!(
        "Tool error ({}): the tool crashed. Try a different approach.",
        call.name
    ))
}

fn error_outcome(text: String) -> ToolOutcome {
    ToolOutcome {
        text,
        is_error: true,
        image: None,
    }
}

/// Who refused a call: the host's approval hook (its policy), or the answer to an
/// approval request (the user, or whoever the host asked).
#[derive(Clone, Copy)]
enum DeniedBy {
    Policy,
    Answer,
}

fn denied(by: DeniedBy, reason: &str) -> ToolOutcome {
    let who = match by {
        DeniedBy::Policy => "Tool call denied by the host's policy",
        DeniedBy::Answer => "Tool call denied when approval was requested",
    };
    error_outcome(format!(
        "{who}: {reason}. Do not retry the same call; continue without it or ask the user \
         how to proceed."
    ))
}

/// Turns output chunks into UTF-8 text, holding back a character split across chunks.
#[derive(Default)]
struct OutputDecoder {
    pending: Mutex<[Vec<u8>; 2]>,
}

impl OutputDecoder {
    fn decode(&self, stream: OutputStream, bytes: &[u8]) -> String {
        let mut pending = lock(&self.pending);
        let carry = &mut pending[stream_index(stream)];
        carry.extend_from_slice(bytes);
        let complete = carry.len() - incomplete_tail(carry);
        let text = String::from_utf8_lossy(&carry[..complete]).into_owned();
        carry.drain(..complete);
        text
    }

    /// Whatever is still held back (an incomplete character at the very end).
    fn flush(&self) -> Vec<(OutputStream, String)> {
        let mut pending = lock(&self.pending);
        [OutputStream::Stdout, OutputStream::Stderr]
            .into_iter()
            .filter_map(|stream| {
                let carry = std::mem::take(&mut pending[stream_index(stream)]);
                (!carry.is_empty()).then(|| (stream, String::from_utf8_lossy(&carry).into_owned()))
            })
            .collect()
    }
}

fn stream_index(stream: OutputStream) -> usize {
    match stream {
        OutputStream::Stdout => 0,
        OutputStream::Stderr => 1,
    }
}

/// Length of an incomplete UTF-8 sequence at the end of `bytes` (0 if none).
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: keep looking for the lead byte
        }
        let needed = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if back < needed { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_are_held_back_until_complete() {
        let decoder = OutputDecoder::default();
        let text = "héllo → 日本";
        let bytes = text.as_bytes();
        let mut out = String::new();
        for chunk in bytes.chunks(1) {
            out.push_str(&decoder.decode(OutputStream::Stdout, chunk));
        }
        assert_eq!(out, text);
        assert!(decoder.flush().is_empty());
    }

    #[test]
    fn a_truncated_character_at_the_end_is_flushed_as_a_replacement() {
        let decoder = OutputDecoder::default();
        let bytes = "aé".as_bytes();
        assert_eq!(decoder.decode(OutputStream::Stderr, &bytes[..2]), "a");
        let rest = decoder.flush();
        assert_eq!(rest, vec![(OutputStream::Stderr, "\u{FFFD}".to_string())]);
    }

    #[test]
    fn invalid_bytes_do_not_stall_the_stream() {
        let decoder = OutputDecoder::default();
        assert_eq!(
            decoder.decode(OutputStream::Stdout, b"a\xFFb"),
            "a\u{FFFD}b"
        );
    }

    #[test]
    fn incomplete_tail_finds_only_unfinished_sequences() {
        assert_eq!(incomplete_tail(b"abc"), 0);
        assert_eq!(incomplete_tail("é".as_bytes()), 0);
        assert_eq!(incomplete_tail(&"é".as_bytes()[..1]), 1);
        assert_eq!(incomplete_tail(&"日".as_bytes()[..2]), 2);
        assert_eq!(incomplete_tail(&"😀".as_bytes()[..3]), 3);
    }
}
