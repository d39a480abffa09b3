//! Bench section `mcp`: server-everything (installed by `.ci/run` under
//! `target/ci/node`) over stdio — the time from starting it to its tools being listed
//! (spawn, `server/discover` probe, `initialize` handshake, `tools/list`), and the
//! per-call overhead of the client (a registered tool: validation, `tools/call`, result
//! mapping) over the raw round trip of the same call written and read by hand.
//! Measures; never asserts.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::ToolCall;
use agentloop::mcp::McpServer;
use agentloop::tools::{ToolContext, ToolRegistry};
use agentloop::unstable::McpServers;
use serde_json::json;

use crate::{Row, ms};

const CALLS: usize = 300;
const STARTS: usize = 5;

fn row(name: &str, value: String, target: &str) -> Row {
    Row {
        section: "mcp",
        name: name.to_string(),
        value,
        target: target.to_string(),
    }
}

fn everything_bin() -> Option<PathBuf> {
    let bin = support::ci::dir().join("node/node_modules/.bin/mcp-server-everything");
    bin.exists().then_some(bin)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn server(bin: &std::path::Path) -> McpServer {
    McpServer::stdio("everything", bin.to_string_lossy())
        .with_args(["stdio"])
        .with_startup_timeout(Duration::from_secs(60))
}

pub fn run() -> Vec<Row> {
    let Some(bin) = everything_bin() else {
        return vec![row(
            "server-everything",
            "not installed (run .ci/run)".to_string(),
            "",
        )];
    };
    let abort = CancelToken::new();
    let mut starts = Vec::new();
    for _ in 0..STARTS {
        let started = Instant::now();
        let mut servers = McpServers::start(&[server(&bin)], &abort);
        let status = servers.statuses();
        starts.push(started.elapsed());
        servers.shutdown();
        if status[0].tools == 0 {
            return vec![row("server-everything", format!("failed: {status:?}"), "")];
        }
    }

    // Through the client: the registered tool, as a session runs it.
    let mut servers = McpServers::start(&[server(&bin)], &abort);
    let mut registry = ToolRegistry::new();
    let warnings = servers.prepare(&mut registry);
    if !warnings.is_empty() {
        return vec![row(
            "server-everything",
            format!("failed: {warnings:?}"),
            "",
        )];
    }
    let env = LocalExecutionEnvironment::new(std::env::temp_dir()).expect("the temp dir");
    let cancel = CancelToken::new();
    let ctx = ToolContext::new(&env, "bench", &cancel);
    let call = ToolCall::new("c", "mcp__everything__echo", json!({"message": "ping"}));
    let mut ours = Vec::new();
    for _ in 0..CALLS {
        let started = Instant::now();
        let outcome =
            agentloop::unstable::prepare_call(&registry, &call).map(|call| call.run(&ctx));
        ours.push(started.elapsed());
        if !outcome.as_ref().is_ok_and(|o| o.text == "Echo: ping") {
            return vec![row("echo call", format!("failed: {outcome:?}"), "")];
        }
    }
    servers.shutdown();

    // By hand: the same server, the same call, one line out and one line in.
    let raw = raw_round_trips(&bin);
    let (ours, raw) = (median(ours), median(raw));
    let overhead = ours.saturating_sub(raw);
    vec![
        row(
            "server-everything: start to tools listed (median of 5)",
            ms(median(starts)),
            "",
        ),
        row(
            &format!("echo call through the client (median of {CALLS})"),
            ms(ours),
            "",
        ),
        row(
            &format!("echo call, raw round trip (median of {CALLS})"),
            ms(raw),
            "",
        ),
        row("client overhead per call", ms(overhead), "< 0.5 ms"),
    ]
}

fn raw_round_trips(bin: &std::path::Path) -> Vec<Duration> {
    let mut child = Command::new(bin)
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start server-everything");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut exchange = |message: serde_json::Value, answer: bool, line: &mut String| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        if answer {
            line.clear();
            stdout.read_line(line).unwrap();
        }
    };
    exchange(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}}}),
        true,
        &mut line,
    );
    exchange(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        false,
        &mut line,
    );
    let mut samples = Vec::new();
    for id in 1..=CALLS {
        let started = Instant::now();
        exchange(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": "echo", "arguments": {"message": "ping"}}}),
            true,
            &mut line,
        );
        samples.push(started.elapsed());
        if !line.contains("Echo: ping") {
            eprintln!("bench: unexpected raw answer: {line}");
        }
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    samples
}
