//! Bench section `scale`: N concurrent sessions in one process (`-- scale N`, default 300),
//! each with the scripted model and 20 real shell rounds, its events consumed as they come
//! by a few host threads (round-robin, `try_next`). Reports wall time, peak RSS and
//! threads (sampled from `/proc/self/status`), what is left after every session drops
//! (threads, RSS, child processes, and how much of the heap is still in use against what
//! the allocator holds) and failures; then the same N again in the same process, to show
//! whether the memory the first wave left behind is reused.
//! Measures; never asserts.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::Client;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Events, Session, SessionConfig, StopReason};
use agentloop::tools;
use serde_json::json;

use crate::Row;

const DEFAULT_SESSIONS: usize = 300;
pub const ROUNDS: usize = 20;
/// Host threads reading the sessions' events (each reads its share, one session at a time).
pub const CONSUMERS: usize = 4;

static SESSIONS: OnceLock<usize> = OnceLock::new();

/// Sets N (from `-- scale N`); the first call wins.
pub fn set_sessions(n: usize) {
    let _ = SESSIONS.set(n);
}

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "scale",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

/// A `Key:   123 kB` field of `/proc/self/status`, in its own unit (kB or a count).
pub fn status(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Child processes of this process: the `children` lists of all its threads.
pub fn children_pids() -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .flat_map(|t| {
            let text = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn children() -> usize {
    children_pids().len()
}

fn session(dir: &std::path::Path) -> (Session, Events) {
    let mut turns: Vec<ScriptedTurn> = (0..ROUNDS)
        .map(|r| ScriptedTurn::tool_call("shell", json!({"command": format!("echo round {r}")})))
        .collect();
    turns.push(ScriptedTurn::text("done"));
    let profile = ProviderProfile::new("scripted", "scripted-model").with_tool(tools::shell());
    let client = Client::new().with_provider(ScriptedModel::new(turns));
    let env = Arc::new(LocalExecutionEnvironment::new(dir).unwrap());
    let session = Session::new(profile, env, client, SessionConfig::default()).unwrap();
    let events = session.events();
    (session, events)
}

/// One session's event stream as a consumer sees it (also the `containers` section's).
pub struct Reading {
    events: Events,
    ok_calls: usize,
    /// `Some(completed)` once its `ProcessingEnd` was read.
    ended: Option<bool>,
}

impl Reading {
    pub fn new(events: Events) -> Reading {
        Reading {
            events,
            ok_calls: 0,
            ended: None,
        }
    }

    /// Reads what is buffered; returns whether anything was.
    fn drain(&mut self) -> bool {
        let mut read = false;
        while self.ended.is_none() {
            let Some(event) = self.events.try_next() else {
                break;
            };
            read = true;
            match event.kind {
                EventKind::ToolCallEnd { is_error, .. } if !is_error => self.ok_calls += 1,
                EventKind::ProcessingEnd {
                    stop_reason,
                    rounds,
                    ..
                } => {
                    self.ended = Some(
                        matches!(stop_reason, StopReason::Completed)
                            && rounds == ROUNDS
                            && self.ok_calls == ROUNDS,
                    );
                }
                _ => {}
            }
        }
        read
    }
}

/// Reads its share of the sessions round-robin (so no session's events pile up) until
/// every one ended; returns how many completed all rounds.
pub fn consume(mut share: Vec<Reading>) -> usize {
    while share.iter().any(|r| r.ended.is_none()) {
        let mut read = false;
        for reading in &mut share {
            read |= reading.drain();
        }
        if !read {
            thread::sleep(Duration::from_millis(1));
        }
    }
    share.iter().filter(|r| r.ended == Some(true)).count()
}

/// What one wave of N sessions measured.
struct Wave {
    wall: Duration,
    completed: usize,
    peak_threads: usize,
    peak_children: usize,
    dropped: Duration,
    threads_after: u64,
    children_after: usize,
    rss_after: u64,
}

/// Runs `n` sessions at once until all ended, then drops them all.
fn wave(n: usize, dir: &std::path::Path) -> Wave {
    let peak_threads = AtomicUsize::new(0);
    let peak_children = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    let completed = AtomicUsize::new(0);
    let started = Instant::now();
    let mut wall = Duration::ZERO;
    let mut live = Vec::with_capacity(n);
    thread::scope(|s| {
        thread::Builder::new()
            .name("bench-sampler".into())
            .spawn_scoped(s, || {
                while !done.load(Ordering::SeqCst) {
                    peak_threads.fetch_max(status("Threads:") as usize, Ordering::SeqCst);
                    peak_children.fetch_max(children(), Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(20));
                }
            })
            .unwrap();
        for _ in 0..n {
            let (session, events) = session(dir);
            session.submit("run the rounds").unwrap();
            live.push((session, Some(events)));
        }
        let mut shares: Vec<Vec<Reading>> = (0..CONSUMERS).map(|_| Vec::new()).collect();
        for (i, (_, events)) in live.iter_mut().enumerate() {
            shares[i % CONSUMERS].push(Reading::new(events.take().unwrap()));
        }
        let consumers: Vec<_> = shares
            .into_iter()
            .enumerate()
            .map(|(i, share)| {
                let completed = &completed;
                thread::Builder::new()
                    .name(format!("bench-consumer-{i}"))
                    .spawn_scoped(s, move || {
                        completed.fetch_add(consume(share), Ordering::SeqCst);
                    })
                    .unwrap()
            })
            .collect();
        for consumer in consumers {
            consumer.join().unwrap();
        }
        wall = started.elapsed();
        done.store(true, Ordering::SeqCst);
    });
    let dropping = Instant::now();
    drop(live);
    let dropped = dropping.elapsed();
    // Give exited threads a moment to leave /proc (joined threads are gone already).
    thread::sleep(Duration::from_millis(100));
    Wave {
        wall,
        completed: completed.load(Ordering::SeqCst),
        peak_threads: peak_threads.load(Ordering::SeqCst),
        peak_children: peak_children.load(Ordering::SeqCst),
        dropped,
        threads_after: status("Threads:"),
        children_after: children(),
        rss_after: status("VmRSS:"),
    }
}

/// The heap the allocator has handed out and still holds for this process, in KiB
/// (glibc's `mallinfo2`, summed over its arenas: `uordblks` in use; `arena` + `hblkhd`
/// obtained from the system).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap() -> Option<(u64, u64)> {
    // SAFETY: mallinfo2 takes no arguments and returns a plain struct.
    let info = unsafe { libc::mallinfo2() };
    Some((
        info.uordblks as u64 / 1024,
        (info.arena + info.hblkhd) as u64 / 1024,
    ))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap() -> Option<(u64, u64)> {
    None
}

pub fn run() -> Vec<Row> {
    let n = *SESSIONS.get_or_init(|| DEFAULT_SESSIONS);
    let dir = tempfile::tempdir().unwrap();
    let threads_before = status("Threads:");
    let rss_before = status("VmRSS:");
    let first = wave(n, dir.path());
    let peak_rss = status("VmHWM:");
    let peak_virtual = status("VmPeak:");
    let heap_after = heap();
    // The same again in the same process: is the memory the first wave left reused?
    let second = wave(n, dir.path());
    let peak_rss_second = status("VmHWM:");
    let Wave {
        wall,
        completed,
        peak_threads,
        peak_children,
        dropped,
        threads_after,
        children_after,
        rss_after,
    } = first;
    // The host's own threads at the peak: main, the sampler and the consumers.
    let host_threads = threads_before as usize + 1 + CONSUMERS;
    let mib = |kib: u64| kib as f64 / 1024.0;
    vec![
        row(
            format!("{n} sessions × {ROUNDS} shell rounds: wall time"),
            format!(
                "{:.2} s ({:.0} rounds/s)",
                wall.as_secs_f64(),
                (n * ROUNDS) as f64 / wall.as_secs_f64()
            ),
            "",
        ),
        row("failed sessions", (n - completed).to_string(), "0"),
        row(
            "peak RSS (VmHWM); RSS before",
            format!("{:.1} MiB; {:.1} MiB", mib(peak_rss), mib(rss_before)),
            "≤ 1 GiB at 1,000",
        ),
        row(
            "peak virtual memory (VmPeak: thread stacks reserved, mostly untouched)",
            format!("{:.0} MiB", mib(peak_virtual)),
            "",
        ),
        row(
            "peak RSS per session (above RSS before)",
            format!(
                "{:.0} KiB",
                peak_rss.saturating_sub(rss_before) as f64 / n as f64
            ),
            "",
        ),
        row(
            format!("peak threads (host's own: {host_threads})"),
            peak_threads.to_string(),
            "",
        ),
        row(
            "peak threads per session (host's own excluded)",
            format!(
                "{:.2}",
                peak_threads.saturating_sub(host_threads) as f64 / n as f64
            ),
            "≤ 2 at 300",
        ),
        row("peak child processes", peak_children.to_string(), ""),
        row(
            "dropping all sessions",
            format!("{:.0} ms", dropped.as_secs_f64() * 1e3),
            "",
        ),
        row(
            "after drop: threads (before), child processes",
            format!("{threads_after} ({threads_before}), {children_after}"),
            "same as before, 0",
        ),
        row(
            "after drop: RSS; heap in use / held by malloc (mallinfo2)",
            match heap_after {
                Some((used, held)) => format!(
                    "{:.1} MiB; {:.1} / {:.1} MiB",
                    mib(rss_after),
                    mib(used),
                    mib(held)
                ),
                None => format!("{:.1} MiB", mib(rss_after)),
            },
            "",
        ),
        row(
            format!("a second wave of {n} in the same process: wall; failed"),
            format!(
                "{:.2} s; {}",
                second.wall.as_secs_f64(),
                n - second.completed
            ),
            "",
        ),
        row(
            "  its peak RSS (VmHWM, the first wave's beside it); after drop: RSS, threads, children",
            format!(
                "{:.1} MiB ({:.1}); {:.1} MiB, {}, {}",
                mib(peak_rss_second),
                mib(peak_rss),
                mib(second.rss_after),
                second.threads_after,
                second.children_after
            ),
            "",
        ),
    ]
}
