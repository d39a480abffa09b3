//! Keep-alive connections to the model server, against the real loopback server: a
//! provider's rounds share one connection in every wire format; a connection the server
//! closed while idle is replaced without an error; a cancelled request, or a later cancel
//! of a finished request's token, never spoils the connection the next request uses; a
//! body held open after its last event costs at most the stall timeout and is not reused,
//! nor is one that trickles on after it.

use std::time::{Duration, Instant};

use agentloop::llm::{Client, RetryPolicy, StreamEvent};
use agentloop::{CancelToken, ErrorKind};
use serde_json::json;

use crate::llm::wire::{capture, client, formats, request};
use support::session_sse::anthropic_sse;
use support::{self, GENEROUS, Reply, Server};

fn text_reply(text: &str) -> Reply {
    Reply::sse(anthropic_sse(text, &[]))
}

/// An Anthropic client at `server` that never retries: a broken connection would show.
fn no_retries(server: &Server) -> Client {
    support::anthropic_client(server).with_retry_policy(RetryPolicy::none())
}

/// [`no_retries`] with `stall` as the stall timeout.
fn no_retries_stalling_after(server: &Server, stall: Duration) -> Client {
    let provider = support::anthropic(server)
        .with_http_options(support::http_options().with_stall_timeout(stall));
    support::client_for(provider).with_retry_policy(RetryPolicy::none())
}

/// The text of `client`'s answer to one request, and how long the request took.
fn timed_answer(client: &Client) -> (String, Duration) {
    let started = Instant::now();
    let response = client.complete(&request()).unwrap();
    (response.text(), started.elapsed())
}

#[test]
fn three_rounds_share_one_connection_for_every_format() {
    for format in formats() {
        let replies = (0..3)
            .map(|_| Reply::sse_file(capture(format.ok_capture)))
            .collect();
        let server = Server::start(replies);
        let client = client(&format, &server);
        for round in 0..3 {
            let response = client.complete(&request()).unwrap();
            assert_eq!(
                response.text(),
                format.ok_text,
                "{} round {round}",
                format.name
            );
        }
        assert_eq!(server.requests().len(), 3, "{}", format.name);
        assert_eq!(
            server.connection_count(),
            1,
            "{}: every round on the first connection",
            format.name
        );
    }
}

#[test]
fn a_connection_the_server_closed_while_idle_is_replaced_without_an_error() {
    let server = Server::start(vec![text_reply("first").then_close(), text_reply("second")]);
    let client = no_retries(&server);
    assert_eq!(client.complete(&request()).unwrap().text(), "first");
    // Marked once the server has shut the connection: the client's next request finds it
    // closed before it writes a byte.
    server.wait_answered(0, GENEROUS).expect("the first reply");
    assert_eq!(client.complete(&request()).unwrap().text(), "second");
    assert_eq!(
        server.requests().len(),
        2,
        "no request was lost or repeated"
    );
    assert_eq!(server.connection_count(), 2);
}

#[test]
fn a_cancelled_request_leaves_the_next_one_a_working_connection() {
    let server = Server::start(vec![Reply::stall(), text_reply("after the cancel")]);
    let client = no_retries(&server);
    let cancel = CancelToken::new();
    let stalled = {
        let (client, cancel) = (client.clone(), cancel.clone());
        std::thread::spawn(move || client.stream_with_cancel(&request(), &cancel).map(|_| ()))
    };
    server.wait_for_requests(1, GENEROUS);
    cancel.cancel();
    let ended = stalled.join().unwrap();
    assert_eq!(ended.unwrap_err().kind(), ErrorKind::Aborted);
    assert!(server.wait_client_closed(0, GENEROUS).is_some());
    let response = client.complete(&request()).unwrap();
    assert_eq!(response.text(), "after the cancel");
    assert_eq!(server.connection_count(), 2);
}

#[test]
fn cancelling_a_finished_requests_token_does_not_shut_the_idle_connection() {
    let server = Server::start(vec![text_reply("one"), text_reply("two")]);
    let client = no_retries(&server);
    let first = CancelToken::new();
    let mut stream = client.stream_with_cancel(&request(), &first).unwrap();
    let finished = stream
        .by_ref()
        .any(|event| matches!(event, Ok(StreamEvent::Finish { .. })));
    assert!(finished);
    // The turn is aborted after its model call ended, while the host still holds the
    // finished stream: the connection is already idle for the next request.
    first.cancel();
    drop(stream);
    let response = client
        .complete_with_cancel(&request(), &CancelToken::new())
        .unwrap();
    assert_eq!(response.text(), "two");
    assert_eq!(server.connection_count(), 1, "the idle connection survived");
}

#[test]
fn a_body_held_open_after_its_last_event_ends_by_the_stall_timeout_and_is_not_reused() {
    let stall = Duration::from_millis(500);
    let server = Server::start(vec![
        text_reply("complete, but the body stays open").then_stall(),
        text_reply("next"),
    ]);
    let client = no_retries_stalling_after(&server, stall);
    let (text, took) = timed_answer(&client);
    assert_eq!(text, "complete, but the body stays open");
    assert!(took < stall + GENEROUS, "took {took:?}");
    assert_eq!(client.complete(&request()).unwrap().text(), "next");
    assert_eq!(
        server.connection_count(),
        2,
        "the open body's connection was dropped"
    );
}

#[test]
fn a_session_runs_its_tool_rounds_over_one_connection() {
    use crate::session::http::{anthropic_profile, http_harness};
    use agentloop::session::{SessionConfig, StopReason};
    use support::session::{collect_input, stop_reason};
    let mut h = http_harness(
        vec![
            Reply::sse(anthropic_sse(
                "",
                &[("toolu_1", "echo", json!({"text": "a"}))],
            )),
            Reply::sse(anthropic_sse(
                "",
                &[("toolu_2", "echo", json!({"text": "b"}))],
            )),
            text_reply("done"),
        ],
        anthropic_profile(),
        SessionConfig::default(),
    );
    h.session.submit("echo twice").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::Completed);
    assert_eq!(h.server.requests().len(), 3);
    assert_eq!(h.server.connection_count(), 1);
}

#[test]
fn a_body_trickling_on_after_its_last_event_is_dropped_by_the_stall_timeout() {
    let stall = Duration::from_millis(300);
    let events = anthropic_sse("complete, then padding", &[]);
    // The body in 100-byte chunks, one every 200 ms (each gap under the stall timeout):
    // the events, then 150 comment lines of 100 bytes, 15 000 bytes in all (under the
    // 16 KiB the tail may read) trickling for 30 s, longer than the ceiling. An answer
    // within the ceiling was not kept waiting for the tail's end.
    let chunk = 100;
    let mut body = events.clone().into_bytes();
    let padding = format!(": {}\n", "x".repeat(chunk - 3));
    for _ in 0..150 {
        body.extend_from_slice(padding.as_bytes());
    }
    let server = Server::start(vec![
        Reply::sse(body)
            .chunk(chunk)
            .delay(Duration::from_millis(200)),
        text_reply("next"),
    ]);
    let client = no_retries_stalling_after(&server, stall);
    let (text, took) = timed_answer(&client);
    assert_eq!(text, "complete, then padding");
    assert!(took < GENEROUS, "the tail was read for {took:?}");
    assert_eq!(client.complete(&request()).unwrap().text(), "next");
    assert_eq!(
        server.connection_count(),
        2,
        "the trickling connection was dropped"
    );
}

#[test]
fn model_requests_go_out_on_sockets_with_tcp_nodelay_in_every_format() {
    // The server holds each request unanswered, so the client's socket is open while its
    // options are read from this process's own descriptors.
    for format in formats() {
        let server = Server::start(vec![Reply::stall()]);
        let client = client(&format, &server).with_retry_policy(RetryPolicy::none());
        let cancel = CancelToken::new();
        let waiting = {
            let cancel = cancel.clone();
            std::thread::spawn(move || client.complete_with_cancel(&request(), &cancel))
        };
        server.wait_for_requests(1, GENEROUS);
        let sockets = support::sockets::nodelay_of_connections_to(server.port());
        cancel.cancel();
        let result = waiting.join().unwrap();
        assert_eq!(result.unwrap_err().kind(), ErrorKind::Aborted);
        assert_eq!(
            sockets,
            [true],
            "{}: the client's connection and its TCP_NODELAY",
            format.name
        );
    }
}
