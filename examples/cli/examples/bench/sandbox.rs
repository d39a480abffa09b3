//! Bench section `sandbox`: what applying the sandbox costs a command. Runs `true` through
//! LocalExecutionEnvironment::exec_command without a sandbox and under workspace-write with
//! the network off (Landlock ruleset built per command, seccomp filter, NO_NEW_PRIVS, a
//! private mount namespace with read-only bind mounts of `.git` and `AGENTS.md`), and
//! reports the medians, their difference, and the Landlock ABI; then the same with
//! [`HOST_SOCKETS`] listening sockets of this process in a runtime directory, which every
//! sandboxed command finds and hides (a desktop's daemons). Never asserts.

use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::{
    CommandRequest, ExecutionEnvironment, LocalExecutionEnvironment, Sandbox, SandboxPolicy,
};

use crate::{Row, ms};

const RUNS: usize = 60;

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "sandbox",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

fn median_of(env: &LocalExecutionEnvironment) -> Duration {
    let request = CommandRequest::new("true", Duration::from_secs(30));
    let mut samples: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let result = env
                .exec_command(&request, &|_, _| {}, &CancelToken::new())
                .expect("true runs");
            assert_eq!(result.exit_code, Some(0));
            start.elapsed()
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2]
}

pub fn run() -> Vec<Row> {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join(".git")).expect(".git");
    std::fs::write(dir.path().join("AGENTS.md"), "x").expect("AGENTS.md");
    let plain = LocalExecutionEnvironment::new(dir.path()).expect("the bench dir");
    let sandboxed = match LocalExecutionEnvironment::new(dir.path())
        .expect("the bench dir")
        .with_sandbox(Sandbox::new(SandboxPolicy::workspace_write()))
    {
        Ok(env) => env,
        Err(e) => return vec![row("sandbox", format!("not enforceable: {e}"), "")],
    };
    // Warm both paths (first fork, the probes) before measuring, then interleave.
    median_of(&plain);
    median_of(&sandboxed);
    let base = median_of(&plain);
    let with = median_of(&sandboxed);
    let mut rows = vec![
        row(
            format!("`true`, no sandbox (median of {RUNS})"),
            ms(base),
            "",
        ),
        row(
            format!("`true`, workspace-write + network off (median of {RUNS})"),
            ms(with),
            "",
        ),
        row(
            "overhead of applying the policy",
            ms(with.saturating_sub(base)),
            "< 2 ms",
        ),
        row(
            "Landlock ABI used",
            sandboxed.landlock_abi().to_string(),
            "",
        ),
    ];
    rows.extend(with_host_sockets(&sandboxed, with));
    let min_size = crate::e2e::target_dir().join("min-size/agentloop");
    if let Ok(meta) = std::fs::metadata(&min_size) {
        rows.push(row(
            "agentloop, min-size build present in target/ (see `size`)",
            format!("{:.2} MiB", meta.len() as f64 / (1024.0 * 1024.0)),
            "",
        ));
    }
    rows
}

/// Listening sockets made for the host-socket row: about what a desktop session's daemons
/// bind (D-Bus, systemd, PulseAudio, gpg-agent, Docker, …), with room to spare.
const HOST_SOCKETS: usize = 100;

/// The `true` median with [`HOST_SOCKETS`] host sockets to hide, against `without` (the
/// median with this machine's own); nothing where no runtime directory is writable.
fn with_host_sockets(sandboxed: &LocalExecutionEnvironment, without: Duration) -> Vec<Row> {
    let Some(dir) = ["/run", "/var/run"].iter().find_map(|d| {
        tempfile::Builder::new()
            .prefix("agentloop-bench")
            .tempdir_in(d)
            .ok()
    }) else {
        return vec![row("host sockets", "no writable /run".to_string(), "")];
    };
    let listeners: Vec<_> = (0..HOST_SOCKETS)
        .filter_map(|i| {
            std::os::unix::net::UnixListener::bind(dir.path().join(format!("s{i}.sock"))).ok()
        })
        .collect();
    median_of(sandboxed);
    let with = median_of(sandboxed);
    drop(listeners);
    vec![
        row(
            format!(
                "`true`, workspace-write, {HOST_SOCKETS} host sockets hidden (median of {RUNS})"
            ),
            ms(with),
            "",
        ),
        row(
            format!("what hiding {HOST_SOCKETS} host sockets adds"),
            ms(with.saturating_sub(without)),
            "< 2 ms",
        ),
    ]
}
