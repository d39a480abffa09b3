//! The CLI's sandbox: `--sandbox`, `--network`, `--sandbox-best-effort`,
//! `--allow-unix-socket` turned into the
//! library's [`Sandbox`] on the local environment, or sent to the remote exec-server, which
//! applies it on its side. It never runs anything unsandboxed that
//! the user did not ask for: a kernel that cannot enforce the policy is an error unless
//! `--sandbox-best-effort` is given.

use agentloop::exec::{Enforcement, LocalExecutionEnvironment, Network, Sandbox, SandboxPolicy};

use crate::args::Options;

/// Refuses what the sandbox options cannot mean: `--network off` with `--sandbox
/// full-access`, where nothing would keep the network off (commands run unconfined), so the
/// flag would be silently ignored.
pub fn check(options: &Options) -> Result<(), String> {
    if options.sandbox.as_deref() == Some("full-access") && options.network == Some(false) {
        return Err("--network off needs a sandbox, and --sandbox full-access runs commands                     without one (the network would stay on): drop --sandbox full-access (the                     default workspace-write sandbox keeps the network off), or use                     --sandbox read-only"
            .to_string());
    }
    Ok(())
}

/// The local environment in `cwd` under the sandbox the options ask for (default
/// workspace-write with `/tmp`, network off), or a message saying why it cannot run.
pub fn environment(
    options: &Options,
    cwd: &std::path::Path,
) -> Result<LocalExecutionEnvironment, String> {
    LocalExecutionEnvironment::new(cwd)
        .map_err(|e| e.to_string())?
        .with_sandbox(sandbox(options))
        .map_err(|e| format!("{e}; {RETRY}"))
}

/// What a user whose sandbox cannot be enforced may choose instead.
pub const RETRY: &str = "run with --sandbox-best-effort to run anyway, or --sandbox full-access";

/// The sandbox the options ask for, locally or sent to a remote exec-server (whose side
/// applies it, its working directory the writable root).
pub fn sandbox(options: &Options) -> Sandbox {
    let policy = match options.sandbox.as_deref() {
        Some("read-only") => SandboxPolicy::ReadOnly,
        Some("full-access") => SandboxPolicy::FullAccess,
        _ => SandboxPolicy::workspace_write(),
    };
    let mut sandbox = Sandbox::new(policy);
    if let Some(on) = options.network {
        sandbox = sandbox.with_network(if on { Network::On } else { Network::Off });
    }
    if options.sandbox_best_effort {
        sandbox = sandbox.with_enforcement(Enforcement::BestEffort);
    }
    for socket in &options.allowed_sockets {
        sandbox = sandbox.with_allowed_socket(socket);
    }
    sandbox
}

/// The header's words for the sandbox: `sandbox workspace-write, network off`.
pub fn describe(env: &LocalExecutionEnvironment) -> String {
    match env.sandbox() {
        Some(sandbox) => format!("sandbox {sandbox}"),
        None => "no sandbox (full access)".to_string(),
    }
}
