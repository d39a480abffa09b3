//! Hostile or broken model servers: keep-alive comments with no event, a 200 that is not
//! an event stream, an oversized header, a redirect, duplicate call ids, a false gzip, and
//! timeout messages that say how long they waited. Servers here are raw loopback sockets
//! (`support::raw_server`) or the scripted one. The CLI's memory against an endless line
//! and a slow reader is measured in its own tests (`examples/cli/tests/cli/hostile_servers.rs`).

use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

use agentloop::ErrorKind;
use agentloop::llm::openai_chat::OpenAiChat;
use agentloop::llm::{Client, HttpOptions, Message, Request};

use support::raw_server::{SSE_HEAD, raw_server};
use support::turns::chat_turn;
use support::{self, GENEROUS, Reply, Server};

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

#[test]
fn keepalive_comments_alone_time_out() {
    // A comment every 50 ms keeps every read under the stall timeout, but no event comes.
    let (url, server) = raw_server(|mut stream| {
        let _ = stream.write_all(SSE_HEAD);
        // Longer than the test waits; a client that stays is cut by the ceiling.
        let deadline = Instant::now() + GENEROUS * 2;
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
        elapsed >= Duration::from_millis(550) && elapsed < GENEROUS,
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
    use agentloop::exec::LocalExecutionEnvironment;
    use agentloop::profiles::ProviderProfile;
    use agentloop::session::{Session, SessionConfig};
    use serde_json::{Value, json};
    use support::turns::{chat_sse, function};

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
    let stream = support::session_sse::anthropic_sse(&text, &[]);
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
    let request = crate::llm::wire::request();
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
