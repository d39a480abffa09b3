//! A hostile checkout runs nothing unasked: real repositories whose `.git/config` points
//! each mechanism git runs on its own (fsmonitor, a clean or process filter, a signature
//! program) at a script that leaves a marker file; taking the start-up git snapshot must
//! leave no marker, and still capture the snapshot.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::unstable::EnvironmentContext;

use super::git;

/// A repository with two commits, and a script that records each run in `marker`.
struct Hostile {
    _dir: tempfile::TempDir,
    repo: PathBuf,
    script: PathBuf,
    marker: PathBuf,
}

impl Hostile {
    fn new() -> Hostile {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        fs::create_dir(&repo).unwrap();
        let marker = dir.path().join("marker");
        let script = dir.path().join("evil.sh");
        fs::write(
            &script,
            format!("#!/bin/sh\necho \"$0 $*\" >> '{}'\ncat\n", marker.display()),
        )
        .unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        fs::write(repo.join("file.txt"), "one\n").unwrap();
        fs::write(repo.join(".gitattributes"), "* filter=evil diff=evil\n").unwrap();
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "-q", "-m", "first"]);
        Hostile {
            _dir: dir,
            repo,
            script,
            marker,
        }
    }

    fn config(&self, key: &str, value: &str) {
        git(&self.repo, &["config", key, value]);
    }

    /// Takes the snapshot the way a session does at start-up; returns what ran.
    fn snapshot(&self) -> Option<String> {
        let env = LocalExecutionEnvironment::new(&self.repo).unwrap();
        let context = EnvironmentContext::capture(&env, "test-model");
        let snapshot = context.git.expect("the snapshot was captured");
        assert!(snapshot.status.is_some(), "git status finished");
        assert_eq!(snapshot.branch.as_deref(), Some("main"));
        fs::read_to_string(&self.marker).ok()
    }

    fn script(&self) -> &str {
        self.script.to_str().unwrap()
    }

    /// Makes `file.txt`'s stat data differ from the index, so that status hashes it again:
    /// the same content with a modification time 2 s later.
    fn touch(&self) {
        let file = fs::File::options()
            .write(true)
            .open(self.repo.join("file.txt"))
            .unwrap();
        let modified = file.metadata().unwrap().modified().unwrap();
        file.set_modified(modified + Duration::from_secs(2))
            .unwrap();
    }
}

#[test]
fn git_snapshot_runs_no_fsmonitor() {
    let repo = Hostile::new();
    repo.config("core.fsmonitor", repo.script());
    assert_eq!(repo.snapshot(), None);
}

#[test]
fn git_snapshot_runs_no_clean_filter() {
    let repo = Hostile::new();
    repo.config("filter.evil.clean", &format!("{} clean", repo.script()));
    repo.config("filter.evil.required", "true");
    repo.touch();
    assert_eq!(repo.snapshot(), None);
}

/// The control for the filter tests: after `touch`, plain `git status` runs both filters,
/// so their snapshots ran none only because the snapshot refuses them.
#[test]
fn plain_git_status_runs_the_filters_after_a_touch() {
    for (key, value) in [
        ("filter.evil.clean", "clean"),
        ("filter.evil.process", "process"),
    ] {
        let repo = Hostile::new();
        repo.config(key, &format!("{} {value}", repo.script()));
        repo.touch();
        git(&repo.repo, &["status", "--porcelain"]);
        let ran = fs::read_to_string(&repo.marker).unwrap_or_default();
        assert!(ran.contains(value), "{key}: {ran:?}");
    }
}

#[test]
fn git_snapshot_runs_no_process_filter() {
    let repo = Hostile::new();
    repo.config("filter.evil.process", &format!("{} process", repo.script()));
    repo.touch();
    assert_eq!(repo.snapshot(), None);
}

#[test]
fn git_snapshot_runs_no_signature_program() {
    let repo = Hostile::new();
    // A commit carrying a (fake) signature: `git log` under `log.showSignature` hands it
    // to `gpg.program`.
    let tree = git(&repo.repo, &["rev-parse", "HEAD^{tree}"]);
    let parent = git(&repo.repo, &["rev-parse", "HEAD"]);
    let commit = format!(
        "tree {tree}\nparent {parent}\nauthor T <t@example.com> 1700000000 +0000\n\
         committer T <t@example.com> 1700000000 +0000\ngpgsig -----BEGIN PGP SIGNATURE-----\n \
         \n iQEz\n -----END PGP SIGNATURE-----\n\nsigned\n"
    );
    let object = repo.repo.join("commit.txt");
    fs::write(&object, commit).unwrap();
    let id = git(
        &repo.repo,
        &[
            "hash-object",
            "-t",
            "commit",
            "-w",
            object.to_str().unwrap(),
        ],
    );
    fs::remove_file(&object).unwrap();
    git(&repo.repo, &["update-ref", "refs/heads/main", &id]);
    repo.config("log.showSignature", "true");
    repo.config("gpg.program", repo.script());
    assert_eq!(repo.snapshot(), None);
}
