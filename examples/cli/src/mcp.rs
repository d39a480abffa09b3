//! `--mcp-config FILE`: the MCP servers of the `{"mcpServers": {…}}` file other clients
//! use, and the header lines that list them with their tool counts.

use std::path::Path;

use agentloop::mcp::{McpServer, McpServerState, parse_config};
use agentloop::session::Session;

/// The servers in `path`; a server without a `cwd` runs in the agent's working directory.
pub fn servers(path: &Path, cwd: &Path) -> Result<Vec<McpServer>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the MCP config {}: {e}", path.display()))?;
    let mut servers = parse_config(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    for server in &mut servers {
        if server.cwd.is_none() {
            server.cwd = Some(cwd.to_path_buf());
        }
    }
    Ok(servers)
}

/// One line per server: `mcp: everything: 13 tools (2025-11-25)` or why it failed. Waits
/// for the servers still starting (each at most its startup timeout).
pub fn header(session: &Session) -> Vec<String> {
    session
        .mcp_servers()
        .into_iter()
        .map(|status| match status.state {
            McpServerState::Ready => format!(
                "mcp: {}: {} tools ({})",
                status.name, status.tools, status.protocol_version
            ),
            McpServerState::Failed(why) => {
                let first = why.lines().next().unwrap_or_default().to_string();
                format!("mcp: {}: not available: {first}", status.name)
            }
            _ => format!("mcp: {}: starting", status.name),
        })
        .collect()
}
