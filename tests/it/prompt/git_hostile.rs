//! A hostile checkout runs nothing unasked: real repositories whose `.git/config` points
//! each mechanism git runs on its own (fsmonitor, a clean or process filter, a signature
//! program) at a script that leaves a marker file; taking the start-up git snapshot must
//! leave no marker, and still capture the snapshot.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::unstable::EnvironmentContext;

/// Runs git in `dir` for the setup, with a private configuration.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

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

    /// Makes `file.txt`'s stat data differ from the index, so that status hashes it again.
    fn touch(&self) {
        std::thread::sleep(std::time::Duration::from_millis(1100));
        fs::write(self.repo.join("file.txt"), "one\n").unwrap();
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
