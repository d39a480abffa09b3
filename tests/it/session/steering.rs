//! Steering, follow-ups (spec §9.6) and reasoning effort (spec §9.7).

use agentloop::llm::Role;
use agentloop::llm::scripted::ScriptedTurn;
use agentloop::session::{EventKind, SessionConfig, StopReason, Turn};
use serde_json::json;

use support::session::*;

/// Index of the first event satisfying `pred`.
fn index_of(
    events: &[agentloop::session::SessionEvent],
    pred: impl Fn(&EventKind) -> bool,
) -> usize {
    events
        .iter()
        .position(|e| pred(&e.kind))
        .unwrap_or_else(|| panic!("no such event in {:?}", names(events)))
}

/// A harness whose model first calls the `gate` tool, which blocks until the returned
/// sender releases it, then answers with `answers`, one per request.
fn gated_tool_harness(answers: &[&str]) -> (Harness, crossbeam_channel::Sender<()>) {
    let (gate, release) = gate_tool("gate");
    let mut turns = vec![ScriptedTurn::tool_call("gate", json!({}))];
    turns.extend(answers.iter().map(|text| ScriptedTurn::text(*text)));
    let h = harness_with(
        agentloop::llm::scripted::ScriptedModel::new(turns),
        profile().with_tool(gate),
        SessionConfig::default(),
    );
    (h, release)
}

#[test]
fn steer_queues_a_message_injected_after_the_current_tool_round() {
    let (mut h, release) = gated_tool_harness(&["switching to tabs"]);
    h.session.submit("format the code").unwrap();
    let mut events = collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallStart { .. })
    });
    h.session.steer("use tabs, not spaces").unwrap();
    release.send(()).unwrap();
    events.extend(collect_input(&mut h.events));

    let tool_end = index_of(&events, |k| matches!(k, EventKind::ToolCallEnd { .. }));
    let injected = index_of(
        &events,
        |k| matches!(k, EventKind::SteeringInjected { content } if content == "use tabs, not spaces"),
    );
    let second_call = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.kind, EventKind::AssistantTextStart { .. }))
        .nth(1)
        .map(|(i, _)| i)
        .expect("a second model call");
    assert!(
        tool_end < injected && injected < second_call,
        "{:?}",
        names(&events)
    );

    // The very next request carries it as the last user-role message.
    let requests = h.model.requests();
    assert_eq!(requests.len(), 2);
    assert!(!user_texts(&requests[0]).contains(&"use tabs, not spaces".to_string()));
    let last = requests[1].messages.last().unwrap();
    assert_eq!(last.role, Role::User);
    assert_eq!(last.text(), "use tabs, not spaces");
}

#[test]
fn steering_messages_appear_as_steering_turns_in_the_history() {
    let (mut h, release) = gated_tool_harness(&["ok"]);
    h.session.submit("start").unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallStart { .. })
    });
    h.session.steer("first steer").unwrap();
    h.session.steer("second steer").unwrap();
    release.send(()).unwrap();
    collect_input(&mut h.events);
    let steering: Vec<String> = h
        .session
        .history()
        .turns()
        .iter()
        .filter_map(|t| match t {
            Turn::Steering(s) => Some(s.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(steering, ["first steer", "second steer"]);
    assert_eq!(h.session.history().check_tool_results(), Ok(()));
}

#[test]
fn steering_turns_are_converted_to_user_role_messages() {
    let mut h = harness(vec![ScriptedTurn::text("ok")]);
    h.session.steer("be brief").unwrap();
    h.session.submit("explain").unwrap();
    let events = collect_input(&mut h.events);
    // Drained before the first call: the event comes before the model streams.
    assert!(position(&events, "steering_injected") < position(&events, "assistant_text_start"));
    let request = &h.model.requests()[0];
    let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::User]);
    assert_eq!(user_texts(request), ["explain", "be brief"]);
}

#[test]
fn steer_while_the_final_answer_streams_continues_the_loop() {
    let turns = vec![
        ScriptedTurn::text("Here is the long version"),
        ScriptedTurn::text("Short version."),
    ];
    let (mut h, release) = gated_harness(turns, vec![0], profile(), SessionConfig::default());
    h.session.submit("explain").unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::AssistantTextStart { .. })
    });
    h.session.steer("make it short").unwrap();
    release.send(()).unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::Completed);
    assert_eq!(
        h.model.request_count(),
        2,
        "the steer got its own model call"
    );
    let requests = h.model.requests();
    assert_eq!(requests[1].messages.last().unwrap().text(), "make it short");
    let texts: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantTextEnd { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["Here is the long version", "Short version."]);
}

#[test]
fn follow_up_is_processed_after_the_current_input_completes() {
    let (mut h, release) = gated_tool_harness(&["first done", "second done"]);
    h.session.submit("first task").unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallStart { .. })
    });
    h.session.follow_up("second task").unwrap();
    release.send(()).unwrap();
    let first = collect_input(&mut h.events);
    assert_eq!(stop_reason(&first), StopReason::Completed);
    assert!(
        !first.iter().any(
            |e| matches!(&e.kind, EventKind::UserInput { content } if content == "second task")
        ),
        "the follow-up waits for the first input to complete"
    );
    let second = collect_input(&mut h.events);
    assert!(matches!(
        &second[0].kind,
        EventKind::UserInput { content } if content == "second task"
    ));
    assert_eq!(stop_reason(&second), StopReason::Completed);
    let requests = h.model.requests();
    assert_eq!(user_texts(&requests[2]), ["first task", "second task"]);
}

#[test]
fn follow_ups_run_in_order_and_run_waits_for_them() {
    let (mut h, release) = gated_tool_harness(&["one", "two", "three"]);
    let session = &h.session;
    let events = &mut h.events;
    let outcome = std::thread::scope(|scope| {
        let runner = std::thread::Builder::new()
            .name("test-run".into())
            .spawn_scoped(scope, || session.run("task"))
            .unwrap();
        collect_until(events, |e| {
            matches!(e.kind, EventKind::ToolCallStart { .. })
        });
        session.follow_up("then two").unwrap();
        session.follow_up("then three").unwrap();
        release.send(()).unwrap();
        runner.join().unwrap().unwrap()
    });
    assert_eq!(outcome.inputs, 3);
    assert_eq!(outcome.text, "three");
    let users: Vec<String> = h
        .session
        .history()
        .turns()
        .iter()
        .filter_map(|t| match t {
            Turn::User(u) => Some(u.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(users, ["task", "then two", "then three"]);
}

#[test]
fn follow_up_while_idle_is_processed_at_once() {
    let mut h = harness(vec![ScriptedTurn::text("done")]);
    h.session.follow_up("do it").unwrap();
    let events = collect_input(&mut h.events);
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::UserInput { content } if content == "do it"))
    );
    assert_eq!(stop_reason(&events), StopReason::Completed);
}

#[test]
fn reasoning_effort_is_passed_through_to_the_request() {
    let config = SessionConfig::default().with_reasoning_effort("high");
    let h = harness_with(
        agentloop::llm::scripted::ScriptedModel::new(vec![ScriptedTurn::text("ok")]),
        profile(),
        config,
    );
    h.session.run("think").unwrap();
    assert_eq!(
        h.model.requests()[0].reasoning_effort.as_deref(),
        Some("high")
    );
}

#[test]
fn changing_reasoning_effort_takes_effect_on_the_next_call() {
    let (gate, release) = gate_tool("gate");
    let turns = vec![
        ScriptedTurn::tool_call("gate", json!({})),
        ScriptedTurn::tool_call("gate", json!({})),
        ScriptedTurn::text("done"),
    ];
    let config = SessionConfig::default().with_reasoning_effort("high");
    let mut h = harness_with(
        agentloop::llm::scripted::ScriptedModel::new(turns),
        profile().with_tool(gate),
        config,
    );
    h.session.submit("go").unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallStart { .. })
    });
    h.session.set_reasoning_effort(Some("low".into()));
    release.send(()).unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallStart { .. })
    });
    h.session.set_reasoning_effort(None);
    release.send(()).unwrap();
    collect_input(&mut h.events);
    let efforts: Vec<Option<String>> = h
        .model
        .requests()
        .iter()
        .map(|r| r.reasoning_effort.clone())
        .collect();
    assert_eq!(efforts, [Some("high".into()), Some("low".into()), None]);
}

#[test]
fn provider_specific_reasoning_effort_values_pass_through() {
    let h = harness(vec![ScriptedTurn::text("a"), ScriptedTurn::text("b")]);
    h.session.set_reasoning_effort(Some("xhigh".into()));
    h.session.run("one").unwrap();
    h.session.set_reasoning_effort(Some("medium".into()));
    h.session.run("two").unwrap();
    let efforts: Vec<Option<String>> = h
        .model
        .requests()
        .iter()
        .map(|r| r.reasoning_effort.clone())
        .collect();
    assert_eq!(efforts, [Some("xhigh".into()), Some("medium".into())]);
}
