//! Bench section `size`: the size of the `agent` example binary — the release build, the
//! `[profile.min-size]` build (with TLS), and the static glibc build documented in the
//! README:
//!
//! ```text
//! cargo build --release --example agent
//! cargo build --profile min-size --example agent
//! RUSTFLAGS='-C target-feature=+crt-static' cargo build --profile min-size \
//!     --target x86_64-unknown-linux-gnu --example agent
//! ```
//!
//! The bench runs these builds itself (the two min-size builds take a few minutes from
//! scratch on two cores). Measures; never asserts.

use std::path::Path;

use crate::Row;
use crate::e2e::{build_static, cargo, target_dir};

fn row(name: &str, value: String, target: &str) -> Row {
    Row {
        section: "size",
        name: name.to_string(),
        value,
        target: target.to_string(),
    }
}

fn size_of(name: &str, built: Result<(), String>, path: &Path, target: &str) -> Row {
    match built
        .and_then(|()| std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display())))
    {
        Ok(meta) => row(
            name,
            format!(
                "{:.2} MiB ({} bytes)",
                meta.len() as f64 / 1_048_576.0,
                meta.len()
            ),
            target,
        ),
        Err(why) => row(name, "not built".to_string(), &why),
    }
}

pub fn run() -> Vec<Row> {
    let target = target_dir();
    let mut rows = Vec::new();
    let built = cargo(&["build", "--release", "--example", "agent"], &[]);
    rows.push(size_of(
        "agent, release profile (not stripped)",
        built,
        &target.join("release/examples/agent"),
        "",
    ));
    let built = cargo(
        &["build", "--profile", "min-size", "--example", "agent"],
        &[],
    );
    rows.push(size_of(
        "agent, [profile.min-size] with TLS",
        built,
        &target.join("min-size/examples/agent"),
        "< 3.5 MB",
    ));
    let built = build_static("min-size");
    let path = built.clone().unwrap_or_default();
    rows.push(size_of(
        "agent, min-size, static glibc (+crt-static)",
        built.map(|_| ()),
        &path,
        "",
    ));
    rows
}
