//! Transcripts: a session saved as JSON Lines while it runs, and read back to resume it
//! ([`Session::resume`](super::Session::resume)) or replay it offline
//! ([`ScriptedModel::from_transcript`](crate::llm::scripted::ScriptedModel::from_transcript)).
//! This module reads and writes files only; it never talks to a provider or runs a tool.
//!
//! # Format (version 1)
//!
//! A transcript is a UTF-8 file of JSON Lines: one JSON object per line, each with a
//! `"type"`. It is append-only and written as the session runs, one record per line in
//! the order things happened:
//!
//! ```json
//! {"type":"header","version":1,"session_id":"…","profile":"anthropic","model":"claude-…","working_directory":"/src/app","started_at":"2026-01-01T00:00:00.000Z","config":{…}}
//! {"type":"turn","turn":{"type":"user","content":"fix the tests","timestamp":"…"}}
//! {"type":"request","turns":1,"request":{"model":"claude-…","messages":[{"role":"system",…}],"tools":[…],…}}
//! {"type":"turn","turn":{"type":"assistant","content":"","tool_calls":[…],"parts":[…],…}}
//! {"type":"turn","turn":{"type":"tool_results","results":[…],"timestamp":"…"}}
//! {"type":"request","turns":3}
//! ```
//!
//! | record | fields | when |
//! |---|---|---|
//! | `header` | `version`, `session_id`, `profile` (the profile id), `model`, `base_url` (where requests went; no user information or query; absent for a provider without an address), `working_directory`, `started_at` (RFC 3339), `config` (the serialisable settings: never the approval hook), `resumed_from` (the session id of the transcript's previous segment, after a resume) | first line; again each time the transcript is resumed |
//! | `turn` | `turn`: one history [`Turn`] in its serde form — user input, steering, system messages, tool results, and model responses with every part exactly as the provider sent it (thinking and its signature, reasoning items, thought signatures) | each time the session appends a turn |
//! | `request` | `turns`; `request` when it changed | before each model call |
//! | `event` | `event`: one [`SessionEvent`] in its JSON form | every event, when [`SessionConfig::transcript_events`](super::SessionConfig::transcript_events) is on |
//! | `background` | `event` (`start`, `exit`, `read`), `id` (the process's id in the session); for a start `pid` and `command`; for an exit `exit_code`, `signal`, `stopped`, `duration_ms`; for a read `stdout_end` and `stderr_end` (how far the model has read each stream) | when a background process starts (or a foreground command moves to the background), exits, and when the model reads it |
//! | `compaction` | `reason` (`threshold`, `overflow`, `manual`), `history` (the whole compacted history: kept user messages, the summary turn, the recent turns), `request` and `answer` (the compaction request and the model's raw answer, when the model wrote the summary) | each time the history is compacted |
//! | `fallback` | `from_provider`, `from_model`, `to_provider`, `to_model`, `error_kind`, `message` (as in the `model_fallback` event) | each time a model failed and the next of [`SessionConfig::fallback_models`](super::SessionConfig::fallback_models) took over; it follows the `request` record of the call that failed |
//! | `checkpoint` | `seq` (numbers the checkpoint records), `input`, `round` (0: before the input), `checkpoint` and `store` (the file checkpoint and its store, when checkpoints are on) | before each input, and before each tool round with round checkpoints |
//! | `rewind` | `rewind` (the request), `report` (what it did), `history` (the whole history after it, when the history was rewound) | each rewind ([`Session::rewind`](super::Session::rewind)) |
//! | `fork` | `forked_from` (the parent's session id), `at` (the input forked before, if any), `history` (the history the fork starts with), `marks` (its inputs' places in it) | once, after the header of a forked session's transcript |
//!
//! A `request` record says what the model was asked: the leading system message(s) stored
//! in `request` (the [`Request`] serde form with only those, omitted when it equals the
//! previous record's) followed by the first `turns` history turns of the transcript
//! (counted over all its segments). With the turns, that rebuilds every request exactly.
//!
//! A `compaction` record (and a `rewind` with a `history`, and a `fork`) replaces the
//! history: its turns are the history from then on, later `request` records count from
//! its first turn, and the turns before stay in the file so every request can be rebuilt.
//!
//! # Reading rules
//!
//! - The first record is a header; a header whose `version` is greater than
//!   [`TRANSCRIPT_VERSION`] is refused.
//! - Records of an unknown `type` are skipped (and listed in
//!   [`warnings`](Transcript::warnings)); unknown fields are ignored. New record types can
//!   therefore be added without breaking older readers.
//! - A last line cut short by a crash (not valid JSON and not ended by a newline) is
//!   ignored and reported as [`torn_last_line`](Transcript::torn_last_line). Every other
//!   non-blank line must be a valid record (or a record of an unknown type), or reading
//!   fails, naming the line: a history with a hole in it would not be the session's.
//! - An `event` record whose event does not decode (a kind from a newer version) is skipped
//!   with a warning: events are a log, the history does not depend on them.
//!
//! # Subagents
//!
//! A subagent writes no transcript of its own (its configuration is a copy of its
//! parent's, transcript path included). When the parent records events, the subagent's
//! events are in the parent's transcript as `subagent_event` events; the parent's history
//! holds the `spawn_agent` / `wait` calls and their results.
//!
//! # Durability and secrets
//!
//! Each record is written with one `write_all` of the whole line, newline included, and
//! flushed (no user-space buffer): a crash loses at most the line being written. Lines are
//! not `fsync`ed. When a write fails, the session emits a `WARNING` event (code
//! `"transcript"`) and writes no further records, so the file never holds a torn line
//! before intact ones.
//!
//! No API key reaches a transcript: requests carry none (providers hold their keys), and
//! neither does any event. The environment of shell commands is not recorded. Tool
//! arguments and outputs are recorded as the model saw them (and, with events on, in
//! full), so what a command prints is in the transcript just as the model received it.

pub(crate) mod resume;
mod scripted;
mod writer;

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::SessionEvent;
use super::checkpoint::{Rewind, RewindReport};
use super::compaction::CompactionReason;
use super::history::{History, Turn};
use crate::error::{Error, ErrorKind, Result};
use crate::llm::Request;

pub(crate) use writer::TranscriptWriter;

/// The format version this library writes, and the newest it reads.
pub const TRANSCRIPT_VERSION: u32 = 1;

/// The first record of a transcript, and of each resumed segment of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TranscriptHeader {
    /// The format version ([`TRANSCRIPT_VERSION`] when written by this library).
    pub version: u32,
    /// The id of the session that wrote the records after this header.
    pub session_id: String,
    /// The provider profile's id (the provider the requests went to).
    pub profile: String,
    /// The model.
    pub model: String,
    /// Where the requests went (the provider's base URL, without any user name, password,
    /// query or fragment); absent for a provider with no address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The execution environment's working directory.
    pub working_directory: String,
    /// When the session started.
    #[serde(with = "crate::time::rfc3339")]
    pub started_at: SystemTime,
    /// The serialisable settings of the session's `SessionConfig` (limits, timeouts,
    /// truncation, loop detection); never the approval hook.
    #[serde(default)]
    pub config: Value,
    /// After a resume: the session id of the previous segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<String>,
}

/// A record as read.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum RecordIn {
    Header(TranscriptHeader),
    Turn {
        turn: Turn,
    },
    Request {
        turns: usize,
        #[serde(default)]
        request: Option<Request>,
    },
    Event {
        event: Value,
    },
    Background(BackgroundRecord),
    Compaction {
        #[serde(default)]
        history: History,
        #[serde(default)]
        request: Option<Request>,
        #[serde(default)]
        answer: Option<String>,
    },
    Fallback {
        #[serde(default)]
        error_kind: String,
    },
    Checkpoint(MarkOut),
    Rewind {
        rewind: Rewind,
        #[serde(default)]
        history: Option<History>,
    },
    Fork {
        #[serde(default)]
        history: History,
        #[serde(default)]
        marks: Vec<MarkOut>,
    },
    #[serde(other)]
    Unknown,
}

/// A `checkpoint` record (and a mark of a `fork` record, where `turns` says where it is).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MarkOut {
    pub(crate) seq: u64,
    pub(crate) input: usize,
    #[serde(default)]
    pub(crate) round: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checkpoint: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) store: Option<std::path::PathBuf>,
    /// In a `fork` record: the history turns before the mark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) turns: Option<usize>,
}

/// A mark read back: a [`MarkOut`] and where the history stood among all recorded turns.
#[derive(Debug, Clone)]
pub(crate) struct MarkRecord {
    pub(crate) mark: MarkOut,
    /// Where the history at the mark starts and ends among all recorded turns.
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// One thing the host did to a recorded session, in order: what a replay does again.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// An input (submitted or a follow-up): submit it.
    Input(String),
    /// A rewind: rewind the same way.
    Rewind(Rewind),
}

/// A record as written (borrowing what it writes).
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum RecordOut<'a> {
    Header(&'a TranscriptHeader),
    Turn {
        turn: &'a Turn,
    },
    Request {
        turns: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        request: Option<&'a Request>,
    },
    Event {
        event: &'a SessionEvent,
    },
    Background(&'a BackgroundRecord),
    Compaction {
        reason: CompactionReason,
        history: &'a History,
        #[serde(skip_serializing_if = "Option::is_none")]
        request: Option<&'a Request>,
        #[serde(skip_serializing_if = "Option::is_none")]
        answer: Option<&'a str>,
    },
    Fallback {
        from_provider: &'a str,
        from_model: &'a str,
        to_provider: &'a str,
        to_model: &'a str,
        error_kind: &'a str,
        message: &'a str,
    },
    Checkpoint(&'a MarkOut),
    Rewind {
        rewind: &'a Rewind,
        report: &'a RewindReport,
        #[serde(skip_serializing_if = "Option::is_none")]
        history: Option<&'a History>,
    },
    Fork {
        forked_from: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        at: Option<usize>,
        history: &'a History,
        marks: &'a [MarkOut],
    },
}

/// A `background` record: a start, exit or read of a background process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct BackgroundRecord {
    /// `start`, `exit` or `read`.
    pub(crate) event: String,
    /// The process's id in the session.
    pub(crate) id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stopped: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stdout_end: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) stderr_end: Option<u64>,
}

/// A `request` record with its settings resolved.
#[derive(Debug, Clone)]
pub(crate) struct RequestRecord {
    /// Where the history the request was built from starts among all recorded turns
    /// (after a compaction, its copy of the compacted history).
    pub(crate) start: usize,
    /// The end (exclusive) of the turns the conversation was built from, among all
    /// recorded turns.
    pub(crate) turns: usize,
    /// The request with only its leading (system) messages.
    pub(crate) settings: Arc<Request>,
    /// How the call failed, when a `fallback` record followed it.
    pub(crate) failure: Option<ErrorKind>,
}

/// A transcript read back: the headers, the history, the requests and the events.
///
/// ```no_run
/// use agentloop::session::transcript::Transcript;
///
/// let transcript = Transcript::read("session.jsonl")?;
/// if let Some(torn) = transcript.torn_last_line() {
///     eprintln!("the last line was cut short and ignored: {torn}");
/// }
/// println!("{} turns, {} model calls", transcript.history().len(), transcript.request_count());
/// # Ok::<(), agentloop::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Transcript {
    header: TranscriptHeader,
    resumes: Vec<TranscriptHeader>,
    /// Every recorded turn, compacted histories included (each copied in full).
    all: History,
    /// The current history: the turns since the last compaction's copy began.
    history: History,
    /// The ranges of `all` that are copies made by compaction records.
    copies: Vec<std::ops::Range<usize>>,
    compactions: Vec<CompactionRecord>,
    requests: Vec<RequestRecord>,
    events: Vec<SessionEvent>,
    background: Vec<BackgroundRecord>,
    torn_last_line: Option<String>,
    warnings: Vec<String>,
    /// Bytes up to the end of the last complete record (its newline included if present).
    complete_len: u64,
    /// The last complete record is not followed by a newline.
    missing_newline: bool,
    /// The marks still valid, oldest first, and the next `seq`.
    marks: Vec<MarkRecord>,
    next_seq: u64,
    /// Where the current history starts among all turns.
    epoch_start: usize,
    steps: Vec<Step>,
}

impl Transcript {
    /// Reads the transcript at `path` (see the [module docs](self) for the rules).
    ///
    /// Fails with an [`ErrorKind::Io`] error when the file cannot be read, has no header,
    /// has a newer version, or holds a line that is not a valid record before its last.
    pub fn read(path: impl AsRef<Path>) -> Result<Transcript> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|err| {
            Error::new(
                ErrorKind::Io,
                format!("failed to read the transcript `{}`: {err}", path.display()),
            )
            .with_source(err)
        })?;
        Transcript::parse(&bytes).map_err(|err| {
            Error::new(
                ErrorKind::Io,
                format!("transcript `{}`: {}", path.display(), err.message()),
            )
        })
    }

    /// Parses a transcript from its bytes (see [`read`](Self::read)).
    pub fn parse(bytes: &[u8]) -> Result<Transcript> {
        let mut builder = Builder::default();
        let mut start = 0;
        let mut number = 0;
        while start < bytes.len() {
            number += 1;
            let (line, end, has_newline) = match crate::bytes::find(b'\n', &bytes[start..]) {
                Some(at) => (&bytes[start..start + at], start + at + 1, true),
                None => (&bytes[start..], bytes.len(), false),
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                start = end;
                continue;
            }
            match serde_json::from_slice::<RecordIn>(line) {
                Ok(record) => {
                    builder.add(record, number)?;
                    builder.complete_len = end as u64;
                    builder.missing_newline = !has_newline;
                }
                // A crash cut the last line short: it never ends with its newline.
                Err(_) if !has_newline && serde_json::from_slice::<Value>(line).is_err() => {
                    builder.torn = Some(String::from_utf8_lossy(line).into_owned());
                }
                Err(err) => {
                    return Err(Error::new(
                        ErrorKind::Io,
                        format!("line {number} is not a valid transcript record: {err}"),
                    ));
                }
            }
            start = end;
        }
        builder.finish()
    }

    /// The first header: the session that started the transcript.
    pub fn header(&self) -> &TranscriptHeader {
        &self.header
    }

    /// The headers of the later segments, one per resume, in order.
    pub fn resumes(&self) -> &[TranscriptHeader] {
        &self.resumes
    }

    /// The conversation history: every turn of every segment, in order; after a
    /// compaction, the compacted history and the turns after it (what a resumed session
    /// continues from).
    pub fn history(&self) -> &History {
        &self.history
    }

    /// How many compactions were recorded.
    pub fn compaction_count(&self) -> usize {
        self.compactions.len()
    }

    /// The texts of the user inputs, in order (what a host submits again to replay the
    /// session).
    pub fn user_inputs(&self) -> Vec<&str> {
        self.all
            .turns()
            .iter()
            .enumerate()
            .filter(|(index, _)| !self.is_copy(*index))
            .filter_map(|(_, turn)| match turn {
                Turn::User(user) => Some(user.content.as_str()),
                _ => None,
            })
            .collect()
    }

    /// How many model calls were recorded (`request` records).
    pub fn request_count(&self) -> usize {
        self.requests.len()
    }

    /// The `index`-th (0-based) recorded request, rebuilt exactly as it was sent.
    pub fn request(&self, index: usize) -> Option<Request> {
        let record = self.requests.get(index)?;
        let end = record.turns.min(self.all.len());
        let prefix = History::from_turns(self.all.turns()[record.start.min(end)..end].to_vec());
        let mut request = (*record.settings).clone();
        request.messages.extend(prefix.to_messages());
        Some(request)
    }

    /// What the host did, in order: the inputs and the rewinds. A replay submits each
    /// input and rewinds at each rewind, so that the replayed session reproduces the
    /// recorded one (checked in [`ReplayMode::Strict`](crate::llm::scripted::ReplayMode::Strict)).
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The recorded events (empty unless the session recorded them).
    pub fn events(&self) -> &[SessionEvent] {
        &self.events
    }

    /// The last line, if a crash cut it short; it was ignored.
    pub fn torn_last_line(&self) -> Option<&str> {
        self.torn_last_line.as_deref()
    }

    /// What the reader skipped, one message per record (unknown record types, events that
    /// did not decode).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The `background` records, in order.
    pub(crate) fn background_records(&self) -> &[BackgroundRecord] {
        &self.background
    }

    pub(crate) fn request_records(&self) -> &[RequestRecord] {
        &self.requests
    }

    pub(crate) fn compaction_records(&self) -> &[CompactionRecord] {
        &self.compactions
    }

    /// Every recorded turn, compacted histories' copies included.
    pub(crate) fn all_turns(&self) -> &History {
        &self.all
    }

    /// Whether turn `index` of [`all_turns`](Self::all_turns) is a compaction's copy.
    pub(crate) fn is_copy(&self, index: usize) -> bool {
        self.copies.iter().any(|range| range.contains(&index))
    }

    /// The marks still valid (inputs to go back to), oldest first, and the next `seq`.
    pub(crate) fn marks(&self) -> (&[MarkRecord], u64) {
        (&self.marks, self.next_seq)
    }

    /// Where the current history starts among [`all_turns`](Self::all_turns).
    pub(crate) fn epoch_start(&self) -> usize {
        self.epoch_start
    }

    /// The history as it was at the `checkpoint` record `seq`, if the transcript has it.
    pub(crate) fn history_at(&self, seq: u64) -> Option<History> {
        let mark = self.marks.iter().find(|m| m.mark.seq == seq)?;
        let turns = self.all.turns().get(mark.start..mark.end)?;
        Some(History::from_turns(turns.to_vec()))
    }

    /// The session id of the last segment (the one a resume continues from).
    pub(crate) fn last_session_id(&self) -> &str {
        self.resumes
            .last()
            .map_or(&self.header.session_id, |h| &h.session_id)
    }
}

/// A `compaction` record: where its copy starts among all turns, and the summary
/// request and the model's answer when the model wrote the summary.
#[derive(Debug, Clone)]
pub(crate) struct CompactionRecord {
    pub(crate) position: usize,
    pub(crate) request: Option<Arc<Request>>,
    pub(crate) answer: Option<String>,
}

/// Collects records into a [`Transcript`].
#[derive(Default)]
struct Builder {
    header: Option<TranscriptHeader>,
    resumes: Vec<TranscriptHeader>,
    turns: Vec<Turn>,
    /// Where the current history starts in `turns`.
    epoch_start: usize,
    copies: Vec<std::ops::Range<usize>>,
    compactions: Vec<CompactionRecord>,
    requests: Vec<RequestRecord>,
    events: Vec<SessionEvent>,
    background: Vec<BackgroundRecord>,
    warnings: Vec<String>,
    torn: Option<String>,
    complete_len: u64,
    missing_newline: bool,
    marks: Vec<MarkRecord>,
    next_seq: u64,
    steps: Vec<Step>,
}

impl Builder {
    /// Starts a new history with a copy of `history` (a compaction, a rewind, a fork).
    fn copy(&mut self, history: &History) -> usize {
        let start = self.turns.len();
        self.turns.extend(history.turns().iter().cloned());
        self.epoch_start = start;
        self.copies.push(start..self.turns.len());
        start
    }

    fn mark(&mut self, mark: MarkOut, start: usize, end: usize) {
        self.next_seq = self.next_seq.max(mark.seq + 1);
        self.marks.push(MarkRecord { mark, start, end });
    }

    /// A rewind: the marks it went back past are gone, and so are the file checkpoints it
    /// undid.
    fn rewound(&mut self, rewind: &Rewind, history: Option<&History>) {
        let key = (rewind.input, rewind.round);
        let target = self
            .marks
            .iter()
            .rev()
            .find(|m| (m.mark.input, m.mark.round) == key)
            .and_then(|m| m.mark.checkpoint);
        if rewind.files {
            if let Some(id) = target {
                for mark in &mut self.marks {
                    if mark.mark.checkpoint.is_some_and(|c| c >= id) {
                        mark.mark.checkpoint = None;
                    }
                }
            }
        }
        if let Some(history) = history {
            self.marks.retain(|m| (m.mark.input, m.mark.round) < key);
            self.copy(history);
        }
        self.steps.push(Step::Rewind(*rewind));
    }
    fn add(&mut self, record: RecordIn, number: usize) -> Result<()> {
        let invalid = |message: String| Err(Error::new(ErrorKind::Io, message));
        if self.header.is_none() && !matches!(record, RecordIn::Header(_)) {
            return invalid(format!(
                "line {number}: a transcript starts with a header record"
            ));
        }
        match record {
            RecordIn::Header(header) => {
                if header.version > TRANSCRIPT_VERSION {
                    return invalid(format!(
                        "line {number}: transcript version {} is newer than this library \
                         reads (version {TRANSCRIPT_VERSION})",
                        header.version
                    ));
                }
                if self.header.is_none() {
                    self.header = Some(header);
                } else {
                    self.resumes.push(header);
                }
            }
            RecordIn::Turn { turn } => {
                if let Turn::User(user) = &turn {
                    self.steps.push(Step::Input(user.content.clone()));
                }
                self.turns.push(turn);
            }
            RecordIn::Checkpoint(mark) => {
                let (start, end) = (self.epoch_start, self.turns.len());
                self.mark(mark, start, end);
            }
            RecordIn::Rewind { rewind, history } => self.rewound(&rewind, history.as_ref()),
            RecordIn::Fork { history, marks } => {
                self.marks.clear();
                let start = self.copy(&history);
                for mark in marks {
                    let end = start + mark.turns.unwrap_or(0).min(history.len());
                    self.mark(mark, start, end);
                }
            }
            RecordIn::Request { turns, request } => {
                let settings = match (request, self.requests.last()) {
                    (Some(request), _) => Arc::new(request),
                    (None, Some(previous)) => previous.settings.clone(),
                    (None, None) => {
                        return invalid(format!(
                            "line {number}: the first request record has no `request`"
                        ));
                    }
                };
                let available = self.turns.len() - self.epoch_start;
                if turns > available {
                    return invalid(format!(
                        "line {number}: the request names {turns} turns but only {available} \
                         precede it"
                    ));
                }
                self.requests.push(RequestRecord {
                    start: self.epoch_start,
                    turns: self.epoch_start + turns,
                    settings,
                    failure: None,
                });
            }
            RecordIn::Compaction {
                history,
                request,
                answer,
            } => {
                let start = self.copy(&history);
                self.compactions.push(CompactionRecord {
                    position: start,
                    request: request.map(Arc::new),
                    answer,
                });
            }
            RecordIn::Event { event } => match serde_json::from_value::<SessionEvent>(event) {
                Ok(event) => self.events.push(event),
                Err(err) => self.warnings.push(format!(
                    "line {number}: skipped an event that did not decode: {err}"
                )),
            },
            RecordIn::Fallback { error_kind } => {
                if let Some(failed) = self.requests.last_mut() {
                    failed.failure = Some(match error_kind.as_str() {
                        "rate_limited" => ErrorKind::RateLimited,
                        "quota" => ErrorKind::Quota,
                        _ => ErrorKind::Server,
                    });
                }
            }
            RecordIn::Background(record) => self.background.push(record),
            RecordIn::Unknown => self.warnings.push(format!(
                "line {number}: skipped a record of an unknown type"
            )),
        }
        Ok(())
    }

    fn finish(self) -> Result<Transcript> {
        let Some(header) = self.header else {
            return Err(Error::new(
                ErrorKind::Io,
                "the transcript holds no header record",
            ));
        };
        let history = History::from_turns(self.turns[self.epoch_start..].to_vec());
        Ok(Transcript {
            header,
            resumes: self.resumes,
            all: History::from_turns(self.turns),
            history,
            copies: self.copies,
            compactions: self.compactions,
            requests: self.requests,
            events: self.events,
            background: self.background,
            torn_last_line: self.torn,
            warnings: self.warnings,
            complete_len: self.complete_len,
            missing_newline: self.missing_newline,
            marks: self.marks,
            next_seq: self.next_seq,
            epoch_start: self.epoch_start,
            steps: self.steps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"type":"header","version":1,"session_id":"s1","profile":"p","model":"m","working_directory":"/w","started_at":"2026-01-01T00:00:00.000Z","config":{}}"#;
    const USER: &str = r#"{"type":"turn","turn":{"type":"user","content":"hi","timestamp":"2026-01-01T00:00:00.000Z"}}"#;
    const REQUEST: &str = r#"{"type":"request","turns":1,"request":{"model":"m","messages":[{"role":"system","content":[{"kind":"text","text":"be brief"}]}]}}"#;
    const ANSWER: &str = r#"{"type":"turn","turn":{"type":"assistant","content":"hello","timestamp":"2026-01-01T00:00:00.000Z"}}"#;

    fn lines(lines: &[&str]) -> Vec<u8> {
        let mut out = lines.join("\n");
        out.push('\n');
        out.into_bytes()
    }

    fn error_of(bytes: &[u8]) -> String {
        Transcript::parse(bytes).unwrap_err().to_string()
    }

    #[test]
    fn requests_are_rebuilt_from_their_settings_and_the_turns_before_them() {
        let second = r#"{"type":"request","turns":3}"#;
        let t = Transcript::parse(&lines(&[HEADER, USER, REQUEST, ANSWER, USER, second])).unwrap();
        assert_eq!(t.request_count(), 2);
        let first = t.request(0).unwrap();
        assert_eq!(first.messages.len(), 2);
        assert_eq!(first.messages[0].text(), "be brief");
        assert_eq!(first.messages[1].text(), "hi");
        let next = t.request(1).unwrap();
        assert_eq!(next.messages.len(), 4, "the settings carry over");
        assert_eq!(next.messages[2].text(), "hello");
        assert_eq!(t.user_inputs(), ["hi", "hi"]);
    }

    #[test]
    fn unknown_record_types_and_undecodable_events_are_skipped_with_a_warning() {
        let future = r#"{"type":"teleport","at":3}"#;
        let event = r#"{"type":"event","event":{"kind":"teleported","session_id":"s1","timestamp":"2026-01-01T00:00:00.000Z","data":{}}}"#;
        let t = Transcript::parse(&lines(&[HEADER, future, USER, event])).unwrap();
        assert_eq!(t.history().len(), 1);
        assert_eq!(t.warnings().len(), 2, "{:?}", t.warnings());
        assert!(t.warnings()[0].starts_with("line 2:"), "{:?}", t.warnings());
        assert!(t.events().is_empty());
    }

    #[test]
    fn bad_transcripts_fail_with_the_line_that_is_wrong() {
        let newer = HEADER.replace(r#""version":1"#, r#""version":2"#);
        assert!(error_of(&lines(&[&newer])).contains("version 2 is newer"));
        assert!(error_of(&lines(&[USER])).contains("line 1: a transcript starts with a header"));
        assert!(error_of(b"").contains("no header"));
        let corrupt = error_of(&lines(&[HEADER, "{\"type\":\"tu", USER]));
        assert!(
            corrupt.contains("line 2 is not a valid transcript record"),
            "{corrupt}"
        );
        let bare = error_of(&lines(&[HEADER, USER, r#"{"type":"request","turns":1}"#]));
        assert!(
            bare.contains("line 3: the first request record has no `request`"),
            "{bare}"
        );
        let ahead = error_of(&lines(&[HEADER, REQUEST]));
        assert!(
            ahead.contains("names 1 turns but only 0 precede it"),
            "{ahead}"
        );
    }

    #[test]
    fn a_torn_last_line_is_reported_and_blank_lines_are_ignored() {
        let mut bytes = lines(&[HEADER, "", USER]);
        bytes.extend_from_slice(&ANSWER.as_bytes()[..30]);
        let t = Transcript::parse(&bytes).unwrap();
        assert_eq!(t.torn_last_line(), Some(&ANSWER[..30]));
        assert_eq!(t.history().len(), 1);
        assert_eq!(t.complete_len as usize, bytes.len() - 30);
        assert!(!t.missing_newline);
    }
}
