//! Bench section `exec`: how long LocalExecutionEnvironment::exec_command takes to return in
//! the process-hygiene cases of the issue (1–6), plus the cost of a trivial command.
//! Measures wall time around the call; never asserts.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::{
    CommandRequest, ExecResult, ExecutionEnvironment, LocalExecutionEnvironment,
};

use crate::{Row, ms};

const RUNS: usize = 3;

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "exec",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

fn exec(
    env: &LocalExecutionEnvironment,
    command: &str,
    timeout: Duration,
) -> (ExecResult, Duration) {
    let request = CommandRequest::new(command, timeout);
    let start = Instant::now();
    let result = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .expect("bash runs");
    (result, start.elapsed())
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Median return time of `command` over `runs` runs, and the last result.
fn timed(
    env: &LocalExecutionEnvironment,
    command: &str,
    timeout: Duration,
    runs: usize,
) -> (Duration, ExecResult) {
    let mut samples = Vec::with_capacity(runs);
    let mut last = ExecResult::default();
    for _ in 0..runs {
        let (result, elapsed) = exec(env, command, timeout);
        samples.push(elapsed);
        last = result;
    }
    (median(samples), last)
}

fn kill_escaped(stdout: &str) {
    if let Some(pid) = stdout
        .lines()
        .find_map(|l| l.trim().parse::<libc::pid_t>().ok())
    {
        // SAFETY: the pid was printed by the bench's own `setsid sleep` command.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub fn run() -> Vec<Row> {
    let dir = std::env::temp_dir();
    let env = LocalExecutionEnvironment::new(&dir)
        .unwrap()
        .with_base_env(BTreeMap::from([(
            "PATH".to_string(),
            "/usr/local/bin:/usr/bin:/bin".to_string(),
        )]));
    let mut rows = Vec::new();

    let (d, _) = timed(&env, "true", Duration::from_secs(10), 50);
    rows.push(row(
        "`true` (spawn + reap + readers), median of 50",
        ms(d),
        "",
    ));

    let (d, r) = timed(
        &env,
        "sleep 30 & echo $!; wait",
        Duration::from_millis(1000),
        RUNS,
    );
    rows.push(row(
        format!(
            "1. sleep 30 (grandchild), timeout 1000 ms; timed_out={}",
            r.timed_out
        ),
        ms(d),
        "< 1500 ms",
    ));

    let (d, r) = timed(
        &env,
        "trap '' TERM; sleep 30",
        Duration::from_millis(500),
        RUNS,
    );
    rows.push(row(
        format!(
            "2. trap '' TERM; sleep 30, timeout 500 ms, grace 2 s; signal={:?}",
            r.signal
        ),
        ms(d),
        "2500–3500 ms",
    ));

    let (d, r) = timed(&env, "sleep 30 & echo done", Duration::from_secs(10), RUNS);
    rows.push(row(
        format!("3a. sleep 30 & echo done; stdout={:?}", r.stdout),
        ms(d),
        "< 1000 ms",
    ));

    let mut samples = Vec::new();
    let mut escaped = true;
    for _ in 0..RUNS {
        let (r, elapsed) = exec(
            &env,
            "setsid sleep 30 & echo $!; echo done",
            Duration::from_secs(10),
        );
        kill_escaped(&r.stdout);
        escaped &= r.escaped_processes;
        samples.push(elapsed);
    }
    rows.push(row(
        format!("3b. setsid sleep 30 & echo done; escaped_processes={escaped}"),
        ms(median(samples)),
        "< 1500 ms",
    ));

    let (d, _) = timed(&env, "cat", Duration::from_secs(10), RUNS);
    rows.push(row("4a. cat (stdin is /dev/null)", ms(d), "at once"));

    let (d, r) = timed(
        &env,
        "for i in 1 2 3 4 5 6 7 8 9 10; do echo line$i; sleep 0.1; done",
        Duration::from_millis(350),
        RUNS,
    );
    rows.push(row(
        format!(
            "4b. a line every 100 ms, timeout 350 ms; {} lines kept",
            r.stdout.lines().count()
        ),
        ms(d),
        "~350 ms",
    ));

    let before = peak_rss_kib();
    let command = "yes 0123456789abcdef | head -c 52428800 & \
                   yes fedcba9876543210 | head -c 52428800 >&2; wait";
    let (d, r) = timed(&env, command, Duration::from_secs(120), RUNS);
    rows.push(row(
        format!(
            "5. 50 MB stdout + 50 MB stderr at once; totals {} + {} bytes",
            r.stdout_bytes, r.stderr_bytes
        ),
        ms(d),
        "no deadlock",
    ));
    if let (Some(before), Some(after)) = (before, peak_rss_kib()) {
        rows.push(row(
            "5. peak RSS growth of this process over case 5",
            format!("{:.1} MiB", (after.saturating_sub(before)) as f64 / 1024.0),
            "bounded (2 × 2 MiB capture)",
        ));
    }

    let mut samples = Vec::new();
    for _ in 0..RUNS {
        let cancel = CancelToken::new();
        let request = CommandRequest::new("sleep 30 & echo $!; wait", Duration::from_secs(60));
        let printed = AtomicU64::new(0);
        let after_cancel = thread::scope(|scope| {
            let running = scope.spawn(|| {
                let on_output = |_, chunk: &[u8]| {
                    printed.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                };
                let result = env.exec_command(&request, &on_output, &cancel);
                (result, Instant::now())
            });
            while printed.load(Ordering::SeqCst) == 0 {
                thread::sleep(Duration::from_millis(1));
            }
            let cancelled_at = Instant::now();
            cancel.cancel();
            let (_result, returned_at) = running.join().expect("exec thread");
            returned_at - cancelled_at
        });
        samples.push(after_cancel);
    }
    rows.push(row(
        "6. cancel a running sleep 30: cancel → return",
        ms(median(samples)),
        "< 300 ms",
    ));

    rows
}
