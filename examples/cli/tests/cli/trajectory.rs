//! `--trajectory FILE`: the ATIF trajectory of a run, checked here for its shape and by
//! Harbor's own validator (`harbor.utils.trajectory_validator` from PyPI `harbor` 0.25.0,
//! installed by `.ci/run` into `target/ci/harbor-venv`; without it the validator's half
//! is skipped with a printed reason, or fails under `AGENTLOOP_CI=1`): the three-round
//! task, a task with a subagent, a task that compacts, and a run killed mid-command.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use serde_json::{Value, json};

use support::turns::{anthropic_sse, function};
use support::{FAKE_KEY, GENEROUS, Reply, Server};

use crate::{Wire, agent, exit_within, run_agent};

/// The trajectory at `path`, parsed, and passed by Harbor's validator when installed;
/// the key is nowhere in it.
fn validated(path: &Path) -> Value {
    let trajectory = support::ci::validated_trajectory(path);
    let text = std::fs::read_to_string(path).unwrap();
    assert!(!text.contains(FAKE_KEY), "the key is in the trajectory");
    trajectory
}

/// A `--json --trajectory` run of `prompt` against `server` (Anthropic), in `work`.
fn run_with_trajectory(server: &Server, work: &Path, extra: &[&str], prompt: &str) -> PathBuf {
    let path = work.join("trajectory.json");
    let url = server.url();
    let mut args = vec![
        "--provider",
        "anthropic",
        "--base-url",
        &url,
        "--cwd",
        work.to_str().unwrap(),
        "--json",
        "--trajectory",
        path.to_str().unwrap(),
    ];
    args.extend(extra);
    args.push(prompt);
    let ran = run_agent(&args, &[("ANTHROPIC_API_KEY", FAKE_KEY)], "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    path
}

fn steps(trajectory: &Value) -> &Vec<Value> {
    trajectory["steps"].as_array().unwrap()
}

#[test]
fn the_three_round_task_gives_a_valid_trajectory_with_calls_results_and_metrics() {
    let server = Server::start(crate::task::three_round_replies(Wire::Anthropic));
    let work = tempfile::tempdir().unwrap();
    let path = run_with_trajectory(&server, work.path(), &[], "write, read, say done");
    let trajectory = validated(&path);
    assert_eq!(trajectory["agent"]["name"], "agentloop");
    assert!(trajectory["agent"]["model_name"].is_string());
    let tools = trajectory["agent"]["tool_definitions"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["function"]["name"] == "shell"));
    let steps = steps(&trajectory);
    let sources: Vec<&str> = steps
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["user", "agent", "agent", "agent"]);
    assert_eq!(steps[0]["message"], "write, read, say done");
    // Each call and its result in the step of the model call that made it.
    for (at, (id, tool)) in [(1, ("call_a1", "shell")), (2, ("call_a2", "read_file"))] {
        assert_eq!(steps[at]["tool_calls"][0]["tool_call_id"], id);
        assert_eq!(steps[at]["tool_calls"][0]["function_name"], tool);
        let result = &steps[at]["observation"]["results"][0];
        assert_eq!(result["source_call_id"], id);
    }
    assert!(
        steps[2]["observation"]["results"][0]["content"]
            .as_str()
            .unwrap()
            .contains("hello")
    );
    assert_eq!(steps[3]["message"], "done");
    let prompt: u64 = steps[1..]
        .iter()
        .map(|s| s["metrics"]["prompt_tokens"].as_u64().unwrap())
        .sum();
    assert!(prompt > 0);
    assert_eq!(trajectory["final_metrics"]["total_prompt_tokens"], prompt);
    assert_eq!(trajectory["final_metrics"]["total_steps"], 4);
}

#[test]
fn a_task_with_a_subagent_embeds_its_trajectory_and_references_it() {
    let kit = |text: &str, calls: &[support::turns::Call]| Reply::sse(anthropic_sse(text, calls));
    let server = Server::start_routed(
        vec![
            (
                "PARENT-TASK",
                vec![
                    kit(
                        "",
                        &[function(
                            "p1",
                            "spawn_agent",
                            json!({"task": "CHILD-TASK count"}),
                        )],
                    ),
                    kit(
                        "",
                        &[function("p2", "wait", json!({"agent_id": "agent-1"}))],
                    ),
                    kit("the child counted", &[]),
                ],
            ),
            (
                "CHILD-TASK",
                vec![
                    kit(
                        "",
                        &[function("c1", "shell", json!({"command": "seq 1 3"}))],
                    ),
                    kit("counted to 3", &[]),
                ],
            ),
        ],
        vec![],
    );
    let work = tempfile::tempdir().unwrap();
    let path = run_with_trajectory(&server, work.path(), &[], "PARENT-TASK delegate");
    let trajectory = validated(&path);
    let subs = trajectory["subagent_trajectories"].as_array().unwrap();
    assert_eq!(subs.len(), 1, "{trajectory}");
    let child = &subs[0];
    assert_eq!(child["trajectory_id"], "agent-1");
    let child_steps = steps(child);
    assert!(
        child_steps
            .iter()
            .any(|s| s["tool_calls"][0]["function_name"] == "shell"),
        "{child}"
    );
    // The spawn_agent result points at the embedded trajectory.
    let spawn = steps(&trajectory)
        .iter()
        .find(|s| s["tool_calls"][0]["function_name"] == "spawn_agent")
        .unwrap();
    assert_eq!(
        spawn["observation"]["results"][0]["subagent_trajectory_ref"][0]["trajectory_id"],
        "agent-1",
        "{spawn}"
    );
}

#[test]
fn a_task_that_compacts_has_context_management_steps() {
    let server = crate::compaction::server();
    let work = tempfile::tempdir().unwrap();
    let path = run_with_trajectory(
        &server,
        work.path(),
        &["--context-window", "8000"],
        "run the sixty rounds",
    );
    let trajectory = validated(&path);
    let steps = steps(&trajectory);
    let compactions: Vec<&Value> = steps
        .iter()
        .filter(|s| s["extra"]["context_management"] == "compaction")
        .collect();
    assert!(!compactions.is_empty(), "no compaction step");
    for step in compactions {
        assert_eq!(step["source"], "system");
        assert!(step["extra"]["tokens_after"].as_u64() < step["extra"]["tokens_before"].as_u64());
    }
    let calls = steps.iter().filter(|s| s["tool_calls"].is_array()).count();
    assert_eq!(calls, crate::compaction::ROUNDS);
}

#[test]
fn a_run_killed_during_a_command_leaves_a_valid_trajectory() {
    let server = Server::start(vec![Reply::sse(Wire::Anthropic.turn(
        "",
        &[(
            "call_k",
            "shell",
            json!({"command": "echo $$ > pid.txt; echo started; exec sleep 30", "timeout_ms": 60000}),
        )],
    ))]);
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let path = work.path().join("trajectory.json");
    let url = server.url();
    let args = [
        "--provider",
        "anthropic",
        "--base-url",
        &url,
        "--cwd",
        work.path().to_str().unwrap(),
        "--json",
        "--trajectory",
        path.to_str().unwrap(),
        "sleep",
    ];
    let mut child = agent(&args, &[("ANTHROPIC_API_KEY", FAKE_KEY)], home.path())
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let deadline = Instant::now() + GENEROUS;
    for line in stdout.lines().map_while(Result::ok) {
        if line.contains("tool_call_output_delta") && line.contains("started") {
            break;
        }
        assert!(Instant::now() < deadline, "the command did not start");
    }
    child.kill().unwrap(); // SIGKILL: nothing of the CLI runs after it
    exit_within("the killed agent", move || child.wait());
    let trajectory = validated(&path);
    let steps = steps(&trajectory);
    assert_eq!(
        steps.last().unwrap()["tool_calls"][0]["tool_call_id"],
        "call_k"
    );
    // The command's process outlives a SIGKILLed agent (nothing could end it): end it here.
    let sleeper = std::fs::read_to_string(work.path().join("pid.txt")).unwrap();
    // SAFETY: signalling the test's own grandchild by its recorded pid.
    unsafe { libc::kill(sleeper.trim().parse().unwrap(), libc::SIGKILL) };
}
