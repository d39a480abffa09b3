//! The git snapshot of spec §6.4: branch, short status counts and recent commit subjects,
//! taken once at session start through the execution environment. It never spawns a
//! process itself (git runs via `ExecutionEnvironment::exec_command`) and never writes to
//! the repository (status runs with `--no-optional-locks`, so it takes no index lock).
//!
//! A checkout may be hostile: its `.git/config` can name commands that git runs on its
//! own (`core.fsmonitor` on `git status`, a clean filter on a changed file, `gpg.program`
//! under `log.showSignature`). Every git command here runs with those disabled
//! ([`SAFE_CONFIG`], the driver commands the configuration defines blanked), so taking the
//! snapshot runs no command of the repository's choosing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::exec::{CommandRequest, ExecutionEnvironment, OutputStream};

/// How long the one git command of a snapshot may run before it is abandoned (the
/// snapshot is then left out and the branch read from `.git/HEAD`).
pub const GIT_SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(3);

/// How many commit subjects a snapshot keeps.
const RECENT_COMMITS: usize = 10;

/// Longest commit subject kept, in characters; longer ones end with `…`.
const MAX_SUBJECT_CHARS: usize = 200;

const BRANCH_MARKER: &str = "---agentloop-git-branch---";
const LOG_MARKER: &str = "---agentloop-git-log---";
const STATUS_MARKER: &str = "---agentloop-git-status---";
const END_MARKER: &str = "---agentloop-git-end---";

/// Exit code of the snapshot script when the directory is not in a work tree.
const NOT_A_REPOSITORY: i32 = 3;
/// Exit code of the snapshot script when `git` is not installed.
const GIT_MISSING: i32 = 127;

/// A git repository's state when the session started (spec §6.4). An orientation for the
/// model, which can always run `git status` itself for the current state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct GitSnapshot {
    /// The checked-out branch, or `"HEAD detached at <short sha>"`.
    pub branch: Option<String>,
    /// Counts of changed paths; `None` when `git status` did not finish in time.
    pub status: Option<GitStatusCounts>,
    /// Subjects of the last commits, newest first (at most 10).
    pub recent_commits: Vec<String>,
}

/// How many paths `git status --porcelain` listed, by kind. A path that is staged and
/// modified again in the work tree counts in both `staged` and `modified`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct GitStatusCounts {
    /// Paths with changes in the index.
    pub staged: usize,
    /// Tracked paths with unstaged changes in the work tree.
    pub modified: usize,
    /// Untracked paths (an untracked directory counts once).
    pub untracked: usize,
    /// Paths with unresolved merge conflicts.
    pub conflicted: usize,
}

impl GitStatusCounts {
    /// Whether nothing is changed, staged, untracked or conflicted.
    pub fn is_clean(&self) -> bool {
        *self == GitStatusCounts::default()
    }

    fn describe(&self) -> String {
        if self.is_clean() {
            return "clean".to_string();
        }
        let parts = [
            (self.staged, "staged"),
            (self.modified, "modified"),
            (self.untracked, "untracked"),
            (self.conflicted, "conflicted"),
        ];
        let described: Vec<String> = parts
            .iter()
            .filter(|(count, _)| *count > 0)
            .map(|(count, kind)| format!("{count} {kind}"))
            .collect();
        described.join(", ")
    }
}

impl GitSnapshot {
    /// Renders the snapshot as a `<git>` block.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(256);
        self.render_into(&mut out);
        out
    }

    pub(crate) fn render_into(&self, out: &mut String) {
        out.push_str("<git>\n");
        out.push_str("Branch: ");
        out.push_str(self.branch.as_deref().unwrap_or("unknown"));
        out.push_str("\nStatus: ");
        match &self.status {
            Some(counts) => out.push_str(&counts.describe()),
            None => out.push_str("unknown (git status did not finish in time)"),
        }
        if self.recent_commits.is_empty() {
            out.push_str("\nRecent commits: none\n");
        } else {
            out.push_str("\nRecent commits (newest first):\n");
            for subject in &self.recent_commits {
                out.push_str("- ");
                out.push_str(subject);
                out.push('\n');
            }
        }
        out.push_str(
            "This snapshot was taken when the session started; run git through the shell \
             for the current state.\n</git>",
        );
    }
}

/// The nearest directory at or above `start` that contains a `.git` entry (a directory,
/// or a file as in linked worktrees and submodules), found with
/// [`ExecutionEnvironment::file_exists`] alone: no process is started.
pub fn find_git_root(env: &dyn ExecutionEnvironment, start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .filter(|dir| !dir.as_os_str().is_empty())
        .find(|dir| env.file_exists(&dir.join(".git")))
        .map(Path::to_path_buf)
}

/// What the snapshot command found.
#[derive(Debug)]
pub(crate) enum SnapshotOutcome {
    /// Git answered.
    Captured(GitSnapshot),
    /// Git ran and said the working directory is not inside a work tree.
    NotARepository,
    /// Git is missing, the command could not run, or its output was unusable.
    Unavailable,
}

/// Configuration every git command of the library runs with, so that a hostile checkout
/// (its `.git/config` is the attacker's) runs nothing: no fsmonitor command (`git status`
/// runs it), no hooks, no pager, no external diff, no signature program (`git log` runs
/// `gpg.program` under `log.showSignature`), no credential helper, SSH command or askpass,
/// no transport at all. Filter, diff and merge drivers have names of the repository's
/// choosing; [`driver_overrides`] blanks the ones its configuration defines.
const SAFE_CONFIG: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("core.editor", "false"),
    ("diff.external", ""),
    ("log.showSignature", "false"),
    ("gpg.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.x509.program", "false"),
    ("credential.helper", ""),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
];

/// The environment of every git command of the library: [`SAFE_CONFIG`] and `extra` as
/// `GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n` pairs (git 2.31 or later; they beat every
/// configuration file and reach the git processes git itself starts), no system
/// configuration, no prompts, no optional locks, no pager.
fn git_request(script: String, extra: &[String]) -> CommandRequest {
    hardened_request(script, &[], extra, GIT_SNAPSHOT_TIMEOUT)
}

/// [`git_request`] with more settings (`config`, after [`SAFE_CONFIG`]), the keys in
/// `blank` set empty (the driver commands [`driver_overrides`] found) and a timeout: what
/// the checkpoints' and worktrees' git commands run with.
pub(crate) fn hardened_request(
    script: String,
    config: &[(&str, &str)],
    blank: &[String],
    timeout: Duration,
) -> CommandRequest {
    let mut request = CommandRequest::new(script, timeout);
    let pairs = SAFE_CONFIG
        .iter()
        .chain(config)
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .chain(blank.iter().map(|key| (key.clone(), String::new())));
    let mut count = 0;
    for (i, (key, value)) in pairs.enumerate() {
        request.env.insert(format!("GIT_CONFIG_KEY_{i}"), key);
        request.env.insert(format!("GIT_CONFIG_VALUE_{i}"), value);
        count = i + 1;
    }
    request
        .env
        .insert("GIT_CONFIG_COUNT".into(), count.to_string());
    for (name, value) in [
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_ATTR_NOSYSTEM", "1"),
        ("GIT_OPTIONAL_LOCKS", "0"),
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_PAGER", "cat"),
        ("PAGER", "cat"),
        ("GIT_ASKPASS", "false"),
        ("SSH_ASKPASS", "false"),
        ("GIT_EXTERNAL_DIFF", ""),
        ("LC_ALL", "C"),
    ] {
        request.env.insert(name.to_string(), value.to_string());
    }
    request
}

/// The script prelude: `git` is a function adding the overrides that matter most on the
/// command line as well (for a git older than 2.31, which ignores `GIT_CONFIG_COUNT`).
pub(crate) const GIT_FUNCTION: &str = "git() { command git --no-pager --no-optional-locks \
    -c core.fsmonitor=false -c core.hooksPath=/dev/null -c log.showSignature=false \
    -c gpg.program=false -c diff.external= -c protocol.allow=never \"$@\"; }\n";

/// The filter, diff and merge driver commands the repository's configuration defines
/// (`filter.NAME.clean`, `.smudge`, `.process`, `diff.NAME.textconv`, `.command`,
/// `merge.NAME.driver`), to be blanked: `git status` runs a clean filter on a file whose
/// stat data changed. Reading the configuration runs nothing.
pub(crate) fn driver_overrides(env: &dyn ExecutionEnvironment) -> Vec<String> {
    let script = format!(
        "{GIT_FUNCTION}git config -z --name-only --get-regexp '^(filter|diff|merge)[.]' 2>/dev/null\n"
    );
    let ignore_output = |_: OutputStream, _: &[u8]| {};
    let Ok(result) = env.exec_command(
        &git_request(script, &[]),
        &ignore_output,
        &CancelToken::new(),
    ) else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    for key in result.stdout.split('\0').filter(|k| !k.is_empty()) {
        let lower = key.to_ascii_lowercase();
        let runs = [
            ".clean",
            ".smudge",
            ".process",
            ".textconv",
            ".command",
            ".driver",
        ]
        .iter()
        .any(|suffix| lower.ends_with(suffix));
        if runs && !keys.iter().any(|k| k == key) {
            keys.push(key.to_string());
        }
        if lower.starts_with("filter.") && lower.ends_with(".required") {
            // A required filter that no longer runs would fail the status.
            keys.push(key.to_string());
        }
    }
    keys
}

/// Runs the snapshot script once (after the command that lists driver commands to blank).
pub(crate) fn capture_snapshot(env: &dyn ExecutionEnvironment) -> SnapshotOutcome {
    let script = format!(
        "command -v git >/dev/null 2>&1 || exit {GIT_MISSING}\n\
         {GIT_FUNCTION}\
         git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit {NOT_A_REPOSITORY}\n\
         echo {BRANCH_MARKER}\n\
         git symbolic-ref --short -q HEAD || {{ printf 'HEAD detached at '; git rev-parse --short HEAD; }}\n\
         echo {LOG_MARKER}\n\
         git log -n {RECENT_COMMITS} --no-color --no-show-signature --format=%s\n\
         echo {STATUS_MARKER}\n\
         git status --porcelain --ignore-submodules=dirty\n\
         echo {END_MARKER}\n"
    );
    let request = git_request(script, &driver_overrides(env));
    let ignore_output = |_: OutputStream, _: &[u8]| {};
    let Ok(result) = env.exec_command(&request, &ignore_output, &CancelToken::new()) else {
        return SnapshotOutcome::Unavailable;
    };
    match result.exit_code {
        Some(NOT_A_REPOSITORY) => SnapshotOutcome::NotARepository,
        Some(GIT_MISSING) => SnapshotOutcome::Unavailable,
        _ => match parse_snapshot(&result.stdout) {
            Some(snapshot) => SnapshotOutcome::Captured(snapshot),
            None => SnapshotOutcome::Unavailable,
        },
    }
}

/// Reads the branch from `<root>/.git/HEAD` (following a `gitdir:` file), for when the git
/// command is unavailable.
pub(crate) fn branch_from_head_file(env: &dyn ExecutionEnvironment, root: &Path) -> Option<String> {
    let dot_git = root.join(".git");
    let git_dir = if env.stat(&dot_git).ok()?.is_dir {
        dot_git
    } else {
        let pointer = env.read_file(&dot_git, None, None).ok()?.text;
        let target = pointer.lines().next()?.strip_prefix("gitdir:")?.trim();
        root.join(target)
    };
    let head = env.read_file(&git_dir.join("HEAD"), None, None).ok()?.text;
    parse_head(&head)
}

fn parse_head(head: &str) -> Option<String> {
    let head = head.trim();
    if let Some(reference) = head.strip_prefix("ref:") {
        let reference = reference.trim();
        let name = reference.strip_prefix("refs/heads/").unwrap_or(reference);
        return (!name.is_empty()).then(|| name.to_string());
    }
    let is_sha = head.len() >= 7 && head.bytes().all(|b| b.is_ascii_hexdigit());
    is_sha.then(|| format!("HEAD detached at {}", &head[..7]))
}

/// Parses the marker-separated output of the snapshot script. A section counts only when
/// the marker after it arrived, so output cut by the timeout never yields half a status.
fn parse_snapshot(stdout: &str) -> Option<GitSnapshot> {
    let mut section = None;
    let mut branch_lines = Vec::new();
    let mut log_lines = Vec::new();
    let mut status_lines = Vec::new();
    let mut seen_log = false;
    let mut seen_status = false;
    let mut seen_end = false;
    for line in stdout.lines() {
        match line {
            BRANCH_MARKER => section = Some(BRANCH_MARKER),
            LOG_MARKER => {
                section = Some(LOG_MARKER);
                seen_log = true;
            }
            STATUS_MARKER => {
                section = Some(STATUS_MARKER);
                seen_status = true;
            }
            END_MARKER => {
                section = None;
                seen_end = true;
            }
            _ => match section {
                Some(BRANCH_MARKER) => branch_lines.push(line),
                Some(LOG_MARKER) => log_lines.push(line),
                Some(STATUS_MARKER) => status_lines.push(line),
                _ => {}
            },
        }
    }
    if !seen_log {
        return None;
    }
    let branch = branch_lines
        .iter()
        .map(|line| line.trim())
        .find(|line| !line.is_empty())
        .filter(|line| *line != "HEAD detached at")
        .map(str::to_string);
    if !seen_status {
        // Cut inside the log: its last line may be partial.
        log_lines.pop();
    }
    let recent_commits = log_lines
        .iter()
        .map(|line| line.trim())
        .filter(|line| !line.is_empty())
        .take(RECENT_COMMITS)
        .map(shorten_subject)
        .collect();
    let status = seen_end.then(|| count_status(&status_lines));
    Some(GitSnapshot {
        branch,
        status,
        recent_commits,
    })
}

fn shorten_subject(subject: &str) -> String {
    match subject.char_indices().nth(MAX_SUBJECT_CHARS) {
        Some((cut, _)) => format!("{}…", &subject[..cut]),
        None => subject.to_string(),
    }
}

/// Counts `git status --porcelain` (v1) lines: `XY path`, X the index, Y the work tree.
fn count_status(lines: &[&str]) -> GitStatusCounts {
    let mut counts = GitStatusCounts::default();
    for line in lines {
        let bytes = line.as_bytes();
        if bytes.len() < 3 {
            continue;
        }
        let (x, y) = (bytes[0], bytes[1]);
        match (x, y) {
            (b'?', b'?') => counts.untracked += 1,
            (b'!', b'!') => {}
            (b'U', _) | (_, b'U') | (b'A', b'A') | (b'D', b'D') => counts.conflicted += 1,
            _ => {
                if x != b' ' {
                    counts.staged += 1;
                }
                if y != b' ' {
                    counts.modified += 1;
                }
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script_output(branch: &str, log: &str, status: &str) -> String {
        format!(
            "{BRANCH_MARKER}\n{branch}{LOG_MARKER}\n{log}{STATUS_MARKER}\n{status}{END_MARKER}\n"
        )
    }

    #[test]
    fn a_complete_snapshot_is_parsed_section_by_section() {
        let out = script_output(
            "main\n",
            "fix the parser\nadd tests\n",
            " M src/lib.rs\nM  README.md\nMM Cargo.toml\n?? notes/\n?? scratch.txt\nUU src/merge.rs\n",
        );
        let snapshot = parse_snapshot(&out).expect("complete output parses");
        assert_eq!(snapshot.branch.as_deref(), Some("main"));
        assert_eq!(snapshot.recent_commits, ["fix the parser", "add tests"]);
        let counts = snapshot.status.expect("status finished");
        assert_eq!(
            (
                counts.staged,
                counts.modified,
                counts.untracked,
                counts.conflicted
            ),
            (2, 2, 2, 1)
        );
    }

    #[test]
    fn a_snapshot_cut_inside_status_keeps_branch_and_log_but_not_a_half_status() {
        let out = format!(
            "{BRANCH_MARKER}\nmain\n{LOG_MARKER}\nfirst\nsecond\n{STATUS_MARKER}\n M a.rs\n"
        );
        let snapshot = parse_snapshot(&out).expect("branch and log completed");
        assert_eq!(snapshot.branch.as_deref(), Some("main"));
        assert_eq!(snapshot.recent_commits, ["first", "second"]);
        assert_eq!(snapshot.status, None);
    }

    #[test]
    fn a_snapshot_cut_inside_the_log_drops_the_partial_last_subject() {
        let out = format!("{BRANCH_MARKER}\nmain\n{LOG_MARKER}\nfirst\nsec");
        let snapshot = parse_snapshot(&out).expect("branch completed");
        assert_eq!(snapshot.recent_commits, ["first"]);
        assert_eq!(snapshot.status, None);
    }

    #[test]
    fn output_without_a_complete_branch_section_is_no_snapshot() {
        assert_eq!(parse_snapshot(""), None);
        assert_eq!(parse_snapshot(&format!("{BRANCH_MARKER}\nma")), None);
    }

    #[test]
    fn an_empty_repository_has_a_branch_no_commits_and_a_clean_status() {
        let snapshot = parse_snapshot(&script_output("main\n", "", "")).unwrap();
        assert_eq!(snapshot.branch.as_deref(), Some("main"));
        assert!(snapshot.recent_commits.is_empty());
        assert!(snapshot.status.unwrap().is_clean());
        let text = snapshot.render();
        assert!(
            text.contains("Status: clean\nRecent commits: none\n"),
            "{text}"
        );
    }

    #[test]
    fn a_failed_detached_head_lookup_is_no_branch() {
        let snapshot = parse_snapshot(&script_output("HEAD detached at \n", "", "")).unwrap();
        assert_eq!(snapshot.branch, None);
    }

    #[test]
    fn long_subjects_are_shortened_on_a_char_boundary() {
        let long = "é".repeat(MAX_SUBJECT_CHARS + 5);
        let snapshot = parse_snapshot(&script_output("main\n", &format!("{long}\n"), "")).unwrap();
        let subject = &snapshot.recent_commits[0];
        assert_eq!(subject.chars().count(), MAX_SUBJECT_CHARS + 1);
        assert!(subject.ends_with('…'));
    }

    #[test]
    fn only_ten_subjects_are_kept() {
        let log: String = (0..15).map(|i| format!("commit {i}\n")).collect();
        let snapshot = parse_snapshot(&script_output("main\n", &log, "")).unwrap();
        assert_eq!(snapshot.recent_commits.len(), 10);
        assert_eq!(snapshot.recent_commits[9], "commit 9");
    }

    #[test]
    fn the_git_block_lists_branch_counts_and_subjects() {
        let snapshot = GitSnapshot {
            branch: Some("feature/x".into()),
            status: Some(GitStatusCounts {
                staged: 0,
                modified: 3,
                untracked: 1,
                conflicted: 0,
            }),
            recent_commits: vec!["second".into(), "first".into()],
        };
        assert_eq!(
            snapshot.render(),
            "<git>\nBranch: feature/x\nStatus: 3 modified, 1 untracked\n\
             Recent commits (newest first):\n- second\n- first\n\
             This snapshot was taken when the session started; run git through the shell \
             for the current state.\n</git>"
        );
    }

    #[test]
    fn head_files_give_the_branch_or_a_detached_sha() {
        assert_eq!(
            parse_head("ref: refs/heads/main\n").as_deref(),
            Some("main")
        );
        assert_eq!(
            parse_head("ref: refs/heads/feature/deep\n").as_deref(),
            Some("feature/deep")
        );
        assert_eq!(
            parse_head("0123456789abcdef0123456789abcdef01234567\n").as_deref(),
            Some("HEAD detached at 0123456")
        );
        assert_eq!(parse_head("garbage"), None);
        assert_eq!(parse_head(""), None);
    }
}
