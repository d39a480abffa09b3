//! The events of one input, from [`Session::submit_events`]: an iterator
//! that ends with the input instead of waiting for the session to close. It never drops an
//! event and never changes the session.

use std::fmt;

use super::events::{EventKind, SessionEvent};
use super::{Events, Session};
use crate::error::{Error, ErrorKind, Result};

/// The events of one input (see [`Session::submit_events`]).
pub(crate) struct InputEvents {
    events: Events,
    input: String,
    /// This input's `USER_INPUT` was seen.
    started: bool,
    ended: bool,
}

impl fmt::Debug for InputEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InputEvents")
            .field("started", &self.started)
            .field("ended", &self.ended)
            .finish()
    }
}

impl Iterator for InputEvents {
    type Item = SessionEvent;

    fn next(&mut self) -> Option<SessionEvent> {
        if self.ended {
            return None;
        }
        let Some(event) = self.events.next() else {
            self.ended = true;
            return None;
        };
        match &event.kind {
            EventKind::UserInput { content } if !self.started && *content == self.input => {
                self.started = true;
            }
            EventKind::ProcessingEnd { .. } if self.started => self.ended = true,
            EventKind::SessionEnd { .. } => self.ended = true,
            _ => {}
        }
        Some(event)
    }
}

impl Session {
    /// Submits `input` and returns an iterator of its events that ends with it — the
    /// iterator to use for one input at a time. It blocks for each event and ends after
    /// the input's `PROCESSING_END` (or after `SESSION_END`, if the session ends first).
    /// Events that were waiting before the input (`SESSION_START`, events of earlier inputs
    /// nobody read) come first. Follow-ups queued while the input runs are processed after
    /// it, as inputs of their own: read them from the next iterator, or let
    /// [`run`](Self::run) wait for them.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use agentloop::exec::LocalExecutionEnvironment;
    /// # use agentloop::llm::Client;
    /// # use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
    /// # use agentloop::profiles::ProviderProfile;
    /// # use agentloop::session::{EventKind, Session, SessionConfig};
    /// # let client = Client::new().with_provider(ScriptedModel::new(vec![
    /// #     ScriptedTurn::text("one"), ScriptedTurn::text("two"),
    /// # ]));
    /// # let env = Arc::new(LocalExecutionEnvironment::new(std::env::temp_dir())?);
    /// # let profile = ProviderProfile::new("scripted", "demo");
    /// let session = Session::new(profile, env, client, SessionConfig::default())?;
    /// for input in ["first", "second"] {
    ///     for event in session.submit_events(input)? {
    ///         if let EventKind::AssistantTextEnd { text, .. } = &event.kind {
    ///             println!("{text}");
    ///         }
    ///     } // ends after this input's PROCESSING_END: no close() needed
    /// }
    /// # Ok::<(), agentloop::Error>(())
    /// ```
    ///
    /// Fails like [`submit`](Self::submit) when the session is closed, and with
    /// [`ErrorKind::Configuration`] while an [`events`](Self::events) iterator of this
    /// session is alive (the two would each get part of the stream).
    pub fn submit_events(
        &self,
        input: impl Into<String>,
    ) -> Result<impl Iterator<Item = SessionEvent> + Send + 'static> {
        if self.listeners.iterators() > 0 {
            return Err(Error::new(
                ErrorKind::Configuration,
                "another event iterator of this session is alive: drop it before \
                 `submit_events`, or read this input's events from it",
            ));
        }
        let input = input.into();
        let events = Events::new(self.events.clone(), self.listeners.clone());
        self.submit(input.clone())?;
        Ok(InputEvents {
            events,
            input,
            started: false,
            ended: false,
        })
    }
}
