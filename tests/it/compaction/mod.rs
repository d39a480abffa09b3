//! Context compaction: long sessions in small windows, what survives a compaction, no
//! replayed work, a compaction request that cannot overflow, overflow errors of every
//! provider shape, resume and replay of a compacted session, and no request sent above
//! the window when compaction cannot fit it.
//!
//! "Size" of a request is the library's own estimate,
//! `agentloop::unstable::estimate_request_tokens`:
//! a quarter of the bytes of every message's text, tool calls and results, plus 4 per
//! message, plus a quarter of the tool definitions' bytes. The session keeps that under
//! `window − reserve`; the tests assert it stays under the window for every request.

mod overflow;
mod resume;
mod scripted;
mod subagents;
mod window;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use agentloop::llm::scripted::ScriptedModel;
use agentloop::llm::{ContentPart, Request, Role};
use agentloop::profiles::ProviderProfile;
use agentloop::session::compaction::{CompactionConfig, CompactionFallback, CompactionReason};
use agentloop::session::{EventKind, Events, RecvError, Session, SessionConfig, SessionEvent};

use support::GENEROUS;
use support::session::{DirEnv, echo_tool, names};

/// The first words of our compaction instructions.
pub const SUMMARY_MARK: &str = "You are writing the handoff summary";

pub fn is_summary_request(request: &Request) -> bool {
    request
        .messages
        .first()
        .is_some_and(|m| m.role == Role::System && m.text().starts_with(SUMMARY_MARK))
}

/// The compaction request's user input.
pub fn summary_input(request: &Request) -> String {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.text())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Everything a request says, as one string (texts, tool calls, tool results).
pub fn request_text(request: &Request) -> String {
    let mut out = String::new();
    for message in &request.messages {
        for part in &message.content {
            match part {
                ContentPart::Text { text, .. } => out.push_str(text),
                ContentPart::ToolCall(call) => out.push_str(&call.arguments.to_string()),
                ContentPart::ToolResult(result) => out.push_str(&result.content),
                _ => {}
            }
            out.push('\n');
        }
    }
    out
}

/// What a diligent model writes: our sections, every constraint line kept, completed
/// steps condensed (the `step-N` / `round-N` markers of the input and earlier summary).
pub fn summarise(input: &str) -> String {
    let mut rules = BTreeSet::new();
    let mut steps = BTreeSet::new();
    for line in input.lines() {
        if let Some(at) = line.find("RULE-") {
            let rule: String = line[at..].chars().take(60).collect();
            rules.insert(rule.trim_end_matches(['"', '}', ',', '.']).to_string());
        }
        for marker in ["step-", "done-steps: "] {
            let mut rest = line;
            while let Some(at) = rest.find(marker) {
                rest = &rest[at + marker.len()..];
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if let Ok(n) = digits.parse::<u32>() {
                    steps.insert(n);
                }
                if marker == "done-steps: " {
                    for n in rest.split([',', ' ']).filter_map(|s| s.parse::<u32>().ok()) {
                        steps.insert(n);
                    }
                }
            }
        }
    }
    let mut out =
        String::from("## Goal\nFinish the scripted task.\n\n## Constraints and preferences\n");
    for rule in &rules {
        out.push_str(&format!("- {rule}\n"));
    }
    out.push_str("\n## User requests\n- the scripted task (in progress)\n\n## Files\nnone\n\n");
    let list: Vec<String> = steps.iter().map(u32::to_string).collect();
    out.push_str(&format!(
        "## Actions completed\n- echo calls succeeded; done-steps: {}\n\n",
        list.join(",")
    ));
    out.push_str(
        "## Current step\ncontinuing\n\n## Next step\nthe next step\n\n## Open questions\nnone\n",
    );
    out
}

/// Every tool call of `request` has exactly one result, and every result a call.
pub fn assert_calls_answered(request: &Request, context: &str) {
    let mut calls = Vec::new();
    let mut results: HashMap<String, usize> = HashMap::new();
    for message in &request.messages {
        for part in &message.content {
            match part {
                ContentPart::ToolCall(call) => calls.push(call.id.clone()),
                ContentPart::ToolResult(result) => {
                    *results.entry(result.tool_call_id.clone()).or_default() += 1;
                }
                _ => {}
            }
        }
    }
    for id in &calls {
        assert_eq!(
            results.get(id),
            Some(&1),
            "{context}: call {id} has {:?} results",
            results.get(id)
        );
    }
    assert_eq!(
        results.len(),
        calls.len(),
        "{context}: results without calls"
    );
}

pub fn profile() -> ProviderProfile {
    ProviderProfile::new("scripted", "scripted-model")
        .with_base_instructions("You are a test agent.")
        .with_tool(echo_tool())
}

pub fn config(window: usize) -> SessionConfig {
    SessionConfig::default()
        .with_loop_detection(false)
        .with_compaction(CompactionConfig::default().with_context_window(window))
}

/// A session over `model` in `dir`.
pub fn start(model: &ScriptedModel, dir: &Path, config: SessionConfig) -> (Session, Events) {
    let env = Arc::new(DirEnv::new(dir));
    let client = support::client_for(model.clone());
    let session = Session::new(profile(), env, client, config).expect("session starts");
    let events = session.events();
    (session, events)
}

/// Collects events until `stop` (inclusive), within nine times [`GENEROUS`]: a long
/// scripted session on a loaded machine (not a speed target).
pub fn collect_until(
    events: &mut Events,
    stop: impl Fn(&SessionEvent) -> bool,
) -> Vec<SessionEvent> {
    let deadline = Instant::now() + GENEROUS * 9;
    let mut out = Vec::new();
    loop {
        match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(event) => {
                let done = stop(&event);
                out.push(event);
                if done {
                    return out;
                }
            }
            Err(RecvError::Timeout) => panic!("timed out; got {}", names(&out).len()),
            Err(RecvError::Ended) => panic!("stream ended; got {:?}", names(&out)),
        }
    }
}

pub fn collect_input(events: &mut Events) -> Vec<SessionEvent> {
    collect_until(events, |e| {
        matches!(e.kind, EventKind::ProcessingEnd { .. })
    })
}

/// One `context_compaction_end` event's fields.
#[derive(Debug, Clone)]
pub struct Compaction {
    pub reason: CompactionReason,
    pub tokens_before: usize,
    pub tokens_after: usize,
    pub turns_summarised: usize,
    pub fallback: CompactionFallback,
    pub summary: String,
}

pub fn compactions(events: &[SessionEvent]) -> Vec<Compaction> {
    let starts = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ContextCompactionStart { .. }))
        .count();
    let ends: Vec<Compaction> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ContextCompactionEnd {
                reason,
                tokens_before,
                tokens_after,
                turns_summarised,
                fallback,
                summary,
            } => Some(Compaction {
                reason: *reason,
                tokens_before: *tokens_before,
                tokens_after: *tokens_after,
                turns_summarised: *turns_summarised,
                fallback: *fallback,
                summary: summary.clone(),
            }),
            _ => None,
        })
        .collect();
    assert_eq!(starts, ends.len(), "every start has its end");
    ends
}

/// The index in `requests` of the first non-summary request after each summary request.
pub fn first_requests_after_compactions(requests: &[Request]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        if is_summary_request(request) {
            if let Some(next) = (i + 1..requests.len()).find(|&j| !is_summary_request(&requests[j]))
            {
                out.push((i, next));
            }
        }
    }
    out
}
