//! The session with the real local environment and the shared tools: abort and interrupt
//! kill running commands, live output, truncation for the model vs full output for the
//! host.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{ContentPart, Role};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{
    CloseReason, EventKind, Events, Session, SessionConfig, SessionState, StopReason,
};
use agentloop::tools;
use serde_json::json;

use support::GENEROUS;
use support::session::*;

struct ShellHarness {
    session: Session,
    events: Events,
    model: ScriptedModel,
    dir: tempfile::TempDir,
}

fn shell_harness(turns: Vec<ScriptedTurn>, config: SessionConfig) -> ShellHarness {
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let profile = ProviderProfile::new("scripted", "scripted-model")
        .with_tool(tools::shell())
        .with_tool(tools::read_file())
        .with_tool(tools::write_file());
    let model = ScriptedModel::new(turns);
    let client = support::client_for(model.clone());
    let session = Session::new(profile, env, client, config).unwrap();
    let events = session.events();
    ShellHarness {
        session,
        events,
        model,
        dir,
    }
}

/// A command that reports its shell's pid and a background `sleep 30`'s pid, then waits.
const SLEEPER: &str = "sleep 30 & echo \"pids $$ $!\"; wait";

/// Waits for the output delta with the pids; returns them.
fn wait_for_pids(events: &mut Events) -> Vec<i32> {
    let seen = collect_until(
        events,
        |e| matches!(&e.kind, EventKind::ToolCallOutputDelta { delta, .. } if delta.contains("pids ")),
    );
    let EventKind::ToolCallOutputDelta { delta, .. } = &seen.last().unwrap().kind else {
        unreachable!()
    };
    let line = delta.lines().find(|l| l.starts_with("pids ")).unwrap();
    line["pids ".len()..]
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// Whether `pid` is still a live (non-zombie) process.
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

/// Waits (bounded) until none of `pids` runs: a killed grandchild is reaped by init, not
/// by us, so its exit cannot be waited for directly.
fn assert_all_gone(pids: &[i32]) {
    let deadline = Instant::now() + GENEROUS;
    while pids.iter().any(|p| running(*p)) {
        assert!(
            Instant::now() < deadline,
            "processes still running: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sleeper_turns() -> Vec<ScriptedTurn> {
    vec![
        ScriptedTurn::tool_call("shell", json!({"command": SLEEPER, "timeout_ms": 60_000})),
        ScriptedTurn::text("the command was stopped"),
    ]
}

#[test]
fn abort_while_a_command_sleeps_ends_the_session_promptly_and_kills_its_processes() {
    let mut h = shell_harness(sleeper_turns(), SessionConfig::default());
    h.session.submit("sleep").unwrap();
    let pids = wait_for_pids(&mut h.events);
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|p| running(*p)));
    let started = Instant::now();
    h.session.abort();
    let events = collect_to_end(&mut h.events);
    let elapsed = started.elapsed();
    assert!(elapsed < GENEROUS, "SESSION_END after {elapsed:?}");
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::SessionEnd {
            reason: CloseReason::Aborted,
            ..
        }
    ));
    assert_all_gone(&pids);
    assert_eq!(h.session.history().check_tool_results(), Ok(()));
}

#[test]
fn interrupt_while_a_command_sleeps_returns_to_idle_promptly_and_kills_its_processes() {
    let mut h = shell_harness(sleeper_turns(), SessionConfig::default());
    h.session.submit("sleep").unwrap();
    let pids = wait_for_pids(&mut h.events);
    let started = Instant::now();
    h.session.interrupt();
    let events = collect_input(&mut h.events);
    let elapsed = started.elapsed();
    assert!(elapsed < GENEROUS, "PROCESSING_END after {elapsed:?}");
    assert_eq!(stop_reason(&events), StopReason::Interrupted);
    assert_all_gone(&pids);
    let history = h.session.history();
    assert_eq!(history.check_tool_results(), Ok(()));
    assert_eq!(h.session.state(), SessionState::Idle);
    let outcome = h.session.run("are you there?").unwrap();
    assert_eq!(outcome.text, "the command was stopped");
    // The model learns the command was interrupted.
    let request = &h.model.requests()[1];
    let result = request
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .flat_map(|m| &m.content)
        .find_map(|p| match p {
            ContentPart::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert!(result.is_error);
}

#[test]
fn shell_output_streams_live_and_the_end_event_has_all_of_it() {
    let mut h = shell_harness(
        vec![
            ScriptedTurn::tool_call(
                "shell",
                json!({"command": "echo one; echo two >&2; echo three"}),
            ),
            ScriptedTurn::text("ok"),
        ],
        SessionConfig::default(),
    );
    h.session.submit("run").unwrap();
    let events = collect_input(&mut h.events);
    let streamed: String = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallOutputDelta { stream, delta, .. } if stream == "stdout" => {
                Some(delta.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(streamed, "one\nthree\n");
    let output = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolCallEnd { output, .. } => output.clone(),
            _ => None,
        })
        .unwrap();
    assert!(
        output.contains("one\nthree\n") && output.contains("two"),
        "{output}"
    );
    assert!(output.contains("exit code: 0"));
}

/// The content of the first tool result a request sends the model.
fn first_tool_result(request: &agentloop::llm::Request) -> String {
    request
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|p| match p {
            ContentPart::ToolResult(r) => Some(r.content.clone()),
            _ => None,
        })
        .expect("a tool result")
}

#[test]
fn the_host_gets_the_full_output_while_the_model_gets_the_truncated_one() {
    let mut h = shell_harness(
        vec![
            ScriptedTurn::tool_call("read_file", json!({"file_path": "big.txt"})),
            ScriptedTurn::text("it is big"),
        ],
        SessionConfig::default(),
    );
    // 1010 lines of 99 characters: over 100 000 characters (read_file caps single lines).
    let line = format!("{}\n", "x".repeat(99));
    std::fs::write(h.dir.path().join("big.txt"), line.repeat(1010)).unwrap();
    h.session.submit("read big.txt").unwrap();
    let events = collect_input(&mut h.events);
    let (output, truncated, removed_chars) = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolCallEnd {
                output,
                truncated,
                removed_chars,
                ..
            } => Some((output.clone().unwrap(), *truncated, *removed_chars)),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        output.matches('x').count(),
        99 * 1010,
        "TOOL_CALL_END has every line"
    );
    assert!(truncated && removed_chars > 0);
    let result = first_tool_result(&h.model.requests()[1]);
    assert!(result.len() < output.len());
    assert!(
        result.contains("[WARNING: Tool output was truncated."),
        "marker present"
    );
}

#[test]
fn per_tool_limits_from_the_config_apply_to_the_model_copy() {
    let config = SessionConfig::default()
        .with_tool_output_limit("shell", 2_000)
        .with_tool_line_limit("shell", 10);
    let mut h = shell_harness(
        vec![
            ScriptedTurn::tool_call("shell", json!({"command": "seq 1 1000"})),
            ScriptedTurn::text("ok"),
        ],
        config,
    );
    h.session.submit("count").unwrap();
    let events = collect_input(&mut h.events);
    let removed_lines = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolCallEnd { removed_lines, .. } => Some(*removed_lines),
            _ => None,
        })
        .unwrap();
    assert!(removed_lines > 0);
    let result = first_tool_result(&h.model.requests()[1]);
    assert!(result.lines().count() <= 12, "{result}");
}
