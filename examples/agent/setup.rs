//! From options and environment variables to a client, a profile and a working directory.
//!
//! The environment is read through a closure, so this module itself reads no process
//! state; it never starts a session and never prints.

use std::path::PathBuf;

use agentloop::llm::Client;
use agentloop::llm::anthropic::Anthropic;
use agentloop::llm::gemini::Gemini;
use agentloop::llm::openai::OpenAi;
use agentloop::llm::openai_chat::OpenAiChat;
use agentloop::profiles::{self, ProviderProfile};

use crate::args::{Options, ProfileName, ProviderName, UsageError};
use crate::demo::Demo;

/// Providers tried, in order, when `--provider` is absent: the first whose key is set wins.
const BY_KEY: &[(ProviderName, &[&str])] = &[
    (ProviderName::Anthropic, &["ANTHROPIC_API_KEY"]),
    (ProviderName::OpenAi, &["OPENAI_API_KEY"]),
    (ProviderName::Gemini, &["GEMINI_API_KEY", "GOOGLE_API_KEY"]),
];

/// Everything `main` needs to start the session.
pub struct Setup {
    pub client: Client,
    pub profile: ProviderProfile,
    /// The scripted model of the offline demo.
    pub demo: Option<Demo>,
    /// Where the agent works.
    pub cwd: PathBuf,
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

/// Picks the provider, model, profile and directory.
pub fn resolve(
    options: &Options,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Setup, UsageError> {
    let provider = match options.provider {
        Some(provider) => provider,
        None => BY_KEY
            .iter()
            .find(|(_, names)| first_var(var, names).is_some())
            .map_or(ProviderName::Demo, |(provider, _)| *provider),
    };
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
    let profile_name = options.profile.unwrap_or(match provider {
        ProviderName::OpenAi | ProviderName::OpenAiChat => ProfileName::OpenAi,
        ProviderName::Gemini => ProfileName::Gemini,
        ProviderName::Anthropic | ProviderName::Demo => ProfileName::Anthropic,
    });
    let model = options
        .model
        .clone()
        .unwrap_or_else(|| default_model(provider).to_string());
    let base_url = options.base_url.clone().or_else(|| match provider {
        ProviderName::Anthropic => first_var(var, &["ANTHROPIC_BASE_URL"]),
        ProviderName::OpenAi | ProviderName::OpenAiChat => first_var(var, &["OPENAI_BASE_URL"]),
        ProviderName::Gemini => first_var(var, &["GOOGLE_GEMINI_BASE_URL", "GEMINI_BASE_URL"]),
        ProviderName::Demo => None,
    });
    let key = |names: &[&str]| {
        first_var(var, names).ok_or_else(|| {
            usage(format!(
                "--provider {} needs {} in the environment",
                provider.as_str(),
                names.join(" or ")
            ))
        })
    };

    let mut demo = None;
    let (client, provider_id) = match provider {
        ProviderName::Anthropic => {
            let mut p = Anthropic::new(key(&["ANTHROPIC_API_KEY"])?);
            if let Some(url) = &base_url {
                p = p.with_base_url(url);
            }
            (Client::new().with_provider(p), "anthropic")
        }
        ProviderName::OpenAi => {
            let mut p = OpenAi::new(key(&["OPENAI_API_KEY"])?);
            if let Some(url) = &base_url {
                p = p.with_base_url(url);
            }
            (Client::new().with_provider(p), "openai")
        }
        ProviderName::OpenAiChat => {
            let mut p = match &base_url {
                Some(url) => OpenAiChat::compatible(url),
                None => OpenAiChat::compatible("https://api.openai.com/v1"),
            };
            match first_var(var, &["OPENAI_API_KEY"]) {
                Some(k) => p = p.with_api_key(k),
                None if p.is_local() => {}
                None => {
                    return Err(usage(
                        "--provider openai-chat needs OPENAI_API_KEY in the environment, or a \
                         --base-url on this machine (a local server needs no key)",
                    ));
                }
            }
            (Client::new().with_provider(p), "openai-chat")
        }
        ProviderName::Gemini => {
            let mut p = Gemini::new(key(&["GEMINI_API_KEY", "GOOGLE_API_KEY"])?);
            if let Some(url) = &base_url {
                p = p.with_base_url(url);
            }
            (Client::new().with_provider(p), "gemini")
        }
        ProviderName::Demo => {
            let d = Demo::new();
            let client = Client::new().with_provider(d.model.clone());
            demo = Some(d);
            (client, "scripted")
        }
    };

    // Any profile works over any wire format: route it to the provider built above.
    let mut profile = profile_for(profile_name, &model).with_provider_id(provider_id);
    if provider_id != "openai" {
        // Only the Responses API has freeform tools; elsewhere `apply_patch` is a function.
        profile = profile.without_freeform_tools();
    }

    let (cwd, temp) = match (&options.cwd, provider) {
        (Some(dir), _) => {
            let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
            if !dir.is_dir() {
                return Err(usage(format!("--cwd {} is not a directory", dir.display())));
            }
            (dir, None)
        }
        (None, ProviderName::Demo) => {
            let temp = tempfile::Builder::new()
                .prefix("agentloop-demo-")
                .tempdir()
                .map_err(|e| usage(format!("cannot create a temporary directory: {e}")))?;
            (temp.path().to_path_buf(), Some(temp))
        }
        (None, _) => {
            let dir = std::env::current_dir()
                .map_err(|e| usage(format!("the current directory is unusable: {e}")))?;
            (dir, None)
        }
    };
    Ok(Setup {
        client,
        profile,
        demo,
        cwd,
        _temp: temp,
    })
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
