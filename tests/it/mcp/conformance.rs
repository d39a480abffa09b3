//! The official MCP conformance runner (`@modelcontextprotocol/conformance`, installed by
//! `.ci/run` into `target/ci/conformance`) against our client: it starts a scenario's
//! server on localhost and launches `examples/mcp_client.rs` with the server's URL.
//!
//! The client scenarios run here are the ones the client supports: `initialize`,
//! `tools_call` and `sse-retry`. Not run: `elicitation-sep1034-client-defaults` (the client
//! declares no elicitation capability: a session has nobody to ask) and the `auth/*` suite
//! (no OAuth in this client). The runner is pinned to 0.1.13, the newest that runs on
//! Node 20 (0.1.14 and later use `fs.globSync`, Node 22).

use std::process::Command;

use super::*;
use support::programs::{example, run_command};

fn run_scenario(scenario: &str) {
    let runner = std::env::var_os("AGENTLOOP_MCP_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::ci::dir().join("conformance"))
        .join("node_modules/.bin/conformance");
    let Some(runner) = support::ci::installed(runner, "the MCP conformance runner") else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let client = example("mcp_client");
    let mut command = Command::new(runner);
    command
        .args(["client", "--scenario", scenario, "--command"])
        .arg(&client)
        .arg("-o")
        .arg(out.path());
    let ran = run_command(command, "");
    assert_eq!(
        ran.status,
        Some(0),
        "conformance scenario {scenario} failed:\n{}",
        ran.all_output()
    );
    assert!(
        ran.all_output().contains("OVERALL: PASSED"),
        "{}",
        ran.all_output()
    );
}

#[test]
fn conformance_initialize() {
    run_scenario("initialize");
}

#[test]
fn conformance_tools_call() {
    run_scenario("tools_call");
}

#[test]
fn conformance_sse_retry() {
    run_scenario("sse-retry");
}
