//! The library's ATIF writer (`session::TrajectoryWriter`) fed by a real session's event
//! stream (the scripted model, a real tool): the file is whole and valid after the step
//! that makes a tool call, before the call has a result, and at the end; checked for its
//! shape here and by Harbor's own validator (`harbor.utils.trajectory_validator` from PyPI
//! `harbor` 0.25.0 in `target/ci/harbor-venv`, installed by `.ci/run`; without it that
//! half is skipped with a printed reason, or fails under `AGENTLOOP_CI=1`).

use std::path::Path;

use agentloop::llm::Usage;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::session::{EventKind, SessionConfig, TrajectoryWriter};
use serde_json::{Value, json};

use support::GENEROUS;
use support::session::*;

/// The trajectory at `path`, parsed, and passed by Harbor's validator when installed.
fn validated(path: &Path) -> Value {
    support::ci::validated_trajectory(path)
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

#[test]
fn a_sessions_events_make_a_valid_atif_trajectory_written_before_each_tool_call_runs() {
    let (gate, release) = gate_tool("gate");
    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "hello"})).with_usage(usage(100, 10)),
        ScriptedTurn::tool_call("gate", json!({})).with_usage(usage(120, 12)),
        ScriptedTurn::text("done: hello").with_usage(usage(140, 14)),
    ]);
    let profile = profile().with_tool(gate);
    let mut h = harness_with(model, profile.clone(), SessionConfig::default());
    let path = h.dir.path().join("trajectory.json");
    let mut writer = TrajectoryWriter::create(&path, "my-agent", "9.8.7", &profile.tools());
    h.session
        .submit("echo hello, then wait at the gate")
        .unwrap();
    h.session.close();

    // Up to the gate's call: the file already holds it, without a result yet.
    let deadline = std::time::Instant::now() + GENEROUS;
    loop {
        let event = h.events.recv_timeout(GENEROUS).expect("an event");
        writer.record(&event).unwrap();
        if matches!(&event.kind, EventKind::ToolCallStart { tool_name, .. } if tool_name == "gate")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no call of the gate");
    }
    let midway = validated(&path);
    let steps = midway["steps"].as_array().unwrap();
    let last = steps.last().unwrap();
    assert_eq!(last["source"], "agent", "{midway}");
    assert_eq!(last["tool_calls"][0]["function_name"], "gate", "{midway}");
    assert!(last.get("observation").is_none(), "{midway}");
    release.send(()).unwrap();

    for event in collect_to_end(&mut h.events) {
        writer.record(&event).unwrap();
    }
    let atif = validated(&path);
    assert_eq!(atif["schema_version"], "ATIF-v1.7");
    assert_eq!(atif["session_id"], h.session.id());
    assert_eq!(atif["agent"]["name"], "my-agent");
    assert_eq!(atif["agent"]["version"], "9.8.7");
    assert_eq!(atif["agent"]["model_name"], "scripted-model");
    let tools: Vec<&str> = atif["agent"]["tool_definitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(tools, ["echo", "gate"], "{atif}");
    let steps = atif["steps"].as_array().unwrap();
    let sources: Vec<&str> = steps.iter().filter_map(|s| s["source"].as_str()).collect();
    assert_eq!(sources, ["user", "agent", "agent", "agent"], "{atif}");
    assert_eq!(steps[0]["message"], "echo hello, then wait at the gate");
    let echo = &steps[1];
    assert_eq!(echo["tool_calls"][0]["function_name"], "echo");
    assert_eq!(echo["tool_calls"][0]["arguments"], json!({"text": "hello"}));
    let call_id = echo["tool_calls"][0]["tool_call_id"].clone();
    assert_eq!(
        echo["observation"]["results"][0]["source_call_id"], call_id,
        "{atif}"
    );
    assert!(
        echo["observation"]["results"][0]["content"]
            .as_str()
            .unwrap()
            .contains("hello"),
        "{atif}"
    );
    assert_eq!(
        steps[2]["observation"]["results"][0]["content"], "released",
        "{atif}"
    );
    assert_eq!(echo["metrics"]["prompt_tokens"], 100);
    assert_eq!(echo["metrics"]["completion_tokens"], 10);
    assert_eq!(steps[3]["message"], "done: hello");
    assert_eq!(atif["final_metrics"]["total_prompt_tokens"], 360, "{atif}");
    assert_eq!(atif["final_metrics"]["total_completion_tokens"], 36);
    assert_eq!(atif["final_metrics"]["total_steps"], 4);
    assert_eq!(atif["final_metrics"]["extra"]["ended"], true);
    // Only the file: the temporary files of the replaces are gone.
    let names: Vec<String> = std::fs::read_dir(h.dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains("trajectory"))
        .collect();
    assert_eq!(names, ["trajectory.json"]);
}

#[test]
fn a_failed_write_is_the_records_error_and_the_next_due_write_tries_again() {
    let mut h = harness(vec![ScriptedTurn::text("done")]);
    let dir = h.dir.path().join("not-yet");
    let path = dir.join("trajectory.json");
    let mut writer = TrajectoryWriter::create(&path, "agentloop", "0.1.0", &[]);
    h.session.submit("say done").unwrap();
    h.session.close();
    let events = collect_to_end(&mut h.events);
    let input = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::UserInput { .. }))
        .unwrap();
    for event in &events[..=input] {
        let _ = writer.record(event);
    }
    let err = writer.flush().unwrap_err();
    assert_eq!(err.kind(), agentloop::ErrorKind::Io, "{err}");
    assert!(err.to_string().contains("trajectory.json"), "{err}");
    std::fs::create_dir(&dir).unwrap();
    for event in &events[input + 1..] {
        writer.record(event).unwrap();
    }
    let atif = validated(&path);
    assert_eq!(atif["steps"][0]["message"], "say done", "{atif}");
    assert_eq!(atif["final_metrics"]["extra"]["ended"], true);
}
