//! [`for_client`]: the provider-aligned profile, with the provider's usual coding model, for
//! whichever provider a [`Client`] was built with (for an OpenAI-compatible server, the one
//! model it serves); it never builds a client or reads the environment.

use crate::error::{Error, ErrorKind, Result};
use crate::llm::{Client, Request};

use super::ProviderProfile;

/// The model [`for_client`] uses for each provider built from API keys.
pub const DEFAULT_MODELS: &[(&str, &str)] = &[
    ("anthropic", "claude-sonnet-4-5"),
    ("openai", "gpt-5"),
    ("gemini", "gemini-2.5-pro"),
];

/// The profile aligned with `client`'s default provider (the first registered, e.g. the
/// first key [`Client::from_env`] found), with that provider's usual coding model:
/// `anthropic` → [`anthropic`](super::anthropic)`("claude-sonnet-4-5")`, `openai` →
/// [`openai`](super::openai)`("gpt-5")`, `gemini` → [`gemini`](super::gemini)`("gemini-2.5-pro")`.
/// So the quick start works with whichever key is set.
///
/// Any other provider (an OpenAI-compatible server: `OPENAI_COMPATIBLE_BASE_URL`) is asked
/// which models it serves ([`Provider::models`](crate::llm::Provider::models)): when it
/// serves one, the result is [`openai`](super::openai)`(THAT_MODEL)` routed to it, with
/// `apply_patch` as a function tool. Fails with [`ErrorKind::Configuration`] when it serves
/// several (the error lists them: choose one with
/// `profiles::openai(MODEL).with_provider_id(ID).without_freeform_tools()`), none, or
/// cannot say.
pub fn for_client(client: &Client) -> Result<ProviderProfile> {
    let Some(id) = client.default_provider_id() else {
        return Err(Error::new(
            ErrorKind::Configuration,
            "the client has no provider: build it with `Client::from_env` or add one with \
             `Client::with_provider`",
        ));
    };
    let model = DEFAULT_MODELS
        .iter()
        .find(|(provider, _)| *provider == id)
        .map(|(_, model)| *model);
    match (id, model) {
        ("anthropic", Some(model)) => Ok(super::anthropic(model)),
        ("openai", Some(model)) => Ok(super::openai(model)),
        ("gemini", Some(model)) => Ok(super::gemini(model)),
        _ => {
            let model = only_model(client, id)?;
            Ok(super::openai(&model)
                .with_provider_id(id)
                .without_freeform_tools())
        }
    }
}

/// The one model provider `id` serves, or an error listing what it serves.
fn only_model(client: &Client, id: &str) -> Result<String> {
    let probe = Request {
        provider: Some(id.to_string()),
        ..Request::default()
    };
    let fix = format!(
        "build its profile yourself, e.g. \
         `profiles::openai(MODEL).with_provider_id(\"{id}\").without_freeform_tools()`"
    );
    let models = client.provider_for(&probe)?.models().map_err(|err| {
        Error::new(
            ErrorKind::Configuration,
            format!("provider `{id}` has no usual model and {err}; {fix}"),
        )
    })?;
    match &models[..] {
        [one] => Ok(one.clone()),
        [] => Err(Error::new(
            ErrorKind::Configuration,
            format!("provider `{id}` serves no model; {fix}"),
        )),
        several => Err(Error::new(
            ErrorKind::Configuration,
            format!(
                "provider `{id}` serves {} models, choose one: {}; {fix}",
                several.len(),
                several.join(", ")
            ),
        )),
    }
}
