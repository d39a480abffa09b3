//! The CLI against what a user cannot control: a model stream wedged on keep-alive
//! comments (`--stream-idle-timeout`), and hook commands that write 300 MB (their output
//! reaches the model cut like a tool's: memory stays bounded, every request stays under
//! the context window and nothing needs compacting).

use std::io::{Read, Write};
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::raw_server::{SSE_HEAD, raw_server};
use support::turns::{anthropic_sse, function};
use support::{GENEROUS, Reply, Server};

use crate::agent;
use crate::hostile_servers::wait_with_peak_rss;

#[test]
fn stream_idle_timeout_ends_a_keep_alive_only_stream_after_that_many_seconds() {
    // Headers, then an SSE comment every second and never an event.
    let (url, server) = raw_server(|mut stream| {
        let started = Instant::now();
        if stream.write_all(SSE_HEAD).is_err() {
            return;
        }
        while started.elapsed() < Duration::from_secs(50) {
            if stream.write_all(b": keep-alive\n\n").is_err() {
                return;
            }
            thread::sleep(Duration::from_secs(1));
        }
    });
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let base_url = format!("{url}/v1");
    let mut command = agent(
        &[
            "--json",
            "--provider",
            "openai-chat",
            "--base-url",
            &base_url,
            "--cwd",
            work.path().to_str().unwrap(),
            "--stream-idle-timeout",
            "20",
            "say hi",
        ],
        &[
            ("OPENAI_COMPATIBLE_API_KEY", support::FAKE_KEY),
            ("OPENAI_COMPATIBLE_MODEL", "gpt-5"),
        ],
        home.path(),
    );
    command.stdin(Stdio::null());
    let started = Instant::now();
    let mut child = command.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let limit = Duration::from_secs(20) + GENEROUS;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the agent was still waiting after {limit:?}");
        }
        thread::sleep(Duration::from_millis(50));
    };
    let took = started.elapsed();
    let out = reader.join().unwrap();
    drop(server);
    assert!(!status.success(), "the stream timed out: {out}");
    assert!(
        out.contains("the stream sent no event for 20")
            && out.contains("(the progress timeout, 20 s): only keep-alive data arrived"),
        "the error names how long it waited:\n{out}"
    );
    assert!(
        took >= Duration::from_secs(20),
        "ended after {took:?}, before the timeout"
    );
}

/// The context window the hook runs are given, in tokens.
const WINDOW: usize = 60_000;

/// Runs the CLI through three `shell` rounds with `hook` as the PostToolUse command;
/// returns its exit status, its `--json` events, its peak memory (KiB) and the server.
fn run_with_flooding_hook(hook: &str) -> (i32, Vec<Value>, i64, Server) {
    let mut replies: Vec<Reply> = (0..3)
        .map(|i| {
            let call = function(&format!("c_{i}"), "shell", json!({"command": "echo hi"}));
            Reply::sse(anthropic_sse("", &[call]))
        })
        .collect();
    replies.push(Reply::sse(anthropic_sse("done", &[])));
    let server = Server::start(replies);
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let file = work.path().join("hooks.json");
    let hooks = json!({"PostToolUse": [{"command": hook, "timeout_ms": 120_000}]});
    std::fs::write(&file, hooks.to_string()).unwrap();
    let window = WINDOW.to_string();
    let mut command = agent(
        &[
            "--json",
            "--provider",
            "anthropic",
            "--base-url",
            &server.url(),
            "--cwd",
            work.path().to_str().unwrap(),
            "--hooks",
            file.to_str().unwrap(),
            "--context-window",
            &window,
            "run echo three times",
        ],
        &[("ANTHROPIC_API_KEY", support::FAKE_KEY)],
        home.path(),
    );
    command.stdin(Stdio::null()).stderr(Stdio::null());
    let mut child = command.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let (status, peak_kib) = wait_with_peak_rss(&mut child);
    let out = reader.join().unwrap();
    let events = out
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    (status, events, peak_kib, server)
}

/// The checks both floods must pass.
fn assert_bounded(name: &str, status: i32, events: &[Value], peak_kib: i64, server: &Server) {
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(status, 0, "{name}: {kinds:?}");
    assert!(
        !kinds.contains(&"context_compaction_start"),
        "{name}: the hook's output made the session compact"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "{name}: three rounds and the answer");
    // Every request under the window (a quarter of the bytes, and room for the JSON).
    for (i, request) in requests.iter().enumerate() {
        assert!(
            request.body.len() <= WINDOW * 4 + WINDOW / 2,
            "{name}: request {i} has {} bytes",
            request.body.len()
        );
    }
    // Each tool result the model got holds the hook's text cut like a tool's output.
    let last = requests[3].json();
    let mut results = 0;
    for message in last["messages"].as_array().unwrap() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                let text = block["content"].to_string();
                assert!(
                    text.contains("[WARNING: Tool output was truncated.") && text.len() < 35_000,
                    "{name}: a tool result of {} bytes",
                    text.len()
                );
                results += 1;
            }
        }
    }
    assert_eq!(results, 3, "{name}");
    assert!(
        peak_kib < 64 * 1024,
        "{name}: the agent peaked at {} MiB",
        peak_kib / 1024
    );
}

#[test]
fn a_post_tool_use_hook_writing_300_mb_of_text_adds_a_tool_sized_cut_to_requests() {
    let hook = "cat >/dev/null; head -c 314572800 /dev/zero | tr '\\0' x";
    let (status, events, peak_kib, server) = run_with_flooding_hook(hook);
    assert_bounded("plain text", status, &events, peak_kib, &server);
}

#[test]
fn a_post_tool_use_hook_writing_300_mb_of_json_adds_a_tool_sized_cut_to_requests() {
    let hook = "cat >/dev/null; printf '{\"additional_context\": \"'; \
                head -c 314572800 /dev/zero | tr '\\0' x; printf '\"}'";
    let (status, events, peak_kib, server) = run_with_flooding_hook(hook);
    assert_bounded("json", status, &events, peak_kib, &server);
}
