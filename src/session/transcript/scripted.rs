//! `ScriptedModel::from_transcript`: a recorded session's answers as a scripted model.
//!
//! Lives beside the transcript reader (not in `llm/`) so that `llm/` never depends on the
//! session. It only converts records; the replaying itself is the scripted model's.

use std::sync::Arc;

use super::Transcript;
use crate::llm::ContentPart;
use crate::llm::scripted::{ExpectedRequest, ReplayMode, ReplayStep, ScriptedModel, ScriptedTurn};
use crate::session::history::{AssistantTurn, Turn};

impl ScriptedModel {
    /// A model that answers with the transcript's recorded model responses, in order, under
    /// the provider id of the transcript's profile (so a profile with that id routes to it).
    ///
    /// Each answer streams exactly the recorded parts (text, thinking with its signature,
    /// tool calls with their ids), finish reason and usage. A recorded model call that got
    /// no answer (it failed or was interrupted) is answered with an error that is never
    /// retried (the recording spent the retries): of the recorded kind when a model
    /// fallback followed it, so a session with the same fallback chain falls back again,
    /// else a server error. The replay answers under the transcript's profile id; for a
    /// session that fell back to another provider, register
    /// [`alias`](ScriptedModel::alias)es under the other ids too.
    ///
    /// In [`ReplayMode::Strict`] each request must equal the recorded one — system prompt,
    /// tools, settings and messages, with tool outputs free to differ — and in
    /// [`ReplayMode::Exact`] tool outputs must match too; otherwise the call fails with an
    /// [`InvalidRequest`](crate::ErrorKind::InvalidRequest) error that names the first
    /// difference (its JSON path and both values). The system prompt holds the working
    /// directory, so a checked replay runs in the directory the transcript was recorded
    /// in. [`ReplayMode::Loose`] serves the answers whatever is asked.
    ///
    /// The host submits the same inputs again ([`Transcript::user_inputs`]).
    ///
    /// Record a session with a tool call, then replay it strictly — a regression test of
    /// the whole loop (here the recorded model is itself scripted; any real session's
    /// transcript works the same way). A mismatch would make `run` return `Err`:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agentloop::exec::LocalExecutionEnvironment;
    /// use agentloop::llm::Client;
    /// use agentloop::llm::scripted::{ReplayMode, ScriptedModel, ScriptedTurn};
    /// use agentloop::profiles::ProviderProfile;
    /// use agentloop::serde_json::json;
    /// use agentloop::session::transcript::Transcript;
    /// use agentloop::session::{Session, SessionConfig};
    ///
    /// let dir = std::env::temp_dir().join(format!("agentloop-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = dir.as_path().join("session.jsonl");
    /// let profile = || {
    ///     ProviderProfile::new("scripted", "demo").with_tool(agentloop::tools::shell())
    /// };
    /// let env = Arc::new(LocalExecutionEnvironment::new(dir.as_path())?);
    ///
    /// // Record.
    /// let recorded = ScriptedModel::new(vec![
    ///     ScriptedTurn::tool_call("shell", json!({"command": "echo recorded > out.txt"})),
    ///     ScriptedTurn::text("Wrote out.txt."),
    /// ]);
    /// let config = SessionConfig::default().with_transcript(&path);
    /// let session = Session::new(profile(), env.clone(), Client::new().with_provider(recorded), config)?;
    /// session.run("write out.txt")?;
    /// drop(session); // closes the transcript
    ///
    /// // Replay: the same inputs, every request checked against the recorded one.
    /// let transcript = Transcript::read(&path)?;
    /// let model = ScriptedModel::from_transcript(&transcript, ReplayMode::Strict);
    /// let session = Session::new(profile(), env, Client::new().with_provider(model), SessionConfig::default())?;
    /// for input in transcript.user_inputs() {
    ///     let outcome = session.run(input)?; // Err on the first difference
    ///     assert_eq!(outcome.text, "Wrote out.txt.");
    /// }
    /// assert_eq!(std::fs::read_to_string(dir.as_path().join("out.txt"))?, "recorded\n");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_transcript(transcript: &Transcript, mode: ReplayMode) -> ScriptedModel {
        let history = transcript.all_turns();
        let (messages, offsets) = history.messages_with_offsets();
        let turns = history.turns();
        let answer_at = |index: usize| match turns.get(index) {
            Some(Turn::Assistant(_)) if !transcript.is_copy(index) => Some(index),
            _ => None,
        };
        let mut claimed = vec![false; turns.len()];
        // Requests in order; each answered by the assistant turn right after its turns.
        let mut pending: Vec<(usize, ReplayStep)> = Vec::new();
        for record in transcript.request_records() {
            // A call that failed and handed over to a fallback model got no answer: the
            // next request (the next model's) gets the turn after it.
            let answer =
                answer_at(record.turns).filter(|&i| !claimed[i] && record.failure.is_none());
            if let Some(index) = answer {
                claimed[index] = true;
            }
            let expected = ExpectedRequest {
                settings: Arc::clone(&record.settings),
                history_start: offsets[record.start.min(turns.len())],
                history_messages: offsets[record.turns.min(turns.len())],
            };
            pending.push((
                record.turns,
                ReplayStep {
                    request: Some(expected),
                    answer: answer.map(|index| scripted_answer(turns, index)),
                    failure: record.failure,
                },
            ));
        }
        // A compaction the model summarised: its request and answer, where it happened.
        for compaction in transcript.compaction_records() {
            if let (Some(request), Some(answer)) = (&compaction.request, &compaction.answer) {
                pending.push((
                    compaction.position,
                    ReplayStep {
                        request: Some(ExpectedRequest {
                            settings: Arc::clone(request),
                            history_start: 0,
                            history_messages: 0,
                        }),
                        answer: Some(ScriptedTurn::text(answer.clone())),
                        failure: None,
                    },
                ));
            }
        }
        // Responses without a request record (hand-written transcripts) keep their place.
        for (index, turn) in turns.iter().enumerate() {
            if matches!(turn, Turn::Assistant(_)) && !claimed[index] && !transcript.is_copy(index) {
                pending.push((
                    index,
                    ReplayStep {
                        request: None,
                        answer: Some(scripted_answer(turns, index)),
                        failure: None,
                    },
                ));
            }
        }
        pending.sort_by_key(|(position, _)| *position);
        let steps = pending.into_iter().map(|(_, step)| step).collect();
        ScriptedModel::replay(&transcript.header().profile, steps, messages, mode)
    }
}

fn scripted_answer(turns: &[Turn], index: usize) -> ScriptedTurn {
    let Some(Turn::Assistant(turn)) = turns.get(index) else {
        unreachable!("only assistant turns are answers")
    };
    ScriptedTurn::from_parts(parts_of(turn))
        .with_finish(turn.finish_reason.clone())
        .with_usage(turn.usage)
}

/// The parts the provider sent, or (for a turn built by hand) its text and calls.
fn parts_of(turn: &AssistantTurn) -> Vec<ContentPart> {
    if !turn.parts.is_empty() {
        return turn.parts.clone();
    }
    let mut parts = Vec::with_capacity(1 + turn.tool_calls.len());
    if !turn.content.is_empty() {
        parts.push(ContentPart::text(turn.content.clone()));
    }
    parts.extend(turn.tool_calls.iter().cloned().map(ContentPart::ToolCall));
    parts
}
