//! Bench section `background`: what a background process costs through the local
//! environment, the local one under the sandbox (a PID namespace per process where the
//! kernel allows one) and the exec-server as a direct child: start → handle (the call
//! returns once the shell runs), the round trip of new output (a line written to a
//! background `cat`, read back by a waiting read), and a kill. Medians (and the best
//! sample); never asserts.

use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::remote::{RemoteExecutionEnvironment, Transport};
use agentloop::exec::{
    BackgroundProcess, CommandRequest, ExecutionEnvironment, LocalExecutionEnvironment, Network,
    OutputStream, Sandbox, SandboxPolicy,
};

use crate::{Row, e2e};

const STARTS: usize = 50;
const LINES: usize = 300;
const LIMIT: usize = 1 << 20;

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "background",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// "median / best": the best sample shows the path's own cost on a loaded machine.
fn median_and_best(samples: Vec<Duration>) -> String {
    let best = samples.iter().min().copied().unwrap_or_default();
    format!("{} / {}", us(median(samples)), us(best))
}

fn start(env: &dyn ExecutionEnvironment, command: &str) -> Box<dyn BackgroundProcess> {
    let request = CommandRequest::new(command, Duration::from_secs(10));
    env.start_background(&request, LIMIT, Box::new(|_| {}))
        .expect("the background process starts")
}

/// Start → handle (median / best) and the median kill, over [`STARTS`] `sleep`s.
fn start_and_kill(env: &dyn ExecutionEnvironment) -> (String, Duration) {
    drop(start(env, "exec sleep 300")); // warm up
    let (mut starts, mut kills) = (Vec::new(), Vec::new());
    for _ in 0..STARTS {
        let began = Instant::now();
        let process = start(env, "exec sleep 300");
        starts.push(began.elapsed());
        let began = Instant::now();
        process.kill().expect("killed");
        kills.push(began.elapsed());
    }
    (median_and_best(starts), median(kills))
}

/// Median round trip of a line: written to a background `cat`'s stdin, read back by a
/// read that waits for new output.
fn round_trip(env: &dyn ExecutionEnvironment) -> String {
    let cat = start(env, "cat");
    let cancel = CancelToken::new();
    let mut from = 0;
    let mut samples = Vec::with_capacity(LINES);
    for i in 0..LINES {
        let line = format!("line {i}\n");
        let began = Instant::now();
        cat.write_stdin(line.as_bytes()).expect("written");
        let mut got = 0;
        while got < line.len() {
            let slice = cat
                .read(
                    OutputStream::Stdout,
                    from,
                    4096,
                    Duration::from_secs(10),
                    &cancel,
                )
                .expect("read");
            got += slice.bytes.len();
            from = slice.end;
        }
        samples.push(began.elapsed());
    }
    median_and_best(samples)
}

/// The rows for one environment.
fn measure(rows: &mut Vec<Row>, name: &str, env: &dyn ExecutionEnvironment) {
    let (started, killed) = start_and_kill(env);
    rows.push(row(
        format!("{name}: start → handle, median / best of {STARTS}"),
        started,
        "< 1 ms",
    ));
    rows.push(row(
        format!("{name}: new output, write → cat → read, median / best of {LINES}"),
        round_trip(env),
        "< 1 ms",
    ));
    rows.push(row(
        format!("{name}: kill of a `sleep` (group, to its exit), median of {STARTS}"),
        us(killed),
        "",
    ));
}

pub fn run() -> Vec<Row> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rows = Vec::new();
    let local = LocalExecutionEnvironment::new(dir.path()).expect("the bench dir");
    measure(&mut rows, "local", &local);
    let sandbox = Sandbox::new(SandboxPolicy::workspace_write()).with_network(Network::On);
    match local.clone().with_sandbox(sandbox) {
        Ok(sandboxed) => measure(&mut rows, "sandboxed", &sandboxed),
        Err(err) => rows.push(row("sandboxed", format!("unavailable: {err}"), "")),
    }
    let build = [
        "build",
        "--release",
        "-p",
        "agentloop-cli",
        "--bin",
        "agentloop-exec-server",
    ];
    match e2e::cargo(&build, &[]) {
        Ok(()) => {
            let server = e2e::target_dir().join("release/agentloop-exec-server");
            let transport = Transport::direct(vec![server.display().to_string()]);
            let remote = RemoteExecutionEnvironment::connect(transport, Some(dir.path()))
                .expect("the exec-server answers");
            measure(&mut rows, "stdio exec-server", &remote);
        }
        Err(why) => rows.push(row("stdio exec-server", format!("build failed: {why}"), "")),
    }
    rows
}
