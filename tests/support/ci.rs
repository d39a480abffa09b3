//! The external programs `.ci/run` installs under `target/ci/` of the repository (npm and
//! pip packages, pinned there), found where the tests expect them. A missing one skips its
//! test with a printed reason, or fails it under `AGENTLOOP_CI=1` (CI installs everything).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/ci` under the repository root, whatever `CARGO_TARGET_DIR` says.
pub fn dir() -> PathBuf {
    crate::repo_root().join("target/ci")
}

/// `path` when it exists; otherwise prints why the test is skipped and returns `None`,
/// or fails when `AGENTLOOP_CI=1`.
pub fn installed(path: PathBuf, what: &str) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    let reason = format!(
        "{what} is not installed at {} (run `bash .ci/run` to install it)",
        path.display()
    );
    if std::env::var("AGENTLOOP_CI").as_deref() == Ok("1") {
        panic!("{reason}");
    }
    eprintln!("skipped: {reason}");
    None
}

/// The installed npm package's launcher, `target/ci/node/node_modules/.bin/<bin>`
/// (`AGENTLOOP_MCP_NODE` names another prefix).
pub fn npm_bin(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("AGENTLOOP_MCP_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir().join("node"))
        .join("node_modules/.bin")
        .join(bin);
    installed(path, bin)
}

/// A program of the MCP servers' venv, `target/ci/mcp-venv/bin/<bin>`
/// (`AGENTLOOP_MCP_VENV` names another venv).
pub fn venv_bin(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("AGENTLOOP_MCP_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir().join("mcp-venv"))
        .join("bin")
        .join(bin);
    installed(path, bin)
}

/// The npm packages of the ACP tests, `target/ci/acp/node_modules` (the official SDK
/// `@agentclientprotocol/sdk`, `ajv`, and the `acpx` client), when installed.
pub fn acp_node_modules() -> Option<PathBuf> {
    let modules = dir().join("acp/node_modules");
    installed(
        modules.join("@agentclientprotocol/sdk/schema/v1/schema.json"),
        "@agentclientprotocol/sdk",
    )?;
    installed(modules.join("ajv/package.json"), "ajv")?;
    Some(modules)
}

/// The ATIF trajectory at `path`, parsed, once Harbor's own validator
/// (`harbor.utils.trajectory_validator` from PyPI `harbor` 0.25.0, in
/// `target/ci/harbor-venv`) has accepted it; without Harbor the validator's half is
/// skipped as [`installed`] says.
pub fn validated_trajectory(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    let trajectory = serde_json::from_str(&text).unwrap();
    let python = installed(
        dir().join("harbor-venv/bin/python"),
        "Harbor (PyPI harbor 0.25.0, its trajectory validator)",
    );
    if let Some(python) = python {
        let out = Command::new(python)
            .args(["-m", "harbor.utils.trajectory_validator"])
            .arg(path)
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "Harbor's validator refused {}:\n{}{}\n{text}",
            path.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    trajectory
}
