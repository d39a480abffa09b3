//! Bench section `transcript`: what writing the transcript costs the loop. The `loop`
//! section's 200-round session (loopback Anthropic server, and the scripted model) runs
//! without and with a transcript, alternating, several times; the rows compare medians.
//! Measures; never asserts.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
use agentloop::llm::anthropic::Anthropic;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Client, HttpOptions, Provider, Request, Role};
use agentloop::profiles::ProviderProfile;
use agentloop::session::transcript::Transcript;
use agentloop::session::{Session, SessionConfig, Turn};
use agentloop::tools;
use serde_json::json;

use crate::server::{Reply, Server};
use crate::session_sse::anthropic_sse;

use crate::Row;
use crate::loop_::{Timed, noop_tool};

const ROUNDS: usize = 200;
/// Runs of each variant, interleaved in rotating order; the rows report medians and
/// minima (the minimum is the run least disturbed by other work on the machine).
const RUNS: usize = 15;

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "transcript",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// `a − b` in microseconds, signed (noise can make it negative).
fn signed_us(a: Duration, b: Duration) -> f64 {
    (a.as_secs_f64() - b.as_secs_f64()) * 1e6
}

/// One measured run: wall time and time inside the provider.
struct Run {
    total: Duration,
    provider: Duration,
}

impl Run {
    fn per_round(&self) -> Duration {
        self.total / ROUNDS as u32
    }

    fn overhead_per_round(&self) -> Duration {
        self.total.saturating_sub(self.provider) / ROUNDS as u32
    }
}

/// Runs one input of ROUNDS model calls through `provider`, with `config`.
fn session_run(
    provider: impl Provider + 'static,
    id: &str,
    dir: &Path,
    config: SessionConfig,
) -> Run {
    let nanos = Arc::new(AtomicU64::new(0));
    let client = Client::new().with_provider(Timed {
        inner: provider,
        nanos: nanos.clone(),
    });
    // The profile of the `loop` section, plus the shared file tools, so that the settings
    // the transcript records once hold realistic tool definitions.
    let profile = ProviderProfile::new(id, "bench-model")
        .with_base_instructions("You are a benchmark agent.")
        .with_tool(noop_tool())
        .with_tool(tools::read_file())
        .with_tool(tools::write_file())
        .with_tool(tools::edit_file())
        .with_tool(tools::shell());
    let env: Arc<dyn ExecutionEnvironment> = Arc::new(LocalExecutionEnvironment::new(dir).unwrap());
    let session = Session::new(profile, env, client, config).expect("session");
    let start = Instant::now();
    let outcome = session.run("go").expect("run");
    let total = start.elapsed();
    assert_eq!(outcome.rounds, ROUNDS - 1, "every round ran");
    drop(session);
    Run {
        total,
        provider: Duration::from_nanos(nanos.load(Ordering::Relaxed)),
    }
}

fn loopback_provider() -> (Server, Anthropic) {
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
    (server, anthropic)
}

fn scripted_provider() -> ScriptedModel {
    ScriptedModel::dynamic(|request| {
        let calls = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .count();
        if calls < ROUNDS - 1 {
            ScriptedTurn::tool_call("noop", json!({ "i": calls }))
        } else {
            ScriptedTurn::text("done")
        }
    })
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Which transcript a run writes.
#[derive(Clone, Copy, PartialEq)]
enum Writing {
    None,
    History,
    HistoryAndEvents,
}

fn config_for(writing: Writing, path: &Path) -> SessionConfig {
    match writing {
        Writing::None => SessionConfig::default(),
        Writing::History => SessionConfig::default().with_transcript(path),
        Writing::HistoryAndEvents => SessionConfig::default()
            .with_transcript(path)
            .with_transcript_events(true),
    }
}

/// Runs every variant RUNS times, interleaved in rotating order; rows for `label`.
fn compare(label: &str, mut one_run: impl FnMut(&Path, SessionConfig) -> Run) -> Vec<Row> {
    let variants = [Writing::None, Writing::History, Writing::HistoryAndEvents];
    let mut runs: Vec<Vec<Run>> = variants.iter().map(|_| Vec::new()).collect();
    let mut sizes = [0u64; 3];
    let mut last_transcript = None;
    for round in 0..RUNS {
        for offset in 0..variants.len() {
            let index = (round + offset) % variants.len();
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("transcript.jsonl");
            runs[index].push(one_run(dir.path(), config_for(variants[index], &path)));
            sizes[index] = std::fs::metadata(&path).map_or(0, |m| m.len());
            if variants[index] == Writing::History {
                last_transcript = Some(Transcript::read(&path).expect("transcript"));
            }
        }
    }
    let stat = |index: usize, pick: fn(&Run) -> Duration| {
        let samples: Vec<Duration> = runs[index].iter().map(pick).collect();
        let min = *samples.iter().min().expect("runs");
        (median(samples), min)
    };
    let (median_none, min_none) = stat(0, Run::per_round);
    let (median_history, min_history) = stat(1, Run::per_round);
    let (median_events, min_events) = stat(2, Run::per_round);
    let (overhead_none, _) = stat(0, Run::overhead_per_round);
    let percent = |micros: f64, whole: Duration| {
        format!("{:+.1} %", micros / (whole.as_secs_f64() * 1e6) * 100.0)
    };
    let delta = |a: Duration, b: Duration| {
        let d = signed_us(a, b);
        format!("{d:+.1} µs = {}", percent(d, b))
    };
    let isolated = last_transcript.map_or(Duration::ZERO, |t| isolated_write_cost(&t));
    vec![
        row(
            format!("{label}: per round, no transcript (median / min of {RUNS})"),
            format!("{} / {}", us(median_none), us(min_none)),
            "",
        ),
        row(
            "  of which loop overhead (total − provider), median",
            us(overhead_none),
            "",
        ),
        row(
            "  per round with a transcript (median / min)",
            format!("{} / {}", us(median_history), us(min_history)),
            "",
        ),
        row(
            "  transcript cost per round, medians (with − without)",
            delta(median_history, median_none),
            "< 5 %",
        ),
        row(
            "  transcript cost per round, minima (with − without)",
            delta(min_history, min_none),
            "< 5 %",
        ),
        row(
            "  the same records serialised + written alone, per round",
            format!(
                "{} = {}",
                us(isolated),
                percent(isolated.as_secs_f64() * 1e6, median_none)
            ),
            "< 5 %",
        ),
        row(
            "  with every event recorded too: cost per round, medians",
            delta(median_events, median_none),
            "",
        ),
        row(
            "  with every event recorded too: cost per round, minima",
            delta(min_events, min_none),
            "",
        ),
        row(
            "  transcript size per round (history / with events)",
            format!(
                "{} B / {} B",
                sizes[1] / ROUNDS as u64,
                sizes[2] / ROUNDS as u64
            ),
            "",
        ),
    ]
}

/// The writer's work for `transcript`'s records, done alone: each turn and each request
/// record serialised into a reused buffer and written with one `write_all` per line,
/// plus the per-request comparison of the settings with the previous ones (what decides
/// that the system prompt and tools are not written again). Median of 5, per round.
fn isolated_write_cost(transcript: &Transcript) -> Duration {
    #[derive(serde::Serialize)]
    struct TurnLine<'a> {
        r#type: &'static str,
        turn: &'a Turn,
    }
    #[derive(serde::Serialize)]
    struct RequestLine {
        r#type: &'static str,
        turns: usize,
    }
    let turns = transcript.history().turns();
    let settings: Vec<Request> = (0..transcript.request_count().min(2))
        .map(|i| {
            let mut request = transcript.request(i).expect("request");
            request.messages.truncate(1);
            request
        })
        .collect();
    let mut samples = Vec::new();
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut file = std::fs::File::create(dir.path().join("t.jsonl")).expect("file");
        let mut line = Vec::with_capacity(4096);
        let start = Instant::now();
        let mut write = |line: &mut Vec<u8>| {
            line.push(b'\n');
            file.write_all(line).expect("write");
            file.flush().expect("flush");
            line.clear();
        };
        for (index, turn) in turns.iter().enumerate() {
            if matches!(turn, Turn::Assistant(_)) {
                let same =
                    settings.len() == 2 && std::hint::black_box(&settings[0]) == &settings[1];
                std::hint::black_box(same);
                serde_json::to_writer(
                    &mut line,
                    &RequestLine {
                        r#type: "request",
                        turns: index,
                    },
                )
                .expect("serialise");
                write(&mut line);
            }
            serde_json::to_writer(
                &mut line,
                &TurnLine {
                    r#type: "turn",
                    turn,
                },
            )
            .expect("serialise");
            write(&mut line);
        }
        samples.push(start.elapsed());
    }
    median(samples) / ROUNDS as u32
}

/// The section's rows.
pub fn run() -> Vec<Row> {
    let mut rows = compare(
        &format!("{ROUNDS}-round session, loopback HTTP"),
        |dir, config| {
            let (_server, anthropic) = loopback_provider();
            session_run(anthropic, "anthropic", dir, config)
        },
    );
    rows.extend(compare(
        &format!("{ROUNDS}-round session, scripted model"),
        |dir, config| session_run(scripted_provider(), "scripted", dir, config),
    ));
    rows
}
