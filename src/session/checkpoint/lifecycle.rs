//! When a session takes checkpoints and how a rewind or a fork runs in it: the session's
//! [`Checkpoints`] (the marks, the store and its recorder, the git work tree), and
//! [`CheckpointParts`], the worker's parts a checkpoint, a rewind or a fork works with,
//! borrowed for its duration (the shape of `ToolRound` and `Compaction`).
//!
//! Nothing here runs on a thread of its own; everything runs on the session's worker,
//! between inputs or between tool rounds.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::git::Git;
use super::marks::{HistoryAt, Mark, Marks};
use super::recorder::{CheckpointEnvironment, Recorder};
use super::store::{Line, Store};
use super::{Fork, Rewind, RewindReport};
use crate::cancel::CancelToken;
use crate::error::{Error, ErrorKind, Result};
use crate::exec::ExecutionEnvironment;
use crate::llm::Client;
use crate::profiles::ProviderProfile;
use crate::session::compact::CompactionState;
use crate::session::config::SessionConfig;
use crate::session::delivery::EventSink;
use crate::session::events::EventKind;
use crate::session::history::History;
use crate::session::model_call::check_provider;
use crate::session::transcript::resume;
use crate::session::transcript::{MarkOut, Transcript, TranscriptWriter};
use crate::session::{Start, new_session_id};
use crate::sync::lock;

/// Work for the worker between inputs (a rewind, a fork) that sends its own reply; `Some`
/// would close the session (never, today).
pub(crate) type CheckpointJob =
    Box<dyn FnOnce(&mut CheckpointParts<'_>) -> Option<crate::session::CloseReason> + Send>;

/// A session's checkpoints.
pub(crate) struct Checkpoints {
    pub(crate) marks: Marks,
    /// Tool rounds of the current input so far.
    round: usize,
    /// The environment as the host gave it (a fork and worktree children start from it).
    pub(crate) raw_env: Arc<dyn ExecutionEnvironment>,
    files: Option<Files>,
    rounds: bool,
    session_id: String,
    /// Warnings to emit at the next checkpoint.
    warnings: Vec<String>,
}

/// File checkpoints, when on.
struct Files {
    recorder: Arc<Recorder>,
    store_dir: PathBuf,
    working_dir: PathBuf,
    /// The git work tree; opened at the first checkpoint (`None` inside: not in one).
    git: Option<Option<Git>>,
    git_wanted: bool,
}

impl Checkpoints {
    /// The checkpoints of session `id` starting with `marks` (a resumed session's), and the
    /// environment its tools get: `env` with the recorder in front when file checkpoints
    /// are on. `store` is the store a resumed transcript names; `transcript` the file the
    /// session writes. Subagents (depth > 0) take none: their parent records their changes.
    pub(crate) fn start(
        config: &SessionConfig,
        id: &str,
        env: Arc<dyn ExecutionEnvironment>,
        transcript: Option<&Path>,
        depth: usize,
        (marks, store): (Marks, Option<PathBuf>),
    ) -> (Checkpoints, Arc<dyn ExecutionEnvironment>) {
        let mut checkpoints = Checkpoints {
            marks,
            round: 0,
            raw_env: env.clone(),
            files: None,
            rounds: config.checkpoints.enabled && config.checkpoints.rounds,
            session_id: id.to_string(),
            warnings: Vec::new(),
        };
        if depth > 0 {
            return (checkpoints, env);
        }
        if env.files_are_local() {
            if let Ok(dir) = std::fs::canonicalize(env.working_directory()) {
                super::worktree::clean_stale_at(&dir);
            }
        }
        if !config.checkpoints.enabled {
            return (checkpoints, env);
        }
        match Files::open(config, id, &*env, transcript, store) {
            Ok(files) => {
                let wrapped: Arc<dyn ExecutionEnvironment> =
                    Arc::new(CheckpointEnvironment::new(env, files.recorder.clone()));
                checkpoints.files = Some(files);
                (checkpoints, wrapped)
            }
            Err(why) => {
                checkpoints
                    .warnings
                    .push(format!("file checkpoints are off: {why}"));
                (checkpoints, env)
            }
        }
    }

    /// The store's directory, when file checkpoints are on.
    pub(crate) fn store_dir(&self) -> Option<&Path> {
        self.files.as_ref().map(|f| f.store_dir.as_path())
    }

    /// Takes the file checkpoint before input `input` (round `round`); its id.
    fn take(&mut self, input: usize, round: usize, cancel: &CancelToken) -> Option<u64> {
        let files = self.files.as_mut()?;
        let git_wanted = files.git_wanted;
        let git = files
            .git
            .get_or_insert_with(|| git_wanted.then(|| Git::open(&files.working_dir)).flatten());
        let mut log = lock(&files.recorder.log);
        if log.current.is_none() {
            // The session's first checkpoint: end one a crash left open.
            if let Some(last) = log.store.last_id() {
                if log.store.read(last).is_ok_and(|s| !s.ended) {
                    let tree = git.as_ref().and_then(|g| {
                        g.snapshot(&files.store_dir.join("index"), None, cancel)
                            .ok()
                    });
                    let _ = log.store.append_to(last, &Line::End { git_tree: tree });
                }
            }
        }
        let mut current = match log.store.create() {
            Ok(current) => current,
            Err(err) => {
                self.warnings
                    .push(format!("the checkpoint before input {input} failed: {err}"));
                return None;
            }
        };
        let reference = format!(
            "refs/agentloop/checkpoints/{}/{}",
            self.session_id, current.id
        );
        let (git_tree, git_ref) = match git {
            Some(git) => {
                match git.snapshot(&files.store_dir.join("index"), Some(&reference), cancel) {
                    Ok(tree) => (Some(tree), Some(reference)),
                    Err(err) => {
                        self.warnings.push(format!(
                            "the git snapshot before input {input} failed, so what commands \
                         change in it is not covered: {err}"
                        ));
                        (None, None)
                    }
                }
            }
            None => (None, None),
        };
        let start = Line::Start {
            session: self.session_id.clone(),
            input,
            round,
            fs_time: current.fs_time,
            git_tree,
            git_ref,
        };
        let id = current.id;
        let written = log.store.append(&mut current, &start);
        log.begin(current);
        let refs = std::mem::take(&mut log.store.dropped_refs);
        self.warnings.append(&mut log.store.notices);
        drop(log);
        if let (Some(git), false) = (git.as_ref(), refs.is_empty()) {
            let _ = git.delete_refs(&refs, cancel);
        }
        written.ok().map(|()| id)
    }

    /// The input ended: the working tree's git tree now, as what the agent left.
    pub(crate) fn end_input(&mut self, cancel: &CancelToken) {
        let Some(files) = self.files.as_mut() else {
            return;
        };
        let mut log = lock(&files.recorder.log);
        let Some(id) = log.current.as_ref().map(|c| c.id) else {
            return;
        };
        let git_tree = match files.git.as_ref().and_then(Option::as_ref) {
            Some(git) => {
                let reference = format!("refs/agentloop/checkpoints/{}/{id}-end", self.session_id);
                git.snapshot(&files.store_dir.join("index"), Some(&reference), cancel)
                    .ok()
            }
            None => None,
        };
        let _ = log.append(&Line::End { git_tree });
        self.warnings.append(&mut log.store.notices);
    }

    /// Rewinds the files to checkpoint `id`.
    fn rewind_files(
        &mut self,
        id: u64,
        rewind: &Rewind,
        report: &mut RewindReport,
        cancel: &CancelToken,
    ) -> Result<()> {
        let files = self.files.as_mut().ok_or_else(|| {
            Error::new(
                ErrorKind::Configuration,
                "file checkpoints are off in this session (SessionConfig::with_checkpoints), \
                 so its files cannot be rewound",
            )
        })?;
        let git_wanted = files.git_wanted;
        let git = files
            .git
            .get_or_insert_with(|| git_wanted.then(|| Git::open(&files.working_dir)).flatten());
        let mut log = lock(&files.recorder.log);
        super::rewind::rewind_files(
            &mut log,
            git.as_ref(),
            &files.working_dir,
            id,
            rewind,
            report,
            cancel,
        )
        .map_err(|err| {
            Error::new(
                ErrorKind::Io,
                format!("the files could not be rewound: {err}"),
            )
            .with_source(err)
        })?;
        if !rewind.dry_run {
            // The checkpoints undone are gone; the next input starts a new one.
            log.current = None;
            if let Some(git) = git.as_ref() {
                let ends: Vec<String> = log
                    .store
                    .ids_from(id)
                    .iter()
                    .map(|i| format!("refs/agentloop/checkpoints/{}/{i}-end", self.session_id))
                    .collect();
                let _ = git.delete_refs(&ends, cancel);
            }
        }
        Ok(())
    }
}

impl Files {
    fn open(
        config: &SessionConfig,
        id: &str,
        env: &dyn ExecutionEnvironment,
        transcript: Option<&Path>,
        store: Option<PathBuf>,
    ) -> std::result::Result<Files, String> {
        if !env.files_are_local() {
            return Err(
                "the environment's files are not on a local file system of this \
                        machine (ExecutionEnvironment::files_are_local)"
                    .to_string(),
            );
        }
        let working_dir = std::fs::canonicalize(env.working_directory())
            .map_err(|err| format!("the working directory cannot be resolved: {err}"))?;
        let settings = &config.checkpoints;
        let store_dir = match (store, &settings.dir, transcript) {
            (Some(store), _, _) => store,
            (None, Some(dir), _) => dir.join(id),
            (None, None, Some(transcript)) => {
                let mut name = transcript.as_os_str().to_os_string();
                name.push(".checkpoints");
                PathBuf::from(name)
            }
            (None, None, None) => {
                return Err("there is no transcript to keep them beside and no \
                            CheckpointConfig::dir"
                    .to_string());
            }
        };
        let store_dir = std::path::absolute(&store_dir).unwrap_or(store_dir);
        let store = Store::open(&store_dir, settings.max_bytes)
            .map_err(|err| format!("the store {} cannot be used: {err}", store_dir.display()))?;
        let store_dir = std::fs::canonicalize(&store_dir).unwrap_or(store_dir);
        let recorder = Arc::new(Recorder::new(store, vec![store_dir.clone()]));
        Ok(Files {
            recorder,
            store_dir,
            working_dir,
            git: None,
            git_wanted: settings.git,
        })
    }
}

/// The session's parts a checkpoint, a rewind or a fork works with.
pub(crate) struct CheckpointParts<'a> {
    pub(crate) checkpoints: &'a mut Checkpoints,
    pub(crate) history: &'a Mutex<History>,
    pub(crate) compaction: &'a mut CompactionState,
    pub(crate) history_chars: &'a mut usize,
    pub(crate) transcript: Option<&'a Arc<TranscriptWriter>>,
    pub(crate) events: &'a EventSink,
    pub(crate) cancel: &'a CancelToken,
    pub(crate) profile: &'a ProviderProfile,
    pub(crate) client: &'a Client,
    pub(crate) config: &'a SessionConfig,
}

impl CheckpointParts<'_> {
    /// Marks the start of the next input (before its user turn is added) or, with `round`,
    /// of the current input's next tool round (before the response asking for it is
    /// added), and takes the file checkpoint there.
    pub(crate) fn begin(&mut self, round: bool) {
        let input = if round {
            self.checkpoints.round += 1;
            if !self.checkpoints.rounds {
                return;
            }
            self.checkpoints.marks.current_input()
        } else {
            self.checkpoints.round = 0;
            self.checkpoints.marks.next_input()
        };
        let round = self.checkpoints.round;
        let len = lock(self.history).len();
        let id = self.checkpoints.take(input, round, self.cancel);
        let store = id.and(self.checkpoints.store_dir().map(Path::to_path_buf));
        let at = HistoryAt::Current {
            epoch: self.compaction.epoch,
            len,
        };
        let mark = self
            .checkpoints
            .marks
            .push(input, round, id, store, at)
            .clone();
        if let Some(transcript) = self.transcript {
            if let Some(failure) = transcript.checkpoint(&mark_out(&mark, None)) {
                self.warn(failure, "transcript");
            }
        }
        self.flush_warnings();
    }

    /// The input ended.
    pub(crate) fn end_input(&mut self) {
        self.checkpoints.end_input(self.cancel);
        self.flush_warnings();
    }

    fn flush_warnings(&mut self) {
        for message in std::mem::take(&mut self.checkpoints.warnings) {
            self.warn(message, "checkpoint");
        }
    }

    fn warn(&self, message: String, code: &str) {
        self.events.emit(EventKind::Warning {
            message,
            code: code.to_string(),
        });
    }

    /// The history as it was at `mark`.
    fn history_at(&self, mark: &Mark) -> Result<History> {
        if let HistoryAt::Current { epoch, len } = mark.at {
            if epoch == self.compaction.epoch {
                let history = lock(self.history);
                let turns = history.turns().get(..len).unwrap_or(history.turns());
                return Ok(History::from_turns(turns.to_vec()));
            }
        }
        let unknown = || {
            Error::new(
                ErrorKind::InvalidRequest,
                format!(
                    "the history before input {} was compacted since, and no transcript \
                     keeps it; only the files can be rewound",
                    mark.input
                ),
            )
        };
        let transcript = self.transcript.ok_or_else(unknown)?;
        Transcript::read(transcript.path())?
            .history_at(mark.seq)
            .ok_or_else(unknown)
    }

    /// Rewinds as `rewind` asks; see [`Session::rewind`](crate::session::Session::rewind).
    pub(crate) fn rewind(&mut self, rewind: Rewind) -> Result<RewindReport> {
        let mark = self
            .checkpoints
            .marks
            .find(rewind.input, rewind.round)
            .cloned()
            .ok_or_else(|| {
                let what = match rewind.round {
                    0 => format!("input {}", rewind.input),
                    r => format!("tool round {r} of input {}", rewind.input),
                };
                Error::new(
                    ErrorKind::InvalidRequest,
                    format!(
                        "there is no checkpoint before {what}; {}",
                        self.checkpoints.marks.describe()
                    ),
                )
            })?;
        let mut report = RewindReport {
            input: rewind.input,
            round: rewind.round,
            dry_run: rewind.dry_run,
            ..RewindReport::default()
        };
        // The history first, so that a failure to find it changes nothing.
        let history = rewind.history.then(|| self.history_at(&mark)).transpose()?;
        if rewind.files {
            let id = mark.checkpoint.ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidRequest,
                    format!(
                        "there is no file checkpoint before input {} (file checkpoints were \
                         off, or a rewind of the files already went back past it)",
                        rewind.input
                    ),
                )
            })?;
            self.checkpoints
                .rewind_files(id, &rewind, &mut report, self.cancel)?;
            if !rewind.dry_run {
                self.checkpoints.marks.forget_checkpoints_from(id);
            }
        }
        if let Some(history) = &history {
            report.turns_removed = lock(self.history).len().saturating_sub(history.len());
        }
        if rewind.dry_run {
            return Ok(report);
        }
        if let Some(history) = &history {
            self.replace_history(history.clone(), &mark);
            self.checkpoints.marks.truncate(rewind.input, rewind.round);
        }
        if let Some(transcript) = self.transcript {
            if let Some(failure) = transcript.rewind(&rewind, &report, history.as_ref()) {
                self.warn(failure, "transcript");
            }
        }
        self.events.emit(EventKind::Rewound {
            rewind,
            report: report.clone(),
        });
        Ok(report)
    }

    fn replace_history(&mut self, history: History, mark: &Mark) {
        let tokens = history
            .turns()
            .iter()
            .map(crate::session::compaction::account::estimate_turn_tokens)
            .sum();
        self.compaction.account.reset(tokens);
        if !matches!(mark.at, HistoryAt::Current { epoch, .. } if epoch == self.compaction.epoch) {
            // A copy from the transcript: the marks still in the history count from it.
            self.compaction.epoch += 1;
        }
        *self.history_chars = history.approx_chars();
        *lock(self.history) = history;
    }

    /// Starts a session from this one's history; see
    /// [`Session::fork`](crate::session::Session::fork).
    pub(crate) fn fork(&mut self, fork: Fork) -> Result<ForkPlan> {
        let (history, before) = match fork.at {
            Some(input) => {
                let mark = self
                    .checkpoints
                    .marks
                    .find(input, 0)
                    .cloned()
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::InvalidRequest,
                            format!(
                                "there is no input {input} to fork before; {}",
                                self.checkpoints.marks.describe()
                            ),
                        )
                    })?;
                (self.history_at(&mark)?, input)
            }
            None => (lock(self.history).clone(), usize::MAX),
        };
        // The marks inside the prefix come along (history only: the files are the parent's).
        let carried: Vec<(usize, usize, usize)> = self
            .checkpoints
            .marks
            .entries()
            .iter()
            .filter(|m| m.input < before && m.round == 0)
            .filter_map(|m| match m.at {
                HistoryAt::Current { epoch, len } if epoch == self.compaction.epoch => {
                    Some((m.input, m.round, len.min(history.len())))
                }
                _ => None,
            })
            .collect();
        let config = match fork.config {
            Some(config) => config,
            None => {
                let mut config = self.config.clone();
                config.transcript_path = self.transcript.map(|t| fork_path(t.path()));
                config
            }
        };
        Ok(ForkPlan {
            profile: fork.profile.unwrap_or_else(|| self.profile.clone()),
            env: fork.env.unwrap_or_else(|| self.checkpoints.raw_env.clone()),
            client: fork.client.unwrap_or_else(|| self.client.clone()),
            config,
            start: ForkStart {
                parent: self.checkpoints.session_id.clone(),
                at: fork.at,
                history,
                marks: carried,
            },
        })
    }
}

/// A fork ready to start (the session's module launches it, after [`start_fork`]): the
/// fork's profile, environment, client and configuration, and what it starts from.
pub(crate) struct ForkPlan {
    pub(crate) profile: ProviderProfile,
    pub(crate) env: Arc<dyn ExecutionEnvironment>,
    pub(crate) client: Client,
    pub(crate) config: SessionConfig,
    pub(crate) start: ForkStart,
}

/// What a forked session starts from: the parent, the input it forked before, the history
/// and the inputs' places in it (input, round, turns before it).
pub(crate) struct ForkStart {
    pub(crate) parent: String,
    pub(crate) at: Option<usize>,
    pub(crate) history: History,
    pub(crate) marks: Vec<(usize, usize, usize)>,
}

/// What a session forked from the transcript at `path` starts from: the history before
/// input `at` (or the whole history, every call answered), and the inputs' places in it.
pub(crate) fn fork_from(path: &Path, at: Option<usize>) -> Result<ForkStart> {
    let recorded = Transcript::read(path)?;
    let (records, _) = recorded.marks();
    let (history, start, before) = match at {
        Some(input) => {
            let record = records
                .iter()
                .rev()
                .find(|r| r.mark.input == input && r.mark.round == 0)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidRequest,
                        format!("the transcript `{}` has no input {input}", path.display()),
                    )
                })?;
            let history = recorded.history_at(record.mark.seq).unwrap_or_default();
            (history, record.start, input)
        }
        None => (
            resume::repaired(recorded.history().clone()).0,
            recorded.epoch_start(),
            usize::MAX,
        ),
    };
    let marks = records
        .iter()
        .filter(|r| r.start == start && r.mark.round == 0 && r.mark.input < before)
        .map(|r| (r.mark.input, 0, r.end - r.start))
        .collect();
    Ok(ForkStart {
        parent: recorded.last_session_id().to_string(),
        at,
        history,
        marks,
    })
}

/// What a forked session starts from (`fork`): a new id, its transcript (a header and a
/// `fork` record with the history and the marks in it) and a budget of its own; the
/// caller launches it.
pub(crate) fn start_fork(
    profile: &ProviderProfile,
    env: &dyn ExecutionEnvironment,
    client: &Client,
    config: &SessionConfig,
    fork: ForkStart,
) -> Result<(String, Start)> {
    check_provider(client, profile)?;
    let id = new_session_id();
    let carried: Vec<MarkOut> = fork
        .marks
        .iter()
        .enumerate()
        .map(|(seq, &(input, round, len))| MarkOut {
            seq: seq as u64,
            input,
            round,
            checkpoint: None,
            store: None,
            turns: Some(len),
        })
        .collect();
    let transcript = match &config.transcript_path {
        Some(path) => {
            let url = crate::session::model_call::base_url(client, profile);
            let header = resume::header(&id, (profile, url), env, config, None);
            let writer = TranscriptWriter::create(path, &header)?;
            if let Some(failure) = writer.fork(&fork.parent, fork.at, &fork.history, &carried) {
                return Err(Error::new(ErrorKind::Io, failure));
            }
            Some(writer)
        }
        None => None,
    };
    let entries = carried.iter().map(|m| Mark {
        seq: m.seq,
        input: m.input,
        round: m.round,
        checkpoint: None,
        store: None,
        at: HistoryAt::Current {
            epoch: 0,
            len: m.turns.unwrap_or(0),
        },
    });
    let marks = Marks::from_entries(entries.collect(), carried.len() as u64);
    let start = Start {
        depth: 0,
        forward: None,
        history: fork.history,
        transcript,
        warnings: Vec::new(),
        // Its own budgets, prompt-cache key, MCP processes and background processes.
        budget_parent: None,
        cache_key: None,
        mcp: None,
        first_background_id: 1,
        marks: (marks, None),
        fork: true,
    };
    Ok((id, start))
}

/// A free transcript path beside `parent`'s for a fork: `<stem>.fork-<n>.jsonl`.
fn fork_path(parent: &Path) -> PathBuf {
    let stem = parent
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "session".to_string());
    let dir = parent.parent().unwrap_or(Path::new("."));
    (1..)
        .map(|n| dir.join(format!("{stem}.fork-{n}.jsonl")))
        .find(|path| !path.exists())
        .expect("some number is free")
}

/// The transcript record of `mark` (`turns`: its place, for a fork record).
pub(crate) fn mark_out(mark: &Mark, turns: Option<usize>) -> MarkOut {
    MarkOut {
        seq: mark.seq,
        input: mark.input,
        round: mark.round,
        checkpoint: mark.checkpoint,
        store: mark.store.clone(),
        turns,
    }
}
