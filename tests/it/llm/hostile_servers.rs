//! Hostile or broken model servers (part 3): an endless SSE line, keep-alive comments with
//! no event, a 200 that is not an event stream, a redirect, and timeout messages that say how
//! long they waited. Servers here are raw loopback sockets that generate their bodies as
//! they write, so a 400 MB attack costs the test nothing; memory is measured on a child
//! process (the `agent` CLI), never asserted as a speed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use agentloop::ErrorKind;
use agentloop::llm::openai_chat::OpenAiChat;
use agentloop::llm::{Client, HttpOptions, Message, Request};

use crate::agent_cli::example_binary;
use crate::support::turns::chat_turn;
use crate::support::{self, GENEROUS, Reply, Server};

/// A loopback server that hands every connection (after reading its request) to
/// `respond`, until the returned [`Stop`] is dropped or a minute has passed.
fn raw_server(respond: impl Fn(TcpStream) + Send + Sync + 'static) -> (String, Stop) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let handle = thread::Builder::new()
        .name("raw-server".to_string())
        .spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            thread::scope(|scope| {
                while !stopped.load(Ordering::SeqCst) && Instant::now() < deadline {
                    match listener.accept() {
                        Ok((mut stream, _)) => {
                            stream.set_nonblocking(false).unwrap();
                            let respond = &respond;
                            scope.spawn(move || {
                                read_request(&mut stream);
                                respond(stream);
                            });
                        }
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            });
        })
        .unwrap();
    (url, Stop(stop, Some(handle)))
}

/// Stops a [`raw_server`] (and joins it) when dropped.
struct Stop(Arc<AtomicBool>, Option<thread::JoinHandle<()>>);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
        if let Some(handle) = self.1.take() {
            let _ = handle.join();
        }
    }
}

/// Reads one request's head and its `content-length` body.
fn read_request(stream: &mut TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
}

const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

fn chat_client(url: &str, http: HttpOptions) -> Client {
    support::client_for(
        OpenAiChat::new(support::FAKE_KEY)
            .with_base_url(format!("{url}/v1"))
            .with_http_options(http),
    )
}

fn request() -> Request {
    Request::new("test-model", vec![Message::user("hello")])
}

/// The error that ends a stream, whether `stream` returns it (before the first event) or the
/// stream yields it later.
fn stream_error(client: &Client) -> agentloop::Error {
    match client.stream(&request()) {
        Err(err) => err,
        Ok(stream) => stream
            .filter_map(Result::err)
            .next()
            .expect("the stream should end with an error"),
    }
}

/// Waits for `child`; returns its exit status and its peak resident memory (KiB).
///
/// The peak is `VmHWM` from `/proc/<pid>/status`, sampled until the process is gone: the
/// high-water mark of the child's own image. (`wait4`'s `ru_maxrss` would not do: a child
/// started with `posix_spawn` shares the test binary's memory until its `exec`, and Linux
/// carries that high-water mark into the child's.)
fn wait_with_peak_rss(child: &mut std::process::Child) -> (i32, i64) {
    let status_file = format!("/proc/{}/status", child.id());
    let peak = Arc::new(std::sync::atomic::AtomicI64::new(0));
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
    let mut child = Command::new(example_binary("agent"))
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
fn keepalive_comments_alone_time_out() {
    // A comment every 50 ms keeps every read under the stall timeout, but no event comes.
    let (url, server) = raw_server(|mut stream| {
        let _ = stream.write_all(SSE_HEAD);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if stream.write_all(b": keep-alive\n\n").is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
    });
    let http = support::http_options()
        .with_stall_timeout(Duration::from_secs(10))
        .with_progress_timeout(Duration::from_millis(600));
    let started = Instant::now();
    let err = stream_error(&chat_client(&url, http));
    let elapsed = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err:?}");
    assert!(
        err.to_string().contains("no event for") && err.to_string().contains("keep-alive"),
        "{err}"
    );
    assert!(
        elapsed >= Duration::from_millis(550) && elapsed < Duration::from_secs(9),
        "{elapsed:?}"
    );
    drop(server);
}

#[test]
fn a_stall_timeout_says_how_long_it_waited() {
    let server = Server::start(vec![Reply::sse(b": hello\n\n".to_vec()).then_stall()]);
    let http = support::http_options().with_stall_timeout(Duration::from_millis(1500));
    let client = support::client_for(
        OpenAiChat::new(support::FAKE_KEY)
            .with_base_url(format!("{}/v1", server.url()))
            .with_http_options(http),
    );
    let err = stream_error(&client);
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err:?}");
    assert!(err.to_string().contains("1.5 s"), "{err}");
}

#[test]
fn a_200_that_is_not_an_event_stream_names_its_content_type() {
    let server = Server::start(vec![Reply::body(
        200,
        "text/html; charset=utf-8",
        b"<html><body>Sign in to continue</body></html>".to_vec(),
    )]);
    let client = chat_client(&server.url(), support::http_options());
    let err = stream_error(&client);
    let text = err.to_string();
    assert!(
        text.contains("text/html") && text.contains("not an event stream"),
        "{text}"
    );
    assert!(!err.is_retryable(), "{err:?}");
    assert_eq!(server.requests().len(), 1, "an HTML page is not retried");
}

/// A `200` event stream whose response header carries `padding` bytes of extra headers
/// before a text answer.
fn padded_header_reply(padding: usize) -> Reply {
    let mut reply = chat_turn("fine", &[]);
    let value = "x".repeat(1000);
    for i in 0..padding / 1000 {
        reply = reply.header(&format!("x-padding-{i}"), &value);
    }
    reply
}

#[test]
fn a_response_header_over_16_kib_is_a_typed_error_and_one_under_it_streams() {
    // Providers send 1–3 KB of headers; up to 16 KiB is read (the response header limit
    // and ureq's input buffer, zeroed per connection).
    let server = Server::start(vec![padded_header_reply(12_000)]);
    let client = chat_client(&server.url(), support::http_options());
    let events: Vec<_> = client
        .stream(&request())
        .expect("12 KB of headers")
        .collect();
    assert!(events.iter().all(Result::is_ok), "{events:?}");

    let server = Server::start(vec![
        padded_header_reply(40_000),
        padded_header_reply(40_000),
        padded_header_reply(40_000),
    ]);
    let client = chat_client(&server.url(), support::http_options());
    let started = Instant::now();
    let err = stream_error(&client);
    assert!(started.elapsed() < GENEROUS, "took {:?}", started.elapsed());
    assert_eq!(err.kind(), ErrorKind::Network, "{err:?}");
    let text = err.to_string();
    assert!(text.contains("response header"), "{text}");
}

#[test]
fn a_redirect_is_not_retried_and_names_where_it_points() {
    let server = Server::start(vec![
        Reply::body(307, "text/plain", b"moved".to_vec()).header(
            "location",
            "https://elsewhere.invalid/v1/chat/completions?key=SECRET",
        ),
        Reply::body(307, "text/plain", b"moved".to_vec()),
        Reply::body(307, "text/plain", b"moved".to_vec()),
    ]);
    let client = chat_client(&server.url(), support::http_options());
    let err = match client.stream(&request()) {
        Ok(_) => panic!("a redirect should be an error"),
        Err(err) => err,
    };
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("elsewhere.invalid") && !text.contains("SECRET"),
        "{text}"
    );
    assert_eq!(server.requests().len(), 1, "a redirect is not retried");
}

#[test]
fn duplicate_tool_call_ids_never_produce_two_results_for_one_id() {
    use crate::support::turns::{chat_sse, function};
    use agentloop::exec::LocalExecutionEnvironment;
    use agentloop::profiles::ProviderProfile;
    use agentloop::session::{Session, SessionConfig};
    use serde_json::{Value, json};

    // An OpenAI-compatible server that gives two parallel calls the same id.
    let calls = [
        function("call_1", "shell", json!({"command": "echo one"})),
        function("call_1", "shell", json!({"command": "echo two"})),
    ];
    let server = Server::start(vec![
        Reply::sse(chat_sse("", &calls)),
        Reply::sse(chat_sse("both ran", &[])),
    ]);
    let client = chat_client(&server.url(), support::http_options());
    let profile = ProviderProfile::new("openai-chat", "loopback")
        .with_tool(agentloop::tools::shell())
        .with_parallel_tool_calls(true);
    let dir = tempfile::tempdir().unwrap();
    let env = std::sync::Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let session = Session::new(profile, env, client, SessionConfig::default()).unwrap();
    let outcome = session.run("run both").unwrap();
    assert_eq!(outcome.text, "both ran");

    let second = &server.requests()[1];
    let messages = second.json()["messages"].as_array().unwrap();
    let call_ids: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    let result_ids: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(call_ids.len(), 2, "{messages:?}");
    assert_ne!(call_ids[0], call_ids[1], "the ids were not made unique");
    assert_eq!(
        call_ids, result_ids,
        "one result per call, same ids, same order"
    );
    // Each result answers its own call.
    let outputs: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| &m["content"])
        .collect();
    assert!(outputs[0].to_string().contains("one") && outputs[1].to_string().contains("two"));
}

#[test]
fn a_slow_event_reader_keeps_memory_bounded() {
    use crate::support::turns::{chat_sse, function};
    use serde_json::json;

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
    let mut child = Command::new(example_binary("agent"))
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

#[test]
fn skipped_output_is_marked_for_a_reader_that_fell_behind() {
    use agentloop::exec::LocalExecutionEnvironment;
    use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
    use agentloop::profiles::ProviderProfile;
    use agentloop::session::{EventKind, Session, SessionConfig};
    use serde_json::json;

    // 32 MiB of output with nobody reading until the command is over.
    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "head -c 33554432 /dev/zero | tr '\\0' y; echo; echo finished; touch ran.flag"}),
        ),
        ScriptedTurn::text("done"),
    ]);
    let profile = ProviderProfile::new("scripted", "scripted").with_tool(agentloop::tools::shell());
    let dir = tempfile::tempdir().unwrap();
    let env = std::sync::Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let session = Session::new(
        profile,
        env,
        Client::new().with_provider(model),
        SessionConfig::default(),
    )
    .unwrap();
    let events = session.events();
    session.submit("go").unwrap();
    session.close();
    // Read nothing until the command has written everything.
    let flag = dir.path().join("ran.flag");
    let deadline = Instant::now() + GENEROUS;
    while !flag.exists() {
        assert!(Instant::now() < deadline, "the command did not finish");
        thread::sleep(Duration::from_millis(10));
    }
    let all: Vec<_> = events.collect();
    let delivered: usize = all
        .iter()
        .map(|e| match &e.kind {
            EventKind::ToolCallOutputDelta { delta, .. } => delta.len(),
            _ => 0,
        })
        .sum();
    let marked = all.iter().any(|e| {
        matches!(&e.kind, EventKind::ToolCallOutputDelta { delta, .. }
            if delta.contains("bytes of live output skipped"))
    });
    assert!(marked, "no marker for the skipped output");
    assert!(
        delivered < 8 * 1024 * 1024,
        "{delivered} bytes of deltas were queued for a reader that read nothing"
    );
    let end = all
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolCallEnd { output, .. } => output.clone(),
            _ => None,
        })
        .unwrap();
    assert!(end.contains("finished"), "TOOL_CALL_END keeps the tail");
}

/// Gzip, which the client decodes itself: requests ask for it; a compressed event stream
/// (real deflate, and stored blocks) and a compressed error body decode; a body that says
/// gzip but is not is a typed error, not a panic or a hang.
#[test]
fn gzip_responses_decode_and_a_false_one_is_a_typed_error() {
    use std::io::Write as _;
    let text = "compressed hello ".repeat(40);
    let stream = crate::session_sse::anthropic_sse(&text, &[]);
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(stream.as_bytes()).unwrap();
    let deflated = encoder.finish().unwrap();
    assert!(
        deflated.len() < stream.len() / 2,
        "the stream is really compressed"
    );
    let server = Server::start(vec![
        Reply::sse(deflated)
            .header("content-encoding", "gzip")
            .chunk(7),
        Reply::sse(stream.clone()).gzip(),
        Reply::json(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"zipped complaint"}}"#,
        )
        .gzip(),
        Reply::sse("event: message_start\ndata: {}\n\n").header("content-encoding", "gzip"),
    ]);
    let client =
        support::anthropic_client(&server).with_retry_policy(agentloop::llm::RetryPolicy::none());
    let request = crate::wire::request();
    assert_eq!(client.complete(&request).unwrap().text(), text);
    assert_eq!(client.complete(&request).unwrap().text(), text);
    let refused = client.complete(&request).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::InvalidRequest, "{refused}");
    assert!(
        refused.to_string().contains("zipped complaint"),
        "{refused}"
    );
    let started = Instant::now();
    let broken = client.complete(&request).unwrap_err();
    assert!(
        matches!(broken.kind(), ErrorKind::Network | ErrorKind::Stream),
        "{broken}"
    );
    assert!(started.elapsed() < GENEROUS);
    for recorded in server.requests() {
        assert_eq!(recorded.header("accept-encoding"), Some("gzip"));
    }
}
