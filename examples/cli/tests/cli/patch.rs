//! `--emit-patch FILE` and `--predictions FILE --instance-id ID` against the loopback
//! server, in a real git repository: the patch applies with `git apply --check` to a
//! fresh clone of the starting commit and reproduces the tree (a changed, a new, a
//! deleted and a binary file; the user's ignored file left out); the prediction line is
//! JSON with exactly SWE-bench's three keys; a filter driver the checkout's configuration
//! names never runs; the options' mistakes are bad usage.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use support::{FAKE_KEY, Reply, Server};

use crate::{Wire, run_agent};

/// Runs git in `dir`, asserting it succeeded.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@localhost")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@localhost")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with one commit: kept, changed and deleted files, and an ignored file.
fn repository(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    for (name, text) in [
        ("keep.txt", "kept\n"),
        ("change.txt", "one\n"),
        ("delete.txt", "going\n"),
        (".gitignore", "*.log\n"),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "start"]);
    std::fs::write(dir.join("user.log"), "the user's own\n").unwrap();
}

const EDIT: &str = "echo two >> change.txt; rm delete.txt; echo new > new.txt; \
                    printf '\\000\\001\\002\\377' > blob.bin; echo more >> user.log";

/// Runs the editing task with `extra` options in `work`.
fn run_task(work: &Path, extra: &[&str]) -> support::programs::Ran {
    let server = Server::start(vec![
        Reply::sse(Wire::Anthropic.turn("", &[("c1", "shell", json!({"command": EDIT}))])),
        Reply::sse(Wire::Anthropic.turn("edited", &[])),
    ]);
    let url = server.url();
    let mut args = vec![
        "--provider",
        "anthropic",
        "--base-url",
        &url,
        "--cwd",
        work.to_str().unwrap(),
    ];
    args.extend(extra);
    args.push("edit the files");
    run_agent(&args, &[("ANTHROPIC_API_KEY", FAKE_KEY)], "")
}

#[test]
fn the_patch_applies_to_a_fresh_clone_and_the_prediction_line_has_the_three_keys() {
    let work = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    repository(work.path());
    let (patch_path, predictions) = (out.path().join("p.diff"), out.path().join("preds.jsonl"));
    let ran = run_task(
        work.path(),
        &[
            "--emit-patch",
            patch_path.to_str().unwrap(),
            "--predictions",
            predictions.to_str().unwrap(),
            "--instance-id",
            "demo__repo-1",
        ],
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let patch = std::fs::read(&patch_path).unwrap();
    let text = String::from_utf8_lossy(&patch);
    assert!(
        !text.contains("user.log"),
        "an ignored file is in the patch:\n{text}"
    );
    assert!(text.contains("GIT binary patch"), "{text}");
    // The user's index and refs were not touched.
    assert_eq!(
        git(work.path(), &["status", "--porcelain", "--", "new.txt"]),
        "?? new.txt\n"
    );

    let clone_parent = tempfile::tempdir().unwrap();
    let clone = clone_parent.path().join("clone");
    git(
        clone_parent.path(),
        &["clone", "-q", work.path().to_str().unwrap(), "clone"],
    );
    git(&clone, &["apply", "--check", patch_path.to_str().unwrap()]);
    git(&clone, &["apply", patch_path.to_str().unwrap()]);
    for name in ["keep.txt", "change.txt", "new.txt", "blob.bin"] {
        assert_eq!(
            std::fs::read(clone.join(name)).unwrap(),
            std::fs::read(work.path().join(name)).unwrap(),
            "{name}"
        );
    }
    assert!(!clone.join("delete.txt").exists());
    assert!(!clone.join("user.log").exists());

    let lines = std::fs::read_to_string(&predictions).unwrap();
    assert_eq!(lines.lines().count(), 1, "{lines}");
    let line: Value = serde_json::from_str(lines.trim_end()).unwrap();
    let keys: Vec<&str> = line
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), 3, "{line}");
    assert_eq!(line["instance_id"], "demo__repo-1");
    assert!(
        line["model_name_or_path"]
            .as_str()
            .unwrap()
            .starts_with("agentloop/")
    );
    assert_eq!(line["model_patch"].as_str().unwrap().as_bytes(), patch);
}

#[test]
fn a_filter_driver_the_checkout_configures_never_runs() {
    let work = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    repository(work.path());
    let marker = out.path().join("ran");
    let command = format!("touch {}; cat", marker.display());
    git(work.path(), &["config", "filter.evil.clean", &command]);
    git(work.path(), &["config", "filter.evil.required", "true"]);
    std::fs::write(work.path().join(".gitattributes"), "* filter=evil\n").unwrap();
    let _ = std::fs::remove_file(&marker); // git's own commands above may have run it
    let patch_path = out.path().join("p.diff");
    let ran = run_task(work.path(), &["--emit-patch", patch_path.to_str().unwrap()]);
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert!(!marker.exists(), "the checkout's filter ran");
    assert!(
        std::fs::read_to_string(&patch_path)
            .unwrap()
            .contains("new.txt")
    );
}

#[test]
fn patch_options_mistakes_are_bad_usage() {
    let work = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let preds = out.path().join("preds.jsonl");
    let ran = run_task(work.path(), &["--predictions", preds.to_str().unwrap()]);
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    assert!(ran.stderr.contains("--instance-id"), "{}", ran.stderr);
    // Not a git work tree.
    let patch_path = out.path().join("p.diff");
    let ran = run_task(work.path(), &["--emit-patch", patch_path.to_str().unwrap()]);
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    assert!(ran.stderr.contains("git work tree"), "{}", ran.stderr);
    assert!(!patch_path.exists() && !preds.exists());
}
