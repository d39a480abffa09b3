//! Checkpoints, rewind and fork: undoing what the agent did to the working tree and to the
//! conversation, and branching a conversation into a new session.
//!
//! With [`CheckpointConfig`] on ([`SessionConfig::with_checkpoints`]), a session records,
//! before each input (and, with [`CheckpointConfig::rounds`], before each tool round), the
//! state of the working tree it may change:
//!
//! - **File pre-images.** The first time a span (an input, or a round) writes, edits,
//!   patches, moves or deletes a file through the file tools, the file as it was (content,
//!   permission bits, or the symlink) is kept in the checkpoint store: a copy (the file
//!   system's `copy_file_range`, a reflink where it can) or, for files of 64 KiB and more, a
//!   hard link to the inode the atomic write replaces. A file that did not exist is
//!   recorded as absent, with the directories the write created.
//! - **A git snapshot.** In a git work tree, a tree object of the working tree (what
//!   `.gitignore` ignores left out) is written with a private index (a file of the store,
//!   never the repository's `index`) and kept under the private ref
//!   `refs/agentloop/checkpoints/<session>/<n>`, at the start and at the end of each input.
//!   No commit is made, and the branches, the index, the stash and the reflogs are not
//!   touched. This is what covers the effects of shell commands (`sed -i`, `rm`, a build).
//!   Outside git, command effects are reported as not covered, never guessed.
//!
//! The store is a directory beside the transcript (`<transcript>.checkpoints`), or
//! `<dir>/<session id>` under [`CheckpointConfig::dir`]; a resumed session keeps using the
//! store its transcript names. It holds at most [`CheckpointConfig::max_bytes`] of
//! pre-images: the oldest checkpoints are dropped first, each leaving a `dropped` marker,
//! and a rewind to a dropped checkpoint is refused.
//!
//! # Rewind
//!
//! [`Session::rewind`](super::Session::rewind) puts back the files, the history, or both,
//! as they were at a checkpoint ([`Rewind`]). It never destroys what the user wrote: a
//! file whose content is not what the agent left — changed since the agent's last edit, or
//! between two inputs, or during an input by something other than the agent's tools — is
//! a [`Conflict`]: listed and left as it is, unless the rewind is forced. A dry run says
//! exactly what a rewind would restore, remove and leave, and changes nothing. A file that
//! nothing touched since the checkpoint (its change time is older) is never written, and a
//! file is only removed when it was created since. Git-based restores are limited to the
//! environment's working directory. The rewind is recorded in the transcript and as a
//! [`EventKind::Rewound`](super::EventKind::Rewound) event; a strict replay performs it
//! again at the same point ([`Transcript::steps`](super::transcript::Transcript::steps)).
//!
//! # Fork
//!
//! [`Session::fork`](super::Session::fork) starts a new session from a prefix of the
//! history ([`Fork`]): its own id, transcript, checkpoints, budgets and MCP server
//! processes, the same profile, environment and client unless the host replaces them. The
//! parent is not touched and neither sees the other's later turns.
//!
//! # Layout
//!
//! `plan.rs` decides (pure: facts in, actions and conflicts out); `store.rs` keeps the
//! manifests and pre-images on disk; `recorder.rs` is the environment decorator that
//! captures pre-images; `git.rs` runs the library's own git (hardened as `prompt/git.rs`
//! runs it: nothing of the repository's choosing runs); `rewind.rs` gathers the facts and
//! applies the plan; `marks.rs` keeps where each input starts in the history; `worktree.rs`
//! gives subagents their own `git worktree`. Checkpoints read and write the working tree
//! with `std::fs`, so they need the environment's files on this machine
//! ([`ExecutionEnvironment::files_are_local`](crate::exec::ExecutionEnvironment::files_are_local));
//! elsewhere they are off, with a warning.
//!
//! [`SessionConfig::with_checkpoints`]: super::SessionConfig::with_checkpoints

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

mod fork;
pub(crate) mod git;
pub(crate) mod lifecycle;
pub(crate) mod marks;
pub(crate) mod plan;
pub(crate) mod recorder;
pub(crate) mod rewind;
pub(crate) mod store;
pub(crate) mod worktree;

pub use fork::Fork;

/// Whether and how a session keeps checkpoints of the working tree (see the [module
/// docs](self)). Off by default.
///
/// ```
/// use agentloop::session::SessionConfig;
/// use agentloop::session::checkpoint::CheckpointConfig;
///
/// let config = SessionConfig::default()
///     .with_transcript("session.jsonl") // the store goes beside it
///     .with_checkpoints(CheckpointConfig::enabled().with_max_bytes(256 << 20));
/// assert!(config.checkpoints.enabled);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointConfig {
    /// Whether checkpoints are taken. Default `false`.
    pub enabled: bool,
    /// Where the store goes when there is no transcript (`<dir>/<session id>`), or instead
    /// of beside it. `None` (the default): beside the transcript; with neither, checkpoints
    /// are off (with a warning).
    pub dir: Option<PathBuf>,
    /// Most bytes of file pre-images the store keeps; the oldest checkpoints are dropped
    /// first. Default 512 MiB.
    pub max_bytes: u64,
    /// Also take a checkpoint before each tool round, so that a rewind can stop inside an
    /// input ([`Rewind::to_round`]). Default `false`.
    pub rounds: bool,
    /// Take git snapshots in a git work tree (what covers shell commands). Default `true`.
    pub git: bool,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            enabled: false,
            dir: None,
            max_bytes: 512 << 20,
            rounds: false,
            git: true,
        }
    }
}

impl CheckpointConfig {
    /// Checkpoints on, with the defaults.
    pub fn enabled() -> CheckpointConfig {
        CheckpointConfig {
            enabled: true,
            ..CheckpointConfig::default()
        }
    }

    /// Sets where the store goes (see [`dir`](Self::dir)).
    pub fn with_dir(mut self, dir: impl Into<PathBuf>) -> CheckpointConfig {
        self.dir = Some(dir.into());
        self
    }

    /// Sets the size cap of the store.
    pub fn with_max_bytes(mut self, bytes: u64) -> CheckpointConfig {
        self.max_bytes = bytes;
        self
    }

    /// Takes a checkpoint before each tool round too.
    pub fn with_rounds(mut self, rounds: bool) -> CheckpointConfig {
        self.rounds = rounds;
        self
    }

    /// Turns git snapshots on or off.
    pub fn with_git(mut self, git: bool) -> CheckpointConfig {
        self.git = git;
        self
    }
}

/// What [`Session::rewind`](super::Session::rewind) goes back to, and how: files and
/// history by default, or one of them; changes nothing with [`dry_run`](Self::dry_run).
///
/// Inputs are numbered from 1 in the order they entered the conversation; after a rewind
/// of the history to input `n`, the next input is input `n` again.
///
/// ```
/// use agentloop::session::checkpoint::Rewind;
///
/// let rewind = Rewind::to_input(2).files_only().dry_run();
/// assert_eq!((rewind.input, rewind.files, rewind.history), (2, true, false));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Rewind {
    /// The input to go back to: the state right before it (1-based).
    pub input: usize,
    /// 0: before the input; `r` ≥ 1: before tool round `r` of it (needs
    /// [`CheckpointConfig::rounds`]), the history ending before the response that asked for
    /// that round.
    #[serde(default)]
    pub round: usize,
    /// Restore the files.
    pub files: bool,
    /// Cut the history back.
    pub history: bool,
    /// Also overwrite files the user changed (conflicts).
    #[serde(default)]
    pub force: bool,
    /// Only say what would change.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

impl Rewind {
    /// Back to right before input `input` (1-based): files and history.
    pub fn to_input(input: usize) -> Rewind {
        Rewind {
            input,
            round: 0,
            files: true,
            history: true,
            force: false,
            dry_run: false,
        }
    }

    /// Back to right before tool round `round` (1-based) of input `input`.
    pub fn to_round(input: usize, round: usize) -> Rewind {
        Rewind {
            round,
            ..Rewind::to_input(input)
        }
    }

    /// Only the files; the history stays.
    pub fn files_only(mut self) -> Rewind {
        self.files = true;
        self.history = false;
        self
    }

    /// Only the history; the files stay.
    pub fn history_only(mut self) -> Rewind {
        self.files = false;
        self.history = true;
        self
    }

    /// Overwrite conflicts too: files changed since the agent's edit get the checkpoint's
    /// content (each listed as a conflict with `overwritten`).
    pub fn force(mut self) -> Rewind {
        self.force = true;
        self
    }

    /// Change nothing; report what would change.
    pub fn dry_run(mut self) -> Rewind {
        self.dry_run = true;
        self
    }
}

/// What a rewind did (or, for a dry run, would do). Paths are absolute.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RewindReport {
    /// The input rewound to.
    pub input: usize,
    /// The round rewound to (0: the start of the input).
    #[serde(default)]
    pub round: usize,
    /// Nothing was changed: this is what a rewind would do.
    #[serde(default)]
    pub dry_run: bool,
    /// Files, symlinks and permission bits put back as they were (re-created if deleted).
    #[serde(default)]
    pub restored: Vec<PathBuf>,
    /// Files (and directories) created since the checkpoint, removed.
    #[serde(default)]
    pub removed: Vec<PathBuf>,
    /// Files the user changed: left as they are, unless the rewind was forced.
    #[serde(default)]
    pub conflicts: Vec<Conflict>,
    /// What the checkpoint cannot restore, in words (commands outside git, files over the
    /// cap, changes outside the working directory, …).
    #[serde(default)]
    pub not_covered: Vec<String>,
    /// History turns removed.
    #[serde(default)]
    pub turns_removed: usize,
}

/// A file a rewind found changed by someone other than the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Conflict {
    /// The file.
    pub path: PathBuf,
    /// What was found ("changed since the agent's last edit", …).
    pub reason: String,
    /// The rewind was forced and put the checkpoint's content over the user's change.
    #[serde(default)]
    pub overwritten: bool,
}
