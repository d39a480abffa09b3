//! The `agentloop` CLI and its exec-server, run as a user runs them: the binaries cargo
//! built for this package (`CARGO_BIN_EXE_*`), a clean environment, a fresh `HOME`, and
//! the loopback model server of the test support. One module per feature of the CLI;
//! this file holds what they share.

mod acp;
mod acp_robustness;
mod background;
mod compaction;
mod conformance;
mod control;
mod exit_codes;
mod first_hour;
mod harbor;
mod harbor_run;
mod hardening;
mod hooks;
mod hostile_servers;
mod mcp;
mod patch;
mod remote;
mod rewind;
mod robustness;
mod sandbox;
mod static_container;
mod task;
mod trajectory;
mod transcript;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use support::turns::{self, function};

pub(crate) use support::programs::{Ran, exit_within, run_command};

/// The `agentloop` binary.
pub(crate) fn agentloop() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agentloop"))
}

/// The `agentloop-exec-server` binary.
pub(crate) fn exec_server() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agentloop-exec-server"))
}

/// A wire format the loopback server speaks to the CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    Anthropic,
    OpenAi,
    OpenAiChat,
    Gemini,
}

impl Wire {
    /// The request path the provider posts to, up to the model or the query string.
    fn path_prefix(self) -> &'static str {
        match self {
            Wire::Anthropic => "/v1/messages",
            Wire::OpenAi => "/v1/responses",
            Wire::OpenAiChat => "/v1/chat/completions",
            Wire::Gemini => "/v1beta/models/",
        }
    }

    /// One streamed answer: optional text, then function calls `(id, name, arguments)`.
    pub(crate) fn turn(self, text: &str, calls: &[(&str, &str, Value)]) -> String {
        let calls: Vec<turns::Call> = calls
            .iter()
            .map(|(id, name, args)| function(id, name, args.clone()))
            .collect();
        match self {
            Wire::Anthropic => turns::anthropic_sse(text, &calls),
            Wire::OpenAi => turns::responses_sse(text, &calls),
            Wire::OpenAiChat => turns::chat_sse(text, &calls),
            Wire::Gemini => turns::gemini_sse(text, &calls),
        }
    }
}

/// A command for the CLI with a clean environment: `PATH`, a fresh `HOME`, and `vars`.
pub(crate) fn agent(args: &[&str], vars: &[(&str, &str)], home: &Path) -> Command {
    let mut command = Command::new(agentloop());
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs the CLI to its end with `stdin` as input (see [`run_command`]).
pub(crate) fn run_agent(args: &[&str], vars: &[(&str, &str)], stdin: &str) -> Ran {
    let home = tempfile::tempdir().unwrap();
    run_command(agent(args, vars, home.path()), stdin)
}

/// The `kind` of each event.
pub(crate) fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["kind"].as_str().unwrap()).collect()
}
