//! The MCP client against our scripted fake server (`tests/data/mcp/fake_server.py`):
//! names, schemas, pagination, both eras, and the faults.

use std::time::{Duration, Instant};

use agentloop::llm::scripted::ScriptedTurn;
use agentloop::mcp::McpServerState;
use agentloop::unstable::MAX_MCP_TOOL_NAME as MAX_TOOL_NAME;
use serde_json::{Value, json};

use super::*;

use support::GENEROUS;

fn methods(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| m["method"].as_str().map(str::to_owned))
        .collect()
}

/// The bytes waiting unread in the pipe that is `pid`'s stdin, and what the pipe holds
/// (FIONREAD and F_GETPIPE_SZ on the pipe, opened again through `/proc`); zeros while it
/// cannot be opened.
fn stdin_pipe(pid: u32) -> (usize, usize) {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(pipe) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/{pid}/fd/0"))
    else {
        return (0, 0);
    };
    let mut unread: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which points at `unread`;
    // F_GETPIPE_SZ takes no argument. `pipe` is open for both calls.
    let (read_ok, capacity) = unsafe {
        (
            libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut unread) == 0,
            libc::fcntl(pipe.as_raw_fd(), libc::F_GETPIPE_SZ),
        )
    };
    if !read_ok || capacity <= 0 {
        return (0, 0);
    }
    (unread as usize, capacity as usize)
}

/// Waits (up to a generous ceiling) until the log has a message for which `found` holds.
fn wait_for_log(path: &Path, found: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + GENEROUS;
    loop {
        let (messages, _) = server_log(path);
        if messages.iter().any(&found) || Instant::now() > deadline {
            return messages;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn tools_are_offered_with_provider_safe_names_and_schemas_and_called() {
    let long = "t".repeat(100);
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call("mcp__fake__echo", json!({"text": "hello mcp"}))
                .with_tool_call("mcp__fake__add", json!({"a": 2, "b": 40})),
            ScriptedTurn::text("done"),
        ],
        // Pages of 3 tools: the listing follows nextCursor.
        vec![fake("fake", &["--page-size", "3"])],
    );
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let requests = h.model.requests();
    let names = offered(&requests[0]);
    for expected in [
        "echo", "add", "crash", "big", "slow", "hang", "grow", "image",
    ] {
        assert!(
            names.contains(&format!("mcp__fake__{expected}")),
            "{names:?}"
        );
    }
    // The 100-character name: cut to 64 bytes with a hash suffix, and callable.
    let long_name = names
        .iter()
        .find(|n| n.starts_with("mcp__fake__ttt"))
        .expect("the long-named tool");
    assert_eq!(long_name.len(), MAX_TOOL_NAME, "{long_name}");
    assert!(
        long_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    );
    assert!(!names.contains(&format!("mcp__fake__{long}")));
    // The schema providers reject, cleaned.
    let schema = &requests[0]
        .tools
        .iter()
        .find(|t| t.name == "mcp__fake__schema_tool")
        .unwrap()
        .parameters;
    let text = schema.to_string();
    assert!(
        !text.contains("$schema") && !text.contains("\"not\""),
        "{text}"
    );
    assert!(schema.get("additionalProperties").is_none(), "{text}");
    assert_eq!(schema["properties"]["value"]["type"], "string", "{text}");
    // The calls and their results.
    let results = tool_results(&requests[1]);
    assert_eq!(results[0].content, "hello mcp");
    assert!(!results[0].is_error);
    assert_eq!(results[1].content, "42");
    assert_eq!(ends(&events).len(), 2);
    let status = h.session.mcp_servers();
    assert_eq!(status[0].state, McpServerState::Ready);
    assert_eq!(status[0].tools, 10);
}

#[test]
fn the_long_named_tool_is_called_by_its_raw_name_and_bad_arguments_never_reach_the_server() {
    let long = "t".repeat(100);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let exposed = agentloop::unstable::mcp_tool_name("fake", &long, &Default::default());
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call(&exposed, json!({}))
                .with_tool_call("mcp__fake__add", json!({"a": "two", "b": 1})),
            ScriptedTurn::text("done"),
        ],
        vec![fake("fake", &["--log", log.to_str().unwrap()])],
    );
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    let results = tool_results(&h.model.requests()[1]);
    assert_eq!(results[0].content, "long name called");
    assert!(results[1].is_error, "{}", results[1].content);
    let (messages, _) = server_log(&log);
    let calls: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .collect();
    assert_eq!(calls.len(), 1, "only the valid call was sent: {calls:?}");
    assert_eq!(calls[0]["params"]["name"], long.as_str());
}

#[test]
fn a_server_that_only_speaks_2025_06_18_is_used_through_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call("mcp__old__echo", json!({"text": "old era"})),
            ScriptedTurn::text("done"),
        ],
        vec![fake(
            "old",
            &["--era", "legacy", "--log", log.to_str().unwrap()],
        )],
    );
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    assert_eq!(tool_results(&h.model.requests()[1])[0].content, "old era");
    assert_eq!(h.session.mcp_servers()[0].protocol_version, "2025-06-18");
    let (messages, _) = server_log(&log);
    assert_eq!(
        methods(&messages)[..4],
        [
            "server/discover",
            "initialize",
            "notifications/initialized",
            "tools/list"
        ]
    );
}

#[test]
fn a_server_that_only_speaks_2026_07_28_gets_discover_and_meta_on_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call("mcp__new__echo", json!({"text": "new era"})),
            ScriptedTurn::text("done"),
        ],
        vec![fake(
            "new",
            &["--era", "modern", "--log", log.to_str().unwrap()],
        )],
    );
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    assert_eq!(tool_results(&h.model.requests()[1])[0].content, "new era");
    assert_eq!(h.session.mcp_servers()[0].protocol_version, "2026-07-28");
    let (messages, _) = server_log(&log);
    let sent = methods(&messages);
    assert_eq!(sent, ["server/discover", "tools/list", "tools/call"]);
    for message in &messages {
        let meta = &message["params"]["_meta"];
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        assert_eq!(
            meta["io.modelcontextprotocol/clientInfo"]["name"],
            "agentloop"
        );
        assert!(meta["io.modelcontextprotocol/clientCapabilities"].is_object());
    }
}

#[test]
fn a_late_answer_to_the_probe_still_ends_in_2026_07_28() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // Probe timeout: 2/3 of 6 s = 4 s; the answer comes after 5 s, and `initialize` is
    // then refused with -32022 by a server committed to 2026-07-28.
    let server = fake(
        "late",
        &[
            "--era",
            "modern",
            "--discover-delay",
            "5",
            "--log",
            log.to_str().unwrap(),
        ],
    )
    .with_startup_timeout(Duration::from_secs(6));
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call("mcp__late__echo", json!({"text": "late but modern"})),
            ScriptedTurn::text("done"),
        ],
        vec![server],
    );
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(
        h.session.mcp_servers()[0].protocol_version,
        "2026-07-28",
        "{:?}",
        mcp_warnings(&events)
    );
    assert_eq!(
        last_result(&h.model.requests()[1]).content,
        "late but modern"
    );
    let (messages, _) = server_log(&log);
    let requests: Vec<String> = methods(&messages)
        .into_iter()
        .filter(|m| !m.starts_with("notifications/"))
        .collect();
    assert_eq!(
        requests[..3],
        ["server/discover", "initialize", "tools/list"],
        "the probe timed out first"
    );
}

#[test]
fn a_server_slower_than_its_startup_timeout_is_left_out_with_a_warning() {
    let slow = fake("slow", &["--slow-start", "60"]).with_startup_timeout(Duration::from_secs(1));
    let started = Instant::now();
    let mut h = mcp_harness(
        vec![ScriptedTurn::text("went on")],
        vec![slow, fake("quick", &[])],
    );
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let waited = started.elapsed();
    let warnings = mcp_warnings(&events);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("`slow`") && warnings[0].contains("startup timeout of 1000 ms"),
        "{}",
        warnings[0]
    );
    let names = offered(&h.model.requests()[0]);
    assert!(!names.iter().any(|n| n.starts_with("mcp__slow__")));
    assert!(names.contains(&"mcp__quick__echo".to_string()));
    // The first model call waited about the 1 s timeout, not the server's 60 s.
    assert!(waited < GENEROUS, "{waited:?}");
    assert!(matches!(
        h.session.mcp_servers()[0].state,
        McpServerState::Failed(_)
    ));
}

#[test]
fn a_crash_mid_call_is_an_error_result_and_the_server_is_restarted_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call("mcp__fake__crash", json!({})),
            ScriptedTurn::tool_call("mcp__fake__echo", json!({"text": "after restart"})),
            ScriptedTurn::tool_call("mcp__fake__crash", json!({})),
            ScriptedTurn::tool_call("mcp__fake__echo", json!({"text": "no more"})),
            ScriptedTurn::text("done"),
        ],
        vec![fake("fake", &["--log", log.to_str().unwrap()])],
    );
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    let requests = h.model.requests();
    let crash = &last_result(&requests[1]);
    assert!(crash.is_error);
    assert!(
        crash.content.contains("stopped during the call")
            && crash.content.contains("crashing on purpose")
            && crash.content.contains("restarted for the next call"),
        "{}",
        crash.content
    );
    assert_eq!(last_result(&requests[2]).content, "after restart");
    let second = &last_result(&requests[3]);
    assert!(
        second.content.contains("not restarted again"),
        "{}",
        second.content
    );
    let gone = &last_result(&requests[4]);
    assert!(gone.is_error);
    assert!(
        gone.content.contains("used its 1 restart"),
        "{}",
        gone.content
    );
    let (_, pids) = server_log(&log);
    assert_eq!(pids.len(), 2, "started, restarted once: {pids:?}");
}

#[test]
fn malformed_lines_from_the_server_are_skipped() {
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call("mcp__fake__echo", json!({"text": "still fine"})),
            ScriptedTurn::text("done"),
        ],
        vec![fake("fake", &["--garbage"])],
    );
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    assert_eq!(
        tool_results(&h.model.requests()[1])[0].content,
        "still fine"
    );
}

#[test]
fn a_10_mb_result_is_truncated_for_the_model_and_whole_in_tool_call_end() {
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call("mcp__fake__big", json!({})),
            ScriptedTurn::text("done"),
        ],
        vec![fake("fake", &[])],
    );
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let (_, full, is_error) = &ends(&events)[0];
    assert!(!is_error);
    assert_eq!(full.len(), 10 * 1024 * 1024);
    let model_copy = &tool_results(&h.model.requests()[1])[0].content;
    assert!(model_copy.len() < 100_000, "{}", model_copy.len());
}

#[test]
fn progress_keeps_a_long_call_alive_and_silence_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let server = fake("fake", &["--log", log.to_str().unwrap()])
        .with_call_timeout(Duration::from_millis(1000));
    let mut h = mcp_harness(
        vec![
            // 2.5 s of work, progress every 0.2 s: longer than the 1 s call timeout.
            ScriptedTurn::tool_call("mcp__fake__slow", json!({"seconds": 2.5})),
            ScriptedTurn::tool_call("mcp__fake__hang", json!({})),
            ScriptedTurn::text("done"),
        ],
        vec![server],
    );
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    let requests = h.model.requests();
    let slow = &last_result(&requests[1]);
    assert!(!slow.is_error, "{}", slow.content);
    assert!(slow.content.starts_with("slow done"), "{}", slow.content);
    let hang = &last_result(&requests[2]);
    assert!(hang.is_error);
    assert!(
        hang.content.contains("did not answer within 1000 ms"),
        "{}",
        hang.content
    );
    let messages = wait_for_log(&log, |m| m["method"] == "notifications/cancelled");
    assert!(methods(&messages).contains(&"notifications/cancelled".to_string()));
}

#[test]
fn interrupt_during_a_call_returns_promptly_and_the_server_gets_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call("mcp__fake__hang", json!({})),
            ScriptedTurn::text("unused"),
        ],
        vec![fake("fake", &["--log", log.to_str().unwrap()])],
    );
    h.session.submit("go").unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallStart { .. })
    });
    wait_for_log(&log, |m| m["method"] == "tools/call");
    let started = Instant::now();
    h.session.interrupt();
    let events = collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallEnd { .. })
    });
    let took = started.elapsed();
    eprintln!("mcp: interrupt → TOOL_CALL_END in {took:?}");
    assert!(took < GENEROUS, "{took:?}");
    assert!(ends(&events)[0].2, "an error result");
    let call_id = server_log(&log)
        .0
        .iter()
        .find(|m| m["method"] == "tools/call")
        .map(|m| m["id"].clone())
        .unwrap();
    let messages = wait_for_log(&log, |m| m["method"] == "notifications/cancelled");
    let cancelled = messages
        .iter()
        .find(|m| m["method"] == "notifications/cancelled")
        .expect("notifications/cancelled reached the server");
    assert_eq!(cancelled["params"]["requestId"], call_id);
}

#[test]
fn abort_during_a_call_returns_promptly_and_leaves_no_server_process() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut h = mcp_harness(
        vec![ScriptedTurn::tool_call("mcp__fake__hang", json!({}))],
        vec![fake("fake", &["--log", log.to_str().unwrap()])],
    );
    h.session.submit("go").unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallStart { .. })
    });
    wait_for_log(&log, |m| m["method"] == "tools/call");
    let pid = server_log(&log).1[0];
    assert!(!process_gone(pid));
    let started = Instant::now();
    h.session.abort();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallEnd { .. })
    });
    let took = started.elapsed();
    eprintln!("mcp: abort → TOOL_CALL_END in {took:?}");
    assert!(took < GENEROUS, "{took:?}");
    collect_to_end(&mut h.events);
    assert!(process_gone(pid), "the server outlived its session");
}

#[test]
fn closing_the_session_leaves_no_server_process() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut h = mcp_harness(
        vec![ScriptedTurn::text("hi")],
        vec![fake("fake", &["--log", log.to_str().unwrap()])],
    );
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    let pid = server_log(&log).1[0];
    assert!(!process_gone(pid));
    h.session.close();
    collect_to_end(&mut h.events);
    assert!(process_gone(pid), "the server outlived its session");
}

#[test]
fn list_changed_mid_input_offers_the_new_tools_at_the_next_model_call() {
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call("mcp__fake__grow", json!({})),
            ScriptedTurn::tool_call("mcp__fake__grown", json!({})),
            ScriptedTurn::text("done"),
        ],
        vec![fake("fake", &[])],
    );
    h.session.submit("grow").unwrap();
    let events = collect_input(&mut h.events);
    let requests = h.model.requests();
    assert_eq!(requests.len(), 3, "one input, three model calls");
    let grown = "mcp__fake__grown".to_string();
    assert!(!offered(&requests[0]).contains(&grown));
    // The server said its tools changed during the first call: the very next model
    // call of the same input offers the new tool, and it can be called at once.
    assert!(
        offered(&requests[1]).contains(&grown),
        "{:?}",
        offered(&requests[1])
    );
    assert_eq!(last_result(&requests[2]).content, "grown called");
    assert!(!ends(&events)[1].2, "{:?}", ends(&events));
}

#[test]
fn image_results_reach_the_model_as_image_parts() {
    let mut h = mcp_harness(
        vec![
            ScriptedTurn::tool_call("mcp__fake__image", json!({})),
            ScriptedTurn::text("done"),
        ],
        vec![fake("fake", &[])],
    );
    h.session.submit("go").unwrap();
    collect_input(&mut h.events);
    let result = &tool_results(&h.model.requests()[1])[0];
    let image = result.image.as_ref().expect("an image part");
    assert_eq!(image.media_type.as_deref(), Some("image/png"));
    assert!(image.data.as_ref().unwrap().starts_with(b"\x89PNG"));
}

#[test]
fn a_server_that_cannot_start_is_a_warning_with_its_reason() {
    let broken =
        McpServer::stdio("broken", "sh").with_args(["-c", "echo 'cannot find config' >&2; exit 2"]);
    let mut h = mcp_harness(vec![ScriptedTurn::text("went on")], vec![broken]);
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let warnings = mcp_warnings(&events);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("cannot find config"),
        "{}",
        warnings[0]
    );
}

#[test]
fn a_server_that_stops_reading_its_stdin_cannot_block_interrupt_or_close() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // 1 MB of arguments: more than a pipe holds, so the write to the deaf server blocks.
    let big = "y".repeat(1024 * 1024);
    let mut h = mcp_harness(
        vec![ScriptedTurn::tool_call(
            "mcp__deaf__echo",
            json!({ "text": big }),
        )],
        vec![fake("deaf", &["--deaf", "--log", log.to_str().unwrap()])],
    );
    h.session.submit("go").unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallStart { .. })
    });
    // Interrupt once the write is stuck: the deaf server's stdin pipe holds half of what a
    // pipe holds or more (only the 1 MB call is that big), and the rest cannot go in.
    let pid = server_log(&log).1[0];
    let deadline = Instant::now() + GENEROUS;
    loop {
        let (unread, capacity) = stdin_pipe(pid);
        assert!(
            capacity < big.len(),
            "a pipe of {capacity} bytes holds the call"
        );
        if unread >= capacity / 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the call never filled the pipe");
        std::thread::sleep(Duration::from_millis(5));
    }
    let started = Instant::now();
    h.session.interrupt();
    let events = collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallEnd { .. })
    });
    let took = started.elapsed();
    assert!(took < GENEROUS, "{took:?}");
    assert!(ends(&events)[0].2, "an error result");
    h.session.close();
    collect_to_end(&mut h.events);
    assert!(process_gone(pid), "the server outlived its session");
}
