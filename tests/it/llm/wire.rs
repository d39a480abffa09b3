//! What every HTTP wire format must do against a real loopback server, run for Anthropic
//! Messages, OpenAI Responses, Chat Completions and Gemini: cancel within 50 ms, retries on 429/5xx
//! honouring `retry-after`, no retry on 401/400, the stall timeout, context-length errors,
//! mid-stream error events, reasoning-only answers cut by the length limit, and no key in
//! any error or `Debug` text.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::ErrorKind;
use agentloop::llm::{
    Client, FinishKind, HttpOptions, Message, Provider, Request, RetryPolicy, StreamEvent,
};

use support::cancel::{
    after_events, assert_aborted, cancel_after_the_first_text_delta,
    cancel_while_waiting_for_headers,
};
use support::providers::{self, GEMINI_KEY, OPENAI_KEY};
use support::{self, Reply, Server, conformance};

/// One wire format under test.
pub struct Format {
    pub name: &'static str,
    /// A provider pointed at a server, with these HTTP options.
    pub provider: fn(&Server, HttpOptions) -> Arc<dyn Provider>,
    /// A capture that answers with text, the text, and how many of its SSE events it takes
    /// to deliver the first text delta.
    pub ok_capture: &'static str,
    pub ok_text: &'static str,
    pub events_to_first_delta: usize,
    pub unauthorized: &'static str,
    pub bad_request: &'static str,
    pub rate_limited: &'static str,
    pub server_error: &'static str,
    pub context_length: &'static str,
    /// A 200 stream that delivers content, then reports an error in-stream.
    pub midstream_error: &'static str,
    /// A 200 stream with reasoning only, cut by the output-token limit.
    pub reasoning_then_length: &'static str,
    pub reasoning_text: &'static str,
}

const ANTHROPIC_401: &str =
    r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
const ANTHROPIC_400: &str = r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: field required"}}"#;
const ANTHROPIC_429: &str = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
const ANTHROPIC_500: &str =
    r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#;
const OPENAI_401: &str = r#"{
  "error": {
    "message": "Incorrect API key provided: sk-proj-FAKEKEY0123456789abcdefghij.",
    "type": "invalid_request_error",
    "param": null,
    "code": "invalid_api_key"
  }
}"#;
const OPENAI_400: &str = r#"{"error":{"message":"Unsupported parameter: 'foo'.","type":"invalid_request_error","param":"foo","code":"unsupported_parameter"}}"#;
const OPENAI_429: &str = r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
const OPENAI_500: &str = r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}"#;
const GEMINI_401: &str = r#"{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}"#;
const GEMINI_400: &str = r#"{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \"foo\".","status":"INVALID_ARGUMENT"}}"#;
const GEMINI_429: &str = r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#;
const GEMINI_503: &str = r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#;

pub fn formats() -> Vec<Format> {
    vec![
        Format {
            name: "anthropic",
            provider: |server, http| Arc::new(support::anthropic(server).with_http_options(http)),
            ok_capture: "anthropic/text_basic.sse",
            ok_text: "4200 + 42 = 4242",
            events_to_first_delta: 3,
            unauthorized: ANTHROPIC_401,
            bad_request: ANTHROPIC_400,
            rate_limited: ANTHROPIC_429,
            server_error: ANTHROPIC_500,
            context_length: r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215000 tokens > 200000 maximum"}}"#,
            midstream_error: concat!(
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-test\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n",
                "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Partial\"}}\n\n",
                "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}\n\n",
            ),
            reasoning_then_length: concat!(
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-test\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n",
                "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Counting primes\"}}\n\n",
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQBCkYIBxgC\"}}\n\n",
                "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
                "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":50,\"output_tokens_details\":{\"thinking_tokens\":50}}}\n\n",
                "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            ),
            reasoning_text: "Counting primes",
        },
        Format {
            name: "openai-responses",
            provider: |server, http| Arc::new(providers::openai(server).with_http_options(http)),
            ok_capture: "openai-responses/text_basic.sse",
            ok_text: "4200 + 42 equals 4242.",
            events_to_first_delta: 5,
            unauthorized: OPENAI_401,
            bad_request: OPENAI_400,
            rate_limited: OPENAI_429,
            server_error: OPENAI_500,
            context_length: r#"{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#,
            midstream_error: concat!(
                "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-test\",\"status\":\"in_progress\"}}\n\n",
                "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"content\":[]}}\n\n",
                "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"delta\":\"Partial\"}\n\n",
                "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"The server had an error while processing your request.\",\"param\":null}\n\n",
                "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":\"resp_1\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"The server had an error\"}}}\n\n",
            ),
            reasoning_then_length: concat!(
                "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_2\",\"model\":\"gpt-5-test\",\"status\":\"in_progress\"}}\n\n",
                "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"rs_1\",\"type\":\"reasoning\",\"summary\":[]}}\n\n",
                "event: response.reasoning_summary_part.added\ndata: {\"type\":\"response.reasoning_summary_part.added\",\"item_id\":\"rs_1\",\"summary_index\":0,\"part\":{\"type\":\"summary_text\",\"text\":\"\"}}\n\n",
                "event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"item_id\":\"rs_1\",\"summary_index\":0,\"delta\":\"Counting primes\"}\n\n",
                "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"rs_1\",\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"Counting primes\"}],\"encrypted_content\":\"gAAAAB-enc\"}}\n\n",
                "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"id\":\"resp_2\",\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"usage\":{\"input_tokens\":12,\"output_tokens\":50,\"output_tokens_details\":{\"reasoning_tokens\":50},\"total_tokens\":62}}}\n\n",
            ),
            reasoning_text: "Counting primes",
        },
        Format {
            name: "openai-chat",
            provider: |server, http| {
                Arc::new(providers::openai_chat(server).with_http_options(http))
            },
            ok_capture: "openai-chat/text_with_usage.sse",
            ok_text: "4200 + 42 equals 4242.",
            events_to_first_delta: 2,
            unauthorized: OPENAI_401,
            bad_request: OPENAI_400,
            rate_limited: OPENAI_429,
            server_error: OPENAI_500,
            context_length: r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130201 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            midstream_error: concat!(
                "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Partial\"},\"finish_reason\":null}]}\n\n",
                "event: error\ndata: {\"error\":{\"message\":\"Service Unavailable\",\"type\":\"internal_server_error\",\"code\":\"service_unavailable\"}}\n\n",
            ),
            reasoning_then_length: concat!(
                "data: {\"id\":\"c2\",\"model\":\"deepseek-reasoner\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"Counting\"},\"finish_reason\":null}]}\n\n",
                "data: {\"id\":\"c2\",\"model\":\"deepseek-reasoner\",\"choices\":[{\"index\":0,\"delta\":{\"content\":null,\"reasoning_content\":\" primes\"},\"finish_reason\":null}]}\n\n",
                "data: {\"id\":\"c2\",\"model\":\"deepseek-reasoner\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\",\"reasoning_content\":null},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":50,\"total_tokens\":62,\"completion_tokens_details\":{\"reasoning_tokens\":50}}}\n\n",
                "data: [DONE]\n\n",
            ),
            reasoning_text: "Counting primes",
        },
        Format {
            name: "gemini",
            provider: |server, http| Arc::new(providers::gemini(server).with_http_options(http)),
            ok_capture: "gemini/text_basic.sse",
            ok_text: "To find the sum of 4200 + 42, we can align the numbers by their place values:\n\n  4200\n+   42\n------\n  4242\n\nSo, 4200 + 42 = **4242**.",
            events_to_first_delta: 1,
            unauthorized: GEMINI_401,
            bad_request: GEMINI_400,
            rate_limited: GEMINI_429,
            server_error: GEMINI_503,
            context_length: r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#,
            midstream_error: concat!(
                "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Partial\"}],\"role\": \"model\"},\"index\": 0}],\"responseId\": \"r1\"}\r\n\r\n",
                "data: {\"error\": {\"code\": 500,\"message\": \"An internal error has occurred.\",\"status\": \"INTERNAL\"}}\r\n\r\n",
            ),
            reasoning_then_length: concat!(
                "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Counting primes\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 12,\"totalTokenCount\": 40,\"thoughtsTokenCount\": 28}}\r\n\r\n",
                "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],\"role\": \"model\"},\"finishReason\": \"MAX_TOKENS\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 12,\"totalTokenCount\": 62,\"thoughtsTokenCount\": 50}}\r\n\r\n",
            ),
            reasoning_text: "Counting primes",
        },
    ]
}

pub fn request() -> Request {
    Request::new("test-model", vec![Message::user("hello")])
}

/// A client for `format` at `server` with fast retries.
pub fn client(format: &Format, server: &Server) -> Client {
    client_with(format, server, support::http_options())
}

pub fn client_with(format: &Format, server: &Server, http: HttpOptions) -> Client {
    let mut client = Client::new().with_retry_policy(support::fast_retries());
    client.register((format.provider)(server, http));
    client
}

pub fn capture(relative: &str) -> PathBuf {
    conformance::dir().join(relative)
}

#[test]
fn cancel_while_waiting_for_headers_aborts_the_request_for_every_format() {
    for format in formats() {
        let server = Server::start(vec![Reply::stall()]);
        let ended = cancel_while_waiting_for_headers(&server, client(&format, &server), request());
        assert_aborted(format.name, ended, &server);
        assert_eq!(server.requests().len(), 1, "{}: not retried", format.name);
    }
}

#[test]
fn cancel_mid_body_aborts_the_stream_for_every_format() {
    for format in formats() {
        let body = std::fs::read(capture(format.ok_capture)).unwrap();
        let cut = after_events(&body, format.events_to_first_delta);
        let server = Server::start(vec![Reply::sse(body[..cut].to_vec()).then_stall()]);
        let ended = cancel_after_the_first_text_delta(client(&format, &server), request());
        assert_aborted(format.name, ended, &server);
    }
}

#[test]
fn rate_limits_with_retry_after_are_retried_after_the_delay_for_every_format() {
    for format in formats() {
        let server = Server::start(vec![
            Reply::json(429, format.rate_limited).header("retry-after", "1"),
            Reply::sse_file(capture(format.ok_capture)),
        ]);
        let response = client(&format, &server).complete(&request()).unwrap();
        assert_eq!(response.text(), format.ok_text, "{}", format.name);
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "{}: one retry", format.name);
        let waited = requests[1].at - requests[0].at;
        assert!(
            waited >= Duration::from_secs(1),
            "{}: retried after {waited:?}",
            format.name
        );
    }
}

#[test]
fn server_errors_are_retried_with_backoff_for_every_format() {
    for format in formats() {
        let server = Server::start(vec![
            Reply::json(500, format.server_error),
            Reply::json(503, format.server_error),
            Reply::sse_file(capture(format.ok_capture)),
        ]);
        let policy = RetryPolicy::default()
            .with_base_delay(Duration::from_millis(50))
            .with_backoff_multiplier(2.0)
            .with_jitter(false);
        let client = client(&format, &server).with_retry_policy(policy);
        let response = client.complete(&request()).unwrap();
        assert_eq!(response.text(), format.ok_text, "{}", format.name);
        let requests = server.requests();
        assert_eq!(requests.len(), 3, "{}", format.name);
        assert!(
            requests[1].at - requests[0].at >= Duration::from_millis(50),
            "{}",
            format.name
        );
        assert!(
            requests[2].at - requests[1].at >= Duration::from_millis(100),
            "{}",
            format.name
        );
    }
}

#[test]
fn unauthorized_and_bad_request_are_not_retried_for_every_format() {
    for format in formats() {
        for (status, body, kind) in [
            (401, format.unauthorized, ErrorKind::Authentication),
            (400, format.bad_request, ErrorKind::InvalidRequest),
        ] {
            let server = Server::start(vec![
                Reply::json(status, body),
                Reply::sse_file(capture(format.ok_capture)),
            ]);
            let err = client(&format, &server).complete(&request()).unwrap_err();
            assert_eq!(err.kind(), kind, "{} {status}: {err:?}", format.name);
            assert_eq!(err.status(), Some(status));
            assert!(!err.is_retryable());
            assert_eq!(
                server.requests().len(),
                1,
                "{} {status} was retried",
                format.name
            );
        }
    }
}

#[test]
fn a_stream_silent_longer_than_the_stall_timeout_is_a_timeout_for_every_format() {
    for format in formats() {
        let body = std::fs::read(capture(format.ok_capture)).unwrap();
        let cut = after_events(&body, format.events_to_first_delta);
        let server = Server::start(vec![Reply::sse(body[..cut].to_vec()).then_stall()]);
        let stall = Duration::from_millis(300);
        let client = client_with(
            &format,
            &server,
            support::http_options().with_stall_timeout(stall),
        );
        let started = Instant::now();
        let items: Vec<_> = client.stream(&request()).unwrap().collect();
        let elapsed = started.elapsed();
        let err = items.last().unwrap().as_ref().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout, "{}: {err:?}", format.name);
        assert!(
            items
                .iter()
                .any(|i| matches!(i, Ok(StreamEvent::TextDelta { .. })))
        );
        assert!(
            elapsed >= stall - Duration::from_millis(50),
            "{}: {elapsed:?}",
            format.name
        );
        assert_eq!(
            server.requests().len(),
            1,
            "{}: timeouts are not retried",
            format.name
        );
    }
}

#[test]
fn context_length_errors_are_classified_as_such_for_every_format() {
    for format in formats() {
        let server = Server::start(vec![Reply::json(400, format.context_length)]);
        let err = client(&format, &server).complete(&request()).unwrap_err();
        assert_eq!(
            err.kind(),
            ErrorKind::ContextLength,
            "{}: {err:?}",
            format.name
        );
        assert!(!err.is_retryable());
        assert_eq!(server.requests().len(), 1, "{}", format.name);
    }
}

#[test]
fn a_mid_stream_error_event_is_an_error_and_not_a_finish_for_every_format() {
    for format in formats() {
        let server = Server::start(vec![
            Reply::sse(format.midstream_error),
            Reply::sse_file(capture(format.ok_capture)),
        ]);
        let items: Vec<_> = client(&format, &server)
            .stream(&request())
            .unwrap()
            .collect();
        let (text, finished) = items
            .iter()
            .fold((String::new(), false), |(mut t, f), i| match i {
                Ok(StreamEvent::TextDelta { delta, .. }) => {
                    t.push_str(delta);
                    (t, f)
                }
                Ok(StreamEvent::Finish { .. }) => (t, true),
                _ => (t, f),
            });
        assert_eq!(text, "Partial", "{}", format.name);
        assert!(
            !finished,
            "{}: an error stream must not finish normally",
            format.name
        );
        let err = items.last().unwrap().as_ref().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Server, "{}: {err:?}", format.name);
        assert_eq!(
            server.requests().len(),
            1,
            "{}: no retry after content",
            format.name
        );
        // complete() reports the same error instead of a response.
        let server = Server::start(vec![Reply::sse(format.midstream_error)]);
        let err = client(&format, &server)
            .with_retry_policy(RetryPolicy::none())
            .complete(&request())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Server, "{}", format.name);
    }
}

#[test]
fn a_reasoning_only_answer_cut_by_the_length_limit_is_a_length_finish_for_every_format() {
    for format in formats() {
        let server = Server::start(vec![Reply::sse(format.reasoning_then_length).chunk(7)]);
        let response = client(&format, &server).complete(&request()).unwrap();
        assert_eq!(response.text(), "", "{}", format.name);
        assert_eq!(
            response.reasoning().as_deref(),
            Some(format.reasoning_text),
            "{}",
            format.name
        );
        assert_eq!(
            response.finish_reason.reason,
            FinishKind::Length,
            "{}",
            format.name
        );
        assert_eq!(response.usage.reasoning_tokens, Some(50), "{}", format.name);
        assert!(response.tool_calls().is_empty());
    }
}

#[test]
fn the_recorded_reasoning_model_stream_with_no_visible_text_finishes_with_length() {
    let path = capture("openai-chat/length_reasoning_model.sse");
    let formats = formats();
    let format = formats.iter().find(|f| f.name == "openai-chat").unwrap();
    let server = Server::start(vec![Reply::sse_file(&path)]);
    let response = client(format, &server).complete(&request()).unwrap();
    assert_eq!(response.text(), "");
    assert_eq!(response.finish_reason.reason, FinishKind::Length);
    assert_eq!(response.usage.reasoning_tokens, Some(50));
    conformance::assert_response(&path, "served", &response);
}

#[test]
fn keys_never_appear_in_errors_or_debug_output_for_every_format() {
    for format in formats() {
        let key = match format.name {
            "gemini" => GEMINI_KEY,
            "anthropic" => support::FAKE_KEY,
            _ => OPENAI_KEY,
        };
        // A server that echoes the key back in its error body.
        let echo = format!(
            r#"{{"error":{{"message":"bad key {key}","type":"invalid_request_error","status":"UNAUTHENTICATED"}}}}"#
        );
        let server = Server::start(vec![Reply::json(401, echo)]);
        let provider = (format.provider)(&server, support::http_options());
        let client = {
            let mut c = Client::new().with_retry_policy(RetryPolicy::none());
            c.register(provider.clone());
            c
        };
        let err = client.complete(&request()).unwrap_err();
        let shown = format!("{err} {err:?} {:?} {client:?}", err.body_excerpt());
        assert!(!shown.contains(key), "{}: {shown}", format.name);
        assert!(
            shown.contains("[REDACTED]"),
            "{}: the echo was scrubbed: {shown}",
            format.name
        );
        // The key did travel, in its header and nowhere in the URL.
        let sent = &server.requests()[0];
        assert!(!sent.path.contains(key), "{}", format.name);
        let header = sent
            .header("authorization")
            .or(sent.header("x-goog-api-key"))
            .or(sent.header("x-api-key"))
            .unwrap();
        assert!(header.contains(key), "{}", format.name);
    }
}

#[test]
fn echoed_keys_of_no_known_shape_are_redacted_for_every_format() {
    // Keys like Groq's `gsk_…` or a plain random string escape the generic secret pattern:
    // each provider removes its own key from error bodies, whatever its shape.
    let key = "plainkey0123456789ABCDEFGHIJKLMN";
    let echo = format!(
        r#"{{"error":{{"message":"Invalid API Key: {key}","type":"invalid_request_error","status":"UNAUTHENTICATED"}}}}"#
    );
    let server = Server::start(vec![Reply::json(401, echo.clone()); 4]);
    let options = support::http_options();
    let providers: Vec<Arc<dyn agentloop::llm::Provider>> = vec![
        Arc::new(
            agentloop::llm::anthropic::Anthropic::new(key)
                .with_base_url(server.url())
                .with_http_options(options.clone()),
        ),
        Arc::new(
            agentloop::llm::openai::OpenAi::new(key)
                .with_base_url(format!("{}/v1", server.url()))
                .with_http_options(options.clone()),
        ),
        Arc::new(
            agentloop::llm::openai_chat::OpenAiChat::compatible(format!("{}/v1", server.url()))
                .with_api_key(key)
                .with_http_options(options.clone()),
        ),
        Arc::new(
            agentloop::llm::gemini::Gemini::new(key)
                .with_base_url(server.url())
                .with_http_options(options),
        ),
    ];
    for provider in providers {
        let id = provider.id().to_string();
        let mut client = Client::new().with_retry_policy(RetryPolicy::none());
        client.register(provider);
        let err = client.complete(&request()).unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(key), "{id}: {shown}");
        assert!(shown.contains("[REDACTED]"), "{id}: {shown}");
    }
}

#[test]
fn in_stream_error_events_that_echo_a_key_of_no_known_shape_are_redacted() {
    let key = "plainkey0123456789ABCDEFGHIJKLMN";
    let chat = format!(
        "data: {{\"id\":\"c1\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"hi\"}}}}]}}\n\n\
         data: {{\"error\":{{\"message\":\"upstream rejected key {key}\",\"type\":\"server_error\"}}}}\n\n"
    );
    let gemini = format!(
        "data: {{\"candidates\":[{{\"content\":{{\"role\":\"model\",\"parts\":[{{\"text\":\"hi\"}}]}}}}]}}\r\n\r\n\
         data: {{\"error\":{{\"code\":500,\"message\":\"upstream rejected key {key}\",\"status\":\"INTERNAL\"}}}}\r\n\r\n"
    );
    let responses = format!(
        "event: response.created\ndata: {{\"type\":\"response.created\",\"response\":{{\"id\":\"resp_1\",\"model\":\"m\",\"status\":\"in_progress\"}}}}\n\n\
         event: error\ndata: {{\"type\":\"error\",\"code\":\"server_error\",\"message\":\"upstream rejected key {key}\"}}\n\n"
    );
    let anthropic = format!(
        "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{{\"input_tokens\":1,\"output_tokens\":1}}}}}}\n\n\
         event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"api_error\",\"message\":\"upstream rejected key {key}\"}}}}\n\n"
    );
    let server = Server::start(vec![
        Reply::sse(anthropic),
        Reply::sse(chat),
        Reply::sse(gemini),
        Reply::sse(responses),
    ]);
    let options = support::http_options();
    let providers: Vec<Arc<dyn Provider>> = vec![
        Arc::new(
            agentloop::llm::anthropic::Anthropic::new(key)
                .with_base_url(server.url())
                .with_http_options(options.clone()),
        ),
        Arc::new(
            agentloop::llm::openai_chat::OpenAiChat::compatible(format!("{}/v1", server.url()))
                .with_api_key(key)
                .with_http_options(options.clone()),
        ),
        Arc::new(
            agentloop::llm::gemini::Gemini::new(key)
                .with_base_url(server.url())
                .with_http_options(options.clone()),
        ),
        Arc::new(
            agentloop::llm::openai::OpenAi::new(key)
                .with_base_url(format!("{}/v1", server.url()))
                .with_http_options(options),
        ),
    ];
    for provider in providers {
        let id = provider.id().to_string();
        let mut client = Client::new().with_retry_policy(RetryPolicy::none());
        client.register(provider);
        let err = client.complete(&request()).unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(shown.contains("upstream rejected key"), "{id}: {shown}");
        assert!(!shown.contains(key), "{id}: {shown}");
    }
}

#[test]
fn from_vars_registers_every_configured_wire_format_pointed_at_its_base_url() {
    let openai = Server::start(vec![Reply::sse_file(capture(
        "openai-responses/text_basic.sse",
    ))]);
    let gemini = Server::start(vec![Reply::sse_file(capture("gemini/text_basic.sse"))]);
    let local = Server::start(vec![Reply::sse_file(capture(
        "openai-chat/text_with_usage.sse",
    ))]);
    let vars = [
        ("OPENAI_API_KEY", OPENAI_KEY.to_string()),
        ("OPENAI_BASE_URL", format!("{}/v1", openai.url())),
        ("GOOGLE_API_KEY", GEMINI_KEY.to_string()),
        ("GOOGLE_GEMINI_BASE_URL", gemini.url()),
        ("OPENAI_COMPATIBLE_BASE_URL", format!("{}/v1", local.url())),
        ("OPENAI_COMPATIBLE_ID", "ollama".to_string()),
    ];
    let client = Client::from_vars(|name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    })
    .unwrap()
    .with_retry_policy(RetryPolicy::none());
    assert_eq!(client.provider_ids(), ["gemini", "ollama", "openai"]);
    let shown = format!("{client:?}");
    assert!(
        !shown.contains(OPENAI_KEY) && !shown.contains(GEMINI_KEY),
        "{shown}"
    );
    // The default is the first found: OpenAI (no Anthropic key here).
    assert_eq!(client.complete(&request()).unwrap().provider, "openai");
    for (id, server, path) in [
        (
            "gemini",
            &gemini,
            "/v1beta/models/test-model:streamGenerateContent?alt=sse",
        ),
        ("ollama", &local, "/v1/chat/completions"),
    ] {
        let mut routed = request();
        routed.provider = Some(id.to_string());
        assert_eq!(client.complete(&routed).unwrap().provider, id);
        assert_eq!(server.requests()[0].path, path);
    }
    assert_eq!(openai.requests()[0].path, "/v1/responses");
    assert_eq!(
        local.requests()[0].header("authorization"),
        None,
        "no key was configured"
    );
}

#[test]
fn from_vars_without_any_provider_is_a_configuration_error_naming_the_variables() {
    let err = Client::from_vars(|_| None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Configuration);
    for name in [
        "OPENAI_API_KEY",
        "GEMINI_API_KEY",
        "OPENAI_COMPATIBLE_BASE_URL",
    ] {
        assert!(err.message().contains(name), "{}", err.message());
    }
}
