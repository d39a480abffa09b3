//! Bench section `size`: the size of the `agentloop` CLI binary — the release build, the
//! `[profile.min-size]` build (with TLS), and the static glibc build documented in the
//! README:
//!
//! ```text
//! cargo build --release -p agentloop-cli --bin agentloop
//! cargo build --profile min-size -p agentloop-cli --bin agentloop
//! RUSTFLAGS='-C target-feature=+crt-static' cargo build --profile min-size \
//!     --target x86_64-unknown-linux-gnu -p agentloop-cli --bin agentloop
//! ```
//!
//! The bench runs these builds itself (the two min-size builds take a few minutes from
//! scratch on two cores). Measures; never asserts.

use std::path::Path;

use crate::Row;
use crate::e2e::{RELEASE_BUILD, build_static, cargo, target_dir};

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
    let built = cargo(RELEASE_BUILD, &[]);
    rows.push(size_of(
        "agentloop, release profile (not stripped)",
        built,
        &target.join("release/agentloop"),
        "",
    ));
    let built = cargo(
        &[
            "build",
            "--profile",
            "min-size",
            "-p",
            "agentloop-cli",
            "--bin",
            "agentloop",
        ],
        &[],
    );
    rows.push(size_of(
        "agentloop, [profile.min-size] with TLS",
        built,
        &target.join("min-size/agentloop"),
        "< 3.5 MB",
    ));
    let built = build_static("min-size");
    let path = built.clone().unwrap_or_default();
    rows.push(size_of(
        "agentloop, min-size, static glibc (+crt-static)",
        built.map(|_| ()),
        &path,
        "",
    ));
    rows
}
