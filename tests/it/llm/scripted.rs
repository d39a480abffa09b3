//! The scripted model behaves like a streaming provider and honours cancellation.

use std::time::{Duration, Instant};

use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{
    Client, ContentPart, FinishKind, FinishReason, Message, Provider, Request, StreamEvent, Usage,
};
use agentloop::{CancelToken, Error, ErrorKind};
use serde_json::json;

use support::GENEROUS;

fn request(text: &str) -> Request {
    Request::new("m", vec![Message::user(text)])
}

#[test]
fn scripted_text_streams_as_deltas_and_accumulates_in_finish() {
    let model = ScriptedModel::new(vec![ScriptedTurn::text("Hello, streaming world!")]);
    let client = Client::new().with_provider(model.clone());
    let events: Vec<StreamEvent> = client
        .stream(&request("hi"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        deltas.len() > 1,
        "text arrives in several deltas: {deltas:?}"
    );
    assert_eq!(deltas.concat(), "Hello, streaming world!");
    assert!(matches!(events[0], StreamEvent::StreamStart { .. }));
    let Some(StreamEvent::Finish { response, .. }) = events.last() else {
        panic!("finish is last: {events:?}")
    };
    assert_eq!(response.text(), "Hello, streaming world!");
    assert_eq!(response.finish_reason.reason, FinishKind::Stop);
}

#[test]
fn scripted_tool_calls_get_distinct_ids_and_a_tool_calls_finish() {
    let model = ScriptedModel::new(vec![
        ScriptedTurn::text("two calls")
            .with_tool_call("a", json!({"x": 1}))
            .with_tool_call("b", json!({"y": 2})),
    ]);
    let client = Client::new().with_provider(model);
    let response = client.complete(&request("go")).unwrap();
    let calls = response.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0].id, calls[1].id);
    assert_eq!(calls[0].name, "a");
    assert_eq!(calls[1].arguments, json!({"y": 2}));
    assert_eq!(response.finish_reason.reason, FinishKind::ToolCalls);
}

#[test]
fn scripted_model_records_every_request_in_order() {
    let model = ScriptedModel::new(vec![ScriptedTurn::text("1"), ScriptedTurn::text("2")]);
    let client = Client::new().with_provider(model.clone());
    client.complete(&request("first")).unwrap();
    client.complete(&request("second")).unwrap();
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].messages[0].text(), "first");
    assert_eq!(requests[1].messages[0].text(), "second");
    assert_eq!(model.remaining_turns(), 0);
}

#[test]
fn scripted_reasoning_usage_and_finish_are_reported_as_given() {
    let usage = Usage {
        input_tokens: 7,
        output_tokens: 3,
        total_tokens: 10,
        ..Usage::default()
    };
    let finish = FinishReason::new(FinishKind::Length, Some("max_tokens".into()));
    let model = ScriptedModel::new(vec![
        ScriptedTurn::text("partial")
            .with_reasoning("thinking hard")
            .with_usage(usage)
            .with_finish(finish.clone()),
    ]);
    let response = Client::new()
        .with_provider(model)
        .complete(&request("x"))
        .unwrap();
    assert_eq!(response.usage, usage);
    assert_eq!(response.finish_reason, finish);
    assert_eq!(response.reasoning().as_deref(), Some("thinking hard"));
    let ContentPart::Thinking(thinking) = &response.message.content[0] else {
        panic!("reasoning comes first with a signature")
    };
    assert!(thinking.signature.is_some());
}

#[test]
fn scripted_error_fails_the_request_with_that_error() {
    let model = ScriptedModel::new(vec![ScriptedTurn::error(
        Error::new(ErrorKind::Authentication, "bad key").with_status(401),
    )]);
    let err = Client::new()
        .with_provider(model)
        .complete(&request("x"))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Authentication);
    assert_eq!(err.status(), Some(401));
}

#[test]
fn scripted_model_without_turns_left_says_so() {
    let model = ScriptedModel::new(vec![]);
    let err = Client::new()
        .with_provider(model)
        .complete(&request("x"))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Configuration);
    assert!(err.message().contains("no more turns"), "{err}");
}

#[test]
fn scripted_stall_returns_aborted_promptly_when_cancelled() {
    let model = ScriptedModel::new(vec![ScriptedTurn::text("so far").then_stall()]);
    let cancel = CancelToken::new();
    let mut stream = model.open(&request("x"), &cancel).unwrap();
    // Everything before the stall arrives.
    let mut seen_text = String::new();
    loop {
        match stream.next().unwrap().unwrap() {
            StreamEvent::TextEnd { .. } => break,
            StreamEvent::TextDelta { delta, .. } => seen_text.push_str(&delta),
            _ => {}
        }
    }
    assert_eq!(seen_text, "so far");
    let canceller = {
        let cancel = cancel.clone();
        std::thread::Builder::new()
            .name("test-canceller".into())
            .spawn(move || cancel.cancel())
            .unwrap()
    };
    let started = Instant::now();
    let err = stream.next().unwrap().unwrap_err();
    canceller.join().unwrap();
    assert_eq!(err.kind(), ErrorKind::Aborted);
    assert!(started.elapsed() < GENEROUS);
    assert!(stream.next().is_none(), "the stream ends after the error");
}

#[test]
fn scripted_delay_is_cut_short_by_cancellation() {
    let model = ScriptedModel::new(vec![
        ScriptedTurn::text("slow").with_delay(Duration::from_secs(60)),
    ]);
    let cancel = CancelToken::new();
    let mut stream = model.open(&request("x"), &cancel).unwrap();
    cancel.cancel();
    let err = stream.next().unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Aborted);
}

#[test]
fn scripted_mid_stream_failure_follows_the_parts() {
    let model = ScriptedModel::new(vec![
        ScriptedTurn::text("half").then_fail(Error::new(ErrorKind::Network, "connection reset")),
    ]);
    let items: Vec<_> = Client::new()
        .with_provider(model)
        .stream(&request("x"))
        .unwrap()
        .collect();
    let last = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(last.kind(), ErrorKind::Network);
    assert!(
        items
            .iter()
            .any(|e| matches!(e, Ok(StreamEvent::TextDelta { .. })))
    );
    assert!(
        !items
            .iter()
            .any(|e| matches!(e, Ok(StreamEvent::Finish { .. })))
    );
}

#[test]
fn dynamic_script_sees_each_request() {
    let model = ScriptedModel::dynamic(|request| {
        ScriptedTurn::text(format!("you sent {} messages", request.messages.len()))
    });
    let client = Client::new().with_provider(model);
    let two = Request::new("m", vec![Message::user("a"), Message::user("b")]);
    assert_eq!(client.complete(&two).unwrap().text(), "you sent 2 messages");
}

#[test]
fn with_id_routes_requests_under_the_new_provider_id() {
    let model = ScriptedModel::new(vec![ScriptedTurn::text("ok")]).with_id("anthropic");
    assert_eq!(model.id(), "anthropic");
    let client = Client::new().with_provider(model.clone());
    let mut req = request("x");
    req.provider = Some("anthropic".into());
    assert_eq!(client.complete(&req).unwrap().text(), "ok");
    assert_eq!(model.request_count(), 1);
}
