//! Bench section `mcp`: server-everything (installed by `.ci/run` under
//! `target/ci/node`) over stdio — the time from starting it to its tools being listed
//! (spawn, `server/discover` probe, `initialize` handshake, `tools/list`), the
//! per-call overhead of the client (a registered tool: validation, `tools/call`, result
//! mapping) over the raw round trip of the same call written and read by hand, and a
//! resource read (the host's and the model's `read_mcp_resource`); then the cost of OAuth
//! once the token is held: a tool call over Streamable HTTP to the test support's
//! authorization-protected server against the same call to the same server left open.
//! Measures; never asserts.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
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
    let mut rows = vec![
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
    ];
    match resource_reads(&bin, &abort) {
        Ok((host, model)) => {
            rows.push(row(
                &format!("resources/read of a text resource, the host's (median of {CALLS})"),
                ms(host),
                "",
            ));
            rows.push(row(
                &format!("read_mcp_resource, the model's tool (median of {CALLS})"),
                ms(model),
                "",
            ));
        }
        Err(why) => rows.push(row("resources/read", format!("failed: {why}"), "")),
    }
    match oauth_overhead() {
        Ok((with_token, open)) => {
            rows.push(row(
                &format!("HTTP tool call with a bearer token held (median of {CALLS})"),
                ms(with_token),
                "",
            ));
            rows.push(row(
                &format!("HTTP tool call, the same server open (median of {CALLS})"),
                ms(open),
                "",
            ));
            rows.push(row(
                "OAuth overhead per call once the token is held",
                ms(with_token.saturating_sub(open)),
                "< 0.2 ms",
            ));
        }
        Err(why) => rows.push(row("OAuth call", format!("failed: {why}"), "")),
    }
    rows
}

/// `resources/read` of one text resource of server-everything (stdio), through the host's
/// call and through the model's `read_mcp_resource` tool: medians of [`CALLS`].
fn resource_reads(
    bin: &std::path::Path,
    abort: &CancelToken,
) -> Result<(Duration, Duration), String> {
    let mut servers = McpServers::start(&[server(bin)], abort);
    let mut registry = ToolRegistry::new();
    let warnings = servers.prepare(&mut registry);
    if !warnings.is_empty() {
        return Err(format!("{warnings:?}"));
    }
    let uri = "demo://resource/dynamic/text/1";
    let mut host = Vec::new();
    for _ in 0..CALLS {
        let started = Instant::now();
        let read = servers.read_resource("everything", uri);
        host.push(started.elapsed());
        if !read.as_ref().is_ok_and(|r| r[0]["text"].is_string()) {
            return Err(format!("{read:?}"));
        }
    }
    let env = LocalExecutionEnvironment::new(std::env::temp_dir()).map_err(|e| e.to_string())?;
    let cancel = CancelToken::new();
    let ctx = ToolContext::new(&env, "bench", &cancel);
    let call = ToolCall::new(
        "r",
        "read_mcp_resource",
        json!({"server": "everything", "uri": uri}),
    );
    let mut model = Vec::new();
    for _ in 0..CALLS {
        let started = Instant::now();
        let outcome =
            agentloop::unstable::prepare_call(&registry, &call).map(|call| call.run(&ctx));
        model.push(started.elapsed());
        if !outcome
            .as_ref()
            .is_ok_and(|o| o.text.contains("Resource 1"))
        {
            return Err(format!("{outcome:?}"));
        }
    }
    servers.shutdown();
    Ok((median(host), median(model)))
}

/// One `tools/call` over Streamable HTTP to our loopback server (support's
/// `AuthServer`), with a bearer token held (the login done beforehand, the token read from
/// the token file) and without one (the same server, open): medians of [`CALLS`].
fn oauth_overhead() -> Result<(Duration, Duration), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let tokens = dir.path().join("tokens.json");
    let calls = |server: McpServer| -> Result<Duration, String> {
        let abort = CancelToken::new();
        let mut servers = McpServers::start(&[server], &abort);
        let mut registry = ToolRegistry::new();
        let warnings = servers.prepare(&mut registry);
        if !warnings.is_empty() {
            return Err(format!("{warnings:?}"));
        }
        let env =
            LocalExecutionEnvironment::new(std::env::temp_dir()).map_err(|e| e.to_string())?;
        let cancel = CancelToken::new();
        let ctx = ToolContext::new(&env, "bench", &cancel);
        let call = ToolCall::new("w", "mcp__protected__whoami", json!({}));
        let mut samples = Vec::new();
        for _ in 0..CALLS {
            let started = Instant::now();
            let outcome =
                agentloop::unstable::prepare_call(&registry, &call).map(|call| call.run(&ctx));
            samples.push(started.elapsed());
            if !outcome.as_ref().is_ok_and(|o| o.text.starts_with("hello")) {
                return Err(format!("{outcome:?}"));
            }
        }
        servers.shutdown();
        Ok(median(samples))
    };
    let protected = support::oauth::AuthServer::start();
    let server = McpServer::http("protected", protected.mcp_url()).with_token_file(&tokens);
    server
        .login(
            Arc::new(support::oauth::Browser::default()),
            Duration::from_secs(20),
        )
        .map_err(|e| e.to_string())?;
    let with_token = calls(server)?;
    let open = support::oauth::AuthServer::start_open();
    let without = calls(McpServer::http("protected", open.mcp_url()))?;
    Ok((with_token, without))
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
