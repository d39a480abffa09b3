//! Benchmarks: `cargo run --release --example bench [-- SECTION...]` prints one table of
//! every section (or of the sections named), with a line describing the machine.
//!
//! Each section lives in its own file and returns rows for the table. Sections measure and
//! never assert; targets are printed beside the figures. `e2e` and `size` build the
//! `agentloop` binary with cargo first (`size` runs two `min-size` builds, a few minutes from
//! scratch). `scale N` runs the `scale` section with N sessions (default 300).

use std::time::Duration;

mod acp;
mod acp_model;
mod background;
mod budget;
mod checkpoint;
mod compaction;
mod containers;
mod e2e;
mod exec;
mod grep;
mod harness;
mod loop_;
mod mcp;
mod prompt;
mod remote;
mod sandbox;
mod scale;
mod size;
mod sse;
mod subagents;
mod tools;
mod transcript;

// The test support crate (a dev-dependency) gives the sections the loopback server and
// Anthropic SSE bodies (`loop`, `subagents`, `e2e`) and the private sshd (`remote`).
use support::{server, session_sse, sshd};

/// One row of the table.
pub struct Row {
    /// Section name.
    pub section: &'static str,
    /// What was measured.
    pub name: String,
    /// The figure, formatted.
    pub value: String,
    /// The target, if the issue sets one.
    pub target: String,
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

type Section = (&'static str, fn() -> Vec<Row>);

const SECTIONS: &[Section] = &[
    ("sse", sse::run),
    ("exec", exec::run),
    ("background", background::run),
    ("grep", grep::run),
    ("prompt", prompt::run),
    ("loop", loop_::run),
    ("budget", budget::run),
    ("tools", tools::run),
    ("subagents", subagents::run),
    ("e2e", e2e::run),
    ("size", size::run),
    ("transcript", transcript::run),
    ("compaction", compaction::run),
    ("sandbox", sandbox::run),
    ("mcp", mcp::run),
    ("remote", remote::run),
    ("containers", containers::run),
    ("scale", scale::run),
    ("checkpoint", checkpoint::run),
    ("acp", acp::run),
    ("harness", harness::run),
];

/// CPU model, cores, kernel and load: what the figures were measured on.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    format!(
        "{cpu}, {cores} cores available, {} {}, load average {}",
        std::env::consts::OS,
        kernel.trim(),
        load.join(" ")
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let wanted: Vec<String> = args.by_ref().take(1).collect();
    if wanted.first().is_some_and(|a| a == e2e::SPAWNER) {
        std::process::exit(e2e::spawner_main(args));
    }
    if wanted.first().is_some_and(|a| a == acp::IN_NETNS) {
        std::process::exit(acp::in_netns_main());
    }
    if wanted.first().is_some_and(|a| a == harness::IN_NETNS) {
        std::process::exit(harness::in_netns_main());
    }
    let mut wanted: Vec<String> = wanted.into_iter().chain(args).collect();
    // `scale N`: a number after `scale` is its session count, not a section.
    if let Some(at) = wanted.iter().position(|w| w == "scale")
        && let Some(n) = wanted.get(at + 1).and_then(|n| n.parse::<usize>().ok())
    {
        scale::set_sessions(n);
        wanted.remove(at + 1);
    }
    if let Some(unknown) = wanted
        .iter()
        .find(|w| !SECTIONS.iter().any(|(n, _)| n == w))
    {
        let names: Vec<&str> = SECTIONS.iter().map(|(n, _)| *n).collect();
        eprintln!(
            "bench: unknown section `{unknown}`; sections: {}",
            names.join(", ")
        );
        std::process::exit(2);
    }
    let mut rows = Vec::new();
    for (name, run) in SECTIONS {
        if wanted.is_empty() || wanted.iter().any(|w| w == name) {
            eprintln!("bench: running {name}");
            rows.extend(run());
        }
    }
    let width = |f: fn(&Row) -> usize, min: usize| rows.iter().map(f).max().unwrap_or(0).max(min);
    let (w_section, w_name, w_value) = (
        width(|r| r.section.len(), 7),
        width(|r| r.name.chars().count(), 7),
        width(|r| r.value.chars().count(), 5),
    );
    println!("machine: {}", machine());
    println!();
    println!(
        "| {:<w_section$} | {:<w_name$} | {:>w_value$} | target |",
        "section", "measure", "value"
    );
    println!(
        "|{}|{}|{}|--------|",
        "-".repeat(w_section + 2),
        "-".repeat(w_name + 2),
        "-".repeat(w_value + 2)
    );
    for row in rows {
        println!(
            "| {:<w_section$} | {:<w_name$} | {:>w_value$} | {} |",
            row.section, row.name, row.value, row.target
        );
    }
}
