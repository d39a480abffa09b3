//! From options and environment variables to a client, a profile and a working directory.
//!
//! The environment is read through a closure, so this module itself reads no process
//! state; it never starts a session and never prints.

use std::path::{Path, PathBuf};

use agentloop::llm::{Client, HttpOptions, Request};
use agentloop::profiles::{self, ProviderProfile};
use agentloop::session::transcript::{Transcript, TranscriptHeader};

use crate::args::{Options, ProfileName, ProviderName, UsageError};
use crate::demo::Demo;

/// Providers tried, in order, when `--provider` is absent: the first whose key (or, for an
/// OpenAI-compatible server, base URL) is set wins.
const BY_KEY: &[(ProviderName, &[&str])] = &[
    (ProviderName::Anthropic, &["ANTHROPIC_API_KEY"]),
    (ProviderName::OpenAi, &["OPENAI_API_KEY"]),
    (ProviderName::Gemini, &["GEMINI_API_KEY", "GOOGLE_API_KEY"]),
    // As `Client::from_env`: a compatible server's address is enough (local ones need no
    // key).
    (ProviderName::OpenAiChat, &["OPENAI_COMPATIBLE_BASE_URL"]),
];

/// What the user can do when no provider is configured.
pub const HOW_TO_CONFIGURE: &str = "set ANTHROPIC_API_KEY, OPENAI_API_KEY or GEMINI_API_KEY \
     (or GOOGLE_API_KEY), or OPENAI_COMPATIBLE_BASE_URL (or use `--provider openai-chat \
     --base-url URL`) for an OpenAI-compatible server; run `agentloop` without a prompt for the offline demo";

/// Everything `main` needs to start the session.
pub struct Setup {
    pub client: Client,
    pub profile: ProviderProfile,
    /// The scripted model of the offline demo.
    pub demo: Option<Demo>,
    /// Where the agent works.
    pub cwd: PathBuf,
    /// Where requests go, when not to the provider's usual address (for the header line).
    pub endpoint: Option<String>,
    /// A note for stderr (e.g. the directory a resumed session continues in).
    pub notes: Vec<String>,
    /// The `--fallback-model` profiles, in order (their providers are in `client`).
    pub fallbacks: Vec<ProviderProfile>,
    /// The demo's temporary directory, removed when this is dropped.
    _temp: Option<tempfile::TempDir>,
}

fn usage(message: impl Into<String>) -> UsageError {
    UsageError(message.into())
}

/// The first non-blank value among `names`.
fn first_var(var: &dyn Fn(&str) -> Option<String>, names: &[&str]) -> Option<String> {
    names
        .iter()
        .filter_map(|n| var(n))
        .find(|v| !v.trim().is_empty())
}

/// Whether `url` names OpenAI's own API host.
fn is_openai_host(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host = rest.split(['/', ':', '?', '#']).next().unwrap_or("");
    host.eq_ignore_ascii_case("api.openai.com")
}

/// The variables the library's [`Client::from_vars_for`] reads, as the command line and
/// the environment set them for `provider`: `--base-url` stands for the provider's base URL
/// variable, and `OPENAI_API_KEY` is only passed on to OpenAI's own host unless the user
/// asked for it (`OPENAI_COMPATIBLE_API_KEY` or `--send-openai-key`).
fn provider_vars(
    provider: ProviderName,
    options: &Options,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(&'static str, String)>, UsageError> {
    let mut vars: Vec<(&'static str, String)> = Vec::new();
    let mut set = |name: &'static str, value: Option<String>| {
        if let Some(value) = value {
            vars.push((name, value));
        }
    };
    match provider {
        ProviderName::Anthropic => {
            set("ANTHROPIC_API_KEY", first_var(var, &["ANTHROPIC_API_KEY"]));
            let url = options.base_url.clone();
            set(
                "ANTHROPIC_BASE_URL",
                url.or_else(|| first_var(var, &["ANTHROPIC_BASE_URL"])),
            );
        }
        ProviderName::Gemini => {
            // No policy for Gemini's key: the library reads it and the base URL (with
            // their GOOGLE_ aliases) from the environment itself (see `passed_through`);
            // the CLI only puts --base-url first.
            set("GEMINI_BASE_URL", options.base_url.clone());
        }
        ProviderName::OpenAi => {
            set("OPENAI_ORG_ID", first_var(var, &["OPENAI_ORG_ID"]));
            set("OPENAI_PROJECT_ID", first_var(var, &["OPENAI_PROJECT_ID"]));
            match &options.base_url {
                Some(url) if !is_openai_host(url) => {
                    let key = first_var(var, &["OPENAI_COMPATIBLE_API_KEY"])
                        .or_else(|| openai_key_if_asked(options, var));
                    let Some(key) = key else {
                        return Err(usage(format!(
                            "--base-url {url} is not OpenAI's API, so OPENAI_API_KEY is not \
                             sent there: set OPENAI_COMPATIBLE_API_KEY to that server's key \
                             (any value for a server that needs none), or pass \
                             --send-openai-key to send OPENAI_API_KEY to it"
                        )));
                    };
                    set("OPENAI_API_KEY", Some(key));
                    set("OPENAI_BASE_URL", Some(url.clone()));
                }
                url => {
                    set("OPENAI_API_KEY", first_var(var, &["OPENAI_API_KEY"]));
                    let url = url.clone().or_else(|| first_var(var, &["OPENAI_BASE_URL"]));
                    set("OPENAI_BASE_URL", url);
                }
            }
        }
        ProviderName::OpenAiChat => {
            // The server: --base-url, else the variables, else OpenAI itself.
            let (url, paired) = match &options.base_url {
                Some(url) => (url.clone(), false),
                None => match first_var(var, &["OPENAI_COMPATIBLE_BASE_URL"]) {
                    Some(url) => (url, false),
                    None => match first_var(var, &["OPENAI_BASE_URL"]) {
                        // The user's own OPENAI_BASE_URL goes with their OPENAI_API_KEY.
                        Some(url) => (url, true),
                        None => ("https://api.openai.com/v1".to_string(), true),
                    },
                },
            };
            let key = match first_var(var, &["OPENAI_COMPATIBLE_API_KEY"]) {
                Some(key) => Some(key),
                None if paired || is_openai_host(&url) => first_var(var, &["OPENAI_API_KEY"]),
                None => openai_key_if_asked(options, var),
            };
            if key.is_none() && is_openai_host(&url) {
                return Err(usage(
                    "--provider openai-chat talks to OpenAI without a --base-url, and needs \
                     OPENAI_API_KEY; for another server give --base-url (a server that needs a \
                     key takes OPENAI_COMPATIBLE_API_KEY)",
                ));
            }
            set("OPENAI_COMPATIBLE_API_KEY", key);
            set("OPENAI_COMPATIBLE_BASE_URL", Some(url));
        }
        ProviderName::Demo => {}
    }
    Ok(vars)
}

/// Whether the library may read `name` from the environment as it is for `provider`: all
/// of Gemini's variables (no host policy applies to its key); none of the others', which
/// [`provider_vars`] decides.
fn passed_through(provider: ProviderName, name: &str) -> bool {
    provider == ProviderName::Gemini && (name.starts_with("GEMINI_") || name.starts_with("GOOGLE_"))
}

/// `OPENAI_API_KEY` when `--send-openai-key` asks for it to go to a non-OpenAI host.
fn openai_key_if_asked(options: &Options, var: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    if options.send_openai_key {
        first_var(var, &["OPENAI_API_KEY"])
    } else {
        None
    }
}

/// Checks `--transcript` and `--resume` before anything starts; returns the resumed
/// session's header.
fn check_transcripts(options: &Options) -> Result<Option<TranscriptHeader>, UsageError> {
    if let Some(path) = &options.transcript {
        let continuing = options.resume.as_ref() == Some(path);
        if path.exists() && !continuing {
            return Err(usage(format!(
                "--transcript {0}: the file already exists (a transcript is always a new \
                 file); choose another path, or continue that session with --resume {0}",
                path.display()
            )));
        }
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent {
            if !parent.is_dir() {
                return Err(usage(format!(
                    "--transcript {}: the directory {} does not exist",
                    path.display(),
                    parent.display()
                )));
            }
        }
    }
    let Some(path) = &options.resume else {
        return Ok(None);
    };
    let transcript = Transcript::read(path).map_err(|err| {
        usage(format!(
            "--resume {}: {err} (--resume takes a transcript written by --transcript)",
            path.display()
        ))
    })?;
    Ok(Some(transcript.header().clone()))
}

/// `options` with what `--resume`'s transcript recorded filling what the command line left
/// out: the provider, the model and the base URL (a transcript holds no key: those come
/// from the environment as usual).
fn with_recorded(options: &Options, header: &TranscriptHeader) -> Options {
    let mut filled = options.clone();
    let recorded = ProviderName::parse(&header.profile).filter(|p| *p != ProviderName::Demo);
    if filled.provider.is_none() {
        filled.provider = recorded;
    }
    // The model and address belong to the recorded provider: another one on the command
    // line starts from its own defaults.
    if filled.provider == recorded && recorded.is_some() {
        if filled.model.is_none() {
            filled.model = Some(header.model.clone());
        }
        if filled.base_url.is_none() {
            filled.base_url.clone_from(&header.base_url);
        }
    }
    filled
}

/// Picks the provider, model, profile and directory.
pub fn resolve(
    options: &Options,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Setup, UsageError> {
    let header = check_transcripts(options)?;
    let filled = header.as_ref().map(|h| with_recorded(options, h));
    let options = filled.as_ref().unwrap_or(options);
    let recorded_dir = header.map(|h| PathBuf::from(h.working_directory));
    let provider = match options.provider {
        Some(provider) => provider,
        None => BY_KEY
            .iter()
            .find(|(_, names)| first_var(var, names).is_some())
            .map_or(ProviderName::Demo, |(provider, _)| *provider),
    };
    if provider == ProviderName::Demo && options.provider.is_none() && options.prompt.is_some() {
        return Err(usage(format!(
            "no provider is configured, so your prompt was not sent: {HOW_TO_CONFIGURE}"
        )));
    }
    if provider == ProviderName::Demo && options.base_url.is_some() {
        let why = if options.provider.is_some() {
            "the demo provider talks to no server"
        } else {
            "no API key is set, so the offline demo would run"
        };
        return Err(usage(format!(
            "--base-url needs a real provider ({why}); add --provider openai-chat for a local \
             OpenAI-compatible server, or another --provider with its key"
        )));
    }
    if let Some(url) = &options.base_url {
        agentloop::llm::check_base_url(url).map_err(|e| usage(format!("--base-url: {e}")))?;
    }
    let profile_name = options.profile.unwrap_or(match provider {
        ProviderName::OpenAi | ProviderName::OpenAiChat => ProfileName::OpenAi,
        ProviderName::Gemini => ProfileName::Gemini,
        ProviderName::Anthropic | ProviderName::Demo => ProfileName::Anthropic,
    });
    // An OpenAI-compatible server's model: --model, else OPENAI_COMPATIBLE_MODEL, else asked
    // of the server once the client exists (`None` here).
    let model = match (&options.model, provider) {
        (Some(model), _) => Some(model.clone()),
        (None, ProviderName::OpenAiChat) => first_var(var, &["OPENAI_COMPATIBLE_MODEL"]),
        (None, _) => Some(default_model(provider).to_string()),
    };

    let mut demo = None;
    let mut endpoint = None;
    let client = if provider == ProviderName::Demo {
        let d = Demo::new();
        let client = Client::new().with_provider(d.model.clone());
        demo = Some(d);
        client
    } else {
        let vars = provider_vars(provider, options, var)?;
        let id = provider_id(provider);
        // One implementation of "variables to a provider": the library's. The base URL it
        // read is where requests go (for the header line).
        let read_url = std::cell::RefCell::new(None);
        let mut http = HttpOptions::default();
        if let Some(secs) = options.stream_idle_timeout {
            http = http.with_progress_timeout(std::time::Duration::from_secs(secs));
        }
        let client = Client::from_vars_for_with(
            id,
            |name| {
                let value = vars
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.clone())
                    .or_else(|| passed_through(provider, name).then(|| var(name)).flatten());
                let mut read_url = read_url.borrow_mut();
                if name.ends_with("_BASE_URL") && read_url.is_none() {
                    read_url.clone_from(&value);
                }
                value
            },
            &http,
        );
        endpoint = read_url.into_inner();
        client.map_err(|err| {
            let names: &[&str] = match provider {
                ProviderName::Anthropic => &["ANTHROPIC_API_KEY"],
                ProviderName::OpenAi => &["OPENAI_API_KEY"],
                ProviderName::Gemini => &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
                _ => &[],
            };
            if names.is_empty() || first_var(var, names).is_some() {
                usage(err.to_string())
            } else {
                usage(format!(
                    "--provider {} needs {} in the environment",
                    provider.as_str(),
                    names.join(" or ")
                ))
            }
        })?
    };
    let mut client = match options.max_retry_wait {
        Some(secs) => {
            let retry = client
                .retry_policy()
                .clone()
                .with_max_delay(std::time::Duration::from_secs(secs));
            client.with_retry_policy(retry)
        }
        None => client,
    };
    let provider_id = client.provider_ids()[0].to_string();
    let model = match model {
        Some(model) => model,
        None => model_of_server(&client, &provider_id, endpoint.as_deref())?,
    };

    // Any profile works over any wire format: route it to the provider built above.
    let mut profile = profile_for(profile_name, &model).with_provider_id(&provider_id);
    if provider != ProviderName::OpenAi {
        // Only the Responses API has freeform tools; elsewhere `apply_patch` is a function.
        profile = profile.without_freeform_tools();
    }
    let fallbacks = fallback_profiles(options, var, &mut client, provider, &profile)?;

    let mut notes = Vec::new();
    let (cwd, temp) = match (&options.cwd, provider, &recorded_dir) {
        (Some(dir), _, _) => {
            let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
            if !dir.is_dir() {
                return Err(usage(format!("--cwd {} is not a directory", dir.display())));
            }
            if let Some(recorded) = recorded_dir.as_deref().filter(|r| !same_dir(r, &dir)) {
                notes.push(format!(
                    "warning: the resumed session was recorded in {}; it continues in {} \
                     (--cwd)",
                    recorded.display(),
                    dir.display()
                ));
            }
            (dir, None)
        }
        (None, _, Some(recorded)) if recorded.is_dir() => {
            let here = std::env::current_dir().unwrap_or_default();
            if !same_dir(recorded, &here) {
                notes.push(format!(
                    "continuing in {}, where the session was recorded (--cwd chooses another \
                     directory)",
                    recorded.display()
                ));
            }
            (recorded.clone(), None)
        }
        (None, ProviderName::Demo, _) => {
            let temp = tempfile::Builder::new()
                .prefix("agentloop-demo-")
                .tempdir()
                .map_err(|e| usage(format!("cannot create a temporary directory: {e}")))?;
            (temp.path().to_path_buf(), Some(temp))
        }
        (None, _, recorded) => {
            let dir = std::env::current_dir()
                .map_err(|e| usage(format!("the current directory is unusable: {e}")))?;
            if let Some(recorded) = recorded {
                notes.push(format!(
                    "warning: the resumed session was recorded in {}, which no longer exists; \
                     it continues in {}",
                    recorded.display(),
                    dir.display()
                ));
            }
            (dir, None)
        }
    };
    Ok(Setup {
        client,
        profile,
        demo,
        cwd,
        endpoint,
        notes,
        fallbacks,
        _temp: temp,
    })
}

/// The model an OpenAI-compatible server serves, when no model was named: `gpt-5` for
/// OpenAI's own API, else the server's answer to `GET /models` (one model: that one;
/// several: an error listing them, to choose with --model).
fn model_of_server(
    client: &Client,
    provider_id: &str,
    endpoint: Option<&str>,
) -> Result<String, UsageError> {
    if endpoint.is_none_or(is_openai_host) {
        return Ok(default_model(ProviderName::OpenAiChat).to_string());
    }
    let mut probe = Request::new("", Vec::new());
    probe.provider = Some(provider_id.to_string());
    let models = client
        .provider_for(&probe)
        .and_then(|provider| provider.models())
        .map_err(|err| {
            usage(format!(
                "no model named: give --model (or OPENAI_COMPATIBLE_MODEL); {err}"
            ))
        })?;
    match &models[..] {
        [one] => Ok(one.clone()),
        [] => Err(usage(
            "the server lists no model: give one with --model (or OPENAI_COMPATIBLE_MODEL)",
        )),
        several => Err(usage(format!(
            "the server serves {} models; choose one with --model (or \
             OPENAI_COMPATIBLE_MODEL): {}",
            several.len(),
            several.join(", ")
        ))),
    }
}

/// The library's provider id for `provider`.
fn provider_id(provider: ProviderName) -> &'static str {
    match provider {
        ProviderName::Anthropic => "anthropic",
        ProviderName::OpenAi => "openai",
        ProviderName::Gemini => "gemini",
        _ => "openai-chat",
    }
}

/// The `--fallback-model` profiles, in order. `MODEL` is the session's profile with another
/// model; `PROVIDER:MODEL` that provider's own profile, its key and base URL read from the
/// environment under the rules of `--provider` (`--base-url` is the first provider's), and
/// the provider registered in `client`. A model id with a colon of its own (`qwen:32b`)
/// stays whole unless what precedes the colon is a provider name.
fn fallback_profiles(
    options: &Options,
    var: &dyn Fn(&str) -> Option<String>,
    client: &mut Client,
    provider: ProviderName,
    profile: &ProviderProfile,
) -> Result<Vec<ProviderProfile>, UsageError> {
    if provider == ProviderName::Demo && !options.fallback_models.is_empty() {
        return Err(usage(
            "--fallback-model needs a real provider, not the offline demo",
        ));
    }
    let mut profiles = Vec::new();
    for entry in &options.fallback_models {
        let (other, model) = match entry.split_once(':') {
            Some((name, model)) => match ProviderName::parse(name) {
                Some(other) => (other, model),
                None => (provider, entry.as_str()),
            },
            None => (provider, entry.as_str()),
        };
        if other == provider {
            profiles.push(profile.clone().with_model(model));
            continue;
        }
        if other == ProviderName::Demo {
            return Err(usage(
                "--fallback-model cannot fall back to the offline demo",
            ));
        }
        let own = Options {
            base_url: None,
            ..options.clone()
        };
        let vars = provider_vars(other, &own, var)?;
        let id = provider_id(other);
        let built = Client::from_vars_for(id, |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
                .or_else(|| passed_through(other, name).then(|| var(name)).flatten())
        })
        .map_err(|err| usage(format!("--fallback-model {entry}: {err}")))?;
        let answering = built
            .provider_for(&Request::new(model, Vec::new()))
            .map_err(|err| usage(format!("--fallback-model {entry}: {err}")))?;
        let answering = answering.clone();
        let answering_id = answering.id().to_string();
        client.register(answering);
        let name = match other {
            ProviderName::OpenAi | ProviderName::OpenAiChat => ProfileName::OpenAi,
            ProviderName::Gemini => ProfileName::Gemini,
            _ => ProfileName::Anthropic,
        };
        let mut fallback = profile_for(name, model).with_provider_id(answering_id);
        if other != ProviderName::OpenAi {
            fallback = fallback.without_freeform_tools();
        }
        profiles.push(fallback);
    }
    Ok(profiles)
}

/// Whether two paths name the same directory.
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The model used when `--model` is absent.
pub fn default_model(provider: ProviderName) -> &'static str {
    match provider {
        ProviderName::Anthropic => "claude-sonnet-4-5",
        ProviderName::OpenAi | ProviderName::OpenAiChat => "gpt-5",
        ProviderName::Gemini => "gemini-2.5-pro",
        ProviderName::Demo => "scripted-demo",
    }
}

/// The provider-aligned profile.
fn profile_for(name: ProfileName, model: &str) -> ProviderProfile {
    match name {
        ProfileName::Anthropic => profiles::anthropic(model),
        ProfileName::OpenAi => profiles::openai(model),
        ProfileName::Gemini => profiles::gemini(model),
    }
}
