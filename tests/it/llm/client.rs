//! `Client` policy over real HTTP, with Anthropic: the retry budget and what is retried
//! (hang-ups, overloaded events before output, `retry-after` beyond the maximum delay), the
//! retry observer, cancelling a backoff, first-byte and connection failures, keys in every
//! text, the loopback server. What every wire format must do (cancel within 50 ms, 429/5xx
//! retries, no retry on 401/400, the stall timeout, context-length errors) is in `wire.rs`.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentloop::llm::anthropic::Anthropic;
use agentloop::llm::{Client, Message, Request, RetryPolicy, StreamEvent};
use agentloop::{CancelToken, ErrorKind};

use support::cancel::{after_events, spawn_timed};
use support::{self, GENEROUS, Reply, Server, conformance};

fn request() -> Request {
    Request::new("claude-test", vec![Message::user("hello")])
}

fn text_basic() -> Vec<u8> {
    std::fs::read(conformance::dir().join("anthropic/text_basic.sse")).unwrap()
}

fn overloaded_body() -> &'static str {
    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
}

// ---- retries --------------------------------------------------------------------------

#[test]
fn overloaded_529_and_unavailable_503_are_retried_with_growing_backoff() {
    let server = Server::start(vec![
        Reply::json(529, overloaded_body()),
        Reply::json(503, r#"{"error":{"message":"unavailable"}}"#),
        Reply::sse(text_basic()),
    ]);
    let policy = RetryPolicy::default()
        .with_base_delay(Duration::from_millis(100))
        .with_backoff_multiplier(3.0)
        .with_jitter(false);
    let client = support::anthropic_client(&server).with_retry_policy(policy);
    assert_eq!(
        client.complete(&request()).unwrap().text(),
        "4200 + 42 = 4242"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let first_wait = requests[1].at - requests[0].at;
    let second_wait = requests[2].at - requests[1].at;
    assert!(first_wait >= Duration::from_millis(100), "{first_wait:?}");
    assert!(second_wait >= Duration::from_millis(300), "{second_wait:?}");
}

#[test]
fn retries_stop_when_the_budget_is_spent() {
    let server = Server::start(vec![
        Reply::json(503, "{}"),
        Reply::json(503, "{}"),
        Reply::json(503, "{}"),
        Reply::sse(text_basic()),
    ]);
    let err = support::anthropic_client(&server)
        .complete(&request())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server);
    assert_eq!(err.status(), Some(503));
    assert_eq!(
        server.requests().len(),
        3,
        "the first attempt and two retries"
    );
}

#[test]
fn retry_after_longer_than_max_delay_fails_at_once_with_the_delay() {
    let server = Server::start(vec![
        Reply::json(
            429,
            r#"{"error":{"type":"rate_limit_error","message":"later"}}"#,
        )
        .header("retry-after", "120"),
        Reply::sse(text_basic()),
    ]);
    let started = Instant::now();
    let err = support::anthropic_client(&server)
        .complete(&request())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(120)));
    assert_eq!(server.requests().len(), 1);
    assert!(started.elapsed() < GENEROUS);
}

#[test]
fn hang_up_after_two_delivered_events_ends_the_stream_with_a_stream_error_and_no_retry() {
    let body = text_basic();
    let cut = after_events(&body, 2);
    let server = Server::start(vec![
        Reply::sse(body.clone()).hang_up_after(cut),
        Reply::sse(body),
    ]);
    let stream = support::anthropic_client(&server)
        .stream(&request())
        .unwrap();
    let items: Vec<_> = stream.collect();
    assert_eq!(items.len(), 3, "{items:?}");
    assert!(matches!(items[0], Ok(StreamEvent::StreamStart { .. })));
    assert!(matches!(items[1], Ok(StreamEvent::TextStart { .. })));
    let err = items[2].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Stream, "{err:?}");
    assert_eq!(
        server.requests().len(),
        1,
        "no retry after events were delivered"
    );
}

/// Serves `first`, then the `text_basic` capture: the client must retry once and answer
/// from the second reply.
fn assert_retried_once(first: Reply) {
    let server = Server::start(vec![first, Reply::sse(text_basic())]);
    let response = support::anthropic_client(&server)
        .complete(&request())
        .unwrap();
    assert_eq!(response.text(), "4200 + 42 = 4242");
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn hang_up_before_any_byte_is_retried() {
    assert_retried_once(Reply::hang_up());
}

#[test]
fn hang_up_inside_the_first_event_is_retried() {
    assert_retried_once(Reply::sse(text_basic()).hang_up_after(40));
}

#[test]
fn an_overloaded_error_event_before_any_output_is_retried() {
    let error_event = format!("event: error\ndata: {}\n\n", overloaded_body());
    assert_retried_once(Reply::sse(error_event));
}

#[test]
fn max_retries_zero_disables_retries() {
    let server = Server::start(vec![Reply::json(503, "{}"), Reply::sse(text_basic())]);
    let client = support::anthropic_client(&server).with_retry_policy(RetryPolicy::none());
    assert_eq!(
        client.complete(&request()).unwrap_err().kind(),
        ErrorKind::Server
    );
    assert_eq!(server.requests().len(), 1);
}

// ---- cancellation ---------------------------------------------------------------------

#[test]
fn cancel_during_backoff_aborts_without_waiting_it_out() {
    let server = Server::start(vec![Reply::json(503, "{}"), Reply::sse(text_basic())]);
    let client = support::anthropic_client(&server)
        .with_retry_policy(RetryPolicy::default().with_base_delay(Duration::from_secs(60)));
    let cancel = CancelToken::new();
    let (done, worker) = {
        let cancel = cancel.clone();
        spawn_timed(move || client.stream_with_cancel(&request(), &cancel).map(|_| ()))
    };
    server.wait_for_requests(1, GENEROUS);
    cancel.cancel();
    let (result, _) = done
        .recv_timeout(GENEROUS)
        .expect("the backoff was interrupted");
    worker.join().unwrap();
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Aborted);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_cancelled_token_fails_at_once_without_a_request() {
    let server = Server::start(vec![Reply::sse(text_basic())]);
    let cancel = CancelToken::new();
    cancel.cancel();
    let err = support::anthropic_client(&server)
        .stream_with_cancel(&request(), &cancel)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Aborted);
    assert_eq!(server.requests().len(), 0);
}

// ---- timeouts -------------------------------------------------------------------------

#[test]
fn a_server_silent_before_its_headers_times_out_with_a_first_byte_error() {
    let server = Server::start(vec![Reply::stall()]);
    let provider = support::anthropic(&server).with_http_options(
        support::http_options().with_first_byte_timeout(Duration::from_millis(300)),
    );
    let err = support::client_for(provider)
        .complete(&request())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err:?}");
    assert!(err.message().contains("first-byte"), "{err}");
}

#[test]
fn a_closed_port_is_a_network_error() {
    let server = Server::start(vec![]);
    let url = server.url();
    drop(server);
    let provider = Anthropic::new(support::FAKE_KEY)
        .with_base_url(url)
        .with_http_options(support::http_options());
    let client = Client::new()
        .with_provider(provider)
        .with_retry_policy(RetryPolicy::none());
    let err = client.complete(&request()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Network, "{err:?}");
}

// ---- secrets --------------------------------------------------------------------------

#[test]
fn no_api_key_appears_in_any_debug_display_or_error_text() {
    // One key shaped like a real one, one that no secret pattern would recognise.
    for key in [support::FAKE_KEY, "plainFAKEKEYwithoutAnyKnownShape42"] {
        let echo = format!(
            r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {key}"}}}}"#
        );
        let in_stream = format!(
            "event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"permission_error\",\"message\":\"key {key} may not\"}}}}\n\n"
        );
        let server = Server::start(vec![Reply::json(401, echo), Reply::sse(in_stream)]);
        let provider = Anthropic::new(key)
            .with_base_url(server.url())
            .with_http_options(support::http_options());
        let client = Client::new()
            .with_provider(provider.clone())
            .with_retry_policy(RetryPolicy::none());
        let mut shown = vec![format!("{provider:?}"), format!("{client:?}")];
        for _ in 0..2 {
            let err = client.complete(&request()).unwrap_err();
            shown.push(format!("{err}"));
            shown.push(format!("{err:?}"));
            shown.push(err.body_excerpt().unwrap_or_default().to_string());
        }
        let bad_header = Anthropic::new(format!("{key}\n"))
            .with_base_url(server.url())
            .with_http_options(support::http_options());
        let err = support::client_for(bad_header)
            .complete(&request())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Configuration);
        shown.push(format!("{err} {err:?}"));

        let recorded = server.requests();
        assert_eq!(
            recorded[0].header("x-api-key"),
            Some(key),
            "the key was really sent"
        );
        for text in &shown {
            assert!(!text.contains(key), "the key leaked: {text}");
        }
    }
}

// ---- the loopback server itself ---------------------------------------------------------

#[test]
fn the_loopback_server_joins_its_threads_when_dropped_while_holding_connections() {
    use std::io::Write;
    let server = Server::start(vec![Reply::stall(), Reply::stall()]);
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        stream
            .write_all(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
            .unwrap();
        held.push(stream);
    }
    let requests = server.wait_for_requests(2, GENEROUS);
    assert_eq!(requests[0].json(), &serde_json::json!({}));
    let (tx, rx) = mpsc::channel();
    let dropper = std::thread::Builder::new()
        .name("test-server-dropper".into())
        .spawn(move || {
            drop(server);
            let _ = tx.send(());
        })
        .unwrap();
    rx.recv_timeout(GENEROUS)
        .expect("dropping the server joined its threads");
    dropper.join().unwrap();
    drop(held);
}

#[test]
fn an_overloaded_error_right_after_message_start_is_retried() {
    let body = text_basic();
    let mut first = body[..after_events(&body, 1)].to_vec();
    first.extend_from_slice(format!("event: error\ndata: {}\n\n", overloaded_body()).as_bytes());
    let server = Server::start(vec![Reply::sse(first), Reply::sse(body)]);
    let events: Vec<StreamEvent> = support::anthropic_client(&server)
        .stream(&request())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let starts = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::StreamStart { .. }))
        .count();
    assert_eq!(
        starts, 1,
        "the failed attempt's StreamStart was not delivered"
    );
    assert!(matches!(events.last(), Some(StreamEvent::Finish { .. })));
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn an_overloaded_error_event_after_output_ends_the_stream_and_is_not_retried() {
    // The decoder's side (a retryable server error after the text began) is a unit test of
    // the Messages format; this is the client's: after output, the error is the stream's
    // last item and the request is not sent again.
    let body = text_basic();
    let mut first = body[..after_events(&body, 3)].to_vec();
    first.extend_from_slice(
        b"event: error\ndata: {\"type\":\"error\",\"error\":{\"details\":null,\"type\":\"overloaded_error\",\"message\":\"Overloaded\"},\"request_id\":\"req_1\"}\n\n",
    );
    let server = Server::start(vec![Reply::sse(first), Reply::sse(body)]);
    let items: Vec<_> = support::anthropic_client(&server)
        .stream(&request())
        .unwrap()
        .collect();
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server);
    assert!(err.is_retryable());
    assert_eq!(err.code(), Some("overloaded_error"));
    assert_eq!(err.message(), "Overloaded");
    assert_eq!(items.iter().filter(|i| i.is_ok()).count(), 3);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn the_retry_observer_sees_each_retry_with_its_error_and_delay() {
    use std::sync::{Arc, Mutex};
    let server = Server::start(vec![
        Reply::json(529, overloaded_body()),
        Reply::json(
            429,
            r#"{"error":{"type":"rate_limit_error","message":"slow"}}"#,
        )
        .header("retry-after", "0.2"),
        Reply::sse(text_basic()),
    ]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let client = {
        let seen = seen.clone();
        support::anthropic_client(&server).on_retry(move |err, attempt, delay| {
            seen.lock().unwrap().push((err.kind(), attempt, delay));
        })
    };
    client.complete(&request()).unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (ErrorKind::Server, 1, Duration::from_millis(10)),
            (ErrorKind::RateLimited, 2, Duration::from_millis(200)),
        ]
    );
}
