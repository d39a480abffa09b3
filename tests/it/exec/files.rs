//! File operations of LocalExecutionEnvironment on real files in temporary directories.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};

fn workspace() -> (tempfile::TempDir, LocalExecutionEnvironment) {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();
    (dir, env)
}

/// Names in `dir` that look like our temporary files.
fn leftover_temp_files(dir: &Path) -> Vec<String> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp-"))
        .collect()
}

#[test]
fn read_file_returns_the_requested_lines_and_whole_file_totals() {
    let (dir, env) = workspace();
    fs::write(dir.path().join("a.txt"), "one\r\ntwo\nthree\nfour").unwrap();

    let whole = env.read_file(Path::new("a.txt"), None, None).unwrap();
    assert_eq!(whole.text, "one\r\ntwo\nthree\nfour");
    assert_eq!((whole.size, whole.total_lines), (19, 4));

    let window = env.read_file(Path::new("a.txt"), Some(2), Some(2)).unwrap();
    assert_eq!(window.text, "two\nthree\n");
    assert_eq!(window.total_lines, 4);

    let past_end = env.read_file(Path::new("a.txt"), Some(10), None).unwrap();
    assert_eq!((past_end.text.as_str(), past_end.total_lines), ("", 4));
}

#[test]
fn relative_paths_resolve_against_the_working_directory() {
    let (dir, env) = workspace();
    fs::create_dir(dir.path().join("sub")).unwrap();
    fs::write(dir.path().join("sub/f.txt"), "x").unwrap();
    assert_eq!(env.working_directory(), dir.path());
    assert!(env.file_exists(Path::new("sub/f.txt")));
    assert!(env.file_exists(&dir.path().join("sub/f.txt")));
    assert!(!env.file_exists(Path::new("f.txt")));
}

#[test]
fn read_file_refuses_binary_files_but_read_bytes_returns_them() {
    let (dir, env) = workspace();
    let png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR";
    fs::write(dir.path().join("img.png"), png).unwrap();
    let err = env.read_file(Path::new("img.png"), None, None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidData);
    assert!(err.to_string().contains("binary"), "{err}");
    assert_eq!(env.read_bytes(Path::new("img.png")).unwrap(), png);
}

#[test]
fn invalid_utf8_text_is_read_with_replacement_characters() {
    let (dir, env) = workspace();
    fs::write(dir.path().join("latin1.txt"), b"caf\xe9\n").unwrap();
    let content = env.read_file(Path::new("latin1.txt"), None, None).unwrap();
    assert_eq!(content.text, "caf\u{fffd}\n");
}

#[test]
fn reading_a_missing_file_or_a_directory_says_what_is_wrong() {
    let (dir, env) = workspace();
    let err = env
        .read_file(Path::new("nope.txt"), None, None)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("nope.txt"), "{err}");
    assert!(err.to_string().contains("no such file"), "{err}");

    fs::create_dir(dir.path().join("d")).unwrap();
    let err = env.read_file(Path::new("d"), None, None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::IsADirectory);
    assert!(err.to_string().contains("directory"), "{err}");
}

#[test]
fn write_file_creates_parent_directories_and_leaves_no_temp_file() {
    let (dir, env) = workspace();
    env.write_file(Path::new("a/b/c.txt"), b"hello").unwrap();
    assert_eq!(fs::read(dir.path().join("a/b/c.txt")).unwrap(), b"hello");
    env.write_file(Path::new("a/b/c.txt"), b"again").unwrap();
    assert_eq!(fs::read(dir.path().join("a/b/c.txt")).unwrap(), b"again");
    assert_eq!(leftover_temp_files(dir.path()), Vec::<String>::new());
}

#[test]
fn a_failed_write_changes_nothing_and_leaves_no_temp_file() {
    let (dir, env) = workspace();
    fs::create_dir(dir.path().join("taken")).unwrap();
    let err = env.write_file(Path::new("taken"), b"x").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::IsADirectory);
    assert!(dir.path().join("taken").is_dir());

    fs::write(dir.path().join("file"), "keep").unwrap();
    let err = env
        .write_file(Path::new("file/child.txt"), b"x")
        .unwrap_err();
    assert!(err.to_string().contains("file/child.txt"), "{err}");
    assert_eq!(fs::read_to_string(dir.path().join("file")).unwrap(), "keep");
    assert_eq!(leftover_temp_files(dir.path()), Vec::<String>::new());
}

#[test]
fn an_executable_file_stays_executable_after_a_write() {
    let (dir, env) = workspace();
    let script = dir.path().join("run.sh");
    fs::write(&script, "#!/bin/sh\necho old\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o751)).unwrap();

    env.write_file(Path::new("run.sh"), b"#!/bin/sh\necho new\n")
        .unwrap();

    let mode = fs::metadata(&script).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o751);
    assert_eq!(
        fs::read_to_string(&script).unwrap(),
        "#!/bin/sh\necho new\n"
    );
}

#[test]
fn writing_through_a_symlink_replaces_the_target_and_keeps_the_link() {
    let (dir, env) = workspace();
    fs::write(dir.path().join("real.txt"), "old").unwrap();
    std::os::unix::fs::symlink("real.txt", dir.path().join("link.txt")).unwrap();
    env.write_file(Path::new("link.txt"), b"new").unwrap();
    let link_meta = fs::symlink_metadata(dir.path().join("link.txt")).unwrap();
    assert!(link_meta.file_type().is_symlink());
    assert_eq!(
        fs::read_to_string(dir.path().join("real.txt")).unwrap(),
        "new"
    );
}

/// A reader running alongside 50 rewrites of a 10 MB file only ever sees one
/// whole version.
#[test]
fn concurrent_readers_only_ever_see_one_whole_version_of_a_rewritten_file() {
    let (dir, env) = workspace();
    const SIZE: usize = 10 * 1024 * 1024;
    let versions = [vec![b'a'; SIZE], vec![b'b'; SIZE]];
    env.write_file(Path::new("big.bin"), &versions[0]).unwrap();
    let path = dir.path().join("big.bin");
    let done = AtomicBool::new(false);

    let reads = thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut reads = 0usize;
            while !done.load(Ordering::SeqCst) || reads == 0 {
                let seen = fs::read(&path).expect("the file always exists");
                assert_eq!(seen.len(), SIZE, "short read after {reads} reads");
                let first = seen[0];
                assert!(
                    seen.iter().all(|&b| b == first),
                    "a mix of versions after {reads} reads"
                );
                reads += 1;
            }
            reads
        });
        for i in 0..50 {
            env.write_file(Path::new("big.bin"), &versions[i % 2])
                .unwrap();
        }
        done.store(true, Ordering::SeqCst);
        reader.join().expect("reader thread")
    });
    assert!(reads > 0);
    assert_eq!(fs::read(&path).unwrap(), versions[1]);
    assert_eq!(leftover_temp_files(dir.path()), Vec::<String>::new());
}

#[test]
fn remove_file_removes_files_and_refuses_directories() {
    let (dir, env) = workspace();
    fs::write(dir.path().join("f"), "x").unwrap();
    env.remove_file(Path::new("f")).unwrap();
    assert!(!dir.path().join("f").exists());

    let err = env.remove_file(Path::new("f")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);

    fs::create_dir(dir.path().join("d")).unwrap();
    let err = env.remove_file(Path::new("d")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::IsADirectory);
    assert!(dir.path().join("d").is_dir());
}

#[test]
fn stat_reports_kind_size_and_modification_time() {
    let (dir, env) = workspace();
    fs::write(dir.path().join("f"), "12345").unwrap();
    let stat = env.stat(Path::new("f")).unwrap();
    assert!(!stat.is_dir);
    assert_eq!(stat.size, 5);
    assert!(stat.modified.is_some());
    assert!(env.stat(Path::new(".")).unwrap().is_dir);
    assert_eq!(
        env.stat(Path::new("missing")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

#[test]
fn list_directory_is_sorted_relative_and_limited_by_depth() {
    let (dir, env) = workspace();
    let root = dir.path();
    fs::create_dir_all(root.join("src/nested")).unwrap();
    fs::write(root.join("src/nested/deep.rs"), "").unwrap();
    fs::write(root.join("src/lib.rs"), "abc").unwrap();
    fs::write(root.join("README.md"), "hi").unwrap();
    fs::write(root.join("b.txt"), "").unwrap();

    let names = |depth| -> Vec<String> {
        env.list_directory(Path::new("."), depth)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect()
    };
    assert_eq!(names(1), ["README.md", "b.txt", "src"]);
    assert_eq!(
        names(2),
        ["README.md", "b.txt", "src", "src/lib.rs", "src/nested"]
    );
    assert_eq!(
        names(3),
        [
            "README.md",
            "b.txt",
            "src",
            "src/lib.rs",
            "src/nested",
            "src/nested/deep.rs"
        ]
    );

    let entries = env.list_directory(Path::new("src"), 1).unwrap();
    assert_eq!(entries[0].name, "lib.rs");
    assert_eq!(entries[0].size, Some(3));
    assert!(!entries[0].is_dir);
    assert_eq!(entries[1].name, "nested");
    assert!(entries[1].is_dir);
}

#[test]
fn list_directory_shows_git_but_never_descends_into_it() {
    let (dir, env) = workspace();
    fs::create_dir_all(dir.path().join(".git/objects")).unwrap();
    fs::write(dir.path().join(".git/HEAD"), "ref").unwrap();
    fs::write(dir.path().join("main.rs"), "").unwrap();
    let names: Vec<String> = env
        .list_directory(Path::new(""), 5)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, [".git", "main.rs"]);
}

#[test]
fn listing_a_file_or_a_missing_directory_is_an_error() {
    let (dir, env) = workspace();
    fs::write(dir.path().join("f"), "").unwrap();
    let err = env.list_directory(Path::new("f"), 1).unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
    let err = env.list_directory(Path::new("missing"), 1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[test]
fn metadata_names_the_platform_and_kernel() {
    let (_dir, env) = workspace();
    let expected = if cfg!(target_os = "macos") {
        "darwin"
    } else {
        std::env::consts::OS
    };
    assert_eq!(env.platform(), expected);
    let version = env.os_version();
    assert!(version.len() > 3 && version != "unknown", "{version}");
    if cfg!(target_os = "linux") {
        let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        assert_eq!(version, format!("Linux {}", release.trim()));
    }
}

#[test]
fn the_read_only_wrapper_refuses_writes_and_removals_and_changes_nothing() {
    use agentloop::exec::ReadOnlyExecutionEnvironment;
    let (dir, local) = workspace();
    fs::write(dir.path().join("f.txt"), "original").unwrap();
    let shared: std::sync::Arc<dyn ExecutionEnvironment> = std::sync::Arc::new(local);
    let env = ReadOnlyExecutionEnvironment::new(shared);

    let err = env.write_file(Path::new("f.txt"), b"changed").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied);
    assert!(err.to_string().contains("read-only"), "{err}");
    let err = env.remove_file(Path::new("f.txt")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied);

    assert_eq!(
        fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "original"
    );
    let content = env.read_file(Path::new("f.txt"), None, None).unwrap();
    assert_eq!(content.text, "original");
    assert_eq!(env.working_directory(), dir.path());
}

#[test]
fn the_logging_wrapper_logs_one_line_per_operation_without_contents() {
    use agentloop::CancelToken;
    use agentloop::exec::{CommandRequest, LoggingExecutionEnvironment};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    let (_dir, local) = workspace();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&lines);
    let env = LoggingExecutionEnvironment::new(local, move |line: &str| {
        sink.lock().unwrap().push(line.to_string())
    });

    env.write_file(Path::new("secret.txt"), b"the-file-content")
        .unwrap();
    env.read_file(Path::new("secret.txt"), None, None).unwrap();
    let request = CommandRequest::new("echo printed-output; exit 4", Duration::from_secs(10));
    let result = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .unwrap();
    assert_eq!(result.exit_code, Some(4));

    let lines = lines.lock().unwrap().clone();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert!(lines[0].starts_with("write_file: secret.txt (16 bytes) -> ok"));
    assert!(lines[1].starts_with("read_file: secret.txt"));
    assert_eq!(lines[2], "exec: echo printed-output; exit 4");
    assert!(lines[3].starts_with("exec: exit 4 in "), "{}", lines[3]);
    let all = lines.join("\n");
    assert!(!all.contains("the-file-content") && !all.contains("printed-output\n"));
}
