//! Parallel tool rounds: `TOOL_CALL_START`s come in the model's order, before any
//! call runs, and no more calls run at once than `max_parallel_tool_calls`.

use std::sync::Arc;

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::Client;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Session, SessionConfig};
use serde_json::json;

fn session_with(calls: &[String], config: SessionConfig, dir: &std::path::Path) -> Session {
    let mut turn = ScriptedTurn::text("");
    for command in calls {
        turn = turn.with_tool_call("shell", json!({ "command": command }));
    }
    let model = ScriptedModel::new(vec![turn, ScriptedTurn::text("done")]);
    let profile = ProviderProfile::new("scripted", "scripted")
        .with_tool(agentloop::tools::shell())
        .with_parallel_tool_calls(true);
    let env = Arc::new(LocalExecutionEnvironment::new(dir).unwrap());
    Session::new(profile, env, Client::new().with_provider(model), config).unwrap()
}

#[test]
fn parallel_tool_call_starts_come_in_the_models_order_before_any_call_ends() {
    let dir = tempfile::tempdir().unwrap();
    // Later calls finish first, so a start emitted from each call's own thread would race.
    let calls: Vec<String> = (0..8)
        .map(|i| format!("sleep 0.0{}; echo call{i}", 8 - i))
        .collect();
    for _ in 0..10 {
        let session = session_with(&calls, SessionConfig::default(), dir.path());
        let events = session.events();
        session.submit("go").unwrap();
        session.close();
        let mut starts = Vec::new();
        let mut ended_before_all_started = false;
        for event in events {
            match event.kind {
                EventKind::ToolCallStart { arguments, .. } => {
                    starts.push(arguments["command"].as_str().unwrap().to_string())
                }
                EventKind::ToolCallEnd { .. } if starts.len() < calls.len() => {
                    ended_before_all_started = true
                }
                _ => {}
            }
        }
        assert_eq!(starts, calls, "starts out of the model's order");
        assert!(
            !ended_before_all_started,
            "a call ended before every call had started"
        );
    }
}

#[test]
fn parallel_tool_calls_are_capped_and_the_rest_queued() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // Each call notes when it runs and when it stops (appends of one short line are atomic).
    let calls: Vec<String> = (0..6)
        .map(|i| {
            format!(
                "echo + >> {log}; sleep 0.2; echo - >> {log}; echo call{i}",
                log = log.display()
            )
        })
        .collect();
    let config = SessionConfig::default().with_max_parallel_tool_calls(2);
    let session = session_with(&calls, config, dir.path());
    let outcome = session.run("go").unwrap();
    assert_eq!(outcome.text, "done");
    let (mut running, mut most) = (0i32, 0i32);
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        running += if line == "+" { 1 } else { -1 };
        most = most.max(running);
    }
    assert_eq!(most, 2, "at most two calls at once, and the cap was used");
}
