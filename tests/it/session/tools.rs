//! Tool execution inside the session: parallel rounds, failures as results, approval,
//! live output, timeouts handed to tools.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use agentloop::exec::OutputStream;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Request, Role, ToolResult};
use agentloop::session::{Approval, EventKind, SessionConfig, SessionState, StopReason};
use agentloop::tools::{ToolInput, ToolOutput};
use serde_json::{Value, json};

use support::GENEROUS;
use support::session::*;

/// The tool results the model received in `request`, in message order.
fn tool_results(request: &Request) -> Vec<ToolResult> {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .flat_map(|m| m.content.iter())
        .filter_map(|p| match p {
            agentloop::llm::ContentPart::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// A tool that waits `ms` milliseconds of its `ms` argument, then answers its `name`.
fn sleeper() -> agentloop::tools::RegisteredTool {
    tool("sleeper", |input, ctx| {
        let ToolInput::Json(args) = input else {
            return Err("expected JSON".into());
        };
        let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
        // The tool's own work: waiting is what it does (cut short by a cancel).
        ctx.cancel.wait_timeout(Duration::from_millis(ms));
        Ok(ToolOutput::text(
            args.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        ))
    })
}

/// A tool whose two calls wait for each other: each counts itself in, then waits for the
/// other, and answers its `name`, or `alone` when the other never came, which is what
/// calls run one after another see. It waits half of [`GENEROUS`], so that the input still
/// ends within the ceiling and the results say what happened.
fn meeting() -> agentloop::tools::RegisteredTool {
    let arrived = Arc::new((Mutex::new(0), Condvar::new()));
    tool("meeting", move |input, _ctx| {
        let ToolInput::Json(args) = input else {
            return Err("expected JSON".into());
        };
        let (count, changed) = &*arrived;
        let mut count = count.lock().unwrap();
        *count += 1;
        changed.notify_all();
        let (count, _) = changed
            .wait_timeout_while(count, GENEROUS / 2, |count| *count < 2)
            .unwrap();
        let name = args.get("name").and_then(Value::as_str).unwrap_or("");
        Ok(ToolOutput::text(if *count < 2 { "alone" } else { name }))
    })
}

fn two_sleepers(first_ms: u64, second_ms: u64) -> Vec<ScriptedTurn> {
    vec![
        ScriptedTurn::tool_call("sleeper", json!({"ms": first_ms, "name": "first"}))
            .with_tool_call("sleeper", json!({"ms": second_ms, "name": "second"})),
        ScriptedTurn::text("both done"),
    ]
}

#[test]
fn parallel_tool_calls_run_at_the_same_time_and_results_keep_call_order() {
    let profile = profile()
        .with_tool(meeting())
        .with_parallel_tool_calls(true);
    let turns = vec![
        ScriptedTurn::tool_call("meeting", json!({"name": "first"}))
            .with_tool_call("meeting", json!({"name": "second"})),
        ScriptedTurn::text("both done"),
    ];
    let mut h = harness_with(ScriptedModel::new(turns), profile, SessionConfig::default());
    h.session.submit("meet").unwrap();
    let events = collect_input(&mut h.events);
    assert_eq!(stop_reason(&events), StopReason::Completed);
    // Each call waited for the other: both answered their name only if they ran at once.
    let results = tool_results(&h.model.requests()[1]);
    let contents: Vec<&str> = results.iter().map(|r| r.content.as_str()).collect();
    assert_eq!(contents, ["first", "second"]);
    // Every call's start precedes its end.
    for id in results.iter().map(|r| r.tool_call_id.clone()) {
        let start = events.iter().position(
            |e| matches!(&e.kind, EventKind::ToolCallStart { call_id, .. } if *call_id == id),
        );
        let end = events.iter().position(
            |e| matches!(&e.kind, EventKind::ToolCallEnd { call_id, .. } if *call_id == id),
        );
        assert!(start.unwrap() < end.unwrap());
    }
}

#[test]
fn parallel_results_are_in_call_order_even_when_the_later_call_finishes_first() {
    let profile = profile()
        .with_tool(sleeper())
        .with_parallel_tool_calls(true);
    let h = harness_with(
        ScriptedModel::new(two_sleepers(300, 0)),
        profile,
        SessionConfig::default(),
    );
    h.session.run("go").unwrap();
    let requests = h.model.requests();
    let calls: Vec<String> = requests[1].messages[2]
        .tool_calls()
        .iter()
        .map(|c| c.id.clone())
        .collect();
    let results = tool_results(&requests[1]);
    let ids: Vec<String> = results.iter().map(|r| r.tool_call_id.clone()).collect();
    assert_eq!(ids, calls);
    assert_eq!(results[0].content, "first");
}

#[test]
fn tool_calls_run_one_after_another_when_the_profile_forbids_parallel() {
    let profile = profile()
        .with_tool(sleeper())
        .with_parallel_tool_calls(false);
    let h = harness_with(
        ScriptedModel::new(two_sleepers(300, 300)),
        profile,
        SessionConfig::default(),
    );
    let started = Instant::now();
    h.session.run("go").unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "sequential"
    );
}

fn panicking_tool() -> agentloop::tools::RegisteredTool {
    tool("explode", |_input, _ctx| panic!("boom from the tool"))
}

#[test]
fn a_panicking_tool_produces_an_error_result_not_a_dead_worker() {
    for parallel in [false, true] {
        let turns = vec![
            ScriptedTurn::tool_call("explode", json!({}))
                .with_tool_call("echo", json!({"text": "fine"})),
            ScriptedTurn::text("recovered"),
            ScriptedTurn::text("still alive"),
        ];
        let profile = profile()
            .with_tool(panicking_tool())
            .with_parallel_tool_calls(parallel);
        let h = harness_with(ScriptedModel::new(turns), profile, SessionConfig::default());
        let outcome = h.session.run("explode").unwrap();
        assert_eq!(outcome.text, "recovered");
        let results = tool_results(&h.model.requests()[1]);
        assert!(results[0].is_error, "parallel={parallel}");
        assert!(
            results[0].content.contains("boom from the tool"),
            "{}",
            results[0].content
        );
        assert!(!results[1].is_error);
        // The worker is alive: a following input works.
        assert_eq!(h.session.run("again").unwrap().text, "still alive");
    }
}

#[test]
fn unknown_tool_calls_return_an_error_result_to_the_model() {
    let h = harness(vec![
        ScriptedTurn::tool_call("no_such_tool", json!({})),
        ScriptedTurn::text("sorry"),
    ]);
    let outcome = h.session.run("x").unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Completed);
    let result = &tool_results(&h.model.requests()[1])[0];
    assert!(result.is_error);
    assert!(
        result.content.contains("Unknown tool: no_such_tool"),
        "{}",
        result.content
    );
}

#[test]
fn tool_execution_errors_become_error_results_the_model_recovers_from() {
    let attempts = Arc::new(AtomicUsize::new(0));
    let counter = attempts.clone();
    let flaky = tool("flaky", move |_input, _ctx| {
        if counter.fetch_add(1, Ordering::SeqCst) == 0 {
            Err("file not found: notes.txt; list the directory to find the right name".into())
        } else {
            Ok(ToolOutput::text("contents"))
        }
    });
    let turns = vec![
        ScriptedTurn::tool_call("flaky", json!({})),
        ScriptedTurn::tool_call("flaky", json!({})),
        ScriptedTurn::text("got it"),
    ];
    let mut h = harness_with(
        ScriptedModel::new(turns),
        profile().with_tool(flaky),
        SessionConfig::default(),
    );
    h.session.submit("read").unwrap();
    let events = collect_input(&mut h.events);
    let ends: Vec<(bool, Option<String>)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnd {
                is_error, error, ..
            } => Some((*is_error, error.clone())),
            _ => None,
        })
        .collect();
    assert!(ends[0].0);
    assert!(ends[0].1.as_deref().unwrap().contains("file not found"));
    assert!(!ends[1].0);
    let first = &tool_results(&h.model.requests()[1])[0];
    assert!(first.is_error && first.content.contains("file not found"));
    assert_eq!(stop_reason(&events), StopReason::Completed);
}

#[test]
fn denied_tool_call_reaches_the_model_as_an_error_result_with_the_reason() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let guarded = tool("rm", move |_input, _ctx| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput::text("deleted"))
    });
    let config = SessionConfig::default().with_approval(|call| {
        if call.name == "rm" {
            Approval::Deny("deleting files is not allowed in this repository".into())
        } else {
            Approval::Allow
        }
    });
    let h = harness_with(
        ScriptedModel::new(vec![
            ScriptedTurn::tool_call("rm", json!({})).with_tool_call("echo", json!({"text": "ok"})),
            ScriptedTurn::text("understood"),
        ]),
        profile().with_tool(guarded),
        config,
    );
    h.session.run("clean up").unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 0, "a denied call never runs");
    let results = tool_results(&h.model.requests()[1]);
    assert!(results[0].is_error);
    assert!(
        results[0]
            .content
            .contains("deleting files is not allowed in this repository"),
        "{}",
        results[0].content
    );
    assert!(!results[1].is_error, "allowed calls still run");
}

#[test]
fn ask_blocks_the_call_until_the_host_answers_through_the_event() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let guarded = tool("deploy", move |_input, _ctx| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput::text("deployed"))
    });
    let config = SessionConfig::default().with_approval(|_| Approval::Ask);
    let mut h = harness_with(
        ScriptedModel::new(vec![
            ScriptedTurn::tool_call("deploy", json!({"env": "prod"})),
            ScriptedTurn::tool_call("deploy", json!({"env": "staging"})),
            ScriptedTurn::text("done"),
        ]),
        profile().with_tool(guarded),
        config,
    );
    h.session.submit("deploy").unwrap();
    let events = collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    });
    let EventKind::ApprovalRequested {
        tool_name,
        arguments,
        responder,
        ..
    } = &events.last().unwrap().kind
    else {
        unreachable!()
    };
    assert_eq!(tool_name, "deploy");
    assert_eq!(arguments, &json!({"env": "prod"}));
    assert_eq!(h.session.state(), SessionState::AwaitingInput);
    assert!(
        h.events.recv_timeout(Duration::from_millis(200)).is_err(),
        "nothing happens until the host answers"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert!(responder.approve());

    // Second call: deny through the responder.
    let events = collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    });
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the approved call ran");
    assert!(names(&events).contains(&"tool_call_end"));
    let EventKind::ApprovalRequested { responder, .. } = &events.last().unwrap().kind else {
        unreachable!()
    };
    assert!(responder.deny("not on a Friday"));
    assert!(!responder.approve(), "the first answer wins");
    collect_input(&mut h.events);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    let results = tool_results(&h.model.requests()[2]);
    assert!(!results[0].is_error);
    assert!(results[1].is_error && results[1].content.contains("not on a Friday"));
    assert_eq!(h.session.state(), SessionState::Idle);
}

#[test]
fn interrupt_while_awaiting_approval_answers_the_call_as_interrupted() {
    let config = SessionConfig::default().with_approval(|_| Approval::Ask);
    let mut h = harness_with(
        ScriptedModel::new(vec![
            ScriptedTurn::tool_call("echo", json!({"text": "x"})),
            ScriptedTurn::text("after"),
        ]),
        profile(),
        config,
    );
    h.session.submit("go").unwrap();
    let events = collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    });
    h.session.interrupt();
    let rest = collect_input(&mut h.events);
    assert_eq!(stop_reason(&rest), StopReason::Interrupted);
    let history = h.session.history();
    assert_eq!(history.check_tool_results(), Ok(()));
    // Answering late does nothing.
    if let EventKind::ApprovalRequested { responder, .. } = &events.last().unwrap().kind {
        assert!(!responder.approve());
    }
    assert_eq!(h.session.run("next").unwrap().text, "after");
}

#[test]
fn approval_request_ignored_by_a_run_only_host_counts_as_a_denial() {
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(DirEnv::new(dir.path()));
    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "x"})),
        ScriptedTurn::text("fine"),
    ]);
    let client = agentloop::llm::Client::new().with_provider(model.clone());
    let config = SessionConfig::default().with_approval(|_| Approval::Ask);
    let session = agentloop::session::Session::new(profile(), env, client, config).unwrap();
    let outcome = session.run("go").unwrap();
    assert_eq!(outcome.text, "fine");
    let result = &tool_results(&model.requests()[1])[0];
    assert!(
        result.is_error && result.content.contains("denied"),
        "{}",
        result.content
    );
}

#[test]
fn tool_output_chunks_are_emitted_as_output_deltas_between_start_and_end() {
    let streaming = tool("stream", |_input, ctx| {
        (ctx.on_output)(OutputStream::Stdout, "line 1\n".as_bytes());
        // A character split across two chunks arrives whole.
        let snow = "☃\n".as_bytes();
        (ctx.on_output)(OutputStream::Stdout, &snow[..1]);
        (ctx.on_output)(OutputStream::Stdout, &snow[1..]);
        (ctx.on_output)(OutputStream::Stderr, b"warning\n");
        Ok(ToolOutput::text("line 1\n☃\n"))
    });
    let mut h = harness_with(
        ScriptedModel::new(vec![
            ScriptedTurn::tool_call("stream", json!({})),
            ScriptedTurn::text("ok"),
        ]),
        profile().with_tool(streaming),
        SessionConfig::default(),
    );
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let deltas: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallOutputDelta { stream, delta, .. } => {
                Some((stream.clone(), delta.clone()))
            }
            _ => None,
        })
        .collect();
    let stdout: String = deltas
        .iter()
        .filter(|(s, _)| s == "stdout")
        .map(|(_, d)| d.as_str())
        .collect();
    assert_eq!(stdout, "line 1\n☃\n");
    assert!(deltas.contains(&("stderr".to_string(), "warning\n".to_string())));
    let start = position(&events, "tool_call_start");
    let end = position(&events, "tool_call_end");
    let first_delta = position(&events, "tool_call_output_delta");
    assert!(start < first_delta && first_delta < end);
}

#[test]
fn tools_get_the_profile_default_timeout_unless_the_config_sets_one() {
    let timeouts = || {
        tool("timeouts", |_input, ctx| {
            Ok(ToolOutput::text(format!(
                "{} {}",
                ctx.default_timeout.as_millis(),
                ctx.max_timeout.as_millis()
            )))
        })
    };
    let turns = || {
        vec![
            ScriptedTurn::tool_call("timeouts", json!({})),
            ScriptedTurn::text("ok"),
        ]
    };
    let cases = [
        (None, None, "10000 600000"),
        (Some(Duration::from_secs(120)), None, "120000 600000"),
        (Some(Duration::from_secs(120)), Some(5_000), "5000 900000"),
    ];
    for (profile_default, config_ms, expected) in cases {
        let mut profile = profile().with_tool(timeouts());
        profile.default_command_timeout = profile_default;
        let mut config = SessionConfig::default();
        if let Some(ms) = config_ms {
            config = config
                .with_default_command_timeout(Duration::from_millis(ms))
                .with_max_command_timeout(Duration::from_secs(900));
        }
        let h = harness_with(ScriptedModel::new(turns()), profile, config);
        h.session.run("go").unwrap();
        let result = &tool_results(&h.model.requests()[1])[0];
        assert_eq!(result.content, expected);
    }
}

#[test]
fn invalid_tool_arguments_return_an_error_result() {
    let h = harness(vec![
        ScriptedTurn::from_parts(vec![agentloop::llm::ContentPart::ToolCall(
            agentloop::llm::ToolCall::new("c1", "echo", Value::String("{not json".into())),
        )]),
        ScriptedTurn::text("fixed"),
    ]);
    h.session.run("x").unwrap();
    let result = &tool_results(&h.model.requests()[1])[0];
    assert!(result.is_error);
    assert!(
        result.content.contains("Invalid arguments"),
        "{}",
        result.content
    );
}

/// The approval hook is a `pre_tool_use` hook: a panic in it is a warning and a denial.
#[test]
fn a_panicking_approval_hook_produces_an_error_result_not_a_dead_worker() {
    let config = SessionConfig::default().with_approval(|call| {
        if call.name == "echo" {
            panic!("the hook broke")
        }
        Approval::Allow
    });
    let h = harness_with(
        ScriptedModel::new(vec![
            ScriptedTurn::tool_call("echo", json!({"text": "x"})),
            ScriptedTurn::text("recovered"),
        ]),
        profile(),
        config,
    );
    let outcome = h.session.run("go").unwrap();
    assert_eq!(outcome.text, "recovered");
    let result = &tool_results(&h.model.requests()[1])[0];
    assert!(
        result.is_error && result.content.contains("the hook panicked: the hook broke"),
        "{}",
        result.content
    );
    assert_eq!(h.session.history().check_tool_results(), Ok(()));
}
