//! Bench section `subagents`: how long `spawn_agent` takes to start a child (to its
//! `SESSION_START` and to its first model request), how much of the wall time N children
//! spending 200 ms each in a command overlap, and how long closing a parent with N
//! children blocked in `sleep 30` takes. Real sessions of the Anthropic profile against a
//! loopback server; real bash. Measures; never asserts.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::anthropic::Anthropic;
use agentloop::llm::{Client, HttpOptions};
use agentloop::profiles;
use agentloop::session::{EventKind, Events, Session, SessionConfig, SessionEvent};
use serde_json::{Value, json};

// The loopback server and the Anthropic SSE builder, loaded once in `main.rs`.
use crate::server::{Reply, Server};
use crate::session_sse::anthropic_sse;

use crate::{Row, ms};

const SPAWN_RUNS: usize = 10;
const CHILDREN: usize = 4;

fn row(name: impl Into<String>, value: String) -> Row {
    Row {
        section: "subagents",
        name: name.into(),
        value,
        target: String::new(),
    }
}

fn calls(calls: &[(&str, &str, Value)]) -> Reply {
    Reply::sse(anthropic_sse("", calls))
}

fn text(text: &str) -> Reply {
    Reply::sse(anthropic_sse(text, &[]))
}

fn session(server: &Server, dir: &std::path::Path) -> (Session, Events) {
    let client = Client::new().with_provider(
        Anthropic::new("sk-ant-bench-FAKEKEY0123456789abcdefghij")
            .with_base_url(server.url())
            .with_http_options(HttpOptions::default().with_env_proxy(false)),
    );
    let env = Arc::new(LocalExecutionEnvironment::new(dir).unwrap());
    let session = Session::new(
        profiles::anthropic("claude-sonnet-4-5"),
        env,
        client,
        SessionConfig::default(),
    )
    .expect("session starts");
    let events = session.events();
    (session, events)
}

fn until(events: &mut Events, stop: impl Fn(&SessionEvent) -> bool) -> Vec<SessionEvent> {
    let mut out = Vec::new();
    for event in events.by_ref() {
        let done = stop(&event);
        out.push(event);
        if done {
            break;
        }
    }
    out
}

fn processing_end(event: &SessionEvent) -> bool {
    matches!(event.kind, EventKind::ProcessingEnd { .. })
}

fn since(earlier: SystemTime, later: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or_default()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Spawn to the child's SESSION_START and to its first model request.
fn spawn_latency() -> Vec<Row> {
    let mut to_start = Vec::new();
    let mut to_request = Vec::new();
    for _ in 0..SPAWN_RUNS {
        let server = Server::start_routed(
            vec![
                (
                    "PARENT",
                    vec![
                        calls(&[("p1", "spawn_agent", json!({"task": "CHILD"}))]),
                        calls(&[("p2", "wait", json!({"agent_id": "agent-1"}))]),
                        text("done"),
                    ],
                ),
                ("CHILD", vec![text("child done")]),
            ],
            vec![],
        );
        let dir = tempfile::tempdir().unwrap();
        let (session, mut events) = session(&server, dir.path());
        session.submit("PARENT go").unwrap();
        let seen = until(&mut events, processing_end);
        let spawn = seen
            .iter()
            .find(|e| matches!(&e.kind, EventKind::ToolCallStart { tool_name, .. } if tool_name == "spawn_agent"))
            .unwrap()
            .timestamp;
        let child = |name: &str| {
            seen.iter()
                .find_map(|e| match &e.kind {
                    EventKind::SubagentEvent { event, .. } if event.kind.name() == name => {
                        Some(event.timestamp)
                    }
                    _ => None,
                })
                .unwrap()
        };
        to_start.push(since(spawn, child("session_start")));
        to_request.push(since(spawn, child("assistant_text_start")));
    }
    vec![
        row(
            format!("spawn_agent to the child's SESSION_START (median of {SPAWN_RUNS})"),
            ms(median(to_start)),
        ),
        row(
            format!("spawn_agent to the child's first model call (median of {SPAWN_RUNS})"),
            ms(median(to_request)),
        ),
    ]
}

/// N children spawned in one round, each running `sleep 0.2`: wall time vs N × 200 ms.
fn overlap() -> Vec<Row> {
    let mut routes = Vec::new();
    let spawns: Vec<(String, Value)> = (0..CHILDREN)
        .map(|i| (format!("s{i}"), json!({"task": format!("CHILD-{i}")})))
        .collect();
    let waits: Vec<(String, Value)> = (0..CHILDREN)
        .map(|i| {
            (
                format!("w{i}"),
                json!({"agent_id": format!("agent-{}", i + 1)}),
            )
        })
        .collect();
    let as_calls = |list: &[(String, Value)], tool: &'static str| {
        let owned: Vec<(&str, &str, Value)> = list
            .iter()
            .map(|(id, args)| (id.as_str(), tool, args.clone()))
            .collect();
        calls(&owned)
    };
    routes.push((
        "PARENT".to_string(),
        vec![
            as_calls(&spawns, "spawn_agent"),
            as_calls(&waits, "wait"),
            text("all done"),
        ],
    ));
    for i in 0..CHILDREN {
        routes.push((
            format!("CHILD-{i}"),
            vec![
                calls(&[("c", "shell", json!({"command": "sleep 0.2"}))]),
                text("slept"),
            ],
        ));
    }
    let server = Server::start_routed(
        routes
            .iter()
            .map(|(marker, replies)| (marker.as_str(), replies.clone()))
            .collect(),
        vec![],
    );
    let dir = tempfile::tempdir().unwrap();
    let (session, mut events) = session(&server, dir.path());
    let started = Instant::now();
    session.submit("PARENT run them all").unwrap();
    until(&mut events, processing_end);
    let wall = started.elapsed();
    vec![row(
        format!(
            "{CHILDREN} children x `sleep 0.2`, spawn to all waited (serial would be {})",
            ms(Duration::from_millis(200) * CHILDREN as u32)
        ),
        ms(wall),
    )]
}

/// Closing a parent whose N children each block in `sleep 30`.
fn close_latency() -> Vec<Row> {
    let spawns: Vec<(String, Value)> = (0..CHILDREN)
        .map(|i| (format!("s{i}"), json!({"task": format!("SLEEPER-{i}")})))
        .collect();
    let owned: Vec<(&str, &str, Value)> = spawns
        .iter()
        .map(|(id, args)| (id.as_str(), "spawn_agent", args.clone()))
        .collect();
    let mut routes = vec![("PARENT", vec![calls(&owned), text("spawned")])];
    let markers: Vec<String> = (0..CHILDREN).map(|i| format!("SLEEPER-{i}")).collect();
    for marker in &markers {
        routes.push((
            marker.as_str(),
            vec![calls(&[(
                "c",
                "shell",
                json!({"command": "echo up; exec sleep 30"}),
            )])],
        ));
    }
    let server = Server::start_routed(routes, vec![]);
    let dir = tempfile::tempdir().unwrap();
    let (session, mut events) = session(&server, dir.path());
    session.submit("PARENT start sleepers").unwrap();
    // Wait until the parent is idle and every child's command has printed.
    let mut up = 0;
    let mut idle = false;
    for event in events.by_ref() {
        match &event.kind {
            EventKind::ProcessingEnd { .. } => idle = true,
            EventKind::SubagentEvent { event, .. } => {
                if matches!(&event.kind, EventKind::ToolCallOutputDelta { delta, .. } if delta.contains("up"))
                {
                    up += 1;
                }
            }
            _ => {}
        }
        if idle && up == CHILDREN {
            break;
        }
    }
    let started = Instant::now();
    session.close();
    until(&mut events, |e| {
        matches!(e.kind, EventKind::SessionEnd { .. })
    });
    vec![row(
        format!("close() to SESSION_END with {CHILDREN} children in `sleep 30`"),
        ms(started.elapsed()),
    )]
}

pub fn run() -> Vec<Row> {
    let mut rows = spawn_latency();
    rows.extend(overlap());
    rows.extend(close_latency());
    rows
}
