//! Transcripts: written as the session runs, resumed with the exact next request, read
//! back after a crash tore the last line, and replayed offline through the scripted model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloop::ErrorKind;
use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
use agentloop::llm::scripted::{ReplayMode, ScriptedModel, ScriptedTurn};
use agentloop::llm::{Client, Role};
use agentloop::profiles::ProviderProfile;
use agentloop::session::transcript::Transcript;
use agentloop::session::{
    EventKind, Events, Session, SessionConfig, SessionEvent, StopReason, Turn,
};
use agentloop::tools::{self, ToolOutput};
use serde_json::{Value, json};

use support::session::*;
use support::session_sse::anthropic_sse;
use support::{self, FAKE_KEY, Reply, Server, conformance};

fn anthropic_capture(name: &str) -> Reply {
    Reply::sse_file(conformance::dir().join("anthropic").join(name))
}

/// Tools for the resume test: `echo`, `fixed_version` (the recorded stream calls it) and
/// `fail`, which always fails.
fn resume_profile() -> ProviderProfile {
    ProviderProfile::new("anthropic", "claude-loopback")
        .with_base_instructions("You are a careful coding agent.")
        .with_parallel_tool_calls(true)
        .with_tool(echo_tool())
        .with_tool(tool("fixed_version", |_, _| Ok(ToolOutput::text("1.2.3"))))
        .with_tool(tool("fail", |_, _| {
            Err("the build failed: fix the compile error in main.rs first".to_string())
        }))
}

fn dir_env(path: &Path) -> Arc<dyn ExecutionEnvironment> {
    Arc::new(DirEnv::new(path))
}

fn text_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

fn errors(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Error { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

fn warnings(events: &[SessionEvent], code_wanted: &str) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Warning { message, code } if code == code_wanted => Some(message.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_resumed_session_sends_the_request_the_original_would_have_sent_next_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let path = dir.path().join("session.jsonl");
    let original_server = Server::start(vec![
        // Thinking with a real signature, then a call without arguments.
        anthropic_capture("thinking_then_tool_use_no_args.sse"),
        // Text and two parallel calls, one of which fails.
        Reply::sse(anthropic_sse(
            "Checking both.",
            &[
                ("toolu_a", "echo", json!({"text": "one"})),
                ("toolu_b", "fail", json!({})),
            ],
        )),
        Reply::sse(anthropic_sse("Version 1.2.3; the build is broken.", &[])),
        // Second input: two redacted thinking blocks and text.
        anthropic_capture("redacted_thinking.sse"),
        // What the original answers after the resume point.
        Reply::sse(anthropic_sse("Next answer.", &[])),
    ]);
    let config = SessionConfig::default()
        .with_transcript(&path)
        .with_transcript_events(true);
    let original = Session::new(
        resume_profile(),
        dir_env(&work),
        support::anthropic_client(&original_server),
        config,
    )
    .unwrap();
    let mut events = original.events();
    original.steer("keep the answer short").unwrap();
    original
        .submit("which version is this, and does it build?")
        .unwrap();
    let first = collect_input(&mut events);
    assert_eq!(
        stop_reason(&first),
        StopReason::Completed,
        "{:?}",
        names(&first)
    );
    original.submit("magic string test").unwrap();
    let second = collect_input(&mut events);
    assert_eq!(stop_reason(&second), StopReason::Completed);
    assert_eq!(original_server.requests().len(), 4);

    // Resume from the transcript as it is now, into a file of its own.
    let resumed_server = Server::start(vec![Reply::sse(anthropic_sse("Next answer.", &[]))]);
    let resumed_path = dir.path().join("resumed.jsonl");
    let resumed = Session::resume(
        &path,
        resume_profile(),
        dir_env(&work),
        support::anthropic_client(&resumed_server),
        SessionConfig::default().with_transcript(&resumed_path),
    )
    .unwrap();
    let mut resumed_events = resumed.events();
    assert_ne!(resumed.id(), original.id());
    assert_eq!(resumed.history().len(), original.history().len());

    // "Would have sent next": the original continues with the same input.
    original.submit("now fix the build").unwrap();
    collect_input(&mut events);
    resumed.submit("now fix the build").unwrap();
    let after = collect_input(&mut resumed_events);
    assert_eq!(
        stop_reason(&after),
        StopReason::Completed,
        "{:?}",
        errors(&after)
    );

    let expected = original_server.requests()[4].clone();
    let actual = resumed_server.requests()[0].clone();
    assert_eq!(actual.json(), expected.json(), "the same request as JSON");
    assert_eq!(
        actual.body_text(),
        expected.body_text(),
        "the same request bytes"
    );
    // The request holds what makes the conversation hard to rebuild.
    let body = actual.body_text();
    for needle in [
        "EoQDCm0IDhgCKkCD",      // the recorded thinking signature
        "redacted_thinking",     // the recorded redacted blocks
        "keep the answer short", // steering
        "fix the compile error", // the tool error
        "toolu_b",               // the second parallel call
    ] {
        assert!(body.contains(needle), "`{needle}` in the resumed request");
    }

    // The transcripts hold no key, and the resumed one stands on its own.
    original.close();
    resumed.close();
    collect_to_end(&mut events);
    collect_to_end(&mut resumed_events);
    for file in [&path, &resumed_path] {
        assert!(
            !text_of(file).contains(FAKE_KEY),
            "no API key in {}",
            file.display()
        );
    }
    let whole = Transcript::read(&resumed_path).unwrap();
    assert_eq!(whole.resumes().len(), 1);
    assert_eq!(
        whole.resumes()[0].resumed_from.as_deref(),
        Some(original.id())
    );
    // (Timestamps are stored to the millisecond; the messages are exact.)
    assert_eq!(
        whole.history().to_messages(),
        resumed.history().to_messages()
    );
}

#[test]
fn resuming_appends_to_the_same_transcript_after_a_header_naming_the_earlier_session() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let model = ScriptedModel::new(vec![ScriptedTurn::text("first answer")]);
    let session = Session::new(
        profile(),
        dir_env(dir.path()),
        support::client_for(model),
        SessionConfig::default().with_transcript(&path),
    )
    .unwrap();
    session.run("first").unwrap();
    let first_id = session.id().to_string();
    drop(session);

    let model = ScriptedModel::new(vec![ScriptedTurn::text("second answer")]);
    let resumed = Session::resume(
        &path,
        profile(),
        dir_env(dir.path()),
        support::client_for(model.clone()),
        SessionConfig::default(),
    )
    .unwrap();
    let outcome = resumed.run("second").unwrap();
    assert_eq!(outcome.text, "second answer");
    let texts = user_texts(&model.requests()[0]);
    assert_eq!(
        texts,
        ["first", "second"],
        "the earlier input is in the request"
    );
    drop(resumed);

    let transcript = Transcript::read(&path).unwrap();
    assert_eq!(transcript.header().session_id, first_id);
    assert_eq!(transcript.resumes().len(), 1);
    assert_eq!(
        transcript.resumes()[0].resumed_from.as_deref(),
        Some(first_id.as_str())
    );
    assert_eq!(transcript.user_inputs(), ["first", "second"]);
    assert_eq!(transcript.history().assistant_turns(), 2);
    assert_eq!(transcript.request_count(), 2);
    assert!(
        transcript.warnings().is_empty(),
        "{:?}",
        transcript.warnings()
    );
}

/// A finished two-input session's transcript (scripted model, events recorded).
fn recorded_transcript(dir: &Path) -> PathBuf {
    let path = dir.join("t.jsonl");
    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "hi"})),
        ScriptedTurn::text("done").with_reasoning("easy"),
    ]);
    let session = Session::new(
        profile(),
        dir_env(dir),
        support::client_for(model),
        SessionConfig::default().with_transcript(&path),
    )
    .unwrap();
    session.run("say hi").unwrap();
    path
}

#[test]
fn a_transcript_cut_in_the_middle_of_its_last_line_is_read_and_the_torn_line_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = recorded_transcript(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let full = Transcript::read(&path).unwrap();
    assert!(full.torn_last_line().is_none());
    let last_start = bytes[..bytes.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    let cut_path = dir.path().join("cut.jsonl");
    // Every cut inside the last line's JSON.
    for cut in last_start + 1..bytes.len() - 1 {
        std::fs::write(&cut_path, &bytes[..cut]).unwrap();
        let torn = Transcript::read(&cut_path)
            .unwrap_or_else(|e| panic!("cut at {cut} of {}: {e}", bytes.len()));
        assert_eq!(
            torn.torn_last_line(),
            Some(std::str::from_utf8(&bytes[last_start..cut]).unwrap()),
            "cut at {cut}"
        );
        assert_eq!(torn.history().len(), full.history().len() - 1);
    }
    // Cut just before the newline: the record is whole and kept.
    std::fs::write(&cut_path, &bytes[..bytes.len() - 1]).unwrap();
    let whole = Transcript::read(&cut_path).unwrap();
    assert!(whole.torn_last_line().is_none());
    assert_eq!(whole.history(), full.history());
}

#[test]
fn resuming_a_torn_transcript_drops_the_torn_line_warns_and_leaves_a_clean_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = recorded_transcript(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 20]).unwrap();
    let torn = Transcript::read(&path).unwrap();
    let torn_text = torn.torn_last_line().unwrap().to_string();

    let model = ScriptedModel::new(vec![ScriptedTurn::text("resumed")]);
    let resumed = Session::resume(
        &path,
        profile(),
        dir_env(dir.path()),
        support::client_for(model),
        SessionConfig::default(),
    )
    .unwrap();
    let mut events = resumed.events();
    resumed.submit("go on").unwrap();
    let seen = collect_input(&mut events);
    let found = warnings(&seen, "transcript");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("cut short"), "{}", found[0]);
    assert!(found[0].contains(&torn_text[..20]), "{}", found[0]);
    drop(resumed);

    let after = Transcript::read(&path).unwrap();
    assert!(after.torn_last_line().is_none(), "the torn line is gone");
    assert_eq!(after.user_inputs(), ["say hi", "go on"]);
    assert!(after.history().check_tool_results().is_ok());
}

#[test]
fn resuming_after_a_crash_between_a_tool_call_and_its_result_answers_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = recorded_transcript(dir.path());
    // Keep the records up to the assistant turn with the call: a crash while it ran.
    let text = text_of(&path);
    let keep: Vec<&str> = text
        .lines()
        .take_while(|line| !line.contains(r#""type":"tool_results""#))
        .collect();
    std::fs::write(&path, keep.join("\n") + "\n").unwrap();

    let model = ScriptedModel::new(vec![ScriptedTurn::text("checked")]);
    let resumed = Session::resume(
        &path,
        profile(),
        dir_env(dir.path()),
        support::client_for(model.clone()),
        SessionConfig::default(),
    )
    .unwrap();
    resumed.run("did it run?").unwrap();
    let request = &model.requests()[0];
    let results: Vec<_> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .collect();
    assert_eq!(results.len(), 1);
    let body = serde_json::to_string(results[0]).unwrap();
    assert!(
        body.contains("session stopped before it finished"),
        "{body}"
    );
    assert!(resumed.history().check_tool_results().is_ok());
    drop(resumed);
    assert!(
        Transcript::read(&path)
            .unwrap()
            .history()
            .check_tool_results()
            .is_ok()
    );
}

#[test]
fn a_new_session_refuses_an_existing_transcript_file_and_leaves_it_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, "precious\n").unwrap();
    let err = Session::new(
        profile(),
        dir_env(dir.path()),
        support::client_for(ScriptedModel::new(vec![])),
        SessionConfig::default().with_transcript(&path),
    )
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(text_of(&path), "precious\n");
}

#[test]
fn recorded_events_include_those_a_run_caller_never_sees() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "hi"})),
        ScriptedTurn::text("done"),
    ]);
    let session = Session::new(
        profile(),
        dir_env(dir.path()),
        support::client_for(model),
        SessionConfig::default()
            .with_transcript(&path)
            .with_transcript_events(true),
    )
    .unwrap();
    session.run("say hi").unwrap();
    drop(session);
    let transcript = Transcript::read(&path).unwrap();
    let kinds: Vec<&str> = transcript.events().iter().map(|e| e.kind.name()).collect();
    assert_eq!(kinds.first(), Some(&"session_start"));
    assert_eq!(kinds.last(), Some(&"session_end"));
    for kind in [
        "user_input",
        "tool_call_start",
        "tool_call_end",
        "processing_end",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
}

// ---- replay ----

/// Files under `root` with their contents, relative paths as keys.
fn tree(root: &Path) -> BTreeMap<String, String> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            (rel, text_of(e.path()))
        })
        .collect()
}

fn file_profile(base: &str) -> ProviderProfile {
    ProviderProfile::new("anthropic", "claude-loopback")
        .with_base_instructions(base)
        .with_tool(tools::write_file())
        .with_tool(tools::edit_file())
        .with_tool(tools::shell())
}

/// A working directory whose commands see a variable holding a password.
fn local_env(work: &Path) -> Arc<dyn ExecutionEnvironment> {
    let base = BTreeMap::from([
        ("PATH".to_string(), "/usr/bin:/bin".to_string()),
        (
            "PROJECT_DB_URL".to_string(),
            "postgres://app:hunter2-secret@db/app".to_string(),
        ),
    ]);
    Arc::new(
        LocalExecutionEnvironment::new(work)
            .unwrap()
            .with_base_env(base),
    )
}

/// Tool calls as (id, name, arguments), from `TOOL_CALL_START` events.
fn tool_calls(events: &[SessionEvent]) -> Vec<(String, String, Value)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallStart {
                call_id,
                tool_name,
                arguments,
            } => Some((call_id.clone(), tool_name.clone(), arguments.clone())),
            _ => None,
        })
        .collect()
}

fn run_inputs(session: &Session, events: &mut Events, inputs: &[&str]) -> Vec<SessionEvent> {
    let mut seen = Vec::new();
    for input in inputs {
        session.submit(*input).unwrap();
        seen.extend(collect_input(events));
    }
    seen
}

const BASE: &str = "You are a careful coding agent.";

/// Records a file-editing session against the loopback server in `root/work`; returns the
/// transcript path, the tool calls, and the resulting files.
#[allow(clippy::type_complexity)]
fn record_file_session(
    root: &Path,
) -> (
    PathBuf,
    Vec<(String, String, Value)>,
    BTreeMap<String, String>,
) {
    let work = root.join("work");
    std::fs::create_dir(&work).unwrap();
    let path = root.join("recorded.jsonl");
    let server = Server::start(vec![
        Reply::sse(anthropic_sse(
            "Creating the files.",
            &[(
                "toolu_w",
                "write_file",
                json!({"file_path": "src/lib.rs", "content": "pub fn answer() -> u32 {\n    41\n}\n"}),
            )],
        )),
        Reply::sse(anthropic_sse(
            "",
            &[
                (
                    "toolu_e",
                    "edit_file",
                    json!({"file_path": "src/lib.rs", "old_string": "41", "new_string": "42"}),
                ),
                (
                    "toolu_s",
                    "shell",
                    json!({"command": "mkdir -p notes && printf 'fixed\\n' > notes/log.txt && cat notes/log.txt"}),
                ),
            ],
        )),
        Reply::sse(anthropic_sse("The answer is now 42.", &[])),
        Reply::sse(anthropic_sse(
            "",
            &[("toolu_x", "shell", json!({"command": "ls missing-file"}))],
        )),
        Reply::sse(anthropic_sse("That file does not exist.", &[])),
    ]);
    let session = Session::new(
        file_profile(BASE),
        local_env(&work),
        support::anthropic_client(&server),
        SessionConfig::default()
            .with_transcript(&path)
            .with_transcript_events(true),
    )
    .unwrap();
    let mut events = session.events();
    let seen = run_inputs(
        &session,
        &mut events,
        &["make answer() return 42", "is there a missing-file?"],
    );
    assert!(errors(&seen).is_empty(), "{:?}", errors(&seen));
    drop(session);
    let calls = tool_calls(&seen);
    assert_eq!(calls.len(), 4);
    (path, calls, tree(&work))
}

/// Moves `root/work` aside and gives back an empty `root/work` (the recorded path).
fn fresh_work_dir(root: &Path, aside: &str) -> PathBuf {
    let work = root.join("work");
    std::fs::rename(&work, root.join(aside)).unwrap();
    std::fs::create_dir(&work).unwrap();
    work
}

fn replay(
    transcript: &Transcript,
    mode: ReplayMode,
    base: &str,
    work: &Path,
) -> (ScriptedModel, Vec<SessionEvent>) {
    let model = ScriptedModel::from_transcript(transcript, mode);
    let session = Session::new(
        file_profile(base),
        local_env(work),
        Client::new().with_provider(model.clone()),
        SessionConfig::default(),
    )
    .unwrap();
    let mut events = session.events();
    let mut seen = Vec::new();
    for input in transcript.user_inputs() {
        session.submit(input).unwrap();
        let input_events = collect_until(&mut events, |e| {
            matches!(
                e.kind,
                EventKind::ProcessingEnd { .. } | EventKind::SessionEnd { .. }
            )
        });
        // A failed strict check is fatal: the session closes after this input.
        let closing = input_events.iter().any(|e| {
            matches!(
                e.kind,
                EventKind::SessionEnd { .. } | EventKind::Error { fatal: true, .. }
            )
        });
        seen.extend(input_events);
        if closing {
            break;
        }
    }
    (model, seen)
}

#[test]
fn a_loopback_recording_replays_in_strict_mode_with_the_same_tool_calls_and_files() {
    let root = tempfile::tempdir().unwrap();
    let (path, recorded_calls, recorded_files) = record_file_session(root.path());
    assert_eq!(
        recorded_files["src/lib.rs"],
        "pub fn answer() -> u32 {\n    42\n}\n"
    );
    assert_eq!(recorded_files["notes/log.txt"], "fixed\n");
    let text = text_of(&path);
    assert!(!text.contains(FAKE_KEY), "no API key in the transcript");
    assert!(
        !text.contains("hunter2"),
        "no command environment in the transcript"
    );

    let transcript = Transcript::read(&path).unwrap();
    assert_eq!(transcript.request_count(), 5);
    let work = fresh_work_dir(root.path(), "recorded-work");
    let (model, seen) = replay(&transcript, ReplayMode::Strict, BASE, &work);
    assert!(errors(&seen).is_empty(), "{:?}", errors(&seen));
    assert_eq!(model.request_count(), 5);
    assert_eq!(model.remaining_turns(), 0);
    assert_eq!(tool_calls(&seen), recorded_calls, "the same tool calls");
    assert_eq!(tree(&work), recorded_files, "the same files on disk");
    // The recorded requests rebuild what the replay was sent: exactly before the first
    // shell output, and up to the shell's `duration:` line after it — but for the
    // prompt-cache key, which names each session (the replay is another session).
    let replayed = model.requests();
    for (index, request) in replayed.iter().enumerate() {
        let mut recorded = transcript.request(index).unwrap();
        assert!(recorded.cache_key.is_some() && request.cache_key.is_some());
        assert_ne!(recorded.cache_key, request.cache_key);
        recorded.cache_key.clone_from(&request.cache_key);
        if index < 2 {
            assert_eq!(&recorded, request, "request {index}");
        }
        assert_eq!(
            without_durations(&recorded),
            without_durations(request),
            "request {index}"
        );
    }
}

/// The request as JSON with the shell's `duration: N ms` lines removed, its keys sorted
/// (a tool schema read back from the transcript is a value again, whose keys are sorted).
fn without_durations(request: &agentloop::llm::Request) -> String {
    let text = serde_json::to_value(request).unwrap().to_string();
    regex::Regex::new(r"\\nduration: \d+ ms")
        .unwrap()
        .replace_all(&text, "")
        .into_owned()
}

#[test]
fn a_changed_system_prompt_fails_strict_replay_with_the_first_difference_but_not_loose() {
    let root = tempfile::tempdir().unwrap();
    let (path, recorded_calls, recorded_files) = record_file_session(root.path());
    let transcript = Transcript::read(&path).unwrap();
    let changed = "You are a hasty coding agent.";

    let work = fresh_work_dir(root.path(), "recorded-work");
    let (model, seen) = replay(&transcript, ReplayMode::Strict, changed, &work);
    let found = errors(&seen);
    assert_eq!(found.len(), 1, "{found:?}");
    let message = &found[0];
    assert!(message.contains("request 1 differs"), "{message}");
    assert!(
        message.contains("messages[0].content[0].text"),
        "path in: {message}"
    );
    assert!(
        message.contains("careful coding agent"),
        "recorded value in: {message}"
    );
    assert!(
        message.contains("hasty coding agent"),
        "received value in: {message}"
    );
    assert_eq!(
        model.request_count(),
        1,
        "strict replay stops at the first request"
    );
    assert!(tree(&work).is_empty(), "no tool ran");

    let work = fresh_work_dir(root.path(), "strict-work");
    let (_, seen) = replay(&transcript, ReplayMode::Loose, changed, &work);
    assert!(errors(&seen).is_empty(), "{:?}", errors(&seen));
    assert_eq!(tool_calls(&seen), recorded_calls);
    assert_eq!(tree(&work), recorded_files);
}

#[test]
fn the_system_prompt_and_tools_are_written_once_not_on_every_round() {
    let root = tempfile::tempdir().unwrap();
    let (path, _, _) = record_file_session(root.path());
    let text = text_of(&path);
    let requests: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(r#"{"type":"request""#))
        .collect();
    assert_eq!(requests.len(), 5);
    let full: Vec<bool> = requests
        .iter()
        .map(|l| l.contains(r#""request":"#))
        .collect();
    assert_eq!(full, [true, false, false, false, false], "{requests:#?}");
    assert_eq!(text.matches("careful coding agent").count(), 1);
}

#[test]
fn history_turns_in_a_transcript_are_the_session_history() {
    let dir = tempfile::tempdir().unwrap();
    let path = recorded_transcript(dir.path());
    let transcript = Transcript::read(&path).unwrap();
    let kinds: Vec<&str> = transcript
        .history()
        .turns()
        .iter()
        .map(|t| match t {
            Turn::User(_) => "user",
            Turn::Assistant(_) => "assistant",
            Turn::ToolResults(_) => "tool_results",
            Turn::Steering(_) => "steering",
            Turn::System(_) => "system",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["user", "assistant", "tool_results", "assistant"]);
    let Turn::Assistant(last) = &transcript.history().turns()[3] else {
        unreachable!()
    };
    assert_eq!(last.reasoning.as_deref(), Some("easy"));
    assert!(
        serde_json::to_string(&last.parts)
            .unwrap()
            .contains("scripted-signature"),
        "the thinking signature is recorded"
    );
}

/// Records `read_file config.txt` (holding `v1`) with the scripted model; returns the
/// transcript.
fn record_read_session(dir: &Path) -> Transcript {
    std::fs::write(dir.join("config.txt"), "v1\n").unwrap();
    let path = dir.join("t.jsonl");
    let model = ScriptedModel::new(vec![
        ScriptedTurn::tool_call("read_file", json!({"file_path": "config.txt"})),
        ScriptedTurn::text("read it"),
    ]);
    let session = Session::new(
        read_profile(),
        dir_env(dir),
        support::client_for(model),
        SessionConfig::default().with_transcript(&path),
    )
    .unwrap();
    session.run("read the config").unwrap();
    drop(session);
    Transcript::read(&path).unwrap()
}

/// Replays `transcript` in `mode` over `dir`; returns the error messages and the requests.
fn replay_read_session(transcript: &Transcript, mode: ReplayMode, dir: &Path) -> Vec<String> {
    let model = ScriptedModel::from_transcript(transcript, mode);
    let session = Session::new(
        read_profile(),
        dir_env(dir),
        Client::new().with_provider(model),
        SessionConfig::default(),
    )
    .unwrap();
    let mut events = session.events();
    session.submit(transcript.user_inputs()[0]).unwrap();
    errors(&collect_until(&mut events, |e| {
        matches!(e.kind, EventKind::ProcessingEnd { .. })
    }))
}

#[test]
fn a_changed_tool_output_passes_strict_replay_and_fails_exact_replay_at_that_output() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = record_read_session(dir.path());
    std::fs::write(dir.path().join("config.txt"), "v2\n").unwrap();

    let strict = replay_read_session(&transcript, ReplayMode::Strict, dir.path());
    assert!(strict.is_empty(), "{strict:?}");

    let exact = replay_read_session(&transcript, ReplayMode::Exact, dir.path());
    assert_eq!(exact.len(), 1, "{exact:?}");
    let message = &exact[0];
    assert!(message.contains("request 2 differs"), "{message}");
    assert!(
        message.contains("].content[0].content"),
        "the tool result's text: {message}"
    );
    assert!(
        message.contains("v1") && message.contains("v2"),
        "{message}"
    );
}

fn read_profile() -> ProviderProfile {
    ProviderProfile::new("scripted", "scripted-model").with_tool(tools::read_file())
}

/// Parent spawns a child that writes a file, waits for it, answers (the scripted model
/// tells them apart by the `spawn_agent` tool only the parent has).
fn parent_and_child(request: &agentloop::llm::Request) -> ScriptedTurn {
    let results: Vec<String> = request
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|p| match p {
            agentloop::llm::ContentPart::ToolResult(r) => Some(r.content.clone()),
            _ => None,
        })
        .collect();
    let is_parent = request.tools.iter().any(|t| t.name == "spawn_agent");
    match (is_parent, results.len()) {
        (true, 0) => ScriptedTurn::tool_call("spawn_agent", json!({"task": "write NOTES.md"})),
        (true, 1) => {
            let spawned: Value = serde_json::from_str(&results[0]).unwrap_or_default();
            ScriptedTurn::tool_call("wait", json!({"agent_id": spawned["agent_id"]}))
        }
        (true, _) => ScriptedTurn::text("the child is done"),
        (false, 0) => ScriptedTurn::tool_call(
            "write_file",
            json!({"file_path": "NOTES.md", "content": "notes\n"}),
        ),
        (false, _) => ScriptedTurn::text("NOTES.md written"),
    }
}

#[test]
fn subagents_of_a_recorded_session_run_and_their_events_land_in_the_parent_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("parent.jsonl");
    let profile = agentloop::profiles::anthropic("scripted-demo").with_provider_id("scripted");
    let session = Session::new(
        profile,
        Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap()),
        Client::new().with_provider(ScriptedModel::dynamic(parent_and_child)),
        SessionConfig::default()
            .with_transcript(&path)
            .with_transcript_events(true),
    )
    .unwrap();
    let outcome = session.run("delegate the notes").unwrap();
    assert_eq!(outcome.text, "the child is done");
    drop(session);
    assert_eq!(text_of(&dir.path().join("NOTES.md")), "notes\n");
    let transcript = Transcript::read(&path).unwrap();
    assert!(
        transcript.resumes().is_empty(),
        "one session wrote the file"
    );
    let child_tool_ends = transcript
        .events()
        .iter()
        .filter(|e| {
            matches!(&e.kind, EventKind::SubagentEvent { event, .. }
                if matches!(event.kind, EventKind::ToolCallEnd { .. }))
        })
        .count();
    assert_eq!(child_tool_ends, 1, "the child's write_file, via the parent");
    assert_eq!(
        transcript.history().assistant_turns(),
        3,
        "the parent's own history"
    );
}
