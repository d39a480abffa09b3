//! Bench section `loop`: the session loop's own cost per round (a 200-round session against
//! a loopback server answering instantly, minus the time spent inside the provider), abort
//! latency (stalled stream, running command), and resident memory per idle session.
//! Measures; never asserts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
use agentloop::llm::ToolDefinition;
use agentloop::llm::anthropic::Anthropic;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Client, HttpOptions, Provider, Request, StreamEvent};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Events, Session, SessionConfig};
use agentloop::tools::{self, RegisteredTool, ToolOutput};
use agentloop::{CancelToken, Result};
use serde_json::json;

use crate::server::{Reply, Server};
use crate::session_sse::{anthropic_sse, partial_text_sse};

use crate::{Row, ms};

const ROUNDS: usize = 200;
const ABORT_RUNS: usize = 10;
const IDLE_SESSIONS: usize = 100;

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "loop",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

/// A provider wrapper that adds up the time spent inside `open` and the stream's `next`.
pub(crate) struct Timed<P> {
    pub(crate) inner: P,
    pub(crate) nanos: Arc<AtomicU64>,
}

impl<P: Provider> Provider for Timed<P> {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn open(
        &self,
        request: &Request,
        cancel: &CancelToken,
    ) -> Result<Box<dyn Iterator<Item = Result<StreamEvent>> + Send>> {
        let start = Instant::now();
        let stream = self.inner.open(request, cancel);
        self.nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let stream = stream?;
        let nanos = self.nanos.clone();
        Ok(Box::new(TimedStream {
            inner: stream,
            nanos,
        }))
    }
}

struct TimedStream {
    inner: Box<dyn Iterator<Item = Result<StreamEvent>> + Send>,
    nanos: Arc<AtomicU64>,
}

impl Iterator for TimedStream {
    type Item = Result<StreamEvent>;
    fn next(&mut self) -> Option<Self::Item> {
        let start = Instant::now();
        let item = self.inner.next();
        self.nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        item
    }
}

/// A tool that returns at once. It never waits, so it honours a cancel as promptly as any
/// tool can, and is marked so: the loop runs it on the round's own thread. (The unmarked
/// variant, run on a helper thread the loop can abandon, has its own row.)
pub(crate) fn noop_tool() -> RegisteredTool {
    unmarked_noop_tool().returning_on_cancel()
}

fn unmarked_noop_tool() -> RegisteredTool {
    RegisteredTool::new(
        ToolDefinition {
            name: "noop".into(),
            description: "does nothing".into(),
            parameters: json!({"type": "object"}).into(),
            freeform: None,
        },
        |_input, _ctx| Ok(ToolOutput::text("ok")),
    )
}

pub(crate) fn env() -> (tempfile::TempDir, Arc<dyn ExecutionEnvironment>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    (dir, env)
}

/// Drains `events` on a named thread until SESSION_END; returns the handle to join.
pub(crate) fn drain(events: Events) -> std::thread::JoinHandle<usize> {
    std::thread::Builder::new()
        .name("bench-events".into())
        .spawn(move || events.count())
        .expect("spawn the event reader")
}

/// Runs one input of ROUNDS model calls through `provider`; returns (total, provider time,
/// events seen).
fn session_run(provider: impl Provider + 'static, id: &str) -> (Duration, Duration, usize) {
    session_run_with(provider, id, noop_tool())
}

fn session_run_with(
    provider: impl Provider + 'static,
    id: &str,
    tool: RegisteredTool,
) -> (Duration, Duration, usize) {
    let nanos = Arc::new(AtomicU64::new(0));
    let client = Client::new().with_provider(Timed {
        inner: provider,
        nanos: nanos.clone(),
    });
    let profile = ProviderProfile::new(id, "bench-model")
        .with_base_instructions("You are a benchmark agent.")
        .with_tool(tool);
    let (_dir, env) = env();
    let session = Session::new(profile, env, client, SessionConfig::default()).expect("session");
    let reader = drain(session.events());
    let start = Instant::now();
    let outcome = session.run("go").expect("run");
    let total = start.elapsed();
    assert_eq!(outcome.rounds, ROUNDS - 1, "every round ran");
    session.close();
    let events = reader.join().expect("reader");
    (
        total,
        Duration::from_nanos(nanos.load(Ordering::Relaxed)),
        events,
    )
}

fn loop_overhead() -> Vec<Row> {
    let mut rows = Vec::new();

    // Against the loopback server speaking the Anthropic wire format.
    let mut replies: Vec<Reply> = (0..ROUNDS - 1)
        .map(|i| {
            let id = format!("toolu_{i}");
            Reply::sse(anthropic_sse("", &[(id.as_str(), "noop", json!({"i": i}))]))
        })
        .collect();
    replies.push(Reply::sse(anthropic_sse("done", &[])));
    let server = Server::start(replies);
    let anthropic = Anthropic::new("bench-key")
        .with_base_url(server.url())
        .with_http_options(HttpOptions::default().with_env_proxy(false));
    let (total, provider, events) = session_run(anthropic, "anthropic");
    let per_round = (total.saturating_sub(provider)) / ROUNDS as u32;
    rows.push(row(
        format!("{ROUNDS}-round session over loopback HTTP: total"),
        ms(total),
        "",
    ));
    rows.push(row(
        "  of which inside the provider (HTTP + server + decode)",
        ms(provider),
        "",
    ));
    rows.push(row(
        "  loop overhead per round (total − provider) / rounds",
        ms(per_round),
        "< 1 ms",
    ));
    rows.push(row(
        "  events delivered to the host",
        events.to_string(),
        "",
    ));

    // The same shape with the scripted model: no HTTP at all.
    let script = |request: &agentloop::llm::Request| {
        let calls = request
            .messages
            .iter()
            .filter(|m| m.role == agentloop::llm::Role::Tool)
            .count();
        if calls < ROUNDS - 1 {
            ScriptedTurn::tool_call("noop", json!({ "i": calls }))
        } else {
            ScriptedTurn::text("done")
        }
    };
    let (total, provider, _) = session_run(ScriptedModel::dynamic(script), "scripted");
    rows.push(row(
        format!("{ROUNDS}-round session, scripted model: loop overhead per round"),
        ms(total.saturating_sub(provider) / ROUNDS as u32),
        "< 1 ms",
    ));
    let (total, provider, _) = session_run_with(
        ScriptedModel::dynamic(script),
        "scripted",
        unmarked_noop_tool(),
    );
    rows.push(row(
        "  the same, the tool not marked `returning_on_cancel` (helper thread per call)",
        ms(total.saturating_sub(provider) / ROUNDS as u32),
        "",
    ));
    rows
}

fn median_and_max(mut samples: Vec<Duration>) -> String {
    samples.sort();
    format!(
        "{} / {}",
        ms(samples[samples.len() / 2]),
        ms(*samples.last().unwrap())
    )
}

fn wait_for(events: &mut Events, what: impl Fn(&EventKind) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = events.recv_timeout(left).expect("the awaited event");
        if what(&event.kind) {
            return;
        }
    }
}

fn abort_latency() -> Vec<Row> {
    // A stalled stream: the server sends half an answer and then nothing.
    let mut stalled = Vec::new();
    for _ in 0..ABORT_RUNS {
        let server = Server::start(vec![
            Reply::sse(partial_text_sse("half an answer and then")).then_stall(),
        ]);
        let anthropic = Anthropic::new("bench-key")
            .with_base_url(server.url())
            .with_http_options(HttpOptions::default().with_env_proxy(false));
        let client = Client::new().with_provider(anthropic);
        let (_dir, env) = env();
        let profile = ProviderProfile::new("anthropic", "bench-model");
        let session =
            Session::new(profile, env, client, SessionConfig::default()).expect("session");
        let mut events = session.events();
        session.submit("go").expect("submit");
        wait_for(&mut events, |k| {
            matches!(k, EventKind::AssistantTextDelta { .. })
        });
        let start = Instant::now();
        session.abort();
        wait_for(&mut events, |k| matches!(k, EventKind::SessionEnd { .. }));
        stalled.push(start.elapsed());
    }

    // A running command: `sleep 30` under the shell tool.
    let mut running = Vec::new();
    for _ in 0..ABORT_RUNS {
        let model = ScriptedModel::new(vec![ScriptedTurn::tool_call(
            "shell",
            json!({"command": "echo started; sleep 30", "timeout_ms": 60_000}),
        )]);
        let client = Client::new().with_provider(model);
        let (_dir, env) = env();
        let profile = ProviderProfile::new("scripted", "bench-model").with_tool(tools::shell());
        let session =
            Session::new(profile, env, client, SessionConfig::default()).expect("session");
        let mut events = session.events();
        session.submit("go").expect("submit");
        wait_for(
            &mut events,
            |k| matches!(k, EventKind::ToolCallOutputDelta { delta, .. } if delta.contains("started")),
        );
        let start = Instant::now();
        session.abort();
        wait_for(&mut events, |k| matches!(k, EventKind::SessionEnd { .. }));
        running.push(start.elapsed());
    }
    vec![
        row(
            format!("abort → SESSION_END, stalled stream (median / max of {ABORT_RUNS})"),
            median_and_max(stalled),
            "< 100 ms",
        ),
        row(
            format!("abort → SESSION_END, `sleep 30` running (median / max of {ABORT_RUNS})"),
            median_and_max(running),
            "< 500 ms",
        ),
    ]
}

/// Resident set size in bytes (`VmRSS` of /proc/self/status, which is statm's resident
/// count already multiplied by the page size).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

fn idle_memory() -> Vec<Row> {
    let make = |dir: &std::path::Path| {
        let env: Arc<dyn ExecutionEnvironment> =
            Arc::new(LocalExecutionEnvironment::new(dir).unwrap());
        let client = Client::new().with_provider(ScriptedModel::new(vec![]));
        let profile = ProviderProfile::new("scripted", "bench-model")
            .with_base_instructions("You are a benchmark agent.")
            .with_tool(tools::shell())
            .with_tool(tools::read_file());
        let session =
            Session::new(profile, env, client, SessionConfig::default()).expect("session");
        let mut events = session.events();
        wait_for(&mut events, |k| matches!(k, EventKind::SessionStart { .. }));
        (session, events)
    };
    let dir = tempfile::tempdir().expect("temp dir");
    // Warm up lazily initialised state (allocator arenas, statics) before measuring.
    drop(make(dir.path()));
    let before = rss_bytes();
    let sessions: Vec<_> = (0..IDLE_SESSIONS).map(|_| make(dir.path())).collect();
    let after = rss_bytes();
    let per_session = after.saturating_sub(before) / IDLE_SESSIONS as u64;
    drop(sessions);
    vec![row(
        format!("RSS per idle session ({IDLE_SESSIONS} sessions, VmRSS delta)"),
        format!("{:.1} KB", per_session as f64 / 1024.0),
        "< 200 KB",
    )]
}

/// The section's rows.
pub fn run() -> Vec<Row> {
    // Memory first: the HTTP rounds before it would leave the allocator's free lists in a
    // state that moves the per-session delta by a few KB from one build to the next.
    let idle = idle_memory();
    let mut rows = loop_overhead();
    rows.extend(abort_latency());
    rows.extend(idle);
    rows
}
