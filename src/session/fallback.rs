//! The fallback chain: which failures move an input on to the next model of
//! [`SessionConfig::fallback_models`](super::SessionConfig::fallback_models), which end the
//! session, and how the next profile takes the place of the current one.
//!
//! A model that keeps failing after the client's retries — rate limited (429), overloaded
//! or failing (5xx, 529, an in-stream `overloaded_error`), or out of quota — hands the
//! input to the next profile of the chain, which continues from the current history: no
//! work is lost, and the history needs no translation beyond what every wire format
//! already does (each sends only the parts it can take: another provider's thinking
//! signatures and reasoning items are left out, and Gemini marks another provider's tool
//! calls as unsigned). This module decides and prepares; the worker switches.

use std::collections::VecDeque;

use super::events::EventKind;
use crate::error::{Error, ErrorKind};
use crate::exec::ExecutionEnvironment;
use crate::profiles::ProviderProfile;

/// The models left to fall back to, in order.
#[derive(Debug, Default)]
pub(crate) struct Chain {
    remaining: VecDeque<ProviderProfile>,
}

impl Chain {
    pub(crate) fn new(models: &[ProviderProfile]) -> Chain {
        Chain {
            remaining: models.iter().cloned().collect(),
        }
    }

    /// The profile to continue with after `error`, if the error is one a fallback answers
    /// and a model is left. The chain only moves forward: a session does not return to a
    /// model that failed.
    pub(crate) fn next_after(&mut self, error: &Error) -> Option<ProviderProfile> {
        if !moves_on(error.kind()) {
            return None;
        }
        self.remaining.pop_front()
    }
}

/// Failures after which another model may succeed where this one did not.
fn moves_on(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::RateLimited | ErrorKind::Server | ErrorKind::Quota
    )
}

/// `next`, ready to take over from `current` in a session over `env`: its environment
/// block captured, and the MCP tools of `current` (`mcp__…`) carried over (a host's own
/// tools are the host's to register on each profile of the chain).
pub(crate) fn adopt(
    mut next: ProviderProfile,
    current: &ProviderProfile,
    env: &dyn ExecutionEnvironment,
) -> ProviderProfile {
    next.capture_environment(env);
    for name in current.tool_registry.names() {
        if name.starts_with("mcp__") && next.tool_registry.get(&name).is_none() {
            if let Some(tool) = current.tool_registry.get(&name) {
                next.tool_registry.register(tool.clone());
            }
        }
    }
    next
}

/// The `MODEL_FALLBACK` event of `to` taking over from `from` after `error`.
pub(crate) fn event(from: &ProviderProfile, to: &ProviderProfile, error: &Error) -> EventKind {
    EventKind::ModelFallback {
        from_provider: from.id.clone(),
        from_model: from.model.clone(),
        to_provider: to.id.clone(),
        to_model: to.model.clone(),
        error_kind: error.kind().as_str().to_string(),
        message: error.to_string(),
    }
}

/// Errors after which the session cannot go on (spec §2.8, Appendix B), once no fallback
/// model took over.
pub(crate) fn is_fatal(kind: ErrorKind) -> bool {
    match kind {
        ErrorKind::Authentication
        | ErrorKind::AccessDenied
        | ErrorKind::NotFound
        | ErrorKind::InvalidRequest
        | ErrorKind::Quota
        | ErrorKind::Configuration
        | ErrorKind::SessionClosed => true,
        ErrorKind::ContextLength
        | ErrorKind::RateLimited
        | ErrorKind::Server
        | ErrorKind::ContentFilter
        | ErrorKind::Network
        | ErrorKind::Timeout
        | ErrorKind::Stream
        | ErrorKind::Aborted
        | ErrorKind::Io
        | ErrorKind::StructuredOutput => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_capacity_failures_move_on_and_each_model_is_used_once() {
        let mut chain = Chain::new(&[
            ProviderProfile::new("a", "one"),
            ProviderProfile::new("b", "two"),
        ]);
        let auth = Error::new(ErrorKind::Authentication, "bad key");
        assert!(chain.next_after(&auth).is_none());
        let busy = Error::new(ErrorKind::Server, "overloaded");
        assert_eq!(chain.next_after(&busy).unwrap().model, "one");
        let quota = Error::new(ErrorKind::Quota, "out of credit");
        assert_eq!(chain.next_after(&quota).unwrap().model, "two");
        assert!(chain.next_after(&busy).is_none());
    }
}
