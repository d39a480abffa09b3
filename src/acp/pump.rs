//! The thread of one ACP session: reads its events in order, sends the updates
//! [`mapping`](super::mapping) makes of them, asks the client for permission when a call
//! waits for the user, and answers the prompt after the last update of its turn. It never
//! blocks the reader thread and never waits for the client longer than the prompt lasts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::select;
use serde_json::{Value, json};

use super::mapping;
use super::rpc::{RpcError, code};
use super::state::Shared;
use crate::llm::{FinishKind, Usage};
use crate::session::{ApprovalResponder, EventKind, Events, Session, SessionEvent, StopReason};
use crate::sync::lock;

/// How often the running output of a command is sent at most.
const OUTPUT_EVERY: Duration = Duration::from_millis(200);

/// What the pump keeps between events.
pub(crate) struct Pump {
    shared: Arc<Shared>,
    session: Arc<Session>,
    /// Running output per call, and when it was last sent.
    outputs: HashMap<String, (String, Option<Instant>)>,
    /// The last answer of the prompt: how it finished, whether the model refused.
    finish: Option<FinishKind>,
    refused: bool,
    /// The error that ended the input, if one did.
    error: Option<String>,
    /// The cost of the session's calls so far, when priced.
    cost: Option<f64>,
}

impl Pump {
    pub(crate) fn new(shared: Arc<Shared>, session: Arc<Session>) -> Pump {
        Pump {
            shared,
            session,
            outputs: HashMap::new(),
            finish: None,
            refused: false,
            error: None,
            cost: None,
        }
    }

    /// Maps every event until the session ends.
    pub(crate) fn run(mut self, events: Events) {
        for event in events {
            if !self.event(event) {
                break;
            }
        }
        // The session ended: a prompt still open gets its answer.
        let open = lock(&self.shared.prompt).id.take();
        if let Some(id) = open {
            self.shared.connection.respond(
                id,
                Err(RpcError::new(code::INTERNAL_ERROR, "the session ended")),
            );
        }
    }

    /// One event; `false` after the last.
    fn event(&mut self, event: SessionEvent) -> bool {
        let shared = self.shared.clone();
        match event.kind {
            // A cancel that came before the input started is applied now.
            EventKind::UserInput { .. } if lock(&shared.prompt).cancelled => {
                self.session.interrupt();
            }
            EventKind::AssistantTextDelta { delta } => {
                shared.update(mapping::chunk("agent_message_chunk", &delta));
            }
            EventKind::AssistantReasoningDelta { delta } => {
                shared.update(mapping::chunk("agent_thought_chunk", &delta));
            }
            EventKind::AssistantTextEnd {
                refusal,
                finish_reason,
                usage,
                cost_usd,
                ..
            } => self.answer_ended(refusal, finish_reason.reason, &usage, cost_usd),
            EventKind::ToolCallStart {
                call_id,
                tool_name,
                arguments,
            } if !mapping::is_plan_tool(&tool_name) => {
                let status = if shared.policy.asks(&tool_name) {
                    "pending"
                } else {
                    "in_progress"
                };
                let call =
                    mapping::tool_call(&call_id, &tool_name, &arguments, status, &shared.cwd);
                shared.update(call);
            }
            EventKind::ApprovalRequested {
                call_id,
                tool_name,
                arguments,
                responder,
            } => self.ask(&call_id, &tool_name, &arguments, &responder),
            EventKind::ToolCallOutputDelta { call_id, delta, .. } => self.output(call_id, &delta),
            EventKind::PlanUpdate { entries, .. } => shared.update(mapping::plan(&entries)),
            EventKind::ToolCallEnd {
                call_id,
                tool_name,
                output,
                error,
                is_error,
                ..
            } => self.call_ended(&call_id, &tool_name, output.or(error), is_error),
            EventKind::Error { message, .. } => self.error = Some(message),
            EventKind::ProcessingEnd {
                stop_reason, usage, ..
            } => self.prompt_ended(stop_reason, &usage),
            EventKind::SubagentEvent { event, .. } => {
                // A subagent's call that waits for the user asks like the session's own.
                if let EventKind::ApprovalRequested {
                    call_id,
                    tool_name,
                    arguments,
                    responder,
                } = event.kind
                {
                    self.ask(&call_id, &tool_name, &arguments, &responder);
                }
            }
            EventKind::SessionEnd { .. } => return false,
            _ => {}
        }
        true
    }

    fn answer_ended(
        &mut self,
        refusal: Option<String>,
        finish: FinishKind,
        usage: &Usage,
        cost_usd: Option<f64>,
    ) {
        if let Some(text) = refusal.filter(|t| !t.is_empty()) {
            self.shared
                .update(mapping::chunk("agent_message_chunk", &text));
            self.refused = true;
        }
        self.finish = Some(finish);
        if let Some(cost) = cost_usd {
            self.cost = Some(self.cost.unwrap_or(0.0) + cost);
        }
        if usage.total_tokens > 0 || usage.input_tokens > 0 {
            self.shared
                .update(mapping::usage_update(usage, self.shared.window, self.cost));
        }
    }

    /// Sends the running output of a call, at most every [`OUTPUT_EVERY`].
    fn output(&mut self, call_id: String, delta: &str) {
        let (text, sent) = self.outputs.entry(call_id.clone()).or_default();
        text.push_str(delta);
        if text.len() > 256 * 1024 {
            let cut = text.len() - 128 * 1024;
            let cut = (cut..text.len())
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0);
            text.drain(..cut);
        }
        if sent.is_some_and(|at| at.elapsed() < OUTPUT_EVERY) {
            return;
        }
        *sent = Some(Instant::now());
        let update = mapping::tool_call_update(
            &call_id,
            json!({"content": [mapping::output_content(text)]}),
        );
        self.shared.update(update);
    }

    fn call_ended(&mut self, call_id: &str, tool: &str, text: Option<String>, is_error: bool) {
        self.outputs.remove(call_id);
        let images = self.shared.policy.take_images(call_id);
        if mapping::is_plan_tool(tool) {
            return;
        }
        let text = text.unwrap_or_default();
        let diffs: Vec<Value> = images
            .iter()
            .filter(|image| image.before != image.after)
            .filter_map(|image| {
                let after = image.after.as_deref();
                // A file the call removed shows as emptied.
                let new = after.or(image.before.as_ref().map(|_| ""))?;
                Some(mapping::diff(&image.path, image.before.as_deref(), new))
            })
            .collect();
        let content = if !is_error && !diffs.is_empty() {
            diffs
        } else if text.is_empty() {
            Vec::new()
        } else {
            vec![mapping::text_content(&text)]
        };
        let status = if is_error { "failed" } else { "completed" };
        self.shared.update(mapping::tool_call_update(
            call_id,
            json!({"status": status, "content": content}),
        ));
    }

    /// Answers the open prompt: its stop reason and usage, or the error that ended it.
    fn prompt_ended(&mut self, stop: StopReason, usage: &Usage) {
        let (finish, refused, error) = (
            self.finish.take(),
            std::mem::take(&mut self.refused),
            self.error.take(),
        );
        let mut prompt = lock(&self.shared.prompt);
        let Some(id) = prompt.id.take() else {
            return;
        };
        let cancelled = std::mem::take(&mut prompt.cancelled);
        drop(prompt);
        let stop = if cancelled && stop == StopReason::Completed {
            // The cancel came as the turn finished: the client asked for `cancelled`.
            StopReason::Interrupted
        } else {
            stop
        };
        let result = match mapping::stop_reason(stop, finish, refused) {
            Some(reason) => {
                Ok(json!({"stopReason": reason, "usage": mapping::prompt_usage(usage)}))
            }
            None => Err(RpcError::new(
                code::INTERNAL_ERROR,
                error.unwrap_or_else(|| "the model call failed".to_string()),
            )),
        };
        self.shared.connection.respond(id, result);
    }

    /// Asks the client whether a call may run (unless an "always" answer covers it), and
    /// passes the answer on; a cancel of the prompt withdraws the question.
    fn ask(&self, call_id: &str, tool: &str, arguments: &Value, responder: &ApprovalResponder) {
        let shared = &self.shared;
        if let Some(allowed) = shared.policy.remembered(tool) {
            answer(
                responder,
                allowed,
                "the user rejected every such call for this session",
            );
            return;
        }
        if lock(&shared.prompt).cancelled {
            responder.deny("the user cancelled the prompt");
            return;
        }
        let content = proposed(shared, call_id, tool, arguments);
        let params = json!({
            "sessionId": shared.id,
            "toolCall": mapping::permission_call(call_id, tool, arguments, content, &shared.cwd),
            "options": mapping::permission_options(),
        });
        let (wake, woken) = crossbeam_channel::bounded::<()>(1);
        *lock(&shared.waiter) = Some(wake);
        let answered = shared
            .connection
            .request("session/request_permission", params);
        let outcome = select! {
            recv(answered) -> answer => answer.ok().and_then(Result::ok),
            recv(woken) -> _ => None,
        };
        lock(&shared.waiter).take();
        let option = outcome
            .as_ref()
            .and_then(|o| o.get("outcome"))
            .filter(|o| o.get("outcome").and_then(Value::as_str) == Some("selected"))
            .and_then(|o| o.get("optionId"))
            .and_then(Value::as_str);
        let allowed = match option {
            Some("allow_once") => true,
            Some("allow_always") => {
                shared.policy.remember(tool, true);
                true
            }
            Some("reject_always") => {
                shared.policy.remember(tool, false);
                false
            }
            _ => false,
        };
        answer(responder, allowed, "the user rejected this call");
        if allowed {
            shared.update(mapping::tool_call_update(
                call_id,
                json!({"status": "in_progress"}),
            ));
        }
    }
}

fn answer(responder: &ApprovalResponder, allowed: bool, reason: &str) {
    if allowed {
        responder.approve();
    } else {
        responder.deny(reason);
    }
}

/// What a permission request shows of the change a call would make: the diff of a write
/// or an edit against the file as it is, the patch itself, the command line.
fn proposed(shared: &Shared, call_id: &str, tool: &str, args: &Value) -> Vec<Value> {
    let images = shared.policy.images(call_id);
    let before = images.first().and_then(|image| image.before.as_deref());
    let path = images.first().map(|image| image.path.clone());
    let text = |name: &str| args.get(name).and_then(Value::as_str);
    match (tool, path) {
        ("write_file", Some(path)) => text("content")
            .map(|new| vec![mapping::diff(&path, before, new)])
            .unwrap_or_default(),
        ("edit_file", Some(path)) => {
            let (Some(old), Some(new), Some(current)) =
                (text("old_string"), text("new_string"), before)
            else {
                return Vec::new();
            };
            let all = args
                .get("replace_all")
                .or_else(|| args.get("allow_multiple"));
            let edited = if all.and_then(Value::as_bool) == Some(true) {
                current.replace(old, new)
            } else {
                current.replacen(old, new, 1)
            };
            vec![mapping::diff(&path, Some(current), &edited)]
        }
        ("apply_patch", _) => args
            .as_str()
            .or_else(|| text("patch"))
            .map(|patch| vec![mapping::text_content(&format!("```diff\n{patch}\n```"))])
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}
