//! The core loop (spec §9.1): creation, the tool loop, natural completion, limits, loop
//! detection, sequential inputs, `run()`.

pub mod abort;
pub mod background;
pub mod blocked_tool;
pub mod budget;
pub mod cache;
pub mod errors;
pub mod events;
pub mod fallback;
pub mod hooks;
pub mod http;
pub mod modes;
pub mod shell;
pub mod steering;
pub mod structured;
pub mod subagents;
pub mod subagents_lifecycle;
pub mod tool_rounds;
pub mod tools;
pub mod trajectory;
pub mod transcript;
pub mod usage;

use std::sync::Arc;

use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Client, FinishKind, FinishReason, Role};
use agentloop::session::{
    CloseReason, EventKind, Session, SessionConfig, SessionState, StopReason, Turn,
};
use serde_json::json;

use support::GENEROUS;
use support::session::*;

#[test]
fn session_is_created_with_a_profile_and_an_environment() {
    let mut h = harness(vec![]);
    let first = h.events.recv_timeout(GENEROUS).unwrap();
    match &first.kind {
        EventKind::SessionStart { provider, model } => {
            assert_eq!(provider, "scripted");
            assert_eq!(model, "scripted-model");
        }
        other => panic!("SESSION_START comes first, got {other:?}"),
    }
    assert_eq!(first.session_id, h.session.id());
    assert_eq!(h.session.id().len(), 36);
    assert_eq!(h.session.state(), SessionState::Idle);
    assert!(h.session.history().is_empty());
}

#[test]
fn session_refuses_a_profile_whose_provider_is_not_registered() {
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let client = Client::new().with_provider(ScriptedModel::new(vec![]));
    let profile = agentloop::profiles::ProviderProfile::new("anthropic", "claude");
    let err = Session::new(profile, env, client, SessionConfig::default()).unwrap_err();
    assert_eq!(err.kind(), agentloop::ErrorKind::Configuration);
    assert!(err.message().contains("anthropic"), "{err}");
}

#[test]
fn input_runs_model_then_tools_until_a_text_only_answer() {
    let mut h = harness(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "from the tool"})),
        ScriptedTurn::text("The tool said: from the tool"),
    ]);
    h.session.submit("use the tool").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(
        names(&events),
        [
            "session_start",
            "user_input",
            "assistant_text_start",
            "assistant_text_end",
            "tool_call_start",
            "tool_call_end",
            "assistant_text_start",
            "assistant_text_delta",
            "assistant_text_delta",
            "assistant_text_delta",
            "assistant_text_end",
            "processing_end",
        ]
    );
    assert_eq!(stop_reason(&events), StopReason::Completed);
    // The second request carries the tool's result for the model.
    let requests = h.model.requests();
    assert_eq!(requests.len(), 2);
    let result_message = requests[1]
        .messages
        .iter()
        .find(|m| m.role == Role::Tool)
        .expect("a tool message");
    let call_id = requests[1].messages[2].tool_calls()[0].id.clone();
    assert_eq!(
        result_message.tool_call_id.as_deref(),
        Some(call_id.as_str())
    );
    let history = h.session.history();
    assert_eq!(history.len(), 4, "user, assistant, results, assistant");
    assert_eq!(history.check_tool_results(), Ok(()));
    assert_eq!(h.session.state(), SessionState::Idle);
}

#[test]
fn text_only_answer_ends_the_input_with_natural_completion() {
    let mut h = harness(vec![ScriptedTurn::text("Nothing to do.")]);
    h.session.submit("hello").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::Completed);
    assert_eq!(h.model.request_count(), 1);
    let end = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::AssistantTextEnd {
                text, tool_calls, ..
            } => Some((text.clone(), *tool_calls)),
            _ => None,
        })
        .unwrap();
    assert_eq!(end, ("Nothing to do.".to_string(), 0));
}

#[test]
fn length_limited_answer_without_tool_calls_ends_the_input_normally() {
    let mut h = harness(vec![
        ScriptedTurn::text("The answer is cut her").with_finish(FinishReason::new(
            FinishKind::Length,
            Some("max_tokens".into()),
        )),
    ]);
    let outcome = h.session.run("explain").unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Completed);
    assert_eq!(outcome.text, "The answer is cut her");
    assert!(outcome.error.is_none());
    let events = collect_input(&mut h.events);
    let finish = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::AssistantTextEnd { finish_reason, .. } => Some(finish_reason.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        finish.reason,
        FinishKind::Length,
        "ASSISTANT_TEXT_END says it was cut"
    );
}

#[test]
fn max_tool_rounds_per_input_stops_the_loop_when_reached() {
    let model = ScriptedModel::dynamic(|request| {
        ScriptedTurn::tool_call("echo", json!({"text": request.messages.len().to_string()}))
    });
    let config = SessionConfig::default().with_max_tool_rounds_per_input(3);
    let mut h = harness_with(model, profile(), config);
    h.session.submit("loop forever").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::RoundLimit);
    assert_eq!(h.model.request_count(), 3);
    let limit = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::TurnLimit { round, total_turns } => Some((*round, *total_turns)),
            _ => None,
        })
        .unwrap();
    assert_eq!(limit, (Some(3), None));
    assert!(position(&events, "turn_limit") < position(&events, "processing_end"));
    assert_eq!(h.session.history().check_tool_results(), Ok(()));
    // The limit is per input: the next input gets three rounds again.
    h.session.submit("again").unwrap();
    collect_input(&mut h.events);
    assert_eq!(h.model.request_count(), 6);
}

#[test]
fn max_turns_stops_the_loop_across_all_inputs() {
    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "1"})),
        ScriptedTurn::text("first input done"),
        ScriptedTurn::tool_call("echo", json!({"text": "2"})),
        ScriptedTurn::text("never reached"),
    ]);
    let config = SessionConfig::default().with_max_turns(3);
    let h = harness_with(model, profile(), config);

    let first = h.session.run("one").unwrap();
    assert_eq!(first.stop_reason, StopReason::Completed);
    let second = h.session.run("two").unwrap();
    assert_eq!(second.stop_reason, StopReason::TurnLimit);
    assert_eq!(h.model.request_count(), 3, "three model calls in total");
    let third = h.session.run("three").unwrap();
    assert_eq!(third.stop_reason, StopReason::TurnLimit);
    assert_eq!(h.model.request_count(), 3, "no call after the limit");
    assert_eq!(h.session.history().check_tool_results(), Ok(()));
}

#[test]
fn turn_limit_event_reports_the_session_turn_count() {
    let model = ScriptedModel::new(vec![ScriptedTurn::text("a"), ScriptedTurn::text("b")]);
    let mut h = harness_with(model, profile(), SessionConfig::default().with_max_turns(1));
    h.session.submit("one").unwrap();
    collect_input(&mut h.events);
    h.session.submit("two").unwrap();
    let events = collect_input(&mut h.events);
    let limit = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::TurnLimit { round, total_turns } => Some((*round, *total_turns)),
            _ => None,
        })
        .expect("TURN_LIMIT");
    assert_eq!(limit, (None, Some(1)));
}

#[test]
fn abort_stops_the_loop_cancels_the_running_tool_and_closes_the_session() {
    let model = ScriptedModel::new(vec![ScriptedTurn::tool_call("block", json!({}))]);
    let mut h = harness_with(
        model,
        profile().with_tool(blocking_tool("block")),
        SessionConfig::default(),
    );
    h.session.submit("block").unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallStart { .. })
    });
    h.session.abort();
    let events = collect_to_end(&mut h.events);
    let output = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolCallEnd { output, .. } => output.clone(),
            _ => None,
        })
        .expect("the tool's end event");
    assert_eq!(output, "stopped by cancellation", "the tool saw the cancel");
    assert_eq!(stop_reason(&events), StopReason::Aborted);
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::SessionEnd {
            final_state: SessionState::Closed,
            reason: CloseReason::Aborted,
            ..
        }
    ));
    assert_eq!(h.session.state(), SessionState::Closed);
    assert_eq!(h.env.cleanups.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(h.session.history().check_tool_results(), Ok(()));
    assert!(h.events.next().is_none(), "nothing follows SESSION_END");
    let err = h.session.submit("more").unwrap_err();
    assert_eq!(err.kind(), agentloop::ErrorKind::SessionClosed);
}

#[test]
fn repeating_tool_calls_trigger_a_loop_detection_warning_turn() {
    let mut turns: Vec<ScriptedTurn> = (0..4)
        .map(|_| ScriptedTurn::tool_call("echo", json!({"text": "same"})))
        .collect();
    turns.push(ScriptedTurn::text("I will try something else."));
    let config = SessionConfig::default().with_loop_detection_window(4);
    let mut h = harness_with(ScriptedModel::new(turns), profile(), config);
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let message = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::LoopDetection { message } => Some(message.clone()),
            _ => None,
        })
        .expect("LOOP_DETECTION");
    assert!(message.contains("Loop detected"), "{message}");
    assert_eq!(
        stop_reason(&events),
        StopReason::Completed,
        "a warning, not a halt"
    );
    let history = h.session.history();
    assert!(
        history
            .turns()
            .iter()
            .any(|t| matches!(t, Turn::Steering(s) if s.content == message))
    );
    // The model sees the warning as a user message on the next call.
    let last = h.model.requests().pop().unwrap();
    assert_eq!(user_texts(&last).last(), Some(&message));
}

#[test]
fn loop_detection_can_be_switched_off() {
    let mut turns: Vec<ScriptedTurn> = (0..4)
        .map(|_| ScriptedTurn::tool_call("echo", json!({"text": "same"})))
        .collect();
    turns.push(ScriptedTurn::text("done"));
    let config = SessionConfig::default()
        .with_loop_detection_window(4)
        .with_loop_detection(false);
    let mut h = harness_with(ScriptedModel::new(turns), profile(), config);
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    assert!(!names(&events).contains(&"loop_detection"));
}

#[test]
fn multiple_sequential_inputs_work() {
    let mut h = harness(vec![
        ScriptedTurn::text("first answer"),
        ScriptedTurn::tool_call("echo", json!({"text": "x"})),
        ScriptedTurn::text("second answer"),
    ]);
    h.session.submit("first").unwrap();
    let first = collect_input(&mut h.events);
    assert_eq!(stop_reason(&first), StopReason::Completed);
    assert_eq!(h.session.state(), SessionState::Idle);
    h.session.submit("second").unwrap();
    let second = collect_input(&mut h.events);
    assert_eq!(stop_reason(&second), StopReason::Completed);
    // The second input's request carries the whole conversation so far.
    let requests = h.model.requests();
    assert_eq!(
        user_texts(&requests[1]),
        ["first".to_string(), "second".to_string()]
    );
    assert_eq!(requests[1].messages[2].text(), "first answer");
}

#[test]
fn run_returns_text_stop_reason_rounds_and_summed_usage() {
    let h = harness(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "x"})).with_usage(usage(10, 1)),
        ScriptedTurn::text("final words").with_usage(usage(20, 2)),
    ]);
    let outcome = h.session.run("go").unwrap();
    assert_eq!(outcome.text, "final words");
    assert_eq!(outcome.stop_reason, StopReason::Completed);
    assert_eq!(outcome.rounds, 1);
    assert_eq!(outcome.inputs, 1);
    assert_eq!(outcome.usage.input_tokens, 30);
    assert_eq!(outcome.usage.output_tokens, 3);
}

fn usage(input: u64, output: u64) -> agentloop::llm::Usage {
    agentloop::llm::Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: input + output,
        ..Default::default()
    }
}

#[test]
fn run_without_an_event_iterator_does_not_accumulate_events() {
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let model = ScriptedModel::dynamic(|request| {
        if request
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .count()
            < 20
        {
            ScriptedTurn::tool_call("echo", json!({"text": "chatty"}))
        } else {
            ScriptedTurn::text("done")
        }
    });
    let client = Client::new().with_provider(model);
    let config = SessionConfig::default().with_loop_detection(false);
    let session = Session::new(profile(), env, client, config).unwrap();
    for _ in 0..3 {
        let outcome = session.run("work").unwrap();
        assert_eq!(outcome.stop_reason, StopReason::Completed);
    }
    // Nothing of those three inputs was kept: an iterator created now sees only what
    // follows.
    let mut events = session.events();
    assert!(events.try_next().is_none(), "no backlog");
    session.close();
    let rest = collect_to_end(&mut events);
    assert_eq!(names(&rest), ["session_end"]);
}

#[test]
fn run_with_an_event_iterator_leaves_every_event_to_it() {
    let mut h = harness(vec![ScriptedTurn::text("hi")]);
    let outcome = h.session.run("hello").unwrap();
    assert_eq!(outcome.text, "hi");
    let events = collect_input(&mut h.events);
    assert_eq!(names(&events).first(), Some(&"session_start"));
    assert_eq!(names(&events).last(), Some(&"processing_end"));
}

#[test]
fn close_from_idle_ends_the_session_after_queued_inputs() {
    let mut h = harness(vec![ScriptedTurn::text("a")]);
    h.session.submit("one").unwrap();
    h.session.close();
    let events = collect_to_end(&mut h.events);
    assert_eq!(
        stop_reason(&events),
        StopReason::Completed,
        "the queued input ran"
    );
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::SessionEnd {
            reason: CloseReason::Closed,
            ..
        }
    ));
    assert_eq!(h.session.state(), SessionState::Closed);
    let err = h.session.run("after close").unwrap_err();
    assert_eq!(err.kind(), agentloop::ErrorKind::SessionClosed);
}

#[test]
fn session_handle_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Session>();
    check::<agentloop::session::Events>();
}

#[test]
fn thinking_parts_with_signatures_are_replayed_unchanged_on_the_next_request() {
    let h = harness(vec![
        ScriptedTurn::text("Checking.")
            .with_reasoning("The file may not exist.")
            .with_tool_call("echo", json!({"text": "x"})),
        ScriptedTurn::text("done"),
    ]);
    h.session.run("go").unwrap();
    let requests = h.model.requests();
    let first_answer = requests[1]
        .messages
        .iter()
        .find(|m| m.role == Role::Assistant)
        .unwrap();
    let agentloop::llm::ContentPart::Thinking(thinking) = &first_answer.content[0] else {
        panic!("the thinking part comes back first: {first_answer:?}")
    };
    assert_eq!(thinking.text, "The file may not exist.");
    assert_eq!(thinking.signature.as_deref(), Some("scripted-signature"));
    let history = h.session.history();
    let Turn::Assistant(turn) = &history.turns()[1] else {
        panic!("an assistant turn")
    };
    assert_eq!(turn.reasoning.as_deref(), Some("The file may not exist."));
    assert_eq!(turn.content, "Checking.");
    assert_eq!(turn.tool_calls.len(), 1);
}

#[test]
fn history_round_trips_through_json_and_converts_to_the_same_messages() {
    let h = harness(vec![
        ScriptedTurn::text("Checking.")
            .with_reasoning("hmm")
            .with_tool_call("echo", json!({"text": "x"})),
        ScriptedTurn::text("done"),
    ]);
    h.session.steer("quickly").unwrap();
    h.session.run("go").unwrap();
    let history = h.session.history();
    let json = serde_json::to_string(&history).unwrap();
    let back: agentloop::session::History = serde_json::from_str(&json).unwrap();
    assert_eq!(back.to_messages(), history.to_messages());
    assert_eq!(back.len(), history.len());
    let kinds: Vec<String> = serde_json::from_str::<Vec<serde_json::Value>>(&json)
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        ["user", "steering", "assistant", "tool_results", "assistant"]
    );
}
