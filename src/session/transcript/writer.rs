//! The transcript writer: one whole line per record, written as the session runs.
//!
//! Shared by the worker (turns, requests) and the event sink (events, also from tool
//! threads) behind one mutex. It never buffers a record across calls and never writes
//! after a failed write.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{BackgroundRecord, MarkOut, RecordOut, Transcript, TranscriptHeader};
use crate::error::{Error, ErrorKind, Result};
use crate::llm::Request;
use crate::session::checkpoint::{Rewind, RewindReport};
use crate::session::compaction::CompactionReason;
use crate::session::events::{EventKind, SessionEvent};
use crate::session::history::{History, Turn};
use crate::sync::lock;
use crate::tools::background::jobs::JobEvent;

/// Appends records to a transcript file.
pub(crate) struct TranscriptWriter {
    path: PathBuf,
    state: Mutex<State>,
}

struct State {
    /// `None` after a failed write: nothing more is written.
    file: Option<File>,
    /// The line being written (reused).
    line: Vec<u8>,
    /// The settings of the last request record written.
    last_settings: Option<Request>,
}

fn io_error(message: String, err: io::Error) -> Error {
    Error::new(ErrorKind::Io, message).with_source(err)
}

/// Creates `path`, which must not exist.
fn create_new(path: &Path) -> Result<File> {
    // Append mode: every line lands at the end even if another writer appends too.
    OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(path)
        .map_err(|err| {
            let message = if err.kind() == io::ErrorKind::AlreadyExists {
                format!(
                    "the transcript `{}` already exists; choose a new path, or continue it \
                     with Session::resume",
                    path.display()
                )
            } else {
                format!(
                    "failed to create the transcript `{}`: {err}",
                    path.display()
                )
            };
            io_error(message, err)
        })
}

impl TranscriptWriter {
    /// Creates the transcript at `path` (which must not exist) and writes `header`.
    pub(crate) fn create(path: &Path, header: &TranscriptHeader) -> Result<Arc<TranscriptWriter>> {
        let file = create_new(path)?;
        TranscriptWriter::start(path, file, header)
    }

    /// Opens the transcript a resumed session writes to, and writes its `header`.
    ///
    /// With no `target`, or a `target` that is `source` itself, the records go on at the
    /// end of `source`: a torn last line is cut off first (`read` reported it) and a last
    /// record without its newline gets one. Any other `target` must not exist; it starts
    /// with a copy of every complete record of `source`, so that it is a whole transcript
    /// on its own.
    pub(crate) fn resume(
        source: &Path,
        read: &Transcript,
        target: Option<&Path>,
        header: &TranscriptHeader,
    ) -> Result<Arc<TranscriptWriter>> {
        let failed = |path: &Path, err: io::Error| {
            io_error(
                format!("failed to write the transcript `{}`: {err}", path.display()),
                err,
            )
        };
        let target = match target {
            Some(target) if !same_file(source, target) => target,
            _ => {
                let mut file = OpenOptions::new()
                    .append(true)
                    .open(source)
                    .map_err(|err| failed(source, err))?;
                if read.torn_last_line.is_some() {
                    file.set_len(read.complete_len)
                        .map_err(|err| failed(source, err))?;
                }
                if read.missing_newline {
                    file.write_all(b"\n").map_err(|err| failed(source, err))?;
                }
                return TranscriptWriter::start(source, file, header);
            }
        };
        let bytes = std::fs::read(source).map_err(|err| {
            io_error(
                format!(
                    "failed to read the transcript `{}`: {err}",
                    source.display()
                ),
                err,
            )
        })?;
        let complete = &bytes[..(read.complete_len as usize).min(bytes.len())];
        let mut file = create_new(target)?;
        file.write_all(complete)
            .and_then(|()| {
                if read.missing_newline {
                    file.write_all(b"\n")
                } else {
                    Ok(())
                }
            })
            .map_err(|err| failed(target, err))?;
        TranscriptWriter::start(target, file, header)
    }

    fn start(path: &Path, file: File, header: &TranscriptHeader) -> Result<Arc<TranscriptWriter>> {
        let writer = TranscriptWriter {
            path: path.to_path_buf(),
            state: Mutex::new(State {
                file: Some(file),
                line: Vec::with_capacity(4096),
                last_settings: None,
            }),
        };
        writer.write_header(header)?;
        Ok(Arc::new(writer))
    }

    fn write_header(&self, header: &TranscriptHeader) -> Result<()> {
        match self.write(&RecordOut::Header(header)) {
            None => Ok(()),
            Some(message) => Err(Error::new(ErrorKind::Io, message)),
        }
    }

    /// Records a history turn. `Some(message)` on the first failed write.
    pub(crate) fn turn(&self, turn: &Turn) -> Option<String> {
        self.write(&RecordOut::Turn { turn })
    }

    /// Records a compaction: the new `history` in full, and the summary request and the
    /// model's raw answer when the model wrote the summary. `Some(message)` on the first
    /// failed write.
    pub(crate) fn compaction(
        &self,
        reason: CompactionReason,
        history: &History,
        call: Option<(&Request, &str)>,
    ) -> Option<String> {
        self.write(&RecordOut::Compaction {
            reason,
            history,
            request: call.map(|(request, _)| request),
            answer: call.map(|(_, answer)| answer),
        })
    }

    /// Records that a model failed and the next took over (`event` is the
    /// `MODEL_FALLBACK` event). `Some(message)` on the first failed write.
    pub(crate) fn fallback(&self, event: &EventKind) -> Option<String> {
        let EventKind::ModelFallback {
            from_provider,
            from_model,
            to_provider,
            to_model,
            error_kind,
            message,
        } = event
        else {
            return None;
        };
        self.write(&RecordOut::Fallback {
            from_provider,
            from_model,
            to_provider,
            to_model,
            error_kind,
            message,
        })
    }

    /// Records a mark (a point a rewind or fork can go back to). `Some(message)` on the
    /// first failed write.
    pub(crate) fn checkpoint(&self, mark: &MarkOut) -> Option<String> {
        self.write(&RecordOut::Checkpoint(mark))
    }

    /// Records a rewind, with the whole history after it when the history was rewound.
    /// `Some(message)` on the first failed write.
    pub(crate) fn rewind(
        &self,
        rewind: &Rewind,
        report: &RewindReport,
        history: Option<&History>,
    ) -> Option<String> {
        self.write(&RecordOut::Rewind {
            rewind,
            report,
            history,
        })
    }

    /// Records what a forked session starts from. `Some(message)` on the first failed
    /// write.
    pub(crate) fn fork(
        &self,
        forked_from: &str,
        at: Option<usize>,
        history: &History,
        marks: &[MarkOut],
    ) -> Option<String> {
        self.write(&RecordOut::Fork {
            forked_from,
            at,
            history,
            marks,
        })
    }

    /// The transcript's file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Records an event. `Some(message)` on the first failed write.
    pub(crate) fn event(&self, event: &SessionEvent) -> Option<String> {
        self.write(&RecordOut::Event { event })
    }

    /// Records a start, exit or read of a background process. `Some(message)` on the
    /// first failed write.
    pub(crate) fn background(&self, event: &JobEvent<'_>) -> Option<String> {
        let record = match *event {
            JobEvent::Started { id, pid, command } => BackgroundRecord {
                event: "start".to_string(),
                id,
                pid: Some(pid),
                command: Some(command.to_string()),
                ..BackgroundRecord::default()
            },
            JobEvent::Exited { id, result, .. } => BackgroundRecord {
                event: "exit".to_string(),
                id,
                exit_code: result.exit_code,
                signal: result.signal,
                stopped: Some(result.cancelled),
                duration_ms: Some(u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX)),
                ..BackgroundRecord::default()
            },
            JobEvent::Read { id, ends } => BackgroundRecord {
                event: "read".to_string(),
                id,
                stdout_end: Some(ends[0]),
                stderr_end: Some(ends[1]),
                ..BackgroundRecord::default()
            },
        };
        self.write(&RecordOut::Background(&record))
    }

    /// Records a model call: `request` was built from the first `turns` history turns,
    /// after `lead` leading messages of its own (the system prompt). `Some(message)` on the
    /// first failed write.
    pub(crate) fn request(&self, request: &Request, lead: usize, turns: usize) -> Option<String> {
        let mut state = lock(&self.state);
        let unchanged = state
            .last_settings
            .as_ref()
            .is_some_and(|last| same_settings(last, request, lead));
        if unchanged {
            return self.write_locked(
                &mut state,
                &RecordOut::Request {
                    turns,
                    request: None,
                },
            );
        }
        let settings = settings_of(request, lead);
        let failure = self.write_locked(
            &mut state,
            &RecordOut::Request {
                turns,
                request: Some(&settings),
            },
        );
        state.last_settings = Some(settings);
        failure
    }

    fn write(&self, record: &RecordOut<'_>) -> Option<String> {
        let mut state = lock(&self.state);
        self.write_locked(&mut state, record)
    }

    fn write_locked(&self, state: &mut State, record: &RecordOut<'_>) -> Option<String> {
        let State { file, line, .. } = state;
        // Closed after a failed write: the failure was reported once.
        let out = file.as_mut()?;
        line.clear();
        let written = match crate::json::write(line, record) {
            Ok(()) => {
                line.push(b'\n');
                // One write of the whole line: a crash tears at most this line.
                out.write_all(line).and_then(|()| out.flush())
            }
            Err(err) => Err(io::Error::other(err)),
        };
        if line.capacity() > 1 << 20 {
            // Do not keep a huge tool output's buffer for the rest of the session.
            *line = Vec::with_capacity(4096);
        }
        match written {
            Ok(()) => None,
            Err(err) => {
                *file = None;
                Some(format!(
                    "failed to write the transcript `{}`: {err}; no further records are written",
                    self.path.display()
                ))
            }
        }
    }
}

/// Whether `a` and `b` name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `request` without its conversation: every field, and only the first `lead` messages.
fn settings_of(request: &Request, lead: usize) -> Request {
    let Request {
        model,
        messages,
        provider,
        tools,
        tool_choice,
        reasoning_effort,
        max_tokens,
        temperature,
        top_p,
        stop_sequences,
        provider_options,
        cache_key,
        cache_ttl_secs,
    } = request;
    Request {
        model: model.clone(),
        messages: messages[..lead.min(messages.len())].to_vec(),
        provider: provider.clone(),
        tools: tools.clone(),
        tool_choice: tool_choice.clone(),
        reasoning_effort: reasoning_effort.clone(),
        max_tokens: *max_tokens,
        temperature: *temperature,
        top_p: *top_p,
        stop_sequences: stop_sequences.clone(),
        provider_options: provider_options.clone(),
        cache_key: cache_key.clone(),
        cache_ttl_secs: *cache_ttl_secs,
    }
}

/// Whether `settings` equals [`settings_of`]`(request, lead)`, without building it.
fn same_settings(settings: &Request, request: &Request, lead: usize) -> bool {
    let Request {
        model,
        messages,
        provider,
        tools,
        tool_choice,
        reasoning_effort,
        max_tokens,
        temperature,
        top_p,
        stop_sequences,
        provider_options,
        cache_key,
        cache_ttl_secs,
    } = request;
    settings.model == *model
        && settings.messages[..] == messages[..lead.min(messages.len())]
        && settings.provider == *provider
        && settings.tools == *tools
        && settings.tool_choice == *tool_choice
        && settings.reasoning_effort == *reasoning_effort
        && settings.max_tokens == *max_tokens
        && settings.temperature == *temperature
        && settings.top_p == *top_p
        && settings.stop_sequences == *stop_sequences
        && settings.provider_options == *provider_options
        && settings.cache_key == *cache_key
        && settings.cache_ttl_secs == *cache_ttl_secs
}
