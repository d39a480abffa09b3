//! `--emit-patch FILE` and `--predictions FILE --instance-id ID`: the working tree's
//! changes since the run started, as a git patch (new, deleted and binary files; what
//! `.gitignore` ignores left out) and as a SWE-bench prediction line.
//!
//! The starting state is a tree object written with a private index before the session
//! starts; the end state the same way after it ended; the patch is git's binary diff of
//! the two. The repository's own index, refs and working tree are never touched. Git runs
//! hardened: no hooks, no fsmonitor, no pager, no system configuration, and the filter
//! and diff drivers the repository's configuration names blanked (a checkout's
//! configuration may name commands; none of them runs).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Settings every git command here runs with (beating the repository's configuration).
const SAFE: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("diff.external", ""),
    ("core.quotePath", "false"),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
];

/// The working tree as the run found it.
pub struct Baseline {
    top: PathBuf,
    tree: String,
    /// Holds the private index.
    scratch: tempfile::TempDir,
    /// Driver commands of the repository's configuration, blanked.
    blank: Vec<String>,
}

impl Baseline {
    /// Records the working tree of the repository that holds `cwd`.
    pub fn record(cwd: &Path) -> Result<Baseline, String> {
        let top = git(cwd, &[], &["rev-parse", "--show-toplevel"], None)
            .map_err(|e| format!("--emit-patch needs a git work tree: {e}"))?;
        let top = PathBuf::from(top.trim_end_matches('\n'));
        let blank = drivers(&top);
        let scratch = tempfile::Builder::new()
            .prefix("agentloop-patch")
            .tempdir()
            .map_err(|e| format!("cannot make a private index: {e}"))?;
        let mut baseline = Baseline {
            top,
            tree: String::new(),
            scratch,
            blank,
        };
        baseline.tree = baseline.snapshot()?;
        Ok(baseline)
    }

    /// The working tree's tree object now (a private index: the repository's stays).
    fn snapshot(&self) -> Result<String, String> {
        let index = self.scratch.path().join("index");
        let index = index.to_string_lossy();
        let env = [("GIT_INDEX_FILE", index.as_ref())];
        // From HEAD's tree when there is one (only changed files are hashed again).
        if git(
            &self.top,
            &self.blank,
            &["rev-parse", "-q", "--verify", "HEAD"],
            None,
        )
        .is_ok()
        {
            git_env(&self.top, &self.blank, &env, &["read-tree", "HEAD"])?;
        }
        git_env(&self.top, &self.blank, &env, &["add", "-A", "--", "."])?;
        let tree = git_env(&self.top, &self.blank, &env, &["write-tree"])?;
        Ok(tree.trim().to_string())
    }

    /// The changes since the baseline as a git patch (empty when there are none; bytes:
    /// a text file need not be UTF-8).
    pub fn patch(&self) -> Result<Vec<u8>, String> {
        let now = self.snapshot()?;
        git_bytes(
            &self.top,
            &self.blank,
            &[
                "diff",
                "--binary",
                "--full-index",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                "--no-renames",
                &self.tree,
                &now,
            ],
            None,
        )
    }
}

/// Writes `patch` to `path` whole (a temporary file beside it, renamed).
pub fn write_patch(path: &Path, patch: &[u8]) -> Result<(), String> {
    let name = path
        .file_name()
        .map_or_else(|| "patch".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, patch)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Appends the SWE-bench prediction line (`instance_id`, `model_name_or_path`,
/// `model_patch`) to `path`, in one write.
pub fn append_prediction(
    path: &Path,
    instance: &str,
    model: &str,
    patch: &[u8],
) -> Result<(), String> {
    let patch = std::str::from_utf8(patch)
        .map_err(|_| "the patch is not UTF-8, which a prediction line cannot hold".to_string())?;
    let line = serde_json::json!({
        "instance_id": instance,
        "model_name_or_path": model,
        "model_patch": patch,
    });
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()))
        .map_err(|e| format!("cannot append to {}: {e}", path.display()))
}

/// The driver commands the repository's configuration defines (`filter.*.clean`, …),
/// to be set empty. Reading the configuration runs nothing.
fn drivers(top: &Path) -> Vec<String> {
    let Ok(keys) = git(
        top,
        &[],
        &[
            "config",
            "-z",
            "--name-only",
            "--get-regexp",
            "^(filter|diff|merge)[.]",
        ],
        None,
    ) else {
        return Vec::new();
    };
    let runs = [
        ".clean",
        ".smudge",
        ".process",
        ".textconv",
        ".command",
        ".driver",
        ".required",
    ];
    keys.split('\0')
        .filter(|k| runs.iter().any(|s| k.to_ascii_lowercase().ends_with(s)))
        .map(str::to_string)
        .collect()
}

fn git_env(
    top: &Path,
    blank: &[String],
    env: &[(&str, &str)],
    args: &[&str],
) -> Result<String, String> {
    git(top, blank, args, Some(env))
}

/// [`git_bytes`]'s output as text.
fn git(
    top: &Path,
    blank: &[String],
    args: &[&str],
    env: Option<&[(&str, &str)]>,
) -> Result<String, String> {
    git_bytes(top, blank, args, env).map(|out| String::from_utf8_lossy(&out).into_owned())
}

/// Runs git in `top` hardened ([`SAFE`], `blank` set empty), its stdout or its stderr's
/// last line as the error.
fn git_bytes(
    top: &Path,
    blank: &[String],
    args: &[&str],
    env: Option<&[(&str, &str)]>,
) -> Result<Vec<u8>, String> {
    let mut command = Command::new("git");
    command
        .args(["--no-pager", "--no-optional-locks"])
        .args(args)
        .current_dir(top)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
    ] {
        command.env_remove(name);
    }
    let pairs = SAFE
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain(blank.iter().map(|k| (k.clone(), String::new())));
    let mut count = 0;
    for (i, (key, value)) in pairs.enumerate() {
        command.env(format!("GIT_CONFIG_KEY_{i}"), key);
        command.env(format!("GIT_CONFIG_VALUE_{i}"), value);
        count = i + 1;
    }
    command
        .env("GIT_CONFIG_COUNT", count.to_string())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C");
    for (name, value) in env.unwrap_or(&[]) {
        command.env(name, value);
    }
    let out = command
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "git {} failed: {}",
        args.first().unwrap_or(&""),
        stderr.trim().lines().last().unwrap_or("")
    ))
}
