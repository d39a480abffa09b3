//! SSE bench: raw parse rate, and parse+decode rates of the four wire formats (Anthropic,
//! OpenAI Responses, Chat Completions, Gemini) over the recorded streams.
//!
//! Parse: the Anthropic captures concatenated and repeated into a 64 MiB buffer, fed to
//! `unstable::SseParser` in 16 KiB reads (the HTTP reader's buffer size), events counted.
//! Parse+decode: each capture decoded whole by `unstable::decode_anthropic_stream` (SSE parse, JSON
//! per event, response building, the final `Finish`) until 64 MiB have been processed;
//! the example reaches the decoder through that public offline helper because examples
//! see only the public API. The other formats are measured the same way through their own
//! `decode_stream` over their folder's captures (captures that decode to an in-stream
//! error are left out: they stop early). Best of 5 runs each.
//!
//! Two clocks: wall time, and the thread's on-CPU time from `/proc/thread-self/schedstat`
//! (Linux), which is what to read on a machine shared with other jobs, where wall time
//! also counts the time the bench thread waited for a core.

use std::time::{Duration, Instant};

use agentloop::Result;
use agentloop::llm::Response;
use agentloop::unstable::{
    SseParser as Parser, decode_anthropic_stream as decode_stream, decode_gemini_stream,
    decode_openai_chat_stream, decode_openai_stream,
};

use crate::Row;

const TOTAL: usize = 64 << 20;
const READ: usize = 16 << 10;
const RUNS: usize = 5;

fn captures() -> Vec<Vec<u8>> {
    captures_in("anthropic")
}

/// The `.sse` captures of one folder of the conformance corpus, sorted by name.
fn captures_in(folder: &str) -> Vec<Vec<u8>> {
    let dir = support::conformance::dir().join(folder);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("the conformance corpus in tests/data/conformance")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn rate(bytes: usize, took: Duration) -> String {
    let per_sec = bytes as f64 / took.as_secs_f64();
    if per_sec >= 1e9 {
        format!("{:.2} GB/s", per_sec / 1e9)
    } else {
        format!("{:.0} MB/s", per_sec / 1e6)
    }
}

/// Nanoseconds this thread has spent on a CPU, if the kernel says.
fn on_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Best wall time and best on-CPU time of `RUNS` runs of `run`, which returns the fraction
/// of `TOTAL` it processed (times are scaled to exactly `TOTAL` bytes).
fn best_of(mut run: impl FnMut() -> f64) -> (Duration, Option<Duration>) {
    let mut wall = Duration::MAX;
    let mut cpu: Option<Duration> = None;
    for _ in 0..RUNS {
        let (cpu_start, start) = (on_cpu(), Instant::now());
        let scale = run();
        let took = start.elapsed().div_f64(scale);
        wall = wall.min(took);
        if let (Some(a), Some(b)) = (cpu_start, on_cpu()) {
            let c = (b - a).div_f64(scale);
            cpu = Some(cpu.map_or(c, |best| best.min(c)));
        }
    }
    (wall, cpu)
}

fn rates(bytes: usize, (wall, cpu): (Duration, Option<Duration>)) -> String {
    match cpu {
        Some(cpu) => format!("{} wall, {} on-CPU", rate(bytes, wall), rate(bytes, cpu)),
        None => format!("{} wall", rate(bytes, wall)),
    }
}

pub fn run() -> Vec<Row> {
    let files = captures();
    let corpus: Vec<u8> = files.concat();
    let mut buffer = Vec::with_capacity(TOTAL + corpus.len());
    while buffer.len() < TOTAL {
        buffer.extend_from_slice(&corpus);
    }

    let mut events_seen = 0;
    let parse = best_of(|| {
        let mut parser = Parser::new();
        let mut events = Vec::with_capacity(64);
        let mut count = 0;
        for chunk in buffer.chunks(READ) {
            parser.feed(chunk, &mut events);
            count += events.len();
            events.clear();
        }
        parser.finish(&mut events);
        events_seen = count + events.len();
        1.0
    });

    let mut decoded = 0usize;
    let decode = best_of(|| {
        let mut bytes = 0;
        while bytes < TOTAL {
            for file in &files {
                let response = decode_stream(file).expect("every capture decodes");
                decoded += response.message.content.len();
                bytes += file.len();
            }
        }
        bytes as f64 / TOTAL as f64
    });
    assert!(decoded > 0);

    let mut rows = vec![
        Row {
            section: "sse",
            name: format!(
                "parse, {} MiB in 16 KiB reads ({events_seen} events)",
                TOTAL >> 20
            ),
            value: rates(TOTAL, parse),
            target: "≥ 1 GB/s".into(),
        },
        Row {
            section: "sse",
            name: "parse + anthropic decode (decode_stream per capture)".into(),
            value: rates(TOTAL, decode),
            target: "≥ 150 MB/s".into(),
        },
    ];
    type DecodeFn = fn(&[u8]) -> Result<Response>;
    let formats: [(&str, &str, DecodeFn); 3] = [
        ("openai-responses", "openai responses", decode_openai_stream),
        ("openai-chat", "chat completions", decode_openai_chat_stream),
        ("gemini", "gemini", decode_gemini_stream),
    ];
    for (folder, label, decode) in formats {
        let files: Vec<Vec<u8>> = captures_in(folder)
            .into_iter()
            .filter(|file| decode(file).is_ok())
            .collect();
        rows.push(Row {
            section: "sse",
            name: format!("parse + {label} decode (decode_stream per capture)"),
            value: rates(TOTAL, decode_rate(&files, decode)),
            target: "≥ 150 MB/s".into(),
        });
    }
    rows
}

/// Best times of decoding `files` one after another, whole, until `TOTAL` bytes are done.
fn decode_rate(
    files: &[Vec<u8>],
    decode: fn(&[u8]) -> Result<Response>,
) -> (Duration, Option<Duration>) {
    let mut parts = 0usize;
    let times = best_of(|| {
        let mut bytes = 0;
        while bytes < TOTAL {
            for file in files {
                let response = decode(file).expect("the capture decoded before");
                parts += response.message.content.len();
                bytes += file.len();
            }
        }
        bytes as f64 / TOTAL as f64
    });
    assert!(parts > 0);
    times
}
