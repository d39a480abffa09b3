//! A subagent compacts its own history, and its compaction events reach the parent.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::session::{EventKind, Session, StopReason};
use agentloop::unstable::estimate_request_tokens;
use serde_json::json;

use super::*;
use support::session::{DirEnv, stop_reason, user_texts};

#[test]
fn a_subagent_compacts_its_history_and_the_parent_sees_it() {
    let child_rounds = Arc::new(AtomicUsize::new(0));
    let parent_calls = Arc::new(AtomicUsize::new(0));
    let (child, parent) = (child_rounds.clone(), parent_calls.clone());
    let model = ScriptedModel::dynamic(move |request| {
        if is_summary_request(request) {
            return ScriptedTurn::text(summarise(&summary_input(request)));
        }
        if user_texts(request).iter().any(|t| t.contains("CHILD-TASK")) {
            let n = child.fetch_add(1, Ordering::SeqCst);
            return if n < 40 {
                ScriptedTurn::tool_call(
                    "echo",
                    json!({"text": format!("child round {n}: {}", "c".repeat(600))}),
                )
            } else {
                ScriptedTurn::text("child done")
            };
        }
        match parent.fetch_add(1, Ordering::SeqCst) {
            0 => ScriptedTurn::tool_call("spawn_agent", json!({"task": "CHILD-TASK forty rounds"})),
            1 => ScriptedTurn::tool_call("wait", json!({"agent_id": "agent-1"})),
            _ => ScriptedTurn::text("parent done"),
        }
    });
    let mut profile = profile();
    for tool in agentloop::unstable::subagent_tools() {
        profile = profile.with_tool(tool);
    }
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let client = support::client_for(model.clone());
    let session = Session::new(profile, env, client, config(8_000)).unwrap();
    let mut events = session.events();
    session.submit("start the child").unwrap();
    let seen = collect_input(&mut events);
    assert_eq!(stop_reason(&seen), StopReason::Completed);
    assert_eq!(child_rounds.load(Ordering::SeqCst), 41);
    let child_compactions = seen
        .iter()
        .filter(|e| match &e.kind {
            EventKind::SubagentEvent { event, .. } => {
                matches!(event.kind, EventKind::ContextCompactionEnd { .. })
            }
            _ => false,
        })
        .count();
    assert!(child_compactions >= 1, "the child compacted");
    for request in model.requests() {
        assert!(estimate_request_tokens(&request) <= 8_000);
    }
}
