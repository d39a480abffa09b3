//! A scripted offline model: a [`Provider`] that answers from a list of prepared turns.
//!
//! Used by the offline demo, by tests of the session loop, and by hosts that test their own
//! code built on the library. Each request takes the next [`ScriptedTurn`] (or asks a
//! closure for one) and streams it as the same [`StreamEvent`]s an HTTP provider produces:
//! reasoning, text in a few deltas, tool calls, then `Finish` with the accumulated
//! [`Response`]. Every request is recorded for assertions ([`ScriptedModel::requests`]).
//!
//! It honours the [`CancelToken`]: a delayed or stalled turn returns an
//! [`ErrorKind::Aborted`] error as soon as the token fires. It never touches the network,
//! never spawns a thread and never sleeps except in `CancelToken::wait_timeout`.
//!
//! A model built from a session transcript (`ScriptedModel::from_transcript`, in
//! [`session::transcript`](crate::session::transcript)) replays the recorded answers in
//! order; in [`ReplayMode::Strict`] and [`ReplayMode::Exact`] it also checks that each
//! request it receives equals the recorded one and fails with the first difference.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

mod replay;

use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::client::Provider;
use crate::llm::{
    ContentPart, FinishKind, FinishReason, Message, Request, Response, Role, StreamEvent,
    ThinkingData, ToolCall, Usage,
};
use crate::sync::lock;
use replay::Replay;
pub use replay::ReplayMode;
pub(crate) use replay::{ExpectedRequest, ReplayStep};

/// How a scripted turn misbehaves, if it does.
enum Failure {
    /// `open` fails with this error (like an HTTP error status).
    Open(Error),
    /// The stream yields the parts, then this error (like a mid-stream hang-up).
    MidStream(Error),
    /// The stream yields the parts, then blocks until cancelled.
    Stall,
}

/// One prepared response of a [`ScriptedModel`].
///
/// ```
/// use agentloop::llm::scripted::ScriptedTurn;
/// use agentloop::serde_json::json;
///
/// let first = ScriptedTurn::tool_call("read_file", json!({"file_path": "a.txt"}));
/// let parallel = ScriptedTurn::text("Reading both.")
///     .with_tool_call("read_file", json!({"file_path": "a.txt"}))
///     .with_tool_call("read_file", json!({"file_path": "b.txt"}));
/// let last = ScriptedTurn::text("Done.").with_reasoning("Both files are fine.");
/// # let _ = (first, parallel, last);
/// ```
pub struct ScriptedTurn {
    parts: Vec<ContentPart>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    delay: Duration,
    failure: Option<Failure>,
}

impl fmt::Debug for ScriptedTurn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failure = match &self.failure {
            None => "none".to_string(),
            Some(Failure::Open(e)) => format!("open error: {e}"),
            Some(Failure::MidStream(e)) => format!("mid-stream error: {e}"),
            Some(Failure::Stall) => "stall".to_string(),
        };
        f.debug_struct("ScriptedTurn")
            .field("parts", &self.parts)
            .field("finish", &self.finish)
            .field("usage", &self.usage)
            .field("delay", &self.delay)
            .field("failure", &failure)
            .finish()
    }
}

impl ScriptedTurn {
    fn empty() -> ScriptedTurn {
        ScriptedTurn {
            parts: Vec::new(),
            finish: None,
            usage: None,
            delay: Duration::ZERO,
            failure: None,
        }
    }

    /// A text-only answer, streamed as a few deltas.
    pub fn text(text: impl Into<String>) -> ScriptedTurn {
        ScriptedTurn::empty().with_text(text)
    }

    /// An answer with one tool call and no text. The call id is assigned by the model
    /// (`call_1`, `call_2`, … in the order calls are streamed).
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> ScriptedTurn {
        ScriptedTurn::empty().with_tool_call(name, arguments)
    }

    /// An answer made of exactly these parts, in order (for replaying a recorded message;
    /// tool calls keep their ids).
    pub fn from_parts(parts: Vec<ContentPart>) -> ScriptedTurn {
        ScriptedTurn {
            parts,
            ..ScriptedTurn::empty()
        }
    }

    /// A request that fails before any event, with `error` (like an HTTP error status).
    pub fn error(error: Error) -> ScriptedTurn {
        ScriptedTurn {
            failure: Some(Failure::Open(error)),
            ..ScriptedTurn::empty()
        }
    }

    /// A response that starts and then sends nothing more until the request is cancelled.
    pub fn stall() -> ScriptedTurn {
        ScriptedTurn::empty().then_stall()
    }

    /// Appends a text part.
    pub fn with_text(mut self, text: impl Into<String>) -> ScriptedTurn {
        self.parts.push(ContentPart::text(text));
        self
    }

    /// Appends a tool call with a model-assigned id.
    pub fn with_tool_call(mut self, name: impl Into<String>, arguments: Value) -> ScriptedTurn {
        self.parts
            .push(ContentPart::ToolCall(ToolCall::new("", name, arguments)));
        self
    }

    /// Adds reasoning (a thinking part with a signature) before everything else.
    pub fn with_reasoning(mut self, text: impl Into<String>) -> ScriptedTurn {
        let thinking = ThinkingData {
            text: text.into(),
            signature: Some("scripted-signature".to_string()),
            redacted: false,
            id: None,
        };
        self.parts.insert(0, ContentPart::Thinking(thinking));
        self
    }

    /// Sets the finish reason (by default `tool_calls` when there are calls, `stop`
    /// otherwise).
    pub fn with_finish(mut self, finish: FinishReason) -> ScriptedTurn {
        self.finish = Some(finish);
        self
    }

    /// Sets the usage (by default about one token per four characters of request and
    /// answer).
    pub fn with_usage(mut self, usage: Usage) -> ScriptedTurn {
        self.usage = Some(usage);
        self
    }

    /// Waits `delay` before each streamed event (cancellable).
    pub fn with_delay(mut self, delay: Duration) -> ScriptedTurn {
        self.delay = delay;
        self
    }

    /// After the parts have streamed, blocks until the request is cancelled instead of
    /// finishing.
    pub fn then_stall(mut self) -> ScriptedTurn {
        self.failure = Some(Failure::Stall);
        self
    }

    /// After the parts have streamed, fails with `error` instead of finishing.
    pub fn then_fail(mut self, error: Error) -> ScriptedTurn {
        self.failure = Some(Failure::MidStream(error));
        self
    }
}

type Dynamic = dyn Fn(&Request) -> ScriptedTurn + Send + Sync;

struct Inner {
    turns: Mutex<VecDeque<ScriptedTurn>>,
    dynamic: Option<Arc<Dynamic>>,
    requests: Mutex<Vec<Request>>,
    next_call: AtomicU64,
    replay: Option<Replay>,
}

/// A [`Provider`] that answers from prepared [`ScriptedTurn`]s. Clones share the script and
/// the recorded requests, so a test can keep one clone and give another to the
/// [`Client`](crate::llm::Client).
///
/// ```
/// use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
/// use agentloop::llm::{Client, Message, Request};
///
/// let model = ScriptedModel::new(vec![ScriptedTurn::text("Hello!")]);
/// let client = Client::new().with_provider(model.clone());
/// let response = client.complete(&Request::new("m", vec![Message::user("hi")])).unwrap();
/// assert_eq!(response.text(), "Hello!");
/// assert_eq!(model.requests().len(), 1);
/// ```
#[derive(Clone)]
pub struct ScriptedModel {
    inner: Arc<Inner>,
    /// The provider id it answers under (its script's own, or an alias's).
    id: Arc<str>,
}

impl fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("id", &self.id)
            .field("remaining_turns", &lock(&self.inner.turns).len())
            .field("dynamic", &self.inner.dynamic.is_some())
            .field("requests", &lock(&self.inner.requests).len())
            .finish()
    }
}

impl ScriptedModel {
    /// A model with provider id `"scripted"` that answers with `turns`, in order. A request
    /// after the last turn fails with a configuration error.
    pub fn new(turns: Vec<ScriptedTurn>) -> ScriptedModel {
        ScriptedModel::build("scripted", turns, None)
    }

    /// A model that asks `script` for each answer, seeing the request.
    pub fn dynamic(script: impl Fn(&Request) -> ScriptedTurn + Send + Sync + 'static) -> Self {
        ScriptedModel::build("scripted", Vec::new(), Some(Arc::new(script)))
    }

    fn build(id: &str, turns: Vec<ScriptedTurn>, dynamic: Option<Arc<Dynamic>>) -> Self {
        ScriptedModel {
            id: Arc::from(id),
            inner: Arc::new(Inner {
                turns: Mutex::new(turns.into()),
                dynamic,
                requests: Mutex::new(Vec::new()),
                next_call: AtomicU64::new(1),
                replay: None,
            }),
        }
    }

    /// A model that replays `steps` under provider id `id`. A step without an answer (the
    /// recorded call failed or was cut short) is answered with a server error.
    pub(crate) fn replay(
        id: &str,
        steps: Vec<ReplayStep>,
        history: Vec<Message>,
        mode: ReplayMode,
    ) -> ScriptedModel {
        let mut turns = VecDeque::with_capacity(steps.len());
        let mut expected = VecDeque::with_capacity(steps.len());
        for (index, step) in steps.into_iter().enumerate() {
            let failure = step.failure.unwrap_or(ErrorKind::Server);
            turns.push_back(step.answer.unwrap_or_else(|| {
                // Final: the recorded call already spent its retries.
                ScriptedTurn::error(
                    Error::new(
                        failure,
                        format!(
                            "the recorded model call {} got no answer (it failed or was \
                             cut short when it was recorded)",
                            index + 1
                        ),
                    )
                    .with_provider(id)
                    .marked_final(),
                )
            }));
            expected.push_back(step.request);
        }
        ScriptedModel {
            id: Arc::from(id),
            inner: Arc::new(Inner {
                turns: Mutex::new(turns),
                dynamic: None,
                requests: Mutex::new(Vec::new()),
                next_call: AtomicU64::new(1),
                replay: Some(Replay::new(mode, history, expected)),
            }),
        }
    }

    /// The same script under another provider id (for a profile that names `id`). Call it
    /// before cloning the model: the returned model takes the remaining turns and starts
    /// with no recorded requests.
    pub fn with_id(self, id: impl Into<String>) -> ScriptedModel {
        let turns = std::mem::take(&mut *lock(&self.inner.turns));
        ScriptedModel::build(&id.into(), turns.into(), self.inner.dynamic.clone())
    }

    /// The same model answering under another provider id as well: the clone shares the
    /// script, the replay and the recorded requests (so a replay of a session that fell
    /// back from one provider to another is served by one script, in order). Register
    /// both with the client.
    pub fn alias(&self, id: impl Into<String>) -> ScriptedModel {
        ScriptedModel {
            inner: self.inner.clone(),
            id: Arc::from(id.into()),
        }
    }

    /// Appends a turn to the script.
    pub fn push(&self, turn: ScriptedTurn) {
        lock(&self.inner.turns).push_back(turn);
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.inner.requests).clone()
    }

    /// How many requests were received so far.
    pub fn request_count(&self) -> usize {
        lock(&self.inner.requests).len()
    }

    /// How many prepared turns are still unused.
    pub fn remaining_turns(&self) -> usize {
        lock(&self.inner.turns).len()
    }

    fn next_turn(&self, request: &Request) -> Result<ScriptedTurn> {
        if let Some(turn) = lock(&self.inner.turns).pop_front() {
            return Ok(turn);
        }
        match &self.inner.dynamic {
            Some(script) => Ok(script(request)),
            None => Err(Error::new(
                ErrorKind::Configuration,
                "the scripted model has no more turns",
            )
            .with_provider(self.id.to_string())),
        }
    }
}

impl Provider for ScriptedModel {
    fn id(&self) -> &str {
        &self.id
    }

    fn open(
        &self,
        request: &Request,
        cancel: &CancelToken,
    ) -> Result<Box<dyn Iterator<Item = Result<StreamEvent>> + Send>> {
        let number = {
            let mut requests = lock(&self.inner.requests);
            requests.push(request.clone());
            requests.len()
        };
        if cancel.is_cancelled() {
            return Err(aborted(&self.id));
        }
        let checked = match &self.inner.replay {
            Some(replay) => replay.check(request, number, &self.id),
            None => Ok(()),
        };
        let mut turn = self.next_turn(request)?;
        checked?;
        if let Some(Failure::Open(_)) = &turn.failure {
            let Some(Failure::Open(error)) = turn.failure.take() else {
                unreachable!("matched just above")
            };
            return Err(error);
        }
        for part in &mut turn.parts {
            if let ContentPart::ToolCall(call) = part {
                if call.id.is_empty() {
                    let n = self.inner.next_call.fetch_add(1, Ordering::Relaxed);
                    call.id = format!("call_{n}");
                }
            }
        }
        let request_chars: usize = request
            .messages
            .iter()
            .flat_map(|m| &m.content)
            .map(part_chars)
            .sum();
        let events = plan(&self.id, &request.model, turn, request_chars);
        Ok(Box::new(ScriptedStream {
            provider: self.id.to_string(),
            events: events.events.into(),
            delay: events.delay,
            failure: events.failure,
            cancel: cancel.clone(),
            done: false,
        }))
    }
}

fn aborted(provider: &str) -> Error {
    Error::new(ErrorKind::Aborted, "the request was cancelled").with_provider(provider)
}

fn part_chars(part: &ContentPart) -> usize {
    match part {
        ContentPart::Text { text, .. } => text.len(),
        ContentPart::ToolCall(call) => call.name.len() + call.arguments_text().len(),
        ContentPart::ToolResult(result) => result.content.len(),
        ContentPart::Thinking(thinking) => thinking.text.len(),
        _ => 0,
    }
}

struct Plan {
    events: Vec<StreamEvent>,
    delay: Duration,
    failure: Option<Failure>,
}

/// Turns a scripted answer into the events a streaming provider would send.
fn plan(provider: &str, model: &str, turn: ScriptedTurn, request_chars: usize) -> Plan {
    let ScriptedTurn {
        parts,
        finish,
        usage,
        delay,
        failure,
    } = turn;
    let mut events = vec![StreamEvent::StreamStart {
        id: Some("scripted-response".to_string()),
        model: Some(model.to_string()),
    }];
    for (index, part) in parts.iter().enumerate() {
        match part {
            ContentPart::Text { text, .. } => {
                let text_id = format!("text_{index}");
                events.push(StreamEvent::TextStart {
                    text_id: text_id.clone(),
                });
                for delta in split_in_three(text) {
                    events.push(StreamEvent::TextDelta {
                        text_id: text_id.clone(),
                        delta: delta.to_string(),
                    });
                }
                events.push(StreamEvent::TextEnd { text_id });
            }
            ContentPart::Thinking(thinking) => {
                events.push(StreamEvent::ReasoningStart);
                if !thinking.text.is_empty() {
                    events.push(StreamEvent::ReasoningDelta {
                        delta: thinking.text.clone(),
                    });
                }
                events.push(StreamEvent::ReasoningEnd);
            }
            ContentPart::ToolCall(call) => {
                events.push(StreamEvent::ToolCallStart {
                    id: call.id.clone(),
                    name: call.name.clone(),
                });
                events.push(StreamEvent::ToolCallDelta {
                    id: call.id.clone(),
                    delta: call.arguments_text(),
                });
                events.push(StreamEvent::ToolCallEnd {
                    tool_call: call.clone(),
                });
            }
            _ => {}
        }
    }
    let has_calls = parts.iter().any(|p| matches!(p, ContentPart::ToolCall(_)));
    let finish_reason = finish.unwrap_or_else(|| {
        if has_calls {
            FinishReason::new(FinishKind::ToolCalls, Some("tool_calls".to_string()))
        } else {
            FinishReason::new(FinishKind::Stop, Some("stop".to_string()))
        }
    });
    let usage = usage.unwrap_or_else(|| {
        let input_tokens = (request_chars / 4) as u64;
        let output_tokens = (parts.iter().map(part_chars).sum::<usize>() / 4) as u64;
        Usage {
            input_tokens,
            output_tokens,
            total_tokens: input_tokens + output_tokens,
            ..Usage::default()
        }
    });
    let response = Response {
        id: "scripted-response".to_string(),
        model: model.to_string(),
        provider: provider.to_string(),
        message: Message {
            role: Role::Assistant,
            content: parts,
            name: None,
            tool_call_id: None,
        },
        finish_reason: finish_reason.clone(),
        usage,
        warnings: Vec::new(),
        refusal: None,
    };
    if failure.is_none() {
        events.push(StreamEvent::Finish {
            finish_reason,
            usage,
            response: Box::new(response),
        });
    }
    Plan {
        events,
        delay,
        failure,
    }
}

/// Splits `text` into up to three pieces on character boundaries.
fn split_in_three(text: &str) -> Vec<&str> {
    let len = text.len();
    if len < 3 {
        return if text.is_empty() { vec![] } else { vec![text] };
    }
    let mut cuts = vec![0];
    for third in [len / 3, 2 * len / 3] {
        let mut cut = third;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        if cut > *cuts.last().unwrap_or(&0) && cut < len {
            cuts.push(cut);
        }
    }
    cuts.push(len);
    cuts.windows(2).map(|w| &text[w[0]..w[1]]).collect()
}

struct ScriptedStream {
    provider: String,
    events: VecDeque<StreamEvent>,
    delay: Duration,
    failure: Option<Failure>,
    cancel: CancelToken,
    done: bool,
}

impl Iterator for ScriptedStream {
    type Item = Result<StreamEvent>;

    fn next(&mut self) -> Option<Result<StreamEvent>> {
        if self.done {
            return None;
        }
        let cancelled = if self.delay.is_zero() {
            self.cancel.is_cancelled()
        } else {
            self.cancel.wait_timeout(self.delay)
        };
        if cancelled {
            self.done = true;
            return Some(Err(aborted(&self.provider)));
        }
        if let Some(event) = self.events.pop_front() {
            return Some(Ok(event));
        }
        self.done = true;
        match self.failure.take() {
            None | Some(Failure::Open(_)) => None,
            Some(Failure::MidStream(error)) => Some(Err(error)),
            Some(Failure::Stall) => {
                // Blocks until cancelled: a day is "forever" for a test or a demo.
                while !self.cancel.wait_timeout(Duration::from_secs(86_400)) {}
                Some(Err(aborted(&self.provider)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_in_three_keeps_every_character_once() {
        for text in ["", "a", "ab", "abc", "héllo wörld", "日本語のテキスト"] {
            let pieces = split_in_three(text);
            assert_eq!(pieces.concat(), text);
            assert!(pieces.len() <= 3);
            assert!(pieces.iter().all(|p| !p.is_empty()));
        }
    }
}
