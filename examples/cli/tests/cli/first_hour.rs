//! What a new user meets in the first hour: a closed pipe (`agentloop … 2>&1 | head -1`)
//! is exit status 1, never a panic or SIGABRT; `--network off` is never ignored; the
//! output-token cap; a local server found from the environment; hints for the usual
//! base-URL mistakes; `--resume FILE` alone.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};

use crate::{Wire, agent};
use support::{Reply, Server};

/// Runs the CLI with stdout and stderr (or stderr alone) on a pipe whose reader is gone:
/// what `… 2>&1 | head -1` leaves once `head` has its line.
fn with_closed_pipe(args: &[&str], stdout_too: bool) -> ExitStatus {
    let home = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut command = agent(args, &[], home.path());
    command
        .stdin(Stdio::null())
        .stderr(writer.try_clone().unwrap());
    if stdout_too {
        command.stdout(writer);
    } else {
        command.stdout(Stdio::null());
    }
    command.status().unwrap()
}

#[test]
fn agent_2_to_1_into_a_closed_pipe_exits_1_without_a_panic() {
    let server = Server::start(vec![Reply::sse(Wire::OpenAiChat.turn("done", &[]))]);
    let work = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", server.url());
    let real = [
        "--provider",
        "openai-chat",
        "--base-url",
        &base,
        "--cwd",
        work.path().to_str().unwrap(),
        "say done",
    ];
    let cases: [(&str, &[&str]); 4] = [
        ("the demo", &[]),
        ("the demo, --json", &["--json"]),
        ("a usage error", &["--no-such-option"]),
        ("a real run", &real),
    ];
    for (what, args) in cases {
        let status = with_closed_pipe(args, true);
        assert_eq!(status.signal(), None, "{what}: {status:?}");
        assert_eq!(status.code(), Some(1), "{what}: {status:?}");
    }
}

#[test]
fn a_closed_stderr_alone_exits_1_without_a_panic() {
    for (what, args) in [
        ("a usage error", &["--no-such-option"][..]),
        ("the demo", &["--json"]),
    ] {
        let status = with_closed_pipe(args, false);
        assert_eq!(status.signal(), None, "{what}: {status:?}");
        assert_eq!(status.code(), Some(1), "{what}: {status:?}");
    }
}

/// The same through a real `head -1`: bash points both streams at `head` and waits for
/// it to take its line and leave before the CLI starts, so that every write fails.
#[test]
fn agent_2_to_1_piped_into_head_1_exits_1_and_head_shows_nothing_of_a_panic() {
    let home = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new("/bin/bash");
    command
        .args([
            "-c",
            "exec 3>&1; exec > >(head -1 >&3) 2>&1; head_pid=$!; echo first; wait $head_pid; \
             \"$0\"; echo \"status $?\" >&3",
        ])
        .arg(crate::agentloop())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path());
    let ran = crate::run_command(command, "");
    assert_eq!(ran.stdout, "first\nstatus 1\n", "{}", ran.all_output());
}

/// `--network off` cannot hold without a sandbox: refused before anything starts (and
/// before any request), never silently ignored; the message names the fix.
#[test]
fn network_off_with_full_access_is_refused_with_exit_2() {
    let server = Server::start(vec![Reply::sse(Wire::OpenAiChat.turn("done", &[]))]);
    let work = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", server.url());
    let ran = crate::run_agent(
        &[
            "--provider",
            "openai-chat",
            "--base-url",
            &base,
            "--cwd",
            work.path().to_str().unwrap(),
            "--model",
            "m",
            "--sandbox",
            "full-access",
            "--network",
            "off",
            "curl http://127.0.0.1:9/",
        ],
        &[],
        "",
    );
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    assert!(
        ran.stderr.contains("--network off needs a sandbox"),
        "{}",
        ran.stderr
    );
    assert!(ran.stderr.contains("workspace-write"), "{}", ran.stderr);
    assert!(server.requests().is_empty(), "the run started");
    // With the network on, full access runs.
    let ran = crate::run_agent(
        &[
            "--provider",
            "openai-chat",
            "--base-url",
            &base,
            "--cwd",
            work.path().to_str().unwrap(),
            "--model",
            "m",
            "--sandbox",
            "full-access",
            "--network",
            "on",
            "say done",
        ],
        &[],
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
}

/// A Chat Completions server whose model never stops on its own: it streams one token
/// after another until the request's `max_tokens` (then `finish_reason: length`), or, with
/// none, until the client goes away. Returns the base URL and the request bodies it read.
fn endless_model() -> (String, std::sync::mpsc::Receiver<serde_json::Value>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (bodies, received) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("endless-model".into())
        .spawn(move || {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream);
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let cap = body["max_tokens"].as_u64();
            let _ = bodies.send(body);
            let mut stream = reader.into_inner();
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            if stream.write_all(head.as_bytes()).is_err() {
                return;
            }
            let chunk = |delta: &str, finish: &str| {
                format!(
                    "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\
                     \"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
                )
            };
            let mut sent = 0;
            while cap.is_none_or(|cap| sent < cap) {
                let token = chunk(&format!("{{\"content\":\"t{sent} \"}}"), "null");
                if stream.write_all(token.as_bytes()).is_err() {
                    return; // the client went away
                }
                sent += 1;
                if cap.is_none() {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            let end = chunk("{}", "\"length\"") + "data: [DONE]\n\n";
            let _ = stream.write_all(end.as_bytes());
        })
        .unwrap();
    (url, received)
}

#[test]
fn max_tokens_16_caps_a_model_that_would_not_stop() {
    let (base, bodies) = endless_model();
    let work = tempfile::tempdir().unwrap();
    let ran = crate::run_agent(
        &[
            "--provider",
            "openai-chat",
            "--base-url",
            &base,
            "--cwd",
            work.path().to_str().unwrap(),
            "--model",
            "m",
            "--max-tokens",
            "16",
            "--json",
            "count forever",
        ],
        &[],
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let body = bodies.recv_timeout(support::GENEROUS).unwrap();
    assert_eq!(body["max_tokens"], 16, "{body}");
    assert!(ran.stdout.contains("t15 "), "{}", ran.stdout);
    assert!(!ran.stdout.contains("t16 "), "{}", ran.stdout);
}

#[test]
fn max_tokens_takes_a_whole_number_above_0() {
    for bad in ["0", "many", "-1"] {
        let ran = crate::run_agent(&["--max-tokens", bad, "hi"], &[], "");
        assert_eq!(ran.status, Some(2), "{bad}: {}", ran.all_output());
        assert!(ran.stderr.contains("--max-tokens"), "{bad}: {}", ran.stderr);
    }
}

/// `--resume FILE` alone: the transcript names the provider, the server and the model;
/// the key is not in it (it comes from the environment again); a flag overrides.
#[test]
fn resume_file_alone_continues_against_the_recorded_provider_server_and_model() {
    let server = Server::start(vec![
        Reply::sse(Wire::OpenAiChat.turn("first", &[])),
        Reply::sse(Wire::OpenAiChat.turn("second", &[])),
        Reply::sse(Wire::OpenAiChat.turn("third", &[])),
    ]);
    let work = tempfile::tempdir().unwrap();
    let transcript = work.path().join("t.jsonl");
    let transcript = transcript.to_str().unwrap();
    let base = format!("{}/v1", server.url());
    let key = [("OPENAI_COMPATIBLE_API_KEY", support::FAKE_KEY)];
    let cwd = work.path().to_str().unwrap();
    let first = crate::run_agent(
        &[
            "--provider",
            "openai-chat",
            "--base-url",
            &base,
            "--model",
            "local-coder",
            "--cwd",
            cwd,
            "--transcript",
            transcript,
            "hello",
        ],
        &key,
        "",
    );
    assert_eq!(first.status, Some(0), "{}", first.all_output());
    let recorded = std::fs::read_to_string(transcript).unwrap();
    assert!(
        recorded.contains(&format!("\"base_url\":\"{base}\"")),
        "{recorded}"
    );
    assert!(
        !recorded.contains(support::FAKE_KEY),
        "the key was recorded"
    );

    let again = crate::run_agent(&["--resume", transcript, "go on"], &key, "");
    assert_eq!(again.status, Some(0), "{}", again.all_output());
    let overridden = crate::run_agent(
        &["--resume", transcript, "--model", "other", "and more"],
        &key,
        "",
    );
    assert_eq!(overridden.status, Some(0), "{}", overridden.all_output());

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[1].json()["model"], "local-coder");
    assert!(requests[1].body_text().contains("hello"), "not resumed");
    assert_eq!(
        requests[1].header("authorization"),
        Some(format!("Bearer {}", support::FAKE_KEY).as_str())
    );
    assert_eq!(requests[2].json()["model"], "other");
}

/// A local server from the environment alone: `OPENAI_COMPATIBLE_BASE_URL` chooses
/// openai-chat (as `Client::from_env` does), and with no model named the server is asked.
#[test]
fn a_local_server_from_the_environment_with_its_only_model_needs_no_flag() {
    let server = Server::start(vec![
        Reply::json(
            200,
            r#"{"object":"list","data":[{"id":"qwen-local","object":"model"}]}"#,
        ),
        Reply::sse(Wire::OpenAiChat.turn("done", &[])),
    ]);
    let work = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", server.url());
    let cwd = work.path().to_str().unwrap();
    let ran = crate::run_agent(
        &["--cwd", cwd, "say done"],
        &[("OPENAI_COMPATIBLE_BASE_URL", &base)],
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let requests = server.requests();
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("GET", "/v1/models")
    );
    assert_eq!(requests[1].path, "/v1/chat/completions");
    assert_eq!(requests[1].json()["model"], "qwen-local");
}

#[test]
fn a_local_server_with_several_models_is_an_error_listing_them() {
    let server = Server::start(vec![Reply::json(
        200,
        r#"{"data":[{"id":"llama-3-8b"},{"id":"qwen2.5-coder"}]}"#,
    )]);
    let base = format!("{}/v1", server.url());
    let ran = crate::run_agent(&["say done"], &[("OPENAI_COMPATIBLE_BASE_URL", &base)], "");
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    for needed in [
        "llama-3-8b",
        "qwen2.5-coder",
        "--model",
        "OPENAI_COMPATIBLE_MODEL",
    ] {
        assert!(ran.stderr.contains(needed), "{needed}: {}", ran.stderr);
    }
    assert_eq!(server.requests().len(), 1, "a model call was made");
}

#[test]
fn a_local_server_takes_its_model_from_openai_compatible_model_without_asking() {
    let server = Server::start(vec![Reply::sse(Wire::OpenAiChat.turn("done", &[]))]);
    let work = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", server.url());
    let ran = crate::run_agent(
        &["--cwd", work.path().to_str().unwrap(), "say done"],
        &[
            ("OPENAI_COMPATIBLE_BASE_URL", &base),
            ("OPENAI_COMPATIBLE_MODEL", "coder-7b"),
        ],
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].json()["model"], "coder-7b");
}

/// The CLI against an OpenAI-compatible server at `base`, `model` named.
fn against(base: &str, model: &str) -> crate::Ran {
    let work = tempfile::tempdir().unwrap();
    crate::run_agent(
        &[
            "--provider",
            "openai-chat",
            "--base-url",
            base,
            "--model",
            model,
            "--cwd",
            work.path().to_str().unwrap(),
            "say done",
        ],
        &[],
        "",
    )
}

#[test]
fn https_to_a_plain_http_server_says_to_use_http() {
    let server = Server::start(vec![Reply::sse(Wire::OpenAiChat.turn("done", &[]))]);
    let base = format!("{}/v1", server.url()).replacen("http://", "https://", 1);
    let ran = against(&base, "m");
    // A provider that cannot be reached: exit 5.
    assert_eq!(ran.status, Some(5), "{}", ran.all_output());
    assert!(ran.stderr.contains(&base), "the URL tried: {}", ran.stderr);
    assert!(
        ran.stderr.contains("use an `http://` URL"),
        "{}",
        ran.stderr
    );
}

#[test]
fn a_404_on_a_base_url_without_v1_names_the_url_and_suggests_v1() {
    // llama.cpp's answer to an unknown path.
    let server = Server::start(vec![Reply::body(404, "text/plain", "File Not Found")]);
    let ran = against(&server.url(), "m");
    // An endpoint the provider does not know: refused for good, exit 6.
    assert_eq!(ran.status, Some(6), "{}", ran.all_output());
    let tried = format!("{}/chat/completions", server.url());
    assert!(ran.stderr.contains(&tried), "the URL tried: {}", ran.stderr);
    let fix = format!("did you mean `{}/v1`?", server.url());
    assert!(ran.stderr.contains(&fix), "{}", ran.stderr);
}

/// Ollama's missing model: a 404 whose body says `api_error`. Not a server error to retry
/// three times; the message names the model.
#[test]
fn a_404_for_a_missing_model_is_not_retried_and_names_the_model() {
    let body = r#"{"error":{"message":"model \"qwen9\" not found, try pulling it first","type":"api_error"}}"#;
    let server = Server::start(vec![Reply::json(404, body); 4]);
    let ran = against(&format!("{}/v1", server.url()), "qwen9");
    // An unknown model: refused for good, exit 6.
    assert_eq!(ran.status, Some(6), "{}", ran.all_output());
    assert_eq!(server.requests().len(), 1, "retried: {}", ran.stderr);
    assert!(
        ran.stderr.contains("may not have the model `qwen9`"),
        "{}",
        ran.stderr
    );
}

#[test]
fn mcp_config_mistakes_are_bad_usage() {
    let server = Server::start(vec![]);
    let work = tempfile::tempdir().unwrap();
    let malformed = work.path().join("mcp.json");
    std::fs::write(&malformed, "{\"mcpServers\": [").unwrap();
    let missing = work.path().join("none.json");
    for config in [&malformed, &missing] {
        let ran = crate::run_agent(
            &[
                "--provider",
                "openai-chat",
                "--base-url",
                &format!("{}/v1", server.url()),
                "--model",
                "m",
                "--cwd",
                work.path().to_str().unwrap(),
                "--mcp-config",
                config.to_str().unwrap(),
                "hi",
            ],
            &[],
            "",
        );
        assert_eq!(ran.status, Some(2), "{}", ran.all_output());
        assert!(
            ran.stderr.contains(config.to_str().unwrap()),
            "{}",
            ran.stderr
        );
    }
    assert!(server.requests().is_empty());
}

#[test]
fn a_failed_run_of_a_model_without_a_price_says_no_price() {
    let body = r#"{"error":{"message":"bad request","type":"invalid_request_error"}}"#;
    let server = Server::start(vec![Reply::json(400, body)]);
    let ran = against(&format!("{}/v1", server.url()), "local-model");
    // A request the provider refuses: a provider failure, exit 5.
    assert_eq!(ran.status, Some(5), "{}", ran.all_output());
    let footer = ran
        .stdout
        .lines()
        .find(|l| l.contains("tokens in"))
        .unwrap_or("");
    assert!(footer.contains("no price"), "{}", ran.stdout);
    assert!(!footer.contains('$'), "{footer}");
}

/// The README's example hooks file, used verbatim outside a Rust project: its `Stop` hook
/// lets the input end (no `cargo test` to fail, so no extra model round).
#[test]
fn the_readme_hooks_file_adds_no_model_round_outside_a_rust_project() {
    let readme = std::fs::read_to_string(support::repo_root().join("README.md")).unwrap();
    let start = readme
        .find("```json\n{\n  \"PreToolUse\"")
        .expect("the hooks block")
        + 8;
    let hooks = &readme[start..start + readme[start..].find("```").unwrap()];
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("hooks.json");
    std::fs::write(&file, hooks).unwrap();
    let server = Server::start(vec![
        Reply::sse(Wire::OpenAiChat.turn("done", &[])),
        Reply::sse(Wire::OpenAiChat.turn("done again", &[])),
    ]);
    let ran = crate::run_agent(
        &[
            "--provider",
            "openai-chat",
            "--base-url",
            &format!("{}/v1", server.url()),
            "--model",
            "m",
            "--cwd",
            work.path().to_str().unwrap(),
            "--hooks",
            file.to_str().unwrap(),
            "say done",
        ],
        &[],
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert_eq!(server.requests().len(), 1, "{}", ran.all_output());
}
