//! The working-directory restriction of the file tools holds against symlinks (reads and
//! writes, every writing tool), a symlink swapped in while a write runs, and edit_file does
//! not lose a write made between its read and its rename.

use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::{ExecutionEnvironment, GrepOptions, LocalExecutionEnvironment};
use agentloop::llm::ToolCall;
use agentloop::tools::{ToolContext, ToolRegistry, apply_patch, edit_file, read_file, write_file};
use agentloop::unstable::{ToolOutcome, prepare_call};
use serde_json::{Value, json};

pub(crate) fn run_tool(env: &dyn ExecutionEnvironment, name: &str, args: Value) -> ToolOutcome {
    let mut registry = ToolRegistry::new();
    registry.register(write_file());
    registry.register(read_file());
    registry.register(edit_file());
    registry.register(apply_patch());
    let cancel = CancelToken::new();
    let ctx = ToolContext::new(env, "c", &cancel);
    prepare_call(&registry, &ToolCall::new("c", name, args))
        .expect("valid arguments")
        .run(&ctx)
}

/// A workspace `ws` and a directory `outside` next to it with a file `secret.txt`;
/// `ws/link -> outside`, `ws/file_link -> outside/secret.txt`.
pub(crate) fn workspace() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let top = tempfile::tempdir().unwrap();
    let ws = top.path().join("ws");
    let outside = top.path().join("outside");
    fs::create_dir(&ws).unwrap();
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret.txt"), "secret\n").unwrap();
    symlink(&outside, ws.join("link")).unwrap();
    symlink(outside.join("secret.txt"), ws.join("file_link")).unwrap();
    (top, ws, outside)
}

#[test]
fn write_through_a_symlink_to_outside_is_refused() {
    let (_top, ws, outside) = workspace();
    let env = LocalExecutionEnvironment::new(&ws).unwrap();
    let outcome = run_tool(
        &env,
        "write_file",
        json!({"file_path": "link/escape.txt", "content": "x"}),
    );
    assert!(outcome.is_error, "{}", outcome.text);
    assert!(
        outcome.text.contains("resolves outside"),
        "{}",
        outcome.text
    );
    assert!(!outside.join("escape.txt").exists());
    let outcome = run_tool(
        &env,
        "write_file",
        json!({"file_path": "file_link", "content": "changed"}),
    );
    assert!(outcome.is_error, "{}", outcome.text);
    assert_eq!(
        fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret\n"
    );
    // A link that stays inside is still written through.
    fs::write(ws.join("real.txt"), "a").unwrap();
    symlink("real.txt", ws.join("inner_link")).unwrap();
    let outcome = run_tool(
        &env,
        "write_file",
        json!({"file_path": "inner_link", "content": "b"}),
    );
    assert!(!outcome.is_error, "{}", outcome.text);
    assert_eq!(fs::read_to_string(ws.join("real.txt")).unwrap(), "b");
    assert!(
        fs::symlink_metadata(ws.join("inner_link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn read_through_a_symlink_to_outside_is_refused() {
    let (_top, ws, _outside) = workspace();
    let env = LocalExecutionEnvironment::new(&ws).unwrap();
    for path in ["file_link", "link/secret.txt"] {
        let outcome = run_tool(&env, "read_file", json!({ "file_path": path }));
        assert!(outcome.is_error, "{path}: {}", outcome.text);
        assert!(!outcome.text.contains("secret\n"), "{}", outcome.text);
    }
    let err = env.read_bytes(Path::new("link/secret.txt")).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
}

#[test]
fn listing_searching_and_stat_through_a_symlink_to_outside_are_refused() {
    let (_top, ws, _outside) = workspace();
    let env = LocalExecutionEnvironment::new(&ws).unwrap();
    let link = Path::new("link");
    assert!(env.list_directory(link, 1).is_err());
    assert!(env.glob("*.txt", link).is_err());
    assert!(env.grep("secret", link, &GrepOptions::default()).is_err());
    let err = env.stat(Path::new("file_link")).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
    // Inside the working directory everything still works.
    fs::write(ws.join("a.txt"), "secret here\n").unwrap();
    assert_eq!(env.stat(Path::new("a.txt")).unwrap().size, 12);
    assert!(env.list_directory(Path::new("."), 1).is_ok());
}

#[test]
fn edit_file_through_a_symlink_to_outside_is_refused() {
    let (_top, ws, outside) = workspace();
    let env = LocalExecutionEnvironment::new(&ws).unwrap();
    let outcome = run_tool(
        &env,
        "edit_file",
        json!({"file_path": "file_link", "old_string": "secret", "new_string": "owned"}),
    );
    assert!(outcome.is_error, "{}", outcome.text);
    assert_eq!(
        fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret\n"
    );
}

#[test]
fn apply_patch_update_through_a_symlink_to_outside_is_refused() {
    let (_top, ws, outside) = workspace();
    let env = LocalExecutionEnvironment::new(&ws).unwrap();
    for path in ["file_link", "link/secret.txt"] {
        let patch =
            format!("*** Begin Patch\n*** Update File: {path}\n@@\n-secret\n+owned\n*** End Patch");
        let outcome = run_tool(&env, "apply_patch", json!({ "patch": patch }));
        assert!(outcome.is_error, "{path}: {}", outcome.text);
    }
    let patch = "*** Begin Patch\n*** Add File: link/new.txt\n+x\n*** End Patch";
    let outcome = run_tool(&env, "apply_patch", json!({ "patch": patch }));
    assert!(outcome.is_error, "{}", outcome.text);
    assert!(!outside.join("new.txt").exists());
    assert_eq!(
        fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret\n"
    );
}

#[test]
fn a_symlink_swapped_in_during_writes_never_lets_a_write_escape() {
    // A thread flips `ws/dir` between a real directory and a symlink to `outside` as fast
    // as it can while the tool writes `dir/f.txt` over and over: every write either lands
    // inside or fails, and nothing ever appears outside.
    let (_top, ws, outside) = workspace();
    let env = LocalExecutionEnvironment::new(&ws).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (ws, outside, stop) = (ws.clone(), outside.clone(), stop.clone());
        thread::Builder::new()
            .name("symlink-swapper".into())
            .spawn(move || {
                let (dir, tmp_link) = (ws.join("dir"), ws.join("dir.link"));
                let real = ws.join("dir.real");
                fs::create_dir(&real).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let _ = symlink(&outside, &tmp_link);
                    let _ = fs::rename(&tmp_link, &dir);
                    let _ = fs::remove_file(&dir);
                    let _ = fs::rename(&real, &dir);
                    let _ = fs::rename(&dir, &real);
                }
            })
            .unwrap()
    };
    let started = Instant::now();
    let mut attempts = 0;
    while attempts < 3000 && started.elapsed() < Duration::from_secs(4) {
        let _ = env.write_file(Path::new("dir/f.txt"), b"x");
        let _ = env.write_file(Path::new("dir"), b"x");
        attempts += 1;
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let escaped: Vec<_> = fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "secret.txt")
        .collect();
    assert!(escaped.is_empty(), "written outside: {escaped:?}");
}

/// Delegates to a local environment; after each `read_bytes` of `victim`, another writer
/// changes the file (the race edit_file must not lose).
struct ConcurrentWriter {
    inner: LocalExecutionEnvironment,
    victim: std::path::PathBuf,
}

impl ExecutionEnvironment for ConcurrentWriter {
    fn read_bytes(&self, path: &Path) -> io::Result<Vec<u8>> {
        let bytes = self.inner.read_bytes(path)?;
        thread::sleep(Duration::from_millis(20));
        fs::write(&self.victim, "hello from the other writer\n")?;
        Ok(bytes)
    }

    agentloop::forward_execution_environment!(self.inner =>
        read_file, write_file, write_file_if_unchanged, remove_file, file_exists, stat,
        list_directory, exec_command, grep, glob, working_directory, platform, os_version);
}

#[test]
fn edit_file_refuses_when_the_file_changed_underneath() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("a.txt");
    fs::write(&victim, "hello world\n").unwrap();
    let env = ConcurrentWriter {
        inner: LocalExecutionEnvironment::new(dir.path()).unwrap(),
        victim: victim.clone(),
    };
    let outcome = run_tool(
        &env,
        "edit_file",
        json!({"file_path": "a.txt", "old_string": "world", "new_string": "there"}),
    );
    assert!(outcome.is_error, "{}", outcome.text);
    assert!(
        outcome.text.contains("the file changed, read it again"),
        "{}",
        outcome.text
    );
    assert_eq!(
        fs::read_to_string(&victim).unwrap(),
        "hello from the other writer\n",
        "the other writer's content is kept"
    );
}

#[test]
fn write_file_if_unchanged_checks_right_before_the_rename() {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();
    fs::write(dir.path().join("a.txt"), "one\n").unwrap();
    let before = env.stat(Path::new("a.txt")).unwrap();
    // Another writer, a moment later: the same size and a later modification time (set,
    // rather than waited for past the clock's granularity).
    fs::write(dir.path().join("a.txt"), "two\n").unwrap();
    fs::File::options()
        .write(true)
        .open(dir.path().join("a.txt"))
        .unwrap()
        .set_modified(before.modified.unwrap() + Duration::from_secs(1))
        .unwrap();
    let err = env
        .write_file_if_unchanged(Path::new("a.txt"), b"three\n", &before)
        .unwrap_err();
    assert!(err.to_string().contains("the file changed"), "{err}");
    assert_eq!(
        fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "two\n"
    );
    let now = env.stat(Path::new("a.txt")).unwrap();
    env.write_file_if_unchanged(Path::new("a.txt"), b"three\n", &now)
        .unwrap();
    assert_eq!(
        fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "three\n"
    );
}
