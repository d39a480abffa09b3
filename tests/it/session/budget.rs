//! Budgets through real sessions over the scripted model: each kind (tokens, cost, wall
//! time, tool calls, per input and per session) stops a run that would pass it within one
//! model call or tool round, with `budget_exhausted` and a history that is valid and goes
//! on with the next input; a subagent spends its parent's budget; `budget_warning` fires
//! once at its fraction, with the optional note to the model; a cost budget needs prices.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentloop::ErrorKind;
use agentloop::llm::Usage;
use agentloop::llm::pricing::Price;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::{self, ProviderProfile};
use agentloop::session::{
    Budget, BudgetKind, BudgetScope, EventKind, Session, SessionConfig, SessionEvent, StopReason,
};
use agentloop::tools::ToolOutput;
use serde_json::json;

use support::session::*;

/// A model call that used `tokens` prompt tokens and no output.
fn call(tool: &str, tokens: u64) -> ScriptedTurn {
    ScriptedTurn::tool_call(tool, json!({"text": "x"})).with_usage(usage(tokens))
}

fn usage(tokens: u64) -> Usage {
    Usage {
        input_tokens: tokens,
        total_tokens: tokens,
        ..Usage::default()
    }
}

/// The `budget_exhausted` event among `events`: (which, scope, limit, used).
fn exhausted(events: &[SessionEvent]) -> (BudgetKind, BudgetScope, f64, f64) {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::BudgetExhausted {
                which,
                scope,
                limit,
                used,
            } => Some((*which, *scope, *limit, *used)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no budget_exhausted in {:?}", names(events)))
}

fn warnings(events: &[SessionEvent]) -> Vec<(BudgetKind, BudgetScope, f64)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::BudgetWarning {
                which, scope, used, ..
            } => Some((*which, *scope, *used)),
            _ => None,
        })
        .collect()
}

fn start(model: ScriptedModel, profile: ProviderProfile, config: SessionConfig) -> Harness {
    harness_with(model, profile, config)
}

/// Asserts the history is valid, then that the session takes another input and finishes it
/// (after the turns still scripted, with one more text answer).
fn assert_resumable(h: &mut Harness) {
    h.session.history().check_tool_results().unwrap();
    h.model
        .push(ScriptedTurn::text("Picking up where I stopped."));
    h.session.submit("go on").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::Completed);
    h.session.history().check_tool_results().unwrap();
}

#[test]
fn a_token_budget_stops_the_input_after_the_call_that_crossed_it() {
    let turns = (0..4).map(|_| call("echo", 100)).collect();
    let config = SessionConfig::default().with_input_budget(Budget::default().with_tokens(250));
    let mut h = start(ScriptedModel::new(turns), profile(), config);
    h.session.submit("loop").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::BudgetExhausted);
    // 100, 200, then 300 ≥ 250: the third call crossed it, and no fourth was made.
    assert_eq!(h.model.request_count(), 3);
    assert_eq!(
        exhausted(&events),
        (BudgetKind::Tokens, BudgetScope::Input, 250.0, 300.0)
    );
    // The round of the third call ran (its results are in the history), then it stopped.
    let end = events.last().unwrap();
    match &end.kind {
        EventKind::ProcessingEnd {
            tool_calls, usage, ..
        } => {
            assert_eq!(*tool_calls, 3);
            assert_eq!(usage.input_tokens, 300);
        }
        other => panic!("{other:?}"),
    }
    assert!(position(&events, "budget_exhausted") < position(&events, "processing_end"));
    // The input's budget starts from zero for the next input.
    assert_resumable(&mut h);
}

#[test]
fn a_session_cost_budget_stops_the_input_and_every_later_one() {
    // $1 per million prompt tokens: each 4,000-token call costs $0.004.
    let turns = (0..6).map(|_| call("echo", 4_000)).collect();
    let config = SessionConfig::default()
        .with_price("scripted-model", Price::new(1.0, 1.0))
        .with_session_budget(Budget::default().with_cost_usd(0.01));
    let h = start(ScriptedModel::new(turns), profile(), config);
    let outcome = h.session.run("spend").unwrap();
    assert_eq!(outcome.stop_reason, StopReason::BudgetExhausted);
    assert_eq!(
        outcome.budget,
        Some((BudgetKind::Cost, BudgetScope::Session))
    );
    assert_eq!(
        h.model.request_count(),
        3,
        "$0.012 ≥ $0.01 after the third call"
    );
    assert!((outcome.cost_usd.unwrap() - 0.012).abs() < 1e-9);
    h.session.history().check_tool_results().unwrap();
    // The session's budget stays spent: the next input stops before any model call.
    let outcome = h.session.run("more").unwrap();
    assert_eq!(outcome.stop_reason, StopReason::BudgetExhausted);
    assert_eq!(h.model.request_count(), 3);
    h.session.history().check_tool_results().unwrap();
}

#[test]
fn a_wall_time_budget_stops_at_the_next_safe_point() {
    let slow = tool("slow", |_input, _ctx| {
        std::thread::sleep(Duration::from_millis(400));
        Ok(ToolOutput::text("done"))
    });
    let turns = vec![call("slow", 10), ScriptedTurn::text("Done slowly.")];
    let config = SessionConfig::default()
        .with_input_budget(Budget::default().with_wall_time(Duration::from_millis(300)));
    let mut h = start(ScriptedModel::new(turns), profile().with_tool(slow), config);
    h.session.submit("take your time").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::BudgetExhausted);
    // The first round took 0.4 s > 0.3 s: the loop stopped before the second call.
    assert_eq!(h.model.request_count(), 1);
    let (which, scope, limit, used) = exhausted(&events);
    assert_eq!((which, scope), (BudgetKind::WallTime, BudgetScope::Input));
    assert_eq!(limit, 0.3);
    assert!(used >= 0.4, "{used}");
    assert_resumable(&mut h);
}

#[test]
fn a_tool_call_budget_never_runs_more_calls_than_it_allows() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    let counting = tool("count", move |_input, _ctx| {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput::text("counted"))
    });
    let two_calls = || {
        ScriptedTurn::tool_call("count", json!({}))
            .with_tool_call("count", json!({}))
            .with_usage(usage(10))
    };
    let turns = vec![two_calls(), two_calls(), two_calls()];
    let config = SessionConfig::default().with_input_budget(Budget::default().with_tool_calls(3));
    let mut h = start(
        ScriptedModel::new(turns),
        profile().with_tool(counting),
        config,
    );
    h.session.submit("count").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::BudgetExhausted);
    assert_eq!(ran.load(Ordering::SeqCst), 3, "the fourth call is not run");
    assert_eq!(h.model.request_count(), 2);
    assert_eq!(
        exhausted(&events),
        (BudgetKind::ToolCalls, BudgetScope::Input, 3.0, 3.0)
    );
    let refused: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnd {
                error: Some(error), ..
            } => Some(error.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].contains("tool-call budget is used up"),
        "{}",
        refused[0]
    );
    assert_resumable(&mut h);
}

#[test]
fn a_subagent_spends_its_parents_budget_and_stops_with_it() {
    let child_calls = Arc::new(AtomicUsize::new(0));
    let counted = child_calls.clone();
    // The parent spawns a child and waits for it; the child calls a tool forever. Every
    // call is 100 tokens; the parent's session may spend 500.
    let model = ScriptedModel::dynamic(move |request| {
        let is_child = user_texts(request).iter().any(|t| t.contains("CHILD-TASK"));
        let results = request
            .messages
            .iter()
            .filter(|m| m.role == agentloop::llm::Role::Tool)
            .count();
        if is_child {
            counted.fetch_add(1, Ordering::SeqCst);
            return call("echo", 100);
        }
        match results {
            0 => ScriptedTurn::tool_call("spawn_agent", json!({"task": "CHILD-TASK loop"}))
                .with_usage(usage(100)),
            1 => ScriptedTurn::tool_call("wait", json!({"agent_id": "agent-1"}))
                .with_usage(usage(100)),
            _ => ScriptedTurn::text("The child is done.").with_usage(usage(100)),
        }
    });
    let parent_profile = profiles::anthropic("scripted-model")
        .with_provider_id("scripted")
        .with_tool(echo_tool());
    let config = SessionConfig::default().with_session_budget(Budget::default().with_tokens(500));
    let mut h = start(model, parent_profile, config);
    h.session.submit("delegate").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::BudgetExhausted);
    // The parent's own two calls are 200 tokens; its children's pushed it to 500.
    let (which, scope, limit, used) = exhausted(&events);
    assert_eq!(
        (which, scope, limit),
        (BudgetKind::Tokens, BudgetScope::Session, 500.0)
    );
    assert!(used >= 500.0, "{used}");
    let own = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ProcessingEnd { usage, .. } => Some(usage.input_tokens),
            _ => None,
        })
        .unwrap();
    assert_eq!(own, 200);
    // The child stopped within one call of the parent's limit: 200 + 3 × 100 = 500.
    assert_eq!(child_calls.load(Ordering::SeqCst), 3);
    let child_stop = events.iter().find_map(|e| match &e.kind {
        EventKind::SubagentEvent { event, .. } => match &event.kind {
            EventKind::ProcessingEnd { stop_reason, .. } => Some(*stop_reason),
            _ => None,
        },
        _ => None,
    });
    assert_eq!(child_stop, Some(StopReason::BudgetExhausted));
    h.session.history().check_tool_results().unwrap();
}

#[test]
fn budget_warning_fires_once_at_its_fraction_and_can_tell_the_model() {
    let turns = (0..4).map(|_| call("echo", 300)).collect();
    let config = SessionConfig::default()
        .with_input_budget(Budget::default().with_tokens(1_000))
        .with_budget_warning(0.5, true);
    let mut h = start(ScriptedModel::new(turns), profile(), config);
    h.session.submit("work").unwrap();
    let events = collect_input(&mut h.events);
    // 300, 600 (≥ 500: the warning), 900, 1,200 (exhausted).
    assert_eq!(
        warnings(&events),
        vec![(BudgetKind::Tokens, BudgetScope::Input, 600.0)]
    );
    assert_eq!(stop_reason(&events), StopReason::BudgetExhausted);
    assert_eq!(h.model.request_count(), 4);
    // The note reached the model in the third request, not before.
    let requests = h.model.requests();
    let noted = |i: usize| {
        user_texts(&requests[i]).iter().any(|t| {
            t.starts_with(
                "Budget note: you have used 600 tokens of this task's token budget of 1000",
            )
        })
    };
    assert!(!noted(1));
    assert!(noted(2), "{:?}", user_texts(&requests[2]));
    // Without the note, the warning still fires and the model hears nothing.
    let turns = (0..2)
        .map(|_| call("echo", 300))
        .chain([ScriptedTurn::text("ok")])
        .collect();
    let config = SessionConfig::default()
        .with_input_budget(Budget::default().with_tokens(1_000))
        .with_budget_warning(0.5, false);
    let mut quiet = start(ScriptedModel::new(turns), profile(), config);
    quiet.session.submit("work").unwrap();
    let events = collect_input(&mut quiet.events);
    assert_eq!(warnings(&events).len(), 1);
    assert_eq!(stop_reason(&events), StopReason::Completed);
    let last = quiet.model.requests().pop().unwrap();
    assert!(
        !user_texts(&last)
            .iter()
            .any(|t| t.starts_with("Budget note"))
    );
}

#[test]
fn a_cost_budget_for_a_model_without_a_price_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let config = SessionConfig::default().with_session_budget(Budget::default().with_cost_usd(1.0));
    let client = support::client_for(ScriptedModel::new(vec![]));
    let err = Session::new(profile(), env.clone(), client.clone(), config.clone()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Configuration);
    assert!(
        err.to_string().contains("`scripted-model` has none"),
        "{err}"
    );
    // A fallback model needs a price too.
    let priced = config
        .with_price("scripted-model", Price::new(1.0, 1.0))
        .with_fallback_model(profile().with_model("unpriced-fallback"));
    let err = Session::new(profile(), env, client, priced).unwrap_err();
    assert!(
        err.to_string().contains("`unpriced-fallback` has none"),
        "{err}"
    );
}

#[test]
fn budget_events_and_figures_serialise_as_documented() {
    let turns = vec![call("echo", 100), call("echo", 100)];
    let config = SessionConfig::default().with_input_budget(Budget::default().with_tokens(150));
    let mut h = start(ScriptedModel::new(turns), profile(), config);
    h.session.submit("x").unwrap();
    let events = collect_input(&mut h.events);
    let json: Vec<serde_json::Value> = events
        .iter()
        .map(|e| serde_json::from_str(&e.to_string()).unwrap())
        .collect();
    let exhausted = json
        .iter()
        .find(|e| e["kind"] == "budget_exhausted")
        .unwrap();
    assert_eq!(
        exhausted["data"],
        json!({"which": "tokens", "scope": "input", "limit": 150.0, "used": 200.0})
    );
    let end = json.last().unwrap();
    assert_eq!(end["data"]["stop_reason"], "budget_exhausted");
    assert_eq!(end["data"]["tool_calls"], 2);
    assert!(end["data"]["duration_ms"].is_u64());
}
