//! Error handling (spec §9.11, Appendix B): which provider errors end the input, which
//! close the session, and what the host sees.

use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::session::{CloseReason, EventKind, SessionConfig, SessionState, StopReason};
use agentloop::{Error, ErrorKind};

use support::session::*;

fn error_event(events: &[agentloop::session::SessionEvent]) -> (String, String, bool) {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Error {
                message,
                error_kind,
                fatal,
            } => Some((message.clone(), error_kind.clone(), *fatal)),
            _ => None,
        })
        .expect("an ERROR event")
}

#[test]
fn transient_errors_are_retried_by_the_client_and_the_input_completes() {
    let mut h = harness(vec![
        ScriptedTurn::error(Error::new(ErrorKind::RateLimited, "slow down").with_status(429)),
        ScriptedTurn::error(Error::new(ErrorKind::Server, "overloaded").with_status(503)),
        ScriptedTurn::text("made it"),
    ]);
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::Completed);
    assert_eq!(h.model.request_count(), 3, "two retries, then success");
    assert!(!names(&events).contains(&"error"));
}

#[test]
fn transient_errors_that_outlast_the_retries_end_the_input_and_the_session_stays_usable() {
    let server_error =
        || ScriptedTurn::error(Error::new(ErrorKind::Server, "overloaded").with_status(529));
    let mut h = harness(vec![
        server_error(),
        server_error(),
        server_error(),
        ScriptedTurn::text("back again"),
    ]);
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::Error);
    let (message, kind, fatal) = error_event(&events);
    assert_eq!(kind, "server");
    assert!(!fatal);
    assert!(message.contains("overloaded"), "{message}");
    assert!(position(&events, "error") < position(&events, "processing_end"));
    assert_eq!(h.session.state(), SessionState::Idle);
    let outcome = h.session.run("again").unwrap();
    assert_eq!(outcome.text, "back again");
}

#[test]
fn authentication_errors_surface_immediately_and_close_the_session() {
    let mut h = harness(vec![
        ScriptedTurn::error(
            Error::new(ErrorKind::Authentication, "invalid x-api-key").with_status(401),
        ),
        ScriptedTurn::text("never sent"),
    ]);
    let err = h.session.run("go").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Authentication);
    assert_eq!(h.model.request_count(), 1, "no retry");
    let events = collect_to_end(&mut h.events);
    let (_, kind, fatal) = error_event(&events);
    assert_eq!(kind, "authentication");
    assert!(fatal);
    assert!(position(&events, "error") < position(&events, "processing_end"));
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::SessionEnd {
            final_state: SessionState::Closed,
            reason: CloseReason::Error,
            ..
        }
    ));
    assert_eq!(h.session.state(), SessionState::Closed);
    assert_eq!(
        h.session.submit("more").unwrap_err().kind(),
        ErrorKind::SessionClosed
    );
}

#[test]
fn every_non_retryable_request_error_closes_the_session() {
    for kind in [
        ErrorKind::AccessDenied,
        ErrorKind::NotFound,
        ErrorKind::InvalidRequest,
        ErrorKind::Quota,
        ErrorKind::Configuration,
    ] {
        let mut h = harness(vec![ScriptedTurn::error(Error::new(kind, "no"))]);
        h.session.submit("go").unwrap();
        let events = collect_to_end(&mut h.events);
        assert!(error_event(&events).2, "{kind} is fatal");
        assert_eq!(h.session.state(), SessionState::Closed, "{kind}");
    }
}

#[test]
fn context_length_errors_emit_a_warning_and_the_session_continues() {
    let mut h = harness(vec![
        ScriptedTurn::error(
            Error::new(ErrorKind::ContextLength, "prompt is too long").with_status(400),
        ),
        ScriptedTurn::text("shorter works"),
    ]);
    h.session.submit("a very long prompt").unwrap();
    let events = collect_input(&mut h.events);
    let warning = position(&events, "warning");
    assert!(matches!(
        &events[warning].kind,
        EventKind::Warning { code, .. } if code == "context_length"
    ));
    assert!(warning < position(&events, "error"));
    assert!(!error_event(&events).2, "not fatal");
    assert_eq!(stop_reason(&events), StopReason::Error);
    assert_eq!(h.session.state(), SessionState::Idle);
    assert_eq!(h.session.run("short").unwrap().text, "shorter works");
}

#[test]
fn a_stream_that_fails_midway_closes_the_text_and_ends_the_input() {
    let mut h = harness(vec![
        ScriptedTurn::text("half an ans")
            .then_fail(Error::new(ErrorKind::Stream, "connection reset mid-stream")),
        ScriptedTurn::text("whole answer"),
    ]);
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let text = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::AssistantTextEnd { text, .. } => Some(text.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(text, "half an ans", "what had streamed");
    assert_eq!(error_event(&events).1, "stream");
    assert_eq!(
        h.model.request_count(),
        1,
        "no retry once output was delivered"
    );
    assert_eq!(h.session.history().check_tool_results(), Ok(()));
    assert_eq!(h.session.run("again").unwrap().text, "whole answer");
}

#[test]
fn graceful_shutdown_ends_the_input_then_cleans_up_then_emits_session_end_last() {
    let mut h = harness_with(
        ScriptedModel::new(vec![ScriptedTurn::text("partial").then_stall()]),
        profile(),
        SessionConfig::default(),
    );
    h.session.submit("go").unwrap();
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::AssistantTextDelta { .. })
    });
    h.session.abort();
    let events = collect_to_end(&mut h.events);
    let kinds: Vec<&str> = names(&events)
        .into_iter()
        .filter(|k| *k != "assistant_text_delta")
        .collect();
    assert_eq!(
        kinds,
        ["assistant_text_end", "processing_end", "session_end"]
    );
    assert_eq!(h.env.cleanups.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(h.events.next().is_none());
}

#[test]
fn an_environment_that_fails_to_start_closes_the_session_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut env = DirEnv::new(dir.path());
    env.fail_init = true;
    let client = support::client_for(ScriptedModel::new(vec![]));
    let session = agentloop::session::Session::new(
        profile(),
        std::sync::Arc::new(env),
        client,
        SessionConfig::default(),
    )
    .unwrap();
    let mut events = session.events();
    let all = collect_to_end(&mut events);
    assert_eq!(names(&all), ["session_start", "error", "session_end"]);
    let (message, kind, fatal) = error_event(&all);
    assert!(
        message.contains("the sandbox image is missing"),
        "{message}"
    );
    assert_eq!(kind, "io");
    assert!(fatal);
    assert_eq!(session.state(), SessionState::Closed);
}
