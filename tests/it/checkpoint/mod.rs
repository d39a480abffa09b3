//! Checkpoints, rewind, fork and worktree subagents, in real git repositories and plain
//! directories: scripted sessions write, edit, patch, move, delete and run shell commands,
//! and the trees are compared byte for byte (modes and symlinks included) with what they
//! were before each input.

pub mod conflicts;
pub mod fork;

pub mod resume;
pub mod rewind;
pub mod worktrees;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
use agentloop::llm::Client;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::ProviderProfile;
use agentloop::session::checkpoint::CheckpointConfig;
use agentloop::session::{EventKind, Session, SessionConfig, SessionEvent};
use agentloop::tools;
use serde_json::{Value, json};

/// What is at a path: a file (permission bits, bytes), a symlink (its target), a directory
/// (permission bits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    File(u32, Vec<u8>),
    Link(PathBuf),
    Dir(u32),
}

/// Everything under `dir` but `.git`, by relative path.
pub fn tree(dir: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            let entry = if meta.file_type().is_symlink() {
                Entry::Link(std::fs::read_link(&path).unwrap())
            } else if meta.is_dir() {
                stack.push(path.clone());
                Entry::Dir(mode)
            } else {
                Entry::File(mode, std::fs::read(&path).unwrap())
            };
            out.insert(rel, entry);
        }
    }
    out
}

/// The paths where two trees differ, with both sides (for assertion messages).
pub fn differences(a: &BTreeMap<String, Entry>, b: &BTreeMap<String, Entry>) -> Vec<String> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{k}: {:?} vs {:?}", short(a.get(k)), short(b.get(k))))
        .collect()
}

fn short(entry: Option<&Entry>) -> String {
    match entry {
        Some(Entry::File(mode, bytes)) => {
            format!("file {mode:o} {:?}", String::from_utf8_lossy(bytes))
        }
        Some(other) => format!("{other:?}"),
        None => "absent".into(),
    }
}

/// Runs git in `dir` (an identity given, the user's configuration ignored); its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=User", "-c", "user.email=user@example.com"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgSign=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes `content` at `dir/rel` (creating directories) with `mode`.
pub fn put(dir: &Path, rel: &str, content: &str, mode: u32) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, content).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The starting files of every scenario: text files, an executable, a symlink, files to
/// move and delete, and ignored build output.
pub fn seed(dir: &Path) {
    put(dir, "a.txt", "alpha\n", 0o644);
    put(dir, "b.txt", "bravo x\n", 0o644);
    put(dir, "c.txt", "charlie\n", 0o644);
    put(dir, "run.sh", "#!/bin/sh\necho hi\n", 0o755);
    put(dir, "src/lib.rs", "fn one() {}\n", 0o644);
    put(dir, "old/name.txt", "moving\n", 0o640);
    put(dir, ".gitignore", "target/\n*.log\n", 0o644);
    put(dir, "target/build.o", "object\0code", 0o644);
    put(dir, "debug.log", "log line\n", 0o600);
    std::os::unix::fs::symlink("a.txt", dir.join("link")).unwrap();
}

/// A git repository with the seed committed, then the user's own state: a staged file, an
/// uncommitted change, a stash and a second branch.
pub fn seeded_repo(dir: &Path) {
    git(dir, &["init", "-q"]);
    seed(dir);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "seed"]);
    git(dir, &["branch", "feature"]);
    put(dir, "stashme.txt", "stashed\n", 0o644);
    git(dir, &["add", "stashme.txt"]);
    git(dir, &["stash", "-q"]);
    put(dir, "staged.txt", "staged\n", 0o644);
    git(dir, &["add", "staged.txt"]);
    put(dir, "b.txt", "bravo x\nlocal change\n", 0o644);
}

/// What must not change in the user's repository: the index file, the stash, the branches,
/// the reflogs and the user-visible refs.
#[derive(Debug, PartialEq, Eq)]
pub struct RepoState {
    index: Vec<u8>,
    stash: String,
    branches: String,
    reflog: String,
    refs: String,
    status: String,
}

pub fn repo_state(dir: &Path) -> RepoState {
    RepoState {
        index: std::fs::read(dir.join(".git/index")).unwrap(),
        stash: git(dir, &["stash", "list"]),
        branches: git(dir, &["branch", "-a", "-v"]),
        reflog: git(dir, &["log", "-g", "--all", "--format=%H %gd %gs"]),
        refs: git(
            dir,
            &[
                "for-each-ref",
                "refs/heads",
                "refs/tags",
                "refs/stash",
                "refs/remotes",
            ],
        ),
        status: git(dir, &["status", "--porcelain", "--ignored"]),
    }
}

/// The tools of every scenario.
pub fn profile() -> ProviderProfile {
    ProviderProfile::new("scripted", "scripted-model")
        .with_tool(tools::write_file())
        .with_tool(tools::edit_file())
        .with_tool(tools::apply_patch())
        .with_tool(tools::shell())
}

/// A session in `dir` answering with `turns`, checkpoints on, its transcript and store
/// in `state`.
pub fn session_in(
    dir: &Path,
    state: &Path,
    turns: Vec<ScriptedTurn>,
    config: SessionConfig,
) -> Session {
    let env: Arc<dyn ExecutionEnvironment> = Arc::new(LocalExecutionEnvironment::new(dir).unwrap());
    let client = Client::new().with_provider(ScriptedModel::new(turns));
    Session::new(
        profile(),
        env,
        client,
        config.with_transcript(state.join("session.jsonl")),
    )
    .unwrap()
}

/// Checkpoints on (no git unless in a work tree).
pub fn checkpoints() -> SessionConfig {
    SessionConfig::default()
        .with_loop_detection(false)
        .with_checkpoints(CheckpointConfig::enabled())
}

pub fn call(name: &str, args: Value) -> ScriptedTurn {
    ScriptedTurn::tool_call(name, args)
}

pub fn write(path: &str, content: &str) -> ScriptedTurn {
    call("write_file", json!({"file_path": path, "content": content}))
}

pub fn edit(path: &str, old: &str, new: &str) -> ScriptedTurn {
    call(
        "edit_file",
        json!({"file_path": path, "old_string": old, "new_string": new}),
    )
}

pub fn shell(command: &str) -> ScriptedTurn {
    call("shell", json!({"command": command}))
}

pub fn patch(text: &str) -> ScriptedTurn {
    call("apply_patch", json!({"patch": text}))
}

/// Every tool result of the session so far that was an error.
pub fn failed_calls(session: &Session) -> Vec<String> {
    session
        .history()
        .turns()
        .iter()
        .filter_map(|t| match t {
            agentloop::session::Turn::ToolResults(r) => Some(r.results.clone()),
            _ => None,
        })
        .flatten()
        .filter(|r| r.is_error)
        .map(|r| r.content.clone())
        .collect()
}

/// The change time and inode of `path`: unchanged means nothing wrote, renamed or chmoded it.
pub fn touch_print(path: &Path) -> (u64, i64, i64) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    (meta.ino(), meta.ctime(), meta.ctime_nsec())
}

/// The warnings of `events` with `code`.
pub fn warnings(events: &[SessionEvent], code: &str) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Warning { message, code: c } if c == code => Some(message.clone()),
            _ => None,
        })
        .collect()
}
