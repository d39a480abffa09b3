//! Bench section `budget`: what the budget bookkeeping costs one round of the loop — the
//! check before the model call (`BudgetMeter::check`, what the loop's limit check runs), the
//! call's charge, the tool-call allowance and the round's charge — with all eight budgets
//! set (tokens, cost, wall time, tool calls; the input's and the session's), for a session
//! and for a subagent (whose ledger charges and checks its parent's too). The real types,
//! through `agentloop::unstable`. Measures; never asserts.

use std::hint::black_box;
use std::time::{Duration, Instant};

use agentloop::llm::Usage;
use agentloop::session::{Budget, SessionConfig};
use agentloop::unstable::{BudgetLedger, BudgetMeter};

use crate::Row;

const ROUNDS: u32 = 200_000;
const RUNS: usize = 7;

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "budget",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

/// Budgets on every kind and both scopes, far from their limits.
fn budgeted() -> SessionConfig {
    let budget = Budget::default()
        .with_tokens(u64::MAX / 4)
        .with_cost_usd(1e12)
        .with_wall_time(Duration::from_secs(86_400))
        .with_tool_calls(u64::MAX / 4);
    SessionConfig::default()
        .with_input_budget(budget)
        .with_session_budget(budget)
}

/// One round's bookkeeping ROUNDS times on `meter`; the time per round.
fn per_round(meter: &mut BudgetMeter) -> Duration {
    let usage = Usage {
        input_tokens: 1_200,
        output_tokens: 80,
        total_tokens: 1_280,
        cache_read_tokens: Some(20_000),
        ..Usage::default()
    };
    meter.start_input();
    let start = Instant::now();
    for _ in 0..ROUNDS {
        black_box(meter.check());
        meter.charge_call(black_box(&usage), "anthropic", Some(0.01));
        black_box(meter.tool_calls_left());
        meter.charge_tool_calls(black_box(2));
    }
    let took = start.elapsed() / ROUNDS;
    meter.end_input();
    took
}

/// The median and the fastest of RUNS runs.
fn median_and_min(mut runs: Vec<Duration>) -> String {
    runs.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    format!("{:.3} µs / {:.3} µs", us(runs[RUNS / 2]), us(runs[0]))
}

/// The section's rows.
pub fn run() -> Vec<Row> {
    let config = budgeted();
    let mut session = BudgetMeter::new(BudgetLedger::new(&config, None), &config);
    let parent = BudgetLedger::new(&config, None);
    let child_config = SessionConfig::default();
    let mut child = BudgetMeter::new(
        BudgetLedger::new(&child_config, Some(parent)),
        &child_config,
    );
    let mut none = BudgetMeter::new(BudgetLedger::new(&child_config, None), &child_config);
    let session_runs: Vec<Duration> = (0..RUNS).map(|_| per_round(&mut session)).collect();
    let child_runs: Vec<Duration> = (0..RUNS).map(|_| per_round(&mut child)).collect();
    let none_runs: Vec<Duration> = (0..RUNS).map(|_| per_round(&mut none)).collect();
    vec![
        row(
            format!(
                "budget bookkeeping per round, all eight budgets (median / min of {RUNS} × {ROUNDS} rounds)"
            ),
            median_and_min(session_runs),
            "< 5 µs",
        ),
        row(
            "  in a subagent (its ledger and its parent's)",
            median_and_min(child_runs),
            "< 5 µs",
        ),
        row("  with no budget set", median_and_min(none_runs), ""),
    ]
}
