//! Where tools run: the [`ExecutionEnvironment`] trait and its local implementation.
//!
//! Every file and process operation of the tools goes through this trait, so a host can run
//! the same agent in a container, over SSH or in memory by implementing it. This module is
//! the only place in the crate that spawns processes (`process/`) or uses `unsafe`.
//!
//! Here: the trait, its value types, the forwarding macro and the wrappers. Beside them,
//! one folder per part: `local/` (the local implementation: files, environment filtering,
//! redaction, the mount table), `process/` (one command in its own process group, the
//! clone that starts it, long-lived stdio children, the descriptor limit), `background/`
//! (commands that outlive their call: handles and output buffers), `sandbox/`, `search/`
//! (grep and glob) and `remote/` (tools on other machines).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::cancel::CancelToken;

pub(crate) mod background;
mod forward;
mod local;
// unsafe: killpg, waitpid, pipes, pidfds, ppoll, rlimits and the clone are raw syscalls.
#[allow(unsafe_code)]
pub(crate) mod process;
// unsafe: getrandom(2) is a raw syscall writing into the caller's buffer.
#[allow(unsafe_code)]
pub(crate) mod random;
pub mod remote;
mod sandbox;
mod search;
mod wrappers;

pub use background::{BackgroundProcess, ExitCallback, OutputSlice};
pub use sandbox::{Enforcement, Network, Sandbox, SandboxError, SandboxPolicy};

/// Removes `.` components and resolves `..` against the preceding component, without
/// touching the filesystem (symlinks are not followed).
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                let last_is_parent = matches!(
                    out.components().next_back(),
                    Some(std::path::Component::ParentDir)
                );
                if last_is_parent || (!out.pop() && !out.has_root()) {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

pub use local::LocalExecutionEnvironment;

pub use wrappers::{LoggingExecutionEnvironment, ReadOnlyExecutionEnvironment};

/// Which variables of the base environment commands inherit (spec §4.2), before the
/// include and exclude lists of an [`EnvPolicy`] apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum EnvInherit {
    /// Everything except secrets: names ending in `_API_KEY`, `_SECRET`, `_TOKEN`,
    /// `_PASSWORD`, `_CREDENTIAL` (and similar) and values shaped like credentials.
    #[default]
    All,
    /// Only the core variables shells and toolchains need (`PATH`, `HOME`, `USER`, `SHELL`,
    /// `LANG`, `LC_*`, `TERM`, `TMPDIR`, `GOPATH`, `CARGO_HOME`, `NVM_DIR`, `JAVA_HOME`, …).
    CoreOnly,
    /// Nothing: commands start with a clean environment plus the include list.
    Nothing,
}

/// Which environment variables commands get (spec §4.2). The default inherits everything
/// except secrets.
///
/// Rules, first match wins: a name matching `exclude` is dropped; a name matching `include`
/// is kept (even a secret: explicit is allowed); under [`EnvInherit::Nothing`] everything
/// else is dropped; core names are kept; names that say they hold a secret (`*_API_KEY`,
/// `*_SECRET`, `*_TOKEN`, `*_PASSWORD`, `*_CREDENTIAL`, `*_ACCESS_KEY`, `*_SECRET_KEY`,
/// `*_PRIVATE_KEY`, `*_APIKEY`, `*_PASSWD`, and those words alone, ignoring case) are
/// dropped; values that look like a credential (`sk-…`, `ghp_…`, `github_pat_…`, `xoxb-…`,
/// `AKIA…`, `AIza…`, a PEM private key, …) are dropped whatever the name; the rest is kept
/// under [`EnvInherit::All`] only. Patterns ignore ASCII case and `*` matches any run of
/// characters. Variables a [`CommandRequest`] sets explicitly are added after filtering.
///
/// ```
/// use agentloop::exec::EnvPolicy;
///
/// let policy = EnvPolicy::core_only().include("NPM_CONFIG_*").exclude("TMPDIR");
/// assert_eq!(policy.include, ["NPM_CONFIG_*"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct EnvPolicy {
    /// What is inherited before the lists apply.
    pub inherit: EnvInherit,
    /// Name patterns always inherited (unless excluded).
    pub include: Vec<String>,
    /// Name patterns never inherited.
    pub exclude: Vec<String>,
}

impl EnvPolicy {
    /// Everything except secrets (the default).
    pub fn inherit_all() -> EnvPolicy {
        EnvPolicy::default()
    }

    /// Only the core variables.
    pub fn core_only() -> EnvPolicy {
        EnvPolicy {
            inherit: EnvInherit::CoreOnly,
            ..EnvPolicy::default()
        }
    }

    /// Nothing but the include list.
    pub fn nothing() -> EnvPolicy {
        EnvPolicy {
            inherit: EnvInherit::Nothing,
            ..EnvPolicy::default()
        }
    }

    /// Adds a name pattern that is always inherited.
    pub fn include(mut self, pattern: impl Into<String>) -> EnvPolicy {
        self.include.push(pattern.into());
        self
    }

    /// Adds a name pattern that is never inherited.
    pub fn exclude(mut self, pattern: impl Into<String>) -> EnvPolicy {
        self.exclude.push(pattern.into());
        self
    }
}

/// Which stream a chunk of command output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A command to run (spec §4.1 `exec_command`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CommandRequest {
    /// The shell command line.
    pub command: String,
    /// How long it may run; the environment clamps it to its maximum.
    pub timeout: Duration,
    /// Directory to run in, relative to the working directory; the working directory if
    /// `None`.
    pub working_dir: Option<PathBuf>,
    /// Extra environment variables, added after the environment's filtering policy.
    pub env: BTreeMap<String, String>,
    /// Bytes written to the command's standard input (then closed); `None` (the default)
    /// gives it `/dev/null`. Environments that cannot feed standard input ignore it.
    pub stdin: Option<Vec<u8>>,
    /// The sandbox policy for this command alone; `None` (the default) runs it under the
    /// environment's own. A session's mode sets it (`read-only` and `plan` ask for
    /// [`SandboxPolicy::ReadOnly`], `full-access` for [`SandboxPolicy::FullAccess`]).
    /// [`LocalExecutionEnvironment`] tightens freely and loosens only as far as its host
    /// allowed ([`LocalExecutionEnvironment::with_per_call_policy_up_to`]); an environment
    /// that cannot enforce a policy must refuse the command rather than run it unconfined
    /// (the remote one sends the policy along, and a server that cannot enforce it refuses).
    pub sandbox: Option<SandboxPolicy>,
}

impl CommandRequest {
    /// A command with a timeout, in the working directory, with no extra variables.
    pub fn new(command: impl Into<String>, timeout: Duration) -> CommandRequest {
        CommandRequest {
            command: command.into(),
            timeout,
            working_dir: None,
            env: BTreeMap::new(),
            stdin: None,
            sandbox: None,
        }
    }

    /// Runs the command under `policy` instead of the environment's own (see
    /// [`sandbox`](Self::sandbox)).
    pub fn with_sandbox_policy(mut self, policy: SandboxPolicy) -> CommandRequest {
        self.sandbox = Some(policy);
        self
    }

    /// Feeds `bytes` to the command's standard input (see [`stdin`](Self::stdin)).
    pub fn with_stdin(mut self, bytes: impl Into<Vec<u8>>) -> CommandRequest {
        self.stdin = Some(bytes.into());
        self
    }
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ExecResult {
    /// Captured standard output (head and tail kept when it exceeded the capture cap).
    pub stdout: String,
    /// Captured standard error (head and tail kept when it exceeded the capture cap).
    pub stderr: String,
    /// Exit code; `None` when the process was killed by a signal.
    pub exit_code: Option<i32>,
    /// The signal that ended the process, if any.
    pub signal: Option<i32>,
    /// The timeout fired and the process group was terminated.
    pub timed_out: bool,
    /// The command was cancelled through its cancel token.
    pub cancelled: bool,
    /// Wall-clock time from spawn to return.
    pub duration: Duration,
    /// Total bytes the command wrote to stdout (also what was not kept).
    pub stdout_bytes: u64,
    /// Total bytes the command wrote to stderr (also what was not kept).
    pub stderr_bytes: u64,
    /// Part of the output was dropped from the capture (the totals say how much).
    pub capture_truncated: bool,
    /// A process left the command's process group (for example with `setsid`) and may
    /// still be running; it was not waited for.
    pub escaped_processes: bool,
    /// The command ran under a sandbox and failed in a way that looks like the sandbox
    /// refused something (exit code not 0 and a "Permission denied", "Operation not
    /// permitted" or "Read-only file system" in its output).
    pub sandbox_denied: bool,
}

impl ExecResult {
    /// The spec's message for a command that timed out after `timeout` (§5.4), which the
    /// shell tool appends to the partial output it shows the model.
    pub fn timeout_message(timeout: Duration) -> String {
        format!(
            "[ERROR: Command timed out after {}ms. Partial output is shown above.\n\
             You can retry with a longer timeout by setting the timeout_ms parameter.]",
            timeout.as_millis()
        )
    }
}

/// One entry of [`ExecutionEnvironment::list_directory`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Path relative to the listed directory, `/`-separated.
    pub name: String,
    /// Whether it is a directory.
    pub is_dir: bool,
    /// Size in bytes for files.
    pub size: Option<u64>,
}

/// What [`ExecutionEnvironment::stat`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStat {
    /// Whether it is a directory.
    pub is_dir: bool,
    /// Size in bytes.
    pub size: u64,
    /// Last modification time, where known.
    pub modified: Option<SystemTime>,
}

/// A text file read by [`ExecutionEnvironment::read_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileContent {
    /// The requested lines, exactly as in the file (line endings and BOM kept).
    pub text: String,
    /// Size of the whole file in bytes.
    pub size: u64,
    /// Number of lines in the whole file.
    pub total_lines: usize,
}

/// Options of [`ExecutionEnvironment::grep`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GrepOptions {
    /// Match case-insensitively.
    pub case_insensitive: bool,
    /// Only search files matching this glob, as ripgrep's `--glob`: without a `/` it
    /// matches names at any depth (`*.rs`, `*.{ts,tsx}`), with one it matches paths from
    /// the searched directory (`src/**/*.ts`); a leading `!` excludes instead (`!tests`).
    pub glob_filter: Option<String>,
    /// Stop after this many matching lines.
    pub max_results: usize,
    /// Which search implementation the local environment uses. Both give the same
    /// results; the choice exists for tests and benchmarks.
    pub backend: GrepBackend,
}

impl Default for GrepOptions {
    fn default() -> Self {
        GrepOptions {
            case_insensitive: false,
            glob_filter: None,
            max_results: 100,
            backend: GrepBackend::Auto,
        }
    }
}

/// Which search implementation the local environment's grep uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum GrepBackend {
    /// ripgrep when `rg` (version 11 or later) is on `PATH`, the in-process search
    /// otherwise or when ripgrep fails.
    #[default]
    Auto,
    /// Always ripgrep; an error of kind `NotFound` when it is not installed.
    Ripgrep,
    /// Always the in-process search.
    InProcess,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GrepMatch {
    /// The file, as given or relative to the searched directory.
    pub path: String,
    /// 1-based line number.
    pub line_number: u64,
    /// The line, without its line ending.
    pub line: String,
}

/// The result of a search.
///
/// Built from [`GrepOutput::default`] outside the crate (`#[non_exhaustive]`: new fields
/// can come), with its public fields set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct GrepOutput {
    /// Matching lines, ordered by path then line number. Paths are in tree order (names
    /// compared bytewise, a directory's files where the directory's name sorts), as
    /// `rg --sort path` lists them.
    pub matches: Vec<GrepMatch>,
    /// More matches existed than `max_results`.
    pub truncated: bool,
    /// What the search could not cover whole, one `(path, what was searched)` per file
    /// (`("big.log", "line 1 is longer than 8 MiB; only its first 8 MiB were searched")`;
    /// the path as in [`GrepMatch::path`], empty for a note about no one file): a match
    /// there may have been missed. Empty when every file was searched whole, the only case
    /// in which no matches means the pattern is absent.
    pub cut_short: Vec<(String, String)>,
}

/// Called with each chunk of command output as it arrives, on the thread that runs the
/// command (the caller of `exec_command`, which reads the pipes while it waits).
pub type OutputCallback<'a> = &'a (dyn Fn(OutputStream, &[u8]) + Send + Sync);

/// Where tools run (spec §4.1). Object-safe and `Send + Sync`: a session holds an
/// `Arc<dyn ExecutionEnvironment>` and calls it from several tool threads at once.
///
/// Relative paths resolve against [`working_directory`](Self::working_directory).
/// Errors are `io::Error`s whose message says what happened in words a model can act on.
///
/// `Arc<E>` and `Box<E>` (also `Arc<dyn ExecutionEnvironment>`) implement the trait by
/// forwarding, so wrappers such as [`ReadOnlyExecutionEnvironment`] can hold a shared
/// environment.
///
/// # A host's own environment
///
/// Implement the trait to run tools elsewhere, or wrap [`LocalExecutionEnvironment`] to
/// add a policy. This one refuses commands that mention `git push` and forwards the rest
/// with [`forward_execution_environment!`](crate::forward_execution_environment):
///
/// ```
/// use std::io;
/// use std::time::Duration;
/// use agentloop::CancelToken;
/// use agentloop::exec::*;
///
/// struct NoPush(LocalExecutionEnvironment);
///
/// impl ExecutionEnvironment for NoPush {
///     fn exec_command(
///         &self,
///         request: &CommandRequest,
///         on_output: OutputCallback<'_>,
///         cancel: &CancelToken,
///     ) -> io::Result<ExecResult> {
///         if request.command.contains("git push") {
///             return Err(io::Error::new(
///                 io::ErrorKind::PermissionDenied,
///                 "pushing is not allowed here; commit locally and say so in your answer",
///             ));
///         }
///         self.0.exec_command(request, on_output, cancel)
///     }
///
///     // Everything else goes to the local environment unchanged.
///     agentloop::forward_execution_environment!(self.0 =>
///         read_file, read_bytes, write_file, write_file_if_unchanged, remove_file,
///         file_exists, stat, list_directory, grep, glob, initialize, warnings, cleanup,
///         working_directory, platform, os_version, max_command_timeout, files_are_local,
///         start_background);
/// }
///
/// let dir = std::env::temp_dir().join(format!("agentloop-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let env = NoPush(LocalExecutionEnvironment::new(dir.as_path())?);
/// let cancel = CancelToken::new();
/// let push = CommandRequest::new("git push origin main", Duration::from_secs(10));
/// let err = env.exec_command(&push, &|_, _| {}, &cancel).unwrap_err();
/// assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
///
/// let echo = CommandRequest::new("echo allowed", Duration::from_secs(10));
/// assert_eq!(env.exec_command(&echo, &|_, _| {}, &cancel)?.stdout, "allowed\n");
/// # Ok::<(), io::Error>(())
/// ```
pub trait ExecutionEnvironment: Send + Sync {
    /// Reads a text file; `offset` is the 1-based first line, `limit` the number of lines.
    /// A binary file is an error of kind `InvalidData`.
    fn read_file(
        &self,
        path: &Path,
        offset: Option<usize>,
        limit: Option<usize>,
    ) -> io::Result<FileContent>;

    /// Reads a whole file as bytes (images, exact-content edits).
    fn read_bytes(&self, path: &Path) -> io::Result<Vec<u8>>;

    /// Writes a whole file atomically, creating parent directories and keeping an existing
    /// file's permissions.
    fn write_file(&self, path: &Path, content: &[u8]) -> io::Result<()>;

    /// Writes like [`write_file`](Self::write_file), but only if the file still has the
    /// size and modification time of `expected` (what the caller read); otherwise an error
    /// saying the file changed, and nothing is written. The default compares with
    /// [`stat`](Self::stat) and then writes; the local environment compares again right
    /// before its atomic rename.
    fn write_file_if_unchanged(
        &self,
        path: &Path,
        content: &[u8],
        expected: &FileStat,
    ) -> io::Result<()> {
        let now = self.stat(path)?;
        if now.is_dir || now.size != expected.size || now.modified != expected.modified {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "`{}` changed since it was read (another process wrote it); the file \
                     changed, read it again and redo the edit",
                    path.display()
                ),
            ));
        }
        self.write_file(path, content)
    }

    /// Removes a file (not a directory).
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Whether anything exists at `path`.
    fn file_exists(&self, path: &Path) -> bool;

    /// Metadata of `path`.
    fn stat(&self, path: &Path) -> io::Result<FileStat>;

    /// Lists `path` to `depth` levels (1 = direct children), sorted by name.
    fn list_directory(&self, path: &Path, depth: usize) -> io::Result<Vec<DirEntry>>;

    /// Runs a shell command; `on_output` receives chunks live; `cancel` stops it (the
    /// process group is terminated and the partial result returned with `cancelled`).
    fn exec_command(
        &self,
        request: &CommandRequest,
        on_output: OutputCallback<'_>,
        cancel: &CancelToken,
    ) -> io::Result<ExecResult>;

    /// Starts `request.command` in the background and returns its handle at once (see
    /// [`BackgroundProcess`]): in its own process group, with the environment filtering,
    /// sandbox and redaction of [`exec_command`](Self::exec_command), and a pipe for its
    /// standard input that stays open (`request.stdin`, when given, is written to it
    /// first). `request.timeout` does not apply: the process runs until it exits or is
    /// killed, or its handle is dropped. Each output stream keeps at most `output_limit`
    /// bytes (its first quarter and its newest bytes). `on_exit` is called once, on another
    /// thread, as soon as the process has exited.
    ///
    /// The default refuses with an error of kind `Unsupported`, so that an environment
    /// written before background processes existed keeps compiling and says so.
    fn start_background(
        &self,
        request: &CommandRequest,
        output_limit: usize,
        on_exit: ExitCallback,
    ) -> io::Result<Box<dyn BackgroundProcess>> {
        let _ = (request, output_limit, on_exit);
        Err(background::unsupported())
    }

    /// Searches file contents under `path` for the regex `pattern`.
    fn grep(&self, pattern: &str, path: &Path, options: &GrepOptions) -> io::Result<GrepOutput>;

    /// Finds files matching `pattern` under `path`, newest first.
    fn glob(&self, pattern: &str, path: &Path) -> io::Result<Vec<String>>;

    /// Prepares the environment (called once when a session starts).
    fn initialize(&self) -> io::Result<()> {
        Ok(())
    }

    /// What the environment wants the host to know when a session starts (for example
    /// which parts of a sandbox this kernel does not enforce); the session emits each as a
    /// `WARNING` event. Default: nothing.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// Releases what the environment holds (called when a session ends).
    fn cleanup(&self) -> io::Result<()> {
        Ok(())
    }

    /// The directory relative paths resolve against.
    fn working_directory(&self) -> &Path;

    /// `"linux"`, `"darwin"`, `"windows"`, …
    fn platform(&self) -> String;

    /// A human-readable OS version.
    fn os_version(&self) -> String;

    /// The longest command timeout this environment allows. Default 600 s.
    fn max_command_timeout(&self) -> Duration {
        Duration::from_secs(600)
    }

    /// Whether the file operations on the working directory and below it (`read_file`,
    /// `read_bytes`, `write_file`, `write_file_if_unchanged`, `remove_file`, `stat`) finish
    /// in the time of local storage: no network file system and no FUSE daemon that could
    /// leave one waiting forever. Asked before each call of a single-file tool
    /// ([`RegisteredTool::bounded_file_io`](crate::tools::RegisteredTool::bounded_file_io)):
    /// where it holds, the session runs the call on the round's own thread, as it runs a
    /// command; elsewhere on a helper thread, which an interrupt or an abort leaves behind
    /// when the call is stuck. Default `false`: say `true` only where it holds, and keep
    /// the answer cheap.
    ///
    /// [`LocalExecutionEnvironment`] answers from the mount table: `true` when the working
    /// directory and everything mounted below it are on local file systems.
    fn files_are_local(&self) -> bool {
        false
    }
}

impl<E: ExecutionEnvironment + ?Sized> ExecutionEnvironment for Arc<E> {
    crate::forward_execution_environment!(**self =>
            read_file, read_bytes, write_file, write_file_if_unchanged, remove_file,
            file_exists, stat, list_directory, exec_command, grep, glob, initialize, warnings,
            cleanup, working_directory, platform, os_version, max_command_timeout,
            files_are_local, start_background);
}

impl<E: ExecutionEnvironment + ?Sized> ExecutionEnvironment for Box<E> {
    crate::forward_execution_environment!(**self =>
            read_file, read_bytes, write_file, write_file_if_unchanged, remove_file,
            file_exists, stat, list_directory, exec_command, grep, glob, initialize, warnings,
            cleanup, working_directory, platform, os_version, max_command_timeout,
            files_are_local, start_background);
}
