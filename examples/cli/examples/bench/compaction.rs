//! The `compaction` section: the loop's cost of token accounting per round, and the time
//! to plan a compaction of a 1 000-turn history (cut point, kept messages, the compaction
//! request's input cut to fit), without the model call.

use std::hint::black_box;
use std::time::{Duration, Instant};

use agentloop::llm::{ToolCall, ToolDefinition, ToolResult, Usage};
use agentloop::session::Turn;
use agentloop::unstable::{CompactionLimits, CompactionPlan, TokenAccount};
use serde_json::json;

use crate::Row;

const RUNS: usize = 21;

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "compaction",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// One round as the worker appends it: a response with a tool call, its 2 KB result.
fn round(n: usize) -> [Turn; 2] {
    let call = ToolCall::new(
        format!("call_{n}"),
        "shell",
        json!({"command": format!("cargo test --package agentloop -- case_{n}")}),
    );
    let assistant = serde_json::from_value(json!({
        "type": "assistant",
        "content": "",
        "tool_calls": [call],
        "timestamp": "2026-01-01T00:00:00.000Z"
    }))
    .expect("an assistant turn");
    let output = format!(
        "running 1 test\n{}\ntest result: ok",
        "line of output\n".repeat(130)
    );
    let results = Turn::tool_results(vec![ToolResult::for_call(&call, output, false)]);
    [assistant, results]
}

fn history(turns: usize) -> Vec<Turn> {
    let mut out = vec![Turn::user(
        "fix the failing tests and keep the public API unchanged",
    )];
    let mut n = 0;
    while out.len() < turns {
        if n % 50 == 49 {
            out.push(Turn::steering(format!("also check case {n}")));
        }
        out.extend(round(n));
        n += 1;
    }
    out.truncate(turns);
    out
}

/// Per round: two turns accounted, the usage report, the threshold check.
fn accounting_per_round() -> Duration {
    const ROUNDS: usize = 2_000;
    let rounds: Vec<[Turn; 2]> = (0..ROUNDS).map(round).collect();
    let tools = vec![ToolDefinition {
        name: "shell".into(),
        description: "run a command".into(),
        parameters: json!({"type": "object"}).into(),
        freeform: None,
    }];
    let usage = Usage {
        input_tokens: 12_000,
        ..Usage::default()
    };
    let samples = (0..RUNS)
        .map(|_| {
            let mut account = TokenAccount::new(0);
            account.set_fixed("system prompt", &tools);
            let started = Instant::now();
            for [assistant, results] in &rounds {
                let at = account.history_tokens();
                account.report(black_box(&usage), "anthropic", at);
                account.push(assistant);
                account.push(results);
                black_box(account.tokens() > 180_000);
            }
            started.elapsed() / ROUNDS as u32
        })
        .collect();
    median(samples)
}

fn plan_time(turns: &[Turn]) -> (Duration, usize, String) {
    let limits = CompactionLimits::for_window(200_000);
    let mut summarised = 0;
    let mut fallback = String::new();
    let samples = (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            let plan = CompactionPlan::new(black_box(turns), &limits, 400).expect("a plan");
            let elapsed = started.elapsed();
            summarised = plan.turns_summarised();
            fallback = plan.fallback().as_str().to_string();
            black_box(plan.input().len());
            elapsed
        })
        .collect();
    (median(samples), summarised, fallback)
}

pub fn run() -> Vec<Row> {
    let per_round = accounting_per_round();
    let turns = history(1_000);
    let (plan, summarised, fallback) = plan_time(&turns);
    vec![
        row(
            "token accounting per round (2 turns, report, check; median of 21 × 2 000 rounds)",
            format!("{:.2} µs", per_round.as_secs_f64() * 1e6),
            "< 20 µs",
        ),
        row(
            format!(
                "plan a compaction of 1 000 turns (~2 KB outputs, 200k window; {summarised} \
                 summarised, fallback {fallback}; median of 21)"
            ),
            format!("{:.2} ms", plan.as_secs_f64() * 1e3),
            "< 5 ms",
        ),
    ]
}
