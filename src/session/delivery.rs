//! Event delivery: how a session's events reach its host — the sink the worker emits into,
//! the forward that wraps a subagent's events for its parent, and the [`Events`] iterator.
//!
//! This module never blocks the worker: the channel is unbounded, and events nobody will
//! read are not kept (see `Listeners`).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::events::{EventKind, SessionEvent};
use super::transcript::TranscriptWriter;

/// Who listens: decides whether the worker keeps events for the host.
#[derive(Debug, Default)]
pub(crate) struct Listeners {
    /// Live [`Events`] iterators.
    iterators: AtomicUsize,
    /// `run()` calls waiting for their outcome.
    runs: AtomicUsize,
}

impl Listeners {
    /// Events are dropped while a `run()` waits and no iterator exists: a host that only
    /// uses `run()` never accumulates events.
    fn keep(&self, kind: &EventKind) -> bool {
        matches!(kind, EventKind::SessionEnd { .. })
            || self.iterators.load(Ordering::SeqCst) > 0
            || self.runs.load(Ordering::SeqCst) == 0
    }

    pub(crate) fn iterators(&self) -> usize {
        self.iterators.load(Ordering::SeqCst)
    }

    /// Registers a waiting `run()` until the guard drops.
    pub(crate) fn run_guard(self: &Arc<Self>) -> RunGuard {
        self.runs.fetch_add(1, Ordering::SeqCst);
        RunGuard(self.clone())
    }
}

/// Unregisters a waiting `run()` when dropped.
pub(crate) struct RunGuard(Arc<Listeners>);

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.0.runs.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The worker's side of the event channel. Cloneable and `Sync`: tool threads emit too.
#[derive(Clone)]
pub(crate) struct EventSink {
    sender: Sender<SessionEvent>,
    session_id: Arc<str>,
    listeners: Arc<Listeners>,
    /// Where events are also recorded, when the transcript records events.
    transcript: Option<Arc<TranscriptWriter>>,
    /// Set for a subagent: its events go to the parent's stream, wrapped, instead.
    forward: Option<Forward>,
}

/// Where a subagent's events go: the parent's sink, under the subagent's id.
#[derive(Clone)]
pub(crate) struct Forward {
    parent: Box<EventSink>,
    agent_id: Arc<str>,
}

impl EventSink {
    pub(crate) fn new(
        sender: Sender<SessionEvent>,
        session_id: Arc<str>,
        listeners: Arc<Listeners>,
    ) -> EventSink {
        EventSink {
            sender,
            session_id,
            listeners,
            transcript: None,
            forward: None,
        }
    }

    /// The id of the session whose events this sink carries.
    pub(crate) fn session_id(&self) -> &str {
        &self.session_id
    }

    /// For a subagent's sink: its parent's sink and the subagent's id.
    pub(crate) fn parent(&self) -> Option<(&EventSink, &str)> {
        self.forward
            .as_ref()
            .map(|forward| (&*forward.parent, &*forward.agent_id))
    }

    /// Sends this sink's events to `forward` instead of its own channel.
    pub(crate) fn forwarded_to(mut self, forward: Option<Forward>) -> EventSink {
        self.forward = forward;
        self
    }

    /// A forward into this sink for the subagent `agent_id`.
    pub(crate) fn forwarding(&self, agent_id: &str) -> Forward {
        Forward {
            parent: Box::new(self.clone()),
            agent_id: Arc::from(agent_id),
        }
    }

    /// Also records every event in `transcript`.
    pub(crate) fn with_transcript(mut self, transcript: Arc<TranscriptWriter>) -> EventSink {
        self.transcript = Some(transcript);
        self
    }

    /// Sends an event (never blocks; a host that is gone is not an error), and records it
    /// in the transcript when events are recorded — also the events the host does not
    /// keep. A subagent's sink forwards to its parent's instead (and has no transcript).
    pub(crate) fn emit(&self, kind: EventKind) {
        if let Some(forward) = &self.forward {
            let event = SessionEvent::new(kind, &*self.session_id);
            forward.parent.emit(EventKind::SubagentEvent {
                agent_id: forward.agent_id.to_string(),
                event: Box::new(event),
            });
            return;
        }
        let keep = self.listeners.keep(&kind);
        let Some(transcript) = &self.transcript else {
            if keep {
                let _ = self.sender.send(SessionEvent::new(kind, &*self.session_id));
            }
            return;
        };
        let event = SessionEvent::new(kind, &*self.session_id);
        let failure = transcript.event(&event);
        if keep {
            let _ = self.sender.send(event);
        }
        if let Some(message) = failure {
            // The writer is closed now: this warning is not recorded, so no recursion.
            self.emit(EventKind::Warning {
                message,
                code: "transcript".to_string(),
            });
        }
    }
}

/// Why [`Events::recv_timeout`] returned no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvError {
    /// No event arrived in time.
    Timeout,
    /// The stream ended: `SESSION_END` was delivered, or the worker is gone.
    Ended,
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvError::Timeout => f.write_str("no session event arrived in time"),
            RecvError::Ended => f.write_str("the session's event stream has ended"),
        }
    }
}

impl std::error::Error for RecvError {}

/// The host's blocking iterator of [`SessionEvent`]s (from
/// [`Session::events`](super::Session::events)).
///
/// Ends after yielding `SESSION_END`, or when the session's worker is gone and every event
/// was read. Several iterators share one stream: each event goes to exactly one of them.
pub struct Events {
    receiver: Receiver<SessionEvent>,
    listeners: Arc<Listeners>,
    ended: bool,
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Events")
            .field("pending", &self.receiver.len())
            .field("ended", &self.ended)
            .finish()
    }
}

impl Events {
    pub(crate) fn new(receiver: Receiver<SessionEvent>, listeners: Arc<Listeners>) -> Events {
        listeners.iterators.fetch_add(1, Ordering::SeqCst);
        Events {
            receiver,
            listeners,
            ended: false,
        }
    }

    /// Waits up to `timeout` for the next event.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<SessionEvent, RecvError> {
        if self.ended {
            return Err(RecvError::Ended);
        }
        match self.receiver.recv_timeout(timeout) {
            Ok(event) => Ok(self.saw(event)),
            Err(RecvTimeoutError::Timeout) => Err(RecvError::Timeout),
            Err(RecvTimeoutError::Disconnected) => {
                self.ended = true;
                Err(RecvError::Ended)
            }
        }
    }

    /// The next event if one is already waiting.
    pub fn try_next(&mut self) -> Option<SessionEvent> {
        if self.ended {
            return None;
        }
        let event = self.receiver.try_recv().ok()?;
        Some(self.saw(event))
    }

    fn saw(&mut self, event: SessionEvent) -> SessionEvent {
        if matches!(event.kind, EventKind::SessionEnd { .. }) {
            self.ended = true;
        }
        event
    }
}

impl Iterator for Events {
    type Item = SessionEvent;

    fn next(&mut self) -> Option<SessionEvent> {
        if self.ended {
            return None;
        }
        match self.receiver.recv() {
            Ok(event) => Some(self.saw(event)),
            Err(_) => {
                self.ended = true;
                None
            }
        }
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.listeners.iterators.fetch_sub(1, Ordering::SeqCst);
    }
}
