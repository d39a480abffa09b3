//! Bench section `containers`: what a `podman://` session costs per call against the
//! harness default, one `podman exec CTR bash -c CMD` per command, on the same container
//! and commands; and the start of a session on a fresh container, the exec-server copy
//! (bootstrap) included, against a second connection that reuses the copy. Needs podman
//! and the test image (`.ci/container-image`). Medians; never asserts.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::remote::{ContainerOptions, RemoteExecutionEnvironment, Transport};
use agentloop::exec::{CommandRequest, ExecutionEnvironment};
use support::podman::Container;

use crate::{Row, e2e};

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "containers",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn timed(runs: usize, mut call: impl FnMut()) -> Duration {
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
    let mut options = ContainerOptions::new();
    options.bootstrap = Some(server);
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
        let through = timed(200, || {
            let request = CommandRequest::new(command, Duration::from_secs(20));
            env.exec_command(&request, &|_, _| {}, &CancelToken::new())
                .expect("the command runs");
        });
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
            "≥ 100x",
        ));
    }
    rows
}
