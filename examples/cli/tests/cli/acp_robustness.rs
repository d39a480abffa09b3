//! `agentloop acp` given what a broken or hostile client sends, line by line over real
//! pipes: each malformed line, unknown method, unknown session, second prompt, wrong
//! params and oversized message gets its JSON-RPC error and the agent goes on; closing
//! stdin ends every session, kills its commands and MCP servers and exits 0; no key ever
//! reaches an update. Also: the session's MCP servers from `session/new`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::{Value, json};
use support::{FAKE_KEY, GENEROUS, Reply, Server};

use crate::{Wire, agentloop, exit_within};

/// `agentloop acp` over pipes, its lines read on a named thread.
struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    reader: Option<thread::JoinHandle<()>>,
    seen: Vec<String>,
    _home: tempfile::TempDir,
    cwd: std::path::PathBuf,
}

impl Agent {
    fn start(server: &Server) -> Agent {
        let home = tempfile::tempdir().unwrap();
        let cwd = home.path().join("work");
        std::fs::create_dir(&cwd).unwrap();
        let mut child = Command::new(agentloop())
            .args(["acp", "--base-url", &server.url(), "--sessions-dir"])
            .arg(home.path().join("sessions"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("ANTHROPIC_API_KEY", FAKE_KEY)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = crossbeam_channel::unbounded();
        let reader = thread::Builder::new()
            .name("acp-test-reader".to_string())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            })
            .unwrap();
        Agent {
            stdin: child.stdin.take(),
            child,
            lines,
            reader: Some(reader),
            seen: Vec::new(),
            _home: home,
            cwd,
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: Value) {
        self.send_raw(format!("{message}\n").as_bytes());
    }

    /// The next message the agent wrote that `matches`; every line must be JSON.
    fn until(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + GENEROUS;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {what} within {GENEROUS:?}; saw {:#?}", self.seen));
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout holds a line that is not JSON ({e}): {line}"));
            self.seen.push(line);
            if matches(&message) {
                return message;
            }
        }
    }

    fn answer(&mut self, id: i64) -> Value {
        self.until(&format!("the answer to {id}"), |m| {
            m["id"] == id && m.get("method").is_none()
        })
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.answer(id)
    }

    /// initialize, then a session in full-access mode (no permission questions); its id.
    fn session(&mut self) -> String {
        self.request(0, "initialize", json!({"protocolVersion": 1}));
        let cwd = self.cwd.display().to_string();
        let new = self.request(1, "session/new", json!({"cwd": cwd, "mcpServers": []}));
        let id = new["result"]["sessionId"].as_str().unwrap().to_string();
        let mode = json!({"sessionId": id, "modeId": "full-access"});
        assert_eq!(
            self.request(2, "session/set_mode", mode)["result"],
            json!({})
        );
        id
    }

    /// Closes stdin; the exit status and how long the exit took.
    fn close(&mut self) -> (Option<i32>, Duration) {
        drop(self.stdin.take());
        let started = Instant::now();
        let mut child = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap());
        let status = exit_within("agentloop acp after stdin closed", move || child.wait());
        let took = started.elapsed();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        (status.code(), took)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn error_code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {answer}"))
}

fn turn(text: &str, calls: &[(&str, &str, Value)]) -> Reply {
    Reply::sse(Wire::Anthropic.turn(text, calls))
}

#[test]
fn a_malformed_line_is_a_parse_error_and_the_agent_goes_on() {
    let server = Server::start(Vec::new());
    let mut agent = Agent::start(&server);
    agent.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\n");
    let answer = agent.until("the parse error", |m| m.get("error").is_some());
    assert_eq!((error_code(&answer), &answer["id"]), (-32700, &Value::Null));
    agent.send_raw(b"[1,2]\n");
    let batch = agent.until("the batch's error", |m| m.get("error").is_some());
    assert_eq!(error_code(&batch), -32600);
    let init = agent.request(3, "initialize", json!({"protocolVersion": 1}));
    assert_eq!(init["result"]["protocolVersion"], 1);
    assert_eq!(agent.close().0, Some(0));
}

#[test]
fn an_unknown_method_is_method_not_found_and_an_unknown_notification_is_ignored() {
    let server = Server::start(Vec::new());
    let mut agent = Agent::start(&server);
    agent.send(json!({"jsonrpc": "2.0", "method": "x/notify", "params": {}}));
    let answer = agent.request(1, "session/fly", json!({}));
    assert_eq!(error_code(&answer), -32601);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("session/fly")
    );
    assert_eq!(
        agent.request(2, "authenticate", json!({"methodId": "x"}))["result"],
        json!({})
    );
    assert_eq!(agent.close().0, Some(0));
}

#[test]
fn a_request_for_an_unknown_session_is_resource_not_found() {
    let server = Server::start(Vec::new());
    let mut agent = Agent::start(&server);
    agent.session();
    let prompt =
        json!({"sessionId": "no-such-session", "prompt": [{"type": "text", "text": "hi"}]});
    assert_eq!(
        error_code(&agent.request(10, "session/prompt", prompt)),
        -32002
    );
    let mode = json!({"sessionId": "no-such-session", "modeId": "plan"});
    assert_eq!(
        error_code(&agent.request(11, "session/set_mode", mode)),
        -32002
    );
    assert_eq!(
        error_code(&agent.request(12, "session/close", json!({"sessionId": "nope"}))),
        -32002
    );
    let load = json!({"sessionId": "0000-not-recorded", "cwd": "/tmp", "mcpServers": []});
    assert_eq!(error_code(&agent.request(13, "session/load", load)), -32002);
    let traversal = json!({"sessionId": "../../etc/passwd", "cwd": "/tmp", "mcpServers": []});
    assert_eq!(
        error_code(&agent.request(14, "session/load", traversal)),
        -32602
    );
    assert_eq!(agent.close().0, Some(0));
}

#[test]
fn params_of_the_wrong_shape_are_invalid_params() {
    let server = Server::start(Vec::new());
    let mut agent = Agent::start(&server);
    let id = agent.session();
    let cases = [
        ("session/new", json!({"mcpServers": []})),
        (
            "session/new",
            json!({"cwd": "relative/dir", "mcpServers": []}),
        ),
        ("session/new", json!({"cwd": "/tmp", "mcpServers": "none"})),
        (
            "session/new",
            json!({"cwd": "/tmp", "mcpServers": [{"name": "x", "type": "sse", "url": "u", "headers": []}]}),
        ),
        (
            "session/prompt",
            json!({"sessionId": id, "prompt": "not blocks"}),
        ),
        (
            "session/prompt",
            json!({"sessionId": id, "prompt": [{"type": "image", "data": "", "mimeType": "image/png"}]}),
        ),
        (
            "session/set_mode",
            json!({"sessionId": id, "modeId": "yolo"}),
        ),
        (
            "session/set_config_option",
            json!({"sessionId": id, "configId": "model", "value": "no-such-model"}),
        ),
        (
            "session/set_config_option",
            json!({"sessionId": id, "configId": "colour", "value": "red"}),
        ),
        ("session/set_mode", json!({"modeId": "plan"})),
    ];
    for (n, (method, params)) in cases.into_iter().enumerate() {
        let answer = agent.request(100 + n as i64, method, params.clone());
        assert_eq!(error_code(&answer), -32602, "{method} {params}: {answer}");
    }
    assert_eq!(agent.close().0, Some(0));
}

#[test]
fn a_second_prompt_while_one_runs_is_refused_and_the_first_still_completes() {
    let server = Server::start(vec![
        turn(
            "",
            &[("c1", "shell", json!({"command": "touch started; sleep 1"}))],
        ),
        turn("first done", &[]),
    ]);
    let mut agent = Agent::start(&server);
    let id = agent.session();
    let prompt = |text: &str| json!({"sessionId": id, "prompt": [{"type": "text", "text": text}]});
    agent.send(
        json!({"jsonrpc": "2.0", "id": 20, "method": "session/prompt", "params": prompt("one")}),
    );
    agent.until("the command's start", |m| {
        m["params"]["update"]["sessionUpdate"] == "tool_call"
    });
    let second = agent.request(21, "session/prompt", prompt("two"));
    assert_eq!(error_code(&second), -32600);
    assert_eq!(agent.answer(20)["result"]["stopReason"], "end_turn");
    assert_eq!(
        server.requests().len(),
        2,
        "the second prompt reached no model"
    );
    assert_eq!(agent.close().0, Some(0));
}

#[test]
fn a_message_over_the_size_cap_is_refused_without_being_read_whole() {
    let server = Server::start(Vec::new());
    let mut agent = Agent::start(&server);
    agent.request(0, "initialize", json!({"protocolVersion": 1}));
    // 256 MiB on one line, eight times the 32 MiB cap, written from a thread while this
    // one reads the answer.
    let mut stdin = agent.stdin.take().unwrap();
    let writer = thread::Builder::new()
        .name("acp-test-big".to_string())
        .spawn(move || {
            let chunk = vec![b'x'; 1024 * 1024];
            for _ in 0..256 {
                stdin.write_all(&chunk).unwrap();
            }
            stdin.write_all(b"\n").unwrap();
            stdin
        })
        .unwrap();
    let refused = agent.until("the refusal", |m| m.get("error").is_some());
    assert_eq!(error_code(&refused), -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("268435456 bytes")
    );
    agent.stdin = Some(writer.join().unwrap());
    assert_eq!(
        agent.request(1, "session/list", json!({}))["result"]["sessions"],
        json!([])
    );
    // The agent never held the line: its peak memory stayed far below the line's size
    // (the cap's worth of buffer at most, plus the program).
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.child.id())).unwrap();
    let peak_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap();
    eprintln!("peak RSS after a 256 MiB line: {} KiB", peak_kb);
    assert!(
        peak_kb < 96 * 1024,
        "peak RSS {peak_kb} KiB: the line was kept"
    );
    assert_eq!(agent.close().0, Some(0));
}

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .filter(|line| line.contains(marker))
        .collect()
}

fn wait_for(what: &str, test: impl Fn() -> bool) {
    let deadline = Instant::now() + GENEROUS;
    while !test() {
        assert!(Instant::now() < deadline, "no {what} within {GENEROUS:?}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn closing_stdin_ends_every_session_kills_its_command_and_mcp_server_and_exits_0() {
    let command = "sleep 30.5151";
    let mcp = "sleep 30.6161";
    let server = Server::start(vec![
        turn("", &[("c1", "shell", json!({"command": command}))]),
        // The second session's model call stalls: stdin closes while it waits.
        Reply::stall(),
    ]);
    let mut agent = Agent::start(&server);
    let id = agent.session();
    let cwd = agent.cwd.display().to_string();
    // A second session with an MCP server (that never answers: it stays starting) and a
    // third whose model call stalls.
    let servers = json!([{"name": "slow", "command": "bash", "args": ["-c", format!("exec {mcp}")], "env": []}]);
    agent.request(3, "session/new", json!({"cwd": cwd, "mcpServers": servers}));
    let third = agent.request(4, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let third = third["result"]["sessionId"].as_str().unwrap().to_string();
    let prompt = |id: &str| json!({"sessionId": id, "prompt": [{"type": "text", "text": "go"}]});
    agent.send(
        json!({"jsonrpc": "2.0", "id": 5, "method": "session/prompt", "params": prompt(&id)}),
    );
    wait_for("the command", || !processes_with(command).is_empty());
    wait_for("the MCP server", || !processes_with(mcp).is_empty());
    agent.send(
        json!({"jsonrpc": "2.0", "id": 6, "method": "session/prompt", "params": prompt(&third)}),
    );
    server.wait_for_requests(2, GENEROUS);

    let (status, took) = agent.close();
    eprintln!("stdin closed → exit in {} ms", took.as_millis());
    assert_eq!(status, Some(0));
    assert!(
        processes_with(command).is_empty(),
        "{:?}",
        processes_with(command)
    );
    assert!(processes_with(mcp).is_empty(), "{:?}", processes_with(mcp));
    // Both open prompts were answered before the exit (with an error: the session ended).
    for id in [5, 6] {
        assert!(
            agent
                .seen
                .iter()
                .any(|l| l.contains(&format!("\"id\":{id}"))),
            "prompt {id} unanswered: {:#?}",
            agent.seen
        );
    }
}

#[test]
fn no_key_reaches_an_update_or_an_error() {
    let leak = "tr '\\0' '\\n' < /proc/$PPID/environ; env; echo $ANTHROPIC_API_KEY";
    let server = Server::start(vec![
        turn("", &[("c1", "shell", json!({"command": leak}))]),
        Reply::json(
            401,
            format!(
                r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {FAKE_KEY}"}}}}"#
            ),
        ),
    ]);
    let mut agent = Agent::start(&server);
    let id = agent.session();
    let prompt =
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "show the environment"}]});
    let answer = agent.request(9, "session/prompt", prompt);
    assert_eq!(error_code(&answer), -32603, "{answer}");
    // The command ran and its output was shown, without the key anywhere.
    assert!(
        agent.seen.iter().any(|l| l.contains("exit code: 0")),
        "{:#?}",
        agent.seen
    );
    agent.close();
    for line in &agent.seen {
        assert!(!line.contains(FAKE_KEY), "the key leaked: {line}");
        assert!(!line.contains("FAKEKEY"), "part of the key leaked: {line}");
    }
    let requests = server.requests();
    assert_eq!(
        requests[0].header("x-api-key"),
        Some(FAKE_KEY),
        "the key did reach the model"
    );
}

#[test]
fn the_mcp_servers_of_session_new_offer_their_tools_to_the_model() {
    let Some(everything) = support::ci::npm_bin("mcp-server-everything") else {
        return;
    };
    let server = Server::start(vec![turn("done", &[])]);
    let mut agent = Agent::start(&server);
    agent.request(0, "initialize", json!({"protocolVersion": 1}));
    let cwd = agent.cwd.display().to_string();
    let servers = json!([{"name": "everything", "command": everything, "args": [], "env": [{"name": "X_TEST", "value": "1"}]}]);
    let new = agent.request(1, "session/new", json!({"cwd": cwd, "mcpServers": servers}));
    let id = new["result"]["sessionId"].as_str().unwrap().to_string();
    let prompt = json!({"sessionId": id, "prompt": [{"type": "text", "text": "which tools?"}]});
    assert_eq!(
        agent.request(2, "session/prompt", prompt)["result"]["stopReason"],
        "end_turn"
    );
    let tools = server.requests()[0].json()["tools"].to_string();
    assert!(tools.contains("mcp__everything__echo"), "{tools}");
    assert_eq!(agent.close().0, Some(0));
}
