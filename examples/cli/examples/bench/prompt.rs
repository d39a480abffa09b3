//! Bench section `prompt`: system prompt assembly, project docs discovery and the
//! environment capture (with its one git command) on real temporary repositories.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::ToolDefinition;
use agentloop::unstable::{
    EnvironmentContext, base_instructions, build_system_prompt, discover_project_docs,
};

use crate::Row;

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args([
            "-c",
            "user.name=Bench",
            "-c",
            "user.email=bench@example.com",
        ])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs")
        .status;
    assert!(status.success(), "git {args:?} failed");
}

/// Mean time of `f` over `runs` calls, after one warm-up call.
fn mean<T>(runs: u32, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut last = f();
    let start = Instant::now();
    for _ in 0..runs {
        last = std::hint::black_box(f());
    }
    (start.elapsed() / runs, last)
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// A repository four directories deep with AGENTS.md and CLAUDE.md at every level
/// (about 40 KB in all, so the 32 KB cut happens), 30 commits and a few changed files.
fn repository() -> (tempfile::TempDir, std::path::PathBuf) {
    let temp = tempfile::tempdir().expect("temp dir");
    let root = temp.path().join("repo");
    fs::create_dir_all(&root).unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    let mut dir = root.clone();
    for level in 0..4 {
        fs::create_dir_all(&dir).unwrap();
        let text = format!("Level {level} rule: keep functions small.\n").repeat(130);
        fs::write(dir.join("AGENTS.md"), &text).unwrap();
        fs::write(dir.join("CLAUDE.md"), &text).unwrap();
        dir = dir.join(format!("d{level}"));
    }
    fs::create_dir_all(&dir).unwrap();
    for i in 0..30 {
        fs::write(root.join("file.txt"), format!("{i}\n")).unwrap();
        git(&root, &["add", "-A"]);
        git(
            &root,
            &["commit", "-q", "-m", &format!("commit number {i}")],
        );
    }
    fs::write(root.join("file.txt"), "changed\n").unwrap();
    fs::write(root.join("new.txt"), "untracked\n").unwrap();
    (temp, dir)
}

fn tools() -> Vec<ToolDefinition> {
    (0..13)
        .map(|i| ToolDefinition {
            name: format!("tool_{i}"),
            description: format!("Does thing {i}.\nWith a second line.\n\nAnd details."),
            parameters: serde_json::json!({"type": "object"}).into(),
            freeform: None,
        })
        .collect()
}

pub fn run() -> Vec<Row> {
    let (_temp, working_dir) = repository();
    let env = LocalExecutionEnvironment::new(&working_dir).unwrap();
    let row = |name: String, value: String, target: &str| Row {
        section: "prompt",
        name,
        value,
        target: target.to_string(),
    };
    let mut rows = Vec::new();

    let (capture_time, context) = mean(20, || EnvironmentContext::capture(&env, "claude-opus-4-6"));
    let with_snapshot = if context.git.is_some() {
        "with git snapshot"
    } else {
        "no snapshot: git command unavailable"
    };
    rows.push(row(
        format!("EnvironmentContext::capture ({with_snapshot})"),
        format!("{:.2} ms", capture_time.as_secs_f64() * 1e3),
        "once per session",
    ));

    let (discover_time, docs) = mean(200, || discover_project_docs(&env, "anthropic"));
    rows.push(row(
        format!(
            "discover_project_docs, 5 levels, {} files read, {} B kept",
            docs.files.len(),
            docs.text.len()
        ),
        us(discover_time),
        "once per session",
    ));

    let tools = tools();
    let base = base_instructions("anthropic").expect("built-in prompt");
    let (build_time, prompt) = mean(2000, || {
        build_system_prompt(base, &context, &tools, &docs, Some("Be brief."))
    });
    rows.push(row(
        format!("build_system_prompt, 13 tools, {} B output", prompt.len()),
        us(build_time),
        "",
    ));
    rows
}
