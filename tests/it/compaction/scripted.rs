//! Compaction with the scripted model: 300 rounds in a 16k window, instruction retention,
//! no replay of completed work, a compaction request that cannot overflow.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::session::compaction::CompactionConfig;
use agentloop::session::{EventKind, HookDecision, Hooks, Session, SessionConfig, StopReason};
use agentloop::tools::{ToolInput, ToolOutput};
use agentloop::unstable::estimate_request_tokens;
use serde_json::{Value, json};

use super::*;
use support::session::{DirEnv, stop_reason, tool};

#[test]
fn three_hundred_rounds_in_a_16k_window_compact_and_never_exceed_the_window() {
    let rounds = Arc::new(AtomicUsize::new(0));
    let counter = rounds.clone();
    let model = ScriptedModel::dynamic(move |request| {
        if is_summary_request(request) {
            return ScriptedTurn::text(summarise(&summary_input(request)));
        }
        let n = counter.fetch_add(1, Ordering::SeqCst);
        if n < 300 {
            ScriptedTurn::tool_call(
                "echo",
                json!({"text": format!("round {n}: {}", "x".repeat(600))}),
            )
        } else {
            ScriptedTurn::text("all 300 rounds done")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let (session, mut events) = start(&model, dir.path(), config(16_000));
    session.submit("run the 300 rounds").unwrap();
    let seen = collect_input(&mut events);
    assert_eq!(stop_reason(&seen), StopReason::Completed);
    let done = compactions(&seen);
    assert!(done.len() >= 5, "{} compactions", done.len());
    assert!(done.iter().all(|c| c.reason == CompactionReason::Threshold));
    assert!(
        done.iter()
            .all(|c| c.tokens_after < c.tokens_before && c.turns_summarised > 0)
    );
    let requests = model.requests();
    assert_eq!(rounds.load(Ordering::SeqCst), 301);
    for (i, request) in requests.iter().enumerate() {
        let size = estimate_request_tokens(request);
        assert!(size <= 16_000, "request {i} is ~{size} tokens");
        if !is_summary_request(request) {
            assert_calls_answered(request, &format!("request {i}"));
        }
    }
    assert_eq!(
        first_requests_after_compactions(&requests).len(),
        done.len()
    );
    assert_eq!(session.history().check_tool_results(), Ok(()));
}

/// The 20 constraints: 7 in the project doc, 6 in the first message, 7 steered later.
fn rule(n: usize) -> String {
    format!("RULE-{n:02}: never touch file forbidden-{n}.txt")
}

#[test]
fn every_constraint_survives_every_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let doc: String = (1..=7).map(|n| format!("- {}\n", rule(n))).collect();
    std::fs::write(dir.path().join("AGENTS.md"), format!("# Rules\n{doc}")).unwrap();
    let first = format!(
        "Work through 120 echo rounds. Constraints:\n{}",
        (8..=13)
            .map(|n| format!("- {}\n", rule(n)))
            .collect::<String>()
    );
    let session_slot: Arc<OnceLock<Weak<Session>>> = Arc::new(OnceLock::new());
    let slot = session_slot.clone();
    let rounds = Arc::new(AtomicUsize::new(0));
    let model = ScriptedModel::dynamic(move |request| {
        if is_summary_request(request) {
            return ScriptedTurn::text(summarise(&summary_input(request)));
        }
        let n = rounds.fetch_add(1, Ordering::SeqCst);
        // Steer one constraint every 10 rounds, from round 5 on.
        if n >= 5 && (n - 5) % 10 == 0 && (n - 5) / 10 < 7 {
            if let Some(session) = slot.get().and_then(Weak::upgrade) {
                session.steer(rule(14 + (n - 5) / 10)).unwrap();
            }
        }
        if n < 120 {
            ScriptedTurn::tool_call(
                "echo",
                json!({"text": format!("round {n}: {}", "y".repeat(500))}),
            )
        } else {
            ScriptedTurn::text("done")
        }
    });
    let env = Arc::new(DirEnv::new(dir.path()));
    let client = support::client_for(model.clone());
    let session = Arc::new(Session::new(profile(), env, client, config(12_000)).unwrap());
    session_slot.set(Arc::downgrade(&session)).unwrap();
    let mut events = session.events();
    session.submit(first.clone()).unwrap();
    let seen = collect_input(&mut events);
    assert_eq!(stop_reason(&seen), StopReason::Completed);
    let requests = model.requests();
    let pairs = first_requests_after_compactions(&requests);
    assert!(pairs.len() >= 3, "{} compactions", pairs.len());
    for (summary_at, next) in pairs {
        let sent = request_text(&requests[next]);
        let input = summary_input(&requests[summary_at]);
        for n in 1..=13 {
            assert!(
                sent.contains(&rule(n)),
                "{} missing after compaction at request {summary_at}",
                rule(n)
            );
        }
        assert!(sent.contains(&first), "the first message is verbatim");
        for n in 14..=20 {
            let steered_before = requests[..summary_at]
                .iter()
                .any(|r| request_text(r).contains(&rule(n)));
            if steered_before {
                assert!(
                    sent.contains(&rule(n)) || input.contains(&rule(n)),
                    "{} neither kept nor in the summary request at {summary_at}",
                    rule(n)
                );
            }
        }
    }
    // Every steered constraint reached the model.
    let last = request_text(requests.last().unwrap());
    for n in 14..=20 {
        assert!(last.contains(&rule(n)), "{} missing at the end", rule(n));
    }
}

#[test]
fn completed_steps_are_never_repeated_after_compaction() {
    const STEPS: usize = 60;
    let executed: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = executed.clone();
    let step_tool = tool("step", move |input, _ctx| {
        let ToolInput::Json(args) = input else {
            return Err("json expected".into());
        };
        let signature = format!("step {}", Value::Object(args.clone()));
        log.lock().unwrap().push(signature);
        Ok(ToolOutput::text(format!(
            "ok: {} written\n{}",
            args["name"],
            "z".repeat(1_500)
        )))
    });
    let summary_inputs: Arc<Mutex<Vec<String>>> = Arc::default();
    let inputs = summary_inputs.clone();
    let model = ScriptedModel::dynamic(move |request| {
        if is_summary_request(request) {
            let input = summary_input(request);
            inputs.lock().unwrap().push(input.clone());
            return ScriptedTurn::text(summarise(&input));
        }
        // The model does the first step the conversation does not show as done.
        let text = request_text(request);
        let done: HashSet<usize> = (1..=STEPS)
            .filter(|n| {
                text.contains(&format!("\"step-{n}\""))
                    || text.contains(&format!("ok: \"step-{n}\""))
                    || summary_lists(&text, *n)
            })
            .collect();
        match (1..=STEPS).find(|n| !done.contains(n)) {
            Some(n) => ScriptedTurn::tool_call("step", json!({"name": format!("step-{n}")})),
            None => ScriptedTurn::text("all steps done"),
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let profile = profile().with_tool(step_tool);
    let env = Arc::new(DirEnv::new(dir.path()));
    let client = support::client_for(model.clone());
    let session = Session::new(profile, env, client, config(12_000)).unwrap();
    let mut events = session.events();
    session.submit("do steps 1 to 60, each once").unwrap();
    let seen = collect_input(&mut events);
    assert_eq!(stop_reason(&seen), StopReason::Completed);
    assert!(compactions(&seen).len() >= 2);
    let executed = executed.lock().unwrap().clone();
    let unique: HashSet<&String> = executed.iter().collect();
    assert_eq!(
        unique.len(),
        executed.len(),
        "a completed step ran again: {executed:?}"
    );
    assert_eq!(executed.len(), STEPS);
    for input in summary_inputs.lock().unwrap().iter() {
        assert!(input.contains("# Completed actions"), "{input}");
        assert!(input.contains("`step` {\"name\":\"step-"), "{input}");
        assert!(
            input.contains("-> succeeded: ok: \"step-"),
            "actions with their outcome"
        );
    }
}

/// Whether a summary in `text` lists step `n` as done.
fn summary_lists(text: &str, n: usize) -> bool {
    text.lines()
        .filter_map(|l| l.split("done-steps: ").nth(1))
        .any(|list| {
            list.split(',')
                .any(|s| s.trim().parse::<usize>().ok() == Some(n))
        })
}

/// A transcript whose history holds `rounds` tool rounds of `bytes`-byte outputs.
fn big_transcript(path: &std::path::Path, rounds: usize, bytes: usize) {
    let mut lines = vec![
        r#"{"type":"header","version":1,"session_id":"big","profile":"scripted","model":"scripted-model","working_directory":"/tmp","started_at":"2026-01-01T00:00:00.000Z","config":{}}"#.to_string(),
        r#"{"type":"turn","turn":{"type":"user","content":"read everything","timestamp":"2026-01-01T00:00:00.000Z"}}"#.to_string(),
    ];
    for i in 0..rounds {
        let call = json!({"type":"turn","turn":{"type":"assistant","content":"","tool_calls":[{"id":format!("c{i}"),"name":"echo","arguments":{"text":format!("part {i}")}}],"timestamp":"2026-01-01T00:00:00.000Z"}});
        let output = format!("part {i} begins\n{}\npart {i} ends", "o".repeat(bytes));
        let result = json!({"type":"turn","turn":{"type":"tool_results","results":[{"tool_call_id":format!("c{i}"),"content":output,"is_error":false,"name":"echo"}],"timestamp":"2026-01-01T00:00:00.000Z"}});
        lines.push(call.to_string());
        lines.push(result.to_string());
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn compact_resumed(rounds: usize, bytes: usize) -> (Vec<Compaction>, Vec<agentloop::llm::Request>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.jsonl");
    big_transcript(&path, rounds, bytes);
    let model = ScriptedModel::dynamic(|request| {
        if is_summary_request(request) {
            ScriptedTurn::text(summarise(&summary_input(request)))
        } else {
            ScriptedTurn::text("continued")
        }
    });
    let env = Arc::new(DirEnv::new(dir.path()));
    let client = support::client_for(model.clone());
    let session = Session::resume(&path, profile(), env, client, config(16_000)).unwrap();
    let mut events = session.events();
    session.submit("go on").unwrap();
    let seen = collect_input(&mut events);
    assert_eq!(stop_reason(&seen), StopReason::Completed);
    (compactions(&seen), model.requests())
}

#[test]
fn tool_outputs_three_times_the_window_still_compact_by_cutting_them_middle_out() {
    // 24 outputs of 8 KB: ~48 000 tokens of tool output against a 16 000-token window.
    let (done, requests) = compact_resumed(24, 8_000);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].fallback, CompactionFallback::Truncated);
    let summary = requests.iter().find(|r| is_summary_request(r)).unwrap();
    assert!(estimate_request_tokens(summary) <= 16_000);
    let input = summary_input(summary);
    assert!(input.contains("bytes cut from the middle"));
    assert!(
        input.contains("part 0 begins") && input.contains("part 0 ends"),
        "head and tail kept"
    );
    for request in &requests {
        assert!(estimate_request_tokens(request) <= 16_000);
    }
}

#[test]
fn a_history_too_large_even_cut_drops_the_oldest_turns_with_a_marker() {
    // 1 500 rounds of 400-byte outputs: cut to the minimum they still do not fit.
    let (done, requests) = compact_resumed(1_500, 400);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].fallback, CompactionFallback::Dropped);
    let summary = requests.iter().find(|r| is_summary_request(r)).unwrap();
    assert!(estimate_request_tokens(summary) <= 16_000);
    let input = summary_input(summary);
    assert!(
        input.contains("did not fit this request and were left out"),
        "the marker"
    );
    let newest = (0..1_500)
        .rev()
        .find(|i| input.contains(&format!("part {i} begins")));
    assert!(
        newest > Some(1_400),
        "the newest summarised turns are kept: {newest:?}"
    );
    assert!(!input.contains("part 0 begins"), "the oldest were dropped");
    for request in &requests {
        assert!(estimate_request_tokens(request) <= 16_000);
    }
}

/// A session that ran `rounds` echo rounds with a 200-byte payload in a large window.
fn ran_rounds(
    rounds: usize,
    hooks: Hooks,
    summary: impl Fn(&str) -> String + Send + Sync + 'static,
) -> (Session, agentloop::session::Events, ScriptedModel) {
    let counter = AtomicUsize::new(0);
    let model = ScriptedModel::dynamic(move |request| {
        if is_summary_request(request) {
            return ScriptedTurn::text(summary(&summary_input(request)));
        }
        let n = counter.fetch_add(1, Ordering::SeqCst);
        if n < rounds {
            ScriptedTurn::tool_call(
                "echo",
                json!({"text": format!("step-{n} {}", "p".repeat(200))}),
            )
        } else {
            ScriptedTurn::text("finished")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let client = support::client_for(model.clone());
    let config = SessionConfig::default()
        .with_loop_detection(false)
        .with_compaction(CompactionConfig::default().with_recent_tokens(100))
        .with_hooks(hooks);
    let session = Session::new(profile(), env, client, config).unwrap();
    let mut events = session.events();
    session.submit("do the steps").unwrap();
    assert_eq!(
        stop_reason(&collect_input(&mut events)),
        StopReason::Completed
    );
    (session, events, model)
}

#[test]
fn compact_on_demand_summarises_and_the_hook_sees_and_replaces_the_summary() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let hooks = Hooks::new().with_post_compact(move |input| {
        let summary = input.summary.clone().unwrap_or_default();
        log.lock().unwrap().push(summary.clone());
        assert_eq!(input.compaction_reason(), Some(CompactionReason::Manual));
        assert!(
            input
                .compaction_input()
                .is_some_and(|input| input.contains("# Completed actions"))
        );
        HookDecision::ReplaceSummary(format!("{summary}\n(reviewed by the host)"))
    });
    let (session, mut events, model) = ran_rounds(12, hooks, summarise);
    assert_eq!(model.request_count(), 13, "no compaction in a 200k window");
    session.compact().unwrap();
    let done = compactions(&collect_until(&mut events, |e| {
        matches!(e.kind, EventKind::ContextCompactionEnd { .. })
    }));
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].reason, CompactionReason::Manual);
    assert!(done[0].turns_summarised > 0);
    assert!(done[0].summary.ends_with("(reviewed by the host)"));
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the hook saw the proposal once"
    );
    let history = session.history();
    let summary = history
        .turns()
        .iter()
        .find_map(|t| match t {
            agentloop::session::Turn::Summary(s) => Some(s.content.clone()),
            _ => None,
        })
        .expect("a summary turn");
    assert!(
        summary.starts_with("[Context compaction]"),
        "the model is told plainly"
    );
    assert!(summary.contains("(reviewed by the host)"));
    assert_eq!(history.check_tool_results(), Ok(()));
}

#[test]
fn a_summary_larger_than_what_it_replaces_is_rejected_for_a_record_of_the_actions() {
    let (session, mut events, _model) = ran_rounds(12, Hooks::new(), |_| "padding ".repeat(20_000));
    session.compact().unwrap();
    let seen = collect_until(&mut events, |e| {
        matches!(e.kind, EventKind::ContextCompactionEnd { .. })
    });
    let warned = seen.iter().any(|e| {
        matches!(&e.kind, EventKind::Warning { code, message } if code == "compaction" && message.contains("rejected"))
    });
    assert!(warned, "{:?}", names(&seen));
    let done = compactions(&seen);
    assert_eq!(done[0].fallback, CompactionFallback::Dropped);
    assert!(!done[0].summary.contains("padding"));
    assert!(
        done[0].summary.contains("`echo`"),
        "the completed actions: {}",
        done[0].summary
    );
    assert!(done[0].tokens_after < done[0].tokens_before);
}
