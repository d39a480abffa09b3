//! Bench section `remote`: what RemoteExecutionEnvironment costs per call over the
//! exec-server as a direct child and over ssh to a private loopback sshd (one connection
//! reused vs a new `ssh` per call), and 100 concurrent sessions in one process, each with
//! its own exec-server child, 20 shell rounds each: wall time, peak RSS, threads; and
//! what the session's sandbox, applied by the exec-server, adds to a command.
//!
//! Builds the exec-server first (`cargo build --release -p agentloop-cli --bin
//! agentloop-exec-server`). Medians of
//! many calls; never asserts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::remote::{RemoteExecutionEnvironment, Transport};
use agentloop::exec::{
    CommandRequest, ExecutionEnvironment, LocalExecutionEnvironment, Sandbox, SandboxPolicy,
};
use agentloop::llm::Client;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{Session, SessionConfig};
use agentloop::tools;
use serde_json::json;

use crate::sshd::Sshd;
use crate::{Row, e2e};

const SESSIONS: usize = 100;
const ROUNDS: usize = 20;

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "remote",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

pub(crate) fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The median of `runs` timed calls, after one call to warm up.
pub(crate) fn timed(runs: usize, mut call: impl FnMut()) -> Duration {
    call(); // warm up
    median(
        (0..runs)
            .map(|_| {
                let start = Instant::now();
                call();
                start.elapsed()
            })
            .collect(),
    )
}

fn trivial(env: &dyn ExecutionEnvironment) {
    let request = CommandRequest::new("true", Duration::from_secs(10));
    env.exec_command(&request, &|_, _| {}, &CancelToken::new())
        .expect("true runs");
}

/// Medians of `stat` and of `true` through `local` and `remote`, the two measured in
/// turn so that both see the same load on a shared machine:
/// `(local stat, remote stat, local true, remote true)`.
fn per_call(
    local: &dyn ExecutionEnvironment,
    remote: &dyn ExecutionEnvironment,
) -> (Duration, Duration, Duration, Duration) {
    let time = |call: &dyn Fn()| {
        let start = Instant::now();
        call();
        start.elapsed()
    };
    let stat = |env: &dyn ExecutionEnvironment| {
        env.stat(Path::new(".")).expect("stat");
    };
    let (mut ls, mut rs, mut lt, mut rt) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    trivial(local);
    trivial(remote);
    for i in 0..2000 {
        ls.push(time(&|| stat(local)));
        rs.push(time(&|| stat(remote)));
        if i % 10 == 0 {
            lt.push(time(&|| trivial(local)));
            rt.push(time(&|| trivial(remote)));
        }
    }
    (median(ls), median(rs), median(lt), median(rt))
}

fn server() -> Option<PathBuf> {
    let build = [
        "build",
        "--release",
        "-p",
        "agentloop-cli",
        "--bin",
        "agentloop-exec-server",
    ];
    if let Err(why) = e2e::cargo(&build, &[]) {
        eprintln!("bench remote: {why}");
        return None;
    }
    Some(e2e::target_dir().join("release/agentloop-exec-server"))
}

fn direct(server: &Path) -> Transport {
    Transport::direct(vec![server.display().to_string()])
}

pub fn run() -> Vec<Row> {
    let Some(server) = server() else {
        return vec![row("agentloop-exec-server build", "failed".into(), "")];
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rows = Vec::new();

    let local = LocalExecutionEnvironment::new(dir.path()).expect("the bench dir");
    let remote = RemoteExecutionEnvironment::connect(direct(&server), Some(dir.path()))
        .expect("the exec-server answers");
    let (local_stat, stat, local_exec, exec) = per_call(&local, &remote);
    rows.push(row("local: stat, median of 2000", us(local_stat), ""));
    rows.push(row("stdio exec-server: stat, median of 2000", us(stat), ""));
    rows.push(row("local: `true`, median of 200", us(local_exec), ""));
    rows.push(row(
        "stdio exec-server: `true`, median of 200",
        us(exec),
        "",
    ));
    rows.push(row(
        "stdio overhead per call above local (stat / `true`)",
        format!(
            "{} / {}",
            us(stat.saturating_sub(local_stat)),
            us(exec.saturating_sub(local_exec))
        ),
        "< 1 ms",
    ));
    rows.extend(sandboxed(&server, dir.path(), &remote));
    drop(remote);

    rows.extend(over_ssh(&server, dir.path()));
    rows.extend(many_sessions(&server));
    rows
}

/// `true` through a stdio exec-server under the CLI's default sandbox (workspace-write,
/// network off) against `open`, one without, measured in turn.
fn sandboxed(server: &Path, dir: &Path, open: &dyn ExecutionEnvironment) -> Vec<Row> {
    let sandbox = Sandbox::new(SandboxPolicy::workspace_write());
    let remote =
        match RemoteExecutionEnvironment::connect_sandboxed(direct(server), Some(dir), sandbox) {
            Ok(remote) => remote,
            Err(e) => return vec![row("stdio exec-server, sandboxed", e.to_string(), "")],
        };
    let time = |env: &dyn ExecutionEnvironment| {
        let start = Instant::now();
        trivial(env);
        start.elapsed()
    };
    trivial(&remote);
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        without.push(time(open));
        with.push(time(&remote));
    }
    let (without, with) = (median(without), median(with));
    vec![
        row(
            "stdio exec-server: `true` without / under workspace-write, network off, median of 200",
            format!("{} / {}", us(without), us(with)),
            "",
        ),
        row(
            "the sandbox applied remotely, per command",
            us(with.saturating_sub(without)),
            "",
        ),
    ]
}

fn over_ssh(server: &Path, dir: &Path) -> Vec<Row> {
    let Some(sshd) = Sshd::start() else {
        return vec![row("ssh", "skipped: no sshd".into(), "")];
    };
    let transport = Transport::ssh(
        &sshd.destination(),
        Some(sshd.port),
        &sshd.options(),
        Some(&server.display().to_string()),
    );
    let connect_started = Instant::now();
    let remote = RemoteExecutionEnvironment::connect(transport, Some(dir)).expect("ssh connects");
    let connect = connect_started.elapsed();
    let local = LocalExecutionEnvironment::new(dir).expect("the bench dir");
    let (_, stat, _, exec) = per_call(&local, &remote);
    let fresh = timed(10, || {
        let status = Command::new("ssh")
            .args(["-T", "-o", "BatchMode=yes", "-p", &sshd.port.to_string()])
            .args(sshd.options())
            .arg(sshd.destination())
            .arg("true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("ssh runs");
        assert!(status.success());
    });
    vec![
        row("ssh: connect + hello", us(connect), ""),
        row("ssh, one connection: stat, median of 2000", us(stat), ""),
        row("ssh, one connection: `true`, median of 200", us(exec), ""),
        row(
            "ssh, a new `ssh host true` per call, median of 10",
            us(fresh),
            "far above reuse",
        ),
    ]
}

fn status_field(pid: &str, field: &str) -> u64 {
    proc_field(pid, "status", field)
}

/// A `kB` figure from `/proc/<pid>/<file>`.
fn proc_field(pid: &str, file: &str, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn many_sessions(server: &Path) -> Vec<Row> {
    let dirs: Vec<tempfile::TempDir> = (0..SESSIONS)
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let rss_before = status_field("self", "VmRSS:");
    let started = Instant::now();
    let envs: Vec<Arc<RemoteExecutionEnvironment>> = dirs
        .iter()
        .map(|d| {
            let env = RemoteExecutionEnvironment::connect(direct(server), Some(d.path()))
                .expect("the exec-server answers");
            Arc::new(env)
        })
        .collect();
    let connected = started.elapsed();
    let done = AtomicBool::new(false);
    let (peak_threads, peak_servers_kib) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let peak_servers_pss = AtomicUsize::new(0);
    let completed = AtomicUsize::new(0);
    let run_started = Instant::now();
    thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                let threads = status_field("self", "Threads:") as usize;
                peak_threads.fetch_max(threads, Ordering::SeqCst);
                let servers: u64 = envs
                    .iter()
                    .filter_map(|e| e.transport_pid())
                    .map(|pid| status_field(&pid.to_string(), "VmRSS:"))
                    .sum();
                peak_servers_kib.fetch_max(servers as usize, Ordering::SeqCst);
                // Proportional: the binary's shared pages counted once overall.
                let pss: u64 = envs
                    .iter()
                    .filter_map(|e| e.transport_pid())
                    .map(|pid| proc_field(&pid.to_string(), "smaps_rollup", "Pss:"))
                    .sum();
                peak_servers_pss.fetch_max(pss as usize, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(50));
            }
        });
        let handles: Vec<_> = envs
            .iter()
            .enumerate()
            .map(|(i, env)| {
                let env = Arc::clone(env);
                let completed = &completed;
                thread::Builder::new()
                    .name(format!("bench-session-{i}"))
                    .stack_size(256 * 1024)
                    .spawn_scoped(s, move || {
                        let mut turns: Vec<ScriptedTurn> = (0..ROUNDS)
                            .map(|r| {
                                ScriptedTurn::tool_call(
                                    "shell",
                                    json!({"command": format!("echo round {r}")}),
                                )
                            })
                            .collect();
                        turns.push(ScriptedTurn::text("done"));
                        let profile = ProviderProfile::new("scripted", "scripted-model")
                            .with_tool(tools::shell());
                        let client = Client::new().with_provider(ScriptedModel::new(turns));
                        let session =
                            Session::new(profile, env, client, SessionConfig::default()).unwrap();
                        if session
                            .run("run the rounds")
                            .is_ok_and(|o| o.text == "done")
                        {
                            completed.fetch_add(1, Ordering::SeqCst);
                        }
                    })
                    .unwrap()
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
    });
    let wall = run_started.elapsed();
    let host_peak = status_field("self", "VmHWM:");
    drop(envs);
    let shells = SESSIONS * ROUNDS;
    vec![
        row(
            format!("{SESSIONS} sessions: connect {SESSIONS} exec-servers"),
            format!("{:.0} ms", connected.as_secs_f64() * 1e3),
            "",
        ),
        row(
            format!(
                "{SESSIONS} sessions × {ROUNDS} shell rounds: wall time ({} completed)",
                completed.load(Ordering::SeqCst)
            ),
            format!(
                "{:.2} s ({:.2} ms per shell call)",
                wall.as_secs_f64(),
                wall.as_secs_f64() * 1e3 / shells as f64
            ),
            "",
        ),
        row(
            "host process: peak RSS (VmHWM), RSS before",
            format!(
                "{:.1} MiB, {:.1} MiB",
                host_peak as f64 / 1024.0,
                rss_before as f64 / 1024.0
            ),
            "",
        ),
        row(
            "host process: peak threads",
            peak_threads.load(Ordering::SeqCst).to_string(),
            "",
        ),
        row(
            format!("{SESSIONS} exec-servers: peak total RSS / PSS"),
            format!(
                "{:.1} MiB / {:.1} MiB",
                peak_servers_kib.load(Ordering::SeqCst) as f64 / 1024.0,
                peak_servers_pss.load(Ordering::SeqCst) as f64 / 1024.0
            ),
            "",
        ),
    ]
}
