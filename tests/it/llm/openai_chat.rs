//! The Chat Completions format against recorded streams (OpenAI, Ollama, llama.cpp,
//! DeepSeek, OpenRouter, Groq) and a loopback server.

use agentloop::ErrorKind;
use agentloop::llm::openai_chat::OpenAiChat;
use agentloop::llm::{Client, Message, Request, RetryPolicy};
use agentloop::unstable::decode_openai_chat_stream as decode_stream;

use crate::llm::wire;
use support::providers;
use support::{self, Reply, Server, conformance, served};

fn client(server: &Server) -> Client {
    support::client_for(providers::openai_chat(server))
}

#[test]
fn every_chat_capture_decodes_to_its_expected_result_whole_and_byte_by_byte() {
    let captures = conformance::sse_files("openai-chat");
    assert_eq!(captures.len(), 9, "captures: {captures:?}");
    served::assert_captures_live_and_offline(&captures, &wire::request(), client, decode_stream);
}

#[test]
fn every_chat_server_error_body_maps_to_its_expected_kind_and_retryability() {
    let mut captures = conformance::error_files("openai_chat_");
    captures.extend(conformance::error_files("llamacpp_"));
    captures.extend(conformance::error_files("openrouter_"));
    assert_eq!(captures.len(), 3, "captures: {captures:?}");
    served::assert_served_errors(&captures, &wire::request(), client);
}

#[test]
fn a_local_server_gets_no_authorization_header() {
    let capture = wire::capture("openai-chat/ollama_tool_call.sse");
    let server = Server::start(vec![Reply::sse_file(&capture)]);
    let ollama = OpenAiChat::compatible(format!("{}/v1", server.url()))
        .with_id("ollama")
        .with_http_options(support::http_options());
    assert!(ollama.is_local());
    let response = support::client_for(ollama)
        .complete(&wire::request())
        .unwrap();
    assert_eq!(response.provider, "ollama");
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.json()["stream_options"]["include_usage"], true);
}

#[test]
fn several_compatible_servers_are_told_apart_by_id() {
    let a = Server::start(vec![Reply::sse_file(wire::capture(
        "openai-chat/text_with_usage.sse",
    ))]);
    let b = Server::start(vec![Reply::sse_file(wire::capture(
        "openai-chat/deepseek_reasoning_content.sse",
    ))]);
    let client = Client::new()
        .with_provider(
            OpenAiChat::compatible(format!("{}/v1", a.url()))
                .with_id("local-a")
                .with_http_options(support::http_options()),
        )
        .with_provider(
            OpenAiChat::compatible(format!("{}/v1", b.url()))
                .with_id("deepseek")
                .with_api_key("sk-deepseek-FAKEKEY0123456789")
                .with_http_options(support::http_options()),
        );
    let mut request = Request::new("deepseek-reasoner", vec![Message::user("Hello")]);
    request.provider = Some("deepseek".into());
    let response = client.complete(&request).unwrap();
    assert_eq!(response.provider, "deepseek");
    assert!(
        response
            .reasoning()
            .unwrap()
            .starts_with("Hmm, the user just said")
    );
    assert_eq!(a.requests().len(), 0);
    assert_eq!(b.requests().len(), 1);
}

#[test]
fn every_chat_capture_decodes_to_its_expected_result_whole_split_and_bytewise() {
    for capture in conformance::sse_files("openai-chat") {
        let decoded = conformance::replay(&capture, decode_stream);
        // Before an in-stream error, the reasoning already streamed is what was recorded.
        let expected = conformance::expected_for(&capture);
        if let (Err(_), Some(reasoning)) = (&decoded, expected["reasoning"].as_str()) {
            let server = Server::start(vec![Reply::sse_file(&capture)]);
            let events: Vec<_> = client(&server)
                .with_retry_policy(RetryPolicy::none())
                .stream(&wire::request())
                .unwrap()
                .map_while(Result::ok)
                .collect();
            let (text, streamed) = conformance::streamed_text_and_reasoning(&events);
            let name = capture.display();
            assert_eq!(streamed, reasoning, "{name}: reasoning before the error");
            assert_eq!(
                text,
                expected["text"].as_str().unwrap(),
                "{name}: text before the error"
            );
        }
    }
}

#[test]
fn error_bodies_of_chat_servers_classify_as_recorded() {
    let captures = conformance::error_files_recorded_from(|from| {
        from == "openai-chat" || from.contains("openai-chat compatible")
    });
    assert_eq!(captures.len(), 3, "captures: {captures:?}");
    served::assert_served_errors(&captures, &wire::request(), client);
}

#[test]
fn llama_cpp_context_overflow_is_a_context_length_error() {
    let body = std::fs::read(wire::capture(
        "errors/llamacpp_400_exceed_context_size.json",
    ));
    let server = Server::start(vec![Reply::json(400, body.unwrap())]);
    let err = client(&server)
        .with_retry_policy(RetryPolicy::none())
        .complete(&wire::request())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContextLength);
}
