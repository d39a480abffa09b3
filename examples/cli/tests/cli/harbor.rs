//! Harbor's generic ACP agent drives `agentloop acp`: an unmodified copy of Harbor's
//! in-container runner (`harbor/agents/installed/acp_runner.py` from PyPI `harbor` 0.25.0,
//! run on its own as Harbor uploads it, with the `agent-client-protocol` SDK) runs the
//! three-round task against the loopback model, selecting the model as `harbor run -m`
//! does; Harbor's own ACP agent class turns the runner's logs into ATIF, which Harbor's
//! validator accepts, with the token counts from the prompt response's `usage`. Skipped
//! with a printed reason when `target/ci/harbor-venv` is missing (a failure under
//! `AGENTLOOP_CI=1`).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use support::{FAKE_KEY, Reply, Server};

use crate::{Wire, agentloop, run_command};

/// Harbor's venv: its python and the runner file, when installed with the ACP SDK.
fn harbor() -> Option<(PathBuf, PathBuf)> {
    let venv = support::ci::dir().join("harbor-venv");
    let python = support::ci::installed(venv.join("bin/python"), "Harbor (PyPI harbor 0.25.0)")?;
    let site = venv.join("lib/python3.12/site-packages");
    let runner = support::ci::installed(
        site.join("harbor/agents/installed/acp_runner.py"),
        "Harbor's acp_runner.py",
    )?;
    support::ci::installed(site.join("acp/__init__.py"), "PyPI agent-client-protocol")?;
    Some((python, runner))
}

#[test]
fn harbors_acp_runner_drives_agentloop_acp_and_its_atif_is_valid() {
    let Some((python, runner)) = harbor() else {
        return;
    };
    let server = Server::start(vec![
        Reply::sse(Wire::Anthropic.turn(
            "",
            &[("c1", "shell", json!({"command": "echo hello > out.txt"}))],
        )),
        Reply::sse(
            Wire::Anthropic.turn("", &[("c2", "read_file", json!({"file_path": "out.txt"}))]),
        ),
        Reply::sse(Wire::Anthropic.turn("done: hello", &[])),
    ]);
    let home = tempfile::tempdir().unwrap();
    let work = home.path().join("work");
    let logs = home.path().join("logs/agent");
    let installed = home.path().join("installed-agent");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&installed).unwrap();
    // As Harbor uploads it: the runner alone (beside Harbor's `acp.py` it would shadow
    // the SDK's `acp`), and a launcher script for the agent.
    let runner_copy = installed.join("acp_runner.py");
    std::fs::copy(&runner, &runner_copy).unwrap();
    let launcher = installed.join("acp-launch.sh");
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\nexec '{}' acp --base-url '{}' --sessions-dir '{}' \"$@\"\n",
            agentloop().display(),
            server.url(),
            home.path().join("sessions").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut command = Command::new(&python);
    command
        .arg(&runner_copy)
        .args([
            "--instruction",
            "write hello to out.txt, read it back, then say done",
        ])
        .arg("--logs-dir")
        .arg(&logs)
        .arg("--launcher")
        .arg(&launcher)
        .current_dir(&work)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", FAKE_KEY)
        .env("HARBOR_ACP_REQUESTED_MODEL", "anthropic/claude-sonnet-4-5");
    let ran = run_command(command, "");
    let summary = std::fs::read_to_string(logs.join("acp-summary.json")).unwrap_or_default();
    assert_eq!(ran.status, Some(0), "{}\n{summary}", ran.all_output());
    assert_eq!(
        std::fs::read_to_string(work.join("out.txt")).unwrap(),
        "hello\n"
    );
    let summary: Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(
        summary["prompt_response"]["stopReason"], "end_turn",
        "{summary}"
    );
    assert_eq!(
        summary["set_model_mechanism"], "session_config_option",
        "{summary}"
    );
    assert!(
        summary["resolved_session_model_id"].is_string(),
        "{summary}"
    );
    assert_eq!(server.requests().len(), 3);

    // Harbor's ACP-to-ATIF conversion, then its validator.
    let mut convert = Command::new(&python);
    convert
        .arg(support::data_dir().join("harbor/acp_to_atif.py"))
        .arg(&logs)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True");
    let converted = run_command(convert, "");
    assert_eq!(converted.status, Some(0), "{}", converted.all_output());
    let counts: Value = serde_json::from_str(converted.stdout.trim()).unwrap();
    assert_eq!(counts["trajectory"], true, "{}", converted.all_output());
    assert!(
        counts["n_input_tokens"].as_u64().unwrap_or(0) > 0,
        "{counts}"
    );
    assert!(
        counts["n_output_tokens"].as_u64().unwrap_or(0) > 0,
        "{counts}"
    );
    let trajectory = logs.join("trajectory.json");
    let mut validate = Command::new(&python);
    validate
        .args(["-m", "harbor.utils.trajectory_validator"])
        .arg(&trajectory)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True");
    let validated = run_command(validate, "");
    assert_eq!(validated.status, Some(0), "{}", validated.all_output());
    let atif: Value = serde_json::from_str(&std::fs::read_to_string(&trajectory).unwrap()).unwrap();
    let calls: Vec<&Value> = atif["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["tool_calls"].as_array())
        .flatten()
        .collect();
    assert_eq!(calls.len(), 2, "{atif}");
    let all = format!("{}{}{}", ran.all_output(), summary, atif);
    assert!(!all.contains(FAKE_KEY), "the key leaked");
}
