//! Live smoke tests against the real providers (spec §9.13), one per profile. Each runs
//! only when its provider's API key is set and prints a skip line otherwise, so this
//! target passes on a machine without keys and never reaches the network there.
//!
//! ```text
//! ANTHROPIC_API_KEY=… cargo test --test live -- --nocapture
//! ```
//!
//! Models: `AGENTLOOP_LIVE_ANTHROPIC_MODEL`, `AGENTLOOP_LIVE_OPENAI_MODEL` and
//! `AGENTLOOP_LIVE_GEMINI_MODEL` override the small defaults below. Base URLs follow the
//! provider's usual variables (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`,
//! `GOOGLE_GEMINI_BASE_URL`). A live model may take another reasonable path than the one
//! asserted; the assertions check outcomes (files, events), not wording.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
use agentloop::llm::{Client, ContentPart};
use agentloop::profiles::{self, ProviderProfile};
use agentloop::session::{EventKind, Events, RecvError, Session, SessionConfig, SessionEvent};

use support::GENEROUS;

/// A ceiling per input, for a slow provider over the internet; catches hangs.
const PER_INPUT: Duration = GENEROUS.saturating_mul(15);

struct Provider {
    name: &'static str,
    /// The key variables, any of which enables the test.
    keys: &'static [&'static str],
    /// Variables the client may read (keys and base URLs).
    vars: &'static [&'static str],
    model_var: &'static str,
    default_model: &'static str,
    profile: fn(String) -> ProviderProfile,
}

fn key_set(provider: &Provider) -> bool {
    provider
        .keys
        .iter()
        .any(|k| std::env::var(k).is_ok_and(|v| !v.trim().is_empty()))
}

/// Runs one input (optionally steering right after submitting it) and returns its events,
/// up to and including `PROCESSING_END`.
fn process(
    session: &Session,
    events: &mut Events,
    input: &str,
    steer: Option<&str>,
) -> Vec<SessionEvent> {
    session.submit(input).expect("the session accepts input");
    if let Some(message) = steer {
        session.steer(message).expect("the session accepts a steer");
    }
    let deadline = Instant::now() + PER_INPUT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(event) => {
                let end = matches!(event.kind, EventKind::ProcessingEnd { .. });
                if let EventKind::SessionEnd { reason, .. } = &event.kind {
                    panic!("the session closed ({reason:?}) during `{input}`: {seen:#?}");
                }
                seen.push(event);
                if end {
                    return seen;
                }
            }
            Err(RecvError::Timeout) => panic!("`{input}` did not finish within {PER_INPUT:?}"),
            Err(RecvError::Ended) => panic!("the event stream ended during `{input}`"),
        }
    }
}

/// `(call_id, tool_name, output or error)` of every finished tool call.
fn tool_ends(events: &[SessionEvent]) -> Vec<(&str, &str, &str)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnd {
                call_id,
                tool_name,
                output,
                error,
                ..
            } => Some((
                call_id.as_str(),
                tool_name.as_str(),
                output.as_deref().or(error.as_deref()).unwrap_or(""),
            )),
            _ => None,
        })
        .collect()
}

fn read(env: &dyn ExecutionEnvironment, path: &str) -> String {
    env.read_bytes(std::path::Path::new(path))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn smoke(provider: &Provider) {
    if !key_set(provider) {
        // Straight to the stderr handle: libtest captures `println!`, and a skip should be
        // seen in a plain `cargo test` run.
        let _ = writeln!(
            std::io::stderr(),
            "skip: live {} smoke test ({} is not set)",
            provider.name,
            provider.keys.join(" or ")
        );
        return;
    }
    let allowed = provider.vars;
    let client = Client::from_vars(|name| {
        allowed
            .contains(&name)
            .then(|| std::env::var(name).ok())
            .flatten()
    })
    .expect("a client for the provider");
    let model =
        std::env::var(provider.model_var).unwrap_or_else(|_| provider.default_model.to_string());
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    // Spec §9.13 expects the 10 s default timeout for step 7 with every profile.
    let config = SessionConfig::default()
        .with_default_command_timeout(std::time::Duration::from_secs(10))
        .with_max_tool_rounds_per_input(25);
    let session =
        Session::new((provider.profile)(model), env.clone(), client, config).expect("a session");
    let mut events = session.events();

    // 1. Simple file creation.
    process(
        &session,
        &mut events,
        "Create a file called hello.py that prints 'Hello World'",
        None,
    );
    assert!(env.file_exists(std::path::Path::new("hello.py")));
    assert!(read(&*env, "hello.py").contains("Hello"));

    // 2. Read and edit.
    process(
        &session,
        &mut events,
        "Read hello.py and add a second print statement that says 'Goodbye'",
        None,
    );
    let content = read(&*env, "hello.py");
    assert!(
        content.contains("Hello") && content.contains("Goodbye"),
        "{content}"
    );

    // 3. Shell execution.
    let seen = process(
        &session,
        &mut events,
        "Run hello.py and show the output",
        None,
    );
    assert!(
        tool_ends(&seen).iter().any(|(_, name, _)| *name == "shell"),
        "no shell call: {seen:#?}"
    );

    // 4. Truncation. 1000 lines of 99 `x` (100 000 characters): read_file caps single
    // lines at 2000 characters, so one 100 000-character line could not come back whole.
    let line = format!("{}\n", "x".repeat(99));
    env.write_file(
        std::path::Path::new("big.txt"),
        line.repeat(1000).as_bytes(),
    )
    .unwrap();
    let seen = process(
        &session,
        &mut events,
        "Read big.txt in full with the read_file tool",
        None,
    );
    let full = tool_ends(&seen)
        .into_iter()
        .find(|(_, name, output)| *name == "read_file" && output.matches('x').count() >= 99_000);
    let Some((call_id, _, _)) = full else {
        panic!("no TOOL_CALL_END carries the whole file: {seen:#?}");
    };
    let for_the_model = session
        .history()
        .to_messages()
        .into_iter()
        .flat_map(|m| m.content)
        .find_map(|part| match part {
            ContentPart::ToolResult(result) if result.tool_call_id == call_id => {
                Some(result.content)
            }
            _ => None,
        })
        .expect("the read_file result is in the history");
    assert!(
        for_the_model.contains("[WARNING: Tool output was truncated."),
        "the model's copy carries the truncation marker"
    );

    // 5. Steering.
    let seen = process(
        &session,
        &mut events,
        "Create a Flask web application with multiple routes",
        Some("Actually, just create a single /health endpoint for now"),
    );
    assert!(
        seen.iter()
            .any(|e| matches!(e.kind, EventKind::SteeringInjected { .. })),
        "the steer was injected"
    );

    // 6. Subagent.
    let seen = process(
        &session,
        &mut events,
        "Spawn a subagent to write tests for hello.py, then review its output",
        None,
    );
    let child_tool_calls = seen.iter().any(|e| match &e.kind {
        EventKind::SubagentEvent { event, .. } => {
            matches!(event.kind, EventKind::ToolCallStart { .. })
        }
        _ => false,
    });
    assert!(
        child_tool_calls,
        "the subagent's tool calls reach the event stream"
    );

    // 7. Timeout handling.
    let seen = process(
        &session,
        &mut events,
        "Run 'sleep 30' with the default timeout",
        None,
    );
    let timed_out = seen.iter().any(|e| match &e.kind {
        EventKind::ToolCallEnd {
            tool_name,
            error: Some(error),
            duration_ms,
            ..
        } => tool_name == "shell" && error.contains("timed out") && *duration_ms < 20_000,
        _ => false,
    });
    assert!(
        timed_out,
        "the command timed out after the 10 s default: {seen:#?}"
    );
    // The model saw the timeout message in its tool result and answered after it.
    let answered = seen.iter().rev().any(|e| {
        matches!(&e.kind, EventKind::AssistantTextEnd { text, tool_calls: 0, .. } if !text.is_empty())
    });
    assert!(answered, "the agent handled the timeout and answered");
}

#[test]
fn live_anthropic_smoke_test() {
    smoke(&Provider {
        name: "anthropic",
        keys: &["ANTHROPIC_API_KEY"],
        vars: &["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"],
        model_var: "AGENTLOOP_LIVE_ANTHROPIC_MODEL",
        default_model: "claude-haiku-4-5",
        profile: |model| profiles::anthropic(model),
    });
}

#[test]
fn live_openai_smoke_test() {
    smoke(&Provider {
        name: "openai",
        keys: &["OPENAI_API_KEY"],
        vars: &[
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "OPENAI_ORG_ID",
            "OPENAI_PROJECT_ID",
        ],
        model_var: "AGENTLOOP_LIVE_OPENAI_MODEL",
        default_model: "gpt-5-mini",
        profile: |model| profiles::openai(model),
    });
}

#[test]
fn live_gemini_smoke_test() {
    smoke(&Provider {
        name: "gemini",
        keys: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        vars: &[
            "GEMINI_API_KEY",
            "GOOGLE_API_KEY",
            "GEMINI_BASE_URL",
            "GOOGLE_GEMINI_BASE_URL",
        ],
        model_var: "AGENTLOOP_LIVE_GEMINI_MODEL",
        default_model: "gemini-2.5-flash",
        profile: |model| profiles::gemini(model),
    });
}
