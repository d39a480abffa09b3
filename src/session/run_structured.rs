//! `Session::run_structured` and `submit_structured`: one input whose final answer is a JSON
//! value valid against the host's schema (the mechanism is `structured.rs`). They submit
//! (and the first waits), like `run` and `submit`; they never touch the loop itself.

use std::sync::Arc;

use super::structured::Structured;
use super::worker::Input;
use super::{Outcome, Session};
use crate::error::Result;

impl Session {
    /// Like [`run`](Self::run), but the final answer is a JSON value valid against
    /// `schema`, a JSON Schema object: [`Outcome::output`] holds it. The keywords checked
    /// are `type`, `properties`, `required`, `additionalProperties`, `enum`, `const`,
    /// `items`, the number, length and item-count bounds, `pattern`, `anyOf`, `oneOf`,
    /// `allOf` and `$ref` within the schema; others are ignored.
    ///
    /// The model gets one more tool for this input, `final_answer`, with `schema` as its
    /// parameters (wrapped as `{"value": …}` when the schema's root is not an object); it
    /// works on every wire format, beside the profile's tools. An invalid call is answered
    /// with the validator's message, and an answer in plain text with a reminder (unless
    /// the text is itself a valid value), at most
    /// [`structured_output_retries`](super::SessionConfig::structured_output_retries)
    /// times; after that the input stops with
    /// [`StopReason::StructuredOutputFailed`](super::StopReason::StructuredOutputFailed)
    /// and this returns an [`ErrorKind::StructuredOutput`](crate::ErrorKind::StructuredOutput)
    /// error. A schema that is not an object, or is nested deeper than 64 levels, is a
    /// configuration error. Limits, budgets and interrupts end it as they end
    /// [`run`](Self::run): `Ok`, with no output.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agentloop::exec::LocalExecutionEnvironment;
    /// use agentloop::llm::Client;
    /// use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
    /// use agentloop::profiles::ProviderProfile;
    /// use agentloop::serde_json::json;
    /// use agentloop::session::{Session, SessionConfig};
    ///
    /// let model = ScriptedModel::new(vec![ScriptedTurn::tool_call(
    ///     "final_answer",
    ///     json!({"failing": ["parser::empty_input"], "count": 1}),
    /// )]);
    /// let env = Arc::new(LocalExecutionEnvironment::new(std::env::temp_dir())?);
    /// let session = Session::new(
    ///     ProviderProfile::new("scripted", "demo"),
    ///     env,
    ///     Client::new().with_provider(model),
    ///     SessionConfig::default(),
    /// )?;
    /// let schema = json!({
    ///     "type": "object",
    ///     "properties": {
    ///         "failing": {"type": "array", "items": {"type": "string"}},
    ///         "count": {"type": "integer", "minimum": 0}
    ///     },
    ///     "required": ["failing", "count"]
    /// });
    /// let outcome = session.run_structured("which tests fail?", schema)?;
    /// assert_eq!(outcome.output.unwrap()["count"], 1);
    /// # Ok::<(), agentloop::Error>(())
    /// ```
    pub fn run_structured(
        &self,
        input: impl Into<String>,
        schema: serde_json::Value,
    ) -> Result<Outcome> {
        let structured = Structured::new(Arc::new(schema), self.structured_output_retries)?;
        let _waiting = self.listeners.run_guard();
        if self.listeners.iterators() == 0 {
            while self.events.try_recv().is_ok() {}
        }
        let (reply, outcome) = crossbeam_channel::bounded(1);
        self.send(Input::Submit {
            text: input.into(),
            reply: Some(reply),
            structured: Some(Box::new(structured)),
        })?;
        self.outcome_of(&outcome)
    }

    /// Queues `input` as [`run_structured`](Self::run_structured) does, and returns at
    /// once: the value arrives in the input's `PROCESSING_END` event (`output`), for a host
    /// that reads the event stream (the `agentloop` CLI's `--output-schema`). Fails like
    /// [`submit`](Self::submit), and with a configuration error for an unusable schema.
    pub fn submit_structured(
        &self,
        input: impl Into<String>,
        schema: serde_json::Value,
    ) -> Result<()> {
        let structured = Structured::new(Arc::new(schema), self.structured_output_retries)?;
        self.send(Input::Submit {
            text: input.into(),
            reply: None,
            structured: Some(Box::new(structured)),
        })
    }
}
