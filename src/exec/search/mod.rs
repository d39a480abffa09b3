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
//! Nothing is left out silently: a line over the in-process cap (8 MiB, searched in its
//! head), a file that cannot be opened or fails mid-read, and files ripgrep says it could
//! not read are named in [`GrepOutput::cut_short`], so that "no matches" is said only of
//! what was searched whole. (ripgrep holds a whole line; past its memory cap it fails,
//! and the in-process search, which names the cut, takes over.)
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
/// Most files named in [`GrepOutput::cut_short`]; a last entry counts the others.
const MAX_CUT_SHORT: usize = 20;

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
        let shown = path.to_string_lossy();
        let mut file = open_regular(path)?;
        let searched = search_file(&matcher, &mut file, &shown, wanted, &mut Vec::new());
        Found {
            notes: searched.note.into_iter().collect(),
            matches: searched.matches,
        }
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

/// What a search found, and what it could not search whole: `(path, what)` per file.
pub(crate) struct Found {
    pub(crate) matches: Vec<GrepMatch>,
    pub(crate) notes: Vec<(String, String)>,
}

fn output(found: Found, max_results: usize) -> GrepOutput {
    let Found {
        mut matches,
        mut notes,
    } = found;
    let truncated = matches.len() > max_results;
    matches.truncate(max_results);
    if notes.len() > MAX_CUT_SHORT {
        let more = notes.len() - MAX_CUT_SHORT;
        notes.truncate(MAX_CUT_SHORT);
        notes.push((
            String::new(),
            format!("{more} more files were not searched whole"),
        ));
    }
    GrepOutput {
        matches,
        truncated,
        cut_short: notes,
    }
}

/// One file's matches, and why it was not searched whole (if it was not).
struct Searched {
    matches: Vec<GrepMatch>,
    note: Option<(String, String)>,
}

/// Searches the open `file`, shown as `shown` in matches and notes.
fn search_file(
    matcher: &LineMatcher,
    file: &mut fs::File,
    shown: &str,
    wanted: usize,
    buffer: &mut Vec<u8>,
) -> Searched {
    let mut lines = Vec::new();
    let note = match matcher.search(file, buffer, wanted, &mut lines) {
        Ok(None) => None,
        Ok(Some(long)) => Some((shown.to_string(), long_lines_note(long))),
        // What was found before the error is kept (as ripgrep does), and the cut named.
        Err(error) => Some((
            shown.to_string(),
            format!("searched only up to a read error ({error})"),
        )),
    };
    let matches = lines
        .into_iter()
        .map(|(line_number, line)| GrepMatch {
            path: shown.to_string(),
            line_number,
            line,
        })
        .collect();
    Searched { matches, note }
}

/// Says which lines of a file were searched in their head only.
fn long_lines_note(long: matcher::LongLines) -> String {
    let cap = matcher::MAX_LINE / (1024 * 1024);
    if long.count == 1 {
        format!(
            "line {} is longer than {cap} MiB; only its first {cap} MiB were searched",
            long.first
        )
    } else {
        format!(
            "{} lines are longer than {cap} MiB (the first is line {}); only the first {cap} \
             MiB of each were searched",
            long.count, long.first
        )
    }
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
) -> io::Result<Found> {
    let done = AtomicBool::new(false);
    let progress = Mutex::new(Progress {
        slots: Vec::new(),
        complete: 0,
        found: 0,
    });
    let (sender, receiver) = crossbeam_channel::unbounded::<(usize, String, PathBuf)>();
    let work = || {
        let mut buffer = Vec::new();
        for (index, relative, absolute) in receiver.iter() {
            if done.load(Ordering::Relaxed) {
                continue; // drain what is queued
            }
            // A file that cannot be opened, or fails mid-way, keeps what was found (as
            // ripgrep does) and is named as not searched whole. Opened non-blocking and
            // only if still a regular file (the walk saw one, but it may have been
            // replaced by a FIFO since).
            let searched = match open_regular(&absolute) {
                Ok(mut file) => search_file(matcher, &mut file, &relative, wanted, &mut buffer),
                Err(error) => Searched {
                    matches: Vec::new(),
                    note: Some((relative.clone(), format!("not searched ({error})"))),
                },
            };
            let mut progress = progress.lock().unwrap_or_else(PoisonError::into_inner);
            if progress.slots.len() <= index {
                progress.slots.resize_with(index + 1, || None);
            }
            progress.slots[index] = Some(searched);
            while let Some(Some(searched)) = progress.slots.get(progress.complete) {
                let count = searched.matches.len();
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
    let mut notes = Vec::new();
    for slot in progress.slots {
        let Some(searched) = slot else { break };
        found.extend(searched.matches);
        notes.extend(searched.note);
        if found.len() >= wanted {
            break;
        }
    }
    found.truncate(wanted);
    Ok(Found {
        matches: found,
        notes,
    })
}

/// Results per file number, and how far they are complete from the first file.
struct Progress {
    slots: Vec<Option<Searched>>,
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
