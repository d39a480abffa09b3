//! [`for_client`]: the provider-aligned profile, with the provider's usual coding model, for
//! whichever provider a [`Client`] was built with; it never builds a client or reads the
//! environment.

use crate::error::{Error, ErrorKind, Result};
use crate::llm::Client;

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
/// Fails with [`ErrorKind::Configuration`] for any other provider (an OpenAI-compatible
/// server has no usual model: choose one, e.g.
/// `profiles::openai(MODEL).with_provider_id(ID).without_freeform_tools()`).
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
        _ => Err(Error::new(
            ErrorKind::Configuration,
            format!(
                "provider `{id}` has no usual model: build its profile yourself, e.g. \
                 `profiles::openai(MODEL).with_provider_id(\"{id}\").without_freeform_tools()`"
            ),
        )),
    }
}
