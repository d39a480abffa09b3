//! The grep and glob tools on real trees through LocalExecutionEnvironment.

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use agentloop::llm::ToolCall;
use agentloop::tools::{glob, grep, read_many_files};
use serde_json::{Value, json};

use support::tools_tree::run_tool;

fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("src/nested")).unwrap();
    fs::write(
        dir.path().join("src/lib.rs"),
        "pub fn alpha() {}\n// TODO: beta\n",
    )
    .unwrap();
    fs::write(dir.path().join("src/nested/deep.rs"), "fn Alpha() {}\n").unwrap();
    fs::write(dir.path().join("README.md"), "alpha docs\n").unwrap();
    dir
}

fn grep_call(dir: &Path, arguments: Value) -> (bool, String) {
    let outcome = run_tool(grep(), dir, &ToolCall::new("c", "grep", arguments));
    (outcome.is_error, outcome.text)
}

fn glob_call(dir: &Path, arguments: Value) -> (bool, String) {
    let outcome = run_tool(glob(), dir, &ToolCall::new("c", "glob", arguments));
    (outcome.is_error, outcome.text)
}

#[test]
fn grep_lists_path_line_and_text() {
    let dir = tree();
    let (is_error, text) = grep_call(dir.path(), json!({"pattern": "alpha"}));
    assert!(!is_error, "{text}");
    assert_eq!(
        text,
        "README.md:1:alpha docs\nsrc/lib.rs:1:pub fn alpha() {}"
    );
}

#[test]
fn grep_in_a_subdirectory_shows_paths_from_the_working_directory() {
    let dir = tree();
    let (_, text) = grep_call(
        dir.path(),
        json!({"pattern": "alpha", "path": "src", "case_insensitive": true}),
    );
    assert_eq!(
        text,
        "src/lib.rs:1:pub fn alpha() {}\nsrc/nested/deep.rs:1:fn Alpha() {}"
    );
    let (_, text) = grep_call(dir.path(), json!({"pattern": "TODO", "path": "src/lib.rs"}));
    assert_eq!(text, "src/lib.rs:2:// TODO: beta");
}

#[test]
fn grep_filters_by_glob_and_says_when_nothing_matches() {
    let dir = tree();
    let (_, text) = grep_call(
        dir.path(),
        json!({"pattern": "alpha", "glob_filter": "*.md"}),
    );
    assert_eq!(text, "README.md:1:alpha docs");
    let (is_error, text) = grep_call(dir.path(), json!({"pattern": "zzz_nothing"}));
    assert!(!is_error);
    assert_eq!(text, "No matches found for `zzz_nothing`.");
}

#[test]
fn grep_never_answers_no_matches_for_a_line_it_searched_only_in_part() {
    let dir = tree();
    fs::create_dir(dir.path().join("logs")).unwrap();
    // Line 1: 9 MiB, over the 8 MiB a line is searched in, ending in the pattern.
    let mut text = "a".repeat(9 << 20);
    text.push_str(" needle\nshort line\n");
    fs::write(dir.path().join("logs/big.log"), text).unwrap();
    let note = "logs/big.log: line 1 is longer than 8 MiB; only its first 8 MiB were searched";
    // A file given as the path is searched in process, whose line cap applies.
    let (is_error, text) = grep_call(
        dir.path(),
        json!({"pattern": "needle", "path": "logs/big.log"}),
    );
    assert!(!is_error, "{text}");
    assert!(
        text.starts_with("No matches found for `needle` in what was searched, but the search did not cover everything"),
        "{text}"
    );
    assert!(text.contains(&format!("- {note}\n")), "{text}");
    // Matches elsewhere come with the same note.
    let (_, text) = grep_call(
        dir.path(),
        json!({"pattern": "short", "path": "logs/big.log"}),
    );
    assert_eq!(
        text,
        format!(
            "logs/big.log:2:short line\n[Not searched whole; a match there may be missing:\n- {note}\n]"
        )
    );
    // Over the directory (ripgrep when installed, which holds a 9 MiB line): the match, or
    // the note; never a bare absence.
    let (_, text) = grep_call(dir.path(), json!({"pattern": "needle"}));
    assert!(
        text.starts_with("logs/big.log:1:aaa") || text.contains(note),
        "{}",
        &text[..text.len().min(300)]
    );
}

#[test]
fn grep_notes_when_it_stops_at_max_results() {
    let dir = tree();
    let (_, text) = grep_call(
        dir.path(),
        json!({"pattern": "a", "max_results": 1, "case_insensitive": true}),
    );
    assert!(
        text.starts_with("README.md:1:alpha docs\n[Stopped at max_results=1 matches; more exist."),
        "{text}"
    );
}

#[test]
fn grep_with_an_invalid_regex_or_missing_path_is_an_error() {
    let dir = tree();
    let (is_error, text) = grep_call(dir.path(), json!({"pattern": "fn ("}));
    assert!(is_error);
    assert!(text.contains("invalid regex `fn (`"), "{text}");
    assert!(text.contains("Fix the pattern"), "{text}");
    let (is_error, text) = grep_call(dir.path(), json!({"pattern": "x", "path": "nope"}));
    assert!(is_error);
    assert!(text.contains("nope does not exist"), "{text}");
}

#[test]
fn glob_lists_matches_newest_first() {
    let dir = tree();
    let old = SystemTime::now() - Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(dir.path().join("src/lib.rs"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let (is_error, text) = glob_call(dir.path(), json!({"pattern": "**/*.rs"}));
    assert!(!is_error, "{text}");
    assert_eq!(text, "src/nested/deep.rs\nsrc/lib.rs");
    let (_, text) = glob_call(dir.path(), json!({"pattern": "*.rs", "path": "src/nested"}));
    assert_eq!(text, "src/nested/deep.rs");
}

#[test]
fn glob_says_when_nothing_matches_and_rejects_bad_paths() {
    let dir = tree();
    let (is_error, text) = glob_call(dir.path(), json!({"pattern": "**/*.py"}));
    assert!(!is_error);
    assert_eq!(text, "No files found matching `**/*.py`.");
    let (is_error, text) = glob_call(dir.path(), json!({"pattern": "*", "path": "README.md"}));
    assert!(is_error);
    assert!(text.contains("README.md is a file"), "{text}");
}

#[test]
fn read_many_files_expands_glob_patterns() {
    let dir = tree();
    let outcome = run_tool(
        read_many_files(),
        dir.path(),
        &ToolCall::new(
            "c",
            "read_many_files",
            json!({"paths": ["src/**/*.rs", "README.md"]}),
        ),
    );
    assert!(!outcome.is_error, "{}", outcome.text);
    assert_eq!(
        outcome.text,
        "--- src/lib.rs ---\npub fn alpha() {}\n// TODO: beta\n--- src/nested/deep.rs ---\nfn Alpha() {}\n--- README.md ---\nalpha docs"
    );
}
