//! `agentloop acp` driven by the official ACP client, the TypeScript SDK
//! (`@agentclientprotocol/sdk` 2.4.0, installed under `target/ci/` by `.ci/run`), through
//! `tests/data/acp/driver.mjs`, against the loopback model server: the three-round task,
//! cancel, a rejected permission, a load in a new process, two sessions at once, the
//! editor's files, modes and the model option. The driver validates every message the
//! agent sends against the package's `schema/v1/schema.json` and fails on the first
//! invalid one, naming its path. Without the packages (or `node`) the tests skip, or fail
//! under `AGENTLOOP_CI=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use support::{FAKE_KEY, GENEROUS, Reply, Server};

use crate::{Wire, agentloop, run_command};

/// What one driver run reports.
pub(crate) struct Drive {
    pub(crate) report: Value,
    pub(crate) server: Server,
    /// Holds the session directory, the sessions directory and the home.
    pub(crate) _home: tempfile::TempDir,
    pub(crate) cwd: PathBuf,
}

/// The packages and `node`, or `None` (skipped) when they are missing.
pub(crate) fn node_modules() -> Option<PathBuf> {
    let modules = support::ci::acp_node_modules()?;
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        let reason = "node is not installed";
        assert!(
            std::env::var("AGENTLOOP_CI").as_deref() != Ok("1"),
            "{reason}"
        );
        eprintln!("skipped: {reason}");
        return None;
    }
    Some(modules)
}

/// The arguments of `agentloop acp` against `server`, its sessions in `home/sessions`.
pub(crate) fn agent_args(server: &Server, home: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        agentloop().display().to_string(),
        "acp".to_string(),
        "--base-url".to_string(),
        server.url(),
        "--sessions-dir".to_string(),
        home.join("sessions").display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Runs `scenario` of the driver with the model answering `replies`, in a fresh directory
/// prepared by `prepare`; `None` when the client is not installed.
pub(crate) fn drive(
    scenario: &str,
    replies: Vec<Reply>,
    extra: &[&str],
    prepare: impl FnOnce(&Path),
) -> Option<Drive> {
    let modules = node_modules()?;
    let server = Server::start(replies);
    let home = tempfile::tempdir().unwrap();
    let cwd = home.path().join("work");
    std::fs::create_dir(&cwd).unwrap();
    let cwd = std::fs::canonicalize(cwd).unwrap();
    prepare(&cwd);
    let mut command = Command::new("node");
    command
        .arg(support::data_dir().join("acp/driver.mjs"))
        .arg(scenario)
        .arg("--")
        .args(agent_args(&server, home.path(), extra))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", FAKE_KEY)
        .env("ACP_NODE_MODULES", &modules)
        .env("ACP_CWD", &cwd);
    let ran = run_command(command, "");
    let last = ran.stdout.lines().last().unwrap_or("");
    let report: Value = serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "the driver's report is not JSON ({e}): {}",
            ran.all_output()
        )
    });
    assert_eq!(report["ok"], true, "{}", ran.all_output());
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert!(
        report["checked"].as_u64().unwrap() > 0,
        "no message was validated"
    );
    assert!(!ran.all_output().contains(FAKE_KEY), "the key leaked");
    Some(Drive {
        report: report["report"].clone(),
        server,
        _home: home,
        cwd,
    })
}

fn turn(text: &str, calls: &[(&str, &str, Value)]) -> Reply {
    Reply::sse(Wire::Anthropic.turn(text, calls))
}

/// The updates of kind `kind`.
fn updates<'a>(log: &'a Value, kind: &str) -> Vec<&'a Value> {
    log["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

/// The last `tool_call_update` carrying a status, for each call.
fn final_status<'a>(log: &'a Value, call: &str) -> &'a Value {
    updates(log, "tool_call_update")
        .into_iter()
        .rev()
        .find(|u| u["toolCallId"] == call && u.get("status").is_some_and(|s| s != "in_progress"))
        .map_or(&Value::Null, |u| &u["status"])
}

#[test]
fn the_three_round_task_and_an_edit_reach_end_turn_with_every_call_completed() {
    let replies = vec![
        turn(
            "",
            &[("c1", "shell", json!({"command": "echo hello > out.txt"}))],
        ),
        turn("", &[("c2", "read_file", json!({"file_path": "out.txt"}))]),
        turn("done", &[]),
        turn(
            "",
            &[(
                "c3",
                "edit_file",
                json!({"file_path": "out.txt", "old_string": "hello", "new_string": "goodbye"}),
            )],
        ),
        turn("changed", &[]),
    ];
    let Some(drive) = drive("task", replies, &[], |_| {}) else {
        return;
    };
    let log = &drive.report;
    assert_eq!(log["initialized"]["protocolVersion"], 1);
    for stop in log["stops"].as_array().unwrap() {
        assert_eq!(stop["stopReason"], "end_turn", "{stop}");
        assert!(stop["usage"]["totalTokens"].is_u64(), "{stop}");
    }
    // Every call announced with its kind, and driven to completed.
    let calls = updates(log, "tool_call");
    let kinds: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| {
            (
                c["toolCallId"].as_str().unwrap(),
                c["kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(kinds, [("c1", "execute"), ("c2", "read"), ("c3", "edit")]);
    for (id, _) in &kinds {
        assert_eq!(final_status(log, id), "completed", "{id}");
    }
    assert_eq!(calls[0]["title"], "echo hello > out.txt");
    let out = drive.cwd.join("out.txt").display().to_string();
    assert_eq!(calls[1]["locations"][0]["path"], out.as_str());
    // The edit's diff: the whole file before and after.
    let edit = updates(log, "tool_call_update")
        .into_iter()
        .find(|u| u["toolCallId"] == "c3" && u["status"] == "completed")
        .unwrap();
    assert_eq!(
        edit["content"][0],
        json!({"type": "diff", "path": out, "oldText": "hello\n", "newText": "goodbye\n"})
    );
    assert_eq!(
        std::fs::read_to_string(drive.cwd.join("out.txt")).unwrap(),
        "goodbye\n"
    );
    // The command and the edit asked first; the read did not.
    let asked: Vec<&str> = log["permissions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["toolCall"]["toolCallId"].as_str().unwrap())
        .collect();
    assert_eq!(asked, ["c1", "c3"]);
    let edit_question = &log["permissions"][1]["toolCall"]["content"][0];
    assert_eq!(edit_question["type"], "diff", "{edit_question}");
    // The answer text and the usage.
    let text: String = updates(log, "agent_message_chunk")
        .iter()
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "donechanged");
    assert!(!updates(log, "usage_update").is_empty());
    assert_eq!(drive.server.requests().len(), 5);
}

/// Processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .filter(|line| line.contains(marker))
        .collect()
}

#[test]
fn cancel_during_a_sleeping_command_answers_cancelled_and_leaves_no_process() {
    let marker = "sleep 30.4242";
    let replies = vec![
        turn(
            "",
            &[(
                "c1",
                "shell",
                json!({"command": format!("touch started; {marker}")}),
            )],
        ),
        turn("after the cancel", &[]),
    ];
    let Some(drive) = drive("cancel", replies, &[], |_| {}) else {
        return;
    };
    let log = &drive.report;
    assert_eq!(log["stop"]["stopReason"], "cancelled");
    eprintln!("cancel → cancelled in {} ms", log["cancelMs"]);
    assert!(log["cancelMs"].as_u64().unwrap() < GENEROUS.as_millis() as u64);
    // The call ended failed, never completed, and its process is gone.
    assert_eq!(final_status(log, "c1"), "failed");
    assert!(
        processes_with(marker).is_empty(),
        "{:?}",
        processes_with(marker)
    );
    // The history stayed valid: the next prompt ran, with the call answered.
    assert_eq!(log["next"]["stopReason"], "end_turn");
    let second = &drive.server.requests()[1];
    assert!(
        second.body_text().contains("interrupted"),
        "{}",
        second.body_text()
    );
}

#[test]
fn a_rejected_permission_leaves_the_file_system_untouched() {
    let replies = vec![
        turn(
            "",
            &[(
                "c1",
                "write_file",
                json!({"file_path": "new.txt", "content": "x"}),
            )],
        ),
        turn("understood", &[]),
    ];
    let Some(drive) = drive("reject", replies, &[], |_| {}) else {
        return;
    };
    let log = &drive.report;
    assert_eq!(log["permissions"].as_array().unwrap().len(), 1);
    let question = &log["permissions"][0];
    assert_eq!(question["toolCall"]["kind"], "edit");
    let kinds: Vec<&str> = question["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["allow_once", "allow_always", "reject_once", "reject_always"]
    );
    assert_eq!(final_status(log, "c1"), "failed");
    assert_eq!(log["stop"]["stopReason"], "end_turn");
    assert!(!drive.cwd.join("new.txt").exists());
    assert_eq!(std::fs::read_dir(&drive.cwd).unwrap().count(), 0);
}

#[test]
fn session_load_in_a_new_process_replays_the_history_before_it_answers() {
    let replies = vec![
        turn(
            "",
            &[("c1", "shell", json!({"command": "echo hello > out.txt"}))],
        ),
        turn("", &[("c2", "read_file", json!({"file_path": "out.txt"}))]),
        turn("done", &[]),
    ];
    let Some(drive) = drive("load", replies, &[], |_| {}) else {
        return;
    };
    let report = &drive.report;
    for exit in report["exits"].as_array().unwrap() {
        assert_eq!(exit["code"], 0, "{exit}");
    }
    assert_eq!(
        report["second"]["initialized"]["agentCapabilities"]["loadSession"],
        true
    );
    let id = report["first"]["sessionId"].as_str().unwrap();
    let listed = report["second"]["listed"]["sessions"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|s| s["sessionId"] == id && s["title"].is_string()),
        "{listed:?}"
    );
    let replayed = report["second"]["replayed"].as_array().unwrap();
    let kinds: Vec<&str> = replayed
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "user_message_chunk",
            "tool_call",
            "tool_call_update",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk",
        ]
    );
    assert_eq!(
        replayed[0]["content"]["text"],
        "write hello to out.txt and read it back"
    );
    assert_eq!(replayed[4]["status"], "completed");
    assert_eq!(replayed[5]["content"]["text"], "done");
    // No model call was made to load it.
    assert_eq!(drive.server.requests().len(), 3);
}

#[test]
fn two_sessions_on_one_connection_run_their_prompts_at_once() {
    // Each session's command marks itself and waits until both have: run one after the
    // other, the first would wait until its timeout and fail.
    let meet = "touch $(mktemp -p . mark.XXXXXX); n=0; while [ $(ls mark.* | wc -l) -lt 2 ]; \
                do n=$((n+1)); [ $n -gt 300 ] && exit 7; sleep 0.05; done; echo met";
    let replies = vec![
        turn("", &[("m", "shell", json!({"command": meet}))]),
        turn("", &[("m", "shell", json!({"command": meet}))]),
        turn("met", &[]),
        turn("met", &[]),
    ];
    let Some(drive) = drive("concurrent", replies, &[], |_| {}) else {
        return;
    };
    let log = &drive.report;
    for stop in log["stops"].as_array().unwrap() {
        assert_eq!(stop["stopReason"], "end_turn");
    }
    let sessions = log["sessions"].as_array().unwrap();
    assert_ne!(sessions[0], sessions[1]);
    let ends: Vec<&Value> = updates(log, "tool_call_update")
        .into_iter()
        .filter(|u| u["status"] == "completed")
        .collect();
    assert_eq!(ends.len(), 2, "{ends:?}");
    for end in ends {
        let text = end["content"][0]["content"]["text"].as_str().unwrap();
        assert!(
            text.contains("met") && text.contains("exit code: 0"),
            "{text}"
        );
    }
}

#[test]
fn with_the_editors_files_the_tools_read_and_write_its_buffers() {
    let replies = vec![
        turn("", &[("r", "read_file", json!({"file_path": "notes.txt"}))]),
        turn(
            "",
            &[(
                "w",
                "write_file",
                json!({"file_path": "new.txt", "content": "from the agent\n"}),
            )],
        ),
        turn("done", &[]),
    ];
    let Some(drive) = drive("editor_files", replies, &[], |cwd| {
        std::fs::write(cwd.join("notes.txt"), "what is on disk\n").unwrap();
    }) else {
        return;
    };
    let log = &drive.report;
    let notes = drive.cwd.join("notes.txt").display().to_string();
    assert_eq!(log["reads"][0]["path"], notes.as_str());
    // The model read the buffer, not the disk.
    let third = drive.server.requests()[2].body_text();
    assert!(third.contains("the unsaved buffer") && !third.contains("what is on disk"));
    // The write went to the editor (which keeps it in its buffer, not on disk).
    let new = drive.cwd.join("new.txt").display().to_string();
    assert_eq!(log["writes"][0]["path"], new.as_str());
    assert_eq!(log["writes"][0]["content"], "from the agent\n");
    assert!(!drive.cwd.join("new.txt").exists());
    assert_eq!(final_status(log, "w"), "completed");
}

#[test]
fn plan_mode_from_the_editor_asks_nothing_changes_nothing_and_the_model_option_switches() {
    let replies = vec![
        turn("", &[("t", "shell", json!({"command": "touch x"}))]),
        turn(
            "",
            &[(
                "p",
                "todo_write",
                json!({"todos": [{"content": "look around", "status": "completed"},
                             {"content": "change it", "status": "pending"}]}),
            )],
        ),
        turn("the plan", &[]),
        turn("on the other model", &[]),
    ];
    let Some(drive) = drive("modes", replies, &[], |_| {}) else {
        return;
    };
    let log = &drive.report;
    let modes = &log["session"]["modes"];
    assert_eq!(modes["currentModeId"], "default");
    let ids: Vec<&str> = modes["availableModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["default", "read-only", "full-access", "plan"]);
    let switched = updates(log, "current_mode_update");
    assert_eq!(switched[0]["currentModeId"], "plan");
    // Plan mode is enforced, not asked: no question, and `touch` was refused.
    assert!(log["permissions"].as_array().unwrap().is_empty());
    assert!(!drive.cwd.join("x").exists());
    let plan = updates(log, "plan");
    assert_eq!(
        plan[0]["entries"][1],
        json!({"content": "change it", "priority": "medium", "status": "pending"})
    );
    assert_eq!(log["stop"]["stopReason"], "end_turn");
    // The model option: listed, switched, and the next request uses it.
    let chosen = log["model"]["configOptions"][0]["currentValue"]
        .as_str()
        .unwrap();
    assert_ne!(
        chosen,
        log["session"]["configOptions"][0]["currentValue"]
            .as_str()
            .unwrap()
    );
    let last = drive.server.requests().last().unwrap().json()["model"].clone();
    assert_eq!(last, chosen);
}

#[test]
fn acpx_runs_the_three_round_task_through_agentloop_acp() {
    let Some(modules) = node_modules() else {
        return;
    };
    let acpx = modules.join("acpx/dist/cli.js");
    if support::ci::installed(acpx.clone(), "acpx").is_none() {
        return;
    }
    let server = Server::start(vec![
        turn(
            "",
            &[("c1", "shell", json!({"command": "echo hello > out.txt"}))],
        ),
        turn("", &[("c2", "read_file", json!({"file_path": "out.txt"}))]),
        turn("done: hello", &[]),
    ]);
    let home = tempfile::tempdir().unwrap();
    let cwd = home.path().join("work");
    std::fs::create_dir(&cwd).unwrap();
    let mut command = Command::new("node");
    command
        .arg(&acpx)
        .args(["--agent", &agent_args(&server, home.path(), &[]).join(" ")])
        .args(["--approve-all", "--format", "json", "--cwd"])
        .arg(&cwd)
        .args(["exec", "write hello to out.txt and read it back"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", FAKE_KEY);
    let ran = run_command(command, "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert_eq!(
        std::fs::read_to_string(cwd.join("out.txt")).unwrap(),
        "hello\n"
    );
    // `--format json` prints the protocol's messages, one per line.
    let messages: Vec<Value> = ran
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let answer: String = messages
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert_eq!(answer, "done: hello");
    assert!(
        messages
            .iter()
            .any(|m| m["result"]["stopReason"] == "end_turn"),
        "{}",
        ran.stdout
    );
    assert_eq!(server.requests().len(), 3);
    assert!(!ran.all_output().contains(FAKE_KEY));
}

#[test]
fn the_driver_fails_on_the_first_invalid_message_naming_its_path() {
    let Some(modules) = node_modules() else {
        return;
    };
    // A stand-in agent whose initialize answer has a string protocol version.
    let fake = r#"read -r line; id=$(printf '%s' "$line" | sed 's/.*"id":\([0-9]*\).*/\1/');
printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"one"}}\n' "$id"; cat >/dev/null"#;
    let mut command = Command::new("node");
    command
        .arg(support::data_dir().join("acp/driver.mjs"))
        .args(["init", "--", "bash", "-c", fake])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("ACP_NODE_MODULES", &modules)
        .env("ACP_CWD", "/tmp");
    let ran = run_command(command, "");
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    assert!(
        ran.stderr
            .contains("initialize result (InitializeResponse) at /protocolVersion"),
        "{}",
        ran.stderr
    );
}
