//! `--rewind N`, `--dry-run`, `--force` and `--fork`: the rewind a resumed session starts
//! with, its report as the terminal shows it, and where a fork's transcript goes. It only
//! builds requests and text; the session does the work.

use std::path::{Path, PathBuf};

use agentloop::session::checkpoint::{Rewind, RewindReport};

use crate::args::Options;

/// The rewind the options ask for, if any (a fork takes `--rewind` as its point instead).
pub fn request(options: &Options) -> Option<Rewind> {
    let input = options.rewind.filter(|_| !options.fork)?;
    let mut rewind = Rewind::to_input(input);
    if options.force {
        rewind = rewind.force();
    }
    if options.dry_run {
        rewind = rewind.dry_run();
    }
    Some(rewind)
}

/// The report in lines: what was (or would be) put back, removed, left, not covered;
/// paths inside `cwd` relative to it.
pub fn describe(report: &RewindReport, cwd: &Path) -> String {
    let shown = |path: &Path| path.strip_prefix(cwd).unwrap_or(path).display().to_string();
    let (put, gone) = if report.dry_run {
        ("would restore", "would remove")
    } else {
        ("restored", "removed")
    };
    let mut out = format!(
        "{} to before input {}:\n",
        if report.dry_run {
            "dry run: rewind"
        } else {
            "rewound"
        },
        report.input
    );
    for path in &report.restored {
        out.push_str(&format!("  {put}  {}\n", shown(path)));
    }
    for path in &report.removed {
        out.push_str(&format!("  {gone}  {}\n", shown(path)));
    }
    for conflict in &report.conflicts {
        let what = if conflict.overwritten {
            "overwrote your change"
        } else {
            "left as you left it"
        };
        out.push_str(&format!(
            "  conflict ({what})  {}: {}\n",
            shown(&conflict.path),
            conflict.reason
        ));
    }
    for note in &report.not_covered {
        out.push_str(&format!("  not covered  {note}\n"));
    }
    if report.restored.is_empty() && report.removed.is_empty() && report.conflicts.is_empty() {
        out.push_str("  no file to change\n");
    }
    out.push_str(&format!(
        "  {} conversation turn(s) {}\n",
        report.turns_removed,
        if report.dry_run {
            "would go"
        } else {
            "removed"
        }
    ));
    if report.conflicts.iter().any(|c| !c.overwritten) {
        out.push_str("  (--force puts the conflicting files back too)\n");
    }
    out
}

/// A new transcript beside `source` for a fork: `<stem>.fork-<n>.jsonl`, the first free.
pub fn fork_path(source: &Path) -> PathBuf {
    let stem = source
        .file_stem()
        .map_or_else(|| "session".into(), |s| s.to_string_lossy().into_owned());
    let dir = source.parent().unwrap_or(Path::new("."));
    (1..)
        .map(|n| dir.join(format!("{stem}.fork-{n}.jsonl")))
        .find(|path| !path.exists())
        .expect("a free number")
}
