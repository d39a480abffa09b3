//! Approval of tool calls: the host's hook, its verdicts, and the responder for "ask".
//!
//! Before a validated call runs, the session asks the configured hook
//! ([`SessionConfig::approval`](super::SessionConfig::approval)). `Allow` runs the call,
//! `Deny(reason)` answers the model with an error result carrying the reason, and `Ask`
//! emits an `APPROVAL_REQUESTED` event carrying an [`ApprovalResponder`]; the call waits
//! (session state `AWAITING_INPUT`) until the host answers through it, the responder is
//! dropped unanswered (a denial), or the input is interrupted or the session aborted. This
//! module never blocks except in the session's wait for an answer.

use std::fmt;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use crate::llm::ToolCall;

/// The hook's verdict on one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Approval {
    /// Run the call.
    Allow,
    /// Do not run it; the model gets an error result with this reason.
    Deny(String),
    /// Ask the host: emit `APPROVAL_REQUESTED` and wait for its answer.
    Ask,
}

/// The host's approval hook: called on the thread that runs the call, before it runs.
pub type ApprovalHook = Arc<dyn Fn(&ToolCall) -> Approval + Send + Sync>;

/// The host's answer to an `APPROVAL_REQUESTED` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Approve,
    Deny(String),
}

/// Answers one `APPROVAL_REQUESTED` event. Cloneable; the first answer wins.
///
/// Dropping every clone without answering counts as a denial, so a host that ignores the
/// event does not block the session forever. Not serialised: a deserialised event carries
/// a responder that answers nothing.
#[derive(Clone, Default)]
pub struct ApprovalResponder {
    sender: Option<Sender<Decision>>,
}

impl fmt::Debug for ApprovalResponder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalResponder")
            .field("connected", &self.sender.is_some())
            .finish()
    }
}

impl ApprovalResponder {
    /// A responder and the receiving end the session waits on.
    pub(crate) fn pair() -> (ApprovalResponder, Receiver<Decision>) {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        (
            ApprovalResponder {
                sender: Some(sender),
            },
            receiver,
        )
    }

    /// Lets the call run. Returns `false` if the session no longer waits for this answer
    /// (already answered, interrupted, or closed).
    pub fn approve(&self) -> bool {
        self.send(Decision::Approve)
    }

    /// Refuses the call; the model gets an error result saying `reason`. Returns `false`
    /// if the session no longer waits for this answer.
    pub fn deny(&self, reason: impl Into<String>) -> bool {
        self.send(Decision::Deny(reason.into()))
    }

    fn send(&self, decision: Decision) -> bool {
        match &self.sender {
            Some(sender) => sender.try_send(decision).is_ok(),
            None => false,
        }
    }
}
