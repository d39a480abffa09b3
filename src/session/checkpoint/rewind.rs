//! A rewind of the files: the facts about every path the checkpoints saw change (from the
//! manifests, git's diffs and the disk), the plan (`plan.rs`), and its application.
//!
//! Where a path's checkpoint state comes from: the pre-image the file tools kept, when
//! nothing else could have changed the file between the checkpoint and that capture (no
//! command ran before it); otherwise the checkpoint's git tree, when git sees the path;
//! otherwise the pre-image, with a note. Whether the agent left what is there now: the
//! change time the agent's last change left (or git's tree at the end of the last input).
//! What the user did within the checkpoints: git's changes between inputs, changes during
//! an input that ran no command and that the file tools did not make, and, outside git,
//! any change since the agent's last one.
//!
//! Applying writes each file beside its target and renames it over (so a failure never
//! leaves half a file), removes what was created since, removes directories created since
//! once they are empty, and records in the store what the rewind left (so that a later
//! rewind counts it as the agent's) and what it left of the user's (so that a later rewind
//! leaves it too). It never touches a path the plan does not name.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::git::{DiffEntry, Git};
use super::plan::{self, Action, PathFacts, Plan, Target};
use super::recorder::Log;
use super::store::{FsTime, Line, PreState, Span, StatPrint, Store};
use super::{Rewind, RewindReport};
use crate::cancel::CancelToken;

/// What the file log says about one path over the checkpoints rewound.
struct Logged {
    /// The span (index into the spans) of the first pre-image, and the pre-image.
    span: usize,
    state: PreState,
    after_commands: bool,
    /// Someone changed it after the agent's last change, within the spans.
    changed: bool,
    /// An earlier rewind left the user's change to it.
    user: bool,
}

/// What git says, for the spans rewound.
struct GitFacts {
    /// The checkpoint's tree, by path (relative to the top level).
    tree: HashMap<PathBuf, (u32, String)>,
    /// Checkpoint → now.
    target: HashMap<PathBuf, DiffEntry>,
    /// End of the last input → now; `None` when that end is not known.
    left: Option<HashSet<PathBuf>>,
    /// Changes the agent did not make, with what to say about each.
    user: HashMap<PathBuf, String>,
}

/// Rewinds the files to checkpoint `id` (or plans it, for a dry run); fills `report`.
pub(crate) fn rewind_files(
    log: &mut Log,
    git: Option<&Git>,
    working_dir: &Path,
    id: u64,
    rewind: &Rewind,
    report: &mut RewindReport,
    cancel: &CancelToken,
) -> io::Result<()> {
    let spans = read_spans(&log.store, id)?;
    let mut notes = Vec::new();
    let git_facts = match (git, spans[0].git_start.as_ref()) {
        (Some(git), Some(tree)) => Some(git_facts(&log.store, git, &spans, tree, cancel)?),
        _ => None,
    };
    for span in &spans {
        if span.commands && (git_facts.is_none() || span.git_start.is_none()) {
            notes.push(format!(
                "input {} ran shell commands outside a git work tree (or without a git \
                 snapshot): what they changed is not covered and was left as it is",
                span.input
            ));
        }
    }
    let logged = file_log(&spans);
    let facts = facts(
        &log.store,
        git,
        git_facts.as_ref(),
        &spans,
        logged,
        working_dir,
        &mut notes,
    );
    let plan = plan::plan(facts, rewind.force);
    report.conflicts = plan.conflicts.clone();
    report.not_covered.extend(notes);
    report.not_covered.extend(plan.not_covered.iter().cloned());
    if rewind.dry_run {
        describe(&plan, working_dir, spans[0].fs_time, report);
        return Ok(());
    }
    let stage_dir = stage(&log.store, git, &spans[0], &plan, cancel)?;
    let staged = stage_dir.as_deref().zip(git.map(|g| g.top.as_path()));
    let (written, removed) = apply(&plan, staged, working_dir, spans[0].fs_time, report);
    // What the rewind left counts as the agent's, and the user's changes it left stay
    // the user's, for a later rewind to an earlier checkpoint.
    if let Some(before) = log.store.ids_from(0).into_iter().filter(|&i| i < id).max() {
        for path in written.iter().chain(&removed) {
            let stat = StatPrint::at(path);
            let _ = log.store.append_to(
                before,
                &Line::Post {
                    path: path.clone(),
                    stat,
                },
            );
        }
        for conflict in plan.conflicts.iter().filter(|c| !c.overwritten) {
            let _ = log.store.append_to(
                before,
                &Line::User {
                    path: conflict.path.clone(),
                },
            );
        }
    }
    report.restored = written;
    report.removed = removed;
    let refs = log.store.discard_from(id);
    if let Some(git) = git {
        let mut all = refs;
        all.append(&mut log.store.dropped_refs);
        let _ = git.delete_refs(&all, cancel);
    }
    Ok(())
}

/// The checkpoints from `id` on, refusing when the first is gone or any was dropped.
fn read_spans(store: &Store, id: u64) -> io::Result<Vec<Span>> {
    let spans = store
        .ids_from(id)
        .into_iter()
        .map(|i| store.read(i))
        .collect::<io::Result<Vec<_>>>()?;
    match spans.first() {
        Some(first) if first.id == id => {}
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the checkpoint is no longer in the store",
            ));
        }
    }
    if let Some(dropped) = spans.iter().find(|s| s.dropped) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "the checkpoint before input {} was dropped to keep the store within its \
                 cap, so the files cannot be put back as they were; rewind to a later \
                 input, or raise CheckpointConfig::max_bytes",
                dropped.input
            ),
        ));
    }
    Ok(spans)
}

/// The file log over `spans`: each path's first pre-image and what later ones say.
fn file_log(spans: &[Span]) -> BTreeMap<PathBuf, Logged> {
    let start = spans[0].fs_time;
    let mut logged: BTreeMap<PathBuf, Logged> = BTreeMap::new();
    for (index, span) in spans.iter().enumerate() {
        for (path, state, after_commands, changed_at) in &span.pres {
            let changed = changed_at.is_some_and(|at| at >= start);
            let entry = logged.entry(path.clone()).or_insert_with(|| Logged {
                span: index,
                state: state.clone(),
                after_commands: *after_commands,
                changed: false,
                user: false,
            });
            entry.changed |= changed;
        }
        for path in &span.users {
            let entry = logged.entry(path.clone()).or_insert_with(|| Logged {
                span: index,
                state: PreState::Lost {
                    why: "only a conflict was recorded for it".into(),
                },
                after_commands: true,
                changed: false,
                user: false,
            });
            entry.user = true;
        }
    }
    logged
}

/// Git's facts for `spans`: one snapshot of now and the diffs against it.
fn git_facts(
    store: &Store,
    git: &Git,
    spans: &[Span],
    tree: &str,
    cancel: &CancelToken,
) -> io::Result<GitFacts> {
    let scratch = store.scratch()?;
    let last = spans.last().expect("at least one span");
    let mut pairs = vec![(Some(tree.to_string()), None)];
    let left = last.git_end.clone().or_else(|| {
        // The last input never ended (a crash): its start is the best known end.
        (!last.ended).then(|| last.git_start.clone()).flatten()
    });
    let has_left = left.is_some();
    if has_left {
        pairs.push((left, None));
    }
    // (index of the pair, what a change there means)
    let mut meanings = Vec::new();
    for (j, span) in spans.iter().enumerate() {
        if j > 0 && span.round == 0 {
            if let (Some(end), Some(start)) = (&spans[j - 1].git_end, &span.git_start) {
                meanings.push((
                    pairs.len(),
                    format!(
                        "changed between input {} and input {}, not by the agent",
                        spans[j - 1].input,
                        span.input
                    ),
                    None,
                ));
                pairs.push((Some(end.clone()), Some(start.clone())));
            }
        }
        if !span.commands {
            let end = span
                .git_end
                .clone()
                .or_else(|| spans.get(j + 1).and_then(|next| next.git_start.clone()));
            if let (Some(start), Some(end)) = (&span.git_start, end) {
                meanings.push((
                    pairs.len(),
                    format!(
                        "changed while input {} ran, and not by the agent's file tools (it ran \
                         no command)",
                        span.input
                    ),
                    Some(j),
                ));
                pairs.push((Some(start.clone()), Some(end)));
            }
        }
    }
    let super::git::Facts {
        diffs,
        tree: entries,
    } = git.facts(&store.dir().join("index"), &scratch, tree, &pairs, cancel)?;
    let target = diffs[0]
        .iter()
        .map(|e| (e.path.clone(), e.clone()))
        .collect();
    let left = has_left.then(|| diffs[1].iter().map(|e| e.path.clone()).collect());
    let mut user = HashMap::new();
    for (pair, meaning, span) in meanings {
        for entry in &diffs[pair] {
            // A quiet span's change the file tools made is the agent's.
            let by_tools = span.is_some_and(|j| {
                spans[j]
                    .pres
                    .iter()
                    .any(|(p, ..)| p.strip_prefix(&git.top).is_ok_and(|r| r == entry.path))
            });
            if !by_tools {
                user.entry(entry.path.clone())
                    .or_insert_with(|| meaning.clone());
            }
        }
    }
    Ok(GitFacts {
        tree: entries,
        target,
        left,
        user,
    })
}

/// The facts of every path the file log or git names.
fn facts(
    store: &Store,
    git: Option<&Git>,
    git_facts: Option<&GitFacts>,
    spans: &[Span],
    mut logged: BTreeMap<PathBuf, Logged>,
    working_dir: &Path,
    notes: &mut Vec<String>,
) -> Vec<PathFacts> {
    let mut paths: Vec<PathBuf> = logged.keys().cloned().collect();
    let mut outside = Vec::new();
    if let (Some(git), Some(facts)) = (git, git_facts) {
        for rel in facts.target.keys() {
            let path = git.top.join(rel);
            if !path.starts_with(working_dir) {
                outside.push(path);
            } else if !logged.contains_key(&path) {
                paths.push(path);
            }
        }
    }
    if !outside.is_empty() {
        outside.sort();
        notes.push(format!(
            "{} path(s) outside the working directory changed since the checkpoint and were \
             left as they are: {}",
            outside.len(),
            list(&outside)
        ));
    }
    let commands_before = |span: usize| spans[..span].iter().any(|s| s.commands);
    let start = spans[0].fs_time;
    let mut facts = Vec::with_capacity(paths.len());
    for path in paths {
        let entry = logged.remove(&path);
        let rel = git.and_then(|g| path.strip_prefix(&g.top).ok().map(Path::to_path_buf));
        let seen_by_git = match (git_facts, &rel) {
            (Some(f), Some(rel)) => f.tree.contains_key(rel) || f.target.contains_key(rel),
            _ => false,
        };
        let exact = entry
            .as_ref()
            .is_some_and(|e| !e.after_commands && !commands_before(e.span));
        let meta = fs::symlink_metadata(&path).ok();
        let now = meta.as_ref().map(StatPrint::of);
        let (target, matches) = if exact || !seen_by_git {
            let entry = entry
                .as_ref()
                .expect("a path git does not see is in the file log");
            if !exact {
                notes.push(format!(
                    "{}: a command ran before the agent's first change to it; it is put back \
                     as it was at that change",
                    path.display()
                ));
            }
            let target = target_of(store, spans[entry.span].id, &entry.state);
            let matches = matches_on_disk(&target, &path, meta.as_ref());
            (target, matches)
        } else {
            let (facts, rel) = (
                git_facts.expect("seen by git"),
                rel.as_ref().expect("under top"),
            );
            let target = match facts.tree.get(rel) {
                Some((0o160000, _)) => Target::Unknown("a submodule: not covered".into()),
                Some((mode, oid)) => Target::Git {
                    oid: oid.clone(),
                    mode: *mode,
                },
                None => Target::GitAbsent,
            };
            let matches =
                !facts.target.contains_key(rel) || (target == Target::GitAbsent && meta.is_none());
            (target, matches)
        };
        let left_by_stat = store.last_post(&path).is_some_and(|post| post == now);
        let left_by_git = match (git_facts, &rel) {
            (Some(f), Some(rel)) if seen_by_git => f
                .left
                .as_ref()
                .is_some_and(|changed| !changed.contains(rel)),
            _ => false,
        };
        let mut changed_by_user = None;
        if entry.as_ref().is_some_and(|e| e.user) {
            changed_by_user =
                Some("you changed it; an earlier rewind left it as you had it".to_string());
        } else if let (Some(f), Some(rel), true) = (git_facts, &rel, seen_by_git) {
            changed_by_user = f.user.get(rel).cloned();
        } else if entry.as_ref().is_some_and(|e| e.changed) {
            changed_by_user = Some(
                "changed after the agent's last change to it (outside git, a command of the \
                 agent's and an edit of yours cannot be told apart)"
                    .to_string(),
            );
        }
        let untouched_since = meta
            .as_ref()
            .is_some_and(|m| (m.ctime(), m.ctime_nsec()) < start);
        facts.push(PathFacts {
            path,
            target,
            exists: meta.is_some(),
            matches_target: matches,
            agent_left_it: left_by_stat || left_by_git,
            changed_by_user,
            untouched_since,
        });
    }
    facts
}

/// A few paths for a message.
fn list(paths: &[PathBuf]) -> String {
    let mut shown: Vec<String> = paths
        .iter()
        .take(5)
        .map(|p| p.display().to_string())
        .collect();
    if paths.len() > 5 {
        shown.push(format!("and {} more", paths.len() - 5));
    }
    shown.join(", ")
}

/// The plan's target for a kept pre-image of checkpoint `id`.
fn target_of(store: &Store, id: u64, state: &PreState) -> Target {
    match state {
        PreState::File { blob, mode, .. } => Target::File {
            blob: Span::blob_path(store.dir(), id, blob),
            mode: *mode,
        },
        PreState::Symlink { target } => Target::Symlink {
            target: target.clone(),
        },
        PreState::Absent { created_dirs } => Target::Absent {
            created_dirs: created_dirs.clone(),
        },
        PreState::Lost { why } => Target::Unknown(why.clone()),
    }
}

/// Whether what is at `path` (`meta`, not following a symlink) equals a kept `target`.
fn matches_on_disk(target: &Target, path: &Path, meta: Option<&fs::Metadata>) -> bool {
    match (target, meta) {
        (Target::Absent { .. }, meta) => meta.is_none(),
        (Target::Symlink { target }, Some(meta)) if meta.file_type().is_symlink() => {
            fs::read_link(path).is_ok_and(|link| &link == target)
        }
        (Target::File { blob, mode }, Some(meta)) if meta.is_file() => {
            meta.mode() & 0o7777 == *mode
                && fs::metadata(blob).is_ok_and(|b| b.len() == meta.len())
                && same_content(blob, path)
        }
        _ => false,
    }
}

fn same_content(a: &Path, b: &Path) -> bool {
    match (fs::read(a), fs::read(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Stages the git blobs the plan writes; the stage directory, when there are any.
fn stage(
    store: &Store,
    git: Option<&Git>,
    first: &Span,
    plan: &Plan,
    cancel: &CancelToken,
) -> io::Result<Option<PathBuf>> {
    let (Some(git), Some(tree)) = (git, first.git_start.as_ref()) else {
        return Ok(None);
    };
    let paths: Vec<PathBuf> = plan
        .steps
        .iter()
        .filter(|s| matches!(s.action, Action::Write(Target::Git { .. })))
        .filter_map(|s| s.path.strip_prefix(&git.top).ok().map(Path::to_path_buf))
        .collect();
    if paths.is_empty() {
        return Ok(None);
    }
    let scratch = store.dir().join("tmp");
    fs::create_dir_all(&scratch)?;
    let stage = scratch.join("stage");
    let _ = fs::remove_dir_all(&stage);
    fs::create_dir_all(&stage)?;
    git.stage(tree, &paths, &scratch, &stage, cancel)?;
    Ok(Some(stage))
}

/// Fills a dry run's report: what the steps would restore and remove.
fn describe(plan: &Plan, working_dir: &Path, start: FsTime, report: &mut RewindReport) {
    let mut removed = Vec::new();
    for step in &plan.steps {
        match step.action {
            Action::Write(_) => report.restored.push(step.path.clone()),
            Action::Remove => removed.push(step.path.clone()),
        }
    }
    let dirs = empty_dirs_after(plan, &removed, working_dir, start);
    report.removed = removed;
    report.removed.extend(dirs);
}

/// The directories created since the checkpoint that would be empty once `removed` are
/// gone (deepest first).
fn empty_dirs_after(
    plan: &Plan,
    removed: &[PathBuf],
    working_dir: &Path,
    start: FsTime,
) -> Vec<PathBuf> {
    let mut candidates: Vec<PathBuf> = plan.dirs.clone();
    for path in removed {
        let mut dir = path.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(working_dir) && *d != working_dir) {
            if created_since(d, start) && !candidates.iter().any(|c| c == d) {
                candidates.push(d.to_path_buf());
            }
            dir = d.parent();
        }
    }
    candidates.sort();
    candidates.dedup();
    candidates.reverse();
    let mut gone: HashSet<PathBuf> = removed.iter().cloned().collect();
    let mut empty = Vec::new();
    for dir in candidates {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        let left = entries
            .filter_map(|e| e.ok())
            .any(|e| !gone.contains(&e.path()));
        if !left {
            gone.insert(dir.clone());
            empty.push(dir);
        }
    }
    empty
}

/// Whether directory `dir` was created at or after `start` (its birth time; `false` when
/// the file system does not keep one).
fn created_since(dir: &Path, start: FsTime) -> bool {
    let Ok(born) = fs::symlink_metadata(dir).and_then(|m| m.created()) else {
        return false;
    };
    let Ok(since) = born.duration_since(std::time::UNIX_EPOCH) else {
        return false;
    };
    (since.as_secs() as i64, since.subsec_nanos() as i64) >= start
}

/// Applies `plan`: what it wrote and what it removed.
fn apply(
    plan: &Plan,
    staged: Option<(&Path, &Path)>,
    working_dir: &Path,
    start: FsTime,
    report: &mut RewindReport,
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut removed = Vec::new();
    let mut written = Vec::new();
    for step in &plan.steps {
        let done = match &step.action {
            Action::Remove => remove(&step.path).map(|()| removed.push(step.path.clone())),
            Action::Write(target) => {
                write_target(target, &step.path, staged).map(|()| written.push(step.path.clone()))
            }
        };
        if let Err(err) = done {
            report.not_covered.push(format!(
                "{}: could not be put back: {err}",
                step.path.display()
            ));
        }
    }
    let mut dirs = Vec::new();
    for dir in empty_dirs_after(plan, &removed, working_dir, start) {
        if fs::remove_dir(&dir).is_ok() {
            dirs.push(dir);
        }
    }
    (written, removed.into_iter().chain(dirs).collect())
}

/// Removes the file or symlink at `path`.
fn remove(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Puts `target` at `path`: made beside it and renamed over, so a failure never leaves
/// half a file. `staged` is the stage directory and the top level it mirrors.
fn write_target(target: &Target, path: &Path, staged: Option<(&Path, &Path)>) -> io::Result<()> {
    let parent = path
        .parent()
        .ok_or_else(|| io::Error::other("no parent directory"))?;
    fs::create_dir_all(parent)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = parent.join(format!(".{name}.agentloop-rewind-{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let made = match target {
        Target::File { blob, mode } => fs::copy(blob, &tmp)
            .and_then(|_| fs::set_permissions(&tmp, fs::Permissions::from_mode(*mode))),
        Target::Symlink { target } => std::os::unix::fs::symlink(target, &tmp),
        Target::Git { mode, .. } => {
            let (stage, top) = staged.ok_or_else(|| io::Error::other("the blob was not staged"))?;
            let rel = path
                .strip_prefix(top)
                .map_err(|_| io::Error::other("outside the git work tree"))?;
            let source = stage.join(rel);
            if *mode == 0o120000 {
                fs::read_link(&source).and_then(|link| std::os::unix::fs::symlink(link, &tmp))
            } else {
                fs::copy(&source, &tmp).and_then(|_| {
                    fs::set_permissions(&tmp, fs::Permissions::from_mode(git_perms(*mode, path)))
                })
            }
        }
        Target::Absent { .. } | Target::GitAbsent | Target::Unknown(_) => {
            Err(io::Error::other("nothing to write"))
        }
    };
    if let Err(err) = made.and_then(|()| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(err);
    }
    Ok(())
}

/// Permission bits for a git blob of `mode` written at `path`: git keeps only whether a
/// file is executable, so the bits the file has now are kept when they agree with that
/// (a command that changed the content kept them), else 0644 or 0755.
fn git_perms(mode: u32, path: &Path) -> u32 {
    let executable = mode == 0o100755;
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() && (meta.mode() & 0o111 != 0) == executable => {
            meta.mode() & 0o7777
        }
        _ if executable => 0o755,
        _ => 0o644,
    }
}
