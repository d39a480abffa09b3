//! The event system (spec §9.10): every kind at the right time, delivered through an
//! iterator, bracketed by SESSION_START and SESSION_END, with a stable JSON form.

use std::collections::BTreeSet;
use std::time::{Duration, UNIX_EPOCH};

use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Client, Usage};
use agentloop::session::compaction::CompactionConfig;
use agentloop::session::{
    Approval, EventKind, Session, SessionConfig, SessionEvent, SessionState, StopReason,
};
use agentloop::tools::ToolOutput;
use agentloop::{Error, ErrorKind};
use serde_json::{Value, json};

use support::GENEROUS;
use support::session::*;

#[test]
fn event_json_has_kind_session_id_timestamp_and_data_in_that_order() {
    let mut event = SessionEvent::new(
        EventKind::ToolCallEnd {
            call_id: "call_1".into(),
            tool_name: "shell".into(),
            output: Some("ok\n".into()),
            error: None,
            is_error: false,
            duration_ms: 12,
            truncated: false,
            removed_chars: 0,
            removed_lines: 0,
        },
        "0a1b",
    );
    event.timestamp = UNIX_EPOCH + Duration::from_millis(1_767_225_600_000);
    let line = serde_json::to_string(&event).unwrap();
    assert_eq!(
        line,
        r#"{"kind":"tool_call_end","session_id":"0a1b","timestamp":"2026-01-01T00:00:00.000Z","data":{"call_id":"call_1","tool_name":"shell","output":"ok\n","is_error":false,"duration_ms":12,"truncated":false,"removed_chars":0,"removed_lines":0}}"#
    );
    assert_eq!(event.to_string(), line, "Display is the JSON line");
    let back: SessionEvent = serde_json::from_str(&line).unwrap();
    assert_eq!(back.timestamp, event.timestamp);
    assert_eq!(serde_json::to_string(&back).unwrap(), line);
}

#[test]
fn events_without_data_serialise_an_empty_data_object() {
    let mut event = SessionEvent::new(EventKind::AssistantTextStart {}, "s");
    event.timestamp = UNIX_EPOCH;
    let line = serde_json::to_string(&event).unwrap();
    assert_eq!(
        line,
        r#"{"kind":"assistant_text_start","session_id":"s","timestamp":"1970-01-01T00:00:00.000Z","data":{}}"#
    );
    let back: SessionEvent = serde_json::from_str(&line).unwrap();
    assert!(matches!(back.kind, EventKind::AssistantTextStart {}));
}

#[test]
fn unknown_event_kinds_fail_to_deserialise_with_a_clear_error() {
    let line = r#"{"kind":"no_such_kind","session_id":"s","timestamp":"2026-01-01T00:00:00.000Z","data":{}}"#;
    let err = serde_json::from_str::<SessionEvent>(line).unwrap_err();
    assert!(err.to_string().contains("no_such_kind"), "{err}");
}

/// A session that exercises every event kind once.
fn everything_session() -> (Harness, Vec<SessionEvent>) {
    let streaming = tool("stream", |_input, ctx| {
        (ctx.on_output)(agentloop::exec::OutputStream::Stdout, b"chunk");
        Ok(ToolOutput::text("chunk"))
    });
    let turns = vec![
        // Input 1: reasoning, a streaming tool, loop detection (window 2), an approval, and
        // the round limit (3).
        ScriptedTurn::text("Let me look.")
            .with_reasoning("I should stream.")
            .with_tool_call("stream", json!({})),
        ScriptedTurn::tool_call("stream", json!({})),
        ScriptedTurn::tool_call("echo", json!({"text": "needs approval"})),
        // Input 2: a provider error that ends the input but not the session.
        ScriptedTurn::error(
            Error::new(ErrorKind::ContextLength, "prompt is too long").with_status(400),
        ),
        // Input 3: a plain answer.
        ScriptedTurn::text("done"),
    ];
    // The tiny window below is for the 80 % warning; compaction (off here) has its own
    // tests in `compaction/`.
    let config = SessionConfig::default()
        .with_compaction(CompactionConfig::disabled())
        .with_loop_detection_window(2)
        .with_max_tool_rounds_per_input(3)
        .with_approval(|call| {
            if call.name == "echo" {
                Approval::Ask
            } else {
                Approval::Allow
            }
        });
    // 20 tokens = 80 characters: the first round already passes 80 %.
    let profile = profile().with_tool(streaming).with_context_window_size(20);
    let mut h = harness_with(ScriptedModel::new(turns), profile, config);
    h.session.steer("steer before the first call").unwrap();
    h.session.submit("first").unwrap();
    let mut events = collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    });
    if let EventKind::ApprovalRequested { responder, .. } = &events.last().unwrap().kind {
        assert!(responder.approve());
    }
    events.extend(collect_input(&mut h.events));
    h.session.submit("second").unwrap();
    events.extend(collect_input(&mut h.events));
    h.session.submit("third").unwrap();
    events.extend(collect_input(&mut h.events));
    h.session.close();
    events.extend(collect_to_end(&mut h.events));
    (h, events)
}

#[test]
fn every_event_kind_is_emitted_at_the_right_time() {
    let (h, events) = everything_session();
    let kinds: BTreeSet<&str> = events.iter().map(|e| e.kind.name()).collect();
    for kind in [
        "session_start",
        "session_end",
        "user_input",
        "processing_end",
        "assistant_text_start",
        "assistant_text_delta",
        "assistant_reasoning_delta",
        "assistant_text_end",
        "tool_call_start",
        "tool_call_output_delta",
        "tool_call_end",
        "steering_injected",
        "turn_limit",
        "loop_detection",
        "warning",
        "error",
        "approval_requested",
    ] {
        assert!(
            kinds.contains(kind),
            "{kind} missing from {:?}",
            names(&events)
        );
    }
    // Bracketing and per-input order.
    assert_eq!(names(&events).first(), Some(&"session_start"));
    assert_eq!(names(&events).last(), Some(&"session_end"));
    let mut open_input = false;
    let mut open_text = false;
    for event in &events {
        match &event.kind {
            EventKind::UserInput { .. } => {
                assert!(!open_input, "inputs do not nest");
                open_input = true;
            }
            EventKind::ProcessingEnd { .. } => {
                assert!(open_input && !open_text);
                open_input = false;
            }
            EventKind::AssistantTextStart {} => {
                assert!(open_input && !open_text);
                open_text = true;
            }
            EventKind::AssistantTextDelta { .. } | EventKind::AssistantReasoningDelta { .. } => {
                assert!(open_text)
            }
            EventKind::AssistantTextEnd { .. } => {
                assert!(open_text);
                open_text = false;
            }
            EventKind::ToolCallStart { .. }
            | EventKind::ToolCallEnd { .. }
            | EventKind::ToolCallOutputDelta { .. }
            | EventKind::TurnLimit { .. }
            | EventKind::LoopDetection { .. }
            | EventKind::ApprovalRequested { .. }
            | EventKind::Error { .. } => assert!(open_input && !open_text, "{}", event.kind.name()),
            _ => {}
        }
    }
    // The steer queued while idle is injected before the first model call.
    assert!(position(&events, "steering_injected") < position(&events, "assistant_text_start"));
    // The context warning fires once (the history only grows).
    let warnings = events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::Warning { code, .. } if code == "context_usage"))
        .count();
    assert_eq!(warnings, 1);
    let stops: Vec<StopReason> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ProcessingEnd { stop_reason, .. } => Some(*stop_reason),
            _ => None,
        })
        .collect();
    assert_eq!(
        stops,
        [
            StopReason::RoundLimit,
            StopReason::Error,
            StopReason::Completed
        ]
    );
    assert_eq!(h.session.state(), SessionState::Closed);
    assert!(events.iter().all(|e| e.session_id == h.session.id()));
}

#[test]
fn every_event_of_a_session_round_trips_through_json() {
    let (_h, events) = everything_session();
    for event in &events {
        let line = serde_json::to_string(event).unwrap();
        let value: Value = serde_json::from_str(&line).unwrap();
        let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 4, "{line}");
        assert!(value["data"].is_object(), "{line}");
        assert!(value["timestamp"].as_str().unwrap().ends_with('Z'));
        let back: SessionEvent = serde_json::from_str(&line).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), line);
    }
    // The approval responder is not part of the JSON.
    let approval = events
        .iter()
        .find(|e| matches!(e.kind, EventKind::ApprovalRequested { .. }))
        .unwrap();
    let line = serde_json::to_string(approval).unwrap();
    assert!(!line.contains("responder"), "{line}");
}

#[test]
fn tool_call_end_carries_the_full_output() {
    let big = "x".repeat(100_000);
    let expected = big.clone();
    let producer = tool("big", move |_input, _ctx| Ok(ToolOutput::text(big.clone())));
    let mut h = harness_with(
        ScriptedModel::new(vec![
            ScriptedTurn::tool_call("big", json!({})),
            ScriptedTurn::text("ok"),
        ]),
        profile().with_tool(producer),
        SessionConfig::default(),
    );
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let output = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolCallEnd { output, .. } => output.clone(),
            _ => None,
        })
        .unwrap();
    assert_eq!(output.len(), expected.len());
    assert_eq!(output, expected);
}

#[test]
fn events_arrive_through_a_blocking_iterator_that_ends_after_session_end() {
    let h = harness(vec![ScriptedTurn::text("hi")]);
    h.session.submit("hello").unwrap();
    h.session.close();
    let Harness {
        events, session, ..
    } = h;
    let reader = std::thread::Builder::new()
        .name("test-reader".into())
        .spawn(move || events.map(|e| e.kind.name()).collect::<Vec<_>>())
        .unwrap();
    let seen = reader.join().unwrap();
    assert_eq!(seen.first(), Some(&"session_start"));
    assert_eq!(seen.last(), Some(&"session_end"));
    assert_eq!(seen.iter().filter(|k| **k == "session_end").count(), 1);
    drop(session);
}

#[test]
fn an_iterator_created_after_the_worker_is_gone_ends_at_once() {
    let h = harness(vec![]);
    h.session.close();
    let Harness {
        session,
        mut events,
        ..
    } = h;
    collect_to_end(&mut events);
    drop(session);
    // The session handle is gone, so ask a fresh session for a late iterator instead:
    // a closed session's new iterator ends once the buffered events are read.
    let dir = tempfile::tempdir().unwrap();
    let env = std::sync::Arc::new(DirEnv::new(dir.path()));
    let client = Client::new().with_provider(ScriptedModel::new(vec![]));
    let session = Session::new(profile(), env, client, SessionConfig::default()).unwrap();
    session.close();
    let mut first = session.events();
    collect_to_end(&mut first);
    drop(first); // one live iterator at a time
    let mut late = session.events();
    assert_eq!(
        late.recv_timeout(GENEROUS).unwrap_err(),
        agentloop::session::RecvError::Ended
    );
}

#[test]
fn context_usage_warning_fires_once_when_the_history_passes_80_percent() {
    let turns = vec![
        ScriptedTurn::text("a"),
        ScriptedTurn::text("b"),
        ScriptedTurn::text("c"),
    ];
    let profile = profile().with_context_window_size(100); // 400 characters
    let config = SessionConfig::default().with_compaction(CompactionConfig::disabled());
    let mut h = harness_with(ScriptedModel::new(turns), profile, config);
    h.session.submit("x".repeat(200)).unwrap();
    let first = collect_input(&mut h.events);
    assert!(
        !names(&first).contains(&"warning"),
        "50 % is below the threshold"
    );
    h.session.submit("y".repeat(200)).unwrap();
    let second = collect_input(&mut h.events);
    let message = second
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Warning { message, code } if code == "context_usage" => {
                Some(message.clone())
            }
            _ => None,
        })
        .expect("a context-usage warning");
    assert!(message.contains("Context usage at ~100%"), "{message}");
    h.session.submit("z").unwrap();
    let third = collect_input(&mut h.events);
    assert!(!names(&third).contains(&"warning"), "once per crossing");
}

#[test]
fn assistant_text_end_reports_usage_and_reasoning() {
    let usage = Usage {
        input_tokens: 11,
        output_tokens: 5,
        total_tokens: 16,
        ..Usage::default()
    };
    let mut h = harness(vec![
        ScriptedTurn::text("answer")
            .with_reasoning("because")
            .with_usage(usage),
    ]);
    h.session.submit("q").unwrap();
    let events = collect_input(&mut h.events);
    let (reasoning, got_usage) = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::AssistantTextEnd {
                reasoning, usage, ..
            } => Some((reasoning.clone(), *usage)),
            _ => None,
        })
        .unwrap();
    assert_eq!(reasoning.as_deref(), Some("because"));
    assert_eq!(got_usage, usage);
    let deltas: String = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantReasoningDelta { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "because");
}
