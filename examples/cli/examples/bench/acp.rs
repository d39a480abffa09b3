//! Bench section `acp`: `agentloop acp` against the ACP adapters of Codex
//! (`@zed-industries/codex-acp` 0.16.0) and Claude Code (`@zed-industries/claude-agent-acp`
//! 0.23.1), side by side on one loopback model (`acp_model.rs`) and one task: start →
//! `initialize` answered, `session/new`, the three-round task's prompt → first update and
//! → `end_turn`, a sleeping command's prompt → `session/cancel` → `cancelled`, and the peak
//! memory of the agent's whole process tree. Medians over the runs.
//!
//! The adapters are installed with `npm install --prefix target/ci/acp-peers …` (not by
//! `.ci/run`: 300 MB) and get dummy keys, their base URLs on 127.0.0.1 and their own
//! temporary homes. The whole section runs in a private network namespace (`unshare -n`,
//! as root) where only loopback exists, so no agent can reach the network; without it the
//! section says so. Measures; never asserts.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::{Value, json};

use crate::acp_model::Model;
use crate::{Row, ms};

/// The argument that runs the section inside the namespace (see [`run`]).
pub const IN_NETNS: &str = "__acp-in-netns";

/// Runs per agent.
const RUNS_AGENTLOOP: usize = 10;
const RUNS_PEER: usize = 3;

fn row(name: String, value: String, target: &str) -> Row {
    Row {
        section: "acp",
        name,
        value,
        target: target.to_string(),
    }
}

/// Re-runs this bench in a new network namespace with loopback up, and reads its rows
/// back; measures here (with a row saying so) where no namespace can be made.
pub fn run() -> Vec<Row> {
    if let Err(why) = crate::e2e::cargo(crate::e2e::RELEASE_BUILD, &[]) {
        return vec![row(
            "agentloop".to_string(),
            format!("not built: {why}"),
            "",
        )];
    }
    let binary = crate::e2e::target_dir().join("release/agentloop");
    in_netns("acp", IN_NETNS, &binary).unwrap_or_else(|| {
        let mut rows = vec![row(
            "network namespace".to_string(),
            "none (unshare -n failed): measured on the host's network".to_string(),
            "",
        )];
        rows.extend(measure_with(&binary));
        rows
    })
}

/// Runs `bench <arg>` in a new network namespace (`unshare -n`, loopback up) with the
/// release CLI at `binary`, and reads back the rows it prints (see [`print_rows`]);
/// `None` when the namespace cannot be made or the run fails. Shared with `harness`.
pub fn in_netns(section: &'static str, arg: &str, binary: &Path) -> Option<Vec<Row>> {
    let bench = std::env::current_exe().unwrap();
    let script = format!("ip link set lo up && exec {} {arg}", bench.display());
    let output = Command::new("unshare")
        .args(["-n", "sh", "-c", &script])
        .env(AGENTLOOP_BINARY, binary)
        .stderr(Stdio::inherit())
        .output()
        .ok()
        .filter(|out| out.status.success())?;
    let rows = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|v| Row {
            section,
            name: v["name"].as_str().unwrap_or("").to_string(),
            value: v["value"].as_str().unwrap_or("").to_string(),
            target: v["target"].as_str().unwrap_or("").to_string(),
        })
        .collect();
    Some(rows)
}

/// Where the release build of the CLI is, for the run inside the namespace.
const AGENTLOOP_BINARY: &str = "ACP_BENCH_AGENTLOOP";

/// The release CLI named by [`in_netns`], inside the namespace.
pub fn netns_binary() -> Option<PathBuf> {
    let binary = std::env::var_os(AGENTLOOP_BINARY).map(PathBuf::from);
    if binary.is_none() {
        eprintln!("bench: {AGENTLOOP_BINARY} is not set");
    }
    binary
}

/// Prints rows as JSON lines, for [`in_netns`] to read back.
pub fn print_rows(rows: Vec<Row>) {
    for r in rows {
        println!(
            "{}",
            json!({"name": r.name, "value": r.value, "target": r.target})
        );
    }
}

/// Inside the namespace: measures and prints the rows as JSON lines.
pub fn in_netns_main() -> i32 {
    let Some(binary) = netns_binary() else {
        return 2;
    };
    print_rows(measure_with(&binary));
    0
}

/// How one agent is started.
struct Agent {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// The `authenticate` method the agent asks for before `session/new` (Codex's
    /// `openai-api-key`: take the key from the environment), sent untimed.
    auth: Option<&'static str>,
    /// Files written into the agent's temporary home before it starts (path, text).
    files: Vec<(&'static str, String)>,
    runs: usize,
}

/// The timed steps, in order: a run that stops early has the ones before the stop.
const STEPS: [&str; 5] = [
    "start → initialize answered",
    "session/new",
    "prompt → first update",
    "prompt → end_turn (3 rounds)",
    "cancel → cancelled",
];

/// One run's figures: the steps it completed (of [`STEPS`]) and its peak memory.
#[derive(Default, Clone)]
struct Figures {
    steps: Vec<Duration>,
    peak_kib: u64,
}

fn measure_with(binary: &Path) -> Vec<Row> {
    let model = Model::start();
    let mut agents = vec![agentloop(binary, &model.url)];
    let peers = support::ci::dir().join("acp-peers/node_modules/.bin");
    let mut missing = Vec::new();
    // ACP_BENCH_ONLY=codex (or claude) measures that adapter alone, beside agentloop.
    let only = std::env::var("ACP_BENCH_ONLY").unwrap_or_default();
    for (name, bin) in [
        ("codex-acp 0.16.0", "codex-acp"),
        ("claude-agent-acp 0.23.1", "claude-agent-acp"),
    ] {
        if !bin.contains(only.as_str()) {
            continue;
        }
        let program = peers.join(bin);
        if !program.exists() {
            missing.push(name);
            continue;
        }
        let env = match bin {
            "codex-acp" => vec![
                (
                    "OPENAI_API_KEY".to_string(),
                    "sk-dummy-bench-key".to_string(),
                ),
                ("OPENAI_BASE_URL".to_string(), format!("{}/v1", model.url)),
            ],
            _ => vec![
                (
                    "ANTHROPIC_API_KEY".to_string(),
                    "sk-ant-dummy-bench-key".to_string(),
                ),
                ("ANTHROPIC_BASE_URL".to_string(), model.url.clone()),
            ],
        };
        agents.push(Agent {
            name,
            program,
            args: Vec::new(),
            env,
            auth: (bin == "codex-acp").then_some("openai-api-key"),
            files: match bin {
                // Codex takes its base URL from a provider in its config, not from the
                // environment.
                "codex-acp" => vec![(".codex/config.toml", codex_config(&model.url))],
                _ => Vec::new(),
            },
            runs: RUNS_PEER,
        });
    }
    let mut results = Vec::new();
    for agent in &agents {
        let mut runs = Vec::new();
        let mut failure = None;
        for _ in 0..agent.runs {
            let (figures, outcome) = one_run(agent);
            match outcome {
                Ok(()) => runs.push(figures),
                Err(why) => {
                    failure = Some((figures, why));
                    break;
                }
            }
        }
        results.push((agent.name, runs, failure));
    }
    let ours = median_figures(&results[0].1);
    let mut rows = Vec::new();
    for (name, runs, failure) in &results {
        rows.extend(agent_rows(name, runs, failure.as_ref(), ours.as_ref()));
    }
    for name in missing {
        rows.push(row(
            name.to_string(),
            "not installed: npm install --prefix target/ci/acp-peers @zed-industries/codex-acp@0.16.0 @zed-industries/claude-agent-acp@0.23.1".to_string(),
            "",
        ));
    }
    rows.push(row(
        "model requests served".to_string(),
        model.requests.load(Ordering::SeqCst).to_string(),
        "",
    ));
    rows
}

fn agentloop(binary: &Path, url: &str) -> Agent {
    Agent {
        name: "agentloop",
        program: binary.to_path_buf(),
        args: ["acp", "--base-url", url].map(String::from).to_vec(),
        env: vec![(
            "ANTHROPIC_API_KEY".to_string(),
            "sk-ant-dummy-bench-key".to_string(),
        )],
        auth: None,
        files: Vec::new(),
        runs: RUNS_AGENTLOOP,
    }
}

/// Codex's configuration: one model provider on the loopback model, Responses over HTTP;
/// its workspace sandbox without `/tmp` (bubblewrap would make a `/tmp/.git` mount point
/// on the host, and a `.git` in `/tmp` turns every temporary directory into a checkout).
pub fn codex_config(url: &str) -> String {
    format!(
        "model_provider = \"bench\"\nmodel = \"gpt-5.3-codex\"\n\
         sandbox_mode = \"workspace-write\"\napproval_policy = \"on-request\"\n\n\
         [model_providers.bench]\n\
         name = \"bench\"\nbase_url = \"{url}/v1\"\nenv_key = \"OPENAI_API_KEY\"\n\
         wire_api = \"responses\"\n\n\
         [sandbox_workspace_write]\nexclude_slash_tmp = true\nexclude_tmpdir_env_var = true\n"
    )
}

/// The median of each step over runs that all completed it, and the median peak.
fn median_figures(runs: &[Figures]) -> Option<Figures> {
    let steps = runs.iter().map(|f| f.steps.len()).min()?;
    let median = |mut values: Vec<u64>| {
        values.sort_unstable();
        values[values.len() / 2]
    };
    Some(Figures {
        steps: (0..steps)
            .map(|i| {
                Duration::from_nanos(median(
                    runs.iter().map(|f| f.steps[i].as_nanos() as u64).collect(),
                ))
            })
            .collect(),
        peak_kib: median(runs.iter().map(|f| f.peak_kib).collect()),
    })
}

/// The rows of one agent: the medians of its complete runs, or, when none completed,
/// what its one failed run measured before it stopped and why it stopped. Adapters get
/// their ratio to agentloop beside each figure.
fn agent_rows(
    name: &str,
    runs: &[Figures],
    failure: Option<&(Figures, String)>,
    ours: Option<&Figures>,
) -> Vec<Row> {
    let peer = name != "agentloop";
    let target = if peer {
        ""
    } else {
        "≤ 1/20 of the adapters'"
    };
    let (figures, label) = match (median_figures(runs), failure) {
        (Some(f), _) => (f, format!("median of {}", runs.len())),
        (None, Some((f, _))) => (f.clone(), "1 run, before it stopped".to_string()),
        (None, None) => return Vec::new(),
    };
    let mut rows = Vec::new();
    for (i, value) in figures.steps.iter().enumerate() {
        let note = match ours.and_then(|o| o.steps.get(i)).filter(|_| peer) {
            Some(o) => format!(" ({:.0}×)", value.as_secs_f64() / o.as_secs_f64().max(1e-9)),
            None => String::new(),
        };
        rows.push(row(
            format!("{name}: {} ({label})", STEPS[i]),
            format!("{}{note}", ms(*value)),
            target,
        ));
    }
    let note = match ours.filter(|_| peer) {
        Some(o) => format!(
            " ({:.0}×)",
            figures.peak_kib as f64 / o.peak_kib.max(1) as f64
        ),
        None => String::new(),
    };
    rows.push(row(
        format!("{name}: peak memory, process tree ({label})"),
        format!("{:.1} MiB{note}", figures.peak_kib as f64 / 1024.0),
        target,
    ));
    if let Some((_, why)) = failure {
        let at = runs.len() + 1;
        rows.push(row(format!("{name}: run {at} stopped"), why.clone(), ""));
    }
    rows
}

/// An agent process and the lines it writes.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    next_id: i64,
}

impl Client {
    fn send(&mut self, message: &Value) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        writeln!(stdin, "{message}").map_err(|e| format!("write: {e}"))
    }

    fn request(&mut self, method: &str, params: Value) -> Result<i64, String> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        Ok(id)
    }

    /// Reads until the answer to `id`, answering permission requests (allow once) and
    /// calling `seen` on each other message.
    fn until(&mut self, id: i64, mut seen: impl FnMut(&Value)) -> Result<Value, String> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = self
                .lines
                .recv_timeout(left)
                .map_err(|_| format!("no answer to request {id}"))?;
            if message["id"] == id && message.get("method").is_none() {
                return match message.get("error") {
                    Some(error) => Err(format!("error: {error}")),
                    None => Ok(message["result"].clone()),
                };
            }
            if message["method"] == "session/request_permission" {
                let option = message["params"]["options"]
                    .as_array()
                    .and_then(|o| o.iter().find(|o| o["kind"] == "allow_once").or(o.first()))
                    .map(|o| o["optionId"].clone())
                    .unwrap_or(json!("allow"));
                let answer = json!({"jsonrpc": "2.0", "id": message["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": option}}});
                self.send(&answer)?;
            } else if message.get("method").is_some() && message.get("id").is_some() {
                // Anything else the agent asks (files, terminals): not offered, refuse.
                let refuse = json!({"jsonrpc": "2.0", "id": message["id"],
                    "error": {"code": -32601, "message": "not offered"}});
                self.send(&refuse)?;
            } else {
                seen(&message);
            }
        }
    }
}

impl Drop for Client {
    /// Ends the agent's whole process group (an adapter's launcher starts the agent as
    /// its child).
    fn drop(&mut self) {
        drop(self.stdin.take());
        // SAFETY: the group is the agent's own (`process_group(0)` at spawn).
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

fn one_run(agent: &Agent) -> (Figures, Result<(), String>) {
    let mut figures = Figures::default();
    let outcome = one_run_into(agent, &mut figures);
    (figures, outcome)
}

fn one_run_into(agent: &Agent, figures: &mut Figures) -> Result<(), String> {
    // Not under /tmp (Codex refuses to put its sandbox helper under a temporary directory,
    // and then cannot run a command) and not in a git checkout (agents read its state).
    let homes = crate::e2e::target_dir().join("acp-bench-homes");
    std::fs::create_dir_all(&homes).map_err(|e| e.to_string())?;
    let home = tempfile::tempdir_in(&homes).map_err(|e| e.to_string())?;
    let dir = std::fs::canonicalize(home.path()).unwrap().join("work");
    std::fs::create_dir(&dir).unwrap();
    let mut command = Command::new(&agent.program);
    command
        .args(&agent.args)
        .current_dir(&dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("CODEX_HOME", home.path().join(".codex"))
        .env("CLAUDE_CONFIG_DIR", home.path().join(".claude"))
        .envs(agent.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(if std::env::var_os("ACP_BENCH_VERBOSE").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .process_group(0);
    std::fs::create_dir_all(home.path().join(".codex")).unwrap();
    for (path, text) in &agent.files {
        std::fs::write(home.path().join(path), text).map_err(|e| e.to_string())?;
    }
    let started = Instant::now();
    let mut child = command.spawn().map_err(|e| format!("spawn: {e}"))?;
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = crossbeam_channel::unbounded();
    let reader = thread::Builder::new()
        .name("bench-acp-reader".to_string())
        .spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(value) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(value);
                }
            }
        })
        .unwrap();
    let peak = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        thread::Builder::new()
            .name("bench-acp-rss".to_string())
            .spawn(move || {
                while sampling.load(Ordering::SeqCst) {
                    peak.fetch_max(tree_rss_kib(pid), Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(5));
                }
            })
            .unwrap()
    };
    let mut client = Client {
        stdin: child.stdin.take(),
        child,
        lines,
        next_id: 0,
    };
    let result = session(&mut client, agent, &dir, started, figures);
    // Closing stdin is the client's goodbye; an agent that stays is ended with its group
    // after a second (an adapter need not exit on it; the bench must not wait on that).
    drop(client.stdin.take());
    let closed = Instant::now();
    while matches!(client.child.try_wait(), Ok(None)) && closed.elapsed() < Duration::from_secs(1) {
        thread::sleep(Duration::from_millis(10));
    }
    drop(client);
    sampling.store(false, Ordering::SeqCst);
    let _ = sampler.join();
    let _ = reader.join();
    figures.peak_kib = peak.load(Ordering::SeqCst);
    result
}

/// Runs the steps, pushing each one's time onto `figures.steps` as it completes.
fn session(
    client: &mut Client,
    agent: &Agent,
    dir: &Path,
    started: Instant,
    figures: &mut Figures,
) -> Result<(), String> {
    let caps = json!({"protocolVersion": 1, "clientCapabilities":
        {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false}});
    let id = client.request("initialize", caps)?;
    client.until(id, |_| {})?;
    figures.steps.push(started.elapsed());
    if let Some(method) = agent.auth {
        let id = client.request("authenticate", json!({"methodId": method}))?;
        client.until(id, |_| {})?;
    }
    let at = Instant::now();
    let id = client.request("session/new", json!({"cwd": dir, "mcpServers": []}))?;
    let trace = std::env::var_os("ACP_BENCH_VERBOSE").is_some();
    let new = client.until(id, |_| {})?;
    figures.steps.push(at.elapsed());
    let session_id = new["sessionId"].as_str().ok_or("no sessionId")?.to_string();
    // Full access where the agent offers it: the bench times the agent, not the asking.
    let prompt =
        |text: String| json!({"sessionId": session_id, "prompt": [{"type": "text", "text": text}]});
    let at = Instant::now();
    let id = client.request(
        "session/prompt",
        prompt(format!(
            "TASK: write hello to out.txt and read it back. DIR={}",
            dir.display()
        )),
    )?;
    let mut first_update = None;
    let answer = client.until(id, |m| {
        if trace {
            eprintln!(
                "bench: {}",
                m.to_string().chars().take(300).collect::<String>()
            );
        }
        if m["method"] == "session/update" && first_update.is_none() {
            let kind = &m["params"]["update"]["sessionUpdate"];
            // Not turn progress: sent after session/new on their own.
            if kind != "available_commands_update" && kind != "current_mode_update" {
                first_update = Some(at.elapsed());
            }
        }
    })?;
    let end_turn = at.elapsed();
    // An agent that sends nothing before its answer: its first update is the answer.
    figures.steps.push(first_update.unwrap_or(end_turn));
    if answer["stopReason"] != "end_turn" || !dir.join("out.txt").exists() {
        return Err(format!("the task did not complete: {answer}"));
    }
    figures.steps.push(end_turn);
    let id = client.request(
        "session/prompt",
        prompt(format!("SLEEP until cancelled. DIR={}", dir.display())),
    )?;
    let marker = dir.join("started");
    let waited = Instant::now();
    while !marker.exists() {
        if waited.elapsed() > Duration::from_secs(60) {
            return Err("the sleeping command never started".to_string());
        }
        // Keep answering permission requests while waiting.
        if let Ok(message) = client.lines.recv_timeout(Duration::from_millis(2)) {
            if message["method"] == "session/request_permission" {
                let option = message["params"]["options"][0]["optionId"].clone();
                client.send(&json!({"jsonrpc": "2.0", "id": message["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": option}}}))?;
            }
        }
    }
    let at = Instant::now();
    client.send(
        &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}}),
    )?;
    let answer = client.until(id, |_| {})?;
    let cancelled = at.elapsed();
    if answer["stopReason"] != "cancelled" {
        return Err(format!("cancel answered {answer}"));
    }
    figures.steps.push(cancelled);
    Ok(())
}

/// The resident memory of `pid` and all its descendants, in KiB.
fn tree_rss_kib(pid: u32) -> u64 {
    let mut parents: HashMap<u32, u32> = HashMap::new();
    let mut rss: HashMap<u32, u64> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for entry in entries.filter_map(Result::ok) {
        let Some(p) = entry
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
            parents.insert(p, ppid as u32);
        }
        rss.insert(p, field("VmRSS:").unwrap_or(0));
    }
    let in_tree = |mut p: u32| loop {
        if p == pid {
            return true;
        }
        match parents.get(&p) {
            Some(&parent) if parent != 0 && parent != p => p = parent,
            _ => return false,
        }
    };
    rss.iter()
        .filter(|(p, _)| in_tree(**p))
        .map(|(_, kib)| kib)
        .sum()
}
