//! [`LocalExecutionEnvironment`]: tools run on this machine, in one working directory
//! (spec §4.2).
//!
//! It resolves relative paths against its working directory and hands the work to
//! `files.rs` (file operations), `env.rs` (environment filtering), `redact.rs` (withheld
//! secrets out of tool output) and `mounts.rs` (which files are local) beside it, and to
//! `exec/process/` (commands) and `exec/search/` (grep, glob). It never changes the
//! process's working directory or environment: the environment commands inherit is
//! captured once, when it is built.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::exec::background::local as background;
use crate::exec::process::{self, open_files};
use crate::exec::sandbox::per_call::PerCall;
use crate::exec::sandbox::{self, Sandbox, SandboxError, SandboxPolicy};
use crate::exec::{
    BackgroundProcess, CommandRequest, DirEntry, EnvPolicy, ExecResult, ExecutionEnvironment,
    ExitCallback, FileContent, FileStat, GrepOptions, GrepOutput, OutputCallback, OutputStream,
    search,
};
use redact::{Redactor, StreamRedactor};

pub(crate) mod env;
pub(crate) mod files;
// unsafe: poll(2) for POLLPRI on /proc/self/mountinfo.
#[allow(unsafe_code)]
mod mounts;
pub(crate) mod redact;

/// How long a process group gets between SIGTERM and SIGKILL by default (spec §5.4).
const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);
/// The longest command timeout allowed by default (spec §5.4).
const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs tools on the local machine (spec §4.2).
///
/// - **Paths**: relative paths resolve against the working directory. A path inside the
///   working directory is resolved beneath it: a symlink (or `..`) leading out is an error,
///   race-free (see the `sandbox` module); other absolute paths are used as given unless a
///   [`Sandbox`] limits writes to its roots (`with_sandbox`).
/// - **Files**: a text read with a NUL byte in the first 8 KiB is a binary file (an
///   `InvalidData` error); invalid UTF-8 in text is replaced with U+FFFD. Writes are atomic
///   (temporary file beside the target, `fsync`, rename), create parent directories, keep
///   the permissions of the file they replace, and write through symlinks that stay beneath
///   the root.
///   `list_directory` lists `.git` but never descends into it.
/// - **Commands** run as `/bin/bash -c COMMAND` (`/bin/sh` when bash is missing) in their
///   own process group, with stdin from `/dev/null`. On timeout or cancel the group gets
///   SIGTERM, then SIGKILL after the grace period (2 s by default). After the shell exits,
///   background jobs still holding its output pipes get 150 ms to finish before the rest of
///   the group is terminated; a process that left the group (`setsid`) is reported in
///   [`ExecResult::escaped_processes`], never waited for. Each stream's capture keeps the
///   first and last 1 MiB; the byte totals are exact.
/// - **Environment**: commands get the base environment filtered by an [`EnvPolicy`] (by
///   default everything except secrets), plus the request's explicit variables.
/// - **Secrets stay out of tool output**: every value the filter withheld as a secret (by
///   name or by value, 8 bytes or longer), and every value given to
///   [`with_secret`](Self::with_secret), is replaced by `[REDACTED:NAME]` in what this
///   environment returns: command output (the live pieces too, also when a value is split
///   between two pieces), `read_file` text, `read_bytes` content and grep lines. So a
///   command that prints the agent's own environment (`tr '\0' '\n' < /proc/$PPID/environ`)
///   shows no key. Writing a marker back (`write_file` content holding `[REDACTED:NAME]`) is
///   refused, so an edit of a file that holds a secret never replaces the secret with its
///   marker. Only literal occurrences are replaced: a command can still encode a secret
///   it can read, so a host keeps keys out of the process environment (see the README).
///
/// ```
/// use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
/// use std::path::Path;
///
/// let dir = std::env::temp_dir().join(format!("agentloop-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let env = LocalExecutionEnvironment::new(dir.as_path())?;
/// env.write_file(Path::new("notes/todo.txt"), b"one\ntwo\nthree\n")?;
/// let content = env.read_file(Path::new("notes/todo.txt"), Some(2), Some(1))?;
/// assert_eq!(content.text, "two\n");
/// assert_eq!(content.total_lines, 3);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// Running a command:
///
/// ```
/// use agentloop::exec::{CommandRequest, ExecutionEnvironment, LocalExecutionEnvironment};
/// use agentloop::CancelToken;
/// use std::time::Duration;
///
/// let dir = std::env::temp_dir().join(format!("agentloop-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let env = LocalExecutionEnvironment::new(dir.as_path())?;
/// let request = CommandRequest::new("echo hello; sleep 30", Duration::from_millis(300));
/// let result = env.exec_command(&request, &|_, _| {}, &CancelToken::new())?;
/// assert_eq!(result.stdout, "hello\n");
/// assert!(result.timed_out);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct LocalExecutionEnvironment {
    working_dir: PathBuf,
    base_env: BTreeMap<String, String>,
    policy: EnvPolicy,
    /// `base_env` filtered by `policy`, recomputed whenever either changes.
    command_env: BTreeMap<String, String>,
    /// Secrets given with `with_secret`, redacted besides the withheld ones.
    extra_secrets: Vec<(String, String)>,
    /// The values replaced in tool output, recomputed with `command_env`.
    redactor: Arc<Redactor>,
    kill_grace: Duration,
    max_timeout: Duration,
    /// The sandbox resolved for the working directory; `None` is full access.
    sandbox: Option<std::sync::Arc<sandbox::Active>>,
    /// How far a command's own policy may loosen, and the policies resolved for commands
    /// so far (replaced whenever what they were resolved against changes).
    per_call: Arc<PerCall>,
    /// The working directory with its symlinks resolved, once asked for.
    canonical_dir: std::sync::OnceLock<PathBuf>,
}

impl fmt::Debug for LocalExecutionEnvironment {
    // Variable values are left out: the base environment may hold secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalExecutionEnvironment")
            .field("working_dir", &self.working_dir)
            .field("policy", &self.policy)
            .field("inherited_variables", &self.command_env.len())
            .field("redacted_values", &self.redactor.len())
            .field("kill_grace", &self.kill_grace)
            .field("max_timeout", &self.max_timeout)
            .field("sandbox", &self.sandbox.as_ref().map(|a| &a.sandbox))
            .finish()
    }
}

impl LocalExecutionEnvironment {
    /// An environment rooted at `working_dir` (made absolute against the current directory
    /// if relative), with **full access**: commands and file tools may write anywhere the
    /// process may and use the network. For an agent, [`sandboxed`](Self::sandboxed) is the
    /// safe choice. Its commands inherit a copy of the current process environment
    /// taken now, filtered by the default [`EnvPolicy`]. Variables whose name or value is
    /// not UTF-8 are not inherited.
    ///
    /// Fails when `working_dir` does not exist ([`io::ErrorKind::NotFound`]) or is not a
    /// directory ([`io::ErrorKind::NotADirectory`]), with a message naming it: every
    /// command would fail there, so the mistake is reported once, here.
    ///
    /// Like [`Session::new`](crate::session::Session::new), the first one raises the
    /// process's soft limit on open descriptors to its hard limit; the commands it starts
    /// get the host's own limit back. [`keep_open_file_limit`](Self::keep_open_file_limit)
    /// turns that off.
    ///
    /// ```
    /// use agentloop::exec::LocalExecutionEnvironment;
    /// let err = LocalExecutionEnvironment::new("/no/such/directory").unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    /// assert!(err.to_string().contains("/no/such/directory"));
    /// ```
    pub fn new(working_dir: impl Into<PathBuf>) -> io::Result<LocalExecutionEnvironment> {
        let working_dir = working_dir.into();
        let working_dir = std::path::absolute(&working_dir).unwrap_or(working_dir);
        match std::fs::metadata(&working_dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!(
                        "the working directory {} is not a directory",
                        working_dir.display()
                    ),
                ));
            }
            Err(err) => {
                return Err(io::Error::new(
                    err.kind(),
                    format!(
                        "the working directory {} cannot be used: {err}",
                        working_dir.display()
                    ),
                ));
            }
        }
        open_files::raise();
        let base_env: BTreeMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let policy = EnvPolicy::default();
        let command_env = env::filter(&base_env, &policy);
        let redactor = Arc::new(Redactor::for_environment(&base_env, &policy, &[]));
        Ok(LocalExecutionEnvironment {
            working_dir,
            base_env,
            policy,
            command_env,
            extra_secrets: Vec::new(),
            redactor,
            kill_grace: DEFAULT_KILL_GRACE,
            max_timeout: DEFAULT_MAX_TIMEOUT,
            sandbox: None,
            per_call: Arc::new(PerCall::default()),
            canonical_dir: std::sync::OnceLock::new(),
        })
    }

    /// The safe choice for an agent: [`new`](Self::new)`(working_dir)` under the sandbox the
    /// CLI runs by default — commands and file tools may write only in `working_dir` and the
    /// temporary directories (`.git` and the agent instruction files stay read-only), and
    /// commands have no network ([`SandboxPolicy::workspace_write`], network off,
    /// enforcement required).
    ///
    /// Where the kernel cannot enforce it (no Landlock: an old kernel, some containers) this
    /// fails with [`io::ErrorKind::Unsupported`] naming what is missing: nothing runs
    /// unsandboxed unasked. Choose [`new`](Self::new) (full access) there on purpose, or
    /// [`with_sandbox`](Self::with_sandbox) with [`Enforcement::BestEffort`](super::Enforcement::BestEffort).
    pub fn sandboxed(working_dir: impl Into<PathBuf>) -> io::Result<LocalExecutionEnvironment> {
        let sandbox = Sandbox::new(SandboxPolicy::workspace_write());
        Ok(LocalExecutionEnvironment::new(working_dir)?.with_sandbox(sandbox)?)
    }

    /// Keeps the process's own soft limit on open descriptors (`RLIMIT_NOFILE`): no
    /// [`Session::new`](crate::session::Session::new) or [`new`](Self::new) raises it after
    /// this call, and a raise one of them already made is undone, unless the host has
    /// changed the limit since.
    ///
    /// For a host with code of its own that uses `select(2)`, whose descriptor sets hold
    /// only descriptors below 1,024: with the limit raised, a process running many sessions
    /// holds descriptors above that. Without the raise, many sessions at once can fail to
    /// start their commands (`EMFILE`, with the limit named in the error); see "Open
    /// descriptors" in ARCHITECTURE.md.
    pub fn keep_open_file_limit() {
        open_files::keep();
    }

    /// Runs commands and the file tools' writes under `sandbox` (see [`Sandbox`] for what
    /// enforces what). The Landlock ABI is probed here (once per process); with
    /// [`Enforcement::Required`](super::Enforcement::Required), a kernel that cannot enforce
    /// the policy is an error now, before anything runs.
    pub fn with_sandbox(
        mut self,
        sandbox: Sandbox,
    ) -> Result<LocalExecutionEnvironment, SandboxError> {
        let tmpdir = self.command_env.get("TMPDIR").map(Path::new);
        let active = sandbox::Active::new(sandbox.clone(), &self.working_dir, tmpdir)?;
        self.sandbox = active.restricts().then(|| std::sync::Arc::new(active));
        self.per_call = Arc::new(PerCall::new(self.per_call.loosest.clone(), sandbox));
        Ok(self)
    }

    /// Lets a command's own policy ([`CommandRequest::sandbox`], set by a session's mode)
    /// loosen the environment's sandbox up to `loosest`; by default it may only tighten it
    /// (a request for more than the ceiling runs under the ceiling). How a host that
    /// sandboxes by default lets its user pick full access for a session (the ACP
    /// `full-access` mode) without a second environment:
    ///
    /// ```
    /// use agentloop::exec::{LocalExecutionEnvironment, Sandbox, SandboxPolicy};
    ///
    /// let dir = std::env::temp_dir().join(format!("agentloop-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let env = LocalExecutionEnvironment::new(dir.as_path())?
    ///     .with_sandbox(Sandbox::new(SandboxPolicy::workspace_write()))
    ///     .map_err(std::io::Error::from)?
    ///     .with_per_call_policy_up_to(SandboxPolicy::FullAccess);
    /// # let _ = env;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn with_per_call_policy_up_to(mut self, loosest: SandboxPolicy) -> Self {
        self.per_call = Arc::new(PerCall::new(Some(loosest), self.per_call.base.clone()));
        self
    }

    /// Drops the policies resolved for commands (the working directory, the sandbox or
    /// `TMPDIR` changed), keeping the ceiling.
    fn forget_per_call_policies(&mut self) {
        self.per_call = Arc::new(PerCall::new(
            self.per_call.loosest.clone(),
            self.per_call.base.clone(),
        ));
    }

    /// The sandbox in force (`None`: full access).
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref().map(|a| &a.sandbox)
    }

    /// The Landlock ABI commands run under (0: none or no sandbox).
    pub fn landlock_abi(&self) -> u32 {
        self.sandbox.as_ref().map_or(0, |a| a.abi)
    }

    /// What the sandbox cannot enforce on this system (empty when everything is, or when
    /// there is no sandbox); a session emits each as a `WARNING` event when it starts.
    pub fn sandbox_warnings(&self) -> Vec<String> {
        self.sandbox
            .as_ref()
            .map(|a| a.warnings.clone())
            .unwrap_or_default()
    }

    /// Replaces the base environment commands inherit (filtered by the policy): how a host
    /// or a test gives commands a chosen environment without touching its own.
    pub fn with_base_env(
        mut self,
        base_env: BTreeMap<String, String>,
    ) -> LocalExecutionEnvironment {
        self.command_env = env::filter(&base_env, &self.policy);
        self.base_env = base_env;
        self.update_redactor();
        self.forget_per_call_policies();
        self
    }

    /// The same environment rooted at another working directory (made absolute against
    /// the current directory if relative): how the exec-server serves the directory its
    /// client asked for.
    pub fn with_working_dir(
        mut self,
        working_dir: impl Into<PathBuf>,
    ) -> LocalExecutionEnvironment {
        let working_dir = working_dir.into();
        self.working_dir = std::path::absolute(&working_dir).unwrap_or(working_dir);
        self.canonical_dir = std::sync::OnceLock::new();
        self.forget_per_call_policies();
        self
    }

    /// Sets which variables commands inherit.
    pub fn with_env_policy(mut self, policy: EnvPolicy) -> LocalExecutionEnvironment {
        self.command_env = env::filter(&self.base_env, &policy);
        self.policy = policy;
        self.update_redactor();
        self.forget_per_call_policies();
        self
    }

    /// Adds a secret to redact from tool output as `[REDACTED:NAME]`: for a key the host
    /// holds outside the process environment (read from a file, say). Values shorter than
    /// 8 bytes are ignored.
    pub fn with_secret(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> LocalExecutionEnvironment {
        self.extra_secrets.push((name.into(), value.into()));
        self.update_redactor();
        self
    }

    fn update_redactor(&mut self) {
        self.redactor = Arc::new(Redactor::for_environment(
            &self.base_env,
            &self.policy,
            &self.extra_secrets,
        ));
    }

    /// Sets how long a process group gets between SIGTERM and SIGKILL (default 2 s).
    pub fn with_kill_grace(mut self, grace: Duration) -> LocalExecutionEnvironment {
        self.kill_grace = grace;
        self
    }

    /// Sets the longest timeout a command may have (default 600 s); longer requests are
    /// clamped to it.
    pub fn with_max_command_timeout(mut self, max: Duration) -> LocalExecutionEnvironment {
        self.max_timeout = max;
        self
    }

    /// The variables every command starts with (after filtering, before a request's own).
    pub fn command_env(&self) -> &BTreeMap<String, String> {
        &self.command_env
    }

    /// The current environment policy.
    pub fn policy(&self) -> &EnvPolicy {
        &self.policy
    }

    /// `path` resolved against the working directory (absolute paths unchanged).
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.working_dir.join(path)
        }
    }
}

impl LocalExecutionEnvironment {
    /// Where `path` (absolute, lexically normal) is confined for reads: beneath the working
    /// directory when it lies in it, else beneath `/` (the caller allowed outside paths).
    fn read_root(&self, path: &Path) -> (PathBuf, PathBuf) {
        let wd = crate::exec::normalize(&self.working_dir);
        match path.strip_prefix(&wd) {
            Ok(rest) => (canonical_dir(&wd), rest.to_path_buf()),
            Err(_) => (
                PathBuf::from("/"),
                path.strip_prefix("/").unwrap_or(path).to_path_buf(),
            ),
        }
    }

    /// Opens `path` for reading, resolved beneath its root (no symlink out of the working
    /// directory for a path inside it).
    /// Refuses content holding a redaction marker: writing it back would replace the secret
    /// the marker stands for.
    fn refuse_markers(&self, path: &Path, content: &[u8]) -> io::Result<()> {
        match self.redactor.marker_in(content) {
            None => Ok(()),
            Some(marker) => Err(files::error(
                io::ErrorKind::InvalidInput,
                format!(
                    "refused to write `{}`: the content holds `{marker}`, which stands for a \
                     secret hidden from tools; writing it would replace the secret in the \
                     file. Change the file without that part (for example with a command)",
                    path.display()
                ),
            )),
        }
    }

    fn open_for_read(&self, path: &Path) -> io::Result<(std::fs::File, PathBuf)> {
        let full = crate::exec::normalize(&self.resolve(path));
        let (root, relative) = self.read_root(&full);
        let file = sandbox::beneath::open_read(&root, &relative, path)
            .map_err(|e| files::describe(e, "read", path))?;
        Ok((file, path.to_path_buf()))
    }

    /// Checks that `path` resolves beneath its root (the working directory for a path in
    /// it) and returns an `O_PATH` descriptor of it. Listing and searching then go by path:
    /// a directory swapped for a link between the check and the walk is not covered.
    fn open_path(&self, path: &Path) -> io::Result<std::fs::File> {
        let full = crate::exec::normalize(&self.resolve(path));
        let (root, relative) = self.read_root(&full);
        sandbox::beneath::open_path(&root, &relative, path)
            .map_err(|e| files::describe(e, "stat", path))
    }

    /// Runs `op` with the write scope of `path`: beneath the writable root it lies in
    /// (under a sandbox; outside them is an error), beneath the working directory when it
    /// lies in it, else beneath `/`.
    fn with_write_scope<T>(
        &self,
        path: &Path,
        op: impl FnOnce(&files::WriteScope<'_>) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut full = crate::exec::normalize(&self.resolve(path));
        let wd = crate::exec::normalize(&self.working_dir);
        if let Ok(rest) = full.strip_prefix(&wd) {
            full = canonical_dir(&wd).join(rest);
        }
        let no_check = |_: &Path| Ok(());
        match &self.sandbox {
            Some(active) => {
                let (root, relative) = active.writable_root_of(&full)?;
                let check = |rel: &Path| active.check_protected(root, rel);
                op(&files::WriteScope {
                    root,
                    relative,
                    shown: path,
                    check: &check,
                })
            }
            None => {
                let (root, relative) = self.read_root(&full);
                op(&files::WriteScope {
                    root: &root,
                    relative: &relative,
                    shown: path,
                    check: &no_check,
                })
            }
        }
    }
}

impl LocalExecutionEnvironment {
    /// What a command of `request` runs with: its directory (which must exist), its whole
    /// environment, and the sandbox prepared for it (`background`: with a PID namespace
    /// where one can be made).
    fn command_setup(
        &self,
        request: &CommandRequest,
        background: bool,
    ) -> io::Result<(
        PathBuf,
        BTreeMap<String, String>,
        Option<sandbox::spawn::Prepared>,
    )> {
        let cwd = match &request.working_dir {
            Some(dir) => self.resolve(dir),
            None => self.working_dir.clone(),
        };
        if !cwd.is_dir() {
            return Err(files::error(
                io::ErrorKind::NotFound,
                format!(
                    "cannot run the command in `{}`: no such directory",
                    cwd.display()
                ),
            ));
        }
        let mut vars = self.command_env.clone();
        vars.extend(request.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let tmpdir = self.command_env.get("TMPDIR").map(Path::new);
        let active = self.per_call.active(
            self.sandbox.as_ref(),
            request.sandbox.as_ref(),
            &self.working_dir,
            tmpdir,
        )?;
        let prepared = match &active {
            Some(active) => Some(
                sandbox::spawn::Prepared::new(active, &vars, background).map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot prepare the sandbox: {e}"))
                })?,
            ),
            None => None,
        };
        Ok((cwd, vars, prepared))
    }
}

/// The canonical form of a directory (itself when it cannot be resolved).
fn canonical_dir(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

impl ExecutionEnvironment for LocalExecutionEnvironment {
    /// From the mount table (`exec/local/mounts.rs`): the working directory and every mount
    /// below it on local file systems. One `poll(2)` per call while the table is unchanged.
    fn files_are_local(&self) -> bool {
        let canonical = self
            .canonical_dir
            .get_or_init(|| canonical_dir(&self.working_dir));
        mounts::local_at_and_below(canonical)
    }

    fn read_file(
        &self,
        path: &Path,
        offset: Option<usize>,
        limit: Option<usize>,
    ) -> io::Result<FileContent> {
        let (file, shown) = self.open_for_read(path)?;
        let mut content = files::read_text(file, &shown, offset, limit)?;
        self.redactor.in_place(&mut content.text);
        Ok(content)
    }

    fn read_bytes(&self, path: &Path) -> io::Result<Vec<u8>> {
        let (file, shown) = self.open_for_read(path)?;
        let bytes = files::read_bytes(file, &shown)?;
        Ok(match self.redactor.bytes(&bytes) {
            std::borrow::Cow::Borrowed(_) => bytes,
            std::borrow::Cow::Owned(redacted) => redacted,
        })
    }

    fn write_file(&self, path: &Path, content: &[u8]) -> io::Result<()> {
        self.refuse_markers(path, content)?;
        self.with_write_scope(path, |scope| files::write_atomic(scope, content, None))
    }

    fn write_file_if_unchanged(
        &self,
        path: &Path,
        content: &[u8],
        expected: &FileStat,
    ) -> io::Result<()> {
        self.refuse_markers(path, content)?;
        self.with_write_scope(path, |scope| {
            files::write_atomic(scope, content, Some(expected))
        })
    }

    fn warnings(&self) -> Vec<String> {
        self.sandbox_warnings()
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.with_write_scope(path, files::remove_file)
    }

    fn file_exists(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(self.resolve(path)).is_ok()
    }

    fn stat(&self, path: &Path) -> io::Result<FileStat> {
        let meta = self
            .open_path(path)?
            .metadata()
            .map_err(|e| files::describe(e, "stat", path))?;
        Ok(FileStat {
            is_dir: meta.is_dir(),
            size: meta.len(),
            modified: meta.modified().ok(),
        })
    }

    fn list_directory(&self, path: &Path, depth: usize) -> io::Result<Vec<DirEntry>> {
        self.open_path(path)?;
        files::list_directory(&self.resolve(path), depth)
    }

    fn exec_command(
        &self,
        request: &CommandRequest,
        on_output: OutputCallback<'_>,
        cancel: &CancelToken,
    ) -> io::Result<ExecResult> {
        let (cwd, vars, prepared) = self.command_setup(request, false)?;
        let spec = process::Spawn {
            detached: None,
            sandbox: prepared.as_ref().map(sandbox::spawn::Prepared::hook),
            command: &request.command,
            cwd: &cwd,
            env: &vars,
            timeout: request.timeout.min(self.max_timeout),
            kill_grace: self.kill_grace,
            stdin: request.stdin.as_deref(),
        };
        if self.redactor.is_empty() {
            return process::run(&spec, on_output, cancel);
        }
        let redactor = &*self.redactor;
        let streams = [
            Mutex::new(StreamRedactor::default()),
            Mutex::new(StreamRedactor::default()),
        ];
        let index = |stream| match stream {
            OutputStream::Stdout => 0,
            OutputStream::Stderr => 1,
        };
        let redacting = |stream: OutputStream, piece: &[u8]| {
            let mut state = streams[index(stream)]
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let shown = state.push(redactor, piece);
            if !shown.is_empty() {
                on_output(stream, &shown);
            }
        };
        let mut result = process::run(&spec, &redacting, cancel)?;
        for stream in [OutputStream::Stdout, OutputStream::Stderr] {
            let rest = streams[index(stream)]
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .finish();
            if !rest.is_empty() {
                on_output(stream, &rest);
            }
        }
        redactor.in_place(&mut result.stdout);
        redactor.in_place(&mut result.stderr);
        Ok(result)
    }

    /// On a thread of its own (`exec/background/local.rs`); under the sandbox, in a PID
    /// namespace of its own where the kernel allows one (see the `sandbox` module).
    fn start_background(
        &self,
        request: &CommandRequest,
        output_limit: usize,
        on_exit: ExitCallback,
    ) -> io::Result<Box<dyn BackgroundProcess>> {
        let (cwd, env, sandbox) = self.command_setup(request, true)?;
        let process = background::start(
            background::Start {
                command: request.command.clone(),
                cwd,
                env,
                kill_grace: self.kill_grace,
                sandbox,
                redactor: Arc::clone(&self.redactor),
                output_limit,
            },
            on_exit,
        )
        .map_err(|e| {
            let why = open_files::explain(&e);
            io::Error::new(e.kind(), format!("failed to start the command: {why}"))
        })?;
        if let Some(bytes) = &request.stdin {
            process.write_stdin(bytes)?;
        }
        Ok(Box::new(process))
    }

    fn grep(&self, pattern: &str, path: &Path, options: &GrepOptions) -> io::Result<GrepOutput> {
        self.open_path(path)?;
        let mut output = search::grep(pattern, &self.resolve(path), options)?;
        for found in &mut output.matches {
            self.redactor.in_place(&mut found.line);
        }
        Ok(output)
    }

    fn glob(&self, pattern: &str, path: &Path) -> io::Result<Vec<String>> {
        self.open_path(path)?;
        search::glob(pattern, &self.resolve(path))
    }

    fn working_directory(&self) -> &Path {
        &self.working_dir
    }

    fn platform(&self) -> String {
        match std::env::consts::OS {
            "macos" => "darwin".to_string(),
            other => other.to_string(),
        }
    }

    fn os_version(&self) -> String {
        process::os_version()
    }

    fn max_command_timeout(&self) -> Duration {
        self.max_timeout
    }
}
