//! grep and glob for [`LocalExecutionEnvironment`](super::LocalExecutionEnvironment):
//! ripgrep when installed, an in-process search otherwise, with the same results. Never
//! writes to the file system.
//!
//! Both grep backends apply one rule set, documented where it is implemented: which files
//! are searched in `walk.rs` (`.git` skipped, hidden files searched, `.gitignore`,
//! `.ignore` and `.rgignore` honoured, the glob filter with ripgrep's `--glob` meaning),
//! how lines match in `matcher.rs` (a match never spans lines, binary files skipped), and
//! the flags that make ripgrep do the same in `ripgrep.rs`. The pattern and the filter are
//! validated in process first, so an invalid one gives the same error whichever backend
//! runs. Results come in tree order and are cut at `max_results`, so both backends return
//! the same first matches.
//!
//! The in-process search looks for the pattern's required literal first (`prefilter.rs`)
//! and runs the regex only on the lines that contain it; files are searched on up to four
//! threads while the walk goes on, results kept in tree order.

mod globs;
mod ignore;
mod matcher;
mod prefilter;
mod ripgrep;
mod walk;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::SystemTime;

use super::local::files::open_regular;
use super::{GrepBackend, GrepMatch, GrepOptions, GrepOutput};
use globs::Glob;
use ignore::GlobFilter;
use matcher::LineMatcher;
use walk::WalkOptions;

/// Most worker threads the in-process search starts (the walk runs on the caller's).
const MAX_WORKERS: usize = 4;
/// A worker thread is started for every this many files found, up to `MAX_WORKERS`.
const FILES_PER_WORKER: usize = 16;

/// Searches file contents under `path` (a file or a directory, already resolved against
/// the working directory) for the regex `pattern`. Paths in the output are relative to
/// `path` when it is a directory, and `path` itself when it is a file.
///
/// A file given directly is searched even if ignore files or the glob filter would skip
/// it (as ripgrep does), and always in process: starting `rg` costs more than one file.
pub(crate) fn grep(pattern: &str, path: &Path, options: &GrepOptions) -> io::Result<GrepOutput> {
    let matcher = LineMatcher::new(pattern, options.case_insensitive)?;
    let filter = match options.glob_filter.as_deref() {
        Some(glob) => Some(GlobFilter::new(glob).map_err(|why| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid glob filter `{glob}`: {why}; use a pattern like `*.rs` or `src/**/*.ts`"),
            )
        })?),
        None => None,
    };
    let metadata = fs::metadata(path).map_err(|error| not_found(path, error))?;
    let wanted = options.max_results.saturating_add(1);
    let found = if metadata.is_file() {
        search_one_file(&matcher, path, wanted)?
    } else if !metadata.is_dir() {
        // Opening a FIFO would wait for a writer; devices and sockets are not text either.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not a regular file or directory; grep searches files and directories",
                path.display()
            ),
        ));
    } else {
        let search = ripgrep::Search {
            pattern,
            case_insensitive: options.case_insensitive,
            glob_filter: options.glob_filter.as_deref(),
            wanted,
        };
        // ripgrep would block on a FIFO ignore file (and read a huge one whole).
        let backend = match options.backend {
            GrepBackend::InProcess => GrepBackend::InProcess,
            _ if !walk::ignore_files_are_safe(path, filter.as_ref()) => {
                if options.backend == GrepBackend::Ripgrep {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "refused to run ripgrep: an ignore file under the searched directory \
                         is not a regular file (a FIFO, a device) or is over 4 MiB",
                    ));
                }
                GrepBackend::InProcess
            }
            other => other,
        };
        match backend {
            GrepBackend::InProcess => search_tree(&matcher, path, filter.as_ref(), wanted)?,
            GrepBackend::Ripgrep => {
                let rg = ripgrep::find().ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        "ripgrep (`rg`, version 11 or later) is not installed or not on PATH",
                    )
                })?;
                ripgrep::grep(rg, path, &search).map_err(|failure| match failure {
                    ripgrep::Failure::Io(error) => error,
                    ripgrep::Failure::Reported(message) => {
                        io::Error::other(format!("ripgrep failed: {message}"))
                    }
                })?
            }
            GrepBackend::Auto => match ripgrep::find().map(|rg| ripgrep::grep(rg, path, &search)) {
                Some(Ok(found)) => found,
                // No ripgrep, or it failed (for example an older ripgrep that rejects a
                // regex feature the in-process engine accepts): search in process.
                _ => search_tree(&matcher, path, filter.as_ref(), wanted)?,
            },
        }
    };
    Ok(output(found, options.max_results))
}

fn output(mut matches: Vec<GrepMatch>, max_results: usize) -> GrepOutput {
    let truncated = matches.len() > max_results;
    matches.truncate(max_results);
    GrepOutput { matches, truncated }
}

fn not_found(path: &Path, error: io::Error) -> io::Error {
    if error.kind() == io::ErrorKind::NotFound {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no such file or directory: {}", path.display()),
        )
    } else {
        io::Error::new(
            error.kind(),
            format!("cannot read {}: {error}", path.display()),
        )
    }
}

fn search_one_file(
    matcher: &LineMatcher,
    path: &Path,
    wanted: usize,
) -> io::Result<Vec<GrepMatch>> {
    let mut file = open_regular(path)?;
    let mut lines = Vec::new();
    matcher.search(&mut file, &mut Vec::new(), wanted, &mut lines)?;
    let shown = path.to_string_lossy();
    Ok(lines
        .into_iter()
        .map(|(line_number, line)| GrepMatch {
            path: shown.clone().into_owned(),
            line_number,
            line,
        })
        .collect())
}

/// The in-process search of a directory: up to `wanted` matches in tree order.
///
/// The walk runs on the calling thread and hands each file, numbered in tree order, to
/// worker threads (started as files turn up); results are kept per file number, so the
/// walk and the workers stop as soon as the first files hold `wanted` matches.
fn search_tree(
    matcher: &LineMatcher,
    root: &Path,
    filter: Option<&GlobFilter>,
    wanted: usize,
) -> io::Result<Vec<GrepMatch>> {
    let done = AtomicBool::new(false);
    let progress = Mutex::new(Progress {
        slots: Vec::new(),
        complete: 0,
        found: 0,
    });
    let (sender, receiver) = crossbeam_channel::unbounded::<(usize, String, PathBuf)>();
    let work = || {
        let mut buffer = Vec::new();
        let mut lines = Vec::new();
        for (index, relative, absolute) in receiver.iter() {
            if done.load(Ordering::Relaxed) {
                continue; // drain what is queued
            }
            lines.clear();
            // An unreadable file, or one that fails mid-way, keeps what was found (like
            // ripgrep with --no-messages).
            // Opened non-blocking and only if still a regular file (the walk saw one,
            // but it may have been replaced by a FIFO since).
            if let Ok(mut file) = open_regular(&absolute) {
                let _ = matcher.search(&mut file, &mut buffer, wanted, &mut lines);
            }
            let matches = lines
                .drain(..)
                .map(|(line_number, line)| GrepMatch {
                    path: relative.clone(),
                    line_number,
                    line,
                })
                .collect();
            let mut progress = progress.lock().unwrap_or_else(PoisonError::into_inner);
            if progress.slots.len() <= index {
                progress.slots.resize_with(index + 1, || None);
            }
            progress.slots[index] = Some(matches);
            while let Some(Some(matches)) = progress.slots.get(progress.complete) {
                let count = matches.len();
                progress.found += count;
                progress.complete += 1;
            }
            if progress.found >= wanted {
                done.store(true, Ordering::Relaxed);
            }
        }
    };
    let max_helpers = thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_WORKERS);
    let walked = thread::scope(|scope| {
        let mut helpers = Vec::new();
        let mut next_index = 0;
        let options = WalkOptions {
            filter,
            ..WalkOptions::default()
        };
        let walked = walk::walk(root, &options, |relative, absolute| {
            if done.load(Ordering::Relaxed) {
                return false;
            }
            if next_index % FILES_PER_WORKER == 0 && helpers.len() < max_helpers {
                let helper = thread::Builder::new()
                    .name(format!("agentloop-grep-{}", helpers.len()))
                    .spawn_scoped(scope, work);
                helpers.extend(helper.ok());
            }
            // The receiver lives until the scope ends, so sending cannot fail.
            let _ = sender.send((next_index, relative.to_owned(), absolute.to_path_buf()));
            next_index += 1;
            true
        });
        drop(sender);
        work(); // help with what is left (all of it when no helper could start)
        for helper in helpers {
            let _ = helper.join();
        }
        walked
    });
    walked?;
    let progress = progress
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    let mut found = Vec::new();
    for slot in progress.slots {
        let Some(matches) = slot else { break };
        found.extend(matches);
        if found.len() >= wanted {
            break;
        }
    }
    found.truncate(wanted);
    Ok(found)
}

/// Results per file number, and how far they are complete from the first file.
struct Progress {
    slots: Vec<Option<Vec<GrepMatch>>>,
    /// Files `0..complete` all have their slot filled.
    complete: usize,
    /// Matches in those files.
    found: usize,
}

/// Files under `path` matching `pattern`, newest first (ties by path), skipping `.git` and
/// ignored files (the walk rules of grep). Paths are relative to `path`.
///
/// The pattern is matched against the whole relative path: `*.rs` finds files directly in
/// `path`, `**/*.rs` at any depth. A leading `./` is dropped; an absolute pattern is
/// accepted when it lies inside `path`.
pub(crate) fn glob(pattern: &str, path: &Path) -> io::Result<Vec<String>> {
    let pattern = relative_pattern(pattern, path)?;
    let glob = Glob::new(&pattern).map_err(|why| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid glob pattern `{pattern}`: {why}; use a pattern like `**/*.rs`"),
        )
    })?;
    let metadata = fs::metadata(path).map_err(|error| not_found(path, error))?;
    if !metadata.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is a file, not a directory; pass the directory to search as path",
                path.display()
            ),
        ));
    }
    let prune = Pruning::new(&pattern);
    let enter = |relative: &str, depth: usize| prune.may_enter(relative, depth);
    let options = WalkOptions {
        enter: Some(&enter),
        ..WalkOptions::default()
    };
    let mut found: Vec<(SystemTime, String)> = Vec::new();
    walk::walk(path, &options, |relative, absolute| {
        if glob.is_match(relative) {
            let modified = fs::symlink_metadata(absolute)
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((modified, relative.to_owned()));
        }
        true
    })?;
    found.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    Ok(found.into_iter().map(|(_, relative)| relative).collect())
}

/// The pattern relative to `path`, or an error saying how to write it.
fn relative_pattern(pattern: &str, path: &Path) -> io::Result<String> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, why);
    let mut relative = pattern;
    if pattern.starts_with('/') {
        relative = Path::new(pattern)
            .strip_prefix(path)
            .ok()
            .and_then(|rest| rest.to_str())
            .ok_or_else(|| {
                invalid(format!(
                    "glob pattern `{pattern}` is an absolute path outside {}; pass its \
                     directory as path and a relative pattern such as `**/*.rs`",
                    path.display()
                ))
            })?;
    }
    while let Some(rest) = relative.strip_prefix("./") {
        relative = rest;
    }
    if relative.is_empty() {
        return Err(invalid(format!(
            "glob pattern `{pattern}` is empty; use a pattern such as `**/*.rs`"
        )));
    }
    if relative.split('/').any(|component| component == "..") {
        return Err(invalid(format!(
            "glob pattern `{pattern}` contains `..`; pass the parent directory as path instead"
        )));
    }
    Ok(relative.to_owned())
}

/// Which directories a glob can match below, from its leading components: `src/*/x/*.rs`
/// only enters `src`, then any directory, then `x`; without `**` nothing deeper than the
/// pattern is entered.
struct Pruning {
    /// Globs of the components before the first `**` (none when the pattern cannot be
    /// split on `/`).
    leading: Option<Vec<Glob>>,
    /// The pattern has a `**` component: any depth past `leading`.
    recursive: bool,
}

impl Pruning {
    fn new(pattern: &str) -> Pruning {
        let mut depth = 0;
        let mut escaped = false;
        for c in pattern.chars() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '{' => depth += 1,
                '}' => depth -= 1,
                '/' if depth > 0 => {
                    return Pruning {
                        leading: None,
                        recursive: true,
                    };
                }
                _ => {}
            }
        }
        let components: Vec<&str> = pattern.split('/').collect();
        let recursive = components.contains(&"**");
        let leading = components
            .iter()
            .take_while(|c| **c != "**")
            .take(if recursive {
                usize::MAX
            } else {
                components.len() - 1
            })
            .map(|c| Glob::new(c).ok())
            .collect();
        Pruning { leading, recursive }
    }

    fn may_enter(&self, relative: &str, depth: usize) -> bool {
        let Some(leading) = &self.leading else {
            return true;
        };
        match leading.get(depth - 1) {
            Some(component) => component.is_match(relative.rsplit('/').next().unwrap_or("")),
            None => self.recursive,
        }
    }
}

#[cfg(test)]
mod tests;
