//! A session's background processes, seen from the session: the registry made from the
//! configuration, whose exits become `BACKGROUND_EXIT` events at once and whose starts,
//! exits and reads are recorded in the transcript; the notes the model gets at its next
//! turn; and [`BackgroundJob`], what [`Session::background`](super::Session::background)
//! lists for the host. The processes themselves run in the execution environment; this
//! module never starts one.

use std::io;
use std::sync::{Arc, Weak};
use std::time::SystemTime;

use super::config::SessionConfig;
use super::delivery::EventSink;
use super::events::EventKind;
use super::transcript::TranscriptWriter;
use crate::exec::ExecResult;
use crate::tools::background::jobs::{BackgroundJobs, JobEvent, Key};

/// A background process of a session, as [`Session::background`](super::Session::background)
/// lists it: what it is, whether it still runs, and a way to stop it.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use agentloop::exec::LocalExecutionEnvironment;
/// use agentloop::llm::Client;
/// use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
/// use agentloop::profiles;
/// use agentloop::session::{Session, SessionConfig};
/// use agentloop::serde_json::json;
///
/// // The model starts a server in the background and answers.
/// let model = ScriptedModel::new(vec![
///     ScriptedTurn::tool_call("shell", json!({"command": "sleep 60", "run_in_background": true})),
///     ScriptedTurn::text("The server runs."),
/// ]);
/// let client = Client::new().with_provider(model);
/// let profile = profiles::anthropic("claude-sonnet-4-5").with_provider_id("scripted");
/// let env = Arc::new(LocalExecutionEnvironment::new(std::env::temp_dir())?);
/// let session = Session::new(profile, env, client, SessionConfig::default())?;
/// session.run("start the server")?;
///
/// let running = session.background();
/// assert_eq!(running.len(), 1);
/// assert_eq!((running[0].id, running[0].command.as_str()), (1, "sleep 60"));
/// let stopped = running[0].kill()?;
/// assert!(stopped.cancelled);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BackgroundJob {
    /// Its id in the session (what the model names it by: 1, 2, 3 …).
    pub id: u64,
    /// Its process id, on the machine it runs on.
    pub pid: u32,
    /// The command line.
    pub command: String,
    /// When it started.
    pub started: SystemTime,
    /// How it ended, once it has: exit code or signal, duration, byte totals of its
    /// output (`stdout` and `stderr` are empty), `cancelled` when it was stopped.
    pub exit: Option<ExecResult>,
    jobs: Weak<BackgroundJobs>,
}

impl BackgroundJob {
    /// Stops it (its whole process group: SIGTERM, the grace, SIGKILL) and returns how it
    /// ended; the model hears of it at its next turn. What had ended returns its result.
    pub fn kill(&self) -> io::Result<ExecResult> {
        match self.jobs.upgrade() {
            Some(jobs) => jobs.kill(Key::Id(self.id)),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the session has ended, and its background processes with it",
            )),
        }
    }
}

/// The processes of `jobs` for the host.
pub(crate) fn list(jobs: &Arc<BackgroundJobs>) -> Vec<BackgroundJob> {
    jobs.jobs()
        .into_iter()
        .map(|job| BackgroundJob {
            exit: job
                .wait(
                    std::time::Duration::ZERO,
                    &crate::cancel::CancelToken::new(),
                )
                .or(job.exit),
            id: job.id,
            pid: job.pid,
            command: job.command,
            started: job.started,
            jobs: Arc::downgrade(jobs),
        })
        .collect()
}

/// The registry of a session: its limits from `config`, ids from `first_id` on (after a
/// resumed session's), exits told to `events` at once, starts, exits and reads recorded
/// in `transcript`.
pub(crate) fn registry(
    config: &SessionConfig,
    events: &EventSink,
    transcript: Option<Arc<TranscriptWriter>>,
    first_id: u64,
) -> Arc<BackgroundJobs> {
    let jobs = BackgroundJobs::new(config.background_limits(), first_id);
    let events = events.clone();
    jobs.observe(Arc::new(move |event: JobEvent<'_>| {
        if let Some(transcript) = &transcript {
            if let Some(failure) = transcript.background(&event) {
                events.emit(EventKind::Warning {
                    message: failure,
                    code: "transcript".to_string(),
                });
            }
        }
        if let JobEvent::Exited {
            id,
            pid,
            command,
            result,
        } = event
        {
            events.emit(EventKind::BackgroundExit {
                id,
                pid,
                command: command.to_string(),
                exit_code: result.exit_code,
                signal: result.signal,
                stopped: result.cancelled,
                duration_ms: u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
            });
        }
    }));
    jobs
}
