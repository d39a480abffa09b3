//! `agentloop acp`: the CLI as an Agent Client Protocol agent on stdin and stdout, the
//! reference host of the library's [`AcpAgent`]. It writes nothing but protocol on stdout
//! (notes go to stderr) and ends, with status 0, when stdin closes or a SIGTERM, SIGHUP or
//! Ctrl-C comes: every session is ended (its commands and MCP servers too) first.
//!
//! Each session gets the provider, profile and limits of the command line, a local
//! environment in the editor's directory under the `--sandbox` policy (which the editor's
//! `full-access` mode may lift for its commands), and starts in plan mode with `--plan`.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentloop::acp::{AcpAgent, SessionParts};
use agentloop::exec::SandboxPolicy;
use agentloop::session::{SessionConfig, SessionMode};
use agentloop::{Error, ErrorKind};

use crate::args::Options;
use crate::signals::{CtrlC, UntilSignal};
use crate::{EXIT_ERROR, EXIT_OK, control, hooks, mcp, sandbox, setup, usage_error};

/// Serves ACP until stdin closes (or a signal comes); the exit status.
pub fn run(options: Options, var: &dyn Fn(&str) -> Option<String>, ctrl_c: &CtrlC) -> i32 {
    let setup = match setup::resolve(&options, var) {
        Ok(setup) => setup,
        Err(err) => return usage_error(&err.0),
    };
    if setup.demo.is_some() {
        return usage_error(
            "agentloop acp needs a provider: set ANTHROPIC_API_KEY, OPENAI_API_KEY or \
             GEMINI_API_KEY (or --provider with --base-url for a local server)",
        );
    }
    for note in &setup.notes {
        say!("agentloop: {note}");
    }
    let (profile, client, fallbacks) = (setup.profile, setup.client, setup.fallbacks);
    let tokens = mcp::token_file(&options, var);
    if let Err(err) = sandbox::check(&options) {
        return usage_error(&err);
    }
    if let Err(err) = control::check(&options, &profile, &fallbacks) {
        return usage_error(&err.0);
    }
    let sessions_dir = options
        .sessions_dir
        .clone()
        .or_else(|| default_sessions_dir(var));
    let factory_options = options.clone();
    let mut agent = AcpAgent::new("agentloop", env!("CARGO_PKG_VERSION"), move |cwd: &Path| {
        let configuration = |e: String| Error::new(ErrorKind::Configuration, e);
        let env = sandbox::environment(&factory_options, cwd)
            .map_err(configuration)?
            .with_per_call_policy_up_to(SandboxPolicy::FullAccess);
        let env: Arc<dyn agentloop::exec::ExecutionEnvironment> = Arc::new(env);
        let config = session_config(&factory_options, (cwd, tokens.as_deref()), &env)
            .map_err(configuration)?;
        let config = control::configure(&factory_options, config, fallbacks.clone());
        let mut profile = profile.clone();
        if let Some(tokens) = factory_options.context_window {
            profile = profile.with_context_window_size(tokens);
        }
        Ok(SessionParts::new(profile, env, client.clone(), config))
    });
    if let Some(dir) = sessions_dir {
        agent = agent.with_sessions_dir(dir);
    }
    // A signal ends the input like a closed stdin: sessions end the orderly way.
    if let Err(err) = ctrl_c.handle().and_then(|()| ctrl_c.watch(|_| {})) {
        say!("agentloop: cannot handle signals: {err}");
        return EXIT_ERROR;
    }
    let input = UntilSignal {
        fd: std::io::stdin().as_raw_fd(),
        wake_fd: ctrl_c.wake_fd(),
    };
    match agent.serve(input, std::io::stdout()) {
        Ok(()) => EXIT_OK,
        Err(err) => {
            say!("agentloop: reading stdin failed: {err}");
            EXIT_ERROR
        }
    }
}

/// The limits, hooks and MCP servers of the command line for one session in `cwd`
/// (the servers' OAuth tokens kept in `tokens`).
fn session_config(
    options: &Options,
    (cwd, tokens): (&Path, Option<&Path>),
    env: &Arc<dyn agentloop::exec::ExecutionEnvironment>,
) -> Result<SessionConfig, String> {
    let mut config = SessionConfig::default()
        .with_max_turns(options.max_turns)
        .with_max_tool_rounds_per_input(options.max_rounds);
    if options.plan {
        config = config.with_mode(SessionMode::Plan);
    }
    if let Some(effort) = &options.reasoning_effort {
        config = config.with_reasoning_effort(effort.clone());
    }
    if let Some(tokens) = options.max_tokens {
        config = config.with_max_output_tokens(tokens);
    }
    if let Some(ms) = options.timeout_ms {
        config = config.with_default_command_timeout(std::time::Duration::from_millis(ms));
    }
    if let Some(path) = &options.hooks {
        config = config.with_hooks(hooks::load(path, env.clone())?);
    }
    if let Some(path) = &options.mcp_config {
        for server in mcp::servers(path, cwd, tokens)? {
            config = config.with_mcp_server(server);
        }
    }
    Ok(config)
}

/// `$XDG_STATE_HOME/agentloop/sessions`, else `$HOME/.local/state/agentloop/sessions`.
fn default_sessions_dir(var: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let absolute = |v: String| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    var("XDG_STATE_HOME")
        .and_then(absolute)
        .or_else(|| {
            var("HOME")
                .and_then(absolute)
                .map(|h| h.join(".local/state"))
        })
        .map(|state| state.join("agentloop/sessions"))
}
