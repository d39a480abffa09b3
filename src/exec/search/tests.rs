//! grep and glob on real directory trees, through both backends.

use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use tempfile::TempDir;

use super::*;

/// A temp dir holding `files` (path, contents); parent directories are created.
fn tree(files: &[(&str, &[u8])]) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, contents) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, contents).unwrap();
    }
    dir
}

/// Like [`tree`], inside a git repository (`.gitignore` files only count in one).
fn repo(files: &[(&str, &[u8])]) -> TempDir {
    let mut all = files.to_vec();
    all.push((".git/HEAD", b"ref: refs/heads/main\n"));
    tree(&all)
}

fn options(backend: GrepBackend) -> GrepOptions {
    GrepOptions {
        backend,
        ..GrepOptions::default()
    }
}

/// `path:line` of every match, in process.
fn found(pattern: &str, root: &Path, options: &GrepOptions) -> Vec<String> {
    grep(pattern, root, options)
        .unwrap()
        .matches
        .iter()
        .map(|m| format!("{}:{}", m.path, m.line_number))
        .collect()
}

/// Matches found in process; when ripgrep is installed, it must find the same.
fn in_process(pattern: &str, root: &Path) -> Vec<String> {
    both(pattern, root, &options(GrepBackend::InProcess))
}

/// `found` with `options` in process, checked against ripgrep when it is installed.
fn both(pattern: &str, root: &Path, options: &GrepOptions) -> Vec<String> {
    let ours = found(pattern, root, options);
    if ripgrep::find().is_some() {
        let mut rg = options.clone();
        rg.backend = GrepBackend::Ripgrep;
        assert_eq!(found(pattern, root, &rg), ours, "ripgrep disagrees");
    }
    ours
}

fn rg_installed() -> bool {
    let installed = ripgrep::find().is_some();
    if !installed {
        eprintln!("ripgrep is not installed: skipping the ripgrep half of this test");
    }
    installed
}

#[test]
fn matches_come_in_tree_order_with_paths_relative_to_the_searched_directory() {
    let dir = tree(&[
        ("a.rs", b"x\n"),
        ("a-b.rs", b"x\n"),
        ("a/b.rs", b"x\nx\n"),
        ("B.rs", b"x\n"),
        ("a/c/d.rs", b"y\nx\n"),
    ]);
    assert_eq!(
        in_process("x", dir.path()),
        [
            "B.rs:1",
            "a/b.rs:1",
            "a/b.rs:2",
            "a/c/d.rs:2",
            "a-b.rs:1",
            "a.rs:1"
        ]
    );
}

#[test]
fn git_directories_and_git_files_are_never_searched() {
    let dir = tree(&[
        (".git/config", b"needle\n"),
        ("sub/.git", b"gitdir: ../.git/worktrees/sub\nneedle\n"),
        ("sub/code.rs", b"needle\n"),
    ]);
    assert_eq!(in_process("needle", dir.path()), ["sub/code.rs:1"]);
}

#[test]
fn hidden_files_and_directories_are_searched() {
    let dir = tree(&[
        (".github/workflows/ci.yml", b"needle\n"),
        (".env.example", b"needle\n"),
    ]);
    assert_eq!(
        in_process("needle", dir.path()),
        [".env.example:1", ".github/workflows/ci.yml:1"]
    );
}

#[test]
fn root_gitignore_rules_exclude_files_and_directories() {
    let dir = repo(&[
        (
            ".gitignore",
            b"*.log\nbuild/\n/top.txt\nfile[0-9].dat\ndocs/**/*.tmp\n",
        ),
        ("a.log", b"needle\n"),
        ("build/out.txt", b"needle\n"),
        ("top.txt", b"needle\n"),
        ("sub/top.txt", b"needle\n"),
        ("file7.dat", b"needle\n"),
        ("fileX.dat", b"needle\n"),
        ("docs/x/y/z.tmp", b"needle\n"),
        ("z.tmp", b"needle\n"),
    ]);
    assert_eq!(
        in_process("needle", dir.path()),
        ["fileX.dat:1", "sub/top.txt:1", "z.tmp:1"]
    );
}

#[test]
fn negation_reincludes_and_later_rules_win() {
    let dir = repo(&[
        (".gitignore", b"*.log\n!keep.log\n"),
        ("drop.log", b"needle\n"),
        ("keep.log", b"needle\n"),
    ]);
    assert_eq!(in_process("needle", dir.path()), ["keep.log:1"]);
}

#[test]
fn a_directory_only_rule_leaves_files_of_that_name() {
    let dir = repo(&[
        (".gitignore", b"out/\n"),
        ("out/a.txt", b"needle\n"),
        ("x/out", b"needle\n"),
    ]);
    assert_eq!(in_process("needle", dir.path()), ["x/out:1"]);
}

#[test]
fn a_nested_gitignore_applies_only_below_its_directory_and_wins_there() {
    let dir = repo(&[
        (".gitignore", b"*.gen\n"),
        ("sub/.gitignore", b"*.txt\n!keep.gen\n"),
        ("a.txt", b"needle\n"),
        ("sub/b.txt", b"needle\n"),
        ("sub/keep.gen", b"needle\n"),
        ("sub/drop.gen", b"needle\n"),
        ("other/c.txt", b"needle\n"),
    ]);
    assert_eq!(
        in_process("needle", dir.path()),
        ["a.txt:1", "other/c.txt:1", "sub/keep.gen:1"]
    );
}

#[test]
fn dot_ignore_and_rgignore_beat_gitignore() {
    let dir = repo(&[
        (".gitignore", b"*.log\n"),
        (".ignore", b"!special.log\nvendor/\n"),
        (".rgignore", b"!vendor/\n"),
        ("a.log", b"needle\n"),
        ("special.log", b"needle\n"),
        ("vendor/lib.rs", b"needle\n"),
    ]);
    assert_eq!(
        in_process("needle", dir.path()),
        ["special.log:1", "vendor/lib.rs:1"]
    );
}

#[test]
fn ignore_files_above_the_searched_directory_apply() {
    let dir = repo(&[
        (".gitignore", b"generated/\n/src/skip.rs\n"),
        ("src/generated/x.rs", b"needle\n"),
        ("src/skip.rs", b"needle\n"),
        ("src/main.rs", b"needle\n"),
    ]);
    assert_eq!(in_process("needle", &dir.path().join("src")), ["main.rs:1"]);
}

#[test]
fn gitignore_outside_a_repository_is_not_read_but_dot_ignore_is() {
    let dir = tree(&[
        (".gitignore", b"*.log\n"),
        (".ignore", b"*.tmp\n"),
        ("a.log", b"needle\n"),
        ("a.tmp", b"needle\n"),
    ]);
    assert_eq!(in_process("needle", dir.path()), ["a.log:1"]);
}

#[test]
fn a_nested_repository_does_not_inherit_the_outer_gitignore() {
    let dir = repo(&[
        (".gitignore", b"*.log\n"),
        ("outer.log", b"needle\n"),
        ("vendored/.git", b"gitdir: ../.git/modules/vendored\n"),
        ("vendored/inner.log", b"needle\n"),
    ]);
    assert_eq!(in_process("needle", dir.path()), ["vendored/inner.log:1"]);
}

#[test]
fn a_gitignore_above_the_repository_root_does_not_apply() {
    let dir = tree(&[
        (".gitignore", b"*\n"),
        ("project/.git/HEAD", b""),
        ("project/src/a.rs", b"needle\n"),
    ]);
    assert_eq!(
        in_process("needle", &dir.path().join("project")),
        ["src/a.rs:1"]
    );
    assert_eq!(
        in_process("needle", &dir.path().join("project/src")),
        ["a.rs:1"]
    );
}

#[test]
fn a_positive_glob_filter_searches_only_matching_files_even_if_ignored() {
    let dir = repo(&[
        (".gitignore", b"*.log\nignored_dir/\n"),
        ("a.rs", b"needle\n"),
        ("b.txt", b"needle\n"),
        ("x.log", b"needle\n"),
        ("ignored_dir/y.log", b"needle\n"),
    ]);
    let mut rs = options(GrepBackend::InProcess);
    rs.glob_filter = Some("*.rs".into());
    assert_eq!(both("needle", dir.path(), &rs), ["a.rs:1"]);
    let mut logs = options(GrepBackend::InProcess);
    logs.glob_filter = Some("*.log".into());
    assert_eq!(both("needle", dir.path(), &logs), ["x.log:1"]);
}

#[test]
fn a_negated_glob_filter_skips_matching_files_and_directories() {
    let dir = tree(&[
        ("a.rs", b"needle\n"),
        ("b.txt", b"needle\n"),
        ("tests/c.txt", b"needle\n"),
    ]);
    let mut not_tests = options(GrepBackend::InProcess);
    not_tests.glob_filter = Some("!tests".into());
    assert_eq!(
        both("needle", dir.path(), &not_tests),
        ["a.rs:1", "b.txt:1"]
    );
    let mut brace = options(GrepBackend::InProcess);
    brace.glob_filter = Some("*.{rs,md}".into());
    assert_eq!(both("needle", dir.path(), &brace), ["a.rs:1"]);
}

#[test]
fn binary_files_are_skipped() {
    let dir = tree(&[
        ("data.bin", b"needle\0\x01\x02needle\n"),
        ("text.txt", b"needle\n"),
    ]);
    assert_eq!(in_process("needle", dir.path()), ["text.txt:1"]);
}

#[cfg(unix)]
#[test]
fn symbolic_links_are_not_followed() {
    let dir = tree(&[("real/a.txt", b"needle\n")]);
    std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link_dir")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("real/a.txt"), dir.path().join("link.txt")).unwrap();
    assert_eq!(in_process("needle", dir.path()), ["real/a.txt:1"]);
}

#[test]
fn max_results_keeps_the_first_matches_and_says_it_truncated() {
    let dir = tree(&[("a.txt", b"x\nx\nx\n"), ("b.txt", b"x\nx\n")]);
    for backend in [GrepBackend::InProcess, GrepBackend::Ripgrep] {
        if backend == GrepBackend::Ripgrep && !rg_installed() {
            continue;
        }
        let mut limited = options(backend);
        limited.max_results = 4;
        let output = grep("x", dir.path(), &limited).unwrap();
        let lines: Vec<_> = output
            .matches
            .iter()
            .map(|m| format!("{}:{}", m.path, m.line_number))
            .collect();
        assert_eq!(
            lines,
            ["a.txt:1", "a.txt:2", "a.txt:3", "b.txt:1"],
            "{backend:?}"
        );
        assert!(output.truncated, "{backend:?}");
        limited.max_results = 5;
        assert!(
            !grep("x", dir.path(), &limited).unwrap().truncated,
            "{backend:?}"
        );
    }
}

#[test]
fn case_insensitive_matching() {
    let dir = tree(&[("a.txt", b"Needle\nNEEDLE\nneedle\nnope\n")]);
    let mut insensitive = options(GrepBackend::InProcess);
    insensitive.case_insensitive = true;
    assert_eq!(
        both("needle", dir.path(), &insensitive),
        ["a.txt:1", "a.txt:2", "a.txt:3"]
    );
    assert_eq!(in_process("needle", dir.path()), ["a.txt:3"]);
}

#[test]
fn a_file_path_is_searched_directly_and_reported_as_given() {
    let dir = repo(&[
        (".gitignore", b"*.txt\n"),
        ("notes.txt", b"one\nneedle two\n"),
    ]);
    let file = dir.path().join("notes.txt");
    let output = grep("needle", &file, &GrepOptions::default()).unwrap();
    assert_eq!(output.matches.len(), 1);
    assert_eq!(output.matches[0].path, file.to_string_lossy());
    assert_eq!(output.matches[0].line_number, 2);
    assert_eq!(output.matches[0].line, "needle two");
}

#[test]
fn an_invalid_regex_is_the_same_clear_error_for_both_backends() {
    let dir = tree(&[("a.txt", b"x\n")]);
    let mut messages = Vec::new();
    for backend in [
        GrepBackend::InProcess,
        GrepBackend::Ripgrep,
        GrepBackend::Auto,
    ] {
        let error = grep("fn (", dir.path(), &options(backend)).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        messages.push(error.to_string());
    }
    assert!(
        messages[0].starts_with("invalid regex `fn (`: unclosed group"),
        "{}",
        messages[0]
    );
    assert!(messages.iter().all(|m| *m == messages[0]), "{messages:?}");
}

#[test]
fn an_invalid_glob_filter_is_a_clear_error() {
    let dir = tree(&[("a.txt", b"x\n")]);
    let mut bad = options(GrepBackend::InProcess);
    bad.glob_filter = Some("*.{rs".into());
    let error = grep("x", dir.path(), &bad).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    assert!(
        error
            .to_string()
            .starts_with("invalid glob filter `*.{rs`: unclosed"),
        "{error}"
    );
}

#[test]
fn a_missing_path_is_not_found() {
    let dir = tree(&[]);
    let missing = dir.path().join("nope");
    let error = grep("x", &missing, &GrepOptions::default()).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound);
    assert!(error.to_string().contains("nope"), "{error}");
    assert_eq!(
        glob("*", &missing).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
}

#[cfg(unix)]
#[test]
fn a_fifo_given_as_the_path_is_refused_instead_of_waiting_for_a_writer() {
    let dir = tree(&[]);
    let fifo = dir.path().join("pipe");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let error = grep("x", &fifo, &GrepOptions::default()).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains("not a regular file"), "{error}");
}

#[test]
fn many_files_are_searched_on_threads_with_deterministic_results() {
    let names: Vec<String> = (0..300)
        .map(|i| format!("d{}/f{i:03}.txt", i % 7))
        .collect();
    let files: Vec<(&str, &[u8])> = names
        .iter()
        .map(|n| (n.as_str(), b"a\nneedle\nb\nneedle\n" as &[u8]))
        .collect();
    let dir = tree(&files);
    let mut everything = options(GrepBackend::InProcess);
    everything.max_results = usize::MAX;
    let all = found("needle", dir.path(), &everything);
    assert_eq!(all.len(), 600);
    let mut sorted = all.clone();
    sorted.sort_by(|a, b| {
        let key = |s: &str| {
            let (path, line) = s.rsplit_once(':').unwrap();
            (path.to_owned(), line.parse::<u64>().unwrap())
        };
        key(a).cmp(&key(b))
    });
    assert_eq!(all, sorted);
    let mut limited = options(GrepBackend::InProcess);
    limited.max_results = 41;
    for _ in 0..5 {
        let output = grep("needle", dir.path(), &limited).unwrap();
        let lines: Vec<_> = output
            .matches
            .iter()
            .map(|m| format!("{}:{}", m.path, m.line_number))
            .collect();
        assert_eq!(lines, all[..41]);
        assert!(output.truncated);
    }
}

// ---- glob ----

fn set_modified(path: &Path, seconds_after_epoch: u64) {
    File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds_after_epoch))
        .unwrap();
}

#[test]
fn glob_lists_newest_first_with_ties_by_path() {
    let dir = tree(&[("a.rs", b""), ("b.rs", b""), ("c.rs", b""), ("d.txt", b"")]);
    set_modified(&dir.path().join("a.rs"), 1_000);
    set_modified(&dir.path().join("b.rs"), 3_000);
    set_modified(&dir.path().join("c.rs"), 1_000);
    assert_eq!(glob("*.rs", dir.path()).unwrap(), ["b.rs", "a.rs", "c.rs"]);
}

#[test]
fn glob_star_stays_in_one_directory_and_double_star_recurses() {
    let dir = tree(&[
        ("a.rs", b""),
        ("src/b.rs", b""),
        ("src/x/c.rs", b""),
        ("src/x/d.ts", b""),
    ]);
    for file in ["a.rs", "src/b.rs", "src/x/c.rs", "src/x/d.ts"] {
        set_modified(&dir.path().join(file), 1_000);
    }
    assert_eq!(glob("*.rs", dir.path()).unwrap(), ["a.rs"]);
    assert_eq!(
        glob("**/*.rs", dir.path()).unwrap(),
        ["a.rs", "src/b.rs", "src/x/c.rs"]
    );
    assert_eq!(
        glob("src/**/*.rs", dir.path()).unwrap(),
        ["src/b.rs", "src/x/c.rs"]
    );
    assert_eq!(
        glob("src/*/*", dir.path()).unwrap(),
        ["src/x/c.rs", "src/x/d.ts"]
    );
    assert_eq!(glob("**/*.{rs,ts}", dir.path()).unwrap().len(), 4);
    assert_eq!(glob("./src/*.rs", dir.path()).unwrap(), ["src/b.rs"]);
}

#[test]
fn glob_skips_git_and_ignored_files_but_lists_hidden_ones() {
    let dir = tree(&[
        (".gitignore", b"target/\n*.log\n"),
        (".git/HEAD", b""),
        ("target/debug/x.rs", b""),
        ("main.rs", b""),
        ("app.log", b""),
        (".github/ci.yml", b""),
    ]);
    let mut all = glob("**/*", dir.path()).unwrap();
    all.sort();
    assert_eq!(all, [".github/ci.yml", ".gitignore", "main.rs"]);
}

#[test]
fn an_absolute_glob_inside_the_directory_is_made_relative() {
    let dir = tree(&[("src/a.rs", b"")]);
    let pattern = format!("{}/src/*.rs", dir.path().display());
    assert_eq!(glob(&pattern, dir.path()).unwrap(), ["src/a.rs"]);
}

#[test]
fn glob_rejects_bad_patterns_with_advice() {
    let dir = tree(&[("a.rs", b"")]);
    for (pattern, says) in [
        ("src/[a", "unclosed character class"),
        ("../*.rs", "contains `..`"),
        ("/elsewhere/*.rs", "outside"),
        ("", "empty"),
    ] {
        let error = glob(pattern, dir.path()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{pattern}");
        assert!(error.to_string().contains(says), "{pattern}: {error}");
    }
    let error = glob("*", &dir.path().join("a.rs")).unwrap_err();
    assert!(error.to_string().contains("not a directory"), "{error}");
}

#[test]
fn glob_pruning_gives_the_same_answer_as_a_full_walk() {
    let dir = tree(&[
        ("src/a/x.rs", b""),
        ("src/b/x.rs", b""),
        ("src/b/c/x.rs", b""),
        ("lib/a/x.rs", b""),
        ("x.rs", b""),
    ]);
    for pattern in [
        "src/*/x.rs",
        "src/**/x.rs",
        "*/a/*.rs",
        "{src,lib}/a/x.rs",
        "s*/b/**",
    ] {
        let glob_matcher = Glob::new(pattern).unwrap();
        let mut expected = Vec::new();
        walk::walk(dir.path(), &WalkOptions::default(), |relative, _| {
            if glob_matcher.is_match(relative) {
                expected.push(relative.to_owned());
            }
            true
        })
        .unwrap();
        expected.sort();
        let mut actual = glob(pattern, dir.path()).unwrap();
        actual.sort();
        assert_eq!(actual, expected, "{pattern}");
        assert!(!actual.is_empty(), "{pattern}");
    }
}
