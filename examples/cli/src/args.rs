//! Command-line options of the `agentloop` CLI: hand-written parsing into [`Options`].
//!
//! One `match` arm per option keeps adding an option a three-line change (the option, its
//! field, its line in [`USAGE`]). Parsing never reads the environment and never exits: a
//! bad command line is a [`UsageError`] the caller turns into exit status 2.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use agentloop::session::Budget;

/// The help text (`agentloop --help`).
pub const USAGE: &str = "\
agentloop: a coding agent in your terminal, built on the agentloop library

USAGE:
    agentloop [OPTIONS] [PROMPT...]
    agentloop mcp list|login NAME|logout NAME --mcp-config FILE [--mcp-tokens FILE]
    agentloop acp [OPTIONS]

    With a PROMPT, runs it once and exits. Without one, reads the prompt from stdin, or,
    when stdin is a terminal, asks for one input after another (Ctrl-D ends).
    Without any API key in the environment, runs an offline demo with a scripted model.

    `agentloop acp` is an Agent Client Protocol agent on stdin and stdout, for editors
    (Zed, JetBrains IDEs, Neovim, Emacs): it writes nothing but protocol on stdout, logs
    on stderr, and exits 0 when stdin closes. The provider options apply to its sessions;
    the editor chooses the directory, the mode and the model.

OPTIONS:
    --provider NAME         anthropic | openai | openai-chat | gemini | demo
                            (default: the first of ANTHROPIC_API_KEY, OPENAI_API_KEY,
                            GEMINI_API_KEY, OPENAI_COMPATIBLE_BASE_URL found in the
                            environment, else demo)
    --model ID              the model (default: the provider's usual coding model; for
                            openai-chat OPENAI_COMPATIBLE_MODEL, else the server's only one)
    --profile NAME          openai | anthropic | gemini: tools and system prompt
                            (default: the provider's own; openai-chat uses openai,
                            demo uses anthropic)
    --base-url URL          the provider's endpoint (default: ANTHROPIC_BASE_URL,
                            OPENAI_BASE_URL, GEMINI_BASE_URL or GOOGLE_GEMINI_BASE_URL;
                            for openai-chat OPENAI_COMPATIBLE_BASE_URL; else the vendor's)
    --send-openai-key       send OPENAI_API_KEY to a --base-url that is not api.openai.com
                            (otherwise such a server gets OPENAI_COMPATIBLE_API_KEY, or no
                            key: local servers need none)
    --cwd DIR               the directory the agent works in (default: the current one;
                            the demo uses a fresh temporary directory)
    --max-turns N           stop after N model calls in the whole session (0 = no limit)
    --max-rounds N          stop an input after N tool rounds (0 = no limit)
    --max-tokens N          cap each model response at N output tokens (default: the
                            provider's; a local model that never stops needs one)
    --max-total-tokens N    stop once the session (its subagents included) has used N
                            tokens, input plus output
    --max-cost USD          stop once the session has cost USD dollars (every model it may
                            call needs a known price; without one this is a usage error)
    --max-wall DURATION     stop once the session has run DURATION (90, 90s, 15m, 2h)
    --max-tool-calls N      run at most N tool calls in the session
    --budget-warning F      emit budget_warning once F of a budget is used (default 0.8)
    --budget-note           and then tell the model how much is left, to wrap up
    --fallback-model LIST   models to continue with, in order, when the model keeps failing
                            (rate limits, overload, 5xx, quota): comma-separated MODEL (same
                            provider) or PROVIDER:MODEL (its key from the environment)
    --output-schema FILE    the final answer must be JSON valid against the JSON Schema in
                            FILE: printed alone on stdout (with --json, in the
                            processing_end event's `output`); exit 4 when none came
    --cache-ttl 5m|1h       how long the provider keeps the prompt cache (Anthropic)
    --reasoning-effort E    low | medium | high (or a provider's own value)
    --context-window TOKENS the model's context window (default: the model's own); the
                            history is compacted before it fills
    --timeout-ms MS         default timeout of shell commands (default 10000)
    --background-after SECS move a shell command still running after SECS to the
                            background instead of letting it time out; the model gets
                            its id (default: never). Background processes end with the
                            session, also on Ctrl-C twice, SIGTERM or SIGHUP
    --max-retry-wait SECS   the longest wait before retrying a failed model call
                            (default 60); a retry-after asking for more fails at once
    --stream-idle-timeout SECS
                            end a model stream that sends no event for SECS seconds
                            while data (keep-alive comments) still arrives (default 300)
    --approve MODE          auto: run every tool call (default)
                            ask: ask on the terminal before each shell command or write
                            (refused when there is no terminal)
    --sandbox MODE          read-only | workspace-write (default) | full-access: what
                            commands and file tools may write (Landlock + seccomp on Linux;
                            with --remote, applied by the exec-server on its side)
    --network on|off        whether commands may use the network (default: off under a
                            sandbox, on with full-access; off with full-access is refused)
    --allow-unix-socket PATH
                            let sandboxed commands connect to this host UNIX socket
                            (repeatable; e.g. /var/run/docker.sock); all others outside
                            the workspace stay hidden
    --sandbox-best-effort   run even where the kernel cannot enforce the whole sandbox
                            (a warning names what is not enforced); default: refuse to run
    --plan                  plan mode: look, don't touch (commands under the read-only
                            sandbox, no editing tools, the plan tool offered)
    --sessions-dir DIR      (acp) where sessions are kept for the editor to load
                            (default: $XDG_STATE_HOME/agentloop/sessions, or
                            ~/.local/state/agentloop/sessions)
    --json                  print one JSON object per session event on stdout, nothing else
    --transcript PATH       save the session as JSON Lines in PATH (a new file); with
                            --resume, where the continued session is saved instead
    --trajectory FILE       keep the run's ATIF trajectory (Harbor's format) in FILE,
                            replaced whole as it grows: valid even if killed
    --emit-patch FILE       at the end, write the work tree's changes since the start as a
                            git patch (binary, new and deleted files; ignored files left out)
    --predictions FILE      at the end, append the SWE-bench prediction line {instance_id,
                            model_name_or_path, model_patch} (needs --instance-id ID)
    --resume PATH           continue the session saved in PATH (appending to it unless
                            --transcript names another file), with the provider, base
                            URL and model it recorded unless flags name others
    --rewind N              with --resume: first put the files and the conversation back
                            as they were before input N (files you changed since the agent
                            did are left as they are and listed); with a PROMPT, then run
                            it, else stop there
    --dry-run               with --rewind: only print what the rewind would change
    --force                 with --rewind: also put back files you changed since
    --fork                  with --resume: continue PATH's conversation (before input N
                            with --rewind) as a new session with its own transcript
                            (--transcript, or PATH's name with .fork-1, .fork-2, …); PATH
                            and the files are left as they are
    --hooks FILE            run the hook commands in FILE (JSON; see the README's Hooks)
    --mcp-config FILE       MCP servers whose tools the agent offers, in the JSON other
                            clients use: {\"mcpServers\": {\"NAME\": {\"command\",
                            \"args\", \"env\"} or {\"url\", \"oauth\"}}}
    --mcp-tokens FILE       where the MCP servers' logins are kept (mode 0600; default
                            $XDG_CONFIG_HOME/agentloop/mcp-tokens.json, else
                            ~/.config/agentloop/mcp-tokens.json)

MCP:
    agentloop mcp list      each server of --mcp-config: its tools, resources and prompts,
                            whether it needs a login and whether one is kept
    agentloop mcp login N   log in to the HTTP server N (OAuth): open the address printed
                            in a browser; the tokens go to --mcp-tokens
    agentloop mcp logout N  forget the login kept for N
    --remote URL            run the tools on another machine: ssh://[user@]host[:port][/dir],
                            podman://CTR[/dir], docker://CTR[/dir] or
                            kubectl://[NAMESPACE/]POD[/CONTAINER][//dir] (an exec-server
                            there serves the directory; see --remote-server)
    --remote-runtime PATH   the podman/docker/kubectl binary (default: on PATH)
    --remote-arg ARG        one more argument for `RUNTIME exec -i` (repeatable), e.g.
                            --remote-arg=--user=1000
    --remote-command CMD    run the tools through any stdio transport, e.g.
                            \"podman exec -i -w /src ctr\" (the server command is appended)
    --remote-server CMD     the exec-server command on the remote side
                            (default: agentloop-exec-server on the remote PATH)
    -h, --help              print this help
    -V, --version           print the version

EXIT STATUS:
    0   done: the agent finished its input
    1   another error (local I/O, a closed stdout, a tool environment that cannot start)
    2   bad usage or configuration, found before anything started (a missing key too)
    3   a turn, round or budget limit stopped the agent
    4   no final answer valid against --output-schema
    5   the provider failed after the retries (network, timeout, overload, rate limit)
    6   the provider refused the account for good (rejected key, no access, unknown
        model or endpoint, no credit)
    130 interrupted (Ctrl-C; a second Ctrl-C aborts at once), 143 ended by SIGTERM,
        129 by SIGHUP (the running command is ended and the session closed, as for an
        abort)
    With --json the last line is {\"kind\":\"exit\",\"data\":{\"code\",\"reason\",
    \"detail\",\"message\",\"usage\"}}: the status, its reason above in a word, the stop
    reason or error kind, a sentence, and the session's tokens and cost when one ran.
";

/// A provider the CLI can talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderName {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Responses.
    OpenAi,
    /// Chat Completions (OpenAI or any compatible server).
    OpenAiChat,
    /// Google Gemini.
    Gemini,
    /// The offline scripted demo.
    Demo,
}

impl ProviderName {
    /// The provider a command-line name names.
    pub fn parse(text: &str) -> Option<ProviderName> {
        Some(match text {
            "anthropic" => ProviderName::Anthropic,
            "openai" => ProviderName::OpenAi,
            "openai-chat" => ProviderName::OpenAiChat,
            "gemini" => ProviderName::Gemini,
            "demo" => ProviderName::Demo,
            _ => return None,
        })
    }

    /// The name as given on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderName::Anthropic => "anthropic",
            ProviderName::OpenAi => "openai",
            ProviderName::OpenAiChat => "openai-chat",
            ProviderName::Gemini => "gemini",
            ProviderName::Demo => "demo",
        }
    }
}

/// Which provider-aligned profile (tools, system prompt) the agent uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileName {
    /// codex-style: `apply_patch`.
    OpenAi,
    /// Claude Code-style: `edit_file`.
    Anthropic,
    /// gemini-cli-style.
    Gemini,
}

impl ProfileName {
    fn parse(text: &str) -> Option<ProfileName> {
        Some(match text {
            "openai" => ProfileName::OpenAi,
            "anthropic" => ProfileName::Anthropic,
            "gemini" => ProfileName::Gemini,
            _ => return None,
        })
    }
}

/// When to ask before a tool call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApproveMode {
    /// Run everything.
    #[default]
    Auto,
    /// Ask on the terminal before shell commands and writes.
    Ask,
}

/// Everything the command line says.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub provider: Option<ProviderName>,
    pub model: Option<String>,
    pub profile: Option<ProfileName>,
    pub base_url: Option<String>,
    pub cwd: Option<PathBuf>,
    pub max_turns: usize,
    pub max_rounds: usize,
    /// `--max-tokens`: the output-token cap of each model response.
    pub max_tokens: Option<u32>,
    pub reasoning_effort: Option<String>,
    /// `--context-window`: overrides the model's context window.
    pub context_window: Option<usize>,
    pub timeout_ms: Option<u64>,
    /// `--background-after`: seconds after which a shell command moves to the background.
    pub background_after: Option<u64>,
    /// `--max-retry-wait`: the longest retry-after honoured, in seconds.
    pub max_retry_wait: Option<u64>,
    /// `--stream-idle-timeout`: the stream's progress timeout, in seconds.
    pub stream_idle_timeout: Option<u64>,
    pub approve: ApproveMode,
    /// `--sandbox`: `read-only`, `workspace-write` or `full-access` (`None`: the default).
    pub sandbox: Option<String>,
    /// `--network`: `Some(true)` for on.
    pub network: Option<bool>,
    /// `--sandbox-best-effort`.
    pub sandbox_best_effort: bool,
    /// `--allow-unix-socket`: host sockets sandboxed commands may connect to.
    pub allowed_sockets: Vec<PathBuf>,
    pub json: bool,
    /// `--send-openai-key`: OPENAI_API_KEY may go to a non-OpenAI `--base-url`.
    pub send_openai_key: bool,
    /// `--transcript`: where to save the session.
    pub transcript: Option<PathBuf>,
    /// `--trajectory`: where to keep the run's ATIF trajectory.
    pub trajectory: Option<PathBuf>,
    /// `--emit-patch`: where to write the working tree's changes as a git patch.
    pub emit_patch: Option<PathBuf>,
    /// `--predictions`: the SWE-bench predictions file a line is appended to.
    pub predictions: Option<PathBuf>,
    /// `--instance-id`: the SWE-bench instance of the prediction line.
    pub instance_id: Option<String>,
    /// `--resume`: the transcript to continue.
    pub resume: Option<PathBuf>,
    /// `--rewind`: the input to go back before.
    pub rewind: Option<usize>,
    /// `--dry-run`: only show what the rewind would change.
    pub dry_run: bool,
    /// `--force`: the rewind overwrites the user's changes too.
    pub force: bool,
    /// `--fork`: a new session from the resumed one's history.
    pub fork: bool,
    /// `--hooks`: the hook commands file.
    pub hooks: Option<PathBuf>,
    /// `--mcp-config`: the MCP servers file.
    pub mcp_config: Option<PathBuf>,
    /// `--mcp-tokens`: where MCP servers' OAuth tokens are kept.
    pub mcp_tokens: Option<PathBuf>,
    /// The positional words joined by spaces, if any.
    pub prompt: Option<String>,
    /// `--remote`: an `ssh://` URL whose host runs the tools.
    pub remote: Option<String>,
    /// `--remote-command`: a transport command line (split on whitespace).
    pub remote_command: Option<String>,
    /// `--remote-server`: the exec-server command on the remote side.
    pub remote_server: Option<String>,
    /// `--remote-runtime`: the container runtime binary of a container URL.
    pub remote_runtime: Option<PathBuf>,
    /// `--remote-arg`: extra arguments of the container runtime's `exec -i`.
    pub remote_args: Vec<String>,
    /// `--max-total-tokens`, `--max-cost`, `--max-wall`, `--max-tool-calls`.
    pub budget: Budget,
    /// `--budget-warning`: the fraction at which budget warnings fire.
    pub budget_warning: Option<f64>,
    /// `--budget-note`.
    pub budget_note: bool,
    /// `--fallback-model`: `MODEL` or `PROVIDER:MODEL`, in order.
    pub fallback_models: Vec<String>,
    /// `--output-schema`: the JSON Schema file of the final answer.
    pub output_schema: Option<PathBuf>,
    /// `--cache-ttl`.
    pub cache_ttl: Option<Duration>,
    /// `--plan`: the session starts in plan mode.
    pub plan: bool,
    /// `--sessions-dir`: where `agentloop acp` keeps its sessions.
    pub sessions_dir: Option<PathBuf>,
}

/// `agentloop mcp …`: what to do with the servers of `--mcp-config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpAction {
    /// List them with their state and counts.
    List,
    /// Log in to one (OAuth).
    Login(String),
    /// Forget the login kept for one.
    Logout(String),
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Run the agent.
    Run(Box<Options>),
    /// `agentloop mcp …`.
    Mcp(Box<Options>, McpAction),
    /// Serve the Agent Client Protocol on stdin and stdout.
    Acp(Box<Options>),
    /// Print [`USAGE`].
    Help,
    /// Print the version.
    Version,
}

/// A command line that cannot be run; the message says what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn usage(message: impl Into<String>) -> UsageError {
    UsageError(message.into())
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, UsageError> {
    let mut options = Options::default();
    let mut words: Vec<String> = Vec::new();
    let mut args = args.into_iter().peekable();
    let acp = args.peek().is_some_and(|first| first == "acp");
    if acp {
        args.next();
    }
    while let Some(arg) = args.next() {
        if arg == "--" {
            words.extend(args.by_ref());
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            words.push(arg);
            continue;
        }
        // `--name=value` or `--name value`.
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name.to_string(), Some(value)),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String, UsageError> {
            match inline {
                Some(v) => Ok(v.to_string()),
                None => args
                    .next()
                    .ok_or_else(|| usage(format!("{name} needs a value ({what})"))),
            }
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "--json" => options.json = true,
            "--send-openai-key" => options.send_openai_key = true,
            "--sandbox-best-effort" => options.sandbox_best_effort = true,
            "--allow-unix-socket" => options
                .allowed_sockets
                .push(PathBuf::from(non_empty(&name, value("a socket path")?)?)),
            "--plan" => options.plan = true,
            "--sessions-dir" => {
                options.sessions_dir = Some(PathBuf::from(non_empty(&name, value("a directory")?)?))
            }
            "--dry-run" => options.dry_run = true,
            "--force" => options.force = true,
            "--fork" => options.fork = true,
            "--rewind" => {
                let input: usize = number(&name, &value("an input number")?)?;
                if input == 0 {
                    return Err(usage("--rewind counts inputs from 1"));
                }
                options.rewind = Some(input);
            }
            "--provider" => {
                let text = value("anthropic, openai, openai-chat, gemini or demo")?;
                options.provider = Some(ProviderName::parse(&text).ok_or_else(|| {
                    usage(format!(
                        "unknown provider `{text}`; use anthropic, openai, openai-chat, gemini \
                         or demo"
                    ))
                })?);
            }
            "--profile" => {
                let text = value("openai, anthropic or gemini")?;
                options.profile = Some(ProfileName::parse(&text).ok_or_else(|| {
                    usage(format!(
                        "unknown profile `{text}`; use openai, anthropic or gemini"
                    ))
                })?);
            }
            "--model" => options.model = Some(non_empty(&name, value("a model id")?)?),
            "--base-url" => options.base_url = Some(non_empty(&name, value("a URL")?)?),
            "--cwd" => options.cwd = Some(PathBuf::from(non_empty(&name, value("a directory")?)?)),
            "--transcript" => {
                options.transcript = Some(PathBuf::from(non_empty(&name, value("a file")?)?))
            }
            "--trajectory" => {
                options.trajectory = Some(PathBuf::from(non_empty(&name, value("a file")?)?))
            }
            "--emit-patch" => {
                options.emit_patch = Some(PathBuf::from(non_empty(&name, value("a file")?)?))
            }
            "--predictions" => {
                options.predictions = Some(PathBuf::from(non_empty(&name, value("a file")?)?))
            }
            "--instance-id" => options.instance_id = Some(non_empty(&name, value("an id")?)?),
            "--hooks" => options.hooks = Some(PathBuf::from(non_empty(&name, value("a file")?)?)),
            "--mcp-config" => {
                options.mcp_config = Some(PathBuf::from(non_empty(&name, value("a file")?)?))
            }
            "--mcp-tokens" => {
                options.mcp_tokens = Some(PathBuf::from(non_empty(&name, value("a file")?)?))
            }
            "--resume" => options.resume = Some(PathBuf::from(non_empty(&name, value("a file")?)?)),
            "--remote" => options.remote = Some(non_empty(&name, value("a URL")?)?),
            "--remote-runtime" => {
                options.remote_runtime = Some(PathBuf::from(non_empty(&name, value("a program")?)?))
            }
            "--remote-arg" => options.remote_args.push(value("an argument")?),
            "--remote-command" => {
                options.remote_command = Some(non_empty(&name, value("a command line")?)?)
            }
            "--remote-server" => {
                options.remote_server = Some(non_empty(&name, value("a command")?)?)
            }
            "--max-turns" => options.max_turns = number(&name, &value("a number")?)?,
            "--max-tokens" => match number(&name, &value("a number")?)? {
                0 => return Err(usage("--max-tokens takes a number above 0")),
                n => options.max_tokens = Some(n),
            },
            "--max-total-tokens" => {
                options.budget = options
                    .budget
                    .with_tokens(number(&name, &value("tokens")?)?)
            }
            "--max-cost" => {
                options.budget = options
                    .budget
                    .with_cost_usd(dollars(&value("US dollars")?)?)
            }
            "--max-wall" => {
                options.budget = options
                    .budget
                    .with_wall_time(duration(&value("a duration")?)?)
            }
            "--max-tool-calls" => {
                options.budget = options
                    .budget
                    .with_tool_calls(number(&name, &value("a number")?)?)
            }
            "--budget-warning" => {
                let text = value("a fraction, e.g. 0.8")?;
                let fraction = text
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|f| *f > 0.0 && *f <= 1.0);
                let Some(fraction) = fraction else {
                    return Err(usage(format!(
                        "--budget-warning takes a fraction above 0 and at most 1, not `{text}`"
                    )));
                };
                options.budget_warning = Some(fraction);
            }
            "--budget-note" => options.budget_note = true,
            "--fallback-model" => {
                for model in value("models, comma-separated")?.split(',') {
                    options
                        .fallback_models
                        .push(non_empty(&name, model.trim().to_string())?);
                }
            }
            "--output-schema" => {
                options.output_schema = Some(PathBuf::from(non_empty(&name, value("a file")?)?))
            }
            "--cache-ttl" => {
                options.cache_ttl = Some(match value("5m or 1h")?.as_str() {
                    "5m" => Duration::from_secs(300),
                    "1h" => Duration::from_secs(3600),
                    other => {
                        return Err(usage(format!("unknown cache TTL `{other}`; use 5m or 1h")));
                    }
                })
            }
            "--max-rounds" => options.max_rounds = number(&name, &value("a number")?)?,
            "--context-window" => {
                let tokens: usize = number(&name, &value("a number of tokens")?)?;
                if tokens < 1_000 {
                    return Err(usage("--context-window must be at least 1000 tokens"));
                }
                options.context_window = Some(tokens);
            }
            "--timeout-ms" => {
                let ms: u64 = number(&name, &value("milliseconds")?)?;
                if ms == 0 {
                    return Err(usage("--timeout-ms must be at least 1"));
                }
                options.timeout_ms = Some(ms);
            }
            "--background-after" => {
                let secs: u64 = number(&name, &value("seconds")?)?;
                if secs == 0 {
                    return Err(usage("--background-after must be at least 1 second"));
                }
                options.background_after = Some(secs);
            }
            "--max-retry-wait" => options.max_retry_wait = Some(number(&name, &value("seconds")?)?),
            "--stream-idle-timeout" => {
                let secs: u64 = number(&name, &value("seconds")?)?;
                if secs == 0 {
                    return Err(usage("--stream-idle-timeout must be at least 1 second"));
                }
                options.stream_idle_timeout = Some(secs);
            }
            "--reasoning-effort" => {
                options.reasoning_effort = Some(non_empty(&name, value("low, medium or high")?)?)
            }
            "--sandbox" => {
                let mode = value("read-only, workspace-write or full-access")?;
                if !["read-only", "workspace-write", "full-access"].contains(&mode.as_str()) {
                    return Err(usage(format!(
                        "unknown sandbox `{mode}`; use read-only, workspace-write or full-access"
                    )));
                }
                options.sandbox = Some(mode);
            }
            "--network" => {
                options.network = match value("on or off")?.as_str() {
                    "on" => Some(true),
                    "off" => Some(false),
                    other => {
                        return Err(usage(format!("unknown network `{other}`; use on or off")));
                    }
                }
            }
            "--approve" => {
                options.approve = match value("auto or ask")?.as_str() {
                    "auto" => ApproveMode::Auto,
                    "ask" => ApproveMode::Ask,
                    other => {
                        return Err(usage(format!(
                            "unknown approval mode `{other}`; use auto or ask"
                        )));
                    }
                }
            }
            _ => {
                return Err(usage(format!("unknown option `{name}`")));
            }
        }
    }
    if options.remote.is_some() && options.remote_command.is_some() {
        return Err(usage(
            "--remote and --remote-command exclude each other; give one",
        ));
    }
    if acp {
        if !words.is_empty() {
            return Err(usage(
                "agentloop acp takes no prompt: the editor sends the prompts",
            ));
        }
        if options.remote.is_some() || options.remote_command.is_some() || options.json {
            return Err(usage(
                "agentloop acp runs its tools locally and speaks only ACP on stdout: \
                 --remote, --remote-command and --json do not apply",
            ));
        }
        return Ok(Command::Acp(Box::new(options)));
    }
    if options.sessions_dir.is_some() {
        return Err(usage("--sessions-dir applies to agentloop acp"));
    }
    if words.first().map(String::as_str) == Some("mcp") {
        let action = match &words[1..] {
            [list] if list == "list" => McpAction::List,
            [login, name] if login == "login" => McpAction::Login(name.clone()),
            [logout, name] if logout == "logout" => McpAction::Logout(name.clone()),
            _ => return Err(usage("agentloop mcp takes list, login NAME or logout NAME")),
        };
        if options.mcp_config.is_none() {
            return Err(usage(
                "agentloop mcp needs the servers' file: --mcp-config FILE",
            ));
        }
        return Ok(Command::Mcp(Box::new(options), action));
    }
    if (options.rewind.is_some() || options.fork) && options.resume.is_none() {
        return Err(usage(
            "--rewind and --fork work on a saved session: add --resume PATH",
        ));
    }
    if (options.dry_run || options.force) && options.rewind.is_none() {
        return Err(usage("--dry-run and --force go with --rewind N"));
    }
    if options.force && options.fork {
        return Err(usage(
            "--force goes with a rewind; --fork changes no file (drop --force)",
        ));
    }
    if options.dry_run && (options.fork || !words.is_empty()) {
        return Err(usage(
            "--dry-run only prints what the rewind would change; it runs no prompt and \
             makes no fork",
        ));
    }
    if !words.is_empty() {
        let prompt = words.join(" ");
        if prompt.trim().is_empty() {
            return Err(usage("the prompt is empty"));
        }
        options.prompt = Some(prompt);
    }
    Ok(Command::Run(Box::new(options)))
}

fn non_empty(name: &str, value: String) -> Result<String, UsageError> {
    if value.trim().is_empty() {
        Err(usage(format!("{name} needs a non-empty value")))
    } else {
        Ok(value)
    }
}

/// `--max-cost`: a non-negative number of dollars.
fn dollars(text: &str) -> Result<f64, UsageError> {
    text.trim()
        .trim_start_matches('$')
        .parse::<f64>()
        .ok()
        .filter(|d| d.is_finite() && *d >= 0.0)
        .ok_or_else(|| {
            usage(format!(
                "--max-cost takes US dollars (like 2.50), not `{text}`"
            ))
        })
}

/// `--max-wall`: seconds, or a number with `s`, `m` or `h`.
fn duration(text: &str) -> Result<Duration, UsageError> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().last() {
        Some((at, 's')) => (&text[..at], 1.0),
        Some((at, 'm')) => (&text[..at], 60.0),
        Some((at, 'h')) => (&text[..at], 3600.0),
        _ => (text, 1.0),
    };
    number
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n > 0.0)
        .and_then(|n| Duration::try_from_secs_f64(n * unit).ok())
        .ok_or_else(|| {
            usage(format!(
                "--max-wall takes a duration (90, 90s, 15m, 2h), not `{text}`"
            ))
        })
}

fn number<T: std::str::FromStr>(name: &str, text: &str) -> Result<T, UsageError> {
    text.trim()
        .parse()
        .map_err(|_| usage(format!("{name} takes a whole number, not `{text}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Options, UsageError> {
        match parse(args.iter().map(|s| s.to_string()))? {
            Command::Run(options) => Ok(*options),
            other => panic!("expected a run, got {other:?}"),
        }
    }

    #[test]
    fn mcp_subcommands_name_their_server_and_need_the_config() {
        let mcp = |args: &[&str]| parse(args.iter().map(|s| s.to_string()));
        match mcp(&["mcp", "login", "remote", "--mcp-config", "m.json"]).unwrap() {
            Command::Mcp(options, McpAction::Login(name)) => {
                assert_eq!(name, "remote");
                assert_eq!(options.mcp_config, Some(PathBuf::from("m.json")));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            mcp(&[
                "--mcp-config=m.json",
                "--mcp-tokens",
                "t.json",
                "mcp",
                "list"
            ])
            .unwrap(),
            Command::Mcp(_, McpAction::List)
        ));
        assert!(mcp(&["mcp", "list"]).is_err(), "no --mcp-config");
        assert!(mcp(&["mcp", "login", "--mcp-config", "m.json"]).is_err());
        assert!(mcp(&["mcp", "frobnicate", "--mcp-config", "m.json"]).is_err());
        // Not the subcommand: a prompt that merely contains the word.
        assert!(matches!(
            mcp(&["list", "mcp", "servers"]).unwrap(),
            Command::Run(_)
        ));
    }

    #[test]
    fn max_retry_wait_takes_seconds() {
        assert_eq!(
            run(&["--max-retry-wait", "5", "go"])
                .unwrap()
                .max_retry_wait,
            Some(5)
        );
        assert_eq!(run(&["go"]).unwrap().max_retry_wait, None);
        assert!(run(&["--max-retry-wait", "soon", "go"]).is_err());
    }

    #[test]
    fn stream_idle_timeout_takes_whole_seconds_from_one() {
        let idle = run(&["--stream-idle-timeout", "20", "go"]).unwrap();
        assert_eq!(idle.stream_idle_timeout, Some(20));
        assert_eq!(run(&["go"]).unwrap().stream_idle_timeout, None);
        assert!(run(&["--stream-idle-timeout", "0", "go"]).is_err());
        assert!(run(&["--stream-idle-timeout", "soon", "go"]).is_err());
    }

    #[test]
    fn allow_unix_socket_may_be_given_again() {
        let sockets = run(&[
            "--allow-unix-socket",
            "/a.sock",
            "--allow-unix-socket=/b",
            "go",
        ]);
        assert_eq!(
            sockets.unwrap().allowed_sockets,
            [PathBuf::from("/a.sock"), PathBuf::from("/b")]
        );
        assert!(run(&["--allow-unix-socket", "", "go"]).is_err());
    }

    #[test]
    fn options_take_separate_or_inline_values_and_words_form_the_prompt() {
        let options = run(&[
            "--provider",
            "openai-chat",
            "--max-rounds=4",
            "fix",
            "--json",
            "the tests",
        ])
        .unwrap();
        assert_eq!(options.provider, Some(ProviderName::OpenAiChat));
        assert_eq!(options.max_rounds, 4);
        assert!(options.json);
        assert_eq!(options.prompt.as_deref(), Some("fix the tests"));
    }

    #[test]
    fn rewind_takes_an_input_number_and_its_companions_need_it() {
        let options = run(&["--resume", "s.jsonl", "--rewind", "2", "--dry-run"]).unwrap();
        assert_eq!((options.rewind, options.dry_run), (Some(2), true));
        let forked = run(&["--resume", "s.jsonl", "--fork", "--rewind=3", "go on"]).unwrap();
        assert!(forked.fork && forked.rewind == Some(3));
        for (args, says) in [
            (&["--rewind", "2"][..], "add --resume"),
            (&["--fork"][..], "add --resume"),
            (&["--resume", "s", "--force"][..], "go with --rewind"),
            (&["--resume", "s", "--rewind", "0"][..], "from 1"),
            (
                &["--resume", "s", "--rewind", "1", "--dry-run", "go"][..],
                "runs no prompt",
            ),
        ] {
            let err = run(args).unwrap_err().0;
            assert!(err.contains(says), "{args:?}: {err}");
        }
    }

    #[test]
    fn a_double_dash_ends_the_options() {
        let options = run(&["--", "--json", "is", "text"]).unwrap();
        assert!(!options.json);
        assert_eq!(options.prompt.as_deref(), Some("--json is text"));
    }

    #[test]
    fn acp_is_a_subcommand_with_the_same_options_and_no_prompt() {
        let parsed = parse(["acp", "--plan", "--sessions-dir", "/s"].map(String::from)).unwrap();
        let Command::Acp(options) = parsed else {
            panic!("expected acp, got {parsed:?}")
        };
        assert!(options.plan);
        assert_eq!(options.sessions_dir, Some(PathBuf::from("/s")));
        assert!(parse(["acp", "do", "it"].map(String::from)).is_err());
        assert!(parse(["acp", "--json"].map(String::from)).is_err());
        assert!(run(&["--sessions-dir", "/s", "go"]).is_err());
        // `acp` later on the line is a prompt word.
        assert_eq!(
            run(&["explain", "acp"]).unwrap().prompt.as_deref(),
            Some("explain acp")
        );
    }

    #[test]
    fn bad_usage_says_what_to_change() {
        assert!(
            run(&["--bogus"])
                .unwrap_err()
                .0
                .contains("unknown option `--bogus`")
        );
        assert!(
            run(&["--max-turns", "many"])
                .unwrap_err()
                .0
                .contains("whole number")
        );
        assert!(
            run(&["--provider"])
                .unwrap_err()
                .0
                .contains("needs a value")
        );
        assert!(
            run(&["--provider", "x"])
                .unwrap_err()
                .0
                .contains("unknown provider")
        );
        assert!(
            run(&["--approve", "never"])
                .unwrap_err()
                .0
                .contains("auto or ask")
        );
    }

    #[test]
    fn budgets_fallbacks_schema_and_cache_ttl_are_parsed() {
        let options = run(&[
            "--max-total-tokens",
            "400000",
            "--max-cost",
            "$2.50",
            "--max-wall",
            "15m",
            "--max-tool-calls",
            "150",
            "--budget-warning",
            "0.9",
            "--budget-note",
            "--fallback-model",
            "claude-haiku-4-5, openai:gpt-5",
            "--output-schema",
            "s.json",
            "--cache-ttl",
            "1h",
            "go",
        ])
        .unwrap();
        assert_eq!(options.budget.tokens, Some(400_000));
        assert_eq!(options.budget.cost_usd, Some(2.5));
        assert_eq!(options.budget.wall_time, Some(Duration::from_secs(900)));
        assert_eq!(options.budget.tool_calls, Some(150));
        assert_eq!(options.budget_warning, Some(0.9));
        assert!(options.budget_note);
        assert_eq!(
            options.fallback_models,
            ["claude-haiku-4-5", "openai:gpt-5"]
        );
        assert_eq!(options.output_schema, Some(PathBuf::from("s.json")));
        assert_eq!(options.cache_ttl, Some(Duration::from_secs(3600)));
        for bad in [
            &["--max-cost", "-1"][..],
            &["--max-wall", "soon"],
            &["--budget-warning", "1.5"],
            &["--cache-ttl", "2h"],
            &["--fallback-model", "a,,b"],
        ] {
            assert!(run(bad).is_err(), "{bad:?}");
        }
    }
}
