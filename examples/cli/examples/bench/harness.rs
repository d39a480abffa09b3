//! Bench section `harness`: what an evaluation harness sees. [`TRIALS`] trials of the
//! three-round task (`acp_model.rs`'s `TASK`) start at once, each through its own copy of
//! Harbor's unmodified ACP runner (`acp_runner.py` from PyPI `harbor` 0.25.0, run on its
//! own as Harbor uploads it), once with `agentloop acp` as the agent and once with the
//! Codex ACP adapter (`@zed-industries/codex-acp` 0.16.0), on one loopback model each.
//! Per agent: wall time from the first spawn to the last runner's exit, errored trials
//! (a runner's non-zero exit, or no `prompt_response` in its `acp-summary.json`), tasks
//! done (`out.txt` holds `hello`), and the peak of the summed resident memory of every
//! agent process (all descendants of the runners, the runners left out), sampled from
//! `/proc` every [`SAMPLE`]; the runners' own peak beside it.
//!
//! Like `acp`, the section runs in a private network namespace where only loopback
//! exists, with dummy keys and a home per trial outside `/tmp` and any checkout; Codex
//! keeps `/tmp` out of its sandbox's writable roots so that it makes no `/tmp/.git`
//! (checked before and after). Measures; never asserts.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::Row;
use crate::acp_model::Model;

/// The argument that runs the section inside the namespace.
pub const IN_NETNS: &str = "__harness-in-netns";

/// Trials started at once, per agent.
const TRIALS: usize = 20;
/// How often the process table is read for memory.
const SAMPLE: Duration = Duration::from_millis(10);
/// A trial still running after this is killed and counted as errored.
const TRIAL_LIMIT: Duration = Duration::from_secs(300);

fn row(name: String, value: String) -> Row {
    Row {
        section: "harness",
        name,
        value,
        target: String::new(),
    }
}

pub fn run() -> Vec<Row> {
    if let Err(why) = crate::e2e::cargo(crate::e2e::RELEASE_BUILD, &[]) {
        return vec![row("agentloop".to_string(), format!("not built: {why}"))];
    }
    let binary = crate::e2e::target_dir().join("release/agentloop");
    crate::acp::in_netns("harness", IN_NETNS, &binary).unwrap_or_else(|| {
        let mut rows = vec![row(
            "network namespace".to_string(),
            "none (unshare -n failed): measured on the host's network".to_string(),
        )];
        rows.extend(measure_with(&binary));
        rows
    })
}

/// Inside the namespace: measures and prints the rows as JSON lines.
pub fn in_netns_main() -> i32 {
    let Some(binary) = crate::acp::netns_binary() else {
        return 2;
    };
    crate::acp::print_rows(measure_with(&binary));
    0
}

/// One agent as Harbor's runner starts it: the launcher script's command, the runner's
/// environment, and whether each trial's home gets Codex's configuration.
struct Agent {
    name: &'static str,
    command: String,
    env: Vec<(&'static str, String)>,
    codex_config: bool,
}

/// What the trials of one agent measured.
#[derive(Default)]
struct Outcome {
    wall: Duration,
    errored: Vec<String>,
    done: usize,
    agents_peak_kib: u64,
    runners_peak_kib: u64,
    median_trial: Duration,
    requests: usize,
}

fn measure_with(binary: &Path) -> Vec<Row> {
    let venv = support::ci::dir().join("harbor-venv");
    let python = venv.join("bin/python");
    let runner = venv.join("lib/python3.12/site-packages/harbor/agents/installed/acp_runner.py");
    if !python.exists() || !runner.exists() {
        return vec![row(
            "Harbor".to_string(),
            format!("not installed at {} (bash .ci/run)", venv.display()),
        )];
    }
    let codex = support::ci::dir().join("acp-peers/node_modules/.bin/codex-acp");
    let git_in_tmp = Path::new("/tmp/.git").exists();
    let mut rows = Vec::new();
    let mut agents = vec![Agent {
        name: "agentloop",
        command: format!("'{}' acp --base-url \"$MODEL_URL\"", binary.display()),
        env: vec![
            ("ANTHROPIC_API_KEY", "sk-ant-dummy-bench-key".to_string()),
            (
                "HARBOR_ACP_REQUESTED_MODEL",
                "anthropic/claude-sonnet-4-5".to_string(),
            ),
        ],
        codex_config: false,
    }];
    if codex.exists() {
        agents.push(Agent {
            name: "codex-acp 0.16.0",
            command: format!("'{}'", codex.display()),
            env: vec![
                ("OPENAI_API_KEY", "sk-dummy-bench-key".to_string()),
                (
                    "HARBOR_ACP_REQUESTED_MODEL",
                    "openai/gpt-5.3-codex".to_string(),
                ),
            ],
            codex_config: true,
        });
    } else {
        rows.push(row(
            "codex-acp 0.16.0".to_string(),
            "not installed: npm install --prefix target/ci/acp-peers @zed-industries/codex-acp@0.16.0".to_string(),
        ));
    }
    for agent in &agents {
        let outcome = trials(agent, &python, &runner);
        rows.extend(agent_rows(agent.name, &outcome));
    }
    if !git_in_tmp && Path::new("/tmp/.git").exists() {
        rows.push(row(
            "/tmp/.git".to_string(),
            "created during the run (removed)".to_string(),
        ));
        let _ = std::fs::remove_dir_all("/tmp/.git").or_else(|_| std::fs::remove_file("/tmp/.git"));
    }
    rows
}

fn agent_rows(name: &str, o: &Outcome) -> Vec<Row> {
    let mut rows = vec![
        row(
            format!("{name}: wall time, {TRIALS} trials at once"),
            format!("{:.2} s", o.wall.as_secs_f64()),
        ),
        row(
            format!("{name}: median trial (runner start → exit)"),
            crate::ms(o.median_trial),
        ),
        row(
            format!("{name}: errored trials"),
            format!("{} of {TRIALS}", o.errored.len()),
        ),
        row(
            format!("{name}: tasks done (out.txt = hello)"),
            format!("{} of {TRIALS}", o.done),
        ),
        row(
            format!("{name}: peak memory, all agent processes (sum of RSS)"),
            format!("{:.1} MiB", o.agents_peak_kib as f64 / 1024.0),
        ),
        row(
            format!("{name}: peak memory, the {TRIALS} Harbor runners (sum of RSS)"),
            format!("{:.1} MiB", o.runners_peak_kib as f64 / 1024.0),
        ),
        row(
            format!("{name}: model requests served"),
            o.requests.to_string(),
        ),
    ];
    if let Some(first) = o.errored.first() {
        rows.push(row(format!("{name}: first error"), first.clone()));
    }
    rows
}

/// One trial's files and process.
struct Trial {
    home: tempfile::TempDir,
    work: PathBuf,
    logs: PathBuf,
    child: Option<Child>,
    took: Option<Duration>,
    status: Option<i32>,
}

/// Starts [`TRIALS`] runners at once against a fresh model, waits for all of them, and
/// reads what each left.
fn trials(agent: &Agent, python: &Path, runner: &Path) -> Outcome {
    let model = Model::start();
    let homes = crate::e2e::target_dir().join("harness-bench-homes");
    std::fs::create_dir_all(&homes).unwrap();
    let mut trials: Vec<Trial> = (0..TRIALS)
        .map(|_| prepare(agent, &homes, runner, &model.url))
        .collect();
    let roots: Arc<std::sync::Mutex<HashSet<u32>>> = Arc::default();
    let (agents_peak, runners_peak) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (roots, agents_peak, runners_peak, sampling) = (
            roots.clone(),
            agents_peak.clone(),
            runners_peak.clone(),
            sampling.clone(),
        );
        thread::Builder::new()
            .name("bench-harness-rss".to_string())
            .spawn(move || {
                while sampling.load(Ordering::SeqCst) {
                    let roots = roots.lock().unwrap().clone();
                    let (agents, runners) = rss_under(&roots);
                    agents_peak.fetch_max(agents, Ordering::SeqCst);
                    runners_peak.fetch_max(runners, Ordering::SeqCst);
                    thread::sleep(SAMPLE);
                }
            })
            .unwrap()
    };
    let started = Instant::now();
    let mut errored = Vec::new();
    for (i, trial) in trials.iter_mut().enumerate() {
        let home = trial.home.path();
        let mut command = Command::new(python);
        command
            .arg(home.join("installed-agent/acp_runner.py"))
            .arg("--instruction")
            .arg(format!(
                "TASK: write hello to out.txt and read it back. DIR={}",
                trial.work.display()
            ))
            .arg("--logs-dir")
            .arg(&trial.logs)
            .arg("--launcher")
            .arg(home.join("installed-agent/acp-launch.sh"))
            .current_dir(&trial.work)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("CODEX_HOME", home.join(".codex"))
            .env("MODEL_URL", &model.url)
            .envs(agent.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        match command.spawn() {
            Ok(child) => {
                roots.lock().unwrap().insert(child.id());
                trial.child = Some(child);
            }
            Err(e) => errored.push(format!("trial {i}: spawn: {e}")),
        }
    }
    wait_all(&mut trials, started);
    let wall = started.elapsed();
    sampling.store(false, Ordering::SeqCst);
    let _ = sampler.join();
    let mut done = 0;
    let mut times = Vec::new();
    for (i, trial) in trials.iter().enumerate() {
        if let Some(took) = trial.took {
            times.push(took);
        }
        if let Some(why) = trial_error(trial) {
            errored.push(format!("trial {i}: {why}"));
        }
        if std::fs::read_to_string(trial.work.join("out.txt")).is_ok_and(|t| t == "hello\n") {
            done += 1;
        }
    }
    times.sort_unstable();
    Outcome {
        wall,
        errored,
        done,
        agents_peak_kib: agents_peak.load(Ordering::SeqCst),
        runners_peak_kib: runners_peak.load(Ordering::SeqCst),
        median_trial: times.get(times.len() / 2).copied().unwrap_or_default(),
        requests: model.requests.load(Ordering::SeqCst),
    }
}

/// A trial's home: the runner copied alone into `installed-agent/` (beside Harbor's
/// `acp.py` it would shadow the SDK's `acp`), the launcher script, `work/`, `logs/agent/`.
fn prepare(agent: &Agent, homes: &Path, runner: &Path, url: &str) -> Trial {
    let home = tempfile::tempdir_in(homes).unwrap();
    let root = std::fs::canonicalize(home.path()).unwrap();
    let (work, logs, installed) = (
        root.join("work"),
        root.join("logs/agent"),
        root.join("installed-agent"),
    );
    for dir in [&work, &logs, &installed, &root.join(".codex")] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::copy(runner, installed.join("acp_runner.py")).unwrap();
    let launcher = installed.join("acp-launch.sh");
    std::fs::write(
        &launcher,
        format!("#!/bin/sh\nexec {} \"$@\"\n", agent.command),
    )
    .unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    if agent.codex_config {
        let config = crate::acp::codex_config(url);
        std::fs::write(root.join(".codex/config.toml"), config).unwrap();
    }
    Trial {
        home,
        work,
        logs,
        child: None,
        took: None,
        status: None,
    }
}

/// Waits for every runner (polling, so that one slow trial holds up no other's time),
/// killing the group of one past [`TRIAL_LIMIT`]; then ends what any group left behind.
fn wait_all(trials: &mut [Trial], started: Instant) {
    loop {
        let mut running = 0;
        for trial in trials.iter_mut() {
            let Some(child) = trial.child.as_mut() else {
                continue;
            };
            if trial.took.is_some() {
                continue;
            }
            match child.try_wait() {
                Ok(Some(status)) => {
                    trial.took = Some(started.elapsed());
                    trial.status = status.code();
                }
                Ok(None) if started.elapsed() > TRIAL_LIMIT => {
                    kill_group(child.id());
                    let _ = child.wait();
                    trial.took = Some(started.elapsed());
                }
                Ok(None) => running += 1,
                Err(_) => trial.took = Some(started.elapsed()),
            }
        }
        if running == 0 {
            break;
        }
        thread::sleep(Duration::from_millis(2));
    }
    for trial in trials.iter() {
        if let Some(child) = &trial.child {
            kill_group(child.id());
        }
    }
}

fn kill_group(pid: u32) {
    // SAFETY: the group is the runner's own (`process_group(0)` at spawn); a group already
    // gone makes kill fail with ESRCH, which is fine.
    unsafe {
        libc::kill(-(pid as i32), libc::SIGKILL);
    }
}

/// Why a trial counts as errored, as Harbor would count it: the runner's non-zero exit,
/// or no prompt response in its summary.
fn trial_error(trial: &Trial) -> Option<String> {
    // A runner that never started was counted at its spawn.
    trial.child.as_ref()?;
    let summary: Value = std::fs::read_to_string(trial.logs.join("acp-summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let error = summary["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    match trial.status {
        Some(0) if summary.get("prompt_response").is_some() => None,
        Some(0) => Some("no prompt_response in acp-summary.json".to_string()),
        Some(code) => Some(format!("runner exit {code}: {error}")),
        None => Some(format!("runner killed: {error}")),
    }
}

/// The summed RSS, in KiB, of every process under one of `roots` (the agents) and of the
/// roots themselves (the runners), from one pass over `/proc`.
fn rss_under(roots: &HashSet<u32>) -> (u64, u64) {
    let mut parents: HashMap<u32, u32> = HashMap::new();
    let mut rss: HashMap<u32, u64> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return (0, 0);
    };
    for entry in entries.filter_map(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        };
        if let Some(ppid) = field("PPid:") {
            parents.insert(pid, ppid as u32);
        }
        rss.insert(pid, field("VmRSS:").unwrap_or(0));
    }
    let under_a_root = |mut pid: u32| {
        while let Some(&parent) = parents.get(&pid) {
            if roots.contains(&parent) {
                return true;
            }
            if parent == 0 || parent == pid {
                break;
            }
            pid = parent;
        }
        false
    };
    let (mut agents, mut runners) = (0, 0);
    for (&pid, &kib) in &rss {
        if roots.contains(&pid) {
            runners += kib;
        } else if under_a_root(pid) {
            agents += kib;
        }
    }
    (agents, runners)
}
