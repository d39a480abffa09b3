//! A task end to end, run as a user runs it: the offline demo with no keys, the `--json`
//! event stream, the three-round task against the loopback server in each wire format,
//! the provider chosen from the keys found, exit statuses, Ctrl-C, and options taking
//! effect.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Instant;

use serde_json::{Value, json};

use support::providers::{GEMINI_KEY, OPENAI_KEY};
use support::{FAKE_KEY, GENEROUS, Reply, Server};

use crate::{Wire, agent, exit_within, kinds, run_agent};

#[test]
fn the_offline_demo_without_api_keys_completes_its_task_and_exits_0() {
    let ran = run_agent(&[], &[], "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let first = ran.stdout.lines().next().unwrap_or("");
    assert!(first.starts_with("agentloop offline demo"), "{first}");
    assert!(first.contains("ANTHROPIC_API_KEY"), "{first}");
    // Every step is shown, and the edited script's real output is in the final answer.
    for step in [
        "✓ write_file greet.sh",
        "✓ shell bash greet.sh",
        "✓ edit_file greet.sh",
    ] {
        assert!(ran.stdout.contains(step), "{step} missing:\n{}", ran.stdout);
    }
    assert!(
        ran.stdout.contains("│ goodbye, agentloop"),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains("── done · 4 tool rounds"),
        "{}",
        ran.stdout
    );
}

#[test]
fn the_offline_demo_follows_the_openai_profile_with_apply_patch() {
    let ran = run_agent(&["--provider", "demo", "--profile", "openai"], &[], "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert!(
        ran.stdout.contains("✓ apply_patch greet.sh"),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains("│ goodbye, agentloop"),
        "{}",
        ran.stdout
    );
}

#[test]
fn json_output_is_one_event_per_line_from_session_start_to_session_end_with_paired_tool_calls() {
    let ran = run_agent(&["--json"], &[], "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let mut events = ran.events();
    // After the session's events, the CLI's exit record.
    let record = events.pop().unwrap();
    assert_eq!(record["kind"], "exit", "{record}");
    let kinds = kinds(&events);
    assert_eq!(kinds.first(), Some(&"session_start"));
    assert_eq!(kinds.last(), Some(&"session_end"));
    for event in &events {
        assert!(event["session_id"].is_string() && event["timestamp"].is_string());
        assert!(event["data"].is_object(), "{event}");
    }
    let ids = |kind: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["kind"] == kind)
            .map(|e| e["data"]["call_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (starts, ends) = (ids("tool_call_start"), ids("tool_call_end"));
    assert_eq!(starts.len(), 4, "{kinds:?}");
    assert_eq!(
        starts, ends,
        "every start has its end, in order (one call per round)"
    );
    for id in &starts {
        let start = kinds_position(&events, "tool_call_start", id);
        let end = kinds_position(&events, "tool_call_end", id);
        assert!(start < end, "{id}: start at {start}, end at {end}");
    }
    // The banner went to stderr, not into the JSON stream.
    assert!(
        ran.stderr.starts_with("agentloop offline demo"),
        "{}",
        ran.stderr
    );
}

fn kinds_position(events: &[Value], kind: &str, call_id: &str) -> usize {
    events
        .iter()
        .position(|e| e["kind"] == kind && e["data"]["call_id"] == call_id)
        .unwrap()
}

/// The three-round task: a shell command writes a file, `read_file` reads it, the model
/// answers "done".
pub(crate) fn three_round_replies(wire: Wire) -> Vec<Reply> {
    vec![
        Reply::sse(wire.turn(
            "",
            &[(
                "call_a1",
                "shell",
                json!({"command": "echo hello > out.txt"}),
            )],
        )),
        Reply::sse(wire.turn(
            "",
            &[("call_a2", "read_file", json!({"file_path": "out.txt"}))],
        )),
        Reply::sse(wire.turn("done", &[])),
    ]
}

fn provider_args(
    wire: Wire,
    server: &Server,
) -> (&'static str, String, &'static str, &'static str) {
    match wire {
        Wire::Anthropic => ("anthropic", server.url(), "ANTHROPIC_API_KEY", FAKE_KEY),
        // A --base-url that is not OpenAI's gets OPENAI_COMPATIBLE_API_KEY, never
        // OPENAI_API_KEY unless asked (robustness.rs).
        Wire::OpenAi => (
            "openai",
            format!("{}/v1", server.url()),
            "OPENAI_COMPATIBLE_API_KEY",
            OPENAI_KEY,
        ),
        Wire::OpenAiChat => (
            "openai-chat",
            format!("{}/v1", server.url()),
            "OPENAI_API_KEY",
            OPENAI_KEY,
        ),
        Wire::Gemini => ("gemini", server.url(), "GEMINI_API_KEY", GEMINI_KEY),
    }
}

fn completes_the_three_round_task(wire: Wire) {
    let server = Server::start(three_round_replies(wire));
    let work = tempfile::tempdir().unwrap();
    let (provider, base_url, key_var, key) = provider_args(wire, &server);
    let cwd = work.path().to_str().unwrap();
    let ran = run_agent(
        &[
            "--provider",
            provider,
            "--base-url",
            &base_url,
            "--cwd",
            cwd,
            "--json",
            "write hello to out.txt, read it back, then say done",
        ],
        &[(key_var, key), ("OPENAI_COMPATIBLE_MODEL", "gpt-5")],
        "",
    );
    assert_eq!(ran.status, Some(0), "{wire:?}: {}", ran.all_output());
    assert_eq!(
        std::fs::read_to_string(work.path().join("out.txt")).unwrap(),
        "hello\n"
    );
    let events = ran.events();
    let ends: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool_call_end")
        .collect();
    assert_eq!(ends.len(), 2, "{wire:?}: {:?}", kinds(&events));
    assert_eq!(ends[0]["data"]["tool_name"], "shell");
    assert_eq!(ends[1]["data"]["tool_name"], "read_file");
    assert!(
        ends.iter().all(|e| e["data"]["is_error"] == false),
        "{ends:?}"
    );
    assert!(
        ends[1]["data"]["output"]
            .as_str()
            .unwrap()
            .contains("hello")
    );
    let answer = events
        .iter()
        .rev()
        .find(|e| e["kind"] == "assistant_text_end")
        .unwrap();
    assert_eq!(answer["data"]["text"], "done");
    let end = events
        .iter()
        .find(|e| e["kind"] == "processing_end")
        .unwrap();
    assert_eq!(end["data"]["stop_reason"], "completed");
    assert_eq!(end["data"]["rounds"], 2);

    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{wire:?}");
    for request in &requests {
        assert!(
            request.path.starts_with(wire.path_prefix()),
            "{wire:?}: {}",
            request.path
        );
    }
    // The file's content went back to the model with the read_file result.
    assert!(requests[2].body_text().contains("hello"));
    assert!(!ran.all_output().contains(key), "{wire:?}: the key leaked");
}

#[test]
fn the_three_round_task_completes_over_anthropic_messages() {
    completes_the_three_round_task(Wire::Anthropic);
}

#[test]
fn the_three_round_task_completes_over_openai_responses() {
    completes_the_three_round_task(Wire::OpenAi);
}

#[test]
fn the_three_round_task_completes_over_chat_completions() {
    completes_the_three_round_task(Wire::OpenAiChat);
}

#[test]
fn the_three_round_task_completes_over_gemini() {
    completes_the_three_round_task(Wire::Gemini);
}

#[test]
fn without_provider_flags_the_first_key_found_and_its_base_url_variable_are_used() {
    let server = Server::start(vec![Reply::sse(Wire::Anthropic.turn("done", &[]))]);
    let work = tempfile::tempdir().unwrap();
    let url = server.url();
    let ran = run_agent(
        &["--cwd", work.path().to_str().unwrap()],
        &[
            ("ANTHROPIC_API_KEY", FAKE_KEY),
            ("ANTHROPIC_BASE_URL", &url),
        ],
        "the prompt from stdin\n",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert!(ran.stdout.contains("done"), "{}", ran.stdout);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].body_text().contains("the prompt from stdin"));
}

#[test]
fn the_google_key_and_base_url_variables_reach_gemini_and_the_header_names_the_url() {
    // The library reads Gemini's GOOGLE_ aliases; the CLI passes them through unchanged.
    let server = Server::start(vec![Reply::sse(Wire::Gemini.turn("done", &[]))]);
    let work = tempfile::tempdir().unwrap();
    let url = server.url();
    let ran = run_agent(
        &["--cwd", work.path().to_str().unwrap(), "say done"],
        &[
            ("GOOGLE_API_KEY", GEMINI_KEY),
            ("GOOGLE_GEMINI_BASE_URL", &url),
        ],
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let header = ran.stdout.lines().next().unwrap_or("");
    assert!(header.contains(&format!("requests to {url}")), "{header}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].path.starts_with(Wire::Gemini.path_prefix()));
    assert_eq!(requests[0].header("x-goog-api-key"), Some(GEMINI_KEY));
}

#[test]
fn bad_usage_exits_with_status_2_and_says_what_to_change() {
    let ran = run_agent(&["--frobnicate"], &[], "");
    assert_eq!(ran.status, Some(2));
    assert!(
        ran.stderr.contains("unknown option `--frobnicate`"),
        "{}",
        ran.stderr
    );
    assert!(ran.stdout.is_empty());

    let ran = run_agent(&["--provider", "anthropic", "hi"], &[], "");
    assert_eq!(ran.status, Some(2));
    assert!(
        ran.stderr.contains("needs ANTHROPIC_API_KEY"),
        "{}",
        ran.stderr
    );

    let ran = run_agent(&["--max-rounds", "lots"], &[], "");
    assert_eq!(ran.status, Some(2));
    assert!(ran.stderr.contains("whole number"), "{}", ran.stderr);

    let ran = run_agent(&["--base-url", "http://127.0.0.1:9/v1", "hi"], &[], "");
    assert_eq!(ran.status, Some(2));
    assert!(
        ran.stderr.contains("--provider openai-chat"),
        "{}",
        ran.stderr
    );
}

#[test]
fn a_round_limit_exits_with_status_3() {
    let ran = run_agent(&["--max-rounds", "1", "--json"], &[], "");
    assert_eq!(ran.status, Some(3), "{}", ran.all_output());
    let events = ran.events();
    let limit = events.iter().find(|e| e["kind"] == "turn_limit").unwrap();
    assert_eq!(limit["data"]["round"], 1);
    assert_eq!(kinds(&events).last(), Some(&"exit"));
    assert_eq!(kinds(&events)[events.len() - 2], "session_end");
}

#[test]
fn a_turn_limit_exits_with_status_3() {
    let ran = run_agent(&["--max-turns", "2"], &[], "");
    assert_eq!(ran.status, Some(3), "{}", ran.all_output());
    assert!(
        ran.stdout
            .contains("stopped: reached the limit of 2 model calls")
    );
}

#[test]
fn ctrl_c_during_a_command_kills_it_shuts_down_and_exits_130() {
    let server = Server::start(vec![Reply::sse(Wire::Anthropic.turn(
        "",
        &[(
            "call_s",
            "shell",
            json!({"command": "echo started; sleep 30", "timeout_ms": 60000}),
        )],
    ))]);
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let url = server.url();
    let mut child = agent(
        &[
            "--json",
            "--cwd",
            work.path().to_str().unwrap(),
            "sleep a while",
        ],
        &[
            ("ANTHROPIC_API_KEY", FAKE_KEY),
            ("ANTHROPIC_BASE_URL", &url),
        ],
        home.path(),
    )
    .stdin(Stdio::null())
    .spawn()
    .unwrap();
    let pid = child.id() as i32;
    let stdout = child.stdout.take().unwrap();
    let (line_tx, line_rx) = crossbeam_channel::unbounded::<String>();
    let reader = std::thread::Builder::new()
        .name("agent-cli-stdout".to_string())
        .spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = line_tx.send(line);
            }
        })
        .unwrap();
    // Wait until the command is running (its first output arrived).
    let deadline = Instant::now() + GENEROUS;
    let mut lines = Vec::new();
    loop {
        let line = line_rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the command starts");
        let started = line.contains("tool_call_output_delta") && line.contains("started");
        lines.push(line);
        if started {
            break;
        }
    }
    let pressed = Instant::now();
    // SAFETY: sending SIGINT to our own, still running child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = exit_within("the agent after Ctrl-C", move || child.wait());
    let took = pressed.elapsed();
    reader.join().unwrap();
    lines.extend(line_rx.try_iter());
    assert_eq!(status.code(), Some(130), "{lines:#?}");
    // Far below the 30 s of the sleep and its 60 s timeout.
    assert!(took < GENEROUS, "took {took:?}");
    let events: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let end = events
        .iter()
        .find(|e| e["kind"] == "tool_call_end")
        .unwrap();
    assert_eq!(end["data"]["is_error"], true);
    let processing_end = events
        .iter()
        .find(|e| e["kind"] == "processing_end")
        .unwrap();
    assert_eq!(processing_end["data"]["stop_reason"], "interrupted");
    assert_eq!(kinds(&events).last(), Some(&"exit"));
    assert_eq!(kinds(&events)[events.len() - 2], "session_end");
    // Only one request: the interrupted input did not go back to the model.
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn model_reasoning_effort_and_command_timeout_options_take_effect() {
    let server = Server::start(vec![
        Reply::sse(Wire::OpenAi.turn("", &[("call_t", "shell", json!({"command": "sleep 5"}))])),
        Reply::sse(Wire::OpenAi.turn("it timed out", &[])),
    ]);
    let work = tempfile::tempdir().unwrap();
    let (provider, base_url, key_var, key) = provider_args(Wire::OpenAi, &server);
    let ran = run_agent(
        &[
            "--provider",
            provider,
            "--base-url",
            &base_url,
            "--cwd",
            work.path().to_str().unwrap(),
            "--model",
            "gpt-5-loopback",
            "--reasoning-effort",
            "high",
            "--timeout-ms",
            "300",
            "--json",
            "sleep a little",
        ],
        &[(key_var, key)],
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let requests = server.requests();
    assert_eq!(requests[0].json()["model"], "gpt-5-loopback");
    assert_eq!(requests[0].json()["reasoning"]["effort"], "high");
    let end = ran
        .events()
        .into_iter()
        .find(|e| e["kind"] == "tool_call_end")
        .unwrap();
    assert_eq!(end["data"]["is_error"], true);
    let error = end["data"]["error"].as_str().unwrap();
    assert!(error.contains("timed out after 300ms"), "{error}");
}
