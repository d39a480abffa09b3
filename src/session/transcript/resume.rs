//! A session's side of its transcript file: the header every segment starts with (the
//! serialisable settings, never a hook), and resuming from a transcript (the recorded
//! history made valid for the provider, the new segment opened, the warnings to give).
//!
//! It reads and writes the transcript only; it never talks to a provider or runs a tool.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::{TRANSCRIPT_VERSION, Transcript, TranscriptHeader, TranscriptWriter};
use crate::error::{Error, ErrorKind, Result};
use crate::exec::ExecutionEnvironment;
use crate::llm::ToolResult;
use crate::profiles::ProviderProfile;
use crate::session::checkpoint::marks::{HistoryAt, Mark, Marks};
use crate::session::config::SessionConfig;
use crate::session::history::{History, Turn};

/// What a resumed session starts from.
pub(crate) struct Resumed {
    /// The recorded history, every call answered.
    pub(crate) history: History,
    /// The transcript the session goes on writing.
    pub(crate) writer: Arc<TranscriptWriter>,
    /// `WARNING` events (code `"transcript"`) to emit after `SESSION_START`.
    pub(crate) warnings: Vec<String>,
    /// The id of the session that started the transcript.
    pub(crate) first_session_id: String,
    /// The first id the resumed session's background processes get (after the recorded
    /// ones, so that an id never names two processes in one transcript).
    pub(crate) first_background_id: u64,
    /// The recorded marks (points to rewind to) and the checkpoint store they name.
    pub(crate) marks: (Marks, Option<std::path::PathBuf>),
}

/// The marks `recorded` holds, for a session continuing its current history, and the
/// checkpoint store the last of them names.
pub(crate) fn marks_of(recorded: &Transcript) -> (Marks, Option<std::path::PathBuf>) {
    let (records, next_seq) = recorded.marks();
    let epoch_start = recorded.epoch_start();
    let entries = records.iter().map(|record| Mark {
        seq: record.mark.seq,
        input: record.mark.input,
        round: record.mark.round,
        checkpoint: record.mark.checkpoint,
        store: record.mark.store.clone(),
        at: if record.start == epoch_start {
            HistoryAt::Current {
                epoch: 0,
                len: record.end - record.start,
            }
        } else {
            HistoryAt::Recorded {
                seq: record.mark.seq,
            }
        },
    });
    let store = records.iter().rev().find_map(|r| r.mark.store.clone());
    (Marks::from_entries(entries.collect(), next_seq), store)
}

/// `history` with an error result for each call the recording stopped in (so that it is
/// valid for the provider), and that turn.
pub(crate) fn repaired(mut history: History) -> (History, Option<Turn>) {
    let open_calls = history.unanswered_calls();
    let repair = (!open_calls.is_empty()).then(|| {
        Turn::tool_results(
            open_calls
                .iter()
                .map(|call| {
                    ToolResult::for_call(
                        call,
                        "Tool call not completed: the session stopped before it finished \
                         and was resumed later. Its effects, if any, are unknown; check \
                         before repeating it.",
                        true,
                    )
                })
                .collect(),
        )
    });
    if let Some(turn) = &repair {
        history.push(turn.clone());
    }
    (history, repair)
}

/// Reads the transcript at `source` for a new session `id` continuing it: its history, with
/// an error result for each call the recording stopped in, and the transcript it goes on
/// writing (see [`Session::resume`](crate::session::Session::resume)).
pub(crate) fn resume(
    source: &Path,
    id: &str,
    (profile, base_url): (&ProviderProfile, Option<&str>),
    env: &dyn ExecutionEnvironment,
    config: &SessionConfig,
) -> Result<Resumed> {
    let recorded = Transcript::read(source)?;
    let (mut history, repair) = repaired(recorded.history().clone());
    let (gone, first_background_id) = background_left(&recorded);
    if let Some(turn) = &gone {
        history.push(turn.clone());
    }
    history.check_tool_results().map_err(|problem| {
        Error::new(
            ErrorKind::Io,
            format!(
                "transcript `{}`: the recorded history is not valid: {problem}",
                source.display()
            ),
        )
    })?;

    let header = header(
        id,
        (profile, base_url),
        env,
        config,
        Some(recorded.last_session_id().to_string()),
    );
    let writer = TranscriptWriter::resume(
        source,
        &recorded,
        config.transcript_path.as_deref(),
        &header,
    )?;
    let mut warnings = Vec::new();
    for turn in repair.iter().chain(&gone) {
        if let Some(failure) = writer.turn(turn) {
            warnings.push(failure);
        }
    }
    if let Some(torn) = recorded.torn_last_line() {
        warnings.push(format!(
            "the transcript's last line was cut short ({} bytes) and was dropped: {}",
            torn.len(),
            excerpt(torn, 200)
        ));
    }
    let last = recorded.resumes().last().unwrap_or(recorded.header());
    if last.profile != profile.id || last.model != profile.model {
        warnings.push(format!(
            "resuming a session recorded with profile `{}` and model `{}` with profile \
             `{}` and model `{}`",
            last.profile, last.model, profile.id, profile.model
        ));
    }
    Ok(Resumed {
        history,
        writer,
        warnings,
        first_session_id: recorded.header().session_id.clone(),
        first_background_id,
        marks: marks_of(&recorded),
    })
}

/// The note for the model about the background processes the recorded session left
/// running (they ended with it), if any; and the first id after the recorded ones.
fn background_left(recorded: &Transcript) -> (Option<Turn>, u64) {
    let records = recorded.background_records();
    let next_id = records.iter().map(|r| r.id + 1).max().unwrap_or(1);
    let running: Vec<String> = records
        .iter()
        .filter(|r| r.event == "start")
        .filter(|start| {
            !records
                .iter()
                .any(|r| r.event == "exit" && r.id == start.id)
        })
        .map(|start| {
            format!(
                "process {} (`{}`)",
                start.id,
                start.command.as_deref().unwrap_or("?")
            )
        })
        .collect();
    let note = (!running.is_empty()).then(|| {
        Turn::steering(format!(
            "[This session was resumed from its transcript. The background processes it had \
             running ended with the earlier session and no longer run: {}. Start them again \
             if they are still needed.]",
            running.join(", ")
        ))
    });
    (note, next_id)
}

/// The header of session `id`'s transcript segment.
pub(crate) fn header(
    id: &str,
    (profile, base_url): (&ProviderProfile, Option<&str>),
    env: &dyn ExecutionEnvironment,
    config: &SessionConfig,
    resumed_from: Option<String>,
) -> TranscriptHeader {
    TranscriptHeader {
        version: TRANSCRIPT_VERSION,
        session_id: id.to_string(),
        profile: profile.id.clone(),
        model: profile.model.clone(),
        base_url: base_url.map(public_url),
        working_directory: env.working_directory().to_string_lossy().into_owned(),
        started_at: std::time::SystemTime::now(),
        config: config_record(config),
        resumed_from,
    }
}

/// `url` without what could be a secret: user name and password, query, fragment.
fn public_url(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or(url);
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority
                .rsplit_once('@')
                .map_or(authority, |(_, host)| host);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_string(),
    }
}

/// The serialisable settings of `config` for a transcript header (never the approval
/// hook or the hooks themselves: only which events have hooks).
fn config_record(config: &SessionConfig) -> Value {
    serde_json::json!({
        "max_turns": config.max_turns,
        "max_tool_rounds_per_input": config.max_tool_rounds_per_input,
        // Milliseconds, as the transcript format has always recorded them.
        "default_command_timeout_ms": config.default_command_timeout.map(millis),
        "max_command_timeout_ms": millis(config.max_command_timeout),
        "reasoning_effort": config.reasoning_effort,
        "tool_output_limits": config.tool_output_limits,
        "tool_line_limits": config.tool_line_limits,
        "enable_loop_detection": config.enable_loop_detection,
        "loop_detection_window": config.loop_detection_window,
        "max_subagent_depth": config.max_subagent_depth,
        "approval_hook": config.approval.is_some(),
        "hooks": config.hooks.events().iter().map(|e| e.name()).collect::<Vec<_>>(),
        "allow_outside_working_dir": config.allow_outside_working_dir,
        "transcript_events": config.transcript_events,
        "checkpoints": config.checkpoints.enabled,
    })
}

/// The first `max` characters of `text`, with `…` when cut.
fn excerpt(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

/// A duration in whole milliseconds, saturating (the transcript header's unit).
fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_recorded_base_url_keeps_no_user_information_query_or_fragment() {
        assert_eq!(
            super::public_url("https://user:secret@example.test:8443/v1?key=k#x"),
            "https://example.test:8443/v1"
        );
        assert_eq!(
            super::public_url("http://127.0.0.1:8080/v1"),
            "http://127.0.0.1:8080/v1"
        );
    }
}
