//! Structured output: the final answer of one input as a JSON value valid against the
//! host's schema ([`Session::run_structured`](super::Session::run_structured)).
//!
//! The input offers the model one more tool, `final_answer`, whose parameters are the
//! schema (wrapped as `{"value": …}` when the schema's root is not an object, since every
//! wire format takes only object parameters). It works the same on all four wire formats
//! and composes with the other tools: the model works as usual and ends by calling it. A
//! valid call ends the input with the value; an invalid one is answered with the
//! validator's message, and a text-only answer with a reminder (unless the text itself is a
//! valid value), each costing one of the bounded retries. This module validates and words
//! messages; it never calls a model and runs no tool of the registry.

use std::sync::Arc;

use serde_json::{Value, json};

use super::events::StopReason;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::{ToolCall, ToolDefinition};
use crate::tools::schema;

/// The synthetic tool's name.
pub(crate) const TOOL_NAME: &str = "final_answer";

/// Deepest schema accepted (the validator follows no deeper).
const MAX_SCHEMA_DEPTH: usize = 64;

/// What the loop does after a text-only answer.
pub(crate) enum AfterText {
    /// The text itself is a valid value: the input is done.
    Done,
    /// Send this reminder to the model and go on.
    Remind(String),
    /// No retries left: the input fails.
    GiveUp,
}

/// One structured input: the schema, the tool, the value once given, the retries left.
pub(crate) struct Structured {
    schema: Arc<Value>,
    /// The tool's parameters wrap the schema as `{"value": …}`.
    wrapped: bool,
    parameters: Value,
    retries_left: usize,
    value: Option<Value>,
    /// Why the last answer was not accepted.
    last_problem: Option<String>,
    /// An answer was refused with no retry left.
    exhausted: bool,
}

impl Structured {
    /// Checks `schema` (a JSON object, at most 64 levels deep) and prepares the tool.
    pub(crate) fn new(schema: Arc<Value>, retries: usize) -> Result<Structured> {
        if !schema.is_object() {
            return Err(Error::new(
                ErrorKind::Configuration,
                "the output schema must be a JSON Schema object",
            ));
        }
        if depth(&schema) > MAX_SCHEMA_DEPTH {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!("the output schema is nested deeper than {MAX_SCHEMA_DEPTH} levels"),
            ));
        }
        let is_object = schema.get("type").and_then(Value::as_str) == Some("object");
        let parameters = if is_object {
            (*schema).clone()
        } else {
            let mut wrapper = json!({
                "type": "object",
                "properties": {"value": *schema},
                "required": ["value"],
                "additionalProperties": false,
            });
            // `$ref`s point into the schema's root: keep its definitions reachable.
            for key in ["$defs", "definitions"] {
                if let Some(definitions) = schema.get(key) {
                    wrapper[key] = definitions.clone();
                }
            }
            wrapper
        };
        Ok(Structured {
            schema,
            wrapped: !is_object,
            parameters,
            retries_left: retries,
            value: None,
            last_problem: None,
            exhausted: false,
        })
    }

    /// The tool the model gives its final answer with.
    pub(crate) fn tool(&self) -> ToolDefinition {
        ToolDefinition {
            name: TOOL_NAME.to_string(),
            description: "Give your final answer and end the task. Call this once, when the \
                          work is done, with arguments that match the parameters exactly; \
                          it is the only answer the user receives."
                .to_string(),
            parameters: self.parameters.clone().into(),
            freeform: None,
        }
    }

    /// The input ended with `stop` (and `error`): its output, and its error (a failed
    /// structured answer's, or `error`).
    pub(crate) fn finish(
        self,
        stop: StopReason,
        error: Option<Error>,
    ) -> (Option<Value>, Option<Error>) {
        match stop {
            StopReason::StructuredOutputFailed => (None, Some(self.failure())),
            _ => (self.value, error),
        }
    }

    /// Whether the retries are spent without a valid value.
    pub(crate) fn gave_up(&self) -> bool {
        self.value.is_none() && self.exhausted
    }

    /// After a tool round: a valid final answer ends the input, and so do retries spent
    /// on invalid ones.
    pub(crate) fn stop_after_round(&self) -> Option<StopReason> {
        if self.value.is_some() {
            Some(StopReason::Completed)
        } else if self.gave_up() {
            Some(StopReason::StructuredOutputFailed)
        } else {
            None
        }
    }

    /// Answers a `final_answer` call: `(text for the model, is_error)`.
    pub(crate) fn answer(&mut self, call: &ToolCall) -> (String, bool) {
        if self.value.is_some() {
            return ("The final answer was already given.".to_string(), false);
        }
        match schema::parse_arguments(TOOL_NAME, &call.arguments, &self.parameters) {
            Ok(mut arguments) => {
                let value = if self.wrapped {
                    arguments.remove("value").unwrap_or(Value::Null)
                } else {
                    Value::Object(arguments)
                };
                self.value = Some(value);
                ("Final answer recorded.".to_string(), false)
            }
            Err(message) => {
                match self.retries_left.checked_sub(1) {
                    Some(left) => self.retries_left = left,
                    None => self.exhausted = true,
                }
                let text = format!(
                    "{message}. Call {TOOL_NAME} again with a value that matches its parameters."
                );
                self.last_problem = Some(message);
                (text, true)
            }
        }
    }

    /// The model answered with `text` and no tool call.
    pub(crate) fn after_text(&mut self, text: &str) -> AfterText {
        if let Some(value) = json_in(text) {
            let problems = schema::validate(&value, &self.schema);
            if problems.is_empty() {
                self.value = Some(value);
                return AfterText::Done;
            }
            self.last_problem = Some(format!(
                "the answer was JSON, but not valid against the schema: {}",
                problems.join("; ")
            ));
        } else {
            self.last_problem = Some(format!(
                "the model answered with text instead of calling {TOOL_NAME}"
            ));
        }
        if self.retries_left == 0 {
            self.exhausted = true;
            return AfterText::GiveUp;
        }
        self.retries_left -= 1;
        AfterText::Remind(format!(
            "Your answer was not delivered: {}. The task ends only when you call the \
             {TOOL_NAME} tool with arguments that match its parameters. Call it now.",
            self.last_problem.as_deref().unwrap_or_default()
        ))
    }

    /// The error of an input that ended without a value.
    pub(crate) fn failure(&self) -> Error {
        let why = self
            .last_problem
            .as_deref()
            .unwrap_or("the input ended before the model gave its final answer");
        Error::new(
            ErrorKind::StructuredOutput,
            format!("no final answer valid against the output schema: {why}"),
        )
    }
}

/// The JSON value `text` holds: all of it, or the body of one fenced block.
fn json_in(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if let Ok(value) = serde_json::from_str(trimmed) {
        return Some(value);
    }
    let body = trimmed.strip_prefix("```")?.strip_suffix("```")?;
    let body = body.strip_prefix("json").unwrap_or(body);
    serde_json::from_str(body.trim()).ok()
}

/// The nesting depth of `value`, counted without recursion.
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((value, level)) = stack.pop() {
        deepest = deepest.max(level);
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, level + 1))),
            Value::Object(map) => stack.extend(map.values().map(|v| (v, level + 1))),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(arguments: Value) -> ToolCall {
        ToolCall::new("c1", TOOL_NAME, arguments)
    }

    #[test]
    fn a_schema_that_is_not_an_object_is_wrapped_and_unwrapped() {
        let schema = json!({"type": "array", "items": {"type": "integer"}});
        let mut structured = Structured::new(Arc::new(schema), 1).unwrap();
        assert_eq!(structured.tool().parameters.value()["required"][0], "value");
        let (text, is_error) = structured.answer(&call(json!({"value": [1, 2]})));
        assert_eq!((text.as_str(), is_error), ("Final answer recorded.", false));
        assert_eq!(structured.value, Some(json!([1, 2])));
    }

    #[test]
    fn an_invalid_call_gets_the_validators_message_and_spends_a_retry() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
                            "required": ["n"]});
        let mut structured = Structured::new(Arc::new(schema), 1).unwrap();
        let (text, is_error) = structured.answer(&call(json!({"n": "two"})));
        assert!(is_error);
        assert!(
            text.starts_with(
                "Invalid arguments for tool final_answer: \"n\" must be an integer, got \"two\""
            ),
            "{text}"
        );
        assert!(!structured.gave_up(), "one retry left");
        structured.answer(&call(json!({})));
        assert!(structured.gave_up());
        assert!(
            structured
                .failure()
                .to_string()
                .contains("\"n\" is required but missing")
        );
    }

    #[test]
    fn a_text_answer_that_is_a_valid_value_is_taken_and_others_are_reminded() {
        let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}},
                            "required": ["ok"]});
        let mut structured = Structured::new(Arc::new(schema), 1).unwrap();
        assert!(matches!(
            structured.after_text("done!"),
            AfterText::Remind(_)
        ));
        assert!(matches!(
            structured.after_text("still prose"),
            AfterText::GiveUp
        ));
        let mut again = Structured::new(structured.schema.clone(), 0).unwrap();
        assert!(matches!(
            again.after_text("```json\n{\"ok\": true}\n```"),
            AfterText::Done
        ));
        assert_eq!(again.value, Some(json!({"ok": true})));
    }

    #[test]
    fn schemas_that_are_not_objects_or_too_deep_are_refused() {
        assert!(Structured::new(Arc::new(json!("string")), 1).is_err());
        let mut deep = json!({"type": "integer"});
        for _ in 0..70 {
            deep = json!({"type": "array", "items": deep});
        }
        let err = Structured::new(Arc::new(deep), 1).err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Configuration);
    }
}
