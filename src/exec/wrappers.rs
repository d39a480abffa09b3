//! Composable wrappers around any [`ExecutionEnvironment`] (spec §4.4): a read-only view
//! and a logging view.
//!
//! Wrappers hold their inner environment and forward to it; they never touch the
//! filesystem or spawn processes themselves, and the logging wrapper never logs file
//! contents, command output or environment values.

use std::fmt;
use std::io;
use std::path::Path;
use std::time::Instant;

use super::{
    BackgroundProcess, CommandRequest, DirEntry, ExecResult, ExecutionEnvironment, ExitCallback,
    FileContent, FileStat, GrepOptions, GrepOutput, OutputCallback,
};
use crate::cancel::CancelToken;

/// Rejects file writes and removals with a `PermissionDenied` error; everything else goes
/// to the inner environment.
///
/// Commands are allowed: a shell command can still write files. To keep commands from
/// writing, run the inner environment in a container or sandbox, or do not offer the shell
/// tool.
///
/// ```
/// use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment, ReadOnlyExecutionEnvironment};
/// use std::path::Path;
///
/// let env = ReadOnlyExecutionEnvironment::new(LocalExecutionEnvironment::new(std::env::temp_dir())?);
/// let err = env.write_file(Path::new("x.txt"), b"x").unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ReadOnlyExecutionEnvironment<E> {
    inner: E,
}

impl<E: fmt::Debug> fmt::Debug for ReadOnlyExecutionEnvironment<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ReadOnlyExecutionEnvironment")
            .field(&self.inner)
            .finish()
    }
}

impl<E: ExecutionEnvironment> ReadOnlyExecutionEnvironment<E> {
    /// Wraps `inner`.
    pub fn new(inner: E) -> Self {
        ReadOnlyExecutionEnvironment { inner }
    }

    /// The wrapped environment.
    pub fn inner(&self) -> &E {
        &self.inner
    }
}

fn read_only(action: &str, path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "cannot {action} `{}`: write operations are disabled in read-only mode; \
             report the change you would make instead",
            path.display()
        ),
    )
}

impl<E: ExecutionEnvironment> ExecutionEnvironment for ReadOnlyExecutionEnvironment<E> {
    fn write_file(&self, path: &Path, _content: &[u8]) -> io::Result<()> {
        Err(read_only("write", path))
    }
    fn write_file_if_unchanged(
        &self,
        path: &Path,
        _content: &[u8],
        _expected: &FileStat,
    ) -> io::Result<()> {
        Err(read_only("write", path))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        Err(read_only("remove", path))
    }
    crate::forward_execution_environment!(self.inner =>
        read_file, read_bytes, file_exists, stat, list_directory, exec_command, grep, glob,
        initialize, warnings, cleanup, working_directory, platform, os_version,
        max_command_timeout, files_are_local, start_background);
}

/// A log sink: receives one line per operation.
pub type LogSink = Box<dyn Fn(&str) + Send + Sync>;

/// Calls a log sink with one line per operation, then forwards it to the inner environment.
///
/// Lines name the operation, its path or command, and its outcome with timing
/// (`exec: cargo test` … `exec: exit 0 in 1532 ms`). They never contain file contents,
/// command output or environment values; the command line itself is logged, so a host that
/// puts secrets on command lines should not log them.
///
/// ```
/// use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment, LoggingExecutionEnvironment};
/// use std::path::Path;
/// use std::sync::{Arc, Mutex};
///
/// let lines = Arc::new(Mutex::new(Vec::new()));
/// let sink = Arc::clone(&lines);
/// let env = LoggingExecutionEnvironment::new(
///     LocalExecutionEnvironment::new(std::env::temp_dir())?,
///     move |line: &str| sink.lock().unwrap().push(line.to_string()),
/// );
/// env.file_exists(Path::new("surely-not-here.txt"));
/// assert_eq!(lines.lock().unwrap()[0], "file_exists: surely-not-here.txt -> false");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct LoggingExecutionEnvironment<E> {
    inner: E,
    sink: LogSink,
}

impl<E: fmt::Debug> fmt::Debug for LoggingExecutionEnvironment<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoggingExecutionEnvironment")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<E: ExecutionEnvironment> LoggingExecutionEnvironment<E> {
    /// Wraps `inner`, sending log lines to `sink`.
    pub fn new(inner: E, sink: impl Fn(&str) + Send + Sync + 'static) -> Self {
        LoggingExecutionEnvironment {
            inner,
            sink: Box::new(sink),
        }
    }

    /// The wrapped environment.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    fn log(&self, line: String) {
        (self.sink)(&line);
    }

    /// Logs `op: what -> outcome (N ms)` for a fallible operation.
    fn logged<T>(
        &self,
        op: &str,
        what: &str,
        run: impl FnOnce() -> io::Result<T>,
        describe: impl FnOnce(&T) -> String,
    ) -> io::Result<T> {
        let start = Instant::now();
        let result = run();
        let ms = start.elapsed().as_millis();
        match &result {
            Ok(value) => self.log(format!("{op}: {what} -> {} ({ms} ms)", describe(value))),
            Err(e) => self.log(format!("{op}: {what} -> error: {e} ({ms} ms)")),
        }
        result
    }
}

impl<E: ExecutionEnvironment> ExecutionEnvironment for LoggingExecutionEnvironment<E> {
    fn read_file(
        &self,
        path: &Path,
        offset: Option<usize>,
        limit: Option<usize>,
    ) -> io::Result<FileContent> {
        let what = format!("{} offset={offset:?} limit={limit:?}", path.display());
        self.logged(
            "read_file",
            &what,
            || self.inner.read_file(path, offset, limit),
            |c| format!("{} bytes, {} lines", c.size, c.total_lines),
        )
    }
    fn read_bytes(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.logged(
            "read_bytes",
            &path.display().to_string(),
            || self.inner.read_bytes(path),
            |b| format!("{} bytes", b.len()),
        )
    }
    fn write_file(&self, path: &Path, content: &[u8]) -> io::Result<()> {
        self.logged(
            "write_file",
            &format!("{} ({} bytes)", path.display(), content.len()),
            || self.inner.write_file(path, content),
            |_| "ok".to_string(),
        )
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.logged(
            "remove_file",
            &path.display().to_string(),
            || self.inner.remove_file(path),
            |_| "ok".to_string(),
        )
    }
    fn file_exists(&self, path: &Path) -> bool {
        let exists = self.inner.file_exists(path);
        self.log(format!("file_exists: {} -> {exists}", path.display()));
        exists
    }
    fn stat(&self, path: &Path) -> io::Result<FileStat> {
        self.logged(
            "stat",
            &path.display().to_string(),
            || self.inner.stat(path),
            |s| format!("dir={} size={}", s.is_dir, s.size),
        )
    }
    fn list_directory(&self, path: &Path, depth: usize) -> io::Result<Vec<DirEntry>> {
        self.logged(
            "list_directory",
            &format!("{} depth={depth}", path.display()),
            || self.inner.list_directory(path, depth),
            |entries| format!("{} entries", entries.len()),
        )
    }
    fn exec_command(
        &self,
        request: &CommandRequest,
        on_output: OutputCallback<'_>,
        cancel: &CancelToken,
    ) -> io::Result<ExecResult> {
        self.log(format!("exec: {}", request.command));
        let start = Instant::now();
        let result = self.inner.exec_command(request, on_output, cancel);
        let ms = start.elapsed().as_millis();
        match &result {
            Ok(r) => {
                let outcome = match (r.exit_code, r.signal) {
                    _ if r.timed_out => "timed out".to_string(),
                    _ if r.cancelled => "cancelled".to_string(),
                    (Some(code), _) => format!("exit {code}"),
                    (None, Some(signal)) => format!("killed by signal {signal}"),
                    (None, None) => "ended".to_string(),
                };
                self.log(format!("exec: {outcome} in {ms} ms"));
            }
            Err(e) => self.log(format!("exec: error: {e} ({ms} ms)")),
        }
        result
    }
    fn start_background(
        &self,
        request: &CommandRequest,
        output_limit: usize,
        on_exit: ExitCallback,
    ) -> io::Result<Box<dyn BackgroundProcess>> {
        self.logged(
            "background",
            &request.command,
            || self.inner.start_background(request, output_limit, on_exit),
            |process| format!("pid {}", process.pid()),
        )
    }
    fn grep(&self, pattern: &str, path: &Path, options: &GrepOptions) -> io::Result<GrepOutput> {
        self.logged(
            "grep",
            &format!("{pattern:?} in {}", path.display()),
            || self.inner.grep(pattern, path, options),
            |out| format!("{} matches", out.matches.len()),
        )
    }
    fn glob(&self, pattern: &str, path: &Path) -> io::Result<Vec<String>> {
        self.logged(
            "glob",
            &format!("{pattern:?} in {}", path.display()),
            || self.inner.glob(pattern, path),
            |files| format!("{} files", files.len()),
        )
    }
    fn warnings(&self) -> Vec<String> {
        self.inner.warnings()
    }
    fn write_file_if_unchanged(
        &self,
        path: &Path,
        content: &[u8],
        expected: &FileStat,
    ) -> io::Result<()> {
        self.logged(
            "write_file",
            &format!("{} ({} bytes, if unchanged)", path.display(), content.len()),
            || self.inner.write_file_if_unchanged(path, content, expected),
            |_| "ok".to_string(),
        )
    }
    fn initialize(&self) -> io::Result<()> {
        self.logged(
            "initialize",
            "",
            || self.inner.initialize(),
            |_| "ok".into(),
        )
    }
    fn cleanup(&self) -> io::Result<()> {
        self.logged("cleanup", "", || self.inner.cleanup(), |_| "ok".into())
    }
    crate::forward_execution_environment!(self.inner =>
        working_directory, platform, os_version, max_command_timeout, files_are_local);
}
