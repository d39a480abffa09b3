//! Prices per model id and the cost in US dollars of a [`Usage`]; pure arithmetic, never I/O.
//!
//! A [`PriceTable`] maps model ids to a [`Price`] (dollars per million input, output,
//! cache-read and cache-write tokens). The default table holds the default models of the
//! built-in profiles at the prices their providers published; hosts override entries or
//! add their own with [`PriceTable::with_price`]. A model the table does not know has no
//! cost (`None`), never a guessed one; so does a call whose prompt passes a price's
//! `max_prompt_tokens` (providers charge more above such a threshold).
//!
//! Providers count prompt tokens differently: Anthropic's `input_tokens` leaves out the
//! tokens read from or written to the cache, while OpenAI and Gemini count cached tokens
//! inside their prompt count. [`Price::cache_in_input`] says which convention a price's
//! provider follows, so that no token is charged twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Usage;

/// What one model costs, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Price {
    /// Uncached prompt tokens.
    pub input: f64,
    /// Generated tokens (reasoning included: providers bill it as output).
    pub output: f64,
    /// Prompt tokens read from the cache; `None` when unpublished (a call that read from
    /// the cache then has no cost).
    pub cache_read: Option<f64>,
    /// Prompt tokens written to the cache; `None` when the provider does not charge for
    /// writes separately (they cost `input`).
    pub cache_write: Option<f64>,
    /// Prompt tokens written to the cache for an hour ([`Usage::cache_write_1h_tokens`],
    /// Anthropic's `1h` TTL); `None`: priced as `cache_write`.
    pub cache_write_1h: Option<f64>,
    /// Whether the provider's prompt count includes the cached tokens (OpenAI, Gemini:
    /// `true`; Anthropic: `false`).
    pub cache_in_input: bool,
    /// Prompts above this many tokens are billed at another tier the table does not hold:
    /// such a call has no cost.
    pub max_prompt_tokens: Option<u64>,
}

impl Price {
    /// A price with `input` and `output` per million tokens, cache reads at `input`, no
    /// separate cache-write charge, cached tokens counted inside the prompt count.
    pub fn new(input: f64, output: f64) -> Price {
        Price {
            input,
            output,
            cache_read: Some(input),
            cache_write: None,
            cache_write_1h: None,
            cache_in_input: true,
            max_prompt_tokens: None,
        }
    }

    /// Sets the cache-read price.
    pub fn with_cache_read(mut self, per_million: f64) -> Price {
        self.cache_read = Some(per_million);
        self
    }

    /// Sets the cache-write price.
    pub fn with_cache_write(mut self, per_million: f64) -> Price {
        self.cache_write = Some(per_million);
        self
    }

    /// Sets the price of cache writes that live an hour.
    pub fn with_cache_write_1h(mut self, per_million: f64) -> Price {
        self.cache_write_1h = Some(per_million);
        self
    }

    /// Says whether the provider's prompt count includes the cached tokens.
    pub fn with_cache_in_input(mut self, included: bool) -> Price {
        self.cache_in_input = included;
        self
    }

    /// Sets the largest prompt this price applies to.
    pub fn with_max_prompt_tokens(mut self, tokens: u64) -> Price {
        self.max_prompt_tokens = Some(tokens);
        self
    }

    /// The cost of `usage` in US dollars, or `None` when this price cannot say.
    pub fn cost(&self, usage: &Usage) -> Option<f64> {
        let read = usage.cache_read_tokens.unwrap_or(0);
        let write = usage.cache_write_tokens.unwrap_or(0);
        let (uncached, prompt) = if self.cache_in_input {
            let uncached = usage.input_tokens.saturating_sub(read + write);
            (uncached, usage.input_tokens)
        } else {
            (usage.input_tokens, usage.input_tokens + read + write)
        };
        if self.max_prompt_tokens.is_some_and(|max| prompt > max) {
            return None;
        }
        let read_price = match self.cache_read {
            Some(price) => price,
            None if read == 0 => 0.0,
            None => return None,
        };
        let write_price = self.cache_write.unwrap_or(self.input);
        let long_writes = usage.cache_write_1h_tokens.unwrap_or(0).min(write);
        let long_write_price = self.cache_write_1h.unwrap_or(write_price);
        let dollars = uncached as f64 * self.input
            + usage.output_tokens as f64 * self.output
            + read as f64 * read_price
            + (write - long_writes) as f64 * write_price
            + long_writes as f64 * long_write_price;
        Some(dollars / 1_000_000.0)
    }
}

/// Prices by model id. See the [module documentation](self).
///
/// A model id matches an entry with the same id, or an entry that is a prefix of it
/// followed by `-` (so `claude-sonnet-4-5` prices `claude-sonnet-4-5-20250929`); the
/// longest match wins.
///
/// ```
/// use agentloop::llm::Usage;
/// use agentloop::llm::pricing::{Price, PriceTable};
///
/// let table = PriceTable::default().with_price("my-local-model", Price::new(0.0, 0.0));
/// let usage = Usage { input_tokens: 1_000_000, output_tokens: 100_000, ..Usage::default() };
/// assert_eq!(table.cost("gpt-5", &usage), Some(1.25 + 1.0));
/// assert_eq!(table.cost("my-local-model", &usage), Some(0.0));
/// assert_eq!(table.cost("some-unknown-model", &usage), None);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    prices: BTreeMap<String, Price>,
}

/// When the default prices were read from the providers' pricing pages.
pub const DEFAULT_PRICES_TAKEN: &str = "2026-11-23";

impl Default for PriceTable {
    /// The default models of the built-in profiles, at the providers' published standard
    /// prices (taken on [`DEFAULT_PRICES_TAKEN`]):
    ///
    /// | model | input | output | cache read | cache write | source |
    /// |---|---|---|---|---|---|
    /// | `claude-sonnet-4-5` | 3.00 | 15.00 | 0.30 | 3.75 (5-minute), 6.00 (1-hour) | platform.claude.com/docs/en/about-claude/pricing |
    /// | `gpt-5` | 1.25 | 10.00 | 0.125 | — | developers.openai.com/api/docs/pricing |
    /// | `gemini-2.5-pro` | 1.25 | 10.00 | — | — | ai.google.dev/gemini-api/docs/pricing (prompts up to 200k tokens) |
    ///
    /// Gemini's cache-read price is left out (it was not found reliably): a Gemini call
    /// that read from the cache has no cost. Prompts above 200k tokens (a higher tier for
    /// both Claude and Gemini) have no cost either.
    fn default() -> PriceTable {
        PriceTable::empty()
            .with_price(
                "claude-sonnet-4-5",
                Price::new(3.0, 15.0)
                    .with_cache_read(0.30)
                    .with_cache_write(3.75)
                    .with_cache_write_1h(6.0)
                    .with_cache_in_input(false)
                    .with_max_prompt_tokens(200_000),
            )
            .with_price("gpt-5", Price::new(1.25, 10.0).with_cache_read(0.125))
            .with_price(
                "gemini-2.5-pro",
                Price {
                    cache_read: None,
                    ..Price::new(1.25, 10.0).with_max_prompt_tokens(200_000)
                },
            )
    }
}

impl PriceTable {
    /// A table with no prices (every cost is `None`).
    pub fn empty() -> PriceTable {
        PriceTable {
            prices: BTreeMap::new(),
        }
    }

    /// Adds or replaces the price of `model`.
    pub fn with_price(mut self, model: impl Into<String>, price: Price) -> PriceTable {
        self.prices.insert(model.into(), price);
        self
    }

    /// The price of `model`, if the table knows it.
    pub fn price(&self, model: &str) -> Option<&Price> {
        if let Some(price) = self.prices.get(model) {
            return Some(price);
        }
        self.prices
            .iter()
            .filter(|(id, _)| {
                model.len() > id.len()
                    && model.starts_with(id.as_str())
                    && model.as_bytes()[id.len()] == b'-'
            })
            .max_by_key(|(id, _)| id.len())
            .map(|(_, price)| price)
    }

    /// The cost of `usage` on `model` in US dollars; `None` for a model the table does not
    /// know or a usage its price cannot say.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.price(model)?.cost(usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, read: Option<u64>, write: Option<u64>) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input + output,
            reasoning_tokens: None,
            cache_read_tokens: read,
            cache_write_tokens: write,
            cache_write_1h_tokens: None,
        }
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-12)
    }

    #[test]
    fn anthropic_cache_tokens_are_added_to_the_uncached_prompt() {
        let table = PriceTable::default();
        // 1000 uncached at $3, 2000 read at $0.30, 500 written at $3.75, 100 out at $15.
        let cost = table.cost(
            "claude-sonnet-4-5-20250929",
            &usage(1000, 100, Some(2000), Some(500)),
        );
        let expected = (1000.0 * 3.0 + 2000.0 * 0.30 + 500.0 * 3.75 + 100.0 * 15.0) / 1e6;
        assert!(close(cost, expected), "{cost:?}");
    }

    #[test]
    fn openai_cached_tokens_are_taken_out_of_the_prompt_count() {
        let cost = PriceTable::default().cost("gpt-5", &usage(3000, 200, Some(2000), None));
        let expected = (1000.0 * 1.25 + 2000.0 * 0.125 + 200.0 * 10.0) / 1e6;
        assert!(close(cost, expected), "{cost:?}");
    }

    #[test]
    fn unknown_models_and_unknown_rates_have_no_cost() {
        let table = PriceTable::default();
        assert_eq!(
            table.cost("claude-loopback", &usage(10, 10, None, None)),
            None
        );
        assert_eq!(table.cost("gpt-5x", &usage(10, 10, None, None)), None);
        // Gemini without a published cache-read price: no cost once the cache is read.
        assert!(
            table
                .cost("gemini-2.5-pro", &usage(10, 10, Some(0), None))
                .is_some()
        );
        assert_eq!(
            table.cost("gemini-2.5-pro", &usage(10, 10, Some(5), None)),
            None
        );
        // Above the tier the table holds.
        assert_eq!(
            table.cost("gemini-2.5-pro", &usage(200_001, 10, None, None)),
            None
        );
    }

    #[test]
    fn the_longest_prefix_wins_and_hosts_can_override() {
        let table = PriceTable::default()
            .with_price("gpt-5-mini", Price::new(0.25, 2.0))
            .with_price("gpt-5", Price::new(2.0, 20.0));
        let one = usage(1_000_000, 0, None, None);
        assert!(close(table.cost("gpt-5-mini-2025-08-07", &one), 0.25));
        assert!(close(table.cost("gpt-5-2025-08-07", &one), 2.0));
    }
}
