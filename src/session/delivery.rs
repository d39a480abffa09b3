//! Event delivery: how a session's events reach its host — the sink the worker emits into,
//! the forward that wraps a subagent's events for its parent, and the [`Events`] iterator.
//!
//! This module never blocks the worker: the channel is unbounded, events nobody will read
//! are not kept (see `Listeners`), and live command output waiting for a slow reader is
//! bounded: past [`OUTPUT_BACKLOG`] bytes of unread `TOOL_CALL_OUTPUT_DELTA`s, further
//! deltas are skipped and one marker delta says how much (the call's `TOOL_CALL_END`
//! still carries its output's head and tail).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::events::{EventKind, SessionEvent};
use super::transcript::TranscriptWriter;

/// Most bytes of live command output (`TOOL_CALL_OUTPUT_DELTA`s) sent but not yet read by
/// the host; past it, deltas are skipped until the reader catches up.
pub(crate) const OUTPUT_BACKLOG: usize = 4 * 1024 * 1024;

/// Who listens: decides whether the worker keeps events for the host.
#[derive(Debug, Default)]
pub(crate) struct Listeners {
    /// Live [`Events`] iterators.
    iterators: AtomicUsize,
    /// `run()` calls waiting for their outcome.
    runs: AtomicUsize,
    /// Bytes of output deltas in the channel, not yet read.
    queued_output: AtomicUsize,
    /// Bytes of output skipped per call id (and its stream), not yet reported.
    skipped: Mutex<BTreeMap<String, (String, u64)>>,
}

impl Listeners {
    /// Events are dropped while a `run()` waits and no iterator exists: a host that only
    /// uses `run()` never accumulates events.
    fn keep(&self, kind: &EventKind) -> bool {
        matches!(kind, EventKind::SessionEnd { .. })
            || self.iterators.load(Ordering::SeqCst) > 0
            || self.runs.load(Ordering::SeqCst) == 0
    }

    /// Whether a delta of `len` bytes for `call_id` may be sent now; if not, it is counted
    /// as skipped. When it may, returns the marker for what was skipped before it, if any.
    fn admit_output(&self, call_id: &str, stream: &str, len: usize) -> Result<Option<String>, ()> {
        let queued = self.queued_output.load(Ordering::SeqCst);
        let mut skipped = crate::sync::lock(&self.skipped);
        if queued + len > OUTPUT_BACKLOG {
            let entry = skipped
                .entry(call_id.to_string())
                .or_insert_with(|| (stream.to_string(), 0));
            entry.1 += len as u64;
            return Err(());
        }
        self.queued_output.fetch_add(len, Ordering::SeqCst);
        Ok(skipped
            .remove(call_id)
            .map(|(_, bytes)| skipped_marker(bytes)))
    }

    /// The marker for output of `call_id` still unreported when the call ends.
    fn take_skipped(&self, call_id: &str) -> Option<(String, String)> {
        let (stream, bytes) = crate::sync::lock(&self.skipped).remove(call_id)?;
        Some((stream, skipped_marker(bytes)))
    }

    /// The host read an event: its output bytes leave the backlog.
    fn read(&self, kind: &EventKind) {
        if let EventKind::ToolCallOutputDelta { delta, .. } = kind {
            let _ = self
                .queued_output
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |queued| {
                    Some(queued.saturating_sub(delta.len()))
                });
        }
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

/// The delta that stands for output skipped while the host read too slowly.
fn skipped_marker(bytes: u64) -> String {
    format!(
        "\n[agentloop: {bytes} bytes of live output skipped: the event reader fell behind; \
         TOOL_CALL_END has the output]\n"
    )
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
        let send = keep && self.admit(&kind);
        let Some(transcript) = &self.transcript else {
            if send {
                let _ = self.sender.send(SessionEvent::new(kind, &*self.session_id));
            }
            return;
        };
        let event = SessionEvent::new(kind, &*self.session_id);
        let failure = transcript.event(&event);
        if send {
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

impl EventSink {
    /// Whether `kind` goes to the host now: output deltas only within [`OUTPUT_BACKLOG`].
    /// Sends the marker for skipped output first where one is due: before the next delta
    /// that fits, or before the call's `TOOL_CALL_END`.
    fn admit(&self, kind: &EventKind) -> bool {
        let marker = match kind {
            EventKind::ToolCallOutputDelta {
                call_id,
                stream,
                delta,
            } => match self.listeners.admit_output(call_id, stream, delta.len()) {
                Err(()) => return false,
                Ok(marker) => marker.map(|m| (call_id.clone(), stream.clone(), m)),
            },
            EventKind::ToolCallEnd { call_id, .. } => self
                .listeners
                .take_skipped(call_id)
                .map(|(stream, m)| (call_id.clone(), stream, m)),
            _ => None,
        };
        if let Some((call_id, stream, delta)) = marker {
            let _ = self.sender.send(SessionEvent::new(
                EventKind::ToolCallOutputDelta {
                    call_id,
                    stream,
                    delta,
                },
                &*self.session_id,
            ));
        }
        true
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
        self.listeners.read(&event.kind);
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
