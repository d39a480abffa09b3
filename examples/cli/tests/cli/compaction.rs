//! `agentloop --context-window 8000`: a 60-round task against the loopback
//! server compacts, `--json` carries both compaction events with their fields, and the
//! human view prints a one-line notice.

use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::{agentloop, run_command};
use support::turns::{anthropic_sse, function};
use support::{FAKE_KEY, Reply, Server};

pub(crate) const ROUNDS: usize = 60;

pub(crate) fn server() -> Server {
    let mut replies: Vec<Reply> = (0..ROUNDS)
        .map(|n| {
            Reply::sse(anthropic_sse(
                "",
                &[function(
                    &format!("toolu_{n}"),
                    "shell",
                    json!({"command": format!("echo round {n}; seq 1 30")}),
                )],
            ))
        })
        .collect();
    replies.push(Reply::sse(anthropic_sse("all rounds done", &[])));
    let summaries = (0..ROUNDS)
        .map(|n| {
            Reply::sse(anthropic_sse(
                &format!("## Goal\nrun the rounds\n## Actions completed\nrounds up to {n}"),
                &[],
            ))
        })
        .collect();
    // Compaction requests carry our instructions; every other request gets the next round.
    Server::start_routed(vec![("handoff summary", summaries)], replies)
}

fn run(json_view: bool) -> (Option<i32>, String, String, Server) {
    let server = server();
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let url = server.url();
    let mut args = vec![
        "--provider",
        "anthropic",
        "--base-url",
        url.as_str(),
        "--cwd",
        work.path().to_str().unwrap(),
        "--context-window",
        "8000",
    ];
    if json_view {
        args.push("--json");
    }
    args.push("run the sixty rounds");
    let mut command = Command::new(agentloop());
    command
        .args(&args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", FAKE_KEY)
        .stdin(Stdio::piped());
    let ran = run_command(command, "");
    (ran.status, ran.stdout, ran.stderr, server)
}

#[test]
fn the_cli_with_an_8000_token_window_compacts_through_a_60_round_task() {
    let (status, stdout, stderr, server) = run(true);
    assert_eq!(status, Some(0), "{stderr}");
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kind = |k: &str| {
        events
            .iter()
            .filter(|e| e["kind"] == k)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(kind("tool_call_end").len(), ROUNDS);
    let starts = kind("context_compaction_start");
    let ends = kind("context_compaction_end");
    assert!(
        !ends.is_empty() && starts.len() == ends.len(),
        "{} / {}",
        starts.len(),
        ends.len()
    );
    for start in &starts {
        assert_eq!(start["data"]["reason"], "threshold");
        assert!(start["data"]["tokens_before"].as_u64().unwrap() > 6_000);
    }
    for end in &ends {
        let data = &end["data"];
        assert_eq!(data["reason"], "threshold");
        assert!(data["tokens_after"].as_u64() < data["tokens_before"].as_u64());
        assert!(data["turns_summarised"].as_u64().unwrap() > 0);
        assert!(["none", "truncated", "dropped"].contains(&data["fallback"].as_str().unwrap()));
        assert!(data["summary"].as_str().unwrap().starts_with("## Goal"));
    }
    let summaries = server
        .requests()
        .iter()
        .filter(|r| r.body_text().contains("handoff summary"))
        .count();
    assert_eq!(
        summaries,
        ends.len(),
        "one compaction request per compaction"
    );

    let (status, stdout, stderr, _server) = run(false);
    assert_eq!(status, Some(0), "{stderr}");
    let human = format!("{stdout}{stderr}");
    let notices = human
        .lines()
        .filter(|l| l.contains("context compacted (threshold)"))
        .count();
    assert_eq!(notices, ends.len(), "one line per compaction:\n{human}");
}
