//! Session modes: what the model's tool calls may change, switched between inputs without
//! rebuilding the execution environment ([`SessionMode`], `Session::set_mode`).
//!
//! A mode is enforced, not asked for in the prompt: the tool calls of an input run against
//! the session's environment seen through [`ModeEnvironment`], which gives every command
//! the mode's sandbox policy ([`CommandRequest::sandbox`]) and refuses file writes where the
//! mode allows none; plan mode also takes the editing tools out of the tool list. Who is
//! asked before a call runs stays the host's business (its approval hook); this module
//! never asks anyone and never spawns.

use std::io;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cancel::CancelToken;
use crate::exec::{
    BackgroundProcess, CommandRequest, ExecResult, ExecutionEnvironment, ExitCallback, FileStat,
    OutputCallback, SandboxPolicy,
};
use crate::profiles::ProviderProfile;
use crate::tools::RegisteredTool;

/// What the model's tool calls may change. Set the first one with
/// [`SessionConfig::mode`](super::SessionConfig::mode), switch with
/// [`Session::set_mode`](super::Session::set_mode) (it takes effect at the next input).
///
/// | mode | commands run under | file tools may write | tools offered |
/// |---|---|---|---|
/// | `default` | the environment's own sandbox | as the environment allows | the profile's |
/// | `read-only` | the read-only sandbox policy | nothing (refused) | the profile's |
/// | `full-access` | no sandbox, as far as the environment's host allows ([`LocalExecutionEnvironment::with_per_call_policy_up_to`](crate::exec::LocalExecutionEnvironment::with_per_call_policy_up_to)) | as the environment allows | the profile's |
/// | `plan` | the read-only sandbox policy | nothing (refused) | the profile's without `write_file`, `edit_file`, `apply_patch`; its plan tool stays |
///
/// In `read-only` and `plan` the system prompt says so, and a command the kernel cannot
/// confine fails (it never runs unconfined). Subagents started during an input run in the
/// mode of that input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SessionMode {
    /// The configured policy, unchanged.
    #[default]
    Default,
    /// Look, don't touch: reads, searches and read-only commands.
    ReadOnly,
    /// Commands without the sandbox.
    FullAccess,
    /// Read-only, with the editing tools withdrawn and the plan tool offered: the model
    /// explores and writes a plan.
    Plan,
}

impl SessionMode {
    /// Every mode, in the order hosts list them.
    pub const ALL: [SessionMode; 4] = [
        SessionMode::Default,
        SessionMode::ReadOnly,
        SessionMode::FullAccess,
        SessionMode::Plan,
    ];

    /// The mode's id: `default`, `read-only`, `full-access`, `plan` (the CLI's and ACP's).
    pub fn id(self) -> &'static str {
        match self {
            SessionMode::Default => "default",
            SessionMode::ReadOnly => "read-only",
            SessionMode::FullAccess => "full-access",
            SessionMode::Plan => "plan",
        }
    }

    /// The mode with id `id`.
    pub fn from_id(id: &str) -> Option<SessionMode> {
        SessionMode::ALL.into_iter().find(|mode| mode.id() == id)
    }

    /// The sandbox policy of the commands the model runs (`None`: the environment's own).
    fn command_policy(self) -> Option<SandboxPolicy> {
        match self {
            SessionMode::Default => None,
            SessionMode::ReadOnly | SessionMode::Plan => Some(SandboxPolicy::ReadOnly),
            SessionMode::FullAccess => Some(SandboxPolicy::FullAccess),
        }
    }

    fn writes(self) -> bool {
        !matches!(self, SessionMode::ReadOnly | SessionMode::Plan)
    }

    /// The tools the mode takes out of the tool list.
    fn withdrawn(self) -> &'static [&'static str] {
        match self {
            SessionMode::Plan => &["write_file", "edit_file", "apply_patch"],
            _ => &[],
        }
    }

    /// What the system prompt adds in this mode.
    pub(crate) fn instructions(self) -> Option<&'static str> {
        match self {
            SessionMode::ReadOnly => Some(
                "# Mode: read-only\n\nThis session is read-only: file writes are refused and \
                 commands run in a read-only sandbox. Read, search and run commands that only \
                 look; report what you would change instead of changing it.",
            ),
            SessionMode::Plan => Some(
                "# Mode: plan\n\nThis session is in plan mode: nothing may be changed. The \
                 editing tools are not available, file writes are refused and commands run in \
                 a read-only sandbox. Explore the code, then lay out the steps of the work \
                 with the plan tool and explain them; the user switches modes to carry it out.",
            ),
            _ => None,
        }
    }
}

/// The mode in force on a worker: the tools it withdrew (to give back when it ends) and
/// the environment the model's tool calls use.
pub(crate) struct ModeState {
    pub(crate) mode: SessionMode,
    withdrawn: Vec<RegisteredTool>,
    pub(crate) tool_env: Arc<dyn ExecutionEnvironment>,
}

impl ModeState {
    /// The default mode over `env`.
    pub(crate) fn new(env: &Arc<dyn ExecutionEnvironment>) -> ModeState {
        ModeState {
            mode: SessionMode::Default,
            withdrawn: Vec::new(),
            tool_env: env.clone(),
        }
    }

    /// Switches to `mode` (nothing when it is in force already): gives back the tools the
    /// last mode withdrew, withdraws the new mode's, and wraps `env` for the tool calls.
    pub(crate) fn apply(
        &mut self,
        mode: SessionMode,
        profile: &mut ProviderProfile,
        env: &Arc<dyn ExecutionEnvironment>,
    ) {
        if mode == self.mode {
            return;
        }
        for tool in self.withdrawn.drain(..) {
            profile.tool_registry.register(tool);
        }
        for name in mode.withdrawn() {
            self.withdrawn
                .extend(profile.tool_registry.unregister(name));
        }
        self.tool_env = match mode {
            SessionMode::Default => env.clone(),
            mode => Arc::new(ModeEnvironment {
                inner: env.clone(),
                mode,
            }),
        };
        self.mode = mode;
    }

    /// After the profile was replaced (a fallback model): withdraws the mode's tools from
    /// the new profile, which are the ones given back when the mode changes.
    pub(crate) fn withdraw_from(&mut self, profile: &mut ProviderProfile) {
        self.withdrawn.clear();
        for name in self.mode.withdrawn() {
            self.withdrawn
                .extend(profile.tool_registry.unregister(name));
        }
    }
}

/// The session's environment as a mode lets the model use it.
struct ModeEnvironment {
    inner: Arc<dyn ExecutionEnvironment>,
    mode: SessionMode,
}

impl ModeEnvironment {
    fn refuse(&self, path: &Path) -> io::Error {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "cannot write `{}`: the session is in {} mode, where nothing may be \
                 changed; describe the change instead",
                path.display(),
                self.mode.id()
            ),
        )
    }
}

impl ModeEnvironment {
    /// The policy a command must run under in this mode, when it is not the request's own.
    fn policy_for(&self, request: &CommandRequest) -> Option<SandboxPolicy> {
        match (self.mode.command_policy(), &request.sandbox) {
            (None, _) | (Some(SandboxPolicy::ReadOnly), Some(SandboxPolicy::ReadOnly)) => None,
            (Some(SandboxPolicy::ReadOnly), _) => Some(SandboxPolicy::ReadOnly),
            (Some(_), Some(_)) => None,
            (Some(policy), None) => Some(policy),
        }
    }
}

impl ExecutionEnvironment for ModeEnvironment {
    fn exec_command(
        &self,
        request: &CommandRequest,
        on_output: OutputCallback<'_>,
        cancel: &CancelToken,
    ) -> io::Result<ExecResult> {
        // Read-only modes always win; full access only fills in a request without a
        // policy of its own (a tool that asked for less keeps it).
        match self.policy_for(request) {
            None => self.inner.exec_command(request, on_output, cancel),
            Some(policy) => {
                let request = request.clone().with_sandbox_policy(policy);
                self.inner.exec_command(&request, on_output, cancel)
            }
        }
    }

    /// A background command runs under the mode's policy as a foreground one does.
    fn start_background(
        &self,
        request: &CommandRequest,
        output_limit: usize,
        on_exit: ExitCallback,
    ) -> io::Result<Box<dyn BackgroundProcess>> {
        match self.policy_for(request) {
            None => self.inner.start_background(request, output_limit, on_exit),
            Some(policy) => {
                let request = request.clone().with_sandbox_policy(policy);
                self.inner.start_background(&request, output_limit, on_exit)
            }
        }
    }

    fn write_file(&self, path: &Path, content: &[u8]) -> io::Result<()> {
        if !self.mode.writes() {
            return Err(self.refuse(path));
        }
        self.inner.write_file(path, content)
    }

    fn write_file_if_unchanged(
        &self,
        path: &Path,
        content: &[u8],
        expected: &FileStat,
    ) -> io::Result<()> {
        if !self.mode.writes() {
            return Err(self.refuse(path));
        }
        self.inner.write_file_if_unchanged(path, content, expected)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        if !self.mode.writes() {
            return Err(self.refuse(path));
        }
        self.inner.remove_file(path)
    }

    crate::forward_execution_environment!(self.inner =>
        read_file, read_bytes, file_exists, stat, list_directory, grep, glob, initialize,
        warnings, cleanup, working_directory, platform, os_version, max_command_timeout,
        files_are_local);
}
