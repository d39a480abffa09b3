//! Subagents and their parent's lifecycle: closing, aborting or dropping the parent ends
//! every child and its processes before the parent's `SESSION_END`; the shared execution
//! environment is cleaned up by the parent only, once.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use agentloop::session::{EventKind, Session, SessionConfig, SessionEvent};
use serde_json::json;

use crate::session::subagents::{KIT, json_of};
use support::GENEROUS;
use support::Server;
use support::parity_kit::{Run, ended};
use support::session::{DirEnv, collect_input, collect_to_end, collect_until, names};
use support::turns::function;

/// Starts a parent whose child runs `echo pid=$$; exec sleep 30`; returns the run and the
/// pid of the child's command once the parent's input is done and the command runs.
fn parent_with_a_sleeping_child() -> (Run, u32, Vec<SessionEvent>) {
    let server = Server::start_routed(
        vec![
            (
                "PARENT-SLEEPER",
                vec![
                    KIT.calls(&[function("p1", "spawn_agent", json!({"task": "TASK-SLEEP"}))]),
                    KIT.text("spawned"),
                ],
            ),
            (
                "TASK-SLEEP",
                vec![KIT.calls(&[function(
                    "c1",
                    "shell",
                    json!({"command": "echo pid=$$; exec sleep 30", "timeout_ms": 60000}),
                )])],
            ),
        ],
        vec![],
    );
    let mut run = Run::with(KIT, server, SessionConfig::default(), |_| {});
    run.session
        .submit("PARENT-SLEEPER start a long job")
        .unwrap();
    let mut seen = Vec::new();
    let mut stdout = String::new();
    let mut pid: Option<u32> = None;
    let mut parent_done = false;
    while pid.is_none() || !parent_done {
        let batch = collect_until(&mut run.events, |e| match &e.kind {
            EventKind::ProcessingEnd { .. } => true,
            EventKind::SubagentEvent { event, .. } => {
                matches!(event.kind, EventKind::ToolCallOutputDelta { .. })
            }
            _ => false,
        });
        for event in &batch {
            match &event.kind {
                EventKind::ProcessingEnd { .. } => parent_done = true,
                EventKind::SubagentEvent { event, .. } => {
                    if let EventKind::ToolCallOutputDelta { delta, .. } = &event.kind {
                        stdout.push_str(delta);
                    }
                }
                _ => {}
            }
        }
        // The pid line is complete once its newline arrived.
        pid = stdout
            .split("pid=")
            .nth(1)
            .and_then(|rest| rest.split_once('\n'))
            .and_then(|(number, _)| number.trim().parse().ok());
        seen.extend(batch);
    }
    (run, pid.unwrap(), seen)
}

fn alive(pid: u32) -> bool {
    // A zombie has exited; only a live process counts.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn assert_child_closed_before_parent(events: &[SessionEvent]) {
    let child_end = events
        .iter()
        .position(|e| match &e.kind {
            EventKind::SubagentEvent { event, .. } => {
                matches!(event.kind, EventKind::SessionEnd { .. })
            }
            _ => false,
        })
        .unwrap_or_else(|| panic!("no child SESSION_END: {:?}", names(events)));
    let parent_end = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::SessionEnd { .. }))
        .unwrap();
    assert!(child_end < parent_end);
}

#[test]
fn closing_aborting_or_dropping_the_parent_closes_its_children_and_their_processes() {
    for how in ["close", "abort", "drop"] {
        let (mut run, pid, _) = parent_with_a_sleeping_child();
        assert!(alive(pid), "{how}: the child's command runs");
        let started = Instant::now();
        let events = match how {
            "close" => {
                run.session.close();
                collect_to_end(&mut run.events)
            }
            "abort" => {
                run.session.abort();
                collect_to_end(&mut run.events)
            }
            _ => {
                let Run {
                    session,
                    mut events,
                    server,
                    dir,
                    ..
                } = run;
                drop(session);
                let rest: Vec<SessionEvent> = events.by_ref().collect();
                drop((server, dir));
                assert_child_closed_before_parent(&rest);
                assert!(!alive(pid), "drop: the child's command is gone");
                continue;
            }
        };
        // A ceiling far below the command's 30 s: the process group was killed.
        assert!(started.elapsed() < GENEROUS, "{how}");
        assert_child_closed_before_parent(&events);
        assert!(!alive(pid), "{how}: the child's command is gone");
    }
}

#[test]
fn a_child_never_cleans_up_the_shared_environment_its_parent_does_once() {
    let server = Server::start_routed(
        vec![
            (
                "PARENT-ENV",
                vec![
                    KIT.calls(&[function("p1", "spawn_agent", json!({"task": "TASK-ENV"}))]),
                    KIT.calls(&[function("p2", "wait", json!({"agent_id": "agent-1"}))]),
                    KIT.text("ok"),
                ],
            ),
            (
                "TASK-ENV",
                vec![
                    KIT.calls(&[function(
                        "c1",
                        "write_file",
                        json!({"file_path": "shared.txt", "content": "same fs\n"}),
                    )]),
                    KIT.text("written"),
                ],
            ),
        ],
        vec![],
    );
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let session = Session::new(
        KIT.profile(),
        env.clone(),
        KIT.client(&server),
        SessionConfig::default(),
    )
    .unwrap();
    let mut events = session.events();
    session.submit("PARENT-ENV go").unwrap();
    let seen = collect_input(&mut events);
    let wait = ended(&seen)
        .into_iter()
        .find(|e| e.tool_name == "wait")
        .unwrap();
    assert_eq!(json_of(&wait.text)["output"], "written");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("shared.txt")).unwrap(),
        "same fs\n"
    );
    assert_eq!(
        env.cleanups.load(Ordering::SeqCst),
        0,
        "the child did not clean up"
    );
    session.close();
    collect_to_end(&mut events);
    assert_eq!(
        env.cleanups.load(Ordering::SeqCst),
        1,
        "the parent did, once"
    );
}
