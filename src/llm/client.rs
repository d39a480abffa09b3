//! `Client`: providers by id, `complete()` and `stream()`, and the retry policy.
//!
//! (Being built in part 1: this file holds the public shape the rest of the crate codes
//! against.)

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::{Request, Response, StreamEvent};

/// A source of model responses: an HTTP wire format, the scripted model, or a host's own.
///
/// Implementations must be cheap to share between threads; [`Client`] holds them in `Arc`s.
pub trait Provider: Send + Sync {
    /// The provider id requests name in [`Request::provider`] (`"anthropic"`, `"openai"`).
    fn id(&self) -> &str;

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

/// The LLM client: registered providers, a default, and a retry policy. Cheap to clone.
#[derive(Clone, Default)]
pub struct Client {
    providers: HashMap<String, Arc<dyn Provider>>,
    default_provider: Option<String>,
    retry: RetryPolicy,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids: Vec<&String> = self.providers.keys().collect();
        ids.sort();
        f.debug_struct("Client")
            .field("providers", &ids)
            .field("default_provider", &self.default_provider)
            .field("retry", &self.retry)
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
            .ok_or_else(|| Error::new(ErrorKind::Configuration, "no provider is registered"))?;
        self.providers.get(id).ok_or_else(|| {
            Error::new(
                ErrorKind::Configuration,
                format!("no provider is registered under `{id}`"),
            )
        })
    }
}

impl Client {
    /// Streams the response to `request` (see [`stream_with_cancel`](Self::stream_with_cancel)).
    pub fn stream(&self, request: &Request) -> Result<EventStream> {
        self.stream_with_cancel(request, &CancelToken::new())
    }

    /// Streams the response to `request`; `cancel` ends it from another thread, also while
    /// this call is still waiting for the provider to answer.
    ///
    /// (Part 1 adds the retry policy here: retries happen only before the first event has
    /// been handed to the caller.)
    pub fn stream_with_cancel(
        &self,
        request: &Request,
        cancel: &CancelToken,
    ) -> Result<EventStream> {
        let provider = self.provider_for(request)?;
        let inner = provider.open(request, cancel)?;
        Ok(EventStream::new(inner, cancel.clone()))
    }

    /// Sends `request` and returns the whole response (streams internally).
    pub fn complete(&self, request: &Request) -> Result<Response> {
        self.stream(request)?.into_response()
    }
}

/// A streamed response: an iterator of events with a cancel handle.
pub struct EventStream {
    inner: Box<dyn Iterator<Item = Result<StreamEvent>> + Send>,
    cancel: CancelToken,
}

impl fmt::Debug for EventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream")
            .field("cancelled", &self.cancel.is_cancelled())
            .finish()
    }
}

impl EventStream {
    /// Wraps an event iterator and the token that cancels it.
    pub fn new(
        inner: Box<dyn Iterator<Item = Result<StreamEvent>> + Send>,
        cancel: CancelToken,
    ) -> EventStream {
        EventStream { inner, cancel }
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
        self.inner.next()
    }
}
