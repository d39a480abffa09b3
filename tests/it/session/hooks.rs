//! Lifecycle hooks through real sessions against the loopback server: each hook fires for
//! a built-in tool (`read_file`), a custom tool (`echo`) and a subagent tool
//! (`spawn_agent`), on the sequential and the parallel path, and each decision does what it
//! says in the next request body; a panicking hook is a warning and a denial.

use std::sync::{Arc, Mutex};

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::session::{
    EventKind, HookDecision, HookInput, Hooks, PromptSource, Session, SessionConfig, SessionEvent,
    StopReason,
};
use serde_json::{Value, json};

use support::Server;
use support::parity_kit::{Kit, ended};
use support::session::{collect_input, collect_to_end, echo_tool, stop_reason};
use support::turns::function;

const KIT: Kit = Kit::Anthropic;

/// A session of the Anthropic profile plus the custom `echo` tool, over a real directory
/// holding `a.txt` and `b.txt`.
struct HookRun {
    session: Session,
    events: agentloop::session::Events,
    server: Server,
    _dir: tempfile::TempDir,
}

impl HookRun {
    fn start(server: Server, parallel: bool, config: SessionConfig) -> HookRun {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha file\n").unwrap();
        std::fs::write(dir.path().join("b.txt"), "bravo file\n").unwrap();
        let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
        let profile = KIT
            .profile()
            .with_tool(echo_tool())
            .with_parallel_tool_calls(parallel);
        let session = Session::new(profile, env, KIT.client(&server), config).unwrap();
        let events = session.events();
        HookRun {
            session,
            events,
            server,
            _dir: dir,
        }
    }

    fn input(&mut self, text: &str) -> Vec<SessionEvent> {
        self.session.submit(text).unwrap();
        collect_input(&mut self.events)
    }

    /// The parent's request bodies (the child's carry `CHILD-TASK` only).
    fn parent_bodies(&self) -> Vec<Value> {
        self.server
            .requests()
            .iter()
            .map(|r| r.json().clone())
            .filter(|b| b.to_string().contains("PARENT"))
            .collect()
    }
}

/// One round calling a built-in, a custom and a subagent tool, then a text answer; the
/// subagent answers with text.
fn three_kinds_server() -> Server {
    Server::start_routed(
        vec![
            (
                "PARENT",
                vec![
                    KIT.calls(&[
                        function("c_read", "read_file", json!({"file_path": "a.txt"})),
                        function("c_echo", "echo", json!({"text": "echoed text"})),
                        function("c_sub", "spawn_agent", json!({"task": "CHILD-TASK say hi"})),
                    ]),
                    KIT.text("All three ran."),
                ],
            ),
            ("CHILD-TASK", vec![KIT.text("hi from the child")]),
        ],
        vec![],
    )
}

type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// Records `(tool name, call id)` of every tool hook call.
fn record(seen: &Seen, input: &HookInput) {
    seen.lock().unwrap().push((
        input.tool_name.clone().unwrap_or_default(),
        input.call_id.clone().unwrap_or_default(),
    ));
}

fn tools_seen(seen: &Seen) -> Vec<String> {
    let mut names: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    names.sort();
    names
}

fn decisions(events: &[SessionEvent], hook: &str) -> Vec<(Option<String>, HookDecision)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::HookDecision {
                hook: h,
                call_id,
                decision,
            } if h == hook => Some((call_id.clone(), decision.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn pre_tool_use_denies_replaces_and_allows_on_every_tool_kind_and_both_paths() {
    for parallel in [false, true] {
        let seen = Seen::default();
        let hook_seen = seen.clone();
        let hooks = Hooks::new().with_pre_tool_use(move |input| {
            record(&hook_seen, input);
            match input.tool_name.as_deref() {
                Some("echo") => HookDecision::Deny("echo is not allowed here".into()),
                Some("read_file") => HookDecision::ReplaceArguments(json!({"file_path": "b.txt"})),
                _ => HookDecision::Continue,
            }
        });
        let mut run = HookRun::start(
            three_kinds_server(),
            parallel,
            SessionConfig::default().with_hooks(hooks),
        );
        let events = run.input("PARENT use the three tools");
        assert_eq!(
            stop_reason(&events),
            StopReason::Completed,
            "parallel={parallel}"
        );
        assert_eq!(
            tools_seen(&seen),
            ["echo", "read_file", "spawn_agent"],
            "parallel={parallel}"
        );

        let ends = ended(&events);
        let by_name = |name: &str| ends.iter().find(|e| e.tool_name == name).unwrap().clone();
        // The executor received the replaced arguments: it read b.txt, not a.txt.
        assert!(
            by_name("read_file").text.contains("bravo file"),
            "{:?}",
            by_name("read_file")
        );
        assert!(!by_name("read_file").text.contains("alpha"));
        // The denial is an error result with the reason...
        assert!(by_name("echo").is_error);
        assert!(by_name("echo").text.contains("echo is not allowed here"));
        // ...and the subagent tool ran.
        assert!(
            !by_name("spawn_agent").is_error,
            "{:?}",
            by_name("spawn_agent")
        );

        // What the model saw in the next request.
        let bodies = run.parent_bodies();
        assert_eq!(bodies.len(), 2);
        let outputs = KIT.tool_outputs(&bodies[1]);
        assert_eq!(outputs.len(), 3);
        assert!(outputs[0].text.contains("bravo file"));
        assert_eq!(outputs[1].is_error, Some(true));
        assert!(outputs[1].text.contains("echo is not allowed here"));

        // One HOOK_DECISION per call, naming the call.
        let made = decisions(&events, "pre_tool_use");
        assert_eq!(made.len(), 3, "{made:?}");
        assert!(made.contains(&(
            Some("c_echo".into()),
            HookDecision::Deny("echo is not allowed here".into())
        )));
        assert!(made.contains(&(
            Some("c_read".into()),
            HookDecision::ReplaceArguments(json!({"file_path": "b.txt"}))
        )));
        assert!(made.contains(&(Some("c_sub".into()), HookDecision::Continue)));
    }
}

#[test]
fn replaced_arguments_are_validated_against_the_schema() {
    let hooks = Hooks::new().with_pre_tool_use(|input| match input.tool_name.as_deref() {
        Some("read_file") => HookDecision::ReplaceArguments(json!({"file_path": 42})),
        _ => HookDecision::Continue,
    });
    let server = Server::start(vec![
        KIT.calls(&[function(
            "c_read",
            "read_file",
            json!({"file_path": "a.txt"}),
        )]),
        KIT.text("ok"),
    ]);
    let mut run = HookRun::start(server, false, SessionConfig::default().with_hooks(hooks));
    let events = run.input("PARENT read it");
    let end = &ended(&events)[0];
    assert!(end.is_error);
    assert!(end.text.contains("not valid"), "{}", end.text);
}

#[test]
fn post_tool_use_sees_full_output_and_replaces_or_annotates_what_the_model_sees() {
    for parallel in [false, true] {
        let seen = Seen::default();
        let outputs_seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let (hook_seen, hook_outputs) = (seen.clone(), outputs_seen.clone());
        let hooks = Hooks::new().with_post_tool_use(move |input| {
            record(&hook_seen, input);
            hook_outputs
                .lock()
                .unwrap()
                .push(input.output.clone().unwrap_or_default());
            match input.tool_name.as_deref() {
                Some("echo") => HookDecision::ReplaceOutput("REPLACED BY THE HOOK".into()),
                Some("read_file") => HookDecision::AddContext("lint: a.txt is fine".into()),
                Some("spawn_agent") => HookDecision::AddContext("SUBAGENT NOTED".into()),
                _ => HookDecision::Continue,
            }
        });
        let mut run = HookRun::start(
            three_kinds_server(),
            parallel,
            SessionConfig::default().with_hooks(hooks),
        );
        let events = run.input("PARENT use the three tools");
        assert_eq!(
            tools_seen(&seen),
            ["echo", "read_file", "spawn_agent"],
            "parallel={parallel}"
        );
        assert!(
            outputs_seen
                .lock()
                .unwrap()
                .iter()
                .any(|o| o == "echoed text")
        );

        // The host still gets the full, original output.
        let ends = ended(&events);
        let echo = ends.iter().find(|e| e.tool_name == "echo").unwrap();
        assert_eq!(echo.text, "echoed text");

        // The next request holds what the hooks decided.
        let bodies = run.parent_bodies();
        let outputs = KIT.tool_outputs(&bodies[1]);
        assert!(outputs[0].text.contains("alpha file"));
        assert!(
            outputs[0].text.ends_with("lint: a.txt is fine"),
            "{}",
            outputs[0].text
        );
        assert_eq!(outputs[1].text, "REPLACED BY THE HOOK");
        assert!(
            outputs[2].text.ends_with("SUBAGENT NOTED"),
            "{}",
            outputs[2].text
        );
        assert_eq!(decisions(&events, "post_tool_use").len(), 3);
    }
}

#[test]
fn user_prompt_submit_rewrites_adds_context_and_blocks_inputs_steers_and_follow_ups() {
    let sources = Arc::new(Mutex::new(Vec::new()));
    let hook_sources = sources.clone();
    let hooks = Hooks::new().with_user_prompt_submit(move |input| {
        hook_sources.lock().unwrap().push(input.source.unwrap());
        let prompt = input.prompt.clone().unwrap();
        if prompt.contains("forbidden") {
            HookDecision::Deny("forbidden inputs are blocked".into())
        } else if prompt.starts_with("PARENT") {
            HookDecision::ReplacePrompt(format!("{prompt} (rewritten)"))
        } else {
            HookDecision::AddContext("Context: the repo uses tabs.".into())
        }
    });
    let server = Server::start(vec![KIT.text("first answer"), KIT.text("second answer")]);
    let mut run = HookRun::start(server, false, SessionConfig::default().with_hooks(hooks));

    let events = run.input("PARENT hello");
    assert_eq!(stop_reason(&events), StopReason::Completed);
    let bodies = run.parent_bodies();
    assert_eq!(KIT.last_user_text(&bodies[0]), "PARENT hello (rewritten)");

    // A blocked input makes no request; the host gets the reason.
    let outcome = run.session.run("a forbidden thing").unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Blocked);
    assert_eq!(
        outcome.blocked.as_deref(),
        Some("forbidden inputs are blocked")
    );
    assert_eq!(run.server.requests().len(), 1);

    // A follow-up gets the context appended.
    run.session.follow_up("PLAIN follow-up").unwrap();
    let events = collect_input(&mut run.events);
    let events = if stop_reason(&events) == StopReason::Blocked {
        collect_input(&mut run.events) // the blocked run's events came first
    } else {
        events
    };
    assert_eq!(stop_reason(&events), StopReason::Completed);
    let requests = run.server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        KIT.last_user_text(requests[1].json()),
        "PLAIN follow-up\n\nContext: the repo uses tabs."
    );
    let sources = sources.lock().unwrap().clone();
    assert_eq!(
        sources,
        [
            PromptSource::Input,
            PromptSource::Input,
            PromptSource::FollowUp
        ]
    );
}

#[test]
fn a_blocked_steering_message_never_reaches_the_model() {
    let hooks = Hooks::new().with_user_prompt_submit(|input| {
        if input.source == Some(PromptSource::Steering)
            && input.prompt.as_deref() == Some("bad steer")
        {
            HookDecision::Deny("no".into())
        } else {
            HookDecision::Continue
        }
    });
    let server = Server::start(vec![KIT.text("answer")]);
    let mut run = HookRun::start(server, false, SessionConfig::default().with_hooks(hooks));
    run.session.steer("bad steer").unwrap();
    run.session.steer("good steer").unwrap();
    let events = run.input("PARENT go");
    let steered: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SteeringInjected { content } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(steered, ["good steer"]);
    let body = run.server.requests()[0].body_text();
    assert!(body.contains("good steer") && !body.contains("bad steer"));
}

#[test]
fn stop_continues_the_input_once_and_is_bounded_by_the_round_limit() {
    let hooks = Hooks::new().with_stop(|input| {
        if input.stop_hook_active == Some(true) {
            HookDecision::Continue
        } else {
            HookDecision::ContinueWith("the tests still fail".into())
        }
    });
    let server = Server::start(vec![KIT.text("done"), KIT.text("now they pass")]);
    let mut run = HookRun::start(server, false, SessionConfig::default().with_hooks(hooks));
    let events = run.input("PARENT fix the tests");
    assert_eq!(stop_reason(&events), StopReason::Completed);
    let requests = run.server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        KIT.last_user_text(requests[1].json()),
        "the tests still fail"
    );
    let made = decisions(&events, "stop");
    assert_eq!(
        made.iter().map(|(_, d)| d.clone()).collect::<Vec<_>>(),
        [
            HookDecision::ContinueWith("the tests still fail".into()),
            HookDecision::Continue
        ]
    );

    // A hook that always continues stops at the round limit.
    let hooks = Hooks::new().with_stop(|_| HookDecision::ContinueWith("again".into()));
    let server = Server::start(vec![
        KIT.text("a"),
        KIT.text("b"),
        KIT.text("c"),
        KIT.text("d"),
    ]);
    let config = SessionConfig::default()
        .with_hooks(hooks)
        .with_max_tool_rounds_per_input(2);
    let mut run = HookRun::start(server, false, config);
    let events = run.input("PARENT loop");
    assert_eq!(stop_reason(&events), StopReason::RoundLimit);
    assert_eq!(run.server.requests().len(), 2);
}

#[test]
fn a_panicking_hook_is_a_warning_and_a_denial_and_the_worker_lives_on() {
    for parallel in [false, true] {
        let hooks = Hooks::new()
            .with_pre_tool_use(|input| {
                if input.tool_name.as_deref() == Some("echo") {
                    panic!("hook bug");
                }
                HookDecision::Continue
            })
            .with_post_tool_use(|input| {
                if input.tool_name.as_deref() == Some("read_file") {
                    panic!("post hook bug");
                }
                HookDecision::Continue
            });
        let server = Server::start(vec![
            KIT.calls(&[
                function("c_read", "read_file", json!({"file_path": "a.txt"})),
                function("c_echo", "echo", json!({"text": "x"})),
            ]),
            KIT.text("first"),
            KIT.text("second input works"),
        ]);
        let mut run = HookRun::start(server, parallel, SessionConfig::default().with_hooks(hooks));
        let events = run.input("PARENT go");
        assert_eq!(stop_reason(&events), StopReason::Completed);
        let warnings: Vec<&str> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Warning { message, code } if code == "hook" => Some(message.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings.iter().any(|w| w.contains("hook bug")));
        let ends = ended(&events);
        let echo = ends.iter().find(|e| e.tool_name == "echo").unwrap();
        assert!(
            echo.is_error && echo.text.contains("panicked"),
            "{}",
            echo.text
        );
        // The failed post hook changed nothing: read_file's output reached the model.
        let outputs = KIT.tool_outputs(run.server.requests()[1].json());
        assert!(outputs[0].text.contains("alpha file"));
        // The worker lives on.
        let events = run.input("PARENT again");
        assert_eq!(stop_reason(&events), StopReason::Completed);
    }
}

#[test]
fn session_start_and_end_are_observed_once_each() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (a, b) = (calls.clone(), calls.clone());
    let hooks = Hooks::new()
        .with_session_start(move |input| {
            a.lock()
                .unwrap()
                .push(format!("start {}", input.session_id));
            HookDecision::Continue
        })
        .with_session_end(move |input| {
            b.lock().unwrap().push(format!("end {}", input.session_id));
            HookDecision::Continue
        });
    let server = Server::start(vec![KIT.text("hi")]);
    let mut run = HookRun::start(server, false, SessionConfig::default().with_hooks(hooks));
    run.input("PARENT hi");
    run.session.close();
    let events = collect_to_end(&mut run.events);
    let id = run.session.id().to_string();
    assert_eq!(
        *calls.lock().unwrap(),
        [format!("start {id}"), format!("end {id}")]
    );
    let end = decisions(&events, "session_end");
    assert_eq!(end.len(), 1);
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::SessionEnd { .. }
    ));
}

#[test]
fn with_approval_is_a_pre_tool_use_hook_that_runs_after_the_hosts_own() {
    let order = Arc::new(Mutex::new(Vec::new()));
    let (a, b) = (order.clone(), order.clone());
    let hooks = Hooks::new().with_pre_tool_use(move |_| {
        a.lock().unwrap().push("hook");
        HookDecision::Continue
    });
    let config = SessionConfig::default()
        .with_hooks(hooks)
        .with_approval(move |call| {
            b.lock().unwrap().push("approval");
            if call.name == "echo" {
                agentloop::session::Approval::Deny("policy".into())
            } else {
                agentloop::session::Approval::Allow
            }
        });
    let server = Server::start(vec![
        KIT.calls(&[function("c_echo", "echo", json!({"text": "x"}))]),
        KIT.text("ok"),
    ]);
    let mut run = HookRun::start(server, false, config);
    let events = run.input("PARENT go");
    assert_eq!(*order.lock().unwrap(), ["hook", "approval"]);
    let made = decisions(&events, "pre_tool_use");
    assert_eq!(made.last().unwrap().1, HookDecision::Deny("policy".into()));
    assert!(ended(&events)[0].text.contains("policy"));
}

#[test]
fn subagent_start_and_stop_are_observed_in_the_parents_stream() {
    let server = Server::start_routed(
        vec![
            (
                "PARENT",
                vec![
                    KIT.calls(&[function(
                        "c_sub",
                        "spawn_agent",
                        json!({"task": "CHILD-TASK say hi"}),
                    )]),
                    KIT.calls(&[function("c_wait", "wait", json!({"agent_id": "agent-1"}))]),
                    KIT.text("done"),
                ],
            ),
            ("CHILD-TASK", vec![KIT.text("hi from the child")]),
        ],
        vec![],
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (a, b) = (seen.clone(), seen.clone());
    let hooks = Hooks::new()
        .with_subagent_start(move |input| {
            a.lock().unwrap().push(format!(
                "start {} {}",
                input.agent_id.as_deref().unwrap(),
                input.prompt.as_deref().unwrap()
            ));
            HookDecision::Continue
        })
        .with_subagent_stop(move |input| {
            b.lock().unwrap().push(format!(
                "stop {} {}",
                input.agent_id.as_deref().unwrap(),
                input.answer.as_deref().unwrap()
            ));
            HookDecision::Continue
        });
    let mut run = HookRun::start(server, false, SessionConfig::default().with_hooks(hooks));
    let events = run.input("PARENT delegate");
    assert_eq!(stop_reason(&events), StopReason::Completed);
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "start agent-1 CHILD-TASK say hi",
            "stop agent-1 hi from the child"
        ]
    );
    // Both decisions are in the parent's own stream, before the wait returned.
    let start = decisions(&events, "subagent_start");
    let stop = decisions(&events, "subagent_stop");
    assert_eq!((start.len(), stop.len()), (1, 1));
    let stop_at = events
        .iter()
        .position(
            |e| matches!(&e.kind, EventKind::HookDecision { hook, .. } if hook == "subagent_stop"),
        )
        .unwrap();
    let wait_end = events
        .iter()
        .position(
            |e| matches!(&e.kind, EventKind::ToolCallEnd { call_id, .. } if call_id == "c_wait"),
        )
        .unwrap();
    assert!(stop_at < wait_end);
}

#[test]
fn pre_compact_adds_to_the_summary_request_and_post_compact_replaces_the_summary() {
    use agentloop::session::compaction::CompactionConfig;
    let big = |n: usize| format!("round {n} {}", "x".repeat(4000));
    let server = Server::start_routed(
        vec![(
            "You are writing the handoff summary",
            vec![KIT.text("THE MODEL SUMMARY")],
        )],
        vec![
            KIT.calls(&[function("e1", "echo", json!({"text": big(1)}))]),
            KIT.calls(&[function("e2", "echo", json!({"text": big(2)}))]),
            KIT.calls(&[function("e3", "echo", json!({"text": big(3)}))]),
            KIT.text("first answer"),
            KIT.text("second answer"),
        ],
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hook_seen = seen.clone();
    let hooks = Hooks::new()
        .with_pre_compact(|_| HookDecision::AddContext("PRE-COMPACT-NOTE keep the plan".into()))
        .with_post_compact(move |input| {
            hook_seen
                .lock()
                .unwrap()
                .push(input.summary.clone().unwrap_or_default());
            HookDecision::ReplaceSummary("HOST SUMMARY".into())
        });
    let config = SessionConfig::default()
        .with_hooks(hooks)
        .with_loop_detection(false)
        .with_compaction(CompactionConfig::default().with_context_window(8000));
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let profile = agentloop::profiles::ProviderProfile::new("anthropic", "claude-loopback")
        .with_tool(echo_tool());
    let session = Session::new(profile, env, KIT.client(&server), config).unwrap();
    session.run("PARENT first").unwrap();
    session.compact().unwrap();
    session.run("PARENT second").unwrap();
    let requests = server.requests();
    let summary_request = requests
        .iter()
        .find(|r| {
            r.body_text()
                .contains("You are writing the handoff summary")
        })
        .expect("a summary request");
    assert!(
        summary_request
            .body_text()
            .contains("PRE-COMPACT-NOTE keep the plan")
    );
    assert_eq!(*seen.lock().unwrap(), ["THE MODEL SUMMARY"]);
    let last = requests.last().unwrap().body_text();
    assert!(last.contains("HOST SUMMARY"), "{last}");
    assert!(!last.contains("THE MODEL SUMMARY"));
}
