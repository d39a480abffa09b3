//! What the host and the worker thread exchange: the messages of the worker's inbox, the
//! state both sides touch (queues, the current input's token, the history), and how an
//! input ended (what the worker turns into the host's `Outcome` and `PROCESSING_END`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;

use super::Outcome;
use super::budget::{BudgetKind, BudgetScope};
use super::checkpoint::lifecycle::CheckpointJob;
use super::events::SessionState;
use super::events::StopReason;
use super::history::History;
use super::mode::SessionMode;
use super::structured::Structured;
use super::usage::Totals;
use crate::cancel::CancelToken;
use crate::error::Error;

/// What the host sends the worker through the inbox.
pub(crate) enum Input {
    /// Process this input; send the outcome (after the follow-ups it triggers) to `reply`.
    /// With `structured`, its final answer must be a value valid against that schema.
    Submit {
        text: String,
        reply: Option<Sender<Outcome>>,
        structured: Option<Box<Structured>>,
    },
    /// A follow-up was queued: process the queue if idle.
    FollowUp,
    /// Compact the history now (`Session::compact`); reply when done.
    Compact { reply: Sender<()> },
    /// Rewind (`Session::rewind`) or fork (`Session::fork`): the job replies itself.
    Checkpoint(CheckpointJob),
    /// Shut down cleanly after the inputs before this one.
    Close,
    /// Shut down now (the session token is already cancelled).
    Abort,
}

/// State the host and the worker share.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) state: Mutex<SessionState>,
    pub(crate) steering: Mutex<VecDeque<String>>,
    pub(crate) follow_ups: Mutex<VecDeque<String>>,
    /// The token of the input being processed (what `interrupt()` cancels).
    pub(crate) current_input: Mutex<Option<CancelToken>>,
    pub(crate) reasoning_effort: Mutex<Option<String>>,
    /// The mode the next input runs in (`Session::set_mode`); subagents read it too.
    pub(crate) mode: Arc<Mutex<SessionMode>>,
    /// The model the next input switches to (`Session::set_model`).
    pub(crate) model: Mutex<Option<String>>,
    pub(crate) history: Mutex<History>,
    /// Tool calls waiting for an approval answer.
    pub(crate) awaiting: AtomicUsize,
    pub(crate) closed: AtomicBool,
}

/// How one input ended.
pub(crate) struct InputEnd {
    pub(crate) text: String,
    pub(crate) stop: StopReason,
    pub(crate) rounds: usize,
    pub(crate) totals: Totals,
    pub(crate) error: Option<Error>,
    pub(crate) fatal: bool,
    /// Why a `user_prompt_submit` hook blocked the input.
    pub(crate) blocked: Option<String>,
    /// The structured final answer.
    pub(crate) output: Option<serde_json::Value>,
    /// The budget that stopped the input.
    pub(crate) budget: Option<(BudgetKind, BudgetScope)>,
}

impl Default for InputEnd {
    fn default() -> InputEnd {
        InputEnd {
            text: String::new(),
            stop: StopReason::Completed,
            rounds: 0,
            totals: Totals::default(),
            error: None,
            fatal: false,
            blocked: None,
            output: None,
            budget: None,
        }
    }
}
