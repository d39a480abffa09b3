//! Bench section `e2e`: the `agent` example binary, end to end, as a user runs it.
//!
//! - The three-round task against a loopback server speaking the Anthropic format: a
//!   shell command `echo hello > out.txt`, `read_file out.txt`, the answer "done". Wall
//!   time from spawn to exit, and peak resident memory from `wait4`'s rusage (`ru_maxrss`:
//!   the larger of the agent and the commands it waited for, such as `bash`).
//! - The offline demo (four tool rounds with a scripted model), the same two figures.
//!
//! The binary is built first with `cargo build --release --example agent` (a no-op when it
//! is up to date); if that fails, the rows say so. Measures; never asserts.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::Row;
use crate::server::{Reply, Server};
use crate::session_sse::anthropic_sse;

const RUNS: usize = 20;

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "e2e",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `cargo` with `args` in the crate directory; `Err` carries the reason.
pub fn cargo(args: &[&str], extra_env: &[(&str, &str)]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    eprintln!("bench: {cargo} {}", args.join(" "));
    let mut command = Command::new(&cargo);
    // Drop what `cargo run` set for this process: build scripts that watch these variables
    // (ring watches CARGO_MANIFEST_DIR) would otherwise rebuild on every bench run.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let set_by_cargo_run = name.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_RUSTC_CURRENT_DIR",
            ]
            .contains(&name.as_ref());
        if set_by_cargo_run {
            command.env_remove(name.as_ref());
        }
    }
    let status = command
        .args(args)
        .envs(extra_env.iter().copied())
        .current_dir(manifest_dir())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}

/// The target directory cargo builds into (`CARGO_TARGET_DIR` or `./target`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("target"))
}

/// What one run of the agent cost.
struct Sample {
    wall: Duration,
    max_rss_kib: i64,
}

/// Spawns `command`, reaps it with `wait4`, and checks it exited 0.
fn measure(mut command: Command) -> Result<Sample, String> {
    // Stderr goes to a file: a pipe nobody reads while wait4 blocks could fill up.
    let mut stderr_file = tempfile::tempfile().map_err(|e| e.to_string())?;
    let stderr = stderr_file.try_clone().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("cannot start the agent: {e}"))?;
    let pid = child.id() as libc::pid_t;
    drop(child); // dropping a Child neither kills nor waits; wait4 below reaps it
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child, which nothing else reaps; both out-pointers are
    // valid for writes.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = started.elapsed();
    if reaped != pid {
        return Err(format!("wait4 failed: {}", std::io::Error::last_os_error()));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        let mut stderr = String::new();
        let _ = stderr_file.seek(SeekFrom::Start(0));
        let _ = stderr_file.read_to_string(&mut stderr);
        return Err(format!(
            "the agent failed (wait status {status}): {}",
            stderr.trim()
        ));
    }
    Ok(Sample {
        wall,
        max_rss_kib: usage.ru_maxrss,
    })
}

fn agent_command(agent: &Path, args: &[&str], vars: &[(&str, &str)]) -> Command {
    let mut command = Command::new(agent);
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(vars.iter().copied());
    command
}

/// One run of the three-round task against a fresh loopback server.
fn three_rounds(agent: &Path) -> Result<Sample, String> {
    let server = Server::start(vec![
        Reply::sse(anthropic_sse(
            "",
            &[(
                "toolu_1",
                "shell",
                json!({"command": "echo hello > out.txt"}),
            )],
        )),
        Reply::sse(anthropic_sse(
            "",
            &[("toolu_2", "read_file", json!({"file_path": "out.txt"}))],
        )),
        Reply::sse(anthropic_sse("done", &[])),
    ]);
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let url = server.url();
    let cwd = work.path().to_string_lossy().into_owned();
    let command = agent_command(
        agent,
        &[
            "--cwd",
            &cwd,
            "--json",
            "write hello to out.txt, read it, say done",
        ],
        &[
            ("ANTHROPIC_API_KEY", "sk-ant-bench-not-a-key"),
            ("ANTHROPIC_BASE_URL", &url),
        ],
    );
    let sample = measure(command)?;
    let written = std::fs::read_to_string(work.path().join("out.txt")).unwrap_or_default();
    if written != "hello\n" || server.requests().len() != 3 {
        return Err(format!(
            "the task did not complete (out.txt {written:?}, {} requests)",
            server.requests().len()
        ));
    }
    Ok(sample)
}

fn demo(agent: &Path) -> Result<Sample, String> {
    measure(agent_command(agent, &["--json"], &[]))
}

/// Median and maximum of the samples: wall time and peak RSS.
fn summarise(mut samples: Vec<Sample>) -> (String, String) {
    samples.sort_by_key(|s| s.wall);
    let wall = format!(
        "{:.1} ms (max {:.1})",
        samples[samples.len() / 2].wall.as_secs_f64() * 1e3,
        samples[samples.len() - 1].wall.as_secs_f64() * 1e3
    );
    let mut rss: Vec<i64> = samples.iter().map(|s| s.max_rss_kib).collect();
    rss.sort_unstable();
    let memory = format!(
        "{:.1} MB (max {:.1})",
        rss[rss.len() / 2] as f64 / 1024.0,
        rss[rss.len() - 1] as f64 / 1024.0
    );
    (wall, memory)
}

fn rows_for(
    name: &str,
    agent: &Path,
    run: fn(&Path) -> Result<Sample, String>,
    targets: (&str, &str),
) -> Vec<Row> {
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        match run(agent) {
            Ok(sample) => samples.push(sample),
            Err(why) => return vec![row(name, "failed".to_string(), &why)],
        }
    }
    let (wall, memory) = summarise(samples);
    vec![
        row(format!("{name}: wall, median of {RUNS}"), wall, targets.0),
        row(
            format!("{name}: peak RSS, median of {RUNS}"),
            memory,
            targets.1,
        ),
    ]
}

pub fn run() -> Vec<Row> {
    if let Err(why) = cargo(&["build", "--release", "--example", "agent"], &[]) {
        return vec![row("agent binary", "not built".to_string(), &why)];
    }
    let agent = target_dir().join("release/examples/agent");
    let mut rows = rows_for(
        "agent, 3-round task over loopback Anthropic",
        &agent,
        three_rounds,
        ("< 50 ms", "< 10 MB"),
    );
    rows.extend(rows_for(
        "agent, offline demo (4 tool rounds)",
        &agent,
        demo,
        ("", ""),
    ));
    rows
}
