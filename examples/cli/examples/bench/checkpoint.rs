//! Bench section `checkpoint`: what checkpoints add to a session (issue 38): the cost per
//! write-tool call of keeping a 100 KB file's pre-image, and the cost per input of the git
//! snapshot of a 10,000-file repository. Each figure is a session with checkpoints on
//! minus the same session with them off. Measures; never asserts.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Client, Request, Role};
use agentloop::profiles::ProviderProfile;
use agentloop::session::checkpoint::CheckpointConfig;
use agentloop::session::{Session, SessionConfig};
use agentloop::tools;
use serde_json::json;

use crate::{Row, ms};

/// Edit calls per session (each on its own file, so each keeps one pre-image).
const CALLS: usize = 200;
/// Sessions per setting; the median is reported.
const RUNS: usize = 7;
const FILE_BYTES: usize = 100 * 1024;
/// Files in the repository of the per-input rows: 100 directories of 100.
const REPO_FILES: usize = 10_000;
/// Inputs per session in the repository.
const INPUTS: usize = 11;

fn row(name: impl Into<String>, value: String, target: &str) -> Row {
    Row {
        section: "checkpoint",
        name: name.into(),
        value,
        target: target.to_string(),
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn session(dir: &Path, model: ScriptedModel, store: Option<&Path>) -> Session {
    let env: Arc<dyn ExecutionEnvironment> =
        Arc::new(LocalExecutionEnvironment::new(dir).expect("environment"));
    let profile = ProviderProfile::new("scripted", "bench-model").with_tool(tools::edit_file());
    let mut config = SessionConfig::default();
    if let Some(store) = store {
        config = config.with_checkpoints(CheckpointConfig::enabled().with_dir(store));
    }
    Session::new(profile, env, Client::new().with_provider(model), config).expect("session")
}

/// One input of CALLS edits, each to its own 100 KB file, the files and the store under
/// `base`; the input's wall time.
fn edits(checkpoints: bool, base: &Path) -> Duration {
    let work = tempfile::tempdir_in(base).expect("temp dir");
    let store = tempfile::tempdir_in(base).expect("temp dir");
    let filler = "x".repeat(99) + "\n";
    let body = format!("HEAD\n{}", filler.repeat((FILE_BYTES - 5) / 100));
    for i in 0..CALLS {
        std::fs::write(work.path().join(format!("f{i}.txt")), &body).expect("file");
    }
    let model = ScriptedModel::dynamic(|request: &Request| {
        let done = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .count();
        if done < CALLS {
            ScriptedTurn::tool_call(
                "edit_file",
                json!({"file_path": format!("f{done}.txt"), "old_string": "HEAD",
                       "new_string": "head"}),
            )
        } else {
            ScriptedTurn::text("done")
        }
    });
    let session = session(work.path(), model, checkpoints.then_some(store.path()));
    let start = Instant::now();
    let outcome = session.run("edit them").expect("run");
    let took = start.elapsed();
    assert_eq!(outcome.rounds, CALLS, "every edit ran");
    session.close();
    took
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git");
    assert!(status.success(), "git {args:?}");
}

/// A committed repository of REPO_FILES small files. Their mtimes are an hour old, as in
/// a checkout worked in for a while: files as new as the index are "racily clean" to git,
/// which would hash all of them again on every `git add`.
fn repository() -> tempfile::TempDir {
    let repo = tempfile::tempdir().expect("temp dir");
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    for d in 0..REPO_FILES / 100 {
        let sub = repo.path().join(format!("d{d:02}"));
        std::fs::create_dir(&sub).expect("dir");
        for f in 0..100 {
            let text = format!("file {d}/{f}\n{}\n", "line of text ".repeat(20));
            let path = sub.join(format!("f{f:02}.txt"));
            std::fs::write(&path, text).expect("file");
            let file = std::fs::File::options()
                .write(true)
                .open(&path)
                .expect("file");
            file.set_modified(old).expect("mtime");
        }
    }
    git(repo.path(), &["init", "-q"]);
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-qm", "files"]);
    repo
}

/// INPUTS text-only inputs in `repo`: (the first input, the median of the others).
fn inputs(repo: &Path, checkpoints: bool) -> (Duration, Duration) {
    let store = tempfile::tempdir().expect("temp dir");
    let model = ScriptedModel::dynamic(|_: &Request| ScriptedTurn::text("ok"));
    let session = session(repo, model, checkpoints.then_some(store.path()));
    let mut times = Vec::new();
    for i in 0..INPUTS {
        let start = Instant::now();
        session.run(format!("input {i}")).expect("run");
        times.push(start.elapsed());
    }
    session.close();
    let first = times.remove(0);
    (first, median(times))
}

/// What git itself takes for one snapshot's work in `repo` (the median of 10): `git add -A`
/// and `git write-tree` with a private index copied from the repository's, without the
/// shell and the ref update around them.
fn git_floor(repo: &Path) -> Duration {
    let scratch = tempfile::tempdir().expect("temp dir");
    let index = scratch.path().join("index");
    std::fs::copy(repo.join(".git/index"), &index).expect("index copy");
    let mut times = Vec::new();
    for _ in 0..10 {
        let start = Instant::now();
        for args in [&["add", "-A"][..], &["write-tree"][..]] {
            let out = Command::new("git")
                .args(args)
                .current_dir(repo)
                .env("GIT_INDEX_FILE", &index)
                .output()
                .expect("git");
            assert!(out.status.success(), "git {args:?}");
        }
        times.push(start.elapsed());
    }
    median(times)
}

/// CALLS edits with checkpoints off and on, RUNS times each, under `base`: two rows.
fn edit_rows(base: &Path, place: &str) -> Vec<Row> {
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        off.push(edits(false, base));
        on.push(edits(true, base));
    }
    let (on, off) = (median(on), median(off));
    let per_call = on.saturating_sub(off) / CALLS as u32;
    vec![
        row(
            format!(
                "{CALLS} edit_file calls on 100 KB files in {place}: off / on (median of {RUNS})"
            ),
            format!("{} / {}", ms(off), ms(on)),
            "",
        ),
        row(
            "  checkpoint cost per write-tool call (100 KB pre-image)",
            ms(per_call),
            "< 0.5 ms",
        ),
    ]
}

/// The section's rows.
pub fn run() -> Vec<Row> {
    // tmpfs first: the atomic write's fsync (milliseconds on a shared disk, and noisy) is
    // free there, so the difference is the checkpoint's own cost.
    let mut rows = Vec::new();
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        rows.extend(edit_rows(shm, "/dev/shm (tmpfs)"));
    }
    rows.extend(edit_rows(&std::env::temp_dir(), "the temp dir"));

    let repo = repository();
    // Warm the page cache for both settings alike.
    let _ = inputs(repo.path(), false);
    let (first_off, later_off) = inputs(repo.path(), false);
    let (first_on, later_on) = inputs(repo.path(), true);
    rows.push(row(
        format!("{REPO_FILES}-file git repository, text-only input: off / on, first input"),
        format!("{} / {}", ms(first_off), ms(first_on)),
        "",
    ));
    rows.push(row(
        format!("  the same, later inputs (median of {})", INPUTS - 1),
        format!("{} / {}", ms(later_off), ms(later_on)),
        "",
    ));
    let floor = git_floor(repo.path());
    rows.push(row(
        "  git's own work for one snapshot (add -A + write-tree, private index; median of 10)",
        ms(floor),
        "",
    ));
    rows.push(row(
        "  checkpoint cost per input (start and end snapshots), first / later",
        format!(
            "{} / {}",
            ms(first_on.saturating_sub(first_off)),
            ms(later_on.saturating_sub(later_off))
        ),
        "< 100 ms",
    ));
    rows
}
