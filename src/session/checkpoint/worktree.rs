//! Subagents in their own `git worktree`: created on a private branch from the parent's
//! working tree as it is (uncommitted and untracked changes included), turned into a patch
//! when the subagent finishes, removed with its branch afterwards; and the stale ones a
//! crashed process left, removed at the next start.
//!
//! The parent's state is a snapshot tree (written with a private index, as checkpoints
//! write theirs) wrapped in a commit that is on no branch of the user's; the worktree's
//! private branch starts at it, so the worktree holds exactly the parent's files and the
//! patch is the difference between that commit and the subagent's tree. Everything lives
//! under `<git common dir>/agentloop/`: `worktrees/<name>`, `patches/<name>.patch`, the
//! branch `agentloop/<owner>/<name>`, where the owner is the process (its id and start
//! time, so that a reused process id is not mistaken for it). Git's own record of the
//! worktree is locked with that owner as the reason; a later session removes what belongs
//! to a process that no longer runs, and nothing else.

use std::fs;
use std::path::{Path, PathBuf};

use super::git::{Git, quote};
use crate::cancel::CancelToken;

/// Most bytes of a patch put into the subagent's result (the file has all of it).
const MAX_PATCH_TEXT: usize = 1 << 20;

/// A subagent's worktree; removed (with its branch) when dropped.
pub(crate) struct Worktree {
    git: Git,
    /// The worktree's top level.
    path: PathBuf,
    /// Where the subagent works: the parent's working directory's place in the worktree.
    pub(crate) dir: PathBuf,
    branch: String,
    /// The commit holding the parent's state.
    base: String,
    root: PathBuf,
    name: String,
}

/// A subagent's changes as a patch.
pub(crate) struct Patch {
    /// The patch file (`git apply` takes it).
    pub(crate) file: PathBuf,
    /// Its text, cut at 1 MiB.
    pub(crate) text: String,
    /// `git diff --stat`.
    pub(crate) stat: String,
}

impl std::fmt::Debug for Worktree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worktree")
            .field("path", &self.path)
            .field("branch", &self.branch)
            .finish_non_exhaustive()
    }
}

/// This process as an owner: its id and start time (`/proc/self/stat` field 22).
fn owner() -> String {
    format!(
        "{}.{}",
        std::process::id(),
        start_time(std::process::id()).unwrap_or(0)
    )
}

/// The start time of process `pid` in clock ticks since boot, if it runs.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields count from the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the owner `owner` (`pid.start`) still runs.
fn alive(owner: &str) -> bool {
    let Some((pid, start)) = owner.split_once('.') else {
        return false;
    };
    match (pid.parse::<u32>(), start.parse::<u64>()) {
        (Ok(pid), Ok(start)) => start_time(pid) == Some(start),
        _ => false,
    }
}

impl Worktree {
    /// A worktree for subagent `agent` of session `session` from the work tree around
    /// `working_dir`. The error says what to do instead.
    pub(crate) fn create(
        working_dir: &Path,
        session: &str,
        agent: &str,
    ) -> Result<Worktree, String> {
        let git = Git::open(working_dir).ok_or_else(|| {
            "isolation \"worktree\" needs a git work tree, and the working directory is not \
             in one; spawn the subagent without isolation"
                .to_string()
        })?;
        let cancel = CancelToken::new();
        let root = git.common_dir.join("agentloop");
        clean_stale(&git, &root);
        let short: String = session.chars().take(8).collect();
        let owner = owner();
        let name = format!("{owner}-{short}-{agent}");
        let path = root.join("worktrees").join(&name);
        let branch = format!("agentloop/{owner}/{short}-{agent}");
        fs::create_dir_all(root.join("worktrees")).map_err(|e| e.to_string())?;
        let index = root.join(format!("{name}.index"));
        let tree = git.snapshot(&index, None, &cancel);
        let _ = fs::remove_file(&index);
        let tree = tree.map_err(|e| format!("the parent's files could not be snapshotted: {e}"))?;
        let script = format!(
            "parent=$(git rev-parse -q --verify HEAD^{{commit}}) && p=\"-p $parent\" || p=\n\
             base=$(git commit-tree {tree} $p -m 'agentloop: the parent working tree for {agent}') \
             || exit 4\n\
             git worktree add --lock --reason {reason} -b {branch} {path} \"$base\" >/dev/null \
             || exit 5\n\
             printf '%s\\n' \"$base\"\n",
            reason = quote(format!("agentloop owner {owner}").as_bytes()),
            branch = quote(branch.as_bytes()),
            path = quote(path.as_os_str().as_encoded_bytes()),
        );
        let base = git
            .run(&script, None, &cancel)
            .map_err(|e| format!("the worktree could not be made: {e}"))?
            .trim()
            .to_string();
        let prefix = working_dir.strip_prefix(&git.top).unwrap_or(Path::new(""));
        let dir = path.join(prefix);
        let _ = fs::create_dir_all(&dir);
        Ok(Worktree {
            git,
            path,
            dir,
            branch,
            base,
            root,
            name,
        })
    }

    /// The subagent's changes so far, as a patch against the parent's state it started
    /// from; `None` when it changed nothing.
    pub(crate) fn patch(&self) -> Result<Option<Patch>, String> {
        let file = self
            .root
            .join("patches")
            .join(format!("{}.patch", self.name));
        fs::create_dir_all(self.root.join("patches")).map_err(|e| e.to_string())?;
        let script = format!(
            "cd {path} || exit 3\n\
             export GIT_INDEX_FILE={index}\n\
             git add -A >/dev/null || exit 4\n\
             tree=$(git write-tree) || exit 5\n\
             git diff --no-ext-diff --no-textconv --binary --full-index {base} \"$tree\" > {file} || exit 6\n\
             git diff --no-ext-diff --no-textconv --stat {base} \"$tree\"\n",
            path = quote(self.path.as_os_str().as_encoded_bytes()),
            index = quote(
                self.root
                    .join(format!("{}.patch-index", self.name))
                    .as_os_str()
                    .as_encoded_bytes()
            ),
            base = self.base,
            file = quote(file.as_os_str().as_encoded_bytes()),
        );
        let stat = self
            .git
            .run(&script, None, &CancelToken::new())
            .map_err(|e| format!("the subagent's changes could not be collected: {e}"))?;
        let bytes = fs::read(&file).map_err(|e| e.to_string())?;
        if bytes.is_empty() {
            let _ = fs::remove_file(&file);
            return Ok(None);
        }
        let mut text =
            String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_PATCH_TEXT)]).into_owned();
        if bytes.len() > MAX_PATCH_TEXT {
            text.push_str("\n[… the rest is in the patch file]\n");
        }
        Ok(Some(Patch {
            file,
            text,
            stat: stat.trim_end().to_string(),
        }))
    }
}

impl Drop for Worktree {
    /// Removes the worktree, its branch and its private index (the patch file stays for
    /// the parent; its session removes it when it ends).
    fn drop(&mut self) {
        remove(&self.git, &self.path, &self.branch);
        let _ = fs::remove_file(self.root.join(format!("{}.patch-index", self.name)));
    }
}

/// Removes the worktree at `path` (locked or not, changes or not) and `branch`.
fn remove(git: &Git, path: &Path, branch: &str) {
    let script = format!(
        "git worktree remove --force --force {path} >/dev/null 2>&1\n\
         git worktree prune\n\
         git branch -D {branch} >/dev/null 2>&1\n\
         exit 0\n",
        path = quote(path.as_os_str().as_encoded_bytes()),
        branch = quote(branch.as_bytes()),
    );
    let _ = git.run(&script, None, &CancelToken::new());
    if path.exists() {
        let _ = fs::remove_dir_all(path);
    }
}

/// Removes what processes that no longer run left under `root` (`<common dir>/agentloop`):
/// worktrees, their branches, private indexes and patches.
fn clean_stale(git: &Git, root: &Path) {
    let dead = |name: &str| {
        name.split_once('-')
            .is_some_and(|(owner, _)| owner.contains('.') && !alive(owner))
    };
    let mut stale = Vec::new();
    if let Ok(entries) = fs::read_dir(root.join("worktrees")) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if dead(&name) {
                stale.push(name);
            }
        }
    }
    let branches = git
        .run(
            "git for-each-ref --format='%(refname:strip=2)' refs/heads/agentloop/",
            None,
            &CancelToken::new(),
        )
        .unwrap_or_default();
    for branch in branches.lines() {
        let mut parts = branch.splitn(3, '/');
        if let (Some("agentloop"), Some(owner), Some(rest)) =
            (parts.next(), parts.next(), parts.next())
        {
            if !alive(owner) {
                remove(
                    git,
                    &root.join("worktrees").join(format!("{owner}-{rest}")),
                    branch,
                );
            }
        }
    }
    for name in stale {
        let path = root.join("worktrees").join(&name);
        remove(git, &path, "");
    }
    for dir in [root.to_path_buf(), root.join("patches")] {
        if let Ok(entries) = fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.path().is_file() && dead(&name) {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
    }
}

/// At a session's start: removes what crashed processes left in the repository around
/// `working_dir`, if anything. Costs a few `stat`s when there is nothing (no process is
/// started then).
pub(crate) fn clean_stale_at(working_dir: &Path) {
    let Some(common) = common_dir(working_dir) else {
        return;
    };
    let root = common.join("agentloop");
    let has_any = fs::read_dir(root.join("worktrees")).is_ok_and(|mut e| e.next().is_some())
        || common.join("refs/heads/agentloop").exists();
    if !has_any {
        return;
    }
    if let Some(git) = Git::open(working_dir) {
        clean_stale(&git, &root);
    }
}

/// The git common directory of the work tree around `dir`, found without running git.
fn common_dir(dir: &Path) -> Option<PathBuf> {
    let top = dir.ancestors().find(|d| d.join(".git").exists())?;
    let dot_git = top.join(".git");
    if dot_git.is_dir() {
        return Some(dot_git);
    }
    let pointer = fs::read_to_string(&dot_git).ok()?;
    let git_dir = top.join(pointer.lines().next()?.strip_prefix("gitdir:")?.trim());
    match fs::read_to_string(git_dir.join("commondir")) {
        Ok(common) => Some(git_dir.join(common.trim())),
        Err(_) => Some(git_dir),
    }
}
