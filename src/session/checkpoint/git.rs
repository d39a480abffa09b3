//! The checkpoints' and worktrees' own git: snapshots of the working tree as tree objects
//! written with a private index, the facts a rewind plans with, blobs staged for a restore,
//! private refs deleted.
//!
//! Every command runs through a [`LocalExecutionEnvironment`] of the library's (the host
//! process's environment filtered as for any command, no sandbox: this is the library's
//! bookkeeping, not the agent's command, and it writes objects and private refs into
//! `.git`, which a sandbox keeps read-only), with `prompt/git.rs`'s hardening: no
//! fsmonitor, hooks, pager, filters, diff or merge drivers, signature programs or
//! transports, and the repository's attribute files ignored (`attr.tree` is the empty tree)
//! so that no end-of-line conversion changes a byte. The `GIT_*` variables that would point
//! git elsewhere are unset. Outputs that can be large go to files in the store's scratch
//! directory, never through a capture (which keeps only a head and a tail) and never
//! through the redaction of command output.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
use crate::prompt::git::{GIT_FUNCTION, driver_overrides, hardened_request};

/// The empty tree of a SHA-1 repository; in a SHA-256 one it resolves to nothing, and
/// `attr.tree` then reads no attributes either.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// Settings beyond `prompt/git.rs`'s: bytes as they are (no conversions, the executable
/// bit and symlinks as on disk), no automatic gc or maintenance, no reflog for the private
/// refs, no signing, no split index or untracked cache written beside the private index.
const CONFIG: &[(&str, &str)] = &[
    ("attr.tree", EMPTY_TREE),
    ("core.attributesFile", "/dev/null"),
    ("core.autocrlf", "false"),
    ("core.safecrlf", "false"),
    ("core.fileMode", "true"),
    ("core.symlinks", "true"),
    ("core.splitIndex", "false"),
    ("core.untrackedCache", "false"),
    ("core.logAllRefUpdates", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("commit.gpgSign", "false"),
    ("advice.addEmbeddedRepo", "false"),
];

/// Variables of the host's environment that would send git to another repository, index
/// or object store.
const UNSET: &str = "unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY \
    GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_NAMESPACE GIT_COMMON_DIR GIT_CEILING_DIRECTORIES \
    GIT_PREFIX GIT_QUARANTINE_PATH GIT_ATTR_SOURCE GIT_REPLACE_REF_BASE GIT_GRAFT_FILE \
    GIT_CONFIG GIT_CONFIG_PARAMETERS GIT_CONFIG_GLOBAL GIT_CONFIG_SYSTEM\n";

/// How long one git script may run (a first snapshot of a big tree hashes every file).
const TIMEOUT: Duration = Duration::from_secs(120);

/// A git work tree the library snapshots.
pub(crate) struct Git {
    runner: LocalExecutionEnvironment,
    /// The work tree's top level, symlinks resolved.
    pub(crate) top: PathBuf,
    /// The repository's common directory (the main `.git` also from a linked worktree).
    pub(crate) common_dir: PathBuf,
    /// Driver commands the repository's configuration defines, blanked.
    blank: Vec<String>,
}

impl std::fmt::Debug for Git {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Git")
            .field("top", &self.top)
            .field("common_dir", &self.common_dir)
            .finish_non_exhaustive()
    }
}

/// One line of `git diff-tree --raw`: a path and its (mode, object) on each side; `None`
/// where it is absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DiffEntry {
    pub(crate) path: PathBuf,
    pub(crate) old: Option<(u32, String)>,
    pub(crate) new: Option<(u32, String)>,
}

/// What a rewind learns from git: the diffs asked for, in order, and the checkpoint's tree
/// by path.
pub(crate) struct Facts {
    pub(crate) diffs: Vec<Vec<DiffEntry>>,
    pub(crate) tree: HashMap<PathBuf, (u32, String)>,
}

/// Single-quotes `text` for the shell.
pub(crate) fn quote(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn quote_path(path: &Path) -> String {
    quote(path.as_os_str().as_bytes())
}

fn is_object_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Git {
    /// The git work tree around `working_dir`, or `None` when it is not in one (or git is
    /// missing).
    pub(crate) fn open(working_dir: &Path) -> Option<Git> {
        let runner = LocalExecutionEnvironment::new(working_dir).ok()?;
        let probe = Git {
            runner,
            top: working_dir.to_path_buf(),
            common_dir: PathBuf::new(),
            blank: Vec::new(),
        };
        let out = probe
            .run(
                "git rev-parse --show-toplevel --path-format=absolute --git-common-dir",
                None,
                &CancelToken::new(),
            )
            .ok()?;
        let mut lines = out.lines();
        let top = fs::canonicalize(lines.next()?).ok()?;
        let common_dir = PathBuf::from(lines.next()?);
        let runner = LocalExecutionEnvironment::new(&top).ok()?;
        let blank = driver_overrides(&runner);
        Some(Git {
            runner,
            top,
            common_dir,
            blank,
        })
    }

    /// Runs `script` (after the unsets and the `git` function) at the top level with the
    /// hardened settings; its standard output, or an error with the end of its standard
    /// error.
    pub(crate) fn run(
        &self,
        script: &str,
        stdin: Option<Vec<u8>>,
        cancel: &CancelToken,
    ) -> io::Result<String> {
        let mut request = hardened_request(
            format!("{UNSET}{GIT_FUNCTION}{script}\n"),
            CONFIG,
            &self.blank,
            TIMEOUT,
        );
        for (name, value) in [
            ("GIT_AUTHOR_NAME", "agentloop"),
            ("GIT_AUTHOR_EMAIL", "agentloop@localhost"),
            ("GIT_COMMITTER_NAME", "agentloop"),
            ("GIT_COMMITTER_EMAIL", "agentloop@localhost"),
        ] {
            request.env.insert(name.to_string(), value.to_string());
        }
        request.working_dir = Some(self.top.clone());
        request.stdin = stdin;
        let result = self.runner.exec_command(&request, &|_, _| {}, cancel)?;
        if result.exit_code == Some(0) {
            return Ok(result.stdout);
        }
        let tail: String = {
            let text = result.stderr.trim();
            let start = text.len().saturating_sub(400);
            let start = (start..text.len())
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(text.len());
            text[start..].to_string()
        };
        let why = if result.timed_out {
            "timed out".to_string()
        } else if result.cancelled {
            "cancelled".to_string()
        } else {
            format!("exit status {:?}", result.exit_code)
        };
        Err(io::Error::other(format!("git failed ({why}): {tail}")))
    }

    /// The lines of the script that bring the private `index` up to the working tree (the
    /// first time from a copy of the repository's own index, whose file stays untouched,
    /// so that only files changed since the user's last `git add` are read and hashed)
    /// and write its tree into `$tree`. The repository's index is asked for before
    /// `GIT_INDEX_FILE` is set: `--git-path index` answers with that variable when set.
    fn add_all(index: &Path) -> String {
        format!(
            "if [ ! -f {index} ]; then\n\
               src=$(git rev-parse --path-format=absolute --git-path index) && \
               [ -f \"$src\" ] && cp \"$src\" {index}\n\
             fi\n\
             export GIT_INDEX_FILE={index}\n\
             git add -A >/dev/null 2>&1 || {{ rm -f \"$GIT_INDEX_FILE\"; git add -A >/dev/null; }} \
             || exit 4\n\
             tree=$(git write-tree) || exit 5\n",
            index = quote_path(index)
        )
    }

    /// Writes the working tree's tree object (what `.gitignore` ignores left out) with the
    /// private `index`, and points `reference` at it when given.
    pub(crate) fn snapshot(
        &self,
        index: &Path,
        reference: Option<&str>,
        cancel: &CancelToken,
    ) -> io::Result<String> {
        let mut script = Git::add_all(index);
        if let Some(reference) = reference {
            script.push_str(&format!(
                "git update-ref {} \"$tree\" || exit 6\n",
                quote(reference.as_bytes())
            ));
        }
        script.push_str("printf '%s\\n' \"$tree\"\n");
        let out = self.run(&script, None, cancel)?;
        let tree = out.trim();
        if !is_object_id(tree) {
            return Err(io::Error::other(format!("git wrote no tree id: {tree:?}")));
        }
        Ok(tree.to_string())
    }

    /// Snapshots the working tree now, then compares: each of `pairs` (`None` for the
    /// tree just written) as `git diff-tree`, and lists every entry of `tree`.
    pub(crate) fn facts(
        &self,
        index: &Path,
        scratch: &Path,
        tree: &str,
        pairs: &[(Option<String>, Option<String>)],
        cancel: &CancelToken,
    ) -> io::Result<Facts> {
        let side = |tree: &Option<String>| match tree {
            Some(tree) if is_object_id(tree) => Ok(tree.clone()),
            Some(tree) => Err(io::Error::other(format!("not a tree id: {tree:?}"))),
            None => Ok("\"$tree\"".to_string()),
        };
        if !is_object_id(tree) {
            return Err(io::Error::other(format!("not a tree id: {tree:?}")));
        }
        let mut script = Git::add_all(index);
        let listing = scratch.join("tree");
        script.push_str(&format!(
            "git ls-tree -r -z --full-tree {tree} > {} || exit 6\n",
            quote_path(&listing)
        ));
        for (i, (from, to)) in pairs.iter().enumerate() {
            script.push_str(&format!(
                "git diff-tree -r -z --no-renames {} {} > {} || exit 7\n",
                side(from)?,
                side(to)?,
                quote_path(&scratch.join(format!("diff-{i}")))
            ));
        }
        self.run(&script, None, cancel)?;
        let diffs = (0..pairs.len())
            .map(|i| fs::read(scratch.join(format!("diff-{i}"))).map(|raw| parse_diff(&raw)))
            .collect::<io::Result<Vec<_>>>()?;
        let tree = parse_ls_tree(&fs::read(&listing)?);
        Ok(Facts { diffs, tree })
    }

    /// Writes the blobs of `tree` at `paths` (relative to the top level) under `stage`,
    /// modes and symlinks as git keeps them, with no conversion.
    pub(crate) fn stage(
        &self,
        tree: &str,
        paths: &[PathBuf],
        scratch: &Path,
        stage: &Path,
        cancel: &CancelToken,
    ) -> io::Result<()> {
        if !is_object_id(tree) {
            return Err(io::Error::other(format!("not a tree id: {tree:?}")));
        }
        let mut prefix = stage.as_os_str().as_bytes().to_vec();
        prefix.push(b'/');
        let script = format!(
            "export GIT_INDEX_FILE={}\n\
             git read-tree {tree} || exit 4\n\
             git checkout-index -z --stdin -f --prefix={} || exit 5\n",
            quote_path(&scratch.join("restore-index")),
            quote(&prefix)
        );
        let mut list = Vec::new();
        for path in paths {
            list.extend_from_slice(path.as_os_str().as_bytes());
            list.push(0);
        }
        self.run(&script, Some(list), cancel).map(|_| ())
    }

    /// Deletes the private `refs`.
    pub(crate) fn delete_refs(&self, refs: &[String], cancel: &CancelToken) -> io::Result<()> {
        if refs.is_empty() {
            return Ok(());
        }
        let mut input = String::new();
        for reference in refs.iter().filter(|r| r.starts_with("refs/agentloop/")) {
            input.push_str(&format!("delete {reference}\n"));
        }
        self.run("git update-ref --stdin", Some(input.into_bytes()), cancel)
            .map(|_| ())
    }
}

/// Parses `git diff-tree -r -z` (raw format): `:MODE MODE OID OID STATUS\0PATH\0` each.
pub(crate) fn parse_diff(raw: &[u8]) -> Vec<DiffEntry> {
    let mut entries = Vec::new();
    let mut fields = raw.split(|&b| b == 0);
    while let (Some(head), Some(path)) = (fields.next(), fields.next()) {
        let head = String::from_utf8_lossy(head);
        let parts: Vec<&str> = head.trim_start_matches(':').split(' ').collect();
        if parts.len() < 5 || path.is_empty() {
            continue;
        }
        let side = |mode: &str, oid: &str| {
            let mode = u32::from_str_radix(mode, 8).ok()?;
            (mode != 0).then(|| (mode, oid.to_string()))
        };
        entries.push(DiffEntry {
            path: PathBuf::from(OsString::from_vec(path.to_vec())),
            old: side(parts[0], parts[2]),
            new: side(parts[1], parts[3]),
        });
    }
    entries
}

/// Parses `git ls-tree -r -z`: `MODE TYPE OID\tPATH\0` each.
fn parse_ls_tree(raw: &[u8]) -> HashMap<PathBuf, (u32, String)> {
    let mut entries = HashMap::new();
    for record in raw.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let Some(tab) = record.iter().position(|&b| b == b'\t') else {
            continue;
        };
        let head = String::from_utf8_lossy(&record[..tab]);
        let parts: Vec<&str> = head.split(' ').collect();
        let (Some(mode), Some(oid)) = (parts.first(), parts.get(2)) else {
            continue;
        };
        let Ok(mode) = u32::from_str_radix(mode, 8) else {
            continue;
        };
        let path = PathBuf::from(OsString::from_vec(record[tab + 1..].to_vec()));
        entries.insert(path, (mode, oid.to_string()));
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_diffs_give_each_side_or_none_for_an_absent_one() {
        let raw = b":100644 100755 aaaa bbbb M\0src/a b.rs\0:000000 120000 0000 cccc A\0link\0\
                    :100644 000000 dddd 0000 D\0gone\0";
        let entries = parse_diff(raw);
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].path, PathBuf::from("src/a b.rs"));
        assert_eq!(entries[0].old, Some((0o100644, "aaaa".into())));
        assert_eq!(entries[0].new, Some((0o100755, "bbbb".into())));
        assert_eq!(entries[1].old, None);
        assert_eq!(entries[1].new, Some((0o120000, "cccc".into())));
        assert_eq!(entries[2].new, None);
    }

    #[test]
    fn tree_listings_are_read_by_path_and_quotes_survive_the_shell() {
        let raw = b"100644 blob 1111\tREADME\x00160000 commit 2222\tvendor/lib\x00";
        let entries = parse_ls_tree(raw);
        assert_eq!(entries[Path::new("README")], (0o100644, "1111".into()));
        assert_eq!(entries[Path::new("vendor/lib")].0, 0o160000);
        assert_eq!(quote(b"it's"), r"'it'\''s'");
    }
}
