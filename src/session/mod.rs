//! Sessions: the agentic loop on a worker thread, driven from a handle (spec §2).
//!
//! A [`Session`] owns one named worker thread (`agentloop-session-{short id}`) that runs the
//! loop: stream the model's answer, run the tool calls it asks for, append the results,
//! repeat until the model answers with text only. The handle is `Send + Sync` and never
//! blocks the host except in [`Session::run`] (which waits for its input by design) and in
//! `Drop` (which joins the worker after aborting it).
//!
//! ```
//! use std::sync::Arc;
//! use agentloop::exec::LocalExecutionEnvironment;
//! use agentloop::llm::Client;
//! use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
//! use agentloop::profiles::ProviderProfile;
//! use agentloop::session::{EventKind, Session, SessionConfig};
//!
//! let model = ScriptedModel::new(vec![ScriptedTurn::text("All tests pass.")]);
//! let client = Client::new().with_provider(model);
//! let profile = ProviderProfile::new("scripted", "demo");
//! let env = Arc::new(LocalExecutionEnvironment::new(std::env::temp_dir())?);
//! let session = Session::new(profile, env, client, SessionConfig::default())?;
//! let events = session.events();
//! session.submit("run the tests")?;
//! session.close();
//! let mut text = String::new();
//! for event in events {
//!     if let EventKind::AssistantTextDelta { delta } = &event.kind {
//!         text.push_str(delta);
//!     }
//! }
//! assert_eq!(text, "All tests pass.");
//! # Ok::<(), agentloop::Error>(())
//! ```
//!
//! # Control
//!
//! - [`submit`](Session::submit) queues an input; [`run`](Session::run) submits and waits
//!   for the outcome.
//! - [`steer`](Session::steer) injects a message at the next point the loop allows: before
//!   the first model call of an input, after each tool round, and after a text-only answer
//!   (the loop then continues so the model answers the steer; a steer is never silently
//!   deferred to the next input). While idle, it waits for the next input.
//! - [`follow_up`](Session::follow_up) queues an input that runs after the current one
//!   completes (at once when idle).
//! - [`interrupt`](Session::interrupt) stops the current input only: the stream is closed,
//!   running commands are killed, pending tool calls get "interrupted" results, and the
//!   session returns to idle.
//! - [`abort`](Session::abort) stops everything and closes the session (graceful shutdown
//!   of spec Appendix B); [`close`](Session::close) closes it after the queued inputs.
//!
//! # Errors
//!
//! Tool failures become error results the model sees. Provider errors end the current
//! input with an `ERROR` event: authentication, access denied, not found, invalid request,
//! quota and configuration errors also close the session (`SESSION_END`); a context-length
//! error adds a `WARNING` and the session stays usable; retryable errors that still failed
//! after the client's retries end the input only, and the session returns to idle.
//!
//! # Invariant
//!
//! After any stop — completion, limit, interrupt, abort, error — every tool call in the
//! history has exactly one result ([`History::check_tool_results`]).
//!
//! # Transcripts
//!
//! With [`SessionConfig::transcript_path`] set, the session writes its history (and the
//! requests it sends, and optionally every event) to a JSON Lines file as it runs;
//! [`Session::resume`] continues a session from such a file. See [`transcript`].

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use crossbeam_channel::{Receiver, Sender};

use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::exec::ExecutionEnvironment;
use crate::llm::{Client, Usage};
use crate::profiles::ProviderProfile;

mod approval;
mod background;
mod budget;
pub mod checkpoint;
mod compact;
pub mod compaction;
mod config;
mod delivery;
mod events;
mod fallback;
mod history;
mod hook_commands;
mod hook_runner;
mod hooks;
mod inbox;
mod input_events;
mod launch;
mod start;
pub(crate) use start::Start;
pub(crate) mod ledger;
mod loop_detection;
mod mcp;
mod mode;
mod model_call;
mod run_structured;
mod structured;
mod subagents;
mod tool_round;
mod trajectory;
pub mod transcript;
mod usage;
mod worker;

pub use approval::{Approval, ApprovalHook, ApprovalResponder};
pub use background::BackgroundJob;
pub use budget::{Budget, BudgetKind, BudgetScope};
pub use config::SessionConfig;
pub use delivery::{Events, RecvError};
pub use events::{CloseReason, EventKind, SessionEvent, SessionState, StopReason};
pub use history::{
    AssistantTurn, History, SteeringTurn, SummaryTurn, SystemTurn, ToolResultsTurn, Turn, UserTurn,
};
pub use hook_commands::HookCommands;
pub use hooks::{Hook, HookDecision, HookEvent, HookInput, Hooks, PromptSource};
pub use mode::SessionMode;
pub use trajectory::TrajectoryWriter;

use checkpoint::marks::Marks;
use checkpoint::{Fork, Rewind, RewindReport};
use delivery::{Forward, Listeners};
use subagents::ParentShare;
use transcript::TranscriptWriter;
use transcript::resume;
use worker::{Input, Shared};

use crate::sync::lock;

/// What [`Session::run`] returns: how the input (and the follow-ups it triggered) ended.
#[derive(Debug)]
#[non_exhaustive]
pub struct Outcome {
    /// The final answer text of the last input processed (empty if it ended without one).
    pub text: String,
    /// Why the last input processed stopped.
    pub stop_reason: StopReason,
    /// Tool rounds run, over every input processed.
    pub rounds: usize,
    /// Token counts summed over every model call (with cache and reasoning tokens where
    /// the provider reports them).
    pub usage: Usage,
    /// What those calls cost in US dollars, when every call's model has a price in
    /// [`SessionConfig::prices`]; `None` otherwise.
    pub cost_usd: Option<f64>,
    /// The reason a `user_prompt_submit` hook gave for blocking the last input, when
    /// `stop_reason` is `Blocked`.
    pub blocked: Option<String>,
    /// Inputs processed: the submitted one plus the follow-ups that ran after it.
    pub inputs: usize,
    /// The provider error that ended the last input, when `stop_reason` is `Error` (or
    /// the [`ErrorKind::StructuredOutput`] error, when it is `StructuredOutputFailed`).
    /// [`Session::run`] and [`Session::run_structured`] return such an error as their
    /// `Err`, so in their `Outcome` this is always `None`; it is set in outcomes delivered
    /// otherwise (subagents).
    pub error: Option<Error>,
    /// The final answer's value, from [`Session::run_structured`].
    pub output: Option<serde_json::Value>,
    /// The budget that stopped the last input, when `stop_reason` is `BudgetExhausted`.
    pub budget: Option<(BudgetKind, BudgetScope)>,
}

/// A coding-agent session: a worker thread running the agentic loop, and this handle.
///
/// See the [module documentation](self) for control, errors and the invariant, and
/// [`EventKind`] for the order of events.
pub struct Session {
    id: String,
    inbox: Sender<Input>,
    events: Receiver<crate::session::SessionEvent>,
    listeners: Arc<Listeners>,
    shared: Arc<Shared>,
    abort: CancelToken,
    worker: Mutex<Option<JoinHandle<()>>>,
    mcp: Option<mcp::SharedMcp>,
    /// [`SessionConfig::structured_output_retries`], for `run_structured`.
    structured_output_retries: usize,
    background: Arc<crate::tools::background::jobs::BackgroundJobs>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Creates a session and starts its worker thread, which emits `SESSION_START`.
    ///
    /// The worker captures the environment block and the project instruction files for
    /// the system prompt once, when it starts ([`ProviderProfile::capture_environment`]).
    /// With `config.max_subagent_depth` 0 the profile's subagent tools are removed.
    ///
    /// The first session of the process raises its soft limit on open descriptors
    /// (`RLIMIT_NOFILE`) to the hard limit, so that hundreds of sessions at once do not run
    /// out; every process the library starts gets the host's own limit back (see
    /// "Open descriptors" in ARCHITECTURE.md).
    /// [`LocalExecutionEnvironment::keep_open_file_limit`](crate::exec::LocalExecutionEnvironment::keep_open_file_limit)
    /// turns that off.
    ///
    /// Fails with a configuration error if no provider of `client` answers the profile's
    /// id (or a fallback profile's), if a cost budget is set and a model the session may
    /// call has no price, or if the prompt-cache TTL is neither 5 minutes nor 1 hour; with
    /// an I/O error if the thread cannot be started, and with an I/O error if
    /// [`SessionConfig::transcript_path`] is set and the file cannot be created (it must
    /// not exist yet).
    pub fn new(
        profile: ProviderProfile,
        env: Arc<dyn ExecutionEnvironment>,
        client: Client,
        config: SessionConfig,
    ) -> Result<Session> {
        Session::start(profile, env, client, config, 0, None, None)
    }

    /// [`new`](Self::new) for a session at subagent `depth` whose events go to `forward`
    /// (a subagent's parent) instead of its own stream, sharing what `parent` shares: its
    /// spending is charged to the parent's ledger too, and it uses the parent's MCP servers
    /// (their connections are shared, no server is started again). A subagent writes no
    /// transcript of its own: its events reach the parent's (recorded there with the
    /// parent's events, when the parent records events).
    pub(crate) fn start(
        profile: ProviderProfile,
        env: Arc<dyn ExecutionEnvironment>,
        client: Client,
        config: SessionConfig,
        depth: usize,
        forward: Option<Forward>,
        parent: Option<ParentShare>,
    ) -> Result<Session> {
        model_call::check_provider(&client, &profile)?;
        crate::exec::process::open_files::raise();
        let id = new_session_id();
        let transcript = match (&config.transcript_path, &forward) {
            (Some(path), None) => {
                let url = model_call::base_url(&client, &profile);
                let header = resume::header(&id, (&profile, url), &*env, &config, None);
                Some(TranscriptWriter::create(path, &header)?)
            }
            _ => None,
        };
        let start = Start {
            depth,
            forward,
            history: History::new(),
            transcript,
            warnings: Vec::new(),
            budget_parent: parent.as_ref().map(|p| p.ledger.clone()),
            cache_key: None,
            mcp: parent.and_then(|p| p.mcp),
            first_background_id: 1,
            marks: (Marks::default(), None),
            fork: false,
        };
        launch::launch(id, profile, env, client, config, start)
    }

    /// Starts a new session from the history of the session recorded at `transcript_path`
    /// ([`Fork::latest`] or [`Fork::at_input`]), leaving that transcript untouched: the
    /// new session has its own id, writes its own transcript (`config.transcript_path`,
    /// which must be a new file) and takes its own checkpoints. The fork's profile,
    /// environment, client and configuration replacements are ignored here: the arguments
    /// are the new session's.
    ///
    /// Fails like [`Session::resume`], and with an error of kind `InvalidRequest` when the
    /// transcript has no input `at`.
    pub fn fork_from(
        transcript_path: impl AsRef<Path>,
        fork: Fork,
        profile: ProviderProfile,
        env: Arc<dyn ExecutionEnvironment>,
        client: Client,
        config: SessionConfig,
    ) -> Result<Session> {
        let start = checkpoint::lifecycle::fork_from(transcript_path.as_ref(), fork.at)?;
        launch_fork(checkpoint::lifecycle::ForkPlan {
            profile,
            env,
            client,
            config,
            start,
        })
    }

    /// Continues the session recorded in the transcript at `transcript_path`: a new
    /// session (with a new id) whose history is the recorded one, so that its next
    /// request holds the earlier conversation exactly as the recorded session would have
    /// sent it (thinking signatures and reasoning items included).
    ///
    /// The records go on at the end of the same transcript, after a new header whose
    /// `resumed_from` names the recorded session — or, when `config.transcript_path` names
    /// another file, into that new file, which starts with a copy of the recorded ones. A
    /// torn last line (a crash cut it short) is dropped first, with a `WARNING` event. If
    /// the recording stopped while tool calls ran, each gets an error result saying its
    /// effects are unknown, so the history is valid for the provider. A profile or model
    /// other than the recorded one is allowed (with a `WARNING`); `max_turns` counts the
    /// recorded responses too.
    ///
    /// Fails like [`Session::new`], and with an I/O error when the transcript cannot be
    /// read or its history is invalid.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use agentloop::exec::LocalExecutionEnvironment;
    /// use agentloop::llm::Client;
    /// use agentloop::profiles::ProviderProfile;
    /// use agentloop::session::{Session, SessionConfig};
    ///
    /// let profile = ProviderProfile::new("anthropic", "claude-sonnet-4-5");
    /// let env = Arc::new(LocalExecutionEnvironment::new("/src/app")?);
    /// let client = Client::from_env()?;
    /// let session = Session::resume("session.jsonl", profile, env, client, SessionConfig::default())?;
    /// let outcome = session.run("now update the changelog")?;
    /// # Ok::<(), agentloop::Error>(())
    /// ```
    pub fn resume(
        transcript_path: impl AsRef<Path>,
        profile: ProviderProfile,
        env: Arc<dyn ExecutionEnvironment>,
        client: Client,
        config: SessionConfig,
    ) -> Result<Session> {
        model_call::check_provider(&client, &profile)?;
        let id = new_session_id();
        let url = model_call::base_url(&client, &profile);
        let resumed = resume::resume(
            transcript_path.as_ref(),
            &id,
            (&profile, url),
            &*env,
            &config,
        )?;
        let start = Start {
            depth: 0,
            forward: None,
            history: resumed.history,
            transcript: Some(resumed.writer),
            warnings: resumed.warnings,
            budget_parent: None,
            cache_key: Some(resumed.first_session_id),
            mcp: None,
            first_background_id: resumed.first_background_id,
            marks: resumed.marks,
            fork: false,
        };
        launch::launch(id, profile, env, client, config, start)
    }

    /// The session id: a UUID v4-formatted string, unique within and across processes in
    /// practice (see `new_session_id`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The lifecycle state now.
    pub fn state(&self) -> SessionState {
        *lock(&self.shared.state)
    }

    /// A snapshot of the conversation history.
    pub fn history(&self) -> History {
        lock(&self.shared.history).clone()
    }

    /// The whole session's event stream: a blocking iterator that ends after
    /// `SESSION_END`, that is, only once the session is closed ([`close`](Self::close)
    /// after the last input, an abort, or a fatal error). For one input at a time, use
    /// [`submit_events`](Self::submit_events), whose iterator ends with the input; to
    /// wait for an input without reading events, use [`run`](Self::run).
    ///
    /// Events are buffered from the start (so `SESSION_START` is never missed) until an
    /// iterator reads them. While [`run`](Self::run) waits and no iterator exists, events
    /// are dropped instead of buffered (see `run`).
    ///
    /// # Panics
    ///
    /// If another iterator of this session (from `events` or `submit_events`) is still
    /// alive: each event is delivered once, so two iterators would each see part of the
    /// stream. Share one iterator (or forward its events) instead.
    pub fn events(&self) -> Events {
        assert!(
            self.listeners.iterators() == 0,
            "Session::events: another event iterator of this session is still alive; two \
             iterators would each get part of the stream. Keep one iterator, or drop the \
             first before creating another"
        );
        Events::new(self.events.clone(), self.listeners.clone())
    }

    /// The background processes the model started in this session (or that a foreground
    /// command moved to the background), oldest first: running ones and the ones that
    /// ended, until the cap makes room or the session ends. [`BackgroundJob::kill`] stops
    /// one; the session stops all of them when it ends (close, abort, drop), before its
    /// `SESSION_END`.
    pub fn background(&self) -> Vec<BackgroundJob> {
        background::list(&self.background)
    }

    /// Queues `input` for processing; returns at once.
    pub fn submit(&self, input: impl Into<String>) -> Result<()> {
        self.send(Input::Submit {
            text: input.into(),
            reply: None,
            structured: None,
        })
    }

    /// Submits `input` and waits until it — and the follow-ups queued meanwhile — have been
    /// processed.
    ///
    /// Works whether or not the host iterates [`events`](Self::events). When no `Events`
    /// iterator exists, the events already buffered are discarded when `run` starts and
    /// the worker drops the events it emits while `run` waits (except `SESSION_END`), so a
    /// host that only calls `run` never accumulates events. Create the iterator before
    /// calling `run` to see them.
    ///
    /// Returns `Err` when the input ended because the provider failed (404, 401, a
    /// network error, a fatal stream error, a strict replay mismatch: the error the
    /// `ERROR` event reported), or when the session is closed (or closed before
    /// processing the input). Limits, interrupts and aborts are not failures: they are
    /// `Ok`, with their [`StopReason`] in the [`Outcome`].
    pub fn run(&self, input: impl Into<String>) -> Result<Outcome> {
        let _waiting = self.listeners.run_guard();
        if self.listeners.iterators() == 0 {
            while self.events.try_recv().is_ok() {}
        }
        let (reply, outcome) = crossbeam_channel::bounded(1);
        self.send(Input::Submit {
            text: input.into(),
            reply: Some(reply),
            structured: None,
        })?;
        self.outcome_of(&outcome)
    }

    /// Waits for the outcome `run` or `run_structured` sent an input for; a provider error
    /// or a failed structured answer becomes the `Err`.
    fn outcome_of(&self, outcome: &Receiver<Outcome>) -> Result<Outcome> {
        let mut outcome = outcome.recv().map_err(|_| {
            Error::new(
                ErrorKind::SessionClosed,
                "the session closed before the input was processed",
            )
        })?;
        if matches!(
            outcome.stop_reason,
            StopReason::Error | StopReason::StructuredOutputFailed
        ) {
            if let Some(err) = outcome.error.take() {
                return Err(err);
            }
        }
        Ok(outcome)
    }

    /// Queues `input` and returns the receiver of its [`Outcome`] (sent once it and the
    /// follow-ups queued meanwhile are processed), without waiting.
    pub(crate) fn submit_with_reply(&self, input: String) -> Result<Receiver<Outcome>> {
        let (reply, outcome) = crossbeam_channel::bounded(1);
        self.send(Input::Submit {
            text: input,
            reply: Some(reply),
            structured: None,
        })?;
        Ok(outcome)
    }

    /// Compacts the history now (reason `manual`): waits until the inputs queued before it
    /// are processed, then summarises as an automatic compaction would, with its
    /// `CONTEXT_COMPACTION_START` / `END` events. Does nothing when compaction is off (see
    /// [`SessionConfig::with_compaction`]).
    pub fn compact(&self) -> Result<()> {
        let (reply, done) = crossbeam_channel::bounded(1);
        self.send(Input::Compact { reply })?;
        done.recv().map_err(|_| {
            Error::new(
                ErrorKind::SessionClosed,
                "the session closed before the compaction ran",
            )
        })
    }

    /// Puts the files, the history or both back as they were before an input (or a tool
    /// round); see [`checkpoint`] for what is recorded and the rules. Waits until the
    /// inputs queued before it are processed, then rewinds, records the rewind in the
    /// transcript and emits `REWOUND` (a dry run changes, records and emits nothing).
    ///
    /// Files the user changed since the agent's edit are left as they are and listed in
    /// [`RewindReport::conflicts`], unless [`Rewind::force`]. Fails with an
    /// `InvalidRequest` error when the session has no such input (or no file checkpoint
    /// for it), `Configuration` when the files are asked for and checkpoints are off, and
    /// `Io` when the store or git fails; then nothing was changed.
    pub fn rewind(&self, rewind: Rewind) -> Result<RewindReport> {
        let (reply, done) = crossbeam_channel::bounded(1);
        self.send(Input::Checkpoint(Box::new(move |parts| {
            let _ = reply.send(parts.rewind(rewind));
            None
        })))?;
        done.recv().map_err(|_| {
            Error::new(
                ErrorKind::SessionClosed,
                "the session closed before the rewind ran",
            )
        })?
    }

    /// Starts a new session from this one's history ([`Fork::latest`], or the history
    /// before an input with [`Fork::at_input`]): its own id, transcript (by default
    /// `<stem>.fork-<n>.jsonl` beside this one's), checkpoints, budgets and MCP server
    /// processes, the same profile, environment and client unless the fork replaces them.
    /// This session is not changed, and neither sees the other's later turns. Waits until
    /// the inputs queued before it are processed.
    pub fn fork(&self, fork: Fork) -> Result<Session> {
        let (reply, done) = crossbeam_channel::bounded(1);
        self.send(Input::Checkpoint(Box::new(move |parts| {
            let _ = reply.send(parts.fork(fork).and_then(launch_fork));
            None
        })))?;
        done.recv().map_err(|_| {
            Error::new(
                ErrorKind::SessionClosed,
                "the session closed before the fork ran",
            )
        })?
    }

    /// Queues a steering message for the model (spec §2.6): injected as a user message
    /// after the current tool round, or before the next model call.
    pub fn steer(&self, message: impl Into<String>) -> Result<()> {
        self.ensure_open()?;
        lock(&self.shared.steering).push_back(message.into());
        Ok(())
    }

    /// Queues an input to process after the current one completes (at once when idle).
    pub fn follow_up(&self, message: impl Into<String>) -> Result<()> {
        self.ensure_open()?;
        lock(&self.shared.follow_ups).push_back(message.into());
        self.send(Input::FollowUp)
    }

    /// Sets the reasoning effort (`Some("low" | "medium" | "high")`, or a provider's own
    /// value; `None` for the provider default). Takes effect on the next model call, also
    /// within the current input.
    pub fn set_reasoning_effort(&self, effort: Option<String>) {
        *lock(&self.shared.reasoning_effort) = effort;
    }

    /// Switches the session to `mode` (see [`SessionMode`]) from the next input on: the
    /// input in progress, if any, finishes in the mode it started in. Fails only when the
    /// session is closed.
    pub fn set_mode(&self, mode: SessionMode) -> Result<()> {
        self.ensure_open()?;
        *lock(&self.shared.mode) = mode;
        Ok(())
    }

    /// The mode the next input runs in.
    pub fn mode(&self) -> SessionMode {
        *lock(&self.shared.mode)
    }

    /// Switches the model from the next input on (the provider stays the profile's; the
    /// context window and reasoning flag follow the model as in
    /// [`ProviderProfile::with_model`]). The history carries over. Fails only when the
    /// session is closed.
    pub fn set_model(&self, model: impl Into<String>) -> Result<()> {
        self.ensure_open()?;
        *lock(&self.shared.model) = Some(model.into());
        Ok(())
    }

    /// Stops the current input (if any): closes its stream, kills its commands, answers its
    /// pending tool calls with "interrupted" results, emits `PROCESSING_END`, and returns
    /// the session to idle. Queued inputs and follow-ups still run. Returns at once.
    pub fn interrupt(&self) {
        if let Some(token) = lock(&self.shared.current_input).as_ref() {
            token.cancel();
        }
    }

    /// Aborts the session: cancels the stream and running commands at once, then the
    /// worker shuts down (`PROCESSING_END` for the input in progress, environment cleanup,
    /// `SESSION_END`). Returns at once; `SESSION_END` follows within milliseconds when every
    /// tool honours cancellation.
    pub fn abort(&self) {
        self.abort.cancel();
        let _ = self.inbox.send(Input::Abort);
    }

    /// Closes the session after the inputs already queued: the worker processes them, then
    /// shuts down and emits `SESSION_END`. Returns at once; closing a closed session does
    /// nothing.
    pub fn close(&self) {
        let _ = self.inbox.send(Input::Close);
    }

    fn ensure_open(&self) -> Result<()> {
        if self.shared.closed.load(Ordering::SeqCst) {
            return Err(Error::new(
                ErrorKind::SessionClosed,
                "the session is closed and accepts no more input",
            ));
        }
        Ok(())
    }

    fn send(&self, input: Input) -> Result<()> {
        self.ensure_open()?;
        self.inbox.send(input).map_err(|_| {
            Error::new(
                ErrorKind::SessionClosed,
                "the session is closed and accepts no more input",
            )
        })
    }
}

impl Drop for Session {
    /// Aborts the session and joins its worker (which has joined every thread it started).
    fn drop(&mut self) {
        self.abort();
        let handle = lock(&self.worker).take();
        if let Some(handle) = handle {
            // A tool holding the last handle would drop it on the worker itself; joining
            // would wait forever, and the worker is about to end anyway.
            if handle.thread().id() != thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

/// Starts a fork the checkpoints prepared: its transcript and id, then its worker.
fn launch_fork(plan: checkpoint::lifecycle::ForkPlan) -> Result<Session> {
    let checkpoint::lifecycle::ForkPlan {
        profile,
        env,
        client,
        config,
        start,
    } = plan;
    let (id, start) = checkpoint::lifecycle::start_fork(&profile, &*env, &client, &config, start)?;
    launch::launch(id, profile, env, client, config, start)
}

/// A new session id: 128 bits formatted as a UUID v4 string.
///
/// The bits come from std's per-process random hasher keys mixed with the time, a
/// process-wide counter, the thread id and a stack address. Unique in practice, but not
/// cryptographic: do not use a session id as a secret.
pub(crate) fn new_session_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let keys = std::collections::hash_map::RandomState::new();
    let marker = 0u8;
    let mut halves = [0u64; 2];
    for (i, half) in halves.iter_mut().enumerate() {
        let mut hasher = keys.build_hasher();
        (i, count, std::process::id()).hash(&mut hasher);
        std::time::SystemTime::now().hash(&mut hasher);
        std::time::Instant::now().hash(&mut hasher);
        thread::current().id().hash(&mut hasher);
        (&marker as *const u8 as usize).hash(&mut hasher);
        *half = hasher.finish();
    }
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&halves[0].to_be_bytes());
    bytes[8..].copy_from_slice(&halves[1].to_be_bytes());
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_uuid_v4_shaped_and_distinct() {
        let ids: Vec<String> = (0..1000).map(|_| new_session_id()).collect();
        for id in &ids {
            assert_eq!(id.len(), 36, "{id}");
            let parts: Vec<&str> = id.split('-').collect();
            assert_eq!(
                parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
                [8, 4, 4, 4, 12]
            );
            assert!(parts[2].starts_with('4'), "{id}");
            assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{id}");
        }
        let unique: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
    }
}
