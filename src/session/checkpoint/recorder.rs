//! The decorator that records pre-images: every `write_file`, `write_file_if_unchanged`
//! and `remove_file` of the session's tools (write, edit, patch, move, delete all come down
//! to these) first keeps the file as it was, the first time in the current checkpoint; every
//! `exec_command` marks the checkpoint as having run a command. Everything else is
//! forwarded untouched.
//!
//! A capture is provisional until the inner call returns: a change that failed and left the
//! file as it was is forgotten. The decorator never changes what the inner environment
//! does or returns, and never fails a call because a pre-image could not be kept (that
//! pre-image is recorded as lost, and a rewind reports it).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::store::{Current, Line, PreState, StatPrint, Store};
use crate::cancel::CancelToken;
use crate::exec::{CommandRequest, ExecResult, ExecutionEnvironment, OutputCallback};
use crate::sync::lock;

/// The store and the checkpoint being recorded, shared by the session's worker (which
/// starts and ends checkpoints) and the tool threads (which capture).
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) log: Mutex<Log>,
    /// Paths never recorded: the store itself, the subagents' worktrees.
    skip: Vec<PathBuf>,
}

/// What the recorder holds under its lock.
#[derive(Debug)]
pub(crate) struct Log {
    pub(crate) store: Store,
    pub(crate) current: Option<Current>,
    /// Paths captured in the current checkpoint.
    captured: HashSet<PathBuf>,
    /// The current checkpoint ran a command.
    commands: bool,
}

impl Log {
    /// Makes `current` the checkpoint being recorded.
    pub(crate) fn begin(&mut self, current: Current) {
        self.current = Some(current);
        self.captured.clear();
        self.commands = false;
    }

    /// Appends `line` to the current checkpoint's manifest.
    pub(crate) fn append(&mut self, line: &Line) -> io::Result<()> {
        match self.current.as_mut() {
            Some(current) => self.store.append(current, line),
            None => Ok(()),
        }
    }
}

/// A change about to happen at a path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    /// A write (follows a final symlink, as the environments write through one).
    Write,
    /// A removal (of the link itself when the path is a symlink).
    Remove,
}

/// A capture waiting for the change's outcome.
struct Provisional {
    path: PathBuf,
    state: PreState,
    before: Option<StatPrint>,
    /// The blob's inode, when the pre-image is a hard link.
    linked: Option<StatPrint>,
    after_commands: bool,
    changed_at: Option<super::store::FsTime>,
}

impl Recorder {
    pub(crate) fn new(store: Store, skip: Vec<PathBuf>) -> Recorder {
        Recorder {
            log: Mutex::new(Log {
                store,
                current: None,
                captured: HashSet::new(),
                commands: false,
            }),
            skip,
        }
    }

    /// Runs `change` (a write or removal of `path`, relative to `working_dir`), keeping the
    /// pre-image first.
    fn around<T>(
        &self,
        working_dir: &Path,
        path: &Path,
        kind: Change,
        change: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        let Some((target, created_dirs)) = locate(working_dir, path, kind) else {
            return change();
        };
        if self.skip.iter().any(|skip| target.starts_with(skip)) {
            return change();
        }
        let provisional = self.capture(&target, created_dirs);
        let result = change();
        self.settle(&target, provisional, result.is_ok());
        result
    }

    fn capture(&self, target: &Path, created_dirs: Vec<PathBuf>) -> Option<Provisional> {
        let mut log = lock(&self.log);
        let Log {
            store,
            current,
            captured,
            commands,
        } = &mut *log;
        let current = current.as_mut()?;
        if !captured.insert(target.to_path_buf()) {
            return None;
        }
        let meta = fs::symlink_metadata(target);
        let before = meta.as_ref().ok().map(StatPrint::of);
        // Not as the agent last left it: someone (or a command) changed it since, at its
        // change time (a removal's time is not known: the far future, the careful side).
        let changed_at = store
            .last_post(target)
            .is_some_and(|left| left != before)
            .then(|| before.map_or((i64::MAX, 0), |b| b.ctime()));
        let (state, linked) = match meta {
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                (PreState::Absent { created_dirs }, None)
            }
            Err(err) => (lost(format!("it could not be examined: {err}")), None),
            Ok(meta) if meta.file_type().is_symlink() => match fs::read_link(target) {
                Ok(link) => (PreState::Symlink { target: link }, None),
                Err(err) => (lost(format!("its link could not be read: {err}")), None),
            },
            Ok(meta) if meta.is_file() => store.keep(current, target, &meta),
            Ok(_) => (lost("it is not a regular file or a symlink".into()), None),
        };
        Some(Provisional {
            path: target.to_path_buf(),
            state,
            before,
            linked,
            after_commands: *commands,
            changed_at,
        })
    }

    /// Commits or forgets `provisional` now that the change returned; records what the
    /// agent left.
    fn settle(&self, target: &Path, provisional: Option<Provisional>, succeeded: bool) {
        let after = StatPrint::at(target);
        // A failed change that still changed something (a partial remove) is recorded too.
        let moved = provisional.as_ref().is_some_and(|p| p.before != after);
        let mut log = lock(&self.log);
        if log.current.is_none() {
            return;
        }
        if let Some(mut capture) = provisional {
            if !succeeded && after == capture.before {
                // Nothing happened: forget the capture, so a later change takes it again.
                let Log {
                    store,
                    current,
                    captured,
                    ..
                } = &mut *log;
                if let Some(current) = current.as_ref() {
                    store.forget(current, &capture.state);
                }
                captured.remove(target);
                return;
            }
            if let (Some(linked), Some(after)) = (capture.linked, after) {
                if linked.same_inode(&after) {
                    // Written in place: the linked pre-image was overwritten too.
                    capture.state =
                        lost("the environment wrote it in place, over the kept pre-image".into());
                }
            }
            let line = Line::Pre {
                path: capture.path,
                state: capture.state,
                after_commands: capture.after_commands,
                changed_at: capture.changed_at,
            };
            let _ = log.append(&line);
        }
        if succeeded || moved {
            let _ = log.append(&Line::Post {
                path: target.to_path_buf(),
                stat: after,
            });
        }
    }

    /// A command is about to run in the current checkpoint.
    fn command(&self) {
        let mut log = lock(&self.log);
        if log.current.is_some() && !log.commands {
            log.commands = true;
            let _ = log.append(&Line::Commands);
        }
    }
}

fn lost(why: String) -> PreState {
    PreState::Lost { why }
}

/// Where a change of `path` lands: its absolute path with the existing directories'
/// symlinks resolved (and, for a write, a final symlink followed), and the directories the
/// change will create (shallowest first). `None` when it cannot be told.
fn locate(working_dir: &Path, path: &Path, kind: Change) -> Option<(PathBuf, Vec<PathBuf>)> {
    let mut full = crate::exec::normalize(&working_dir.join(path));
    for _ in 0..40 {
        let name = full.file_name()?.to_os_string();
        let (parent, created_dirs) = existing_parent(full.parent()?)?;
        full = parent.join(&name);
        let meta = fs::symlink_metadata(&full);
        let is_link = meta.as_ref().is_ok_and(|m| m.file_type().is_symlink());
        if kind == Change::Remove || !is_link {
            return Some((full, created_dirs));
        }
        let link = fs::read_link(&full).ok()?;
        full = crate::exec::normalize(&parent.join(link));
    }
    None
}

/// `dir` with the symlinks of its existing part resolved, and its missing directories.
fn existing_parent(dir: &Path) -> Option<(PathBuf, Vec<PathBuf>)> {
    let mut missing = Vec::new();
    let mut existing = dir.to_path_buf();
    loop {
        match fs::canonicalize(&existing) {
            Ok(canonical) => {
                let mut resolved = canonical;
                let mut created = Vec::with_capacity(missing.len());
                for name in missing.iter().rev() {
                    resolved.push(name);
                    created.push(resolved.clone());
                }
                return Some((resolved, created));
            }
            Err(_) => {
                let name = match existing.components().next_back()? {
                    Component::Normal(name) => name.to_os_string(),
                    _ => return None,
                };
                missing.push(name);
                existing = existing.parent()?.to_path_buf();
            }
        }
    }
}

/// The session's environment with pre-images recorded before every file change.
pub(crate) struct CheckpointEnvironment {
    inner: Arc<dyn ExecutionEnvironment>,
    recorder: Arc<Recorder>,
}

impl CheckpointEnvironment {
    pub(crate) fn new(
        inner: Arc<dyn ExecutionEnvironment>,
        recorder: Arc<Recorder>,
    ) -> CheckpointEnvironment {
        CheckpointEnvironment { inner, recorder }
    }
}

impl ExecutionEnvironment for CheckpointEnvironment {
    fn write_file(&self, path: &Path, content: &[u8]) -> io::Result<()> {
        let wd = self.inner.working_directory();
        self.recorder.around(wd, path, Change::Write, || {
            self.inner.write_file(path, content)
        })
    }

    fn write_file_if_unchanged(
        &self,
        path: &Path,
        content: &[u8],
        expected: &crate::exec::FileStat,
    ) -> io::Result<()> {
        let wd = self.inner.working_directory();
        self.recorder.around(wd, path, Change::Write, || {
            self.inner.write_file_if_unchanged(path, content, expected)
        })
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let wd = self.inner.working_directory();
        self.recorder
            .around(wd, path, Change::Remove, || self.inner.remove_file(path))
    }

    fn exec_command(
        &self,
        request: &CommandRequest,
        on_output: OutputCallback<'_>,
        cancel: &CancelToken,
    ) -> io::Result<ExecResult> {
        self.recorder.command();
        self.inner.exec_command(request, on_output, cancel)
    }

    /// A background command may change files for as long as it runs: counted as a command
    /// (its changes are the git snapshot's to cover, or reported as not covered).
    fn start_background(
        &self,
        request: &CommandRequest,
        output_limit: usize,
        on_exit: crate::exec::ExitCallback,
    ) -> io::Result<Box<dyn crate::exec::BackgroundProcess>> {
        self.recorder.command();
        self.inner.start_background(request, output_limit, on_exit)
    }

    crate::forward_execution_environment!(self.inner =>
        read_file, read_bytes, file_exists, stat, list_directory, grep, glob, initialize,
        warnings, cleanup, working_directory, platform, os_version, max_command_timeout,
        files_are_local);
}
