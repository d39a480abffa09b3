//! Starting a session from a [`Start`]: the shared state, the MCP servers, the event sink, the subagents, the background
//! processes, the checkpoints and the compaction state, then the named worker thread.

use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use super::checkpoint::lifecycle::Checkpoints;
use super::compact::CompactionState;
use super::delivery::{EventSink, Listeners};
use super::history::History;
use super::ledger::{Ledger, Meter};
use super::loop_detection::LoopDetector;
use super::start::Start;
use super::subagents::ParentShare;
use super::worker::{Shared, Worker};
use super::{
    Session, SessionConfig, background, compact, fallback, mcp, mode, model_call, subagents,
};
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::exec::ExecutionEnvironment;
use crate::llm::Client;
use crate::profiles::ProviderProfile;
use crate::sync::lock;

/// The compaction state of a session starting with `history`: budgets from the
/// configuration and the profile's window (none when compaction is off).
fn compaction_state(
    config: &SessionConfig,
    profile: &ProviderProfile,
    history: &History,
) -> CompactionState {
    CompactionState::new(compact::limits_for(config, profile), history)
}

/// Starts the session's named worker thread.
fn spawn_worker(short_id: &str, worker: Worker) -> Result<JoinHandle<()>> {
    thread::Builder::new()
        .name(format!("agentloop-session-{short_id}"))
        .spawn(move || worker.run())
        .map_err(|err| {
            Error::new(
                ErrorKind::Io,
                format!("failed to start the session thread: {err}"),
            )
            .with_source(err)
        })
}

/// Starts the worker of session `id` from `start`: the approval policy as a hook, the
/// shared state, the MCP servers, the event sink, the subagents and the compaction
/// state, then the named thread.
pub(crate) fn launch(
    id: String,
    mut profile: ProviderProfile,
    env: Arc<dyn ExecutionEnvironment>,
    client: Client,
    mut config: SessionConfig,
    start: Start,
) -> Result<Session> {
    model_call::check_controls(&client, &profile, &config)?;
    // The approval policy is one pre_tool_use hook, after the host's own (subagents
    // get the converted config, so it is converted once).
    if let Some(approval) = config.approval.take() {
        config.hooks = std::mem::take(&mut config.hooks).with_approval(approval);
    }
    let short_id: String = id.chars().take(8).collect();
    let (inbox, inbox_rx) = crossbeam_channel::unbounded();
    let (event_tx, event_rx) = crossbeam_channel::unbounded();
    let listeners = Arc::new(Listeners::default());
    let shared = Arc::new(Shared::default());
    *lock(&shared.reasoning_effort) = config.reasoning_effort.clone();
    *lock(&shared.mode) = config.mode;
    let history_chars = start.history.approx_chars();
    // A fork's budget is its own: the parent's calls are not counted again.
    let assistant_turns = if start.fork {
        0
    } else {
        start.history.assistant_turns()
    };
    let transcript_path = start.transcript.as_ref().map(|w| w.path().to_path_buf());
    let (checkpoints, env) = Checkpoints::start(
        &config,
        &id,
        env,
        transcript_path.as_deref(),
        start.depth,
        start.marks,
    );
    let compaction = compaction_state(&config, &profile, &start.history);
    *lock(&shared.history) = start.history;
    let abort = CancelToken::new();
    // MCP servers start now, in parallel, off the host's thread (subagents share
    // their parent's).
    let mcp_owner = start.mcp.is_none();
    let mcp = mcp::start(&config, env.working_directory(), start.mcp, &abort);
    let mut events = EventSink::new(event_tx, Arc::from(id.as_str()), listeners.clone())
        .forwarded_to(start.forward);
    if config.transcript_events {
        if let Some(writer) = &start.transcript {
            events = events.with_transcript(writer.clone());
        }
    }
    let ledger = Ledger::new(&config, start.budget_parent);
    let subagents = subagents::connect(
        &mut profile,
        &env,
        &client,
        &config,
        &events,
        start.depth,
        ParentShare {
            ledger: ledger.clone(),
            mcp: mcp.clone(),
            mode: shared.mode.clone(),
        },
    );
    let background = background::registry(
        &config,
        &events,
        start.transcript.clone(),
        start.first_background_id,
    );
    subagents.set_worktree_env(checkpoints.raw_env.clone(), &id);
    let worker = Worker {
        budget: Meter::new(ledger, &config),
        cache_key: start.cache_key.unwrap_or_else(|| id.clone()),
        fallback: fallback::Chain::new(&config.fallback_models),
        structured: None,
        mode: mode::ModeState::new(&env),
        compaction,
        short_id: short_id.clone(),
        loop_detector: LoopDetector::new(config.loop_detection_window),
        profile,
        env,
        client,
        config,
        shared: shared.clone(),
        events,
        subagents,
        inbox: inbox_rx,
        abort: abort.clone(),
        history_chars,
        assistant_turns,
        context_warned: false,
        transcript: start.transcript,
        startup_warnings: start.warnings,
        totals: Default::default(),
        mcp: mcp.clone(),
        mcp_owner,
        mcp_registered: Default::default(),
        background: background.clone(),
        checkpoints,
    };
    let structured_output_retries = worker.config.structured_output_retries;
    let handle = spawn_worker(&short_id, worker)?;
    Ok(Session {
        structured_output_retries,
        id,
        inbox,
        events: event_rx,
        listeners,
        shared,
        abort,
        worker: Mutex::new(Some(handle)),
        mcp,
        background,
    })
}
