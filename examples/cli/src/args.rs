//! Command-line options of the `agentloop` CLI: hand-written parsing into [`Options`].
//!
//! One `match` arm per option keeps adding an option a three-line change (the option, its
//! field, its line in [`USAGE`]). Parsing never reads the environment and never exits: a
//! bad command line is a [`UsageError`] the caller turns into exit status 2.

use std::fmt;
use std::path::PathBuf;

/// The help text (`agentloop --help`).
pub const USAGE: &str = "\
agentloop: a coding agent in your terminal, built on the agentloop library

USAGE:
    agentloop [OPTIONS] [PROMPT...]

    With a PROMPT, runs it once and exits. Without one, reads the prompt from stdin, or,
    when stdin is a terminal, asks for one input after another (Ctrl-D ends).
    Without any API key in the environment, runs an offline demo with a scripted model.

OPTIONS:
    --provider NAME         anthropic | openai | openai-chat | gemini | demo
                            (default: the first of ANTHROPIC_API_KEY, OPENAI_API_KEY,
                            GEMINI_API_KEY found in the environment, else demo)
    --model ID              the model (default: the provider's usual coding model)
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
    --reasoning-effort E    low | medium | high (or a provider's own value)
    --context-window TOKENS the model's context window (default: the model's own); the
                            history is compacted before it fills
    --timeout-ms MS         default timeout of shell commands (default 10000)
    --max-retry-wait SECS   the longest wait before retrying a failed model call
                            (default 60); a retry-after asking for more fails at once
    --approve MODE          auto: run every tool call (default)
                            ask: ask on the terminal before each shell command or write
                            (refused when there is no terminal)
    --sandbox MODE          read-only | workspace-write (default) | full-access: what
                            commands and file tools may write (Landlock + seccomp on Linux)
    --network on|off        whether commands may use the network (default: off under a
                            sandbox, on with full-access)
    --sandbox-best-effort   run even where the kernel cannot enforce the whole sandbox
                            (a warning names what is not enforced); default: refuse to run
    --json                  print one JSON object per session event on stdout, nothing else
    --transcript PATH       save the session as JSON Lines in PATH (a new file); with
                            --resume, where the continued session is saved instead
    --resume PATH           continue the session saved in PATH (appending to it unless
                            --transcript names another file)
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
                            \"args\", \"env\"} or {\"url\"}}}
    --remote URL            run the tools on another machine: ssh://[user@]host[:port][/dir]
                            (an exec-server there serves the directory; see --remote-server)
    --remote-command CMD    run the tools through any stdio transport, e.g.
                            \"podman exec -i -w /src ctr\" (the server command is appended)
    --remote-server CMD     the exec-server command on the remote side
                            (default: agentloop-exec-server on the remote PATH)
    -h, --help              print this help
    -V, --version           print the version

EXIT STATUS:
    0 done, 1 error, 2 bad usage, 3 a turn or round limit stopped the agent,
    130 interrupted (Ctrl-C; a second Ctrl-C aborts at once),
    143 ended by SIGTERM, 129 by SIGHUP (the running command is ended and the session
    closed, as for an abort)
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
    fn parse(text: &str) -> Option<ProviderName> {
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
    pub reasoning_effort: Option<String>,
    /// `--context-window`: overrides the model's context window.
    pub context_window: Option<usize>,
    pub timeout_ms: Option<u64>,
    /// `--max-retry-wait`: the longest retry-after honoured, in seconds.
    pub max_retry_wait: Option<u64>,
    pub approve: ApproveMode,
    /// `--sandbox`: `read-only`, `workspace-write` or `full-access` (`None`: the default).
    pub sandbox: Option<String>,
    /// `--network`: `Some(true)` for on.
    pub network: Option<bool>,
    /// `--sandbox-best-effort`.
    pub sandbox_best_effort: bool,
    pub json: bool,
    /// `--send-openai-key`: OPENAI_API_KEY may go to a non-OpenAI `--base-url`.
    pub send_openai_key: bool,
    /// `--transcript`: where to save the session.
    pub transcript: Option<PathBuf>,
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
    /// The positional words joined by spaces, if any.
    pub prompt: Option<String>,
    /// `--remote`: an `ssh://` URL whose host runs the tools.
    pub remote: Option<String>,
    /// `--remote-command`: a transport command line (split on whitespace).
    pub remote_command: Option<String>,
    /// `--remote-server`: the exec-server command on the remote side.
    pub remote_server: Option<String>,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Run the agent.
    Run(Box<Options>),
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
    let mut args = args.into_iter();
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
            "--hooks" => options.hooks = Some(PathBuf::from(non_empty(&name, value("a file")?)?)),
            "--mcp-config" => {
                options.mcp_config = Some(PathBuf::from(non_empty(&name, value("a file")?)?))
            }
            "--resume" => options.resume = Some(PathBuf::from(non_empty(&name, value("a file")?)?)),
            "--remote" => options.remote = Some(non_empty(&name, value("an ssh:// URL")?)?),
            "--remote-command" => {
                options.remote_command = Some(non_empty(&name, value("a command line")?)?)
            }
            "--remote-server" => {
                options.remote_server = Some(non_empty(&name, value("a command")?)?)
            }
            "--max-turns" => options.max_turns = number(&name, &value("a number")?)?,
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
            "--max-retry-wait" => options.max_retry_wait = Some(number(&name, &value("seconds")?)?),
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
}
