//! Checking replayed requests against a recording: the [`ReplayMode`]s, and the first
//! difference of two JSON values.
//!
//! Used by the scripted model when it replays a session transcript. Pure: this module
//! never does I/O and knows nothing of sessions (the transcript side converts its records
//! into [`ReplayStep`]s).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::ScriptedTurn;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::{ContentPart, Message, Request};
use crate::sync::lock;

/// How a model replaying a recording treats the requests it receives.
///
/// A request that differs fails with an [`ErrorKind::InvalidRequest`] error naming the
/// first difference: its JSON path and both values, shortened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplayMode {
    /// Each request must equal the recorded one — system prompt, tool definitions,
    /// settings and every message — except for the prompt-cache key (the recording
    /// session's id) and the output text (and image) of tool results, which may differ: tool outputs carry timings and details of the machine
    /// (`duration: 16 ms`), and what the tools did is checked by their effects. Tool
    /// results must still answer the same calls, by the same tools, with the same error
    /// flag.
    Strict,
    /// Like `Strict`, and the tool outputs must be identical too: every request equals the
    /// recorded one exactly.
    Exact,
    /// Requests are not checked: the recorded answers are served in order whatever is
    /// asked.
    Loose,
}

/// The request a replayed answer was given to: `settings` holds every field of the
/// request and its leading (system) messages; the conversation after them is the
/// messages `history_start..history_messages` of the recording's history (a compaction
/// starts a new history further on).
pub(crate) struct ExpectedRequest {
    pub(crate) settings: Arc<Request>,
    pub(crate) history_start: usize,
    pub(crate) history_messages: usize,
}

impl ExpectedRequest {
    fn rebuild(&self, history: &[Message]) -> Request {
        let mut request = (*self.settings).clone();
        let end = self.history_messages.min(history.len());
        request
            .messages
            .extend_from_slice(&history[self.history_start.min(end)..end]);
        request
    }
}

/// One recorded model call: the request (if recorded) and the answer (if it got one).
pub(crate) struct ReplayStep {
    pub(crate) request: Option<ExpectedRequest>,
    pub(crate) answer: Option<ScriptedTurn>,
    /// How the recorded call failed, when it got no answer and the kind was recorded.
    pub(crate) failure: Option<ErrorKind>,
}

pub(crate) struct Replay {
    mode: ReplayMode,
    /// Every message of the recorded conversation, oldest first.
    history: Vec<Message>,
    /// The recorded request of each remaining step (`None`: not recorded).
    expected: Mutex<VecDeque<Option<ExpectedRequest>>>,
}

impl ReplayMode {
    fn name(self) -> &'static str {
        match self {
            ReplayMode::Strict => "strict",
            ReplayMode::Exact => "exact",
            ReplayMode::Loose => "loose",
        }
    }
}

impl Replay {
    pub(crate) fn new(
        mode: ReplayMode,
        history: Vec<Message>,
        expected: VecDeque<Option<ExpectedRequest>>,
    ) -> Replay {
        Replay {
            mode,
            history,
            expected: Mutex::new(expected),
        }
    }

    /// Checks `request` (the `number`-th, 1-based) against the next recorded one; `provider`
    /// names the model in errors.
    pub(crate) fn check(&self, request: &Request, number: usize, provider: &str) -> Result<()> {
        let expected = lock(&self.expected).pop_front();
        if self.mode == ReplayMode::Loose {
            return Ok(());
        }
        let expected = match expected {
            // More requests than recorded: `next_turn` reports that.
            None => return Ok(()),
            Some(None) => {
                return Err(Error::new(
                    ErrorKind::InvalidRequest,
                    format!(
                        "{} replay: the recording has no request for model call {number}; \
                         replay it in loose mode",
                        self.mode.name()
                    ),
                )
                .with_provider(provider));
            }
            Some(Some(expected)) => expected,
        };
        let mut recorded = expected.rebuild(&self.history);
        let mut received = request.clone();
        // The prompt-cache key is the recording session's id, and a replay is another
        // session: it names the cache, not what was asked.
        recorded.cache_key = None;
        received.cache_key = None;
        if self.mode == ReplayMode::Strict {
            without_tool_outputs(&mut recorded);
            without_tool_outputs(&mut received);
        }
        let (recorded, received) = match (
            serde_json::to_value(&recorded),
            serde_json::to_value(&received),
        ) {
            (Ok(a), Ok(b)) => (a, b),
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidRequest,
                    format!(
                        "{} replay: a request could not be compared as JSON",
                        self.mode.name()
                    ),
                )
                .with_provider(provider));
            }
        };
        match first_difference(&recorded, &received) {
            None => Ok(()),
            Some(difference) => Err(Error::new(
                ErrorKind::InvalidRequest,
                format!(
                    "{} replay: request {number} differs from the recording at {difference}",
                    self.mode.name()
                ),
            )
            .with_provider(provider)),
        }
    }
}

/// Blanks the output text and image of every tool result in `request`.
fn without_tool_outputs(request: &mut Request) {
    for part in request
        .messages
        .iter_mut()
        .flat_map(|m| m.content.iter_mut())
    {
        if let ContentPart::ToolResult(result) = part {
            result.content.clear();
            result.image = None;
        }
    }
}

/// Longest excerpt of a value shown in a difference.
const EXCERPT_CHARS: usize = 120;

/// The first place where `recorded` and `received` differ, as
/// `path: recorded <value>, received <value>` with both values shortened; `None` when equal.
///
/// Objects are walked in key order, arrays in index order; a missing value shows as
/// `(absent)`. For two strings the excerpts are taken around the first differing
/// character, whose position is given.
pub(crate) fn first_difference(recorded: &Value, received: &Value) -> Option<String> {
    let mut path = String::new();
    difference_at(recorded, received, &mut path)
}

/// The first difference among children, each named by what it adds to `path`.
fn child_difference<'a>(
    children: impl Iterator<Item = (String, Option<&'a Value>, Option<&'a Value>)>,
    path: &mut String,
) -> Option<String> {
    for (segment, x, y) in children {
        let len = path.len();
        path.push_str(&segment);
        let found = match (x, y) {
            (Some(x), Some(y)) => difference_at(x, y, path),
            (x, y) => Some(describe(path, x, y)),
        };
        if found.is_some() {
            return found;
        }
        path.truncate(len);
    }
    None
}

fn difference_at(recorded: &Value, received: &Value, path: &mut String) -> Option<String> {
    match (recorded, received) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            let dot = if path.is_empty() { "" } else { "." };
            let children = keys
                .into_iter()
                .map(|key| (format!("{dot}{key}"), a.get(key), b.get(key)));
            child_difference(children, path)
        }
        (Value::Array(a), Value::Array(b)) => {
            let children = (0..a.len().max(b.len()))
                .map(|index| (format!("[{index}]"), a.get(index), b.get(index)));
            child_difference(children, path)
        }
        (Value::String(a), Value::String(b)) if a != b => {
            let at = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
            Some(format!(
                "{} (character {at}): recorded {}, received {}",
                shown_path(path),
                string_excerpt(a, at),
                string_excerpt(b, at)
            ))
        }
        (a, b) if a != b => Some(describe(path, Some(a), Some(b))),
        _ => None,
    }
}

fn shown_path(path: &str) -> &str {
    if path.is_empty() {
        "the top level"
    } else {
        path
    }
}

fn describe(path: &str, recorded: Option<&Value>, received: Option<&Value>) -> String {
    let show = |value: Option<&Value>| match value {
        None => "(absent)".to_string(),
        Some(value) => shorten(&value.to_string()),
    };
    format!(
        "{}: recorded {}, received {}",
        shown_path(path),
        show(recorded),
        show(received)
    )
}

/// `text` as a JSON string literal around character `at`, shortened with `…`.
fn string_excerpt(text: &str, at: usize) -> String {
    let start = at.saturating_sub(EXCERPT_CHARS / 3);
    let excerpt: String = text.chars().skip(start).take(EXCERPT_CHARS).collect();
    let quoted = Value::String(excerpt.clone()).to_string();
    let before = if start > 0 { "…" } else { "" };
    let after = if text.chars().count() > start + excerpt.chars().count() {
        "…"
    } else {
        ""
    };
    format!("{before}{quoted}{after}")
}

/// The first `EXCERPT_CHARS` characters of `text`, with `…` where cut.
fn shorten(text: &str) -> String {
    let mut out: String = text.chars().take(EXCERPT_CHARS).collect();
    if text.chars().count() > EXCERPT_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn first_difference_names_the_path_and_both_values() {
        let a = json!({"messages": [{"text": "same"}, {"text": "old prompt"}], "model": "m"});
        let b = json!({"messages": [{"text": "same"}, {"text": "new prompt"}], "model": "x"});
        assert_eq!(
            first_difference(&a, &b).unwrap(),
            r#"messages[1].text (character 0): recorded "old prompt", received "new prompt""#
        );
        assert_eq!(first_difference(&a, &a), None);
        let shorter = json!({"messages": [{"text": "same"}], "model": "m"});
        assert_eq!(
            first_difference(&a, &shorter).unwrap(),
            r#"messages[1]: recorded {"text":"old prompt"}, received (absent)"#
        );
        assert_eq!(
            first_difference(&json!({"n": 1}), &json!({"n": 2})).unwrap(),
            "n: recorded 1, received 2"
        );
    }

    #[test]
    fn first_difference_shows_long_strings_around_the_change() {
        let long = "x".repeat(1000);
        let a = json!(format!("{long}AAA{long}"));
        let b = json!(format!("{long}BBB{long}"));
        let text = first_difference(&a, &b).unwrap();
        assert!(
            text.starts_with("the top level (character 1000): recorded …\""),
            "{text}"
        );
        assert!(text.contains("AAA") && text.contains("BBB"), "{text}");
        assert!(text.len() < 400, "shortened: {}", text.len());
    }
}
