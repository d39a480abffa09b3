//! `Client`: providers by id, `complete()` and `stream()`, and the retry policy; it never
//! speaks HTTP itself (providers do) and never retries once an event has been delivered.
//!
//! Retries (unified spec §6.6, agentloop decision 3): [`Client::stream_with_cancel`] opens
//! the provider's stream and pulls its first content event (the first after `StreamStart`)
//! *before* returning, holding back what came before it. A retryable failure up to that
//! point (429, 5xx/529, a network error, a hang-up or an `overloaded_error` event before
//! any content) is retried with exponential backoff and ±50 % jitter, or after the
//! provider's `retry-after` when it asked for one no longer than [`RetryPolicy::max_delay`]
//! (a longer one fails at once, with [`Error::retry_after`] set). Backoff waits on the
//! cancel token, so a cancel ends them at once with [`ErrorKind::Aborted`], which is never
//! retried. Once the first event is in the caller's hands, a failure is an `Err` item and
//! the stream ends.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::{HttpOptions, Request, Response, StreamEvent};

/// A source of model responses: an HTTP wire format, the scripted model, or a host's own.
///
/// Implementations must be cheap to share between threads; [`Client`] holds them in `Arc`s.
pub trait Provider: Send + Sync {
    /// The provider id requests name in [`Request::provider`] (`"anthropic"`, `"openai"`).
    fn id(&self) -> &str;

    /// Where requests go (`https://api.anthropic.com/v1`), for a transcript to record so
    /// that a resumed session finds the same server; `None` (the default) for a provider
    /// with no address (the scripted model, a host's own).
    fn base_url(&self) -> Option<&str> {
        None
    }

    /// The models the server says it serves (an OpenAI-compatible server's `GET /models`),
    /// for a host that was given no model. The default: a [`ErrorKind::Configuration`]
    /// error, for providers that cannot tell.
    fn models(&self) -> Result<Vec<String>> {
        Err(Error::new(
            ErrorKind::Configuration,
            format!("provider `{}` cannot list its models: name one", self.id()),
        ))
    }

    /// Sends `request` and returns its event stream once the response has started.
    ///
    /// Blocks until the provider answers (headers received) or fails. Must return
    /// promptly with an [`ErrorKind::Aborted`] error when `cancel` fires, also while
    /// blocked, and must stop the returned stream when it fires later. Never retries:
    /// [`Client`] does.
    fn open(
        &self,
        request: &Request,
        cancel: &CancelToken,
    ) -> Result<Box<dyn Iterator<Item = Result<StreamEvent>> + Send>>;
}

/// When and how [`Client`] retries (unified spec §6.6).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries after the first attempt. Default 2.
    pub max_retries: u32,
    /// First backoff delay. Default 1 s.
    pub base_delay: Duration,
    /// Longest delay; a `retry-after` longer than this is not waited for. Default 60 s.
    pub max_delay: Duration,
    /// Backoff multiplier. Default 2.
    pub backoff_multiplier: f64,
    /// ±50 % random jitter. Default on.
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            backoff_multiplier: 2.0,
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> RetryPolicy {
        RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        }
    }

    /// Sets [`max_retries`](Self::max_retries).
    pub fn with_max_retries(mut self, max_retries: u32) -> RetryPolicy {
        self.max_retries = max_retries;
        self
    }

    /// Sets [`base_delay`](Self::base_delay).
    pub fn with_base_delay(mut self, delay: Duration) -> RetryPolicy {
        self.base_delay = delay;
        self
    }

    /// Sets [`max_delay`](Self::max_delay).
    pub fn with_max_delay(mut self, delay: Duration) -> RetryPolicy {
        self.max_delay = delay;
        self
    }

    /// Sets [`backoff_multiplier`](Self::backoff_multiplier).
    pub fn with_backoff_multiplier(mut self, multiplier: f64) -> RetryPolicy {
        self.backoff_multiplier = multiplier;
        self
    }

    /// Sets [`jitter`](Self::jitter).
    pub fn with_jitter(mut self, jitter: bool) -> RetryPolicy {
        self.jitter = jitter;
        self
    }

    /// The backoff before retry number `attempt + 1` (0-indexed):
    /// `min(base_delay × multiplier^attempt, max_delay)`, times a random factor in
    /// [0.5, 1.5) when [`jitter`](Self::jitter) is on.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let base = self.base_delay.as_secs_f64();
        let exp = self
            .backoff_multiplier
            .max(0.0)
            .powi(attempt.min(64) as i32);
        let mut secs = (base * exp).min(self.max_delay.as_secs_f64());
        if !secs.is_finite() || secs < 0.0 {
            secs = self.max_delay.as_secs_f64();
        }
        if self.jitter {
            secs *= 0.5 + random_unit();
        }
        // An extreme policy (`max_delay` near `Duration::MAX`) must not panic here.
        Duration::try_from_secs_f64(secs).unwrap_or(self.max_delay)
    }

    /// How long to wait before retrying after `err` (retry number `attempt + 1`), or
    /// `None` when it must not be retried: the error is not retryable, the retry budget is
    /// spent, or the provider asked for a wait longer than [`max_delay`](Self::max_delay).
    pub fn delay_for(&self, err: &Error, attempt: u32) -> Option<Duration> {
        if !err.is_retryable() || attempt >= self.max_retries {
            return None;
        }
        match err.retry_after() {
            Some(after) if after <= self.max_delay => Some(after),
            Some(_) => None,
            None => Some(self.backoff(attempt)),
        }
    }
}

/// A uniform random number in [0, 1), from std's randomly keyed hasher (new keys per
/// call), so that jitter needs no random-number crate.
fn random_unit() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// The LLM client: registered providers, a default, and a retry policy. Cheap to clone.
#[derive(Clone, Default)]
pub struct Client {
    providers: HashMap<String, Arc<dyn Provider>>,
    default_provider: Option<String>,
    retry: RetryPolicy,
    on_retry: Option<RetryObserver>,
}

/// Called before each retry with the error, the retry number (1 for the first retry) and
/// the delay about to be waited.
pub type RetryObserver = Arc<dyn Fn(&Error, u32, Duration) + Send + Sync>;

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids: Vec<&String> = self.providers.keys().collect();
        ids.sort();
        f.debug_struct("Client")
            .field("providers", &ids)
            .field("default_provider", &self.default_provider)
            .field("retry", &self.retry)
            .field("on_retry", &self.on_retry.as_ref().map(|_| "set"))
            .finish()
    }
}

impl Client {
    /// A client with no providers.
    pub fn new() -> Client {
        Client::default()
    }

    /// Registers `provider` under its id; the first one registered becomes the default.
    pub fn with_provider(mut self, provider: impl Provider + 'static) -> Client {
        self.register(Arc::new(provider));
        self
    }

    /// Registers `provider` under its id (replacing one with the same id); the first one
    /// registered becomes the default.
    pub fn register(&mut self, provider: Arc<dyn Provider>) {
        let id = provider.id().to_string();
        if self.default_provider.is_none() {
            self.default_provider = Some(id.clone());
        }
        self.providers.insert(id, provider);
    }

    /// Makes `id` the provider for requests that name none.
    pub fn with_default_provider(mut self, id: impl Into<String>) -> Client {
        self.default_provider = Some(id.into());
        self
    }

    /// Replaces the retry policy.
    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Client {
        self.retry = retry;
        self
    }

    /// Calls `observer` before each retry (to log it or show it to a user) with the error,
    /// the retry number (1 for the first) and the delay about to be waited.
    pub fn on_retry(
        mut self,
        observer: impl Fn(&Error, u32, Duration) + Send + Sync + 'static,
    ) -> Client {
        self.on_retry = Some(Arc::new(observer));
        self
    }

    /// The retry policy.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.retry
    }

    /// The provider that answers `request`.
    pub fn provider_for(&self, request: &Request) -> Result<&Arc<dyn Provider>> {
        let id = request
            .provider
            .as_deref()
            .or(self.default_provider.as_deref())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Configuration,
                    "no provider is registered: add one with `Client::with_provider`, or \
                     build the client with `Client::from_env`",
                )
            })?;
        self.providers.get(id).ok_or_else(|| {
            let registered = match self.provider_ids() {
                ids if ids.is_empty() => "none is registered".to_string(),
                ids => format!("registered: {}", ids.join(", ")),
            };
            Error::new(
                ErrorKind::Configuration,
                format!(
                    "no provider is registered under `{id}` ({registered}); register one \
                     with that id (`Client::with_provider`, or set its key for \
                     `Client::from_env`), or route the profile to a registered one with \
                     `ProviderProfile::with_provider_id`"
                ),
            )
        })
    }
}

impl Client {
    /// A client with one provider for every API key found in the process environment, in
    /// this order (the first one found is the default):
    ///
    /// | provider id | variables |
    /// |---|---|
    /// | `anthropic` | `ANTHROPIC_API_KEY`, optional `ANTHROPIC_BASE_URL` |
    /// | `openai` (Responses) | `OPENAI_API_KEY`, optional `OPENAI_BASE_URL` (default `https://api.openai.com/v1`), `OPENAI_ORG_ID`, `OPENAI_PROJECT_ID` |
    /// | `gemini` | `GEMINI_API_KEY` or `GOOGLE_API_KEY`, optional `GEMINI_BASE_URL` or `GOOGLE_GEMINI_BASE_URL` (default `https://generativelanguage.googleapis.com`) |
    /// | `openai-chat`, or `OPENAI_COMPATIBLE_ID` | `OPENAI_COMPATIBLE_BASE_URL` (e.g. `http://127.0.0.1:11434/v1`), optional `OPENAI_COMPATIBLE_API_KEY` |
    ///
    /// An OpenAI-compatible server (Chat Completions) is registered when its base URL is
    /// set, with or without a key: local servers need none.
    ///
    /// This is the only place the crate reads the environment for providers. Fails with
    /// [`ErrorKind::Configuration`] when no key is set.
    pub fn from_env() -> Result<Client> {
        Client::from_vars(|name| std::env::var(name).ok())
    }

    /// Like [`from_env`](Self::from_env), reading variables through `var` instead of the
    /// process environment (for tests, or hosts that keep their settings elsewhere).
    ///
    /// A base URL variable that is set must be a valid `http://` or `https://` URL: a
    /// missing scheme, whitespace or another malformed URL is an [`ErrorKind::Configuration`]
    /// error naming the variable, the URL and the likely fix.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Client> {
        let mut client = Client::new();
        for id in ENV_PROVIDERS {
            if let Some(provider) = env_provider(id, &var, &HttpOptions::default())? {
                client.register(provider);
            }
        }
        if client.providers.is_empty() {
            return Err(Error::new(
                ErrorKind::Configuration,
                "no provider is configured in the environment (set ANTHROPIC_API_KEY, \
                 OPENAI_API_KEY, GEMINI_API_KEY or GOOGLE_API_KEY, or OPENAI_COMPATIBLE_BASE_URL)",
            ));
        }
        Ok(client)
    }

    /// A client with the one provider `id` (`anthropic`, `openai`, `gemini` or
    /// `openai-chat`), configured from the variables of the table in
    /// [`from_env`](Self::from_env) read through `var` — the same rules as
    /// [`from_vars`](Self::from_vars), for a host (like the `agentloop` CLI) that lets its user
    /// choose the provider.
    ///
    /// Fails with [`ErrorKind::Configuration`] naming the variables to set when the
    /// provider's key (for `openai-chat`, its base URL) is missing, when a base URL is
    /// malformed, or when `id` is not one of the four.
    pub fn from_vars_for(id: &str, var: impl Fn(&str) -> Option<String>) -> Result<Client> {
        Client::from_vars_for_with(id, var, &HttpOptions::default())
    }

    /// [`from_vars_for`](Self::from_vars_for) with the provider's timeouts and transport
    /// settings set to `http` (a CLI's `--stream-idle-timeout`, a proxy choice).
    pub fn from_vars_for_with(
        id: &str,
        var: impl Fn(&str) -> Option<String>,
        http: &HttpOptions,
    ) -> Result<Client> {
        if !ENV_PROVIDERS.contains(&id) {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "`{id}` is not a provider configured from variables; use one of {}",
                    ENV_PROVIDERS.join(", ")
                ),
            ));
        }
        match env_provider(id, &var, http)? {
            Some(provider) => Ok(Client::new().with_provider_arc(provider)),
            None => Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "provider `{id}` is not configured: set {}",
                    required_vars(id)
                ),
            )),
        }
    }

    /// Registers an already shared provider (see [`register`](Self::register)).
    fn with_provider_arc(mut self, provider: Arc<dyn Provider>) -> Client {
        self.register(provider);
        self
    }

    /// The provider for requests that name none: the first registered, unless
    /// [`with_default_provider`](Self::with_default_provider) chose another.
    pub fn default_provider_id(&self) -> Option<&str> {
        self.default_provider.as_deref()
    }

    /// The ids of the registered providers, sorted.
    pub fn provider_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.providers.keys().map(String::as_str).collect();
        ids.sort_unstable();
        ids
    }

    /// Streams the response to `request` (see [`stream_with_cancel`](Self::stream_with_cancel)).
    pub fn stream(&self, request: &Request) -> Result<EventStream> {
        self.stream_with_cancel(request, &CancelToken::new())
    }

    /// Streams the response to `request`; `cancel` ends it from another thread, also while
    /// this call is still waiting for the provider to answer or backing off between
    /// attempts.
    ///
    /// Returns once the first content event has arrived (`StreamStart` is held back until
    /// then). Until then, retryable failures are retried per the [`RetryPolicy`] (see the
    /// module docs); after it, a failure is the stream's last item, an `Err`. Cancelling
    /// gives [`ErrorKind::Aborted`].
    pub fn stream_with_cancel(
        &self,
        request: &Request,
        cancel: &CancelToken,
    ) -> Result<EventStream> {
        let provider = self.provider_for(request)?;
        let mut attempt = 0u32;
        loop {
            if cancel.is_cancelled() {
                return Err(aborted(provider.id()));
            }
            let err = match open_first(provider.as_ref(), request, cancel) {
                Ok((held, rest)) => {
                    return Ok(EventStream {
                        held,
                        inner: rest,
                        cancel: cancel.clone(),
                        done: false,
                    });
                }
                Err(err) => err,
            };
            if cancel.is_cancelled() {
                return Err(aborted(provider.id()));
            }
            let Some(delay) = self.retry.delay_for(&err, attempt) else {
                return Err(err);
            };
            if let Some(observer) = &self.on_retry {
                observer(&err, attempt + 1, delay);
            }
            if cancel.wait_timeout(delay) {
                return Err(aborted(provider.id()));
            }
            attempt += 1;
        }
    }

    /// Sends `request` and returns the whole response (streams internally, with the same
    /// retries as [`stream`](Self::stream)).
    pub fn complete(&self, request: &Request) -> Result<Response> {
        self.stream(request)?.into_response()
    }

    /// Like [`complete`](Self::complete), with a cancel token.
    pub fn complete_with_cancel(
        &self,
        request: &Request,
        cancel: &CancelToken,
    ) -> Result<Response> {
        self.stream_with_cancel(request, cancel)?.into_response()
    }
}

/// The providers [`Client::from_vars`] knows, in its registration order.
const ENV_PROVIDERS: &[&str] = &["anthropic", "openai", "gemini", "openai-chat"];

/// What must be set for `id` (for error messages).
fn required_vars(id: &str) -> &'static str {
    match id {
        "anthropic" => "ANTHROPIC_API_KEY",
        "openai" => "OPENAI_API_KEY",
        "gemini" => "GEMINI_API_KEY or GOOGLE_API_KEY",
        _ => "OPENAI_COMPATIBLE_BASE_URL (and OPENAI_COMPATIBLE_API_KEY if the server needs a key)",
    }
}

/// The provider `id` configured from `var`, `None` when its key (or, for `openai-chat`,
/// its base URL) is not set. The one implementation behind [`Client::from_vars`] and
/// [`Client::from_vars_for`].
fn env_provider(
    id: &str,
    var: &dyn Fn(&str) -> Option<String>,
    http: &HttpOptions,
) -> Result<Option<Arc<dyn Provider>>> {
    let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    // The first of `names` that is set, checked as a base URL.
    let url = |names: &[&str]| -> Result<Option<String>> {
        for name in names {
            if let Some(url) = get(name) {
                crate::llm::base_url::check_variable(name, &url)?;
                return Ok(Some(url));
            }
        }
        Ok(None)
    };
    let provider: Arc<dyn Provider> = match id {
        "anthropic" => {
            let Some(key) = get("ANTHROPIC_API_KEY") else {
                return Ok(None);
            };
            let mut provider =
                crate::llm::anthropic::Anthropic::new(key).with_http_options(http.clone());
            if let Some(url) = url(&["ANTHROPIC_BASE_URL"])? {
                provider = provider.with_base_url(url);
            }
            Arc::new(provider)
        }
        "openai" => {
            let Some(key) = get("OPENAI_API_KEY") else {
                return Ok(None);
            };
            let mut provider = crate::llm::openai::OpenAi::new(key).with_http_options(http.clone());
            if let Some(url) = url(&["OPENAI_BASE_URL"])? {
                provider = provider.with_base_url(url);
            }
            if let Some(organization) = get("OPENAI_ORG_ID") {
                provider = provider.with_organization(organization);
            }
            if let Some(project) = get("OPENAI_PROJECT_ID") {
                provider = provider.with_project(project);
            }
            Arc::new(provider)
        }
        "gemini" => {
            let Some(key) = get("GEMINI_API_KEY").or_else(|| get("GOOGLE_API_KEY")) else {
                return Ok(None);
            };
            let mut provider = crate::llm::gemini::Gemini::new(key).with_http_options(http.clone());
            if let Some(url) = url(&["GEMINI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"])? {
                provider = provider.with_base_url(url);
            }
            Arc::new(provider)
        }
        _ => {
            let Some(base) = url(&["OPENAI_COMPATIBLE_BASE_URL"])? else {
                return Ok(None);
            };
            let mut provider = crate::llm::openai_chat::OpenAiChat::compatible(base)
                .with_http_options(http.clone());
            if let Some(key) = get("OPENAI_COMPATIBLE_API_KEY") {
                provider = provider.with_api_key(key);
            }
            if let Some(id) = get("OPENAI_COMPATIBLE_ID") {
                provider = provider.with_id(id);
            }
            Arc::new(provider)
        }
    };
    Ok(Some(provider))
}

type EventIter = Box<dyn Iterator<Item = Result<StreamEvent>> + Send>;

/// Opens the provider's stream and pulls events up to and including the first one that
/// carries content (anything but `StreamStart` and pass-through provider events), so that
/// an error a provider sends right after its stream header (Anthropic's `message_start`,
/// then `overloaded_error`) is still retried: nothing has reached the caller yet.
fn open_first(
    provider: &dyn Provider,
    request: &Request,
    cancel: &CancelToken,
) -> Result<(VecDeque<StreamEvent>, EventIter)> {
    let mut inner = provider.open(request, cancel)?;
    let mut held = VecDeque::new();
    loop {
        match inner.next() {
            Some(Ok(event)) => {
                let preamble = matches!(
                    event,
                    StreamEvent::StreamStart { .. } | StreamEvent::ProviderEvent { .. }
                );
                held.push_back(event);
                if !preamble {
                    return Ok((held, inner));
                }
            }
            Some(Err(err)) => return Err(err),
            None => {
                return Err(Error::new(
                    ErrorKind::Stream,
                    "the provider closed the stream before sending any content",
                )
                .with_provider(provider.id()));
            }
        }
    }
}

fn aborted(provider: &str) -> Error {
    Error::new(ErrorKind::Aborted, "the request was cancelled").with_provider(provider)
}

/// A streamed response: an iterator of events with a cancel handle.
///
/// Yields `StreamStart` first and `Finish` last on success; a failure is the last item,
/// an `Err`, and nothing follows it.
pub struct EventStream {
    held: VecDeque<StreamEvent>,
    inner: EventIter,
    cancel: CancelToken,
    done: bool,
}

impl fmt::Debug for EventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream")
            .field("cancelled", &self.cancel.is_cancelled())
            .field("done", &self.done)
            .finish()
    }
}

impl EventStream {
    /// Wraps an event iterator and the token that cancels it.
    pub fn new(inner: EventIter, cancel: CancelToken) -> EventStream {
        EventStream {
            held: VecDeque::new(),
            inner,
            cancel,
            done: false,
        }
    }

    /// A handle that ends the stream from any thread.
    pub fn cancel_handle(&self) -> CancelToken {
        self.cancel.clone()
    }

    /// Reads the stream to its end and returns the accumulated response.
    pub fn into_response(self) -> Result<Response> {
        for event in self {
            if let StreamEvent::Finish { response, .. } = event? {
                return Ok(*response);
            }
        }
        Err(Error::new(
            ErrorKind::Stream,
            "the stream ended without a finish event",
        ))
    }
}

impl Iterator for EventStream {
    type Item = Result<StreamEvent>;
    fn next(&mut self) -> Option<Result<StreamEvent>> {
        if let Some(event) = self.held.pop_front() {
            return Some(Ok(event));
        }
        if self.done {
            return None;
        }
        let item = self.inner.next();
        match &item {
            None | Some(Err(_)) => self.done = true,
            Some(Ok(StreamEvent::Finish { .. })) => self.done = true,
            Some(Ok(_)) => {}
        }
        if let Some(Err(err)) = &item {
            if self.cancel.is_cancelled() && err.kind() != ErrorKind::Aborted {
                return Some(Err(aborted(err.provider().unwrap_or("provider"))));
            }
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy::default().with_jitter(false);
        assert_eq!(p.backoff(0), Duration::from_secs(1));
        assert_eq!(p.backoff(1), Duration::from_secs(2));
        assert_eq!(p.backoff(2), Duration::from_secs(4));
        assert_eq!(p.backoff(10), Duration::from_secs(60));
        assert_eq!(p.backoff(1000), Duration::from_secs(60));
    }

    #[test]
    fn jitter_stays_within_half_and_one_and_a_half() {
        let p = RetryPolicy::default();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let d = p.backoff(1).as_secs_f64();
            assert!((1.0..3.0).contains(&d), "{d}");
            seen.insert(d.to_bits());
        }
        assert!(
            seen.len() > 100,
            "jitter is not random: {} values",
            seen.len()
        );
    }

    #[test]
    fn retry_after_is_honoured_up_to_max_delay() {
        let p = RetryPolicy::default();
        let limited = Error::new(ErrorKind::RateLimited, "x");
        assert!(p.delay_for(&limited, 0).is_some());
        assert_eq!(p.delay_for(&limited, 2), None, "budget spent");
        let short =
            Error::new(ErrorKind::RateLimited, "x").with_retry_after(Duration::from_secs(5));
        assert_eq!(p.delay_for(&short, 0), Some(Duration::from_secs(5)));
        let long =
            Error::new(ErrorKind::RateLimited, "x").with_retry_after(Duration::from_secs(61));
        assert_eq!(p.delay_for(&long, 0), None);
        let auth = Error::new(ErrorKind::Authentication, "x");
        assert_eq!(p.delay_for(&auth, 0), None);
    }

    #[test]
    fn from_vars_registers_anthropic_and_fails_without_keys() {
        let client = Client::from_vars(|name| match name {
            "ANTHROPIC_API_KEY" => Some("k".to_string()),
            "ANTHROPIC_BASE_URL" => Some("http://127.0.0.1:9/".to_string()),
            _ => None,
        })
        .unwrap();
        assert_eq!(client.provider_ids(), ["anthropic"]);
        let err = Client::from_vars(|_| None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Configuration);
    }
}
