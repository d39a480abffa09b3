//! Hostile model servers against the CLI's memory: an endless SSE line and a command's
//! flood read by a slow consumer of `--json`. The servers generate their bodies as they
//! write (`support::raw_server`); memory is the CLI process's peak, measured from
//! `/proc`, never asserted as a speed.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use support::raw_server::{SSE_HEAD, raw_server};
use support::turns::{chat_sse, function};
use support::{self, GENEROUS, Reply, Server};

use crate::agentloop;

/// Waits for `child`; returns its exit status and its peak resident memory (KiB).
///
/// The peak is `VmHWM` from `/proc/<pid>/status`, sampled until the process is gone: the
/// high-water mark of the child's own image. (`wait4`'s `ru_maxrss` would not do: a child
/// started with `posix_spawn` shares the test binary's memory until its `exec`, and Linux
/// carries that high-water mark into the child's.)
pub(crate) fn wait_with_peak_rss(child: &mut std::process::Child) -> (i32, i64) {
    let status_file = format!("/proc/{}/status", child.id());
    let peak = Arc::new(AtomicI64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (Arc::clone(&peak), Arc::clone(&stop));
        thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let Ok(text) = std::fs::read_to_string(&status_file) else {
                    break;
                };
                let hwm = text
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok());
                match hwm {
                    Some(kib) => {
                        peak.fetch_max(kib, Ordering::SeqCst);
                    }
                    None => break, // a zombie has no memory lines: it has exited
                }
                thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let status = child.wait().expect("wait for the agent");
    stop.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let code = status.code().map_or(-1, |c| c << 8);
    (code, peak.load(Ordering::SeqCst))
}

#[test]
fn an_sse_line_over_the_cap_is_a_stream_error_in_bounded_memory() {
    // 400 MB of one `data:` line without a line end, written as fast as the client reads.
    let (url, server) = raw_server(|mut stream| {
        let _ = stream.write_all(SSE_HEAD);
        let _ = stream.write_all(b"data: ");
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..(400 * 1024 * 1024 / chunk.len()) {
            if stream.write_all(&chunk).is_err() {
                return; // the client gave up: what we want
            }
        }
    });
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut child = Command::new(agentloop())
        .args(["--json", "--provider", "openai-chat", "--base-url"])
        .arg(format!("{url}/v1"))
        .arg("--cwd")
        .arg(work.path())
        .arg("say hi")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("OPENAI_API_KEY", support::FAKE_KEY)
        .env("OPENAI_COMPATIBLE_API_KEY", support::FAKE_KEY)
        .env("OPENAI_COMPATIBLE_MODEL", "gpt-5")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let started = Instant::now();
    let (status, peak_kib) = wait_with_peak_rss(&mut child);
    let out = reader.join().unwrap();
    drop(server);
    assert!(
        started.elapsed() < GENEROUS * 3,
        "took {:?}",
        started.elapsed()
    );
    assert_ne!(status, 0, "the run should fail: {out}");
    assert!(
        out.contains("over 16 MiB"),
        "no stream error about the cap in the events (status {status}, peak {} MiB):\n{}",
        peak_kib / 1024,
        &out[out.len().saturating_sub(3000)..]
    );
    // Alone it peaks near 28 MiB; each retry of the failed stream parses up to 16 MiB
    // again, and the allocator may keep freed memory, so the ceiling allows for that.
    assert!(
        peak_kib < 96 * 1024,
        "the agent peaked at {} MiB on a 400 MB line",
        peak_kib / 1024
    );
}

#[test]
fn a_slow_event_reader_keeps_memory_bounded() {
    // 256 MiB of command output while the reader of the CLI's stdout takes its time: the
    // CLI's event loop is that slow reader, so its backlog is what is measured.
    let command = "head -c 268435456 /dev/zero | tr '\\0' x; echo; echo finished";
    let server = Server::start(vec![
        Reply::sse(chat_sse(
            "",
            &[function("call_1", "shell", json!({ "command": command }))],
        )),
        Reply::sse(chat_sse("done", &[])),
    ]);
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut child = Command::new(agentloop())
        .args([
            "--json",
            "--timeout-ms",
            "120000",
            "--provider",
            "openai-chat",
        ])
        .arg("--base-url")
        .arg(format!("{}/v1", server.url()))
        .arg("--cwd")
        .arg(work.path())
        .arg("print a lot")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("OPENAI_API_KEY", support::FAKE_KEY)
        .env("OPENAI_COMPATIBLE_API_KEY", support::FAKE_KEY)
        .env("OPENAI_COMPATIBLE_MODEL", "gpt-5")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        // About 16 MB/s at most: far slower than the command writes.
        let mut buf = vec![0u8; 16 * 1024];
        let mut seen = Vec::new();
        // The `tool_call_end` line carries megabytes of output, so its start can fall
        // before the kept tail: note it before trimming.
        let mut saw_end = false;
        let end_marker = b"\"kind\":\"tool_call_end\"";
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    // Keep only the lines that matter: markers and the end events.
                    seen.extend_from_slice(&buf[..n]);
                    if seen.len() > 8 * 1024 * 1024 {
                        saw_end |= seen.windows(end_marker.len()).any(|w| w == end_marker);
                        let keep = seen.split_off(seen.len() - 1024 * 1024);
                        seen = keep;
                    }
                    thread::sleep(Duration::from_millis(1));
                }
            }
        }
        saw_end |= seen.windows(end_marker.len()).any(|w| w == end_marker);
        (saw_end, String::from_utf8_lossy(&seen).into_owned())
    });
    let (status, peak_kib) = wait_with_peak_rss(&mut child);
    let (saw_end, tail) = reader.join().unwrap();
    assert_eq!(
        status,
        0,
        "the run should complete: {}",
        &tail[tail.len().saturating_sub(2000)..]
    );
    assert!(
        saw_end && tail.contains("finished"),
        "no end: {}",
        &tail[tail.len().saturating_sub(3000)..]
    );
    assert!(
        peak_kib < 96 * 1024,
        "the agent peaked at {} MiB with a slow event reader",
        peak_kib / 1024
    );
}
