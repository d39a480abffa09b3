//! Benchmarks: `cargo run --release --example bench [-- SECTION]`.
//!
//! Each section lives in its own file and returns rows for one table.

use std::time::Duration;

mod exec;
mod grep;
mod loop_;
mod prompt;
mod sse;
mod tools;
mod transcript;

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

#[allow(dead_code)]
fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

type Section = (&'static str, fn() -> Vec<Row>);

const SECTIONS: &[Section] = &[
    ("sse", sse::run),
    ("exec", exec::run),
    ("grep", grep::run),
    ("prompt", prompt::run),
    ("loop", loop_::run),
    ("tools", tools::run),
    ("transcript", transcript::run),
];

fn main() {
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let mut rows = Vec::new();
    for (name, run) in SECTIONS {
        if wanted.is_empty() || wanted.iter().any(|w| w == name) {
            eprintln!("bench: running {name}");
            rows.extend(run());
        }
    }
    println!("{:<8} {:<60} {:>18}  target", "section", "measure", "value");
    for row in rows {
        println!(
            "{:<8} {:<60} {:>18}  {}",
            row.section, row.name, row.value, row.target
        );
    }
}
