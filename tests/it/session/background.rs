//! Background processes in a session, with scripted models and real processes: a model
//! serves HTTP with `python3 -m http.server` in the background, `curl`s it, reads its log
//! and stops it; exits reach the host at once and the model at its next turn; a
//! foreground command moves to the background past the host's threshold; the cap; the
//! session's end (close, abort, drop) ends every process. The suite runs on the local
//! environment, under the sandbox and through the exec-server (stdio); processes are
//! checked through `/proc`.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentloop::exec::ExecutionEnvironment;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Request, Role};
use agentloop::profiles::{self, ProviderProfile};
use agentloop::session::{EventKind, Events, Session, SessionConfig, SessionEvent};
use serde_json::{Value, json};

use crate::exec::background::{Keep, assert_all_gone, running};
use support::session::{collect_input, collect_to_end, collect_until, names};

/// An environment for a test: local, sandboxed, or the exec-server's.
type MakeEnv = fn() -> Option<(Keep, Arc<dyn ExecutionEnvironment>)>;

fn local() -> Option<(Keep, Arc<dyn ExecutionEnvironment>)> {
    let dir = tempfile::tempdir().unwrap();
    let env = agentloop::exec::LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_kill_grace(Duration::from_millis(500));
    Some((Box::new(dir), Arc::new(env)))
}

fn sandboxed() -> Option<(Keep, Arc<dyn ExecutionEnvironment>)> {
    let (keep, env) = crate::exec::background::sandboxed_env()?;
    Some((keep, Arc::from(env)))
}

fn remote() -> Option<(Keep, Arc<dyn ExecutionEnvironment>)> {
    let fixture = crate::remote::Fixture::new(crate::remote::Via::Stdio)?;
    let crate::remote::Fixture { env, dir, .. } = fixture;
    Some((Box::new(dir), Arc::new(env)))
}

/// Declares `local_*`, `sandboxed_*` and `remote_*` tests running each body.
macro_rules! on_every_environment {
    ($($name:ident),* $(,)?) => {
        pub mod local { $(#[test] fn $name() { super::$name(super::local) })* }
        pub mod sandboxed { $(#[test] fn $name() { super::$name(super::sandboxed) })* }
        pub mod remote { $(#[test] fn $name() { super::$name(super::remote) })* }
    };
}

on_every_environment!(
    a_model_serves_http_curls_it_reads_the_log_and_stops_it,
    an_exit_is_an_event_at_once_and_a_note_in_the_next_request,
    writing_to_a_background_cat_reads_back_what_it_echoed,
    a_foreground_command_past_the_threshold_moves_to_the_background_and_keeps_running,
    closing_the_session_ends_its_background_processes,
    aborting_the_session_ends_its_background_processes,
    dropping_the_session_ends_its_background_processes,
);

struct Harness {
    session: Session,
    events: Events,
    model: ScriptedModel,
    env: Arc<dyn ExecutionEnvironment>,
    _keep: Keep,
}

/// The Anthropic profile (the common background tools), routed to `model`.
fn harness_with(
    make: MakeEnv,
    profile: ProviderProfile,
    model: ScriptedModel,
    config: SessionConfig,
) -> Option<Harness> {
    let (keep, env) = make()?;
    let session = Session::new(
        profile.with_provider_id("scripted"),
        env.clone(),
        support::client_for(model.clone()),
        config,
    )
    .unwrap();
    let events = session.events();
    Some(Harness {
        session,
        events,
        model,
        env,
        _keep: keep,
    })
}

fn harness(make: MakeEnv, turns: Vec<ScriptedTurn>, config: SessionConfig) -> Option<Harness> {
    harness_with(
        make,
        profiles::anthropic("claude-sonnet-4-5"),
        ScriptedModel::new(turns),
        config,
    )
}

/// The text of the last tool result in `request`.
fn last_result(request: &Request) -> String {
    request
        .messages
        .iter()
        .rev()
        .flat_map(|m| m.content.iter())
        .find_map(|part| match part {
            agentloop::llm::ContentPart::ToolResult(result) => Some(result.content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The full outputs of the `TOOL_CALL_END`s among `events`, in order (errors included).
fn outputs(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnd { output, error, .. } => {
                Some(output.clone().or(error.clone()).unwrap_or_default())
            }
            _ => None,
        })
        .collect()
}

/// The pids of the session's background processes.
fn pids(session: &Session) -> Vec<i32> {
    session
        .background()
        .iter()
        .map(|job| job.pid as i32)
        .collect()
}

/// The port python's http.server printed (`… port 43521 …`), if it did.
fn port_in(text: &str) -> Option<u16> {
    let at = text.find("port ")?;
    text[at + 5..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn a_model_serves_http_curls_it_reads_the_log_and_stops_it(make: MakeEnv) {
    // The model's script: start the server, read until it says its port, curl it, read
    // the new log lines, stop it, answer.
    let port = Arc::new(Mutex::new(None::<u16>));
    let model = {
        let port = Arc::clone(&port);
        ScriptedModel::dynamic(move |request| {
            let last = last_result(request);
            let mut port = port.lock().unwrap();
            let calls = request
                .messages
                .iter()
                .filter(|m| m.role == Role::Tool)
                .count();
            if calls == 0 {
                return ScriptedTurn::tool_call(
                    "shell",
                    json!({"command": "python3 -u -m http.server 0 --bind 127.0.0.1",
                           "run_in_background": true}),
                );
            }
            if port.is_none() {
                *port = port_in(&last);
                if port.is_none() {
                    return ScriptedTurn::tool_call(
                        "read_background_output",
                        json!({"id": 1, "wait_ms": 200}),
                    );
                }
                return ScriptedTurn::tool_call(
                    "shell",
                    json!({"command": format!("curl -s http://127.0.0.1:{}/hello.txt", port.unwrap())}),
                );
            }
            if last.contains("hello from the workspace") {
                // The server logs the request just after answering it: wait for that line.
                return ScriptedTurn::tool_call(
                    "read_background_output",
                    json!({"id": 1, "wait_ms": 20_000}),
                );
            }
            if last.contains("GET /hello.txt") {
                return ScriptedTurn::tool_call("kill_background_process", json!({"id": 1}));
            }
            ScriptedTurn::text("The server answered and is stopped.")
        })
    };
    let Some(mut h) = harness_with(
        make,
        profiles::anthropic("claude-sonnet-4-5"),
        model,
        SessionConfig::default(),
    ) else {
        return;
    };
    h.env
        .write_file(Path::new("hello.txt"), b"hello from the workspace\n")
        .unwrap();
    h.session
        .submit("serve the directory and check it")
        .unwrap();
    let events = collect_input(&mut h.events);
    let texts = outputs(&events);
    assert!(
        texts[0].contains("Started in the background as process id 1"),
        "{texts:?}"
    );
    let curl = texts
        .iter()
        .position(|t| t.contains("hello from the workspace"))
        .unwrap_or_else(|| panic!("no curl answer: {texts:#?}"));
    // The read after the curl shows only the new log line (not the start-up line again).
    let log = &texts[curl + 1];
    assert!(log.contains("GET /hello.txt"), "{log}");
    assert!(!log.contains("Serving HTTP"), "{log}");
    assert!(
        texts[curl + 2].starts_with("Stopped process id 1"),
        "{texts:#?}"
    );
    let exit = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::BackgroundExit {
                id, pid, stopped, ..
            } => Some((*id, *pid, *stopped)),
            _ => None,
        })
        .expect("a BACKGROUND_EXIT");
    assert_eq!((exit.0, exit.2), (1, true));
    assert_all_gone(&[exit.1 as i32]);
    // The model stopped it itself: no note about it in its last request.
    let last = h.model.requests().pop().unwrap();
    assert!(
        !support::session::user_texts(&last)
            .iter()
            .any(|t| t.contains("Background process 1")),
        "{:?}",
        support::session::user_texts(&last)
    );
}

fn an_exit_is_an_event_at_once_and_a_note_in_the_next_request(make: MakeEnv) {
    // The model starts a process that ends with status 3, then runs short foreground
    // commands until it is told of the exit (at most 200 of them), then answers.
    let model = ScriptedModel::dynamic(|request| {
        let texts = support::session::user_texts(request);
        let told = texts.iter().any(|t| t.contains("Background process 1"));
        match request
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .count()
        {
            0 => ScriptedTurn::tool_call(
                "shell",
                json!({"command": "echo going; sleep 0.2; echo bye >&2; exit 3",
                       "run_in_background": true}),
            ),
            n if !told && n < 200 => {
                ScriptedTurn::tool_call("shell", json!({"command": "sleep 0.05"}))
            }
            _ => ScriptedTurn::text("noted"),
        }
    });
    let Some(mut h) = harness_with(
        make,
        profiles::anthropic("claude-sonnet-4-5"),
        model,
        SessionConfig::default().with_loop_detection(false),
    ) else {
        return;
    };
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let exit = position_of(&events, |k| matches!(k, EventKind::BackgroundExit { .. }));
    let EventKind::BackgroundExit {
        id,
        exit_code,
        stopped,
        ..
    } = &events[exit].kind
    else {
        unreachable!()
    };
    assert_eq!((*id, *exit_code, *stopped), (1, Some(3), false));
    // The first request after the event has the note, and none before it.
    let calls_before = events[..exit]
        .iter()
        .filter(|e| matches!(e.kind, EventKind::AssistantTextStart {}))
        .count();
    let requests = h.model.requests();
    let noted = |request: &Request| {
        support::session::user_texts(request)
            .into_iter()
            .filter(|t| t.contains("Background process 1"))
            .collect::<Vec<_>>()
    };
    assert!(requests[..calls_before].iter().all(|r| noted(r).is_empty()));
    let notes = noted(&requests[calls_before]);
    assert_eq!(
        notes.len(),
        1,
        "{:?}",
        support::session::user_texts(&requests[calls_before])
    );
    assert!(notes[0].contains("exited with code 3"), "{}", notes[0]);
    assert!(
        notes[0].contains("going") && notes[0].contains("bye"),
        "{}",
        notes[0]
    );
    // Once: the last request carries the same one note, not a second.
    assert_eq!(noted(requests.last().unwrap()).len(), 1);
}

fn position_of(events: &[SessionEvent], is: impl Fn(&EventKind) -> bool) -> usize {
    events
        .iter()
        .position(|e| is(&e.kind))
        .unwrap_or_else(|| panic!("not in {:?}", names(events)))
}

fn writing_to_a_background_cat_reads_back_what_it_echoed(make: MakeEnv) {
    let turns = vec![
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "cat", "run_in_background": true}),
        ),
        ScriptedTurn::tool_call(
            "write_background_input",
            json!({"id": 1, "input": "ping over a pipe\n", "wait_ms": 10_000}),
        ),
        ScriptedTurn::tool_call(
            "write_background_input",
            json!({"id": 1, "input": "last\n", "close_input": true, "wait_ms": 10_000}),
        ),
        ScriptedTurn::text("echoed"),
    ];
    let Some(mut h) = harness(make, turns, SessionConfig::default()) else {
        return;
    };
    h.session.submit("echo").unwrap();
    let texts = outputs(&collect_input(&mut h.events));
    assert!(
        texts[1].contains("<stdout>\nping over a pipe\n</stdout>"),
        "{}",
        texts[1]
    );
    // Only what is new, then the end of input ends `cat`.
    assert!(
        texts[2].contains("<stdout>\nlast\n</stdout>"),
        "{}",
        texts[2]
    );
    assert!(texts[2].contains("exited with code 0"), "{}", texts[2]);
}

fn a_foreground_command_past_the_threshold_moves_to_the_background_and_keeps_running(
    make: MakeEnv,
) {
    let turns = vec![
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "echo started; sleep 1.5; echo later; exec sleep 300"}),
        ),
        ScriptedTurn::tool_call(
            "read_background_output",
            json!({"id": 1, "wait_ms": 10_000}),
        ),
        ScriptedTurn::text("it runs"),
    ];
    let config = SessionConfig::default().with_background_after(Duration::from_secs(1));
    let Some(mut h) = harness(make, turns, config) else {
        return;
    };
    h.session.submit("start it").unwrap();
    let events = collect_input(&mut h.events);
    let texts = outputs(&events);
    assert!(
        texts[0].contains("<stdout>\nstarted\n</stdout>"),
        "{}",
        texts[0]
    );
    assert!(
        texts[0].contains("still running after 1.0 s"),
        "{}",
        texts[0]
    );
    assert!(texts[0].contains("process id 1"), "{}", texts[0]);
    // It kept running: what it wrote after the move is there for the next read.
    assert!(
        texts[1].contains("later") && !texts[1].contains("started"),
        "{}",
        texts[1]
    );
    assert!(texts[1].contains("running for"), "{}", texts[1]);
    // The moved command streamed its first line live, as a foreground command does.
    assert!(events.iter().any(|e| matches!(&e.kind,
        EventKind::ToolCallOutputDelta { delta, .. } if delta.contains("started"))));
    let pids = pids(&h.session);
    assert!(pids.iter().all(|&pid| running(pid)), "{pids:?}");
    h.session.close();
    collect_to_end(&mut h.events);
    assert_all_gone(&pids);
}

/// A session whose model started two background processes, each starting a child of its
/// own; returns the harness and every pid (as this machine sees them).
fn with_two_processes(make: MakeEnv) -> Option<(Harness, Vec<i32>)> {
    let sleeper = "sh -c 'echo pid $(cut -d\" \" -f4 /proc/self/stat); exec sleep 300' & wait";
    let turns = vec![
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": sleeper, "run_in_background": true}),
        )
        .with_tool_call(
            "shell",
            json!({"command": sleeper, "run_in_background": true}),
        ),
        ScriptedTurn::tool_call(
            "read_background_output",
            json!({"id": 1, "wait_ms": 10_000}),
        )
        .with_tool_call(
            "read_background_output",
            json!({"id": 2, "wait_ms": 10_000}),
        ),
        ScriptedTurn::text("both run"),
    ];
    let mut h = harness(make, turns, SessionConfig::default())?;
    h.session.submit("start two").unwrap();
    let texts = outputs(&collect_input(&mut h.events));
    let mut all = pids(&h.session);
    for text in &texts[2..] {
        let line = text
            .lines()
            .find(|l| l.starts_with("pid "))
            .expect("a child's pid");
        all.push(line[4..].trim().parse().unwrap());
    }
    assert_eq!(all.len(), 4, "{texts:#?}");
    assert!(all.iter().all(|&pid| running(pid)), "{all:?}");
    Some((h, all))
}

fn exits_before_the_end(events: &[SessionEvent]) -> usize {
    let end = position_of(events, |k| matches!(k, EventKind::SessionEnd { .. }));
    events[..end]
        .iter()
        .filter(|e| matches!(e.kind, EventKind::BackgroundExit { stopped: true, .. }))
        .count()
}

fn closing_the_session_ends_its_background_processes(make: MakeEnv) {
    let Some((mut h, all)) = with_two_processes(make) else {
        return;
    };
    h.session.close();
    let events = collect_to_end(&mut h.events);
    assert_eq!(exits_before_the_end(&events), 2, "{:?}", names(&events));
    assert_all_gone(&all);
}

fn aborting_the_session_ends_its_background_processes(make: MakeEnv) {
    let Some((mut h, all)) = with_two_processes(make) else {
        return;
    };
    h.session.abort();
    let events = collect_to_end(&mut h.events);
    assert_eq!(exits_before_the_end(&events), 2, "{:?}", names(&events));
    assert_all_gone(&all);
}

fn dropping_the_session_ends_its_background_processes(make: MakeEnv) {
    let Some((h, all)) = with_two_processes(make) else {
        return;
    };
    drop(h.session);
    assert_all_gone(&all);
}

#[test]
fn the_cap_on_live_processes_gives_the_model_a_clear_error() {
    let turns = vec![
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "sleep 300", "run_in_background": true}),
        ),
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "sleep 301", "run_in_background": true}),
        ),
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "sleep 302", "run_in_background": true}),
        ),
        ScriptedTurn::tool_call("kill_background_process", json!({"id": 1})),
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "sleep 303", "run_in_background": true}),
        ),
        ScriptedTurn::text("done"),
    ];
    let config = SessionConfig::default().with_max_background_processes(2);
    let mut h = harness(local, turns, config).unwrap();
    h.session.submit("start three").unwrap();
    let events = collect_input(&mut h.events);
    let refused = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnd {
                error: Some(error),
                is_error: true,
                ..
            } => Some(error.clone()),
            _ => None,
        })
        .collect::<Vec<_>>();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("2 background processes are running, the most this session allows")
            && refused[0].contains("stop one"),
        "{}",
        refused[0]
    );
    // Stopping one makes room: the fourth start succeeded (the refused one got no id),
    // and only two run.
    let texts = outputs(&events);
    assert!(texts[4].contains("process id 3"), "{}", texts[4]);
    let jobs = h.session.background();
    let live: Vec<u64> = jobs
        .iter()
        .filter(|j| j.exit.is_none())
        .map(|j| j.id)
        .collect();
    assert_eq!(live, [2, 3]);
    let all: Vec<i32> = jobs.iter().map(|j| j.pid as i32).collect();
    drop(h.session);
    assert_all_gone(&all);
}

#[test]
fn two_hundred_background_processes_across_twenty_sessions_leave_nothing_behind() {
    // 200 background processes: 20 sessions in this process, 10 each.
    let mut sessions = Vec::new();
    let mut all = Vec::new();
    for _ in 0..20 {
        let calls: Vec<Value> = (0..10)
            .map(|i| json!({"command": format!("exec sleep {}", 300 + i), "run_in_background": true}))
            .collect();
        let mut first = ScriptedTurn::tool_call("shell", calls[0].clone());
        for call in &calls[1..] {
            first = first.with_tool_call("shell", call.clone());
        }
        let config = SessionConfig::default().with_max_background_processes(10);
        let mut h = harness(local, vec![first, ScriptedTurn::text("ten")], config).unwrap();
        h.session.submit("start ten").unwrap();
        collect_input(&mut h.events);
        let pids = pids(&h.session);
        assert_eq!(pids.len(), 10);
        all.extend(pids);
        sessions.push(h);
    }
    assert_eq!(all.len(), 200);
    assert!(all.iter().all(|&pid| running(pid)));
    // Half end by a close, half by a drop.
    for (i, mut h) in sessions.into_iter().enumerate() {
        if i % 2 == 0 {
            h.session.close();
            collect_to_end(&mut h.events);
        }
        drop(h);
    }
    assert_all_gone(&all);
}

#[test]
fn the_codex_shape_yields_a_running_command_and_continues_it_with_write_stdin() {
    let turns = vec![
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "echo ready; while read l; do echo \"got $l\"; done", "yield_time_ms": 1000}),
        ),
        ScriptedTurn::tool_call(
            "write_stdin",
            json!({"session_id": 1, "chars": "abc\n", "yield_time_ms": 10_000}),
        ),
        ScriptedTurn::tool_call("kill_background_process", json!({"session_id": 1})),
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "echo quick", "yield_time_ms": 5000}),
        ),
        ScriptedTurn::text("done"),
    ];
    let mut h = harness_with(
        local,
        profiles::openai("gpt-5.2-codex"),
        ScriptedModel::new(turns),
        SessionConfig::default(),
    )
    .unwrap();
    h.session.submit("talk to it").unwrap();
    let texts = outputs(&collect_input(&mut h.events));
    assert!(
        texts[0].contains("ready") && texts[0].contains("session_id 1"),
        "{}",
        texts[0]
    );
    assert!(texts[1].contains("got abc"), "{}", texts[1]);
    assert!(
        texts[2].starts_with("Stopped process session_id 1"),
        "{}",
        texts[2]
    );
    // A command that ends within its yield time is a plain foreground result.
    assert!(
        texts[3].contains("<stdout>\nquick\n</stdout>\nexit code: 0"),
        "{}",
        texts[3]
    );
    assert_eq!(
        h.session.background().len(),
        1,
        "the quick one is not a background process"
    );
}

#[test]
fn the_gemini_cli_shape_names_processes_by_pid() {
    let model = ScriptedModel::dynamic(|request| {
        let last = last_result(request);
        match request
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .count()
        {
            0 => ScriptedTurn::tool_call(
                "shell",
                json!({"command": "echo one; echo two; echo three; exec sleep 300",
                       "is_background": true, "delay_ms": 10_000}),
            ),
            1 => {
                let pid: u64 = last
                    .split("(pid ")
                    .nth(1)
                    .and_then(|rest| rest.split(')').next())
                    .and_then(|p| p.parse().ok())
                    .expect("a pid");
                ScriptedTurn::tool_call("read_background_output", json!({"pid": pid, "lines": 2}))
            }
            _ => ScriptedTurn::text("read"),
        }
    });
    let mut h = harness_with(
        local,
        profiles::gemini("gemini-2.5-pro"),
        model,
        SessionConfig::default(),
    )
    .unwrap();
    h.session.submit("start and read").unwrap();
    let texts = outputs(&collect_input(&mut h.events));
    assert!(
        texts[0].contains("one\ntwo\nthree"),
        "the delay shows the first output: {}",
        texts[0]
    );
    assert!(
        texts[1].contains("<stdout>\ntwo\nthree\n</stdout>"),
        "{}",
        texts[1]
    );
}

#[test]
fn the_hooks_see_the_background_tools() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hooks = {
        let (pre, post) = (Arc::clone(&seen), Arc::clone(&seen));
        agentloop::session::Hooks::new()
            .with_pre_tool_use(move |input| {
                pre.lock()
                    .unwrap()
                    .push(format!("pre {}", input.tool_call().unwrap().name));
                agentloop::session::HookDecision::Continue
            })
            .with_post_tool_use(move |input| {
                post.lock()
                    .unwrap()
                    .push(format!("post {}", input.tool_call().unwrap().name));
                agentloop::session::HookDecision::Continue
            })
    };
    let turns = vec![
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "sleep 300", "run_in_background": true}),
        ),
        ScriptedTurn::tool_call("list_background_processes", json!({})),
        ScriptedTurn::tool_call("kill_background_process", json!({"id": 1})),
        ScriptedTurn::text("done"),
    ];
    let mut h = harness(local, turns, SessionConfig::default().with_hooks(hooks)).unwrap();
    h.session.submit("go").unwrap();
    let texts = outputs(&collect_input(&mut h.events));
    assert!(
        texts[1].contains("process 1 (pid ") && texts[1].contains("running for"),
        "{}",
        texts[1]
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "pre shell",
            "post shell",
            "pre list_background_processes",
            "post list_background_processes",
            "pre kill_background_process",
            "post kill_background_process"
        ]
    );
}

#[test]
fn a_flood_stays_within_the_sessions_buffer_with_the_dropped_middle_marked() {
    let turns = vec![
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "yes flood | head -c 3000000; exec sleep 300", "run_in_background": true}),
        ),
        // Returns once the 3 MB are written and the output pauses.
        ScriptedTurn::tool_call(
            "read_background_output",
            json!({"id": 1, "wait_ms": 10_000}),
        ),
        ScriptedTurn::text("flooded"),
    ];
    // 1 MiB for the session and its 4 processes: 128 KiB per stream.
    let config = SessionConfig::default()
        .with_max_background_processes(4)
        .with_background_output_bytes(1 << 20);
    let mut h = harness(local, turns, config).unwrap();
    h.session.submit("flood").unwrap();
    let texts = outputs(&collect_input(&mut h.events));
    let read = &texts[1];
    assert!(
        read.contains("bytes of output dropped here"),
        "{}",
        &read[..200]
    );
    let kept = read.matches("flood\n").count() * 6;
    assert!(
        kept <= 128 * 1024 && kept > 100 * 1024,
        "{kept} bytes shown"
    );
    assert!(
        read.starts_with("<stdout>\nflood\nflood\n"),
        "the head is kept"
    );
}

#[test]
fn the_transcript_records_starts_exits_and_reads_and_a_resumed_session_knows_they_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl");
    // One start per round: two calls of one round start in parallel, so which got id 1
    // would be up to the scheduler.
    let turns = vec![
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "exit 4", "run_in_background": true}),
        ),
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "sleep 300", "run_in_background": true}),
        ),
        ScriptedTurn::tool_call(
            "read_background_output",
            json!({"id": 1, "wait_ms": 10_000}),
        ),
        ScriptedTurn::text("started"),
    ];
    let config = SessionConfig::default().with_transcript(&path);
    let mut h = harness(local, turns, config).unwrap();
    h.session.submit("start").unwrap();
    collect_input(&mut h.events);
    // The first process's exit is recorded by its waiting thread as it exits, which may
    // come a moment after the input ends: wait (bounded) for that record.
    let deadline = std::time::Instant::now() + support::GENEROUS;
    let exit_recorded = |text: &str| {
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|r| r["type"] == "background" && r["event"] == "exit" && r["id"] == 1)
    };
    while !exit_recorded(&std::fs::read_to_string(&path).unwrap()) {
        assert!(
            std::time::Instant::now() < deadline,
            "no exit record for process 1"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The session dies without closing (its process is killed by the drop, but the
    // transcript stops first, as in a crash): keep only what was written so far.
    let written = std::fs::read_to_string(&path).unwrap();
    drop(h);
    std::fs::write(&path, &written).unwrap();
    let records: Vec<Value> = written
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["type"] == "background")
        .collect();
    let brief: Vec<(String, u64)> = records
        .iter()
        .map(|r| {
            (
                r["event"].as_str().unwrap().to_string(),
                r["id"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(brief.contains(&("start".into(), 1)) && brief.contains(&("start".into(), 2)));
    assert!(brief.contains(&("exit".into(), 1)) && !brief.contains(&("exit".into(), 2)));
    assert!(brief.contains(&("read".into(), 1)), "{brief:?}");
    let start = records
        .iter()
        .find(|r| r["event"] == "start" && r["id"] == 2)
        .unwrap();
    assert_eq!(start["command"], "sleep 300");
    let exit = records.iter().find(|r| r["event"] == "exit").unwrap();
    assert_eq!(exit["exit_code"], 4);

    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "true", "run_in_background": true}),
        ),
        ScriptedTurn::text("again"),
    ]);
    let (keep, env) = local().unwrap();
    let resumed = Session::resume(
        &path,
        profiles::anthropic("claude-sonnet-4-5").with_provider_id("scripted"),
        env,
        support::client_for(model.clone()),
        SessionConfig::default(),
    )
    .unwrap();
    let mut events = resumed.events();
    resumed.submit("go on").unwrap();
    let texts = outputs(&collect_input(&mut events));
    let first = &model.requests()[0];
    let notes: Vec<String> = support::session::user_texts(first)
        .into_iter()
        .filter(|t| t.contains("no longer run"))
        .collect();
    assert_eq!(notes.len(), 1, "{:?}", support::session::user_texts(first));
    assert!(notes[0].contains("process 2 (`sleep 300`)") && !notes[0].contains("process 1"));
    // New processes get new ids.
    assert!(texts[0].contains("process id 3"), "{}", texts[0]);
    drop(keep);
}

#[test]
fn a_process_ended_by_the_host_is_noted_for_the_model() {
    let turns = vec![
        ScriptedTurn::tool_call(
            "shell",
            json!({"command": "sleep 300", "run_in_background": true}),
        ),
        ScriptedTurn::text("started"),
        ScriptedTurn::text("noticed"),
    ];
    let mut h = harness(local, turns, SessionConfig::default()).unwrap();
    h.session.submit("start").unwrap();
    collect_input(&mut h.events);
    let job = h.session.background().remove(0);
    let result = job.kill().unwrap();
    assert!(result.cancelled);
    collect_until(&mut h.events, |e| {
        matches!(e.kind, EventKind::BackgroundExit { .. })
    });
    h.session.submit("anything new?").unwrap();
    collect_input(&mut h.events);
    let texts = support::session::user_texts(&h.model.requests()[2]);
    assert!(
        texts
            .iter()
            .any(|t| t.contains("Background process 1") && t.contains("stopped by the host")),
        "{texts:?}"
    );
}
