//! The conversation history: turns with timestamps, and their conversion to messages.
//!
//! A [`History`] is the ordered list of [`Turn`]s of a session (spec §2.4). It converts to
//! the [`Message`]s of a request deterministically — the same turns always give the same
//! messages, so the request prefix stays cacheable — and keeps the session's invariant
//! checkable: every tool call of an assistant turn is answered by exactly one result in the
//! tool-results turn right after it ([`History::check_tool_results`]). The serde form is a
//! public format (transcripts). This module never talks to a provider.

use std::collections::HashMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::llm::{ContentPart, FinishReason, Message, Role, ToolCall, ToolResult, Usage};

/// Input from the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserTurn {
    /// The input text.
    pub content: String,
    /// When it was added.
    #[serde(with = "crate::time::rfc3339")]
    pub timestamp: SystemTime,
}

/// One model response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantTurn {
    /// The answer text.
    pub content: String,
    /// The tool calls the model asked for, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The reasoning text, if the provider returned any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Token counts of this response.
    #[serde(default)]
    pub usage: Usage,
    /// The provider's response id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// Why the model stopped.
    #[serde(default)]
    pub finish_reason: FinishReason,
    /// The response's parts exactly as the provider sent them (thinking with signatures,
    /// reasoning items, thought signatures), replayed unchanged on later requests. Empty
    /// for a turn built by hand: the message is then made from `content` and `tool_calls`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<ContentPart>,
    /// When it was added.
    #[serde(with = "crate::time::rfc3339")]
    pub timestamp: SystemTime,
}

/// The results of one round of tool calls, in call order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultsTurn {
    /// One result per call.
    pub results: Vec<ToolResult>,
    /// When it was added.
    #[serde(with = "crate::time::rfc3339")]
    pub timestamp: SystemTime,
}

/// A system message inside the conversation (sent with the system role; providers lift
/// it into their system instructions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemTurn {
    /// The text.
    pub content: String,
    /// When it was added.
    #[serde(with = "crate::time::rfc3339")]
    pub timestamp: SystemTime,
}

/// A message injected while the agent works: a host's `steer()`, or a loop-detection
/// warning. Sent to the model as a user message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteeringTurn {
    /// The text.
    pub content: String,
    /// When it was added.
    #[serde(with = "crate::time::rfc3339")]
    pub timestamp: SystemTime,
}

/// The summary that replaced earlier turns when the history was compacted (see
/// [`compaction`](super::compaction)). Sent to the model as a user message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryTurn {
    /// The text the model gets: a plain preamble, then the summary.
    pub content: String,
    /// How many turns it replaced (over every compaction so far).
    pub turns_summarised: usize,
    /// When it was added.
    #[serde(with = "crate::time::rfc3339")]
    pub timestamp: SystemTime,
}

/// One entry of the history. JSON: `{"type":"assistant", …fields}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
// An assistant turn is the size of a response's metadata (usage, finish reason, ids):
// boxing it would change the variant hosts match on, to save bytes in a history that is
// not hot.
#[allow(clippy::large_enum_variant)]
pub enum Turn {
    /// Host input.
    User(UserTurn),
    /// A model response.
    Assistant(AssistantTurn),
    /// Tool results.
    ToolResults(ToolResultsTurn),
    /// A system message.
    System(SystemTurn),
    /// A steering message.
    Steering(SteeringTurn),
    /// The summary of compacted turns.
    Summary(SummaryTurn),
}

impl Turn {
    /// A user turn stamped now.
    pub fn user(content: impl Into<String>) -> Turn {
        Turn::User(UserTurn {
            content: content.into(),
            timestamp: SystemTime::now(),
        })
    }

    /// A steering turn stamped now.
    pub fn steering(content: impl Into<String>) -> Turn {
        Turn::Steering(SteeringTurn {
            content: content.into(),
            timestamp: SystemTime::now(),
        })
    }

    /// A tool-results turn stamped now.
    pub fn tool_results(results: Vec<ToolResult>) -> Turn {
        Turn::ToolResults(ToolResultsTurn {
            results,
            timestamp: SystemTime::now(),
        })
    }

    /// When the turn was added.
    pub fn timestamp(&self) -> SystemTime {
        match self {
            Turn::User(t) => t.timestamp,
            Turn::Assistant(t) => t.timestamp,
            Turn::ToolResults(t) => t.timestamp,
            Turn::System(t) => t.timestamp,
            Turn::Steering(t) => t.timestamp,
            Turn::Summary(t) => t.timestamp,
        }
    }

    /// Approximate size in characters (bytes of text), for the context-usage estimate.
    pub fn approx_chars(&self) -> usize {
        match self {
            Turn::User(t) => t.content.len(),
            Turn::System(t) => t.content.len(),
            Turn::Steering(t) => t.content.len(),
            Turn::Summary(t) => t.content.len(),
            Turn::ToolResults(t) => t.results.iter().map(|r| r.content.len()).sum(),
            Turn::Assistant(t) => {
                t.content.len()
                    + t.reasoning.as_ref().map_or(0, String::len)
                    + t.tool_calls
                        .iter()
                        .map(|c| c.name.len() + json_len(&c.arguments))
                        .sum::<usize>()
            }
        }
    }

    /// Appends this turn's messages to `out`.
    fn push_messages(&self, out: &mut Vec<Message>) {
        match self {
            Turn::User(t) => out.push(Message::user(t.content.clone())),
            Turn::Steering(t) => out.push(Message::user(t.content.clone())),
            Turn::Summary(t) => out.push(Message::user(t.content.clone())),
            Turn::System(t) => out.push(Message::system(t.content.clone())),
            Turn::ToolResults(t) => {
                out.extend(t.results.iter().cloned().map(Message::tool_result));
            }
            Turn::Assistant(t) => {
                let content = if t.parts.is_empty() {
                    let mut parts = Vec::with_capacity(1 + t.tool_calls.len());
                    if !t.content.is_empty() {
                        parts.push(ContentPart::text(t.content.clone()));
                    }
                    parts.extend(t.tool_calls.iter().cloned().map(ContentPart::ToolCall));
                    parts
                } else {
                    t.parts.clone()
                };
                out.push(Message {
                    role: Role::Assistant,
                    content,
                    name: None,
                    tool_call_id: None,
                });
            }
        }
    }
}

fn json_len(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::String(s) => s.len(),
        other => other.to_string().len(),
    }
}

/// The ordered turns of a session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct History {
    turns: Vec<Turn>,
}

impl History {
    /// An empty history.
    pub fn new() -> History {
        History::default()
    }

    /// A history of these turns.
    pub fn from_turns(turns: Vec<Turn>) -> History {
        History { turns }
    }

    /// The turns, oldest first.
    pub fn turns(&self) -> &[Turn] {
        &self.turns
    }

    /// Appends a turn.
    pub fn push(&mut self, turn: Turn) {
        self.turns.push(turn);
    }

    /// Number of turns.
    pub fn len(&self) -> usize {
        self.turns.len()
    }

    /// Whether there are no turns.
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// Number of model responses (assistant turns): what `max_turns` counts.
    pub fn assistant_turns(&self) -> usize {
        self.turns
            .iter()
            .filter(|t| matches!(t, Turn::Assistant(_)))
            .count()
    }

    /// Approximate size of every turn in characters.
    pub fn approx_chars(&self) -> usize {
        self.turns.iter().map(Turn::approx_chars).sum()
    }

    /// The messages of a request, in order (without the system prompt).
    pub fn to_messages(&self) -> Vec<Message> {
        let mut out = Vec::with_capacity(self.turns.len() + 4);
        for turn in &self.turns {
            turn.push_messages(&mut out);
        }
        out
    }

    /// The messages of every turn, and for each turn the number of messages before it
    /// (so the messages of the first `n` turns are `messages[..offsets[n]]`; `offsets` has
    /// one entry more than there are turns).
    pub(crate) fn messages_with_offsets(&self) -> (Vec<Message>, Vec<usize>) {
        let mut messages = Vec::with_capacity(self.turns.len() + 4);
        let mut offsets = Vec::with_capacity(self.turns.len() + 1);
        for turn in &self.turns {
            offsets.push(messages.len());
            turn.push_messages(&mut messages);
        }
        offsets.push(messages.len());
        (messages, offsets)
    }

    /// Calls of the last assistant turn that no tool-results turn answers yet, in order.
    pub(crate) fn unanswered_calls(&self) -> Vec<ToolCall> {
        let Some(index) = self
            .turns
            .iter()
            .rposition(|t| matches!(t, Turn::Assistant(_)))
        else {
            return Vec::new();
        };
        let Turn::Assistant(assistant) = &self.turns[index] else {
            return Vec::new();
        };
        let answered: Vec<&str> = self.turns[index + 1..]
            .iter()
            .filter_map(|t| match t {
                Turn::ToolResults(r) => Some(r),
                _ => None,
            })
            .flat_map(|r| r.results.iter().map(|r| r.tool_call_id.as_str()))
            .collect();
        assistant
            .tool_calls
            .iter()
            .filter(|c| !answered.contains(&c.id.as_str()))
            .cloned()
            .collect()
    }

    /// Checks the session invariant: each assistant turn with tool calls is followed
    /// directly by one tool-results turn holding exactly one result per call (no missing,
    /// duplicate or foreign results), and no tool-results turn stands anywhere else.
    ///
    /// The `Err` says which call or result breaks it.
    pub fn check_tool_results(&self) -> Result<(), String> {
        let mut index = 0;
        while index < self.turns.len() {
            match &self.turns[index] {
                Turn::Assistant(assistant) if !assistant.tool_calls.is_empty() => {
                    let Some(Turn::ToolResults(results)) = self.turns.get(index + 1) else {
                        return Err(format!(
                            "turn {index}: the tool calls are not followed by a tool-results turn"
                        ));
                    };
                    let mut counts: HashMap<&str, usize> = HashMap::new();
                    for call in &assistant.tool_calls {
                        if counts.insert(call.id.as_str(), 0).is_some() {
                            return Err(format!("turn {index}: duplicate call id `{}`", call.id));
                        }
                    }
                    for result in &results.results {
                        match counts.get_mut(result.tool_call_id.as_str()) {
                            Some(n) => *n += 1,
                            None => {
                                return Err(format!(
                                    "turn {}: result for unknown call `{}`",
                                    index + 1,
                                    result.tool_call_id
                                ));
                            }
                        }
                    }
                    for call in &assistant.tool_calls {
                        let n = counts[call.id.as_str()];
                        if n != 1 {
                            return Err(format!(
                                "turn {index}: call `{}` has {n} results",
                                call.id
                            ));
                        }
                    }
                    index += 2;
                }
                Turn::ToolResults(_) => {
                    return Err(format!(
                        "turn {index}: a tool-results turn without a preceding tool call"
                    ));
                }
                _ => index += 1,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assistant(calls: Vec<ToolCall>) -> Turn {
        Turn::Assistant(AssistantTurn {
            content: "ok".into(),
            tool_calls: calls,
            reasoning: None,
            usage: Usage::default(),
            response_id: None,
            finish_reason: FinishReason::default(),
            parts: Vec::new(),
            timestamp: SystemTime::UNIX_EPOCH,
        })
    }

    #[test]
    fn invariant_accepts_answered_calls_and_rejects_gaps() {
        let a = ToolCall::new("a", "t", json!({}));
        let b = ToolCall::new("b", "t", json!({}));
        let ok = History::from_turns(vec![
            Turn::user("hi"),
            assistant(vec![a.clone(), b.clone()]),
            Turn::tool_results(vec![
                ToolResult::for_call(&a, "1", false),
                ToolResult::for_call(&b, "2", false),
            ]),
            assistant(vec![]),
        ]);
        assert_eq!(ok.check_tool_results(), Ok(()));
        assert!(ok.unanswered_calls().is_empty());

        let missing = History::from_turns(vec![
            assistant(vec![a.clone(), b.clone()]),
            Turn::tool_results(vec![ToolResult::for_call(&a, "1", false)]),
        ]);
        assert!(missing.check_tool_results().is_err());
        assert_eq!(missing.unanswered_calls(), vec![b.clone()]);

        let doubled = History::from_turns(vec![
            assistant(vec![a.clone()]),
            Turn::tool_results(vec![
                ToolResult::for_call(&a, "1", false),
                ToolResult::for_call(&a, "1", false),
            ]),
        ]);
        assert!(doubled.check_tool_results().is_err());
        let dangling = History::from_turns(vec![assistant(vec![a])]);
        assert!(dangling.check_tool_results().is_err());
    }

    #[test]
    fn steering_becomes_a_user_message_and_history_round_trips() {
        let history = History::from_turns(vec![Turn::user("a"), Turn::steering("b")]);
        let messages = history.to_messages();
        assert_eq!(messages.len(), 2);
        assert!(messages.iter().all(|m| m.role == Role::User));
        assert_eq!(messages[1].text(), "b");
        let json = serde_json::to_string(&history).unwrap();
        assert!(json.contains(r#""type":"steering""#), "{json}");
        let back: History = serde_json::from_str(&json).unwrap();
        // Timestamps round-trip to the millisecond.
        assert_eq!(back.len(), 2);
        assert_eq!(back.to_messages(), messages);
    }
}
