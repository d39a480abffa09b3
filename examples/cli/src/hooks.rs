//! `agentloop --hooks FILE`: the hooks file read and its commands added to the library's
//! [`Hooks`]. The format and its rules are the library's
//! ([`HookCommands`](agentloop::session::HookCommands)); the commands run through the
//! execution environment (own process group, killed at their timeout), and this file never
//! spawns anything itself.

use std::path::Path;
use std::sync::Arc;

use agentloop::exec::ExecutionEnvironment;
use agentloop::session::{HookCommands, Hooks};

/// Reads the hooks file at `path` into [`Hooks`] whose commands run in `env`.
pub fn load(path: &Path, env: Arc<dyn ExecutionEnvironment>) -> Result<Hooks, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the hooks file `{}`: {e}", path.display()))?;
    let commands =
        HookCommands::parse(&text).map_err(|e| format!("hooks file `{}`: {e}", path.display()))?;
    Ok(commands.add_to(Hooks::new(), env))
}
