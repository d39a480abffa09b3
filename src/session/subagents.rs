//! Subagents (spec §7): child sessions a model starts with `spawn_agent`, steers with
//! `send_input`, collects with `wait` and ends with `close_agent` (the tools themselves are
//! defined in `tools/subagent.rs`; a session connects them to its [`Subagents`] at launch).
//!
//! A child is a full [`Session`] on its own worker thread with its own history. It uses
//! the parent's profile (the model can be overridden), the parent's client and
//! configuration (its own turn limit), the parent's execution environment — the same
//! filesystem — and the parent's MCP servers: their tools over the parent's connections
//! (no server is started for a child). A `working_dir` scopes the child: its environment resolves relative paths
//! and runs commands there, file tools keep it inside that directory unless the session
//! allows paths outside, and its system prompt names the directory. The child never
//! initialises or cleans up the shared environment; the parent owns it.
//!
//! `spawn_agent` returns the agent id at once and the child runs concurrently with its
//! parent (two children spawned in one round run at the same time). Every event of the
//! child reaches the parent's event stream wrapped as
//! [`EventKind::SubagentEvent`](crate::session::EventKind::SubagentEvent) with the agent id:
//!
//! ```json
//! {"kind":"subagent_event","session_id":"<parent>","timestamp":"…",
//!  "data":{"agent_id":"agent-1","event":{"kind":"tool_call_start","session_id":"<child>",…}}}
//! ```
//!
//! Depth: a session at depth `SessionConfig::max_subagent_depth` (default 1, so every
//! child) has none of the four tools, and the tools refuse to spawn there if a host
//! registered them anyway. Closing, aborting or dropping the parent closes every child
//! (graceful shutdown step 6) and joins its worker before the parent's `SESSION_END`; an
//! interrupt of the parent stops a `wait` in progress but leaves children running.
//!
//! This module starts sessions and nothing else: no process, no thread of its own.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crossbeam_channel::{Receiver, select};
use serde_json::{Value, json};

use super::budget::Budget;
use super::checkpoint::worktree::Worktree;
use super::config::SessionConfig;
use super::delivery::EventSink;
use super::events::StopReason;
use super::hook_runner::HookRunner;
use super::ledger::Ledger;
use super::mode::SessionMode;
use super::{Outcome, Session};
use crate::cancel::CancelToken;
use crate::exec::{
    CommandRequest, DirEntry, ExecResult, ExecutionEnvironment, FileContent, FileStat, GrepOptions,
    GrepOutput, OutputCallback,
};
use crate::llm::Client;
use crate::profiles::ProviderProfile;
use crate::sync::lock;
use crate::tools::subagent::{SpawnRequest, SubagentCall, SubagentHandler};
use crate::tools::{ToolContext, ToolOutput, ToolRegistry, args};

/// What a subagent reports when its work ends (spec §7.3). The `wait` tool returns it to
/// the model as JSON: `{"status": "completed" | "failed", "output", "success",
/// "turns_used"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubagentResult {
    /// The subagent's final answer text.
    pub(crate) output: String,
    /// Whether it finished naturally (the model answered with text only).
    pub(crate) success: bool,
    /// Model calls the subagent made over its whole life.
    pub(crate) turns_used: usize,
    /// For a subagent in its own worktree: its changes (`patch_file`, `changes`, `patch`,
    /// or `changes: "none"`).
    pub(crate) patch: Option<Value>,
}

/// Gives the session's tool registry its subagent tools: connected to `subagents`, or
/// removed when the session is at the maximum depth.
pub(crate) fn register(
    registry: &mut ToolRegistry,
    subagents: Weak<Subagents>,
    depth: usize,
    config: &SessionConfig,
) {
    if depth >= config.max_subagent_depth {
        crate::tools::subagent::remove(registry);
        return;
    }
    // Weak: the registry lives as long as the profile, which a host may clone and keep
    // (and which `Subagents` itself holds).
    let handler: SubagentHandler = Arc::new(move |call, ctx| match subagents.upgrade() {
        Some(subagents) => subagents.run(call, ctx),
        None => Err("the session has ended; no subagent can run".to_string()),
    });
    crate::tools::subagent::connect(registry, handler);
}

/// One running (or finished) child.
struct Child {
    session: Session,
    /// The outcome of the input in progress, until `wait` collects it.
    pending: Option<Receiver<Outcome>>,
    /// The last collected result.
    result: Option<SubagentResult>,
    /// A `wait` is in progress (one at a time per child).
    waiting: bool,
    /// Its own worktree, if it has one; removed after the session (declared after it, so
    /// dropped after the session's worker is joined).
    worktree: Option<Worktree>,
}

/// What a session needs to start children: the parent's profile, environment, client and
/// configuration, its event stream, its depth, and the children themselves.
///
/// Every session has one; the subagent tools reach it through the executors [`register`]
/// gives them.
pub(crate) struct Subagents {
    profile: ProviderProfile,
    env: Arc<dyn ExecutionEnvironment>,
    client: Client,
    config: SessionConfig,
    events: EventSink,
    /// The session's ledger: every child charges it too.
    ledger: Arc<Ledger>,
    depth: usize,
    /// The parent's MCP servers, shared with every child.
    mcp: Option<super::mcp::SharedMcp>,
    children: Mutex<BTreeMap<String, Child>>,
    spawned: AtomicUsize,
    closed: AtomicBool,
    /// The parent's mode cell: a child starts in the mode the parent is in.
    mode: Arc<Mutex<SessionMode>>,
    /// The environment as the host gave it (worktree children get it, rooted in their
    /// worktree) and the session's id.
    worktree_env: std::sync::OnceLock<(Arc<dyn ExecutionEnvironment>, String)>,
    /// Patch files of worktree children, removed when the session ends.
    patches: Mutex<Vec<PathBuf>>,
}

impl std::fmt::Debug for Subagents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subagents")
            .field("depth", &self.depth)
            .field("children", &lock(&self.children).keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Subagents {
    pub(crate) fn new(
        profile: ProviderProfile,
        env: Arc<dyn ExecutionEnvironment>,
        client: Client,
        config: SessionConfig,
        events: EventSink,
        depth: usize,
        share: ParentShare,
    ) -> Subagents {
        Subagents {
            profile,
            env,
            client,
            config,
            events,
            ledger: share.ledger,
            depth,
            mcp: share.mcp,
            children: Mutex::new(BTreeMap::new()),
            spawned: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            mode: share.mode,
            worktree_env: std::sync::OnceLock::new(),
            patches: Mutex::new(Vec::new()),
        }
    }

    /// Connects the subagent tools of `registry` (a fallback profile's) to these children.
    pub(crate) fn connect(self: &Arc<Self>, registry: &mut ToolRegistry) {
        register(registry, Arc::downgrade(self), self.depth, &self.config);
    }

    /// The environment worktree children start from, and the session id that names them.
    pub(crate) fn set_worktree_env(&self, env: Arc<dyn ExecutionEnvironment>, session: &str) {
        let _ = self.worktree_env.set((env, session.to_string()));
    }

    /// A worktree for child `id` and the directory it works in, when it asks for one (or
    /// the session's default says so).
    fn worktree_for(
        &self,
        request: &SpawnRequest<'_>,
        id: &str,
        directory: &Path,
    ) -> Result<Option<Isolated>, String> {
        if !request.worktree.unwrap_or(self.config.subagent_worktrees) {
            return Ok(None);
        }
        let Some((env, session)) = self.worktree_env.get() else {
            return Err("this session cannot give subagents worktrees".to_string());
        };
        if !env.files_are_local() {
            return Err(
                "isolation \"worktree\" needs the working tree on this machine; \
                        spawn the subagent without isolation"
                    .to_string(),
            );
        }
        let base = std::fs::canonicalize(env.working_directory()).map_err(|e| e.to_string())?;
        let worktree = Worktree::create(&base, session, id)?;
        let inside = std::fs::canonicalize(directory)
            .ok()
            .and_then(|d| d.strip_prefix(&base).ok().map(Path::to_path_buf))
            .unwrap_or_default();
        let dir = worktree.dir.join(inside);
        Ok(Some((worktree, env.clone(), dir)))
    }

    /// Runs one parsed call of a subagent tool.
    fn run(&self, call: SubagentCall<'_>, ctx: &ToolContext<'_>) -> Result<ToolOutput, String> {
        match call {
            SubagentCall::Spawn(request) => self.spawn(&request, ctx),
            SubagentCall::SendInput { id, message } => self.send_input(id, message),
            SubagentCall::Wait { id, timeout } => self.wait(id, timeout, ctx.cancel),
            SubagentCall::Close { id } => self.close(id),
        }
    }

    fn spawn(
        &self,
        request: &SpawnRequest<'_>,
        ctx: &ToolContext<'_>,
    ) -> Result<ToolOutput, String> {
        if self.depth >= self.config.max_subagent_depth {
            return Err(format!(
                "subagents cannot start further agents (the maximum depth of {} is reached); \
                 do this work yourself",
                self.config.max_subagent_depth
            ));
        }
        if self.closed.load(Ordering::SeqCst) || ctx.cancel.is_cancelled() {
            return Err("the session is stopping; no new subagent was started".to_string());
        }
        if request.task.trim().is_empty() {
            return Err("task is empty; describe the work for the subagent".to_string());
        }
        let directory = match request.working_dir {
            Some(raw) => {
                let path = args::resolve_path(ctx, raw)?;
                match ctx.env.stat(&path) {
                    Ok(stat) if stat.is_dir => path,
                    Ok(_) => {
                        return Err(format!("{raw} is a file; give a directory for working_dir"));
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        return Err(format!(
                            "{raw} does not exist; create the directory first or omit working_dir"
                        ));
                    }
                    Err(e) => return Err(format!("could not use {raw} as working_dir: {e}")),
                }
            }
            None => self.env.working_directory().to_path_buf(),
        };
        let number = self.spawned.fetch_add(1, Ordering::SeqCst) + 1;
        let id = format!("agent-{number}");
        let (worktree, base_env, directory) = match self.worktree_for(request, &id, &directory)? {
            Some((worktree, env, dir)) => (Some(worktree), env, dir),
            None => (None, self.env.clone(), directory),
        };
        let env: Arc<dyn ExecutionEnvironment> =
            Arc::new(SubagentEnvironment::new(base_env, directory.clone()));
        let mut profile = self.profile.clone();
        if let Some(model) = request.model {
            if self.ledger.has_cost_budget() && self.config.prices.price(model).is_none() {
                return Err(format!(
                    "model {model} has no price, and the session has a cost budget; start the \
                     subagent without a model to use the session's"
                ));
            }
            profile = profile.with_model(model);
        }
        let mut config = self.config.clone();
        config.max_turns = usize::try_from(request.max_turns).unwrap_or(usize::MAX);
        // The child spends its parent's budgets (its ledger charges the parent's), not
        // budgets of its own.
        config.input_budget = Budget::default();
        config.session_budget = Budget::default();
        for fallback in std::iter::once(&mut profile).chain(&mut config.fallback_models) {
            fallback.user_instructions = Some(child_instructions(
                fallback.user_instructions.as_deref(),
                &directory,
                worktree.is_some(),
            ));
        }
        config.mode = *lock(&self.mode);
        let session = Session::start(
            profile,
            env,
            self.client.clone(),
            config,
            self.depth + 1,
            Some(self.events.forwarding(&id)),
            Some(ParentShare {
                ledger: self.ledger.clone(),
                mcp: self.mcp.clone(),
                mode: self.mode.clone(),
            }),
        )
        .map_err(|e| format!("the subagent could not start: {e}"))?;
        let hooks = HookRunner {
            hooks: &self.config.hooks,
            events: &self.events,
            cwd: self.env.working_directory().to_string_lossy().into_owned(),
        };
        hooks.subagent(
            crate::session::HookEvent::SubagentStart,
            &id,
            Some(request.task),
            None,
        );
        let pending = session
            .submit_with_reply(request.task.to_string())
            .map_err(|e| format!("the subagent could not start: {e}"))?;
        let mut children = lock(&self.children);
        if self.closed.load(Ordering::SeqCst) {
            // The parent began closing meanwhile: do not leave this child behind.
            drop(children);
            drop(session);
            return Err("the session is stopping; no new subagent was started".to_string());
        }
        children.insert(
            id.clone(),
            Child {
                session,
                pending: Some(pending),
                result: None,
                waiting: false,
                worktree,
            },
        );
        Ok(ToolOutput::text(
            json!({"agent_id": id, "status": "running"}).to_string(),
        ))
    }

    fn send_input(&self, id: &str, message: &str) -> Result<ToolOutput, String> {
        let mut children = lock(&self.children);
        let child = self.child(&mut children, id)?;
        // A finished input whose outcome nobody collected yet: collect it now.
        if let Some(outcome) = child.pending.as_ref().and_then(|rx| rx.try_recv().ok()) {
            child.result = Some(result_of(&outcome, child, &self.patches));
            child.pending = None;
        }
        if child.pending.is_some() {
            child
                .session
                .steer(message)
                .map_err(|e| format!("{id} cannot take messages: {e}"))?;
            return Ok(ToolOutput::text(format!(
                "Message sent to {id}; it reaches the agent at its next step."
            )));
        }
        let pending = child
            .session
            .submit_with_reply(message.to_string())
            .map_err(|e| format!("{id} cannot take messages: {e}"))?;
        child.pending = Some(pending);
        child.result = None;
        Ok(ToolOutput::text(format!(
            "{id} had finished; it is now working on your message. Call wait to get its answer."
        )))
    }

    fn wait(
        &self,
        id: &str,
        timeout: Option<Duration>,
        cancel: &CancelToken,
    ) -> Result<ToolOutput, String> {
        let pending = {
            let mut children = lock(&self.children);
            let child = self.child(&mut children, id)?;
            let Some(pending) = child.pending.clone() else {
                return match &child.result {
                    Some(result) => Ok(result_output(result)),
                    None => Err(format!(
                        "{id} has no work in progress; give it some with send_input"
                    )),
                };
            };
            if child.waiting {
                return Err(format!(
                    "another wait for {id} is in progress; wait for one agent once at a time"
                ));
            }
            child.waiting = true;
            pending
        };
        let (cancelled_tx, cancelled) = crossbeam_channel::bounded::<()>(1);
        let _guard = cancel.on_cancel(move || {
            let _ = cancelled_tx.try_send(());
        });
        let never = crossbeam_channel::never();
        let deadline = match timeout {
            Some(timeout) => crossbeam_channel::after(timeout),
            None => never.clone(),
        };
        let received = select! {
            recv(pending) -> outcome => Some(outcome.ok()),
            recv(cancelled) -> _ => None,
            recv(deadline) -> _ => None,
        };
        let mut children = lock(&self.children);
        let Some(child) = children.get_mut(id) else {
            return Err(format!("{id} was closed while waiting for it"));
        };
        child.waiting = false;
        let outcome = match received {
            Some(outcome) => outcome,
            None if cancel.is_cancelled() => {
                return Err(format!(
                    "the wait was interrupted; {id} is still running (wait again or close it)"
                ));
            }
            None => {
                let waited = timeout.unwrap_or_default().as_millis();
                return Ok(ToolOutput::text(
                    json!({
                        "agent_id": id,
                        "status": "running",
                        "message": format!(
                            "{id} has not finished after {waited} ms; wait again later or close it"
                        ),
                    })
                    .to_string(),
                ));
            }
        };
        let result = match outcome {
            Some(outcome) => result_of(&outcome, child, &self.patches),
            None => SubagentResult {
                output: "the subagent closed before it finished".to_string(),
                success: false,
                turns_used: assistant_turns(&child.session),
                patch: None,
            },
        };
        child.pending = None;
        child.result = Some(result.clone());
        Ok(result_output(&result))
    }

    fn close(&self, id: &str) -> Result<ToolOutput, String> {
        let child = {
            let mut children = lock(&self.children);
            self.child(&mut children, id)?;
            children.remove(id)
        };
        let Some(child) = child else {
            return Err(format!("{id} is not a running subagent"));
        };
        let was_running = child.pending.is_some();
        child.session.abort();
        let turns_used = assistant_turns(&child.session);
        drop(child.session); // joins the child's worker
        let status = if was_running {
            "closed while running"
        } else {
            "closed"
        };
        let mut report = json!({"agent_id": id, "status": status, "turns_used": turns_used});
        if let Some(result) = child.result {
            report["output"] = Value::String(result.output);
            report["success"] = Value::Bool(result.success);
            if let Some(patch) = result.patch {
                report["patch"] = patch;
            }
        }
        drop(child.worktree); // after the session: removes the worktree and its branch
        Ok(ToolOutput::text(report.to_string()))
    }

    fn child<'a>(
        &self,
        children: &'a mut BTreeMap<String, Child>,
        id: &str,
    ) -> Result<&'a mut Child, String> {
        if !children.contains_key(id) {
            let known: Vec<&str> = children.keys().map(String::as_str).collect();
            return Err(if known.is_empty() {
                format!("there is no subagent {id}; start one with spawn_agent")
            } else {
                format!(
                    "there is no subagent {id}; the running subagents are {}",
                    known.join(", ")
                )
            });
        }
        Ok(children.get_mut(id).expect("checked above"))
    }

    /// Graceful shutdown step 6: aborts every child, then joins them all.
    pub(crate) fn close_all(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let children = std::mem::take(&mut *lock(&self.children));
        for child in children.values() {
            child.session.abort();
        }
        drop(children); // each drop joins its worker, then removes its worktree
        for patch in std::mem::take(&mut *lock(&self.patches)) {
            let _ = std::fs::remove_file(patch);
        }
    }
}

fn result_of(outcome: &Outcome, child: &Child, patches: &Mutex<Vec<PathBuf>>) -> SubagentResult {
    SubagentResult {
        output: match (&outcome.error, outcome.text.is_empty()) {
            (Some(error), true) => format!("the subagent stopped with an error: {error}"),
            _ => outcome.text.clone(),
        },
        success: outcome.stop_reason == StopReason::Completed,
        turns_used: assistant_turns(&child.session),
        patch: child
            .worktree
            .as_ref()
            .map(|worktree| patch_of(worktree, patches)),
    }
}

/// A worktree child's changes for its result: the patch file to apply, or why not.
fn patch_of(worktree: &Worktree, patches: &Mutex<Vec<PathBuf>>) -> Value {
    match worktree.patch() {
        Ok(Some(patch)) => {
            lock(patches).push(patch.file.clone());
            json!({
                "patch_file": patch.file,
                "changes": patch.stat,
                "apply": format!(
                    "its changes are not in your files yet: apply them with `git apply {}` \
                     (add --3way if your files changed meanwhile), or leave them",
                    patch.file.display()
                ),
                "patch": patch.text,
            })
        }
        Ok(None) => json!({"changes": "none"}),
        Err(error) => json!({"error": error}),
    }
}

fn result_output(result: &SubagentResult) -> ToolOutput {
    let status = if result.success {
        "completed"
    } else {
        "failed"
    };
    let mut output = json!({
        "status": status,
        "output": result.output,
        "success": result.success,
        "turns_used": result.turns_used,
    });
    if let Some(patch) = &result.patch {
        output["patch"] = patch.clone();
    }
    ToolOutput::text(output.to_string())
}

fn assistant_turns(session: &Session) -> usize {
    session.history().assistant_turns()
}

/// The last layer of a child's system prompt: the parent's override, then what a subagent
/// must know.
fn child_instructions(parent: Option<&str>, directory: &Path, worktree: bool) -> String {
    let mut text = String::new();
    if let Some(parent) = parent.map(str::trim).filter(|t| !t.is_empty()) {
        text.push_str(parent);
        text.push_str("\n\n");
    }
    if worktree {
        text.push_str(&format!(
            "You are a subagent. Another agent gave you the task in the user message and \
             receives your final answer as its result; nobody else reads your messages. You \
             work in your own git worktree at {}, a copy of the other agent's files: change \
             files there freely (do not commit); your changes go back to it as a patch. \
             Finish with a short report of what you did and found.",
            directory.display()
        ));
        return text;
    }
    text.push_str(&format!(
        "You are a subagent. Another agent gave you the task in the user message and receives \
         your final answer as its result; nobody else reads your messages. Work only on that \
         task and only inside {}. Other agents may be editing other files in the same tree at \
         the same time: leave files outside your task alone. Finish with a short report of \
         what you did and found.",
        directory.display()
    ));
    text
}

/// A worktree child's worktree, the environment it starts from and where it works.
type Isolated = (Worktree, Arc<dyn ExecutionEnvironment>, PathBuf);

/// The parent's environment as a child sees it: the same filesystem and processes, its own
/// working directory, and no say over the environment's lifecycle.
struct SubagentEnvironment {
    inner: Arc<dyn ExecutionEnvironment>,
    directory: PathBuf,
}

impl SubagentEnvironment {
    fn new(inner: Arc<dyn ExecutionEnvironment>, directory: PathBuf) -> SubagentEnvironment {
        SubagentEnvironment { inner, directory }
    }

    fn at(&self, path: &Path) -> PathBuf {
        self.directory.join(path)
    }
}

impl ExecutionEnvironment for SubagentEnvironment {
    fn read_file(
        &self,
        path: &Path,
        offset: Option<usize>,
        limit: Option<usize>,
    ) -> io::Result<FileContent> {
        self.inner.read_file(&self.at(path), offset, limit)
    }
    fn read_bytes(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read_bytes(&self.at(path))
    }
    fn write_file(&self, path: &Path, content: &[u8]) -> io::Result<()> {
        self.inner.write_file(&self.at(path), content)
    }
    fn write_file_if_unchanged(
        &self,
        path: &Path,
        content: &[u8],
        expected: &crate::exec::FileStat,
    ) -> io::Result<()> {
        self.inner
            .write_file_if_unchanged(&self.at(path), content, expected)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(&self.at(path))
    }
    fn file_exists(&self, path: &Path) -> bool {
        self.inner.file_exists(&self.at(path))
    }
    fn stat(&self, path: &Path) -> io::Result<FileStat> {
        self.inner.stat(&self.at(path))
    }
    fn list_directory(&self, path: &Path, depth: usize) -> io::Result<Vec<DirEntry>> {
        self.inner.list_directory(&self.at(path), depth)
    }
    fn exec_command(
        &self,
        request: &CommandRequest,
        on_output: OutputCallback<'_>,
        cancel: &CancelToken,
    ) -> io::Result<ExecResult> {
        let mut request = request.clone();
        request.working_dir = Some(match &request.working_dir {
            Some(dir) => self.at(dir),
            None => self.directory.clone(),
        });
        self.inner.exec_command(&request, on_output, cancel)
    }
    fn start_background(
        &self,
        request: &CommandRequest,
        output_limit: usize,
        on_exit: crate::exec::ExitCallback,
    ) -> io::Result<Box<dyn crate::exec::BackgroundProcess>> {
        let mut request = request.clone();
        request.working_dir = Some(match &request.working_dir {
            Some(dir) => self.at(dir),
            None => self.directory.clone(),
        });
        self.inner.start_background(&request, output_limit, on_exit)
    }
    fn grep(&self, pattern: &str, path: &Path, options: &GrepOptions) -> io::Result<GrepOutput> {
        self.inner.grep(pattern, &self.at(path), options)
    }
    fn glob(&self, pattern: &str, path: &Path) -> io::Result<Vec<String>> {
        self.inner.glob(pattern, &self.at(path))
    }
    fn initialize(&self) -> io::Result<()> {
        Ok(()) // the parent initialised the shared environment
    }
    fn cleanup(&self) -> io::Result<()> {
        Ok(()) // the parent cleans it up when it ends
    }
    fn working_directory(&self) -> &Path {
        &self.directory
    }
    // The parent's session already emitted the environment's warnings.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
    crate::forward_execution_environment!(self.inner =>
        platform, os_version, max_command_timeout, files_are_local);
}

/// What a session shares with the subagents it starts: its ledger (a child's spending
/// is charged to it too), its MCP servers, and its mode cell (a child starts in the mode
/// the parent is in).
pub(crate) struct ParentShare {
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) mcp: Option<super::mcp::SharedMcp>,
    pub(crate) mode: Arc<Mutex<SessionMode>>,
}

/// This session's children. The profile's subagent tools are connected to them (or removed
/// at the maximum depth), and the children start from a copy of the profile: each connects
/// the tools to its own children in turn (or removes them), replacing this connection.
/// Connected first, so that the copy shares its tools.
pub(crate) fn connect(
    profile: &mut ProviderProfile,
    env: &Arc<dyn ExecutionEnvironment>,
    client: &Client,
    config: &SessionConfig,
    events: &EventSink,
    depth: usize,
    share: ParentShare,
) -> Arc<Subagents> {
    Arc::new_cyclic(|weak| {
        register(&mut profile.tool_registry, weak.clone(), depth, config);
        Subagents::new(
            profile.clone(),
            env.clone(),
            client.clone(),
            config.clone(),
            events.clone(),
            depth,
            share,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_instructions_name_its_directory_after_the_parents() {
        let text = child_instructions(Some("Answer in French."), Path::new("/w/sub"), false);
        assert!(text.starts_with("Answer in French.\n\nYou are a subagent."));
        assert!(text.contains("only inside /w/sub"));
    }
}
