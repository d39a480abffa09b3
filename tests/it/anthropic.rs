//! The Anthropic Messages adapter against recorded streams and a loopback server.

use agentloop::llm::anthropic::decode_stream;
use agentloop::llm::{Message, Request, RetryPolicy};

use crate::support::{self, Reply, Server, conformance};

fn request() -> Request {
    Request::new("claude-test", vec![Message::user("hello")])
}

#[test]
fn every_capture_decodes_to_its_expected_result_whole_and_byte_by_byte() {
    let captures = conformance::sse_files("anthropic");
    assert!(captures.len() >= 7, "captures: {captures:?}");
    for capture in &captures {
        let server = Server::start(vec![
            Reply::sse_file(capture),
            Reply::sse_file(capture).chunk(1),
        ]);
        let client = support::anthropic_client(&server);
        let whole = client
            .complete(&request())
            .unwrap_or_else(|e| panic!("{}: {e:?}", capture.display()));
        conformance::assert_response(capture, "served whole", &whole);
        let bytewise = client
            .complete(&request())
            .unwrap_or_else(|e| panic!("{}: {e:?}", capture.display()));
        conformance::assert_response(capture, "one byte per chunk", &bytewise);
        assert_eq!(whole, bytewise);
        let offline = decode_stream(&std::fs::read(capture).unwrap()).unwrap();
        assert_eq!(offline, whole, "decode_stream agrees with the live stream");
    }
}

#[test]
fn every_error_body_maps_to_its_expected_kind_and_retryability() {
    let captures = conformance::error_files("anthropic_");
    assert!(captures.len() >= 3, "captures: {captures:?}");
    for capture in &captures {
        let expected = conformance::expected_for(capture);
        let (status, content_type) = conformance::expected_http(&expected);
        let mut reply = Reply::body(status, &content_type, std::fs::read(capture).unwrap());
        if expected["http"]["content-encoding"] == "gzip" {
            reply = reply.gzip();
        }
        let server = Server::start(vec![reply]);
        let client = support::anthropic_client(&server).with_retry_policy(RetryPolicy::none());
        let err = client.complete(&request()).expect_err("an error status");
        conformance::assert_error(capture, "http error", &err);
    }
}
