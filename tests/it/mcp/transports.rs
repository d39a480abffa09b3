//! Hostile MCP transports, stdio and Streamable HTTP: a server that floods 300 MB without a
//! newline, one that never answers the handshake; each is left out within its startup
//! timeout with a warning naming the cause, and no server process is left. The HTTP
//! client's sockets carry `TCP_NODELAY`.

use std::io::Write;
use std::time::{Duration, Instant};

use agentloop::llm::scripted::ScriptedTurn;
use agentloop::mcp::{McpServer, McpServerState};

use super::{mcp_harness, mcp_warnings, process_gone};
use support::raw_server::raw_server;
use support::session::collect_input;
use support::{GENEROUS, Reply, Server};

/// The startup timeout of the hostile servers below.
const STARTUP: Duration = Duration::from_secs(2);

/// Runs one input with `server` configured; returns its `mcp` warnings and how long the
/// input waited for the server.
fn start_with(server: McpServer) -> (Vec<String>, Duration, support::session::Harness) {
    let started = Instant::now();
    let mut h = mcp_harness(vec![ScriptedTurn::text("went on")], vec![server]);
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let waited = started.elapsed();
    assert!(matches!(
        h.session.mcp_servers()[0].state,
        McpServerState::Failed(_)
    ));
    (mcp_warnings(&events), waited, h)
}

/// A stdio server that writes its pid to `pid_file`, then runs `script`.
fn stdio_server(name: &str, pid_file: &std::path::Path, script: &str) -> McpServer {
    let line = format!("echo $$ > '{}'; exec {script}", pid_file.display());
    McpServer::stdio(name, "/bin/sh")
        .with_args(["-c", line.as_str()])
        .with_startup_timeout(STARTUP)
}

fn pid_in(file: &std::path::Path) -> u32 {
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_stdio_server_flooding_300_mb_without_a_newline_is_cut_off_at_the_line_cap() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let server = stdio_server("flood", &pid_file, "head -c 314572800 /dev/zero");
    let (warnings, waited, _h) = start_with(server);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("`flood`") && warnings[0].contains("longer than 67108864 bytes"),
        "the warning names the cap: {}",
        warnings[0]
    );
    assert!(waited < STARTUP + GENEROUS, "{waited:?}");
    assert!(
        process_gone(pid_in(&pid_file)),
        "the flooding server is gone"
    );
}

#[test]
fn a_stdio_server_that_never_answers_initialize_is_left_out_at_its_startup_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    // Answers nothing, and keeps its stdout open.
    let server = stdio_server("mute", &pid_file, "sleep 600");
    let (warnings, waited, _h) = start_with(server);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("`mute`") && warnings[0].contains("startup timeout of 2000 ms"),
        "{}",
        warnings[0]
    );
    assert!(
        waited >= STARTUP && waited < STARTUP + GENEROUS,
        "{waited:?}"
    );
    assert!(process_gone(pid_in(&pid_file)), "the silent server is gone");
}

#[test]
fn an_http_server_that_never_answers_is_left_out_at_its_startup_timeout() {
    // Every POST is read and held without a byte of answer.
    let server = Server::start(vec![Reply::stall(), Reply::stall(), Reply::stall()]);
    let mcp = McpServer::http("mute", server.url()).with_startup_timeout(STARTUP);
    let (warnings, waited, _h) = start_with(mcp);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("`mute`") && warnings[0].contains("startup timeout of 2000 ms"),
        "{}",
        warnings[0]
    );
    // The documented timeout, not the call timeout (120 s) of each POST.
    assert!(waited < STARTUP + GENEROUS, "{waited:?}");
}

#[test]
fn an_http_server_streaming_300_mb_without_a_newline_is_cut_off_at_the_event_cap() {
    let (url, _stop) = raw_server(|mut stream| {
        let _ = stream.write_all(support::raw_server::SSE_HEAD);
        let block = vec![b'x'; 1 << 20];
        let started = Instant::now();
        for _ in 0..300 {
            if stream.write_all(&block).is_err() || started.elapsed() > GENEROUS {
                return;
            }
        }
    });
    let mcp = McpServer::http("flood", url).with_startup_timeout(GENEROUS);
    let (warnings, waited, _h) = start_with(mcp);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("`flood`") && warnings[0].contains("16 MiB"),
        "the warning names the cap: {}",
        warnings[0]
    );
    assert!(waited < GENEROUS, "{waited:?}");
}

#[test]
fn mcp_http_requests_go_out_on_sockets_with_tcp_nodelay() {
    let server = Server::start(vec![Reply::stall()]);
    let mcp = McpServer::http("held", server.url()).with_startup_timeout(GENEROUS);
    let h = mcp_harness(vec![ScriptedTurn::text("unused")], vec![mcp]);
    server.wait_for_requests(1, GENEROUS);
    let sockets = support::sockets::nodelay_of_connections_to(server.port());
    drop(h);
    assert_eq!(
        sockets,
        [true],
        "the client's connection and its TCP_NODELAY"
    );
}
