//! The API in a stranger's first hour: it fails loudly where a Rust user expects it to.
//! `run` returns `Err` when the provider failed; a per-input iterator ends with its input;
//! a second `events()` iterator is refused; a missing directory, a malformed base URL and
//! an unregistered provider are errors that say what to do; the quick start works with
//! whichever key is set; `?` works inside a custom tool; a policy denial reads as the
//! host's; the README's offline snippet compiles in a crate of its own.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::Client;
use agentloop::llm::ToolDefinition;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::{self, ProviderProfile};
use agentloop::session::{Approval, EventKind, Session, SessionConfig, SessionEvent, StopReason};
use agentloop::tools::{RegisteredTool, ToolInput, ToolOutput};
use agentloop::{ErrorKind, Result};
use serde_json::json;

use support::providers::{GEMINI_KEY, OPENAI_KEY};
use support::turns::{anthropic_turn, chat_turn, gemini_turn, responses_turn};
use support::{self, Reply, Server};

fn scripted_session(
    turns: Vec<ScriptedTurn>,
    profile: ProviderProfile,
    config: SessionConfig,
) -> (Session, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let client = Client::new().with_provider(ScriptedModel::new(turns));
    let session = Session::new(profile, env, client, config).unwrap();
    (session, dir)
}

fn http_session(server: &Server) -> (Session, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let client = support::anthropic_client(server);
    let profile = ProviderProfile::new("anthropic", "claude-loopback");
    let session = Session::new(profile, env, client, SessionConfig::default()).unwrap();
    (session, dir)
}

#[test]
fn run_returns_err_on_a_404_from_the_loopback_server() {
    let server = Server::start(vec![Reply::json(
        404,
        r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-nope"}}"#,
    )]);
    let (session, _dir) = http_session(&server);
    let err = session.run("hello").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(err.to_string().contains("claude-nope"), "{err}");
}

#[test]
fn run_stays_ok_with_its_stop_reason_when_a_limit_stops_the_input() {
    let (session, _dir) = scripted_session(
        vec![
            ScriptedTurn::tool_call("shell", json!({"command": "true"})),
            ScriptedTurn::text("never reached"),
        ],
        ProviderProfile::new("scripted", "demo").with_tool(agentloop::tools::shell()),
        SessionConfig::default().with_max_tool_rounds_per_input(1),
    );
    let outcome = session.run("go").unwrap();
    assert_eq!(outcome.stop_reason, StopReason::RoundLimit);
}

#[test]
fn a_connection_error_names_the_url_it_tried() {
    // A port nobody listens on: bind, note it, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let client = Client::new()
        .with_provider(
            agentloop::llm::anthropic::Anthropic::new("k")
                .with_base_url(&url)
                .with_http_options(support::http_options()),
        )
        .with_retry_policy(agentloop::llm::RetryPolicy::none());
    let request = agentloop::llm::Request::new("m", vec![agentloop::llm::Message::user("hi")]);
    let err = client.complete(&request).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Network, "{err}");
    assert!(
        err.to_string().contains(&format!("{url}/v1/messages")),
        "{err}"
    );
}

#[cfg(feature = "tls")]
#[test]
fn a_plain_http_server_behind_an_https_url_says_so() {
    // A plain HTTP server answers a TLS ClientHello with a plain-text 400, as real ones do.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::Builder::new()
        .name("plain-http".to_string())
        .spawn(move || {
            use std::io::{Read, Write};
            let (mut stream, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 11\r\nconnection: close\r\n\r\nbad request",
            );
        })
        .unwrap();
    let url = format!("https://127.0.0.1:{port}");
    let client = Client::new()
        .with_provider(
            agentloop::llm::anthropic::Anthropic::new("k")
                .with_base_url(&url)
                .with_http_options(support::http_options()),
        )
        .with_retry_policy(agentloop::llm::RetryPolicy::none());
    let request = agentloop::llm::Request::new("m", vec![agentloop::llm::Message::user("hi")]);
    let err = client.complete(&request).unwrap_err();
    server.join().unwrap();
    let message = err.to_string();
    assert!(
        message.contains("plain HTTP") && message.contains("http://"),
        "{message}"
    );
    assert!(message.contains(&url), "{message}");
}

#[test]
fn the_per_input_iterator_ends_with_the_input() {
    let (session, _dir) = scripted_session(
        vec![ScriptedTurn::text("one"), ScriptedTurn::text("two")],
        ProviderProfile::new("scripted", "demo"),
        SessionConfig::default(),
    );
    let mut answers = Vec::new();
    for input in ["first", "second"] {
        // No close(): each iterator ends after its input's PROCESSING_END.
        let events: Vec<SessionEvent> = session.submit_events(input).unwrap().collect();
        assert!(
            matches!(events.last().unwrap().kind, EventKind::ProcessingEnd { .. }),
            "{:?}",
            events.last()
        );
        for event in events {
            if let EventKind::AssistantTextEnd { text, .. } = event.kind {
                answers.push(text);
            }
        }
    }
    assert_eq!(answers, ["one", "two"]);
}

#[test]
fn a_second_live_event_iterator_is_refused_with_a_clear_message() {
    let (session, _dir) = scripted_session(
        vec![],
        ProviderProfile::new("scripted", "demo"),
        SessionConfig::default(),
    );
    let first = session.events();
    let panic =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| session.events())).unwrap_err();
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap();
    assert!(message.contains("another event iterator"), "{message}");
    let Err(err) = session.submit_events("x") else {
        panic!("submit_events beside a live events() iterator was accepted");
    };
    assert_eq!(err.kind(), ErrorKind::Configuration);
    drop(first);
    drop(session.events()); // one at a time is fine
}

#[test]
fn a_missing_working_directory_is_an_error_at_construction() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-there");
    let err = LocalExecutionEnvironment::new(&missing).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
    assert!(!missing.exists(), "nothing was created");
    let file = dir.path().join("file.txt");
    std::fs::write(&file, "x").unwrap();
    let err = LocalExecutionEnvironment::new(&file).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotADirectory);
}

#[test]
fn each_malformed_base_url_gives_its_message() {
    for (url, says) in [
        (
            "127.0.0.1:11434/v1",
            "has no scheme: write `http://127.0.0.1:11434/v1`",
        ),
        (
            "localhost:11434",
            "has no scheme: write `http://localhost:11434`",
        ),
        (" http://127.0.0.1:11434/v1", "contains whitespace"),
        ("http://127.0.0.1:11434/v1\n", "contains whitespace"),
        ("http://local host:1/v1", "contains whitespace"),
        ("ftp://127.0.0.1/v1", "has the scheme `ftp`"),
        ("http:///v1", "has no host"),
        ("http://127.0.0.1:99999999/v1", "has an invalid port"),
        ("http://exa<mple>.com/v1", "is not a valid URL"),
    ] {
        let err = Client::from_vars(|name| match name {
            "OPENAI_COMPATIBLE_BASE_URL" => Some(url.to_string()),
            _ => None,
        })
        .map(|_| ())
        .expect_err(url);
        assert_eq!(err.kind(), ErrorKind::Configuration, "{url}");
        let message = err.to_string();
        assert!(message.contains(says), "{url:?}: {message}");
        assert!(message.contains("OPENAI_COMPATIBLE_BASE_URL"), "{message}");
        // The same check, for a URL given in code.
        assert!(agentloop::llm::check_base_url(url).is_err(), "{url:?}");
    }
    // Set on a provider in code, it is refused before any request, with the same words.
    let client = Client::new().with_provider(agentloop::llm::openai_chat::OpenAiChat::compatible(
        "localhost:11434/v1",
    ));
    let request = agentloop::llm::Request::new("m", vec![agentloop::llm::Message::user("hi")]);
    let err = client.complete(&request).unwrap_err();
    assert!(err.to_string().contains("has no scheme"), "{err}");
}

#[test]
fn an_unregistered_provider_error_lists_what_is_registered_and_how_to_fix_it() {
    let dir = tempfile::tempdir().unwrap();
    let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let client = Client::new().with_provider(ScriptedModel::new(vec![]));
    let profile = profiles::anthropic("claude-sonnet-4-5");
    let err = Session::new(profile, env, client, SessionConfig::default()).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("registered: scripted"), "{message}");
    assert!(message.contains("with_provider_id"), "{message}");
}

/// The README quick start, with `Client::from_vars` standing for `from_env` and the base
/// URL variable pointing at the loopback server.
fn quick_start(vars: &[(&str, String)]) -> Result<String> {
    let client = Client::from_vars(|name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    })?;
    let profile = profiles::for_client(&client)?;
    let dir = tempfile::tempdir()?;
    let env = Arc::new(LocalExecutionEnvironment::sandboxed(dir.path())?);
    let session = Session::new(profile, env, client, SessionConfig::default())?;
    let outcome = session.run("make the failing test pass")?;
    Ok(outcome.text)
}

#[test]
fn the_quick_start_works_with_only_an_openai_key() {
    let server = Server::start(vec![responses_turn("done", &[])]);
    let text = quick_start(&[
        ("OPENAI_API_KEY", OPENAI_KEY.to_string()),
        ("OPENAI_BASE_URL", format!("{}/v1", server.url())),
    ])
    .unwrap();
    assert_eq!(text, "done");
    let requests = server.requests();
    assert!(
        requests[0].path.starts_with("/v1/responses"),
        "{}",
        requests[0].path
    );
    assert_eq!(requests[0].json()["model"], "gpt-5");
}

#[test]
fn the_quick_start_works_with_only_a_gemini_key() {
    let server = Server::start(vec![gemini_turn("done", &[])]);
    let text = quick_start(&[
        ("GEMINI_API_KEY", GEMINI_KEY.to_string()),
        ("GEMINI_BASE_URL", server.url()),
    ])
    .unwrap();
    assert_eq!(text, "done");
    let requests = server.requests();
    assert!(
        requests[0].path.contains("/models/gemini-2.5-pro:"),
        "{}",
        requests[0].path
    );
}

#[test]
fn the_quick_start_works_with_only_an_anthropic_key() {
    let server = Server::start(vec![anthropic_turn("done", &[])]);
    let text = quick_start(&[
        ("ANTHROPIC_API_KEY", support::FAKE_KEY.to_string()),
        ("ANTHROPIC_BASE_URL", server.url()),
    ])
    .unwrap();
    assert_eq!(text, "done");
}

/// A local OpenAI-compatible server from its address alone: `for_client` asks it which
/// models it serves (`GET /v1/models`) and uses the only one.
#[test]
fn the_quick_start_works_with_only_a_local_servers_address() {
    let server = Server::start(vec![
        Reply::json(200, r#"{"object":"list","data":[{"id":"qwen-local"}]}"#),
        chat_turn("done", &[]),
    ]);
    let text =
        quick_start(&[("OPENAI_COMPATIBLE_BASE_URL", format!("{}/v1", server.url()))]).unwrap();
    assert_eq!(text, "done");
    let requests = server.requests();
    assert_eq!(requests[0].path, "/v1/models");
    assert_eq!(requests[1].path, "/v1/chat/completions");
    assert_eq!(requests[1].json()["model"], "qwen-local");
}

#[test]
fn for_client_lists_a_local_servers_models_when_it_serves_several() {
    let server = Server::start(vec![Reply::json(
        200,
        r#"{"data":[{"id":"llama-3-8b"},{"id":"qwen2.5-coder"}]}"#,
    )]);
    let url = format!("{}/v1", server.url());
    let client =
        Client::from_vars(|name| (name == "OPENAI_COMPATIBLE_BASE_URL").then(|| url.clone()))
            .unwrap();
    let err = profiles::for_client(&client).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Configuration);
    let message = err.to_string();
    for needed in [
        "2 models",
        "llama-3-8b",
        "qwen2.5-coder",
        "with_provider_id",
    ] {
        assert!(message.contains(needed), "{needed}: {message}");
    }
}

fn line_count_tool() -> RegisteredTool {
    let definition = ToolDefinition {
        name: "line_count".to_string(),
        description: "Count the lines of a file.".to_string(),
        parameters: json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"]
        })
        .into(),
        freeform: None,
    };
    RegisteredTool::fallible(definition, |input, ctx| {
        let ToolInput::Json(args) = input else {
            return Err("line_count takes JSON arguments".into());
        };
        let path = args["path"].as_str().ok_or("`path` must be a string")?;
        let text = std::fs::read_to_string(ctx.env.working_directory().join(path))?;
        Ok(ToolOutput::text(text.lines().count().to_string()))
    })
}

fn tool_ends(events: &[SessionEvent]) -> Vec<(bool, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnd {
                is_error,
                output,
                error,
                ..
            } => Some((
                *is_error,
                error.clone().or(output.clone()).unwrap_or_default(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn question_mark_inside_a_custom_tool_turns_an_io_error_into_a_message_for_the_model() {
    let (session, dir) = scripted_session(
        vec![
            ScriptedTurn::tool_call("line_count", json!({"path": "three.txt"})),
            ScriptedTurn::tool_call("line_count", json!({"path": "missing.txt"})),
            ScriptedTurn::text("done"),
        ],
        ProviderProfile::new("scripted", "demo").with_tool(line_count_tool()),
        SessionConfig::default(),
    );
    std::fs::write(dir.path().join("three.txt"), "a\nb\nc\n").unwrap();
    let events: Vec<SessionEvent> = session.submit_events("count").unwrap().collect();
    let ends = tool_ends(&events);
    assert_eq!(ends[0], (false, "3".to_string()));
    assert!(ends[1].0, "{ends:?}");
    assert!(ends[1].1.contains("No such file or directory"), "{ends:?}");
}

#[test]
fn a_denial_by_the_hosts_policy_reads_as_the_hosts_policy() {
    let (session, _dir) = scripted_session(
        vec![
            ScriptedTurn::tool_call("shell", json!({"command": "curl example.com"})),
            ScriptedTurn::text("ok"),
        ],
        ProviderProfile::new("scripted", "demo").with_tool(agentloop::tools::shell()),
        SessionConfig::default()
            .with_approval(|_| Approval::Deny("no network access in CI".to_string())),
    );
    let events: Vec<SessionEvent> = session.submit_events("fetch").unwrap().collect();
    let ends = tool_ends(&events);
    let text = &ends[0].1;
    assert!(
        text.contains("denied by the host's policy: no network access in CI"),
        "{text}"
    );
    assert!(!text.contains("by the user"), "{text}");
}

/// The README's first code block that opens with `fence`.
fn readme_block(fence: &str) -> String {
    let readme = std::fs::read_to_string(support::repo_root().join("README.md")).unwrap();
    let start = readme
        .find(fence)
        .unwrap_or_else(|| panic!("no {fence} block"))
        + fence.len();
    let end = start + readme[start..].find("```").unwrap();
    readme[start..end].to_string()
}

/// Compiles `source` as the main file of a crate of its own whose only dependency is
/// agentloop: rustc against the agentloop this test suite was built with (`--extern
/// agentloop` only, so a `use` of any other crate, such as serde_json, fails).
fn compile_alone(source: &str, dir: &Path) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let main = dir.join("main.rs");
    std::fs::write(&main, source).unwrap();
    let binary = dir.join("snippet");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let output = std::process::Command::new(rustc)
        .args([
            "--edition",
            "2024",
            "--crate-type",
            "bin",
            "--crate-name",
            "snippet",
        ])
        .arg("--extern")
        .arg(format!("agentloop={}", agentloop_rlib(&exe).display()))
        .arg("-L")
        .arg(format!("dependency={}", deps.display()))
        .arg("-o")
        .arg(&binary)
        .arg(&main)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the README snippet does not compile as its own crate:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    binary
}

/// The `libagentloop-*.rlib` this test binary was linked with: the newest one beside it
/// that is not newer than the binary itself (a target directory shared with other
/// checkouts, as `.ci/run` does, may hold their rlibs too, built later).
fn agentloop_rlib(exe: &Path) -> PathBuf {
    let modified = |path: &Path| path.metadata().and_then(|m| m.modified()).ok();
    let linked = modified(exe).unwrap();
    let deps = exe.parent().unwrap();
    std::fs::read_dir(deps)
        .unwrap()
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.starts_with("libagentloop-") && name.ends_with(".rlib")
        })
        .filter(|path| modified(path).is_some_and(|built| built <= linked))
        .max_by_key(|path| modified(path))
        .expect("cargo test built agentloop as an rlib in target/<profile>/deps")
}

#[test]
fn the_readme_offline_snippet_compiles_and_runs_as_its_own_crate() {
    let dir = tempfile::tempdir().unwrap();
    let binary = compile_alone(&readme_block("```rust\n"), dir.path());
    let ran = std::process::Command::new(&binary).output().unwrap();
    assert!(
        ran.status.success(),
        "the README snippet failed: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
}

/// The README quick start as its own crate, run in a directory of its own against the
/// loopback server, whose model tries to write outside that directory and to connect to a
/// local port: the sandbox denies both, and the tool results tell the model why.
#[test]
fn the_readme_quick_start_runs_sandboxed_as_its_own_crate() {
    let build = tempfile::tempdir().unwrap();
    let binary = compile_alone(&readme_block("```rust,no_run\n"), build.path());
    // Neither under the working directory nor under /tmp (writable under the sandbox).
    let beside = std::env::current_exe().unwrap();
    let beside = beside.parent().unwrap();
    let work = tempfile::tempdir_in(beside).unwrap();
    let outside = tempfile::tempdir_in(beside).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let target = outside.path().join("escaped.txt");
    let write = format!("echo escaped > {}", target.display());
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let server = Server::start(vec![
        anthropic_turn(
            "",
            &[support::turns::function(
                "w",
                "shell",
                json!({"command": write}),
            )],
        ),
        anthropic_turn(
            "",
            &[support::turns::function(
                "c",
                "shell",
                json!({"command": connect}),
            )],
        ),
        anthropic_turn("Both were denied.", &[]),
    ]);
    let ran = std::process::Command::new(&binary)
        .current_dir(work.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("ANTHROPIC_API_KEY", support::FAKE_KEY)
        .env("ANTHROPIC_BASE_URL", server.url())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.success(), "the quick start failed: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout).trim(),
        "Both were denied."
    );
    assert!(
        !target.exists(),
        "the write outside the directory went through"
    );
    assert!(listener.accept().is_err(), "the connection went through");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    // What the model was told after each call: the denial, and that the sandbox made it.
    for (request, what) in requests[1..].iter().zip(["write", "connect"]) {
        let told = request.body_text();
        let last = &told[told.rfind("tool_result").unwrap()..];
        assert!(last.contains("[sandbox: denied"), "{what}: {last}");
        assert!(!last.contains("connected"), "{what}: {last}");
    }
}

/// Every code block in the API docs uses only what a host crate depending on agentloop
/// alone has: `std`, `agentloop` (whose `serde_json` is re-exported) — no dev-dependency
/// such as `tempfile`, no bare `serde_json`. Doctests themselves cannot tell: they link
/// every dependency of the crate.
#[test]
fn doc_examples_use_nothing_but_std_and_agentloop() {
    let foreign = regex::Regex::new(r"(^|[^\w:])(serde_json|tempfile|serde|regex|libc)::").unwrap();
    let mut found = Vec::new();
    for entry in walkdir::WalkDir::new(support::repo_root().join("src")) {
        let entry = entry.unwrap();
        if entry.path().extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap();
        // Inside a fence, and whether it is Rust (not `text`, `json`, `sh`, …).
        let (mut in_fence, mut in_code) = (false, false);
        for (n, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            let Some(doc) = trimmed
                .strip_prefix("///")
                .or_else(|| trimmed.strip_prefix("//!"))
            else {
                (in_fence, in_code) = (false, false);
                continue;
            };
            if let Some(info) = doc.trim_start().strip_prefix("```") {
                in_code = !in_fence && (info.is_empty() || info.starts_with("rust"));
                in_fence = !in_fence;
                continue;
            }
            if in_code && foreign.is_match(doc) {
                found.push(format!(
                    "{}:{}: {}",
                    entry.path().display(),
                    n + 1,
                    doc.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "doc examples a host crate cannot compile:\n{}",
        found.join("\n")
    );
}
