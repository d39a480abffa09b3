//! `agentloop --hooks FILE` end to end with `--json` against the loopback server: a
//! PreToolUse command blocks `rm`, a PostToolUse command appends a line, a Stop command
//! continues once; a command that sleeps past its timeout is a warning and a denial and
//! its process group is gone.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::{Ran, agentloop, run_command};
use support::turns::{anthropic_sse, function};
use support::{FAKE_KEY, Reply, Server};

fn run_with_hooks(server: &Server, work: &Path, hooks: &Value, prompt: &str) -> Ran {
    let file = work.join("hooks.json");
    std::fs::write(&file, hooks.to_string()).unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(agentloop());
    command
        .args([
            "--provider",
            "anthropic",
            "--base-url",
            &server.url(),
            "--cwd",
            work.to_str().unwrap(),
            "--hooks",
            file.to_str().unwrap(),
            "--json",
            prompt,
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", FAKE_KEY);
    run_command(command, "")
}

fn events(ran: &Ran) -> Vec<Value> {
    ran.stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

/// The tool results of an Anthropic request body, as `(text, is_error)`.
fn tool_results(body: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for message in body["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                let text = match &block["content"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out.push((text, block["is_error"] == true));
            }
        }
    }
    out
}

#[test]
fn a_hooks_file_blocks_rm_appends_after_tools_and_continues_once_at_stop() {
    let server = Server::start(vec![
        Reply::sse(anthropic_sse(
            "",
            &[
                function("c_rm", "shell", json!({"command": "rm -rf important"})),
                function("c_echo", "shell", json!({"command": "echo hi"})),
            ],
        )),
        Reply::sse(anthropic_sse("done", &[])),
        Reply::sse(anthropic_sse("really done", &[])),
    ]);
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("important")).unwrap();
    let hooks = json!({
        "PreToolUse": [{
            "matcher": "^shell$",
            "command": "input=$(cat); if printf '%s' \"$input\" | grep -q '\"command\":\"rm '; \
                        then echo 'rm commands are blocked by policy' >&2; exit 2; fi",
            "timeout_ms": 10000
        }],
        "PostToolUse": [{
            "command": "cat >/dev/null; echo '{\"additional_context\": \"post-hook: checked\"}'"
        }],
        "Stop": [{
            "command": "cat >/dev/null; [ -e stop.once ] && exit 0; touch stop.once; \
                        echo 'the tests still fail' >&2; exit 2"
        }]
    });
    let ran = run_with_hooks(&server, work.path(), &hooks, "clean up");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let events = events(&ran);

    // PreToolUse: the rm never ran; the model read the reason.
    assert!(work.path().join("important").is_dir());
    let mut ends = of_kind(&events, "tool_call_end");
    assert_eq!(ends.len(), 2);
    // The two calls may run in parallel: put them in call order.
    ends.sort_by_key(|e| e["data"]["call_id"] != "c_rm");
    assert_eq!(ends[0]["data"]["is_error"], true);
    assert!(
        ends[0]["data"]["error"]
            .as_str()
            .unwrap()
            .contains("rm commands are blocked by policy")
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{}", ran.all_output());
    let results = tool_results(requests[1].json());
    assert!(results[0].1 && results[0].0.contains("rm commands are blocked by policy"));

    // PostToolUse: the line was appended to what the model saw; the host got the output.
    assert!(results[1].0.contains("hi"), "{results:?}");
    assert!(results[1].0.ends_with("post-hook: checked"), "{results:?}");
    let full = ends[1]["data"]["output"].as_str().unwrap();
    assert!(full.contains("hi") && !full.contains("post-hook"), "{full}");

    // Stop: continued once with the command's message, then ended.
    let last = requests[2].body_text();
    assert!(last.contains("the tests still fail"), "{last}");
    let stops: Vec<&Value> = of_kind(&events, "hook_decision")
        .into_iter()
        .filter(|e| e["data"]["hook"] == "stop")
        .collect();
    assert_eq!(stops.len(), 2);
    assert_eq!(stops[0]["data"]["decision"]["decision"], "continue_with");
    assert_eq!(stops[1]["data"]["decision"]["decision"], "continue");
    let end = of_kind(&events, "processing_end")[0];
    assert_eq!(end["data"]["stop_reason"], "completed");
    // Usage reached the JSON stream too: 3 calls of 10 in / 1 out each (the turn builder's).
    assert!(end["data"]["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn a_hook_command_past_its_timeout_is_a_warning_and_a_denial_and_its_group_is_gone() {
    let server = Server::start(vec![
        Reply::sse(anthropic_sse(
            "",
            &[function(
                "c_1",
                "shell",
                json!({"command": "echo ran > ran.txt"}),
            )],
        )),
        Reply::sse(anthropic_sse("carried on", &[])),
    ]);
    let work = tempfile::tempdir().unwrap();
    let hooks = json!({
        "PreToolUse": [{
            "command": "echo $$ > hook.pids; sleep 30 & echo $! >> hook.pids; wait",
            "timeout_ms": 500
        }]
    });
    let ran = run_with_hooks(&server, work.path(), &hooks, "try it");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let events = events(&ran);
    let warnings = of_kind(&events, "warning");
    assert!(
        warnings.iter().any(|w| w["data"]["code"] == "hook"
            && w["data"]["message"].as_str().unwrap().contains("timed out")),
        "{warnings:?}"
    );
    let decision = of_kind(&events, "hook_decision")[0];
    assert_eq!(decision["data"]["decision"]["decision"], "deny");
    assert_eq!(decision["data"]["call_id"], "c_1");
    assert!(!work.path().join("ran.txt").exists(), "the denied call ran");
    assert_eq!(
        of_kind(&events, "processing_end")[0]["data"]["stop_reason"],
        "completed"
    );
    // The hook's shell and its background sleep are gone (or reaped zombies).
    let pids = std::fs::read_to_string(work.path().join("hook.pids")).unwrap();
    let pids: Vec<&str> = pids.split_whitespace().collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit(") ").next().unwrap_or("").chars().next();
        assert!(
            stat.is_empty() || state == Some('Z'),
            "hook process {pid} still runs: {stat}"
        );
    }
}
