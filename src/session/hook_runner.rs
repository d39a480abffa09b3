//! The one place that calls a session's hooks: builds each [`HookInput`], runs the hooks of
//! an event in order (a panic becomes a failure), turns failures into denials or warnings,
//! emits every decision as a `HOOK_DECISION` event, and returns what the decisions amount
//! to for the loop.
//!
//! It never spawns and never decides anything of its own: see [`Hooks`] for the rules.

use serde_json::Value;

use super::compaction::CompactionReason;
use super::delivery::EventSink;
use super::events::EventKind;
use super::hooks::{Hook, HookDecision, HookEvent, HookInput, Hooks, PromptSource};
use crate::exec::ExecutionEnvironment;
use crate::llm::ToolCall;
use crate::tools::truncate::{TruncationMode, default_char_limit, truncate_output};

/// What a hook's text is cut to before it goes anywhere: the limit and mode of a tool
/// without a row of its own (30,000 characters, head and tail), with the same marker, so
/// that a hook writing hundreds of megabytes adds no more to a request than a tool can.
fn hook_text_limit() -> (usize, TruncationMode) {
    default_char_limit("")
}

/// What `pre_tool_use` decided.
pub(crate) enum PreToolUse {
    /// Run it, with these arguments when a hook replaced them.
    Run(Option<Value>),
    Deny(String),
    Ask,
}

/// What `post_tool_use` decided about the model's copy of the output.
#[derive(Default)]
pub(crate) struct PostToolUse {
    pub(crate) replaced: Option<String>,
    pub(crate) context: Vec<String>,
}

impl PostToolUse {
    /// `text` as the model should see it.
    pub(crate) fn apply(self, text: String) -> String {
        let mut text = self.replaced.unwrap_or(text);
        for context in self.context {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&context);
        }
        text
    }
}

/// What `user_prompt_submit` decided.
pub(crate) enum Submit {
    Accept(String),
    Block(String),
}

/// Calls the hooks of one session: builds the inputs, catches panics, emits the events.
pub(crate) struct HookRunner<'a> {
    pub(crate) hooks: &'a Hooks,
    pub(crate) events: &'a EventSink,
    pub(crate) cwd: String,
}

impl<'a> HookRunner<'a> {
    /// In a subagent: the parent's `subagent_stop` hooks, on the parent's stream.
    pub(crate) fn subagent_stopped(self, answer: &str) {
        if let Some((parent, agent_id)) = self.events.parent() {
            let runner = HookRunner {
                events: parent,
                ..self
            };
            runner.subagent(HookEvent::SubagentStop, agent_id, None, Some(answer));
        }
    }

    /// The runner of `hooks` for a session whose events go to `events` and whose tools run
    /// in `env` (the hooks' `cwd`).
    pub(crate) fn new(
        hooks: &'a Hooks,
        events: &'a EventSink,
        env: &dyn ExecutionEnvironment,
    ) -> HookRunner<'a> {
        HookRunner {
            hooks,
            events,
            cwd: env.working_directory().to_string_lossy().into_owned(),
        }
    }

    fn input(&self, event: HookEvent) -> HookInput {
        HookInput::new(event, self.events.session_id(), &self.cwd)
    }

    /// Calls one hook; a panic becomes `Fail`.
    fn call(&self, hook: &Hook, input: &HookInput) -> HookDecision {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(input))).unwrap_or_else(
            |payload| {
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".to_string());
                HookDecision::Fail(format!("the hook panicked: {what}"))
            },
        )
    }

    /// Calls every hook of `input.event` in order, passing each decision (after failures
    /// became denials or warnings, and decisions the event cannot take were dropped) to
    /// `apply`, which may update the input; stops at the first `false`.
    fn each(
        &self,
        mut input: HookInput,
        mut apply: impl FnMut(&mut HookInput, HookDecision) -> bool,
    ) {
        let event = input.event;
        for hook in self.hooks.for_event(event) {
            let decision = self.call(hook, &input);
            let decision = self.settle(event, input.call_id.as_deref(), decision);
            if !apply(&mut input, decision) {
                return;
            }
        }
    }

    /// Emits the events of one decision; returns what it amounts to, its text cut like a
    /// tool's output.
    fn settle(
        &self,
        event: HookEvent,
        call_id: Option<&str>,
        decision: HookDecision,
    ) -> HookDecision {
        let effective = match bounded(decision) {
            HookDecision::Fail(message) => {
                self.warn(format!("{} hook failed: {message}", event.name()));
                if event.blocking() {
                    HookDecision::Deny(format!("the {} hook failed: {message}", event.name()))
                } else {
                    HookDecision::Continue
                }
            }
            HookDecision::Warn(message) => {
                self.warn(format!("{} hook: {message}", event.name()));
                HookDecision::Continue
            }
            decision if !allowed(event, &decision) => {
                self.warn(format!(
                    "the {} hook answered {}, which that hook cannot do; ignored",
                    event.name(),
                    decision_name(&decision)
                ));
                HookDecision::Continue
            }
            decision => decision,
        };
        self.events.emit(EventKind::HookDecision {
            hook: event.name().to_string(),
            call_id: call_id.map(str::to_string),
            decision: effective.clone(),
        });
        effective
    }

    fn warn(&self, message: String) {
        self.events.emit(EventKind::Warning {
            message,
            code: "hook".to_string(),
        });
    }

    pub(crate) fn pre_tool_use(&self, call: &ToolCall) -> PreToolUse {
        if !self.hooks.handles(HookEvent::PreToolUse) {
            return PreToolUse::Run(None);
        }
        let mut verdict = PreToolUse::Run(None);
        let mut ask = false;
        self.each(
            self.input(HookEvent::PreToolUse).for_call(call),
            |input, decision| {
                match decision {
                    HookDecision::Deny(reason) => {
                        verdict = PreToolUse::Deny(reason);
                        return false;
                    }
                    HookDecision::Ask => ask = true,
                    HookDecision::ReplaceArguments(arguments) => {
                        input.arguments = Some(arguments.clone());
                        if let Some(call) = &mut input.call {
                            call.arguments = arguments.clone();
                        }
                        verdict = PreToolUse::Run(Some(arguments));
                    }
                    _ => {}
                }
                true
            },
        );
        match verdict {
            PreToolUse::Run(_) if ask => PreToolUse::Ask,
            verdict => verdict,
        }
    }

    pub(crate) fn post_tool_use(
        &self,
        call: &ToolCall,
        output: &str,
        is_error: bool,
    ) -> PostToolUse {
        let mut post = PostToolUse::default();
        if !self.hooks.handles(HookEvent::PostToolUse) {
            return post;
        }
        let mut input = self.input(HookEvent::PostToolUse).for_call(call);
        input.output = Some(output.to_string());
        input.is_error = Some(is_error);
        self.each(input, |_, decision| {
            match decision {
                HookDecision::ReplaceOutput(text) => post.replaced = Some(text),
                HookDecision::AddContext(text) => post.context.push(text),
                _ => {}
            }
            true
        });
        post
    }

    pub(crate) fn user_prompt_submit(&self, text: String, source: PromptSource) -> Submit {
        if !self.hooks.handles(HookEvent::UserPromptSubmit) {
            return Submit::Accept(text);
        }
        let mut input = self.input(HookEvent::UserPromptSubmit);
        input.prompt = Some(text.clone());
        input.source = Some(source);
        let mut prompt = text;
        let mut context = Vec::new();
        let mut blocked = None;
        self.each(input, |input, decision| {
            match decision {
                HookDecision::Deny(reason) => {
                    blocked = Some(reason);
                    return false;
                }
                HookDecision::ReplacePrompt(text) => {
                    input.prompt = Some(text.clone());
                    prompt = text;
                }
                HookDecision::AddContext(text) => context.push(text),
                _ => {}
            }
            true
        });
        if let Some(reason) = blocked {
            return Submit::Block(reason);
        }
        for text in context {
            prompt.push_str("\n\n");
            prompt.push_str(&text);
        }
        Submit::Accept(prompt)
    }

    /// `Some(message)` when a hook continues the input.
    pub(crate) fn stop(&self, answer: &str, active: bool) -> Option<String> {
        if !self.hooks.handles(HookEvent::Stop) {
            return None;
        }
        let mut input = self.input(HookEvent::Stop);
        input.answer = Some(answer.to_string());
        input.stop_hook_active = Some(active);
        let mut message = None;
        self.each(input, |_, decision| {
            if let HookDecision::ContinueWith(text) = decision {
                message = Some(text);
                return false;
            }
            true
        });
        message
    }

    /// `session_start`, `session_end`: observe only.
    pub(crate) fn observe(&self, event: HookEvent) {
        if self.hooks.handles(event) {
            self.each(self.input(event), |_, _| true);
        }
    }

    /// `subagent_start` (`task` set) and `subagent_stop` (`answer` set): observe only.
    pub(crate) fn subagent(
        &self,
        event: HookEvent,
        agent_id: &str,
        task: Option<&str>,
        answer: Option<&str>,
    ) {
        if !self.hooks.handles(event) {
            return;
        }
        let mut input = self.input(event);
        input.agent_id = Some(agent_id.to_string());
        input.prompt = task.map(str::to_string);
        input.answer = answer.map(str::to_string);
        self.each(input, |_, _| true);
    }

    /// `pre_compact`: the context hooks add to the summary request whose input is `input`.
    pub(crate) fn pre_compact(&self, reason: CompactionReason, input: &str) -> Vec<String> {
        if !self.hooks.handles(HookEvent::PreCompact) {
            return Vec::new();
        }
        let mut hook_input = self.input(HookEvent::PreCompact);
        hook_input.compaction = Some((reason, input.to_string()));
        let mut context = Vec::new();
        self.each(hook_input, |_, decision| {
            if let HookDecision::AddContext(text) = decision {
                context.push(text);
            }
            true
        });
        context
    }

    /// `post_compact`: the summary made from the request input `made_from`, as replaced by
    /// the hooks.
    pub(crate) fn post_compact(
        &self,
        summary: String,
        reason: CompactionReason,
        made_from: &str,
    ) -> String {
        if !self.hooks.handles(HookEvent::PostCompact) {
            return summary;
        }
        let mut input = self.input(HookEvent::PostCompact);
        input.compaction = Some((reason, made_from.to_string()));
        input.summary = Some(summary.clone());
        let mut summary = summary;
        self.each(input, |input, decision| {
            if let HookDecision::ReplaceSummary(text) = decision {
                input.summary = Some(text.clone());
                summary = text;
            }
            true
        });
        summary
    }
}

/// `decision` with its text cut to [`hook_text_limit`] (head and tail, the tool-output
/// marker between): additional context, a replaced output, prompt or summary, a block
/// reason, a continuation message, a warning.
fn bounded(decision: HookDecision) -> HookDecision {
    use HookDecision as D;
    let cut = |text: String| {
        let (limit, mode) = hook_text_limit();
        match truncate_output(&text, limit, mode) {
            (std::borrow::Cow::Owned(cut), _) => cut,
            (std::borrow::Cow::Borrowed(_), _) => text,
        }
    };
    match decision {
        D::Deny(text) => D::Deny(cut(text)),
        D::AddContext(text) => D::AddContext(cut(text)),
        D::ReplaceOutput(text) => D::ReplaceOutput(cut(text)),
        D::ReplacePrompt(text) => D::ReplacePrompt(cut(text)),
        D::ContinueWith(text) => D::ContinueWith(cut(text)),
        D::ReplaceSummary(text) => D::ReplaceSummary(cut(text)),
        D::Warn(text) => D::Warn(cut(text)),
        D::Fail(text) => D::Fail(cut(text)),
        other @ (D::Continue | D::Ask | D::ReplaceArguments(_)) => other,
    }
}

/// Whether `event` honours `decision` (`Fail` and `Warn` are settled before).
fn allowed(event: HookEvent, decision: &HookDecision) -> bool {
    use HookDecision as D;
    use HookEvent as E;
    match decision {
        D::Continue | D::Warn(_) | D::Fail(_) => true,
        D::Deny(_) => matches!(event, E::PreToolUse | E::UserPromptSubmit),
        D::Ask | D::ReplaceArguments(_) => event == E::PreToolUse,
        D::AddContext(_) => matches!(event, E::PostToolUse | E::UserPromptSubmit | E::PreCompact),
        D::ReplaceOutput(_) => event == E::PostToolUse,
        D::ReplacePrompt(_) => event == E::UserPromptSubmit,
        D::ContinueWith(_) => event == E::Stop,
        D::ReplaceSummary(_) => event == E::PostCompact,
    }
}

fn decision_name(decision: &HookDecision) -> &'static str {
    match decision {
        HookDecision::Continue => "continue",
        HookDecision::Deny(_) => "deny",
        HookDecision::Ask => "ask",
        HookDecision::ReplaceArguments(_) => "replace_arguments",
        HookDecision::AddContext(_) => "add_context",
        HookDecision::ReplaceOutput(_) => "replace_output",
        HookDecision::ReplacePrompt(_) => "replace_prompt",
        HookDecision::ContinueWith(_) => "continue_with",
        HookDecision::ReplaceSummary(_) => "replace_summary",
        HookDecision::Warn(_) => "warn",
        HookDecision::Fail(_) => "fail",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hook_text_is_cut_like_a_tool_output_and_short_ones_are_kept() {
        let long = || "x".repeat(1_000_000);
        let texts = |decision: &HookDecision| match decision {
            HookDecision::Deny(t)
            | HookDecision::AddContext(t)
            | HookDecision::ReplaceOutput(t)
            | HookDecision::ReplacePrompt(t)
            | HookDecision::ContinueWith(t)
            | HookDecision::ReplaceSummary(t)
            | HookDecision::Warn(t)
            | HookDecision::Fail(t) => t.clone(),
            _ => String::new(),
        };
        let all = [
            HookDecision::Deny(long()),
            HookDecision::AddContext(long()),
            HookDecision::ReplaceOutput(long()),
            HookDecision::ReplacePrompt(long()),
            HookDecision::ContinueWith(long()),
            HookDecision::ReplaceSummary(long()),
            HookDecision::Warn(long()),
            HookDecision::Fail(long()),
        ];
        for decision in all {
            let text = texts(&bounded(decision));
            assert!(text.len() < 31_000, "{} bytes", text.len());
            assert!(text.contains("[WARNING: Tool output was truncated. 970000 characters"));
        }
        let short = HookDecision::AddContext("lint ok".to_string());
        assert_eq!(bounded(short.clone()), short);
    }
}
