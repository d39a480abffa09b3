//! Abort, interrupt and drop: prompt ends, a valid history, a usable session after an
//! interrupt, and no thread left behind.

use std::time::{Duration, Instant};

use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::session::{
    CloseReason, EventKind, Events, Session, SessionConfig, SessionEvent, SessionState, StopReason,
};
use serde_json::json;

use support::GENEROUS;
use support::session::*;

fn stalling_harness() -> Harness {
    harness(vec![
        ScriptedTurn::text("thinking about it").then_stall(),
        ScriptedTurn::text("fresh start"),
    ])
}

fn blocking_harness(parallel: bool) -> Harness {
    let turns = vec![
        ScriptedTurn::tool_call("block", json!({})).with_tool_call("block", json!({"n": 2})),
        ScriptedTurn::text("after the interrupt"),
    ];
    let profile = profile()
        .with_tool(blocking_tool("block"))
        .with_parallel_tool_calls(parallel);
    harness_with(ScriptedModel::new(turns), profile, SessionConfig::default())
}

/// Submits "go", waits for the first event `until` accepts, stops the session with `stop`
/// (abort or interrupt), and returns what `collect` gathers after that and how long after
/// the stop it took.
fn stop_after(
    h: &mut Harness,
    until: fn(&EventKind) -> bool,
    stop: fn(&Session),
    collect: fn(&mut Events) -> Vec<SessionEvent>,
) -> (Vec<SessionEvent>, Duration) {
    h.session.submit("go").unwrap();
    collect_until(&mut h.events, |e| until(&e.kind));
    let started = Instant::now();
    stop(&h.session);
    let events = collect(&mut h.events);
    (events, started.elapsed())
}

fn is_text_delta(kind: &EventKind) -> bool {
    matches!(kind, EventKind::AssistantTextDelta { .. })
}

fn is_tool_call_start(kind: &EventKind) -> bool {
    matches!(kind, EventKind::ToolCallStart { .. })
}

#[test]
fn abort_while_the_model_stalls_mid_stream_ends_the_session_promptly() {
    let mut h = stalling_harness();
    let (events, elapsed) = stop_after(&mut h, is_text_delta, Session::abort, collect_to_end);
    assert!(elapsed < GENEROUS, "SESSION_END after {elapsed:?}");
    assert_eq!(stop_reason(&events), StopReason::Aborted);
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::SessionEnd {
            reason: CloseReason::Aborted,
            ..
        }
    ));
    assert!(
        names(&events).contains(&"assistant_text_end"),
        "the cut stream is closed"
    );
    assert_eq!(h.session.history().check_tool_results(), Ok(()));
}

#[test]
fn abort_while_a_tool_runs_ends_the_session_promptly() {
    for parallel in [false, true] {
        let mut h = blocking_harness(parallel);
        let (events, elapsed) =
            stop_after(&mut h, is_tool_call_start, Session::abort, collect_to_end);
        assert!(elapsed < GENEROUS, "SESSION_END after {elapsed:?}");
        assert_eq!(stop_reason(&events), StopReason::Aborted);
        let history = h.session.history();
        assert_eq!(history.check_tool_results(), Ok(()), "parallel={parallel}");
        assert_eq!(h.session.state(), SessionState::Closed);
    }
}

#[test]
fn interrupt_while_the_model_stalls_returns_to_idle_and_a_following_submit_works() {
    let mut h = stalling_harness();
    let (events, elapsed) = stop_after(&mut h, is_text_delta, Session::interrupt, collect_input);
    assert!(elapsed < GENEROUS, "PROCESSING_END after {elapsed:?}");
    assert_eq!(stop_reason(&events), StopReason::Interrupted);
    assert_eq!(h.session.history().check_tool_results(), Ok(()));
    assert_eq!(h.session.state(), SessionState::Idle);
    let outcome = h.session.run("try again").unwrap();
    assert_eq!(outcome.text, "fresh start");
    assert_eq!(outcome.stop_reason, StopReason::Completed);
}

#[test]
fn interrupt_while_a_tool_runs_answers_every_pending_call_and_returns_to_idle() {
    for parallel in [false, true] {
        let mut h = blocking_harness(parallel);
        let (events, elapsed) = stop_after(
            &mut h,
            is_tool_call_start,
            Session::interrupt,
            collect_input,
        );
        assert!(elapsed < GENEROUS, "PROCESSING_END after {elapsed:?}");
        assert_eq!(stop_reason(&events), StopReason::Interrupted);
        let history = h.session.history();
        assert_eq!(history.check_tool_results(), Ok(()), "parallel={parallel}");
        let ends = events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::ToolCallEnd { .. }))
            .count();
        assert_eq!(ends, 2, "both calls end, run or not (parallel={parallel})");
        if !parallel {
            // The second call never started: its result says it was interrupted.
            let text = h
                .session
                .history()
                .turns()
                .iter()
                .find_map(|t| match t {
                    agentloop::session::Turn::ToolResults(r) => Some(r.results[1].content.clone()),
                    _ => None,
                })
                .unwrap();
            assert!(text.contains("interrupted"), "{text}");
        }
        assert_eq!(h.session.state(), SessionState::Idle);
        assert_eq!(h.session.run("next").unwrap().text, "after the interrupt");
    }
}

#[test]
fn interrupt_when_idle_changes_nothing() {
    let mut h = harness(vec![ScriptedTurn::text("ok")]);
    h.session.interrupt();
    assert_eq!(h.session.state(), SessionState::Idle);
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::Completed);
}

#[test]
fn dropping_a_busy_session_returns_promptly() {
    let mut h = blocking_harness(true);
    h.session.submit("go").unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ToolCallStart { .. })
    });
    let Harness {
        session, events, ..
    } = h;
    let started = Instant::now();
    drop(session);
    assert!(started.elapsed() < GENEROUS);
    let mut events = events;
    let rest = collect_to_end(&mut events);
    assert!(matches!(
        rest.last().unwrap().kind,
        EventKind::SessionEnd { .. }
    ));
    assert!(events.next().is_none());
}

fn task_count() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Run in a child process by `no_thread_outlives_a_dropped_session` (alone in its process,
/// so the count of `/proc/self/task` entries is not disturbed by other tests).
#[test]
#[ignore = "run in a child process by no_thread_outlives_a_dropped_session"]
fn thread_count_child() {
    let before = task_count();
    for (parallel, abort_first) in [(true, false), (true, true), (false, false)] {
        let mut h = blocking_harness(parallel);
        h.session.submit("go").unwrap();
        collect_until(&mut h.events, |e| {
            matches!(e.kind, EventKind::ToolCallStart { .. })
        });
        assert!(task_count() > before, "the session runs threads");
        if abort_first {
            h.session.abort();
        }
        drop(h);
    }
    let after = task_count();
    assert_eq!(
        before, after,
        "threads before and after dropping the sessions"
    );
}

#[test]
fn no_thread_outlives_a_dropped_session() {
    support::run_ignored_alone("session::abort::thread_count_child");
}
