//! Recorded captures served by the loopback server: every capture of a format must give
//! its expected result live (whole and one byte per chunk) and offline, and every recorded
//! error body its expected error. Checks shared by the per-format test files.

use std::path::{Path, PathBuf};

use agentloop::llm::{Client, Request, Response, RetryPolicy};

use super::{Reply, Server, conformance};

/// [`assert_capture_live_and_offline`] for each of `captures`.
pub fn assert_captures_live_and_offline(
    captures: &[PathBuf],
    request: &Request,
    client_for: impl Fn(&Server) -> Client,
    decode_stream: fn(&[u8]) -> agentloop::Result<Response>,
) {
    for capture in captures {
        assert_capture_live_and_offline(capture, request, &client_for, decode_stream);
    }
}

/// Serves `capture` whole, then one byte per chunk, to the client `client_for` builds (its
/// retries turned off), and decodes it offline with `decode_stream`. A capture that
/// records an error must give that error all three ways; one that records a response must
/// conform to its expected result each way, and the three responses must be equal.
fn assert_capture_live_and_offline(
    capture: &Path,
    request: &Request,
    client_for: impl Fn(&Server) -> Client,
    decode_stream: fn(&[u8]) -> agentloop::Result<Response>,
) {
    let conforms = conformance::assert_response;
    let expected = conformance::expected_for(capture);
    let server = Server::start(vec![
        Reply::sse_file(capture),
        Reply::sse_file(capture).chunk(1),
    ]);
    let client = client_for(&server).with_retry_policy(RetryPolicy::none());
    let offline = decode_stream(&std::fs::read(capture).unwrap());
    if expected["error"].is_null() {
        let complete = || {
            client
                .complete(request)
                .unwrap_or_else(|e| panic!("{}: {e:?}", capture.display()))
        };
        let whole = complete();
        conforms(capture, "served whole", &whole);
        let bytewise = complete();
        conforms(capture, "one byte per chunk", &bytewise);
        assert_eq!(whole, bytewise);
        assert_eq!(
            offline.unwrap(),
            whole,
            "decode_stream agrees with the live stream"
        );
    } else {
        for how in ["served whole", "one byte per chunk"] {
            let err = client.complete(request).unwrap_err();
            conformance::assert_error(capture, how, &err);
        }
        conformance::assert_error(capture, "decode_stream", &offline.unwrap_err());
    }
}

/// Serves each recorded error body in `captures` with its recorded status, content type
/// and encoding, and checks the error the client `client_for` builds (its retries turned
/// off) reports for `request`.
pub fn assert_served_errors(
    captures: &[PathBuf],
    request: &Request,
    client_for: impl Fn(&Server) -> Client,
) {
    for capture in captures {
        let expected = conformance::expected_for(capture);
        let (status, content_type) = conformance::expected_http(&expected);
        let mut reply = Reply::body(status, &content_type, std::fs::read(capture).unwrap());
        if expected["http"]["content-encoding"] == "gzip" {
            reply = reply.gzip();
        }
        let server = Server::start(vec![reply]);
        let err = client_for(&server)
            .with_retry_policy(RetryPolicy::none())
            .complete(request)
            .expect_err("an error status");
        conformance::assert_error(capture, "http error", &err);
    }
}
