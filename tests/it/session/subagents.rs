//! Subagents (spec §7) through real sessions: concurrency, depth limits, event forwarding,
//! send_input / wait / close_agent, working directory scoping, model and turn-limit
//! overrides. The loopback server routes each request by a marker in its body, since a
//! parent's and its children's requests interleave in no fixed order. The parent's
//! lifecycle is in `subagents_lifecycle.rs`.

use std::collections::BTreeSet;
use std::path::Path;

use agentloop::session::{EventKind, SessionConfig, SessionEvent, StopReason};
use serde_json::{Value, json};

use support::Server;
use support::parity_kit::{Ended, Kit, Run, ended};
use support::turns::function;

pub const KIT: Kit = Kit::Anthropic;

/// The events of subagents among `events`, one level deep: `(agent id, event)`.
pub fn child_events(events: &[SessionEvent]) -> Vec<(String, SessionEvent)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SubagentEvent { agent_id, event } => {
                Some((agent_id.clone(), (**event).clone()))
            }
            _ => None,
        })
        .collect()
}

/// The `TOOL_CALL_END`s of one subagent.
pub fn child_ended(events: &[SessionEvent], agent: &str) -> Vec<Ended> {
    let mine: Vec<SessionEvent> = child_events(events)
        .into_iter()
        .filter(|(id, _)| id == agent)
        .map(|(_, e)| e)
        .collect();
    ended(&mine)
}

pub fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// A shell command that announces itself, waits until `other` has announced itself too
/// (5 s at most), holds for 300 ms, and reports whether it saw the other.
fn rendezvous(me: &str, other: &str) -> String {
    format!(
        "touch {me}.started; for i in $(seq 1 500); do [ -e {other}.started ] && break; \
         sleep 0.01; done; sleep 0.3; [ -e {other}.started ] && echo {me} saw {other}"
    )
}

#[test]
fn two_subagents_spawned_in_one_round_run_concurrently() {
    let server = Server::start_routed(
        vec![
            (
                "PARENT-CONCURRENT",
                vec![
                    KIT.calls(&[
                        function(
                            "p1",
                            "spawn_agent",
                            json!({"task": "TASK-A run the a side"}),
                        ),
                        function(
                            "p2",
                            "spawn_agent",
                            json!({"task": "TASK-B run the b side"}),
                        ),
                    ]),
                    KIT.calls(&[
                        function("p3", "wait", json!({"agent_id": "agent-1"})),
                        function("p4", "wait", json!({"agent_id": "agent-2"})),
                    ]),
                    KIT.text("Both sides ran."),
                ],
            ),
            (
                "TASK-A",
                vec![
                    KIT.calls(&[function(
                        "a1",
                        "shell",
                        json!({"command": rendezvous("a", "b")}),
                    )]),
                    KIT.text("A done"),
                ],
            ),
            (
                "TASK-B",
                vec![
                    KIT.calls(&[function(
                        "b1",
                        "shell",
                        json!({"command": rendezvous("b", "a")}),
                    )]),
                    KIT.text("B done"),
                ],
            ),
        ],
        vec![],
    );
    let mut run = Run::with(KIT, server, SessionConfig::default(), |_| {});
    let events = run.input("PARENT-CONCURRENT run both sides at once");
    assert_eq!(
        support::session::stop_reason(&events),
        StopReason::Completed
    );
    let waits: Vec<Value> = ended(&events)
        .iter()
        .filter(|e| e.tool_name == "wait")
        .map(|e| json_of(&e.text))
        .collect();
    let outputs: BTreeSet<&str> = waits
        .iter()
        .map(|w| w["output"].as_str().unwrap())
        .collect();
    assert_eq!(outputs, BTreeSet::from(["A done", "B done"]));
    assert!(
        waits
            .iter()
            .all(|w| w["success"] == true && w["turns_used"] == 2)
    );
    // Each child's command saw the other one running: they ran at the same time.
    let shells: String = ["agent-1", "agent-2"]
        .iter()
        .flat_map(|agent| child_ended(&events, agent))
        .map(|e| e.text)
        .collect();
    assert!(
        shells.contains("a saw b") && shells.contains("b saw a"),
        "{shells}"
    );
    // And their combined time is below the sum of their times.
    let children = child_events(&events);
    let lifetime = |agent: &str| {
        let times: Vec<_> = children
            .iter()
            .filter(|(id, _)| id == agent)
            .map(|(_, e)| e.timestamp)
            .collect();
        (*times.first().unwrap(), *times.last().unwrap())
    };
    let (start_1, end_1) = lifetime("agent-1");
    let (start_2, end_2) = lifetime("agent-2");
    let duration =
        |a: std::time::SystemTime, b: std::time::SystemTime| b.duration_since(a).unwrap();
    let sum = duration(start_1, end_1) + duration(start_2, end_2);
    let combined = duration(start_1.min(start_2), end_1.max(end_2));
    assert!(combined < sum, "combined {combined:?}, sum {sum:?}");
    println!("two subagents: combined {combined:?}, sum of each {sum:?}");
}

#[test]
fn a_child_at_the_maximum_depth_has_no_spawn_tool_and_cannot_spawn() {
    let server = Server::start_routed(
        vec![
            (
                "PARENT-DEPTH",
                vec![
                    KIT.calls(&[function(
                        "p1",
                        "spawn_agent",
                        json!({"task": "TASK-CHILD try to delegate"}),
                    )]),
                    KIT.calls(&[function("p2", "wait", json!({"agent_id": "agent-1"}))]),
                    KIT.text("ok"),
                ],
            ),
            (
                "TASK-CHILD",
                vec![
                    KIT.calls(&[function(
                        "c1",
                        "spawn_agent",
                        json!({"task": "TASK-GRANDCHILD"}),
                    )]),
                    KIT.text("I did it myself"),
                ],
            ),
        ],
        vec![],
    );
    let mut run = Run::with(KIT, server, SessionConfig::default(), |_| {});
    let events = run.input("PARENT-DEPTH delegate");
    let child = child_ended(&events, "agent-1");
    assert_eq!(child[0].tool_name, "spawn_agent");
    assert!(child[0].is_error);
    assert!(
        child[0].text.contains("Unknown tool: spawn_agent"),
        "{}",
        child[0].text
    );
    let requests = run.server.requests();
    let child_body = requests
        .iter()
        .map(|r| r.json().clone())
        .find(|b| !b.to_string().contains("PARENT-DEPTH"))
        .unwrap();
    let tools = KIT.tool_names(&child_body);
    for tool in ["spawn_agent", "send_input", "wait", "close_agent"] {
        assert!(
            !tools.contains(&tool.to_string()),
            "{tool} offered to the child"
        );
    }
    assert!(tools.contains(&"edit_file".to_string()));
    assert_eq!(requests.len(), 5, "no grandchild ever asked the model");
}

#[test]
fn with_depth_two_a_child_spawns_a_grandchild_whose_events_arrive_nested() {
    let server = Server::start_routed(
        vec![
            (
                "PARENT-NESTED",
                vec![
                    KIT.calls(&[function(
                        "p1",
                        "spawn_agent",
                        json!({"task": "TASK-MIDDLE delegate once more"}),
                    )]),
                    KIT.calls(&[function("p2", "wait", json!({"agent_id": "agent-1"}))]),
                    KIT.text("all levels done"),
                ],
            ),
            (
                "TASK-MIDDLE",
                vec![
                    KIT.calls(&[function(
                        "m1",
                        "spawn_agent",
                        json!({"task": "TASK-LEAF write leaf.txt"}),
                    )]),
                    KIT.calls(&[function("m2", "wait", json!({"agent_id": "agent-1"}))]),
                    KIT.text("middle done"),
                ],
            ),
            (
                "TASK-LEAF",
                vec![
                    KIT.calls(&[function(
                        "g1",
                        "write_file",
                        json!({"file_path": "leaf.txt", "content": "leaf\n"}),
                    )]),
                    KIT.text("leaf done"),
                ],
            ),
        ],
        vec![],
    );
    let mut config = SessionConfig::default();
    config.max_subagent_depth = 2;
    let mut run = Run::with(KIT, server, config, |_| {});
    let events = run.input("PARENT-NESTED go deep");
    assert_eq!(run.read("leaf.txt"), "leaf\n");
    let middle_wait = child_ended(&events, "agent-1")
        .into_iter()
        .find(|e| e.tool_name == "wait")
        .unwrap();
    assert_eq!(json_of(&middle_wait.text)["output"], "leaf done");
    let nested = child_events(&events).into_iter().any(|(_, event)| match event.kind {
        EventKind::SubagentEvent { agent_id, event } => {
            agent_id == "agent-1"
                && matches!(&event.kind, EventKind::ToolCallStart { tool_name, .. } if tool_name == "write_file")
        }
        _ => false,
    });
    assert!(nested, "the grandchild's call arrives wrapped twice");
    // The middle agent had the spawn tool; the leaf (depth 2 = max) did not.
    let bodies: Vec<Value> = run
        .server
        .requests()
        .iter()
        .map(|r| r.json().clone())
        .collect();
    let first_with = |marker: &str, not: &str| {
        bodies
            .iter()
            .find(|b| {
                let text = b.to_string();
                text.contains(marker) && !text.contains(not)
            })
            .unwrap()
            .clone()
    };
    let middle = first_with("TASK-MIDDLE", "PARENT-NESTED");
    let leaf = first_with("TASK-LEAF", "TASK-MIDDLE");
    assert!(KIT.tool_names(&middle).contains(&"spawn_agent".to_string()));
    assert!(!KIT.tool_names(&leaf).contains(&"spawn_agent".to_string()));
}

#[test]
fn the_childs_events_reach_the_parent_stream_as_subagent_events_in_json() {
    let server = Server::start_routed(
        vec![
            (
                "PARENT-JSON",
                vec![
                    KIT.calls(&[function("p1", "spawn_agent", json!({"task": "TASK-JSON"}))]),
                    KIT.calls(&[function("p2", "wait", json!({"agent_id": "agent-1"}))]),
                    KIT.text("ok"),
                ],
            ),
            (
                "TASK-JSON",
                vec![
                    KIT.calls(&[function(
                        "c1",
                        "shell",
                        json!({"command": "echo from the child"}),
                    )]),
                    KIT.text("child finished"),
                ],
            ),
        ],
        vec![],
    );
    let mut run = Run::with(KIT, server, SessionConfig::default(), |_| {});
    let events = run.input("PARENT-JSON go");
    let parent_id = run.session.id().to_string();
    let wrapped = events
        .iter()
        .find(|e| match &e.kind {
            EventKind::SubagentEvent { event, .. } => {
                matches!(event.kind, EventKind::ToolCallEnd { .. })
            }
            _ => false,
        })
        .expect("the child's TOOL_CALL_END, wrapped");
    let line: Value = json_of(&wrapped.to_string());
    assert_eq!(line["kind"], "subagent_event");
    assert_eq!(line["session_id"], parent_id.as_str());
    assert_eq!(line["data"]["agent_id"], "agent-1");
    let inner = &line["data"]["event"];
    assert_eq!(inner["kind"], "tool_call_end");
    assert_ne!(
        inner["session_id"],
        parent_id.as_str(),
        "the child's own id"
    );
    assert!(
        inner["data"]["output"]
            .as_str()
            .unwrap()
            .contains("from the child")
    );
    // The JSON line reads back as the same event.
    let back: SessionEvent = serde_json::from_value(line.clone()).unwrap();
    assert_eq!(back.to_string(), wrapped.to_string());
    // The child's whole life is there, in its own order.
    let kinds: Vec<&str> = child_events(&events)
        .iter()
        .map(|(_, e)| e.kind.name())
        .collect();
    assert_eq!(kinds.first(), Some(&"session_start"));
    let order = [
        "user_input",
        "tool_call_start",
        "tool_call_end",
        "processing_end",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|k| kinds.iter().position(|n| n == k).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{kinds:?}");
}

#[test]
fn send_input_steers_a_running_child_or_gives_a_finished_one_new_work_and_close_ends_it() {
    let steer = "STEER mention the colour blue";
    let server = Server::start_routed(
        vec![
            (
                "PARENT-CONVERSE",
                vec![
                    KIT.calls(&[function(
                        "p1",
                        "spawn_agent",
                        json!({"task": "TASK-GATED wait for go"}),
                    )]),
                    KIT.calls(&[function(
                        "p2",
                        "wait",
                        json!({"agent_id": "agent-1", "timeout_ms": 200}),
                    )]),
                    KIT.calls(&[function(
                        "p3",
                        "send_input",
                        json!({"agent_id": "agent-1", "message": steer}),
                    )]),
                    KIT.calls(&[function("p4", "wait", json!({"agent_id": "agent-1"}))]),
                    KIT.calls(&[function(
                        "p5",
                        "send_input",
                        json!({"agent_id": "agent-1", "message": "FOLLOW-UP one more thing"}),
                    )]),
                    KIT.calls(&[function("p6", "wait", json!({"agent_id": "agent-1"}))]),
                    KIT.calls(&[function(
                        "p7",
                        "close_agent",
                        json!({"agent_id": "agent-1"}),
                    )]),
                    KIT.calls(&[function("p8", "wait", json!({"agent_id": "agent-1"}))]),
                    KIT.text("conversation over"),
                ],
            ),
            (
                "TASK-GATED",
                vec![
                    KIT.calls(&[function(
                        "c1",
                        "shell",
                        json!({"command": "until [ -e go ]; do sleep 0.02; done; echo released"}),
                    )]),
                    KIT.text("gated work done, blue"),
                    KIT.text("follow-up handled"),
                ],
            ),
        ],
        vec![],
    );
    let mut run = Run::with(KIT, server, SessionConfig::default(), |_| {});
    run.session
        .submit("PARENT-CONVERSE talk to the child")
        .unwrap();
    let mut events = Vec::new();
    for event in run.events.by_ref() {
        let release = matches!(&event.kind, EventKind::ToolCallEnd { tool_name, .. } if tool_name == "send_input");
        let done = matches!(event.kind, EventKind::ProcessingEnd { .. });
        events.push(event);
        if release {
            std::fs::write(run.dir.path().join("go"), "").unwrap();
        }
        if done {
            break;
        }
    }
    let parent: Vec<Ended> = ended(&events);
    let by_id = |n: usize| parent[n].clone();
    assert_eq!(parent.len(), 8, "{parent:?}");
    let running = json_of(&by_id(1).text);
    assert_eq!(running["status"], "running");
    assert!(
        by_id(2).text.contains("reaches the agent at its next step"),
        "{}",
        by_id(2).text
    );
    let first = json_of(&by_id(3).text);
    assert_eq!(first["output"], "gated work done, blue");
    assert_eq!(first["success"], true);
    assert!(
        by_id(4).text.contains("now working on your message"),
        "{}",
        by_id(4).text
    );
    let second = json_of(&by_id(5).text);
    assert_eq!(second["output"], "follow-up handled");
    assert_eq!(second["turns_used"], 3);
    let closed = json_of(&by_id(6).text);
    assert_eq!(closed["status"], "closed");
    assert!(by_id(7).is_error);
    assert!(
        by_id(7).text.contains("there is no subagent agent-1"),
        "{}",
        by_id(7).text
    );
    // The steer reached the child's next model call as its latest user message.
    let child_bodies: Vec<Value> = run
        .server
        .requests()
        .iter()
        .map(|r| r.json().clone())
        .filter(|b| !b.to_string().contains("PARENT-CONVERSE"))
        .collect();
    assert_eq!(child_bodies.len(), 3);
    assert_eq!(KIT.last_user_text(&child_bodies[1]), steer);
    assert_eq!(
        KIT.last_user_text(&child_bodies[2]),
        "FOLLOW-UP one more thing"
    );
    // Closing it ended its session.
    assert!(
        child_events(&events)
            .iter()
            .any(|(_, e)| matches!(e.kind, EventKind::SessionEnd { .. }))
    );
}

#[test]
fn a_working_dir_scopes_the_child_and_a_missing_one_is_refused() {
    let server = Server::start_routed(
        vec![
            (
                "PARENT-SCOPE",
                vec![
                    KIT.calls(&[function(
                        "p0",
                        "spawn_agent",
                        json!({"task": "never runs", "working_dir": "missing"}),
                    )]),
                    KIT.calls(&[function(
                        "p1",
                        "spawn_agent",
                        json!({"task": "TASK-SCOPED", "working_dir": "pkg"}),
                    )]),
                    KIT.calls(&[function("p2", "wait", json!({"agent_id": "agent-1"}))]),
                    KIT.text("ok"),
                ],
            ),
            (
                "TASK-SCOPED",
                vec![
                    KIT.calls(&[
                        function(
                            "c1",
                            "write_file",
                            json!({"file_path": "out.txt", "content": "inside\n"}),
                        ),
                        function("c2", "shell", json!({"command": "pwd"})),
                        function(
                            "c3",
                            "write_file",
                            json!({"file_path": "../escape.txt", "content": "x"}),
                        ),
                    ]),
                    KIT.text("scoped work done"),
                ],
            ),
        ],
        vec![],
    );
    let mut run = Run::with(KIT, server, SessionConfig::default(), |dir: &Path| {
        std::fs::create_dir_all(dir.join("pkg")).unwrap();
    });
    let events = run.input("PARENT-SCOPE work in pkg");
    let parent = ended(&events);
    assert!(parent[0].is_error);
    assert!(
        parent[0].text.contains("missing does not exist"),
        "{}",
        parent[0].text
    );
    assert_eq!(run.read("pkg/out.txt"), "inside\n");
    assert!(!run.path("out.txt").exists() && !run.path("escape.txt").exists());
    let child = child_ended(&events, "agent-1");
    let pwd = child.iter().find(|e| e.tool_name == "shell").unwrap();
    let pkg = run.dir.path().join("pkg").display().to_string();
    assert!(pwd.text.contains(&pkg), "{}", pwd.text);
    let escape = child
        .iter()
        .find(|e| e.tool_name == "write_file" && e.is_error)
        .expect("the escape is refused");
    assert!(
        escape.text.contains("outside the working directory"),
        "{}",
        escape.text
    );
    let child_body = run
        .server
        .requests()
        .iter()
        .map(|r| r.json().clone())
        .find(|b| b.to_string().contains("TASK-SCOPED") && !b.to_string().contains("PARENT-SCOPE"))
        .unwrap();
    let prompt = KIT.system_prompt(&child_body);
    assert!(
        prompt.contains(&format!("Working directory: {pkg}")),
        "{prompt}"
    );
    assert!(prompt.contains(&format!("only inside {pkg}")));
}

#[test]
fn a_model_override_and_a_turn_limit_apply_to_the_child() {
    let server = Server::start_routed(
        vec![
            (
                "PARENT-LIMIT",
                vec![
                    KIT.calls(&[function(
                        "p1",
                        "spawn_agent",
                        json!({"task": "TASK-LIMITED", "model": "claude-haiku-4-5", "max_turns": 1}),
                    )]),
                    KIT.calls(&[function("p2", "wait", json!({"agent_id": "agent-1"}))]),
                    KIT.text("ok"),
                ],
            ),
            (
                "TASK-LIMITED",
                vec![KIT.calls(&[function("c1", "read_file", json!({"file_path": "a.txt"}))])],
            ),
        ],
        vec![],
    );
    let mut run = Run::with(KIT, server, SessionConfig::default(), |dir: &Path| {
        std::fs::write(dir.join("a.txt"), "a\n").unwrap();
    });
    let events = run.input("PARENT-LIMIT go");
    let wait = ended(&events)
        .into_iter()
        .find(|e| e.tool_name == "wait")
        .unwrap();
    let result = json_of(&wait.text);
    assert_eq!(result["success"], false, "stopped by its turn limit");
    assert_eq!(result["status"], "failed");
    assert_eq!(result["turns_used"], 1);
    let requests = run.server.requests();
    let child = requests
        .iter()
        .map(|r| r.json().clone())
        .find(|b| !b.to_string().contains("PARENT-LIMIT"))
        .unwrap();
    assert_eq!(child["model"], "claude-haiku-4-5");
    assert_eq!(requests.len(), 4, "the child made one model call");
    let limit = child_events(&events)
        .into_iter()
        .any(|(_, e)| matches!(e.kind, EventKind::TurnLimit { .. }));
    assert!(limit);
}
