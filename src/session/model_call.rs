//! One model call as the loop makes it: the request streamed through the client, text
//! and reasoning deltas emitted live, the call's end and cost reported, the answer made
//! into a history turn. It never retries (the client does) and never touches the history
//! (the worker appends the turn).

use std::time::SystemTime;

use super::config::SessionConfig;
use super::delivery::EventSink;
use super::events::EventKind;
use super::history::{AssistantTurn, Turn};
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::pricing::PriceTable;
use crate::llm::{Client, FinishKind, FinishReason, Request, Response, StreamEvent, ToolCall};
use crate::profiles::ProviderProfile;

/// How one model call ended.
pub(crate) enum RoundEnd {
    Response(Box<Response>),
    Cancelled,
    Failed(Error),
}

/// What a model call needs from the session, borrowed for its duration.
pub(crate) struct ModelCall<'a> {
    pub(crate) client: &'a Client,
    pub(crate) events: &'a EventSink,
    pub(crate) profile: &'a ProviderProfile,
    pub(crate) prices: &'a PriceTable,
}

impl ModelCall<'_> {
    /// One model call, streamed: text and reasoning deltas go out live.
    pub(crate) fn stream(&self, request: &Request, cancel: &CancelToken) -> RoundEnd {
        let stream = match self.client.stream_with_cancel(request, cancel) {
            Ok(stream) => stream,
            Err(_) if cancel.is_cancelled() => return RoundEnd::Cancelled,
            Err(error) => return RoundEnd::Failed(error),
        };
        self.events.emit(EventKind::AssistantTextStart {});
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut failure = None;
        for event in stream {
            match event {
                Ok(StreamEvent::TextDelta { delta, .. }) => {
                    text.push_str(&delta);
                    self.events.emit(EventKind::AssistantTextDelta { delta });
                }
                Ok(StreamEvent::ReasoningDelta { delta }) => {
                    reasoning.push_str(&delta);
                    self.events
                        .emit(EventKind::AssistantReasoningDelta { delta });
                }
                Ok(StreamEvent::Finish { response, .. }) => {
                    self.events.emit(EventKind::AssistantTextEnd {
                        text: response.text(),
                        reasoning: response.reasoning(),
                        refusal: response.refusal.clone(),
                        finish_reason: response.finish_reason.clone(),
                        usage: response.usage,
                        tool_calls: response.tool_calls().len(),
                        cost_usd: self.cost(&response),
                    });
                    return RoundEnd::Response(response);
                }
                Ok(_) => {}
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        let cancelled = cancel.is_cancelled();
        let raw = if cancelled {
            "cancelled"
        } else {
            "stream_error"
        };
        self.events.emit(EventKind::AssistantTextEnd {
            text,
            reasoning: (!reasoning.is_empty()).then_some(reasoning),
            refusal: None,
            finish_reason: FinishReason::new(FinishKind::Other, Some(raw.to_string())),
            usage: Default::default(),
            tool_calls: 0,
            cost_usd: None,
        });
        if cancelled {
            return RoundEnd::Cancelled;
        }
        RoundEnd::Failed(failure.unwrap_or_else(|| {
            Error::new(ErrorKind::Stream, "the stream ended without a finish event")
                .with_provider(self.profile.id.clone())
        }))
    }

    /// The cost of one model call, by the model that answered (else the profile's).
    pub(crate) fn cost(&self, response: &Response) -> Option<f64> {
        let model = if response.model.is_empty() {
            &self.profile.model
        } else {
            &response.model
        };
        self.prices.cost(model, &response.usage)
    }
}

/// The history turn of an answer with its tool calls.
pub(crate) fn assistant_turn(response: Response, tool_calls: Vec<ToolCall>) -> Turn {
    let content = response.text();
    let reasoning = response.reasoning();
    Turn::Assistant(AssistantTurn {
        content,
        tool_calls,
        reasoning,
        usage: response.usage,
        response_id: (!response.id.is_empty()).then_some(response.id),
        finish_reason: response.finish_reason,
        parts: response.message.content,
        timestamp: SystemTime::now(),
    })
}

/// Emits the events of a provider error; returns whether the session must close.
pub(crate) fn report_error(events: &EventSink, error: &Error) -> bool {
    let fatal = super::fallback::is_fatal(error.kind());
    if error.kind() == ErrorKind::ContextLength {
        events.emit(EventKind::Warning {
            message: format!(
                "the request exceeded the model's context window; shorten the history \
                 or start a new session ({error})"
            ),
            code: "context_length".to_string(),
        });
    }
    events.emit(EventKind::Error {
        message: error.to_string(),
        error_kind: error.kind().as_str().to_string(),
        fatal,
    });
    fatal
}

/// The controls of an unattended run, checked before the session starts: a provider for
/// every fallback profile, prices for a cost budget, a prompt-cache TTL the providers take.
pub(crate) fn check_controls(
    client: &Client,
    profile: &ProviderProfile,
    config: &SessionConfig,
) -> Result<()> {
    for fallback in &config.fallback_models {
        check_provider(client, fallback)?;
    }
    super::ledger::check_config(config, profile)?;
    match config.prompt_cache_ttl.map(|ttl| ttl.as_secs_f64()) {
        None | Some(300.0) | Some(3600.0) => Ok(()),
        Some(other) => Err(Error::new(
            ErrorKind::Configuration,
            format!(
                "prompt_cache_ttl must be 5 minutes or 1 hour (what providers offer), not \
                 {other} s"
            ),
        )),
    }
}

/// Fails with a configuration error if no provider of `client` answers `profile`'s id.
pub(crate) fn check_provider(client: &Client, profile: &ProviderProfile) -> Result<()> {
    let probe = Request {
        provider: Some(profile.id.clone()),
        ..Request::default()
    };
    client.provider_for(&probe).map(|_| ())
}

/// The base URL of the provider `profile` names, for the transcript's header.
pub(crate) fn base_url<'c>(client: &'c Client, profile: &ProviderProfile) -> Option<&'c str> {
    let probe = Request {
        provider: Some(profile.id.clone()),
        ..Request::default()
    };
    client.provider_for(&probe).ok()?.base_url()
}
