//! The controls of an unattended run, from the command line to the session: the budget and
//! its warning, the fallback models, the prompt-cache TTL, the output schema. What can be
//! checked before anything starts is checked here (a usage error, exit status 2); this
//! module never starts a session and never prints.

use std::io::Read;

use agentloop::profiles::ProviderProfile;
use agentloop::session::SessionConfig;
use serde_json::Value;

use crate::args::{Options, UsageError};

/// The largest `--output-schema` file read.
const MAX_SCHEMA_BYTES: u64 = 1 << 20;

/// `config` with the session budget, its warning, the fallback models and the cache TTL.
pub fn configure(
    options: &Options,
    mut config: SessionConfig,
    fallbacks: Vec<ProviderProfile>,
) -> SessionConfig {
    let fraction = options
        .budget_warning
        .unwrap_or(config.budget_warning_fraction);
    config = config
        .with_session_budget(options.budget)
        .with_budget_warning(fraction, options.budget_note);
    for fallback in fallbacks {
        config = config.with_fallback_model(fallback);
    }
    if let Some(ttl) = options.cache_ttl {
        config = config.with_prompt_cache_ttl(ttl);
    }
    config
}

/// A cost budget needs the price of every model the session may call.
pub fn check(
    options: &Options,
    profile: &ProviderProfile,
    fallbacks: &[ProviderProfile],
) -> Result<(), UsageError> {
    if options.budget.cost_usd.is_none() {
        return Ok(());
    }
    let prices = SessionConfig::default().prices;
    let models = std::iter::once(profile).chain(fallbacks);
    for model in models.map(|p| p.model.as_str()) {
        if prices.price(model).is_none() {
            return Err(UsageError(format!(
                "--max-cost needs the price of every model the session may call, and \
                 `{model}` has none (the known ones are the providers' default models); \
                 drop --max-cost or use a priced model"
            )));
        }
    }
    Ok(())
}

/// The JSON Schema of `--output-schema`: a regular file of at most 1 MiB holding a JSON
/// object.
pub fn output_schema(options: &Options) -> Result<Option<Value>, UsageError> {
    let Some(path) = &options.output_schema else {
        return Ok(None);
    };
    let shown = path.display();
    let fail = |why: String| UsageError(format!("--output-schema {shown}: {why}"));
    let file = std::fs::File::open(path).map_err(|e| fail(format!("cannot open it ({e})")))?;
    let regular = file.metadata().map(|m| m.is_file()).unwrap_or(false);
    if !regular {
        return Err(fail("not a regular file".to_string()));
    }
    let mut text = String::new();
    file.take(MAX_SCHEMA_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| fail(format!("cannot read it as UTF-8 text ({e})")))?;
    if text.len() as u64 > MAX_SCHEMA_BYTES {
        return Err(fail("larger than 1 MiB".to_string()));
    }
    let schema: Value = serde_json::from_str(&text).map_err(|e| fail(format!("not JSON ({e})")))?;
    if !schema.is_object() {
        return Err(fail("a JSON Schema is a JSON object".to_string()));
    }
    Ok(Some(schema))
}
