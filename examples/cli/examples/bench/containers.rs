//! Bench section `containers`: what a `podman://` session costs per call against the
//! harness default, one `podman exec CTR bash -c CMD` per command, on the same container
//! and commands; and the start of a session on a fresh container, the exec-server copy
//! (bootstrap) included, against a second connection that reuses the copy; and 100
//! containers (started in parallel), each with a session of 20 shell rounds through
//! `podman://`, driven from this one process: wall, host RSS and threads, the containers'
//! memory (`podman stats`) and the `podman exec` clients'. Needs podman and the test image
//! (`.ci/container-image`). Medians; never asserts.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::remote::{
    ContainerKind, ContainerOptions, RemoteExecutionEnvironment, Transport,
};
use agentloop::exec::{CommandRequest, ExecutionEnvironment};
use agentloop::llm::Client;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{Session, SessionConfig};
use agentloop::tools;
use serde_json::json;
use support::podman::{Container, podman};

use crate::remote::{median, timed};
use crate::scale::{CONSUMERS, ROUNDS, Reading, children_pids, consume, status};
use crate::{Row, e2e, ms};

/// How many containers the many-containers rows run.
const MANY: usize = 100;
/// Threads starting, connecting and removing containers at once.
const STARTERS: usize = 8;

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "containers",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

pub fn run() -> Vec<Row> {
    let build = [
        "build",
        "--release",
        "-p",
        "agentloop-cli",
        "--bin",
        "agentloop-exec-server",
    ];
    if let Err(why) = e2e::cargo(&build, &[]) {
        return vec![row(
            "agentloop-exec-server build",
            format!("failed: {why}"),
            "",
        )];
    }
    let server = e2e::target_dir().join("release/agentloop-exec-server");
    let Some(container) = Container::start(&[]) else {
        return vec![row("podman", "skipped: no podman".into(), "")];
    };
    let mut rows = per_call(&server, &container);
    drop(container);
    rows.extend(many(&server));
    rows
}

fn per_call(server: &Path, container: &Container) -> Vec<Row> {
    let mut options = ContainerOptions::new();
    options.bootstrap = Some(server.to_path_buf());
    let url = format!("podman://{}/tmp", container.name);
    let (transport, dir) =
        Transport::parse_container_url(&url, &options, None).expect("the podman transport");

    let started = Instant::now();
    let env = RemoteExecutionEnvironment::connect(transport.clone(), dir.as_deref())
        .expect("the bootstrap and hello");
    let first = started.elapsed();
    drop(env);
    let again = timed(5, || {
        RemoteExecutionEnvironment::connect(transport.clone(), dir.as_deref()).expect("hello");
    });
    let env = RemoteExecutionEnvironment::connect(transport, dir.as_deref()).expect("hello");

    let commands = ["true", "echo hello", "ls /usr/bin | wc -l"];
    let mut rows = vec![
        row(
            "session start on a fresh container, copy included",
            ms(first),
            "",
        ),
        row("session start, the copy reused, median of 5", ms(again), ""),
    ];
    for command in commands {
        // Wall per call, and the overhead: the wall less the command's own run time as the
        // exec-server measured it in the container (bash's start and the command itself).
        let mut overheads = Vec::with_capacity(200);
        let through = timed(200, || {
            let request = CommandRequest::new(command, Duration::from_secs(20));
            let started = Instant::now();
            let result = env
                .exec_command(&request, &|_, _| {}, &CancelToken::new())
                .expect("the command runs");
            overheads.push(started.elapsed().saturating_sub(result.duration));
        });
        let overhead = median(overheads.split_off(1)); // without the warm-up call
        let per_exec = timed(10, || {
            let status = Command::new("podman")
                .args(["exec", &container.name, "bash", "-c", command])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("podman exec runs");
            assert!(status.success());
        });
        rows.push(row(
            format!("`{command}`: podman:// median of 200 / a `podman exec` each, median of 10"),
            format!(
                "{} / {} ({:.0}x)",
                ms(through),
                ms(per_exec),
                per_exec.as_secs_f64() / through.as_secs_f64()
            ),
            "",
        ));
        rows.push(row(
            format!(
                "`{command}`: podman:// overhead per call (wall less the command's own time \
                 in the container), median of 200 / a `podman exec` each"
            ),
            format!(
                "{} / {} ({:.0}x)",
                ms(overhead),
                ms(per_exec),
                per_exec.as_secs_f64() / overhead.as_secs_f64()
            ),
            "≥ 100x",
        ));
    }
    rows
}

/// Runs `work` for every index below `n` on [`STARTERS`] threads.
fn parallel(n: usize, work: impl Fn(usize) + Sync) {
    let next = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..STARTERS {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n {
                        break;
                    }
                    work(i);
                }
            });
        }
    });
}

/// The containers' memory as `podman stats` reports it (their cgroups), summed, in MiB.
fn containers_memory(containers: &[Container]) -> f64 {
    let mut args = vec!["stats", "--no-stream", "--format", "{{.MemUsage}}"];
    args.extend(containers.iter().map(|c| c.name.as_str()));
    let out = podman(&args);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let used = l.split('/').next()?.trim();
            let at = used.find(|c: char| c.is_ascii_alphabetic())?;
            let value: f64 = used[..at].parse().ok()?;
            let unit = match &used[at..] {
                "B" => 1.0,
                "kB" => 1e3,
                "MB" => 1e6,
                "GB" => 1e9,
                _ => return None,
            };
            Some(value * unit / (1024.0 * 1024.0))
        })
        .sum()
}

/// The summed `VmRSS` / `Pss` (MiB) of this process's children: the `podman exec` clients.
fn clients_memory() -> (f64, f64, usize) {
    let pids = children_pids();
    let field = |pid: u32, file: &str, key: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/{file}"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let rss: u64 = pids.iter().map(|&p| field(p, "status", "VmRSS:")).sum();
    let pss: u64 = pids.iter().map(|&p| field(p, "smaps_rollup", "Pss:")).sum();
    (rss as f64 / 1024.0, pss as f64 / 1024.0, pids.len())
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// [`MANY`] containers, a `podman://` session each, [`ROUNDS`] shell rounds each.
fn many(server: &Path) -> Vec<Row> {
    let started = Instant::now();
    let slots: Vec<Mutex<Option<Container>>> = (0..MANY).map(|_| Mutex::new(None)).collect();
    parallel(MANY, |i| *slots[i].lock().unwrap() = Container::start(&[]));
    let containers: Vec<Container> = slots
        .into_iter()
        .filter_map(|s| s.into_inner().unwrap())
        .collect();
    let start_wall = started.elapsed();
    if containers.len() < MANY {
        return vec![row(
            format!("{MANY} containers"),
            format!("only {} started", containers.len()),
            "",
        )];
    }
    let idle_memory = containers_memory(&containers);
    let (threads_before, rss_before) = (status("Threads:"), status("VmRSS:"));
    let mut options = ContainerOptions::new();
    options.bootstrap = Some(server.to_path_buf());
    let connecting = Instant::now();
    let envs: Vec<Mutex<Option<Arc<RemoteExecutionEnvironment>>>> =
        (0..MANY).map(|_| Mutex::new(None)).collect();
    parallel(MANY, |i| {
        let transport =
            Transport::container(ContainerKind::Podman, &containers[i].name, &options, None)
                .expect("the podman transport");
        let env = RemoteExecutionEnvironment::connect(transport, Some(Path::new("/tmp")))
            .expect("the bootstrap and hello");
        *envs[i].lock().unwrap() = Some(Arc::new(env));
    });
    let connect_wall = connecting.elapsed();
    let envs: Vec<Arc<RemoteExecutionEnvironment>> = envs
        .into_iter()
        .filter_map(|e| e.into_inner().unwrap())
        .collect();
    let peak_threads = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    let completed = AtomicUsize::new(0);
    let running = Instant::now();
    let mut sessions = Vec::with_capacity(MANY);
    thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                peak_threads.fetch_max(status("Threads:") as usize, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(20));
            }
        });
        let mut shares: Vec<Vec<Reading>> = (0..CONSUMERS).map(|_| Vec::new()).collect();
        for (i, env) in envs.iter().enumerate() {
            let mut turns: Vec<ScriptedTurn> = (0..ROUNDS)
                .map(|r| {
                    ScriptedTurn::tool_call("shell", json!({"command": format!("echo round {r}")}))
                })
                .collect();
            turns.push(ScriptedTurn::text("done"));
            let profile =
                ProviderProfile::new("scripted", "scripted-model").with_tool(tools::shell());
            let client = Client::new().with_provider(ScriptedModel::new(turns));
            let session = Session::new(
                profile,
                Arc::clone(env) as Arc<dyn ExecutionEnvironment>,
                client,
                SessionConfig::default(),
            )
            .unwrap();
            shares[i % CONSUMERS].push(Reading::new(session.events()));
            session.submit("run the rounds").unwrap();
            sessions.push(session);
        }
        let consumers: Vec<_> = shares
            .into_iter()
            .map(|share| s.spawn(|| completed.fetch_add(consume(share), Ordering::SeqCst)))
            .collect();
        for consumer in consumers {
            consumer.join().unwrap();
        }
        done.store(true, Ordering::SeqCst);
    });
    let wall = running.elapsed();
    let busy_memory = containers_memory(&containers);
    let (clients_rss, clients_pss, clients) = clients_memory();
    let rss_peak = status("VmHWM:");
    drop(sessions);
    drop(envs);
    let threads_after = status("Threads:");
    let removing = Instant::now();
    let slots: Vec<Mutex<Option<Container>>> = containers
        .into_iter()
        .map(|c| Mutex::new(Some(c)))
        .collect();
    parallel(MANY, |i| drop(slots[i].lock().unwrap().take()));
    let remove_wall = removing.elapsed();
    // The bench's own threads at the peak: the sampler and the consumers.
    let peak = peak_threads.load(Ordering::SeqCst);
    let added = peak.saturating_sub(threads_before as usize + 1 + CONSUMERS);
    let calls = MANY * ROUNDS;
    vec![
        row(
            format!("{MANY} containers: started ({STARTERS} at a time); removed"),
            format!(
                "{:.1} s; {:.1} s",
                start_wall.as_secs_f64(),
                remove_wall.as_secs_f64()
            ),
            "",
        ),
        row(
            format!("{MANY} podman:// sessions connected, the exec-server copied into each"),
            format!("{:.1} s", connect_wall.as_secs_f64()),
            "",
        ),
        row(
            format!(
                "{MANY} sessions × {ROUNDS} shell rounds: wall ({} of {MANY} completed)",
                completed.load(Ordering::SeqCst)
            ),
            format!(
                "{:.2} s ({:.2} ms a call)",
                wall.as_secs_f64(),
                wall.as_secs_f64() * 1e3 / calls as f64
            ),
            "",
        ),
        row(
            format!(
                "host threads at peak ({threads_before} before, the bench's {} excluded); per session; after drop",
                1 + CONSUMERS
            ),
            format!("{peak}; {:.2}; {threads_after}", added as f64 / MANY as f64),
            "≤ 1.5 a session",
        ),
        row(
            "host RSS: before the sessions; peak",
            format!("{}; {}", mib(rss_before), mib(rss_peak)),
            "",
        ),
        row(
            "containers' memory (podman stats): idle; with the exec-server after the rounds",
            format!("{idle_memory:.1} MiB; {busy_memory:.1} MiB"),
            "",
        ),
        row(
            format!("the {clients} `podman exec` clients on the host: RSS / PSS"),
            format!("{clients_rss:.0} MiB / {clients_pss:.0} MiB"),
            "",
        ),
    ]
}
