//! One ACP session: the library [`Session`] it drives, built from the host's parts with the
//! hooks of its permission policy and of the images of edited files (for diffs), and the
//! thread that maps its events ([`pump`](super::pump)). It never writes files itself: it
//! only reads the files a call edits, through the session's environment.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use serde_json::{Value, json};

use super::files::{ClientFiles, ClientFs};
use super::mapping;
use super::pump::Pump;
use super::rpc::{Connection, RpcError, code};
use super::state::{Image, Policy, Prompt, Shared};
use super::{AcpAgent, SessionParts};
use crate::exec::ExecutionEnvironment;
use crate::mcp::McpServer;
use crate::session::{HookDecision, HookInput, Hooks, Session, SessionMode};
use crate::sync::lock;

/// Largest file whose text is kept for a diff.
const MAX_IMAGE: usize = 1024 * 1024;

/// The text of `path` in `env`, unless it is missing, binary or larger than [`MAX_IMAGE`].
fn image_of(env: &dyn ExecutionEnvironment, path: &Path) -> Option<String> {
    let content = env.read_file(path, None, None).ok()?;
    (content.text.len() <= MAX_IMAGE).then_some(content.text)
}

/// The host's hooks and, after them, the ones an ACP session adds: the permission policy
/// and the images of edited files (read before the call runs and after it ran, on the
/// thread that runs it, so no later call can change them first).
fn with_acp_hooks(
    host: Hooks,
    policy: &Arc<Policy>,
    env: &Arc<dyn ExecutionEnvironment>,
    cwd: &Path,
) -> Hooks {
    let (before_policy, before_env, before_cwd) = (policy.clone(), env.clone(), cwd.to_path_buf());
    let (after_policy, after_env) = (policy.clone(), env.clone());
    host.with_pre_tool_use(move |input: &HookInput| {
        let Some(call) = input.tool_call() else {
            return HookDecision::Continue;
        };
        let images: Vec<Image> = mapping::edited_files(&call.name, &call.arguments, &before_cwd)
            .into_iter()
            .map(|path| Image {
                before: image_of(&*before_env, &path),
                after: None,
                path,
            })
            .collect();
        if !images.is_empty() {
            lock(&before_policy.images).insert(call.id.clone(), images);
        }
        before_policy.decide(&call.name)
    })
    .with_post_tool_use(move |input: &HookInput| {
        if let Some(call_id) = input.call_id.as_deref() {
            if let Some(images) = lock(&after_policy.images).get_mut(call_id) {
                for image in images {
                    image.after = image_of(&*after_env, &image.path);
                }
            }
        }
        HookDecision::Continue
    })
}

/// What a new, loaded or resumed session starts from.
pub(crate) struct Start<'a> {
    pub(crate) id: String,
    pub(crate) cwd: PathBuf,
    pub(crate) mcp_servers: Vec<McpServer>,
    /// The transcript to continue (`session/load`, `session/resume`).
    pub(crate) resume: Option<&'a Path>,
    pub(crate) fs: ClientFs,
}

/// A live ACP session.
pub(crate) struct AcpSession {
    pub(crate) shared: Arc<Shared>,
    pub(crate) session: Arc<Session>,
    /// The models the `model` option lists; the current one first at start.
    pub(crate) models: Vec<String>,
    pub(crate) model: Mutex<String>,
    pump: Mutex<Option<JoinHandle<()>>>,
    events: Mutex<Option<crate::session::Events>>,
}

impl AcpSession {
    /// Builds the session from the host's parts for `start.cwd`: the editor's files when
    /// the client offers them, the policy hooks, the client's MCP servers, the transcript.
    /// The pump starts with [`start_pump`](Self::start_pump).
    pub(crate) fn start(
        agent: &AcpAgent,
        connection: &Arc<Connection>,
        start: Start<'_>,
    ) -> Result<AcpSession, RpcError> {
        let SessionParts {
            profile,
            env,
            client,
            mut config,
        } = (agent.factory)(&start.cwd).map_err(|e| {
            RpcError::new(
                code::INTERNAL_ERROR,
                format!("the session could not start: {e}"),
            )
        })?;
        let env: Arc<dyn ExecutionEnvironment> = if start.fs.read || start.fs.write {
            Arc::new(ClientFiles {
                inner: env,
                connection: connection.clone(),
                session_id: start.id.clone(),
                fs: start.fs,
            })
        } else {
            env
        };
        let policy = Arc::new(Policy::new(config.mode));
        config.hooks = with_acp_hooks(std::mem::take(&mut config.hooks), &policy, &env, &start.cwd);
        config.mcp_servers.extend(start.mcp_servers);
        let window = profile.context_window_size;
        let model = profile.model.clone();
        let models = super::models_for(&profile);
        let session = match (start.resume, &agent.store) {
            (Some(path), _) => {
                config.transcript_path = None;
                Session::resume(path, profile, env, client, config)
            }
            (None, Some(store)) => {
                config.transcript_path = Some(store.path(&start.id));
                Session::new(profile, env, client, config)
            }
            (None, None) => Session::new(profile, env, client, config),
        }
        .map_err(|e| {
            RpcError::new(
                code::INTERNAL_ERROR,
                format!("the session could not start: {e}"),
            )
        })?;
        let events = session.events();
        let shared = Arc::new(Shared {
            id: start.id,
            connection: connection.clone(),
            policy,
            prompt: Mutex::new(Prompt::default()),
            waiter: Mutex::new(None),
            cwd: start.cwd,
            window,
        });
        Ok(AcpSession {
            shared,
            session: Arc::new(session),
            models,
            model: Mutex::new(model),
            pump: Mutex::new(None),
            events: Mutex::new(Some(events)),
        })
    }

    /// The updates replaying the session's history (after a load).
    pub(crate) fn replay(&self) -> Vec<Value> {
        mapping::replay(self.session.history().turns(), &self.shared.cwd)
    }

    /// Starts the thread that maps the session's events to updates.
    pub(crate) fn start_pump(&self) -> std::io::Result<()> {
        let Some(events) = lock(&self.events).take() else {
            return Ok(());
        };
        let pump = Pump::new(self.shared.clone(), self.session.clone());
        let short: String = self.shared.id.chars().take(8).collect();
        let handle = thread::Builder::new()
            .name(format!("agentloop-acp-{short}"))
            .spawn(move || pump.run(events))?;
        *lock(&self.pump) = Some(handle);
        Ok(())
    }

    /// Cancels the prompt in progress: the input is interrupted (its commands killed) and
    /// a permission question it waits on is withdrawn.
    pub(crate) fn cancel(&self) {
        let mut prompt = lock(&self.shared.prompt);
        if prompt.id.is_none() {
            return;
        }
        prompt.cancelled = true;
        drop(prompt);
        self.session.interrupt();
        if let Some(waiter) = lock(&self.shared.waiter).take() {
            let _ = waiter.try_send(());
        }
    }

    /// Ends the session now: its input is aborted, its commands and MCP servers end, and
    /// its pump finishes (answering a prompt still open).
    pub(crate) fn end(&self) {
        self.session.abort();
        if let Some(waiter) = lock(&self.shared.waiter).take() {
            let _ = waiter.try_send(());
        }
        if let Some(pump) = lock(&self.pump).take() {
            let _ = pump.join();
        }
    }

    /// The `modes` of `session/new` and friends.
    pub(crate) fn modes(&self) -> Value {
        let available: Vec<Value> = SessionMode::ALL
            .iter()
            .map(|mode| json!({"id": mode.id(), "name": mode_name(*mode), "description": mode_description(*mode)}))
            .collect();
        json!({"currentModeId": lock(&self.shared.policy.mode).id(), "availableModes": available})
    }

    /// The `configOptions`: the model.
    pub(crate) fn config_options(&self) -> Value {
        let options: Vec<Value> = self
            .models
            .iter()
            .map(|model| json!({"value": model, "name": model}))
            .collect();
        json!([{
            "id": "model",
            "name": "Model",
            "category": "model",
            "type": "select",
            "currentValue": *lock(&self.model),
            "options": options,
        }])
    }

    /// `session/set_mode`: from the next prompt on (the policy at once).
    pub(crate) fn set_mode(&self, mode: SessionMode) -> Result<(), RpcError> {
        self.session
            .set_mode(mode)
            .map_err(|e| RpcError::new(code::INTERNAL_ERROR, e.to_string()))?;
        *lock(&self.shared.policy.mode) = mode;
        self.shared.update(json!({
            "sessionUpdate": "current_mode_update",
            "currentModeId": mode.id(),
        }));
        Ok(())
    }

    /// `session/set_config_option` for `model`.
    pub(crate) fn set_model(&self, model: &str) -> Result<(), RpcError> {
        if !self.models.iter().any(|m| m == model) {
            return Err(RpcError::invalid_params(format!(
                "unknown model `{model}`; the options are: {}",
                self.models.join(", ")
            )));
        }
        self.session
            .set_model(model)
            .map_err(|e| RpcError::new(code::INTERNAL_ERROR, e.to_string()))?;
        *lock(&self.model) = model.to_string();
        Ok(())
    }
}

fn mode_name(mode: SessionMode) -> &'static str {
    match mode {
        SessionMode::Default => "Default",
        SessionMode::ReadOnly => "Read only",
        SessionMode::FullAccess => "Full access",
        SessionMode::Plan => "Plan",
    }
}

fn mode_description(mode: SessionMode) -> &'static str {
    match mode {
        SessionMode::Default => {
            "Works in the workspace under its sandbox; asks before each edit and command"
        }
        SessionMode::ReadOnly => "Reads and runs read-only commands; changes nothing",
        SessionMode::FullAccess => "Edits and runs commands without asking and without the sandbox",
        SessionMode::Plan => "Explores read-only and writes a plan; changes nothing",
    }
}
