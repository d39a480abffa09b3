//! Token accounting: the library's estimate of a request, turn or message, the budgets a
//! window gives, and a session's running count ([`TokenAccount`]).
//!
//! Arithmetic over values; nothing here sends, plans or blocks.

use super::CompactionConfig;
use crate::llm::{ContentPart, Message, Request, ToolDefinition, Usage};
use crate::session::history::Turn;

/// Estimated tokens per byte of text: one token for every four bytes.
pub(crate) const BYTES_PER_TOKEN: usize = 4;
/// Estimated tokens of framing per message (role, separators).
const MESSAGE_OVERHEAD: usize = 4;
/// Estimated tokens of an image.
const IMAGE_TOKENS: usize = 1_000;

/// The token budgets of one session, derived from its [`CompactionConfig`] and window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactionLimits {
    /// The model's context window.
    pub window: usize,
    /// `window − reserve`: a request above it is compacted first.
    pub threshold: usize,
    /// Tokens of recent turns kept verbatim.
    pub recent: usize,
    /// Tokens of user and steering messages kept verbatim.
    pub users: usize,
    /// Output limit of the summary request.
    pub summary_output: usize,
}

impl CompactionLimits {
    /// Budgets for `window` tokens with the default settings.
    pub fn for_window(window: usize) -> CompactionLimits {
        CompactionConfig::default().limits(window)
    }
}

/// The session's token count: the last request's reported input tokens plus an estimate
/// of everything appended since; the estimate of the whole request when no count was
/// reported (or the history was rewritten since).
///
/// The estimate is [`estimate_request_tokens`]: bytes of text / 4, plus 4 per message and
/// 1 000 per image. Updating it per turn costs a walk over that turn's parts.
#[derive(Debug, Clone, Default)]
pub struct TokenAccount {
    /// Estimated tokens of the system prompt and the tool definitions.
    fixed: usize,
    /// Estimated tokens of the whole history.
    history: usize,
    /// The provider's count for the last request, and the history estimate at that time.
    reported: Option<(usize, usize)>,
}

impl TokenAccount {
    /// An account for a history estimated at `history` tokens.
    pub fn new(history: usize) -> TokenAccount {
        TokenAccount {
            fixed: 0,
            history,
            reported: None,
        }
    }

    /// Sets the fixed part (system prompt and tools), estimated.
    pub fn set_fixed(&mut self, system_prompt: &str, tools: &[ToolDefinition]) {
        let tools: usize = tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.parameters.as_json().len())
            .sum();
        self.fixed = MESSAGE_OVERHEAD + (system_prompt.len() + tools) / BYTES_PER_TOKEN;
    }

    /// A turn was appended.
    pub fn push(&mut self, turn: &Turn) {
        self.history += estimate_turn_tokens(turn);
    }

    /// The history was replaced by one estimated at `history` tokens: the last report no
    /// longer applies.
    pub fn reset(&mut self, history: usize) {
        self.history = history;
        self.reported = None;
    }

    /// The provider reported `usage` for the request just sent (`provider` decides whether
    /// cache reads and writes are counted on top of `input_tokens`: Anthropic reports them
    /// apart, the OpenAI formats include cached tokens in `input_tokens`).
    pub fn report(&mut self, usage: &Usage, provider: &str, history_at_request: usize) {
        let mut tokens = usage.input_tokens as usize;
        if provider == "anthropic" {
            tokens += usage.cache_read_tokens.unwrap_or(0) as usize
                + usage.cache_write_tokens.unwrap_or(0) as usize;
        }
        self.reported = (tokens > 0).then_some((tokens, history_at_request));
    }

    /// Estimated tokens of the history alone.
    pub fn history_tokens(&self) -> usize {
        self.history
    }

    /// Tokens the next request holds: reported plus appended since, or the estimate.
    ///
    /// A report below half the estimate of the same request is not believed (no
    /// tokenizer packs four bytes of text into less than half a token; such a count comes
    /// from a proxy or a server that does not count): the estimate is used instead.
    pub fn tokens(&self) -> usize {
        let estimate = self.fixed + self.history;
        match self.reported {
            Some((reported, at)) if reported.saturating_mul(2) >= self.fixed + at => {
                reported + self.history.saturating_sub(at)
            }
            _ => estimate,
        }
    }

    /// Estimated tokens of the system prompt and tools.
    pub fn fixed_tokens(&self) -> usize {
        self.fixed
    }
}

/// The library's token estimate of a request: for every message 4 tokens plus a quarter
/// of the bytes of its text, tool calls (id, name, arguments as JSON), tool results (id,
/// name, content), thinking (text and signature), 1 000 per image; plus a quarter of the
/// bytes of the tool definitions (name, description, parameters as JSON). This is the
/// "size" the session keeps under `window − reserve`.
pub fn estimate_request_tokens(request: &Request) -> usize {
    let tools: usize = request
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.as_json().len())
        .sum();
    tools / BYTES_PER_TOKEN
        + request
            .messages
            .iter()
            .map(estimate_message_tokens)
            .sum::<usize>()
}

/// The estimate of one message (see [`estimate_request_tokens`]).
pub fn estimate_message_tokens(message: &Message) -> usize {
    MESSAGE_OVERHEAD + message.content.iter().map(part_tokens).sum::<usize>()
}

fn part_tokens(part: &ContentPart) -> usize {
    match part {
        ContentPart::Text { text, signature } => {
            (text.len() + signature.as_ref().map_or(0, String::len)) / BYTES_PER_TOKEN
        }
        ContentPart::Image(_) => IMAGE_TOKENS,
        ContentPart::ToolCall(call) => {
            (call.id.len() + call.name.len() + json_len(&call.arguments)) / BYTES_PER_TOKEN
        }
        ContentPart::ToolResult(result) => {
            let bytes = result.tool_call_id.len()
                + result.content.len()
                + result.name.as_ref().map_or(0, String::len);
            bytes / BYTES_PER_TOKEN + result.image.as_ref().map_or(0, |_| IMAGE_TOKENS)
        }
        ContentPart::Thinking(thinking) => {
            (thinking.text.len() + thinking.signature.as_ref().map_or(0, String::len))
                / BYTES_PER_TOKEN
        }
    }
}

/// The length of `value` as compact JSON, counted without building the text.
fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The estimate of the messages one turn becomes (see [`estimate_request_tokens`]).
pub fn estimate_turn_tokens(turn: &Turn) -> usize {
    let text = |s: &str| MESSAGE_OVERHEAD + s.len() / BYTES_PER_TOKEN;
    match turn {
        Turn::User(t) => text(&t.content),
        Turn::Steering(t) => text(&t.content),
        Turn::System(t) => text(&t.content),
        Turn::Summary(t) => text(&t.content),
        Turn::ToolResults(t) => t
            .results
            .iter()
            .map(|r| {
                let bytes =
                    r.tool_call_id.len() + r.content.len() + r.name.as_ref().map_or(0, String::len);
                MESSAGE_OVERHEAD
                    + bytes / BYTES_PER_TOKEN
                    + r.image.as_ref().map_or(0, |_| IMAGE_TOKENS)
            })
            .sum(),
        Turn::Assistant(t) => {
            if t.parts.is_empty() {
                MESSAGE_OVERHEAD
                    + t.content.len() / BYTES_PER_TOKEN
                    + t.tool_calls
                        .iter()
                        .map(|c| {
                            (c.id.len() + c.name.len() + json_len(&c.arguments)) / BYTES_PER_TOKEN
                        })
                        .sum::<usize>()
            } else {
                MESSAGE_OVERHEAD + t.parts.iter().map(part_tokens).sum::<usize>()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_len_is_the_length_of_the_compact_text() {
        for value in [
            serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}}),
            serde_json::json!("quote \" and newline \n and é"),
            serde_json::json!([1, 2.5, null, true, {"k": []}]),
        ] {
            assert_eq!(json_len(&value), value.to_string().len(), "{value}");
        }
    }
}
