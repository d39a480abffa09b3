//! The directory walk shared by grep and glob: files in tree order (names compared
//! bytewise, a directory's contents where its name sorts), with `.git` and ignored paths
//! left out. Never follows symbolic links and never reads file contents.
//!
//! Which rules apply (the same set the ripgrep backend is told to use):
//! - an entry named `.git` (directory or file) is always skipped;
//! - the grep glob filter, when given, decides first (see [`GlobFilter`]);
//! - then the ignore files `.rgignore`, `.ignore` and `.gitignore` of the entry's directory,
//!   of every directory above it in the walk, and of every ancestor of the walked
//!   directory up to `/`. For each of the three names the nearest file with a matching rule
//!   decides; a decision from `.rgignore` beats `.ignore`, which beats `.gitignore`;
//! - `.gitignore` files count only inside a git repository (a directory holding a `.git`
//!   directory or file, at or above the entry), and only up to the nearest repository
//!   root: a nested repository does not inherit the outer one's rules, and a
//!   `~/.gitignore` does not reach into projects below it. `.ignore` and `.rgignore` apply
//!   everywhere. `.git/info/exclude` and the global git excludes file are not read;
//! - hidden files and directories are walked like any other;
//! - only regular files are reported; symbolic links, sockets and the like are skipped.
//!
//! Unreadable directories and ignore files are skipped silently, as ripgrep does; so are
//! ignore files that are not regular files (a FIFO, a link to `/dev/zero`: never opened in
//! a way that blocks) or larger than [`MAX_IGNORE_FILE_BYTES`].

use std::cell::Cell;
use std::ffi::OsString;
use std::fs::{self, FileType};
use std::io;
use std::path::Path;

use super::ignore::{GlobFilter, IgnoreRules, Verdict};
use crate::exec::local::files::read_regular_capped;

/// The largest ignore file read; a larger one is skipped like an unreadable one.
pub(crate) const MAX_IGNORE_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Ignore-file names, strongest first.
const IGNORE_FILES: [&str; 3] = [".rgignore", ".ignore", ".gitignore"];
/// The index of `.gitignore` in [`IGNORE_FILES`]: it applies only inside a repository.
const GITIGNORE: usize = 2;

/// The ignore files of one directory.
#[derive(Default)]
struct DirRules {
    /// Indexed like [`IGNORE_FILES`].
    files: [Option<IgnoreRules>; 3],
}

impl DirRules {
    /// Reads the ignore files named in `names`; `None` when there are none with rules.
    fn read(
        dir: &Path,
        present: impl Fn(&str) -> bool,
        refused: Option<&Cell<bool>>,
    ) -> Option<Box<DirRules>> {
        let mut rules = DirRules::default();
        let mut any = false;
        for (slot, name) in rules.files.iter_mut().zip(IGNORE_FILES) {
            if !present(name) {
                continue;
            }
            // A FIFO, a device or a link to one is skipped without blocking; so is a file
            // over the cap (ripgrep, too, ignores ignore files it cannot read).
            match read_regular_capped(&dir.join(name), MAX_IGNORE_FILE_BYTES) {
                Ok(bytes) => {
                    let parsed = IgnoreRules::parse(&String::from_utf8_lossy(&bytes));
                    if !parsed.is_empty() {
                        any = true;
                        *slot = Some(parsed);
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(_) => {
                    if let Some(refused) = refused {
                        refused.set(true);
                    }
                }
            }
        }
        any.then(|| Box::new(rules))
    }
}

/// A directory being walked.
struct Frame {
    entries: Vec<(OsString, FileType)>,
    next: usize,
    /// Length of the relative path of this directory's children's prefix (`a/b/`).
    prefix_len: usize,
    /// Depth of this directory below the root (0 for the root).
    depth: usize,
    rules: Option<Box<DirRules>>,
    /// The directory holds a `.git` (it is a repository root).
    has_git: bool,
    /// This directory or one above it holds a `.git`.
    in_repository: bool,
}

/// An ancestor of the walked directory that has ignore files or a `.git`.
struct Ancestor {
    /// The walked directory relative to this ancestor, with a trailing `/`.
    prefix: String,
    rules: Option<Box<DirRules>>,
    has_git: bool,
}

/// Decides whether the walk enters a directory, from its relative path and depth (1 for a
/// child of the root).
pub(crate) type EnterFilter<'a> = &'a dyn Fn(&str, usize) -> bool;

/// How a walk is filtered.
#[derive(Default)]
pub(crate) struct WalkOptions<'a> {
    /// The grep glob filter.
    pub(crate) filter: Option<&'a GlobFilter>,
    /// Called before a directory is entered; `false` skips it.
    pub(crate) enter: Option<EnterFilter<'a>>,
    /// Set when an ignore file could not be read (not a regular file, over the cap,
    /// unreadable).
    pub(crate) refused_ignore_file: Option<&'a Cell<bool>>,
}

/// Whether every ignore file a search of `root` meets is a regular file within the cap.
/// ripgrep opens ignore files blocking and reads them whole: a `.gitignore` FIFO stops it
/// forever, so grep walks the tree with its own safe reader first and searches in process
/// when this is `false`.
pub(crate) fn ignore_files_are_safe(root: &Path, filter: Option<&GlobFilter>) -> bool {
    let refused = Cell::new(false);
    let options = WalkOptions {
        filter,
        enter: None,
        refused_ignore_file: Some(&refused),
    };
    let _ = walk(root, &options, |_, _| !refused.get());
    !refused.get()
}

/// Walks `root` (a directory), calling `on_file(relative_path, absolute_path)` for each
/// file in tree order until it returns `false`.
pub(crate) fn walk(
    root: &Path,
    options: &WalkOptions<'_>,
    mut on_file: impl FnMut(&str, &Path) -> bool,
) -> io::Result<()> {
    let refused = options.refused_ignore_file;
    let ancestors = ancestor_rules(root, refused);
    let above_in_repository = ancestors.iter().any(|a| a.has_git);
    let root_frame = read_frame(root, 0, 0, above_in_repository, refused).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("cannot read directory {}: {error}", root.display()),
        )
    })?;
    let mut stack = vec![root_frame];
    let mut relative = String::new();
    let mut absolute = root.to_path_buf();
    let mut scratch = String::new();
    while let Some(top) = stack.last_mut() {
        if top.next == top.entries.len() {
            stack.pop();
            if !stack.is_empty() {
                absolute.pop();
            }
            continue;
        }
        let index = top.next;
        top.next += 1;
        let name = std::mem::take(&mut top.entries[index].0);
        let file_type = top.entries[index].1;
        let (prefix_len, depth, in_repository) = (top.prefix_len, top.depth, top.in_repository);
        if name == ".git" {
            continue;
        }
        let is_dir = file_type.is_dir();
        if !is_dir && !file_type.is_file() {
            continue;
        }
        relative.truncate(prefix_len);
        relative.push_str(&name.to_string_lossy());
        if !included(
            &relative,
            is_dir,
            options.filter,
            &stack,
            &ancestors,
            &mut scratch,
        ) {
            continue;
        }
        absolute.push(&name);
        if is_dir {
            let entered = options
                .enter
                .is_none_or(|enter| enter(&relative, depth + 1));
            let child = || {
                read_frame(
                    &absolute,
                    relative.len() + 1,
                    depth + 1,
                    in_repository,
                    refused,
                )
            };
            match entered.then(child) {
                Some(Ok(frame)) => {
                    relative.push('/');
                    stack.push(frame);
                }
                _ => {
                    absolute.pop();
                }
            }
        } else {
            let go_on = on_file(&relative, &absolute);
            absolute.pop();
            if !go_on {
                break;
            }
        }
    }
    Ok(())
}

fn read_frame(
    dir: &Path,
    prefix_len: usize,
    depth: usize,
    parent_in_repository: bool,
    refused: Option<&Cell<bool>>,
) -> io::Result<Frame> {
    let mut entries = Vec::new();
    for entry in fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        entries.push((entry.file_name(), file_type));
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let present = |name: &str| {
        entries
            .binary_search_by(|(entry, _)| entry.as_os_str().cmp(name.as_ref()))
            .is_ok()
    };
    let rules = DirRules::read(dir, present, refused);
    let has_git = present(".git");
    Ok(Frame {
        entries,
        next: 0,
        prefix_len,
        depth,
        rules,
        has_git,
        in_repository: has_git || parent_in_repository,
    })
}

/// The ignore files and repository roots among the ancestors of `root`, nearest first.
fn ancestor_rules(root: &Path, refused: Option<&Cell<bool>>) -> Vec<Ancestor> {
    let Ok(root) = root.canonicalize() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for ancestor in root.ancestors().skip(1) {
        let rules = DirRules::read(ancestor, |_| true, refused);
        let has_git = fs::symlink_metadata(ancestor.join(".git")).is_ok();
        if rules.is_none() && !has_git {
            continue;
        }
        let Ok(below) = root.strip_prefix(ancestor) else {
            continue;
        };
        let mut prefix = below.to_string_lossy().into_owned();
        prefix.push('/');
        found.push(Ancestor {
            prefix,
            rules,
            has_git,
        });
    }
    found
}

/// Whether the entry at `relative` survives the filter and the ignore files.
fn included(
    relative: &str,
    is_dir: bool,
    filter: Option<&GlobFilter>,
    stack: &[Frame],
    ancestors: &[Ancestor],
    scratch: &mut String,
) -> bool {
    if let Some(filter) = filter {
        match filter.verdict(relative, is_dir) {
            Verdict::Ignore => return false,
            Verdict::Whitelist => return true,
            Verdict::None => {}
        }
    }
    let in_repository = stack.last().is_some_and(|frame| frame.in_repository);
    for kind in 0..IGNORE_FILES.len() {
        if kind == GITIGNORE && !in_repository {
            continue;
        }
        // `.gitignore` files stop at the nearest repository root.
        let stops_at_git = kind == GITIGNORE;
        let mut verdict = Verdict::None;
        let mut reached_root = false;
        for frame in stack.iter().rev() {
            if let Some(rules) = frame.rules.as_ref().and_then(|r| r.files[kind].as_ref()) {
                verdict = rules.verdict(&relative[frame.prefix_len..], is_dir);
                if verdict != Verdict::None {
                    break;
                }
            }
            if stops_at_git && frame.has_git {
                reached_root = true;
                break;
            }
        }
        if verdict == Verdict::None && !reached_root {
            for ancestor in ancestors {
                if let Some(rules) = ancestor.rules.as_ref().and_then(|r| r.files[kind].as_ref()) {
                    scratch.clear();
                    scratch.push_str(&ancestor.prefix);
                    scratch.push_str(relative);
                    verdict = rules.verdict(scratch, is_dir);
                    if verdict != Verdict::None {
                        break;
                    }
                }
                if stops_at_git && ancestor.has_git {
                    break;
                }
            }
        }
        match verdict {
            Verdict::Ignore => return false,
            Verdict::Whitelist => return true,
            Verdict::None => {}
        }
    }
    true
}
