//! [`LocalExecutionEnvironment`]: tools run on this machine, in one working directory
//! (spec §4.2).
//!
//! It resolves relative paths against its working directory and hands the work to
//! `files.rs` (file operations), `process.rs` (commands), `env.rs` (environment filtering)
//! and `search.rs` (grep, glob). It never changes the process's working directory or
//! environment: the environment commands inherit is captured once, when it is built.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{
    CommandRequest, DirEntry, EnvPolicy, ExecResult, ExecutionEnvironment, FileContent, FileStat,
    GrepOptions, GrepOutput, OutputCallback, env, files, process, search,
};
use crate::cancel::CancelToken;

/// How long a process group gets between SIGTERM and SIGKILL by default (spec §5.4).
const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);
/// The longest command timeout allowed by default (spec §5.4).
const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs tools on the local machine (spec §4.2).
///
/// - **Paths**: relative paths resolve against the working directory; absolute paths are
///   used as given (this environment is not a sandbox; wrap it to restrict it).
/// - **Files**: a text read with a NUL byte in the first 8 KiB is a binary file (an
///   `InvalidData` error); invalid UTF-8 in text is replaced with U+FFFD. Writes are atomic
///   (temporary file beside the target, `fsync`, rename), create parent directories, keep
///   the permissions of the file they replace, and write through symlinks.
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
///
/// ```
/// use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
/// use std::path::Path;
///
/// let dir = tempfile::tempdir()?;
/// let env = LocalExecutionEnvironment::new(dir.path())?;
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
/// let dir = tempfile::tempdir()?;
/// let env = LocalExecutionEnvironment::new(dir.path())?;
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
    kill_grace: Duration,
    max_timeout: Duration,
}

impl fmt::Debug for LocalExecutionEnvironment {
    // Variable values are left out: the base environment may hold secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalExecutionEnvironment")
            .field("working_dir", &self.working_dir)
            .field("policy", &self.policy)
            .field("inherited_variables", &self.command_env.len())
            .field("kill_grace", &self.kill_grace)
            .field("max_timeout", &self.max_timeout)
            .finish()
    }
}

impl LocalExecutionEnvironment {
    /// An environment rooted at `working_dir` (made absolute against the current directory
    /// if relative), whose commands inherit a copy of the current process environment
    /// taken now, filtered by the default [`EnvPolicy`]. Variables whose name or value is
    /// not UTF-8 are not inherited.
    ///
    /// Fails when `working_dir` does not exist ([`io::ErrorKind::NotFound`]) or is not a
    /// directory ([`io::ErrorKind::NotADirectory`]), with a message naming it: every
    /// command would fail there, so the mistake is reported once, here.
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
        let base_env: BTreeMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let policy = EnvPolicy::default();
        let command_env = env::filter(&base_env, &policy);
        Ok(LocalExecutionEnvironment {
            working_dir,
            base_env,
            policy,
            command_env,
            kill_grace: DEFAULT_KILL_GRACE,
            max_timeout: DEFAULT_MAX_TIMEOUT,
        })
    }

    /// Replaces the base environment commands inherit (filtered by the policy): how a host
    /// or a test gives commands a chosen environment without touching its own.
    pub fn with_base_env(
        mut self,
        base_env: BTreeMap<String, String>,
    ) -> LocalExecutionEnvironment {
        self.command_env = env::filter(&base_env, &self.policy);
        self.base_env = base_env;
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
        self
    }

    /// Sets which variables commands inherit.
    pub fn with_env_policy(mut self, policy: EnvPolicy) -> LocalExecutionEnvironment {
        self.command_env = env::filter(&self.base_env, &policy);
        self.policy = policy;
        self
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

impl ExecutionEnvironment for LocalExecutionEnvironment {
    fn read_file(
        &self,
        path: &Path,
        offset: Option<usize>,
        limit: Option<usize>,
    ) -> io::Result<FileContent> {
        files::read_text(&self.resolve(path), offset, limit)
    }

    fn read_bytes(&self, path: &Path) -> io::Result<Vec<u8>> {
        files::read_bytes(&self.resolve(path))
    }

    fn write_file(&self, path: &Path, content: &[u8]) -> io::Result<()> {
        files::write_atomic(&self.resolve(path), content)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        files::remove_file(&self.resolve(path))
    }

    fn file_exists(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(self.resolve(path)).is_ok()
    }

    fn stat(&self, path: &Path) -> io::Result<FileStat> {
        files::stat(&self.resolve(path))
    }

    fn list_directory(&self, path: &Path, depth: usize) -> io::Result<Vec<DirEntry>> {
        files::list_directory(&self.resolve(path), depth)
    }

    fn exec_command(
        &self,
        request: &CommandRequest,
        on_output: OutputCallback<'_>,
        cancel: &CancelToken,
    ) -> io::Result<ExecResult> {
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
        let spec = process::Spawn {
            command: &request.command,
            cwd: &cwd,
            env: &vars,
            timeout: request.timeout.min(self.max_timeout),
            kill_grace: self.kill_grace,
            stdin: request.stdin.as_deref(),
        };
        process::run(&spec, on_output, cancel)
    }

    fn grep(&self, pattern: &str, path: &Path, options: &GrepOptions) -> io::Result<GrepOutput> {
        search::grep(pattern, &self.resolve(path), options)
    }

    fn glob(&self, pattern: &str, path: &Path) -> io::Result<Vec<String>> {
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
