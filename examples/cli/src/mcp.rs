//! MCP in the CLI: the servers of the `{"mcpServers": {…}}` file other clients use
//! (`--mcp-config FILE`), their OAuth tokens in one file (`--mcp-tokens FILE`, default
//! `$XDG_CONFIG_HOME/agentloop/mcp-tokens.json`), the header lines that list them with
//! their tool, resource and prompt counts, the terminal's part in a login (the URL on
//! stderr), and `agentloop mcp list|login|logout`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentloop::llm::Client;
use agentloop::llm::scripted::ScriptedModel;
use agentloop::mcp::{McpHost, McpServer, McpServerState, McpServerStatus, parse_config};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{Session, SessionConfig};

use crate::args::{McpAction, Options};

/// How long `agentloop mcp login` waits for the browser.
const LOGIN_WAIT: Duration = Duration::from_secs(300);

/// The token file: `--mcp-tokens`, else `$XDG_CONFIG_HOME/agentloop/mcp-tokens.json`,
/// else `~/.config/agentloop/mcp-tokens.json`; `None` without a home.
pub fn token_file(options: &Options, var: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(path) = &options.mcp_tokens {
        return Some(path.clone());
    }
    let config = var("XDG_CONFIG_HOME")
        .filter(|v| Path::new(v).is_absolute())
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|home| Path::new(&home).join(".config")))?;
    Some(config.join("agentloop").join("mcp-tokens.json"))
}

/// The servers in `path`; a server without a `cwd` runs in the agent's working directory,
/// and every server keeps its OAuth tokens in `tokens`.
pub fn servers(path: &Path, cwd: &Path, tokens: Option<&Path>) -> Result<Vec<McpServer>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the MCP config {}: {e}", path.display()))?;
    let mut servers = parse_config(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    for server in &mut servers {
        if server.cwd.is_none() {
            server.cwd = Some(cwd.to_path_buf());
        }
    }
    Ok(match tokens {
        Some(tokens) => servers
            .into_iter()
            .map(|s| s.with_token_file(tokens))
            .collect(),
        None => servers,
    })
}

/// The terminal's part in an MCP login: the authorization URL goes to stderr for the user
/// to open. `interactive` is false where nobody can open it (no terminal): the server is
/// then reported as needing `agentloop mcp login`.
pub struct Terminal {
    pub interactive: bool,
}

impl McpHost for Terminal {
    // The terminal is the user's prompt: a server's questions are declined, not asked.
    fn elicits(&self) -> bool {
        false
    }

    fn open_url(&self, server: &str, url: &str) -> bool {
        if !self.interactive {
            return false;
        }
        say!("mcp: {server} needs a login; open this address in a browser:\n  {url}");
        true
    }
}

/// What the status of a server says in one line.
fn describe(status: &McpServerStatus) -> String {
    match &status.state {
        McpServerState::Ready => {
            let mut parts = vec![plural(status.tools, "tool")];
            if status.resources + status.resource_templates > 0 {
                parts.push(plural(status.resources, "resource"));
            }
            if status.resource_templates > 0 {
                parts.push(plural(status.resource_templates, "resource template"));
            }
            if status.prompts > 0 {
                parts.push(plural(status.prompts, "prompt"));
            }
            format!("{} ({})", parts.join(", "), status.protocol_version)
        }
        McpServerState::NeedsLogin(_) => {
            format!("needs a login: run `agentloop mcp login {}`", status.name)
        }
        McpServerState::Failed(why) => {
            let first = why.lines().next().unwrap_or_default();
            format!("not available: {first}")
        }
        _ => "starting".to_string(),
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// One line per server: `mcp: everything: 13 tools, 7 resources, 3 prompts (2025-11-25)`
/// or why it is not there. Waits for the servers still starting (each at most its
/// startup timeout).
pub fn header(session: &Session) -> Vec<String> {
    session
        .mcp_servers()
        .iter()
        .map(|status| format!("mcp: {}: {}", status.name, describe(status)))
        .collect()
}

/// `agentloop mcp list|login|logout`: the exit status.
pub fn command(options: &Options, action: &McpAction, var: &dyn Fn(&str) -> Option<String>) -> i32 {
    let cwd = match &options.cwd {
        Some(cwd) => cwd.clone(),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    };
    let tokens = token_file(options, var);
    let path = options.mcp_config.as_deref().unwrap_or(Path::new(""));
    let servers = match servers(path, &cwd, tokens.as_deref()) {
        Ok(servers) => servers,
        Err(err) => {
            say!("agentloop: {err}");
            return 2;
        }
    };
    run_action(action, servers, &cwd)
}

fn run_action(action: &McpAction, servers: Vec<McpServer>, cwd: &Path) -> i32 {
    let find = |name: &str| servers.iter().find(|s| s.name == name).cloned();
    match action {
        McpAction::List => list(servers, cwd),
        McpAction::Login(name) => match find(name) {
            None => unknown(name, &servers),
            Some(server) if server.url.is_none() => {
                say!("agentloop: the MCP server `{name}` runs as a command: it has no login");
                1
            }
            Some(server) => login(&server),
        },
        McpAction::Logout(name) => match find(name) {
            None => unknown(name, &servers),
            Some(server) => match server.logout() {
                Ok(true) => {
                    out!("logged out of {name}");
                    0
                }
                Ok(false) => {
                    out!("{name} had no login kept");
                    0
                }
                Err(err) => {
                    say!("agentloop: {err}");
                    1
                }
            },
        },
    }
}

fn unknown(name: &str, servers: &[McpServer]) -> i32 {
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    say!(
        "agentloop: no MCP server `{name}` in the config; it has: {}",
        names.join(", ")
    );
    2
}

/// Connects to every server (no model is called) and prints each one's state, its
/// counts and whether a login is kept.
fn list(servers: Vec<McpServer>, cwd: &Path) -> i32 {
    let logins: Vec<(String, String)> = servers
        .iter()
        .map(|s| {
            let what = match (&s.url, &s.command) {
                (Some(url), _) => format!("http {url}"),
                (None, Some(command)) => format!("stdio {command} {}", s.args.join(" ")),
                (None, None) => "none".to_string(),
            };
            let login = match (&s.url, s.has_login()) {
                (Some(_), true) => "; login kept",
                (Some(_), false) => "; no login kept",
                _ => "",
            };
            (what.trim_end().to_string(), login.to_string())
        })
        .collect();
    let mut config = SessionConfig::default();
    for server in servers {
        config = config.with_mcp_server(server);
    }
    let profile = ProviderProfile::new("scripted", "none");
    let client = Client::new().with_provider(ScriptedModel::new(Vec::new()));
    let env = match agentloop::exec::LocalExecutionEnvironment::new(cwd) {
        Ok(env) => Arc::new(env),
        Err(err) => {
            say!("agentloop: {err}");
            return 1;
        }
    };
    let session = match Session::new(profile, env, client, config) {
        Ok(session) => session,
        Err(err) => {
            say!("agentloop: {err}");
            return 1;
        }
    };
    for (status, (what, login)) in session.mcp_servers().iter().zip(logins) {
        out!("{}  {what}{login}\n  {}", status.name, describe(status));
    }
    session.close();
    0
}

/// Logs in to `server`, the URL on stderr.
fn login(server: &McpServer) -> i32 {
    let host = Arc::new(Terminal { interactive: true });
    match server.login(host, LOGIN_WAIT) {
        Ok(()) => {
            let kept = server
                .token_file()
                .map(|p| format!("; the tokens are kept in {}", p.display()))
                .unwrap_or_default();
            out!("logged in to {}{kept}", server.name);
            0
        }
        Err(err) => {
            say!("agentloop: {err}");
            1
        }
    }
}
