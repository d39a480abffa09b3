//! The shared tools on real files in temp dirs: argument validation through the registry,
//! read_file, write_file, list_dir and read_many_files.

pub mod apply_patch;
pub mod edit_file;
pub mod search;
pub mod shell;

use std::fs;
use std::path::Path;

use agentloop::CancelToken;
use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::ToolCall;
use agentloop::tools::{
    ToolContext, ToolRegistry, apply_patch, edit_file, glob, grep, list_dir, read_file,
    read_many_files, shell, write_file,
};
use agentloop::unstable::ToolOutcome;
use serde_json::{Value, json};

fn registry() -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for tool in [
        read_file(),
        write_file(),
        edit_file(),
        apply_patch(),
        shell(),
        grep(),
        glob(),
        list_dir(),
        read_many_files(),
    ] {
        registry.register(tool);
    }
    registry
}

/// Runs `name` with `arguments` in `dir` through the full registry.
fn call(dir: &Path, name: &str, arguments: Value) -> ToolOutcome {
    let env = LocalExecutionEnvironment::new(dir).unwrap();
    let cancel = CancelToken::new();
    let ctx = ToolContext::new(&env, "call-1", &cancel);
    match agentloop::unstable::prepare_call(&registry(), &ToolCall::new("call-1", name, arguments))
    {
        Ok(prepared) => prepared.run(&ctx),
        Err(text) => ToolOutcome {
            text,
            is_error: true,
            image: None,
        },
    }
}

fn ok(outcome: ToolOutcome) -> String {
    assert!(!outcome.is_error, "unexpected error: {}", outcome.text);
    outcome.text
}

fn err(outcome: ToolOutcome) -> String {
    assert!(outcome.is_error, "expected an error, got: {}", outcome.text);
    outcome.text
}

// ---- validation through the registry

#[test]
fn an_unknown_tool_is_an_error_result_listing_the_tools() {
    let dir = tempfile::tempdir().unwrap();
    let text = err(call(dir.path(), "read_files", json!({})));
    assert!(
        text.starts_with("Unknown tool: read_files. Available tools: "),
        "{text}"
    );
    assert!(text.contains("read_file, read_many_files"), "{text}");
}

#[test]
fn invalid_json_arguments_are_an_error_result_with_the_position() {
    let dir = tempfile::tempdir().unwrap();
    let text = err(call(
        dir.path(),
        "read_file",
        json!("{\"file_path\": \"a.txt\",}"),
    ));
    assert!(text.starts_with("Invalid arguments for tool read_file: the arguments are not valid JSON (trailing comma at line 1 column 23)"), "{text}");
}

#[test]
fn a_missing_required_argument_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let text = err(call(
        dir.path(),
        "write_file",
        json!({"file_path": "a.txt"}),
    ));
    assert_eq!(
        text,
        "Invalid arguments for tool write_file: \"content\" is required but missing (a string)"
    );
}

#[test]
fn a_wrong_type_is_named_with_the_expectation() {
    let dir = tempfile::tempdir().unwrap();
    let text = err(call(
        dir.path(),
        "read_file",
        json!({"file_path": "a.txt", "offset": "ten"}),
    ));
    assert_eq!(
        text,
        "Invalid arguments for tool read_file: \"offset\" must be an integer ≥ 1, got \"ten\""
    );
}

#[test]
fn an_unexpected_property_is_named_with_the_allowed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let text = err(call(
        dir.path(),
        "shell",
        json!({"command": "true", "cwd": "/"}),
    ));
    assert_eq!(
        text,
        "Invalid arguments for tool shell: unexpected argument \"cwd\"; the allowed arguments are: command, description, timeout_ms"
    );
}

#[test]
fn every_tool_definition_has_an_object_schema_and_a_description() {
    for definition in registry().definitions() {
        assert_eq!(
            definition.parameters["type"], "object",
            "{}",
            definition.name
        );
        assert_eq!(
            definition.parameters["additionalProperties"], false,
            "{}",
            definition.name
        );
        assert!(definition.description.len() > 80, "{}", definition.name);
    }
}

// ---- read_file

#[test]
fn read_file_numbers_lines_and_hides_line_endings() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.txt"), "\u{feff}one\r\ntwo\nthree").unwrap();
    let text = ok(call(dir.path(), "read_file", json!({"file_path": "a.txt"})));
    assert_eq!(text, "     1 | one\n     2 | two\n     3 | three");
}

#[test]
fn read_file_honours_offset_and_limit_and_says_how_to_continue() {
    let dir = tempfile::tempdir().unwrap();
    let content: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    fs::write(dir.path().join("a.txt"), content).unwrap();
    let text = ok(call(
        dir.path(),
        "read_file",
        json!({"file_path": "a.txt", "offset": 4, "limit": 3}),
    ));
    assert_eq!(
        text,
        "     4 | line 4\n     5 | line 5\n     6 | line 6\n[Showing lines 4-6 of 10. To read more, call read_file with offset=7.]"
    );
    let tail = ok(call(
        dir.path(),
        "read_file",
        json!({"file_path": "a.txt", "offset": 9}),
    ));
    assert_eq!(tail, "     9 | line 9\n    10 | line 10");
}

#[test]
fn read_file_past_the_end_gives_the_line_count() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.txt"), "x\ny\n").unwrap();
    let text = err(call(
        dir.path(),
        "read_file",
        json!({"file_path": "a.txt", "offset": 5}),
    ));
    assert!(
        text.contains(
            "offset 5 is past the end of a.txt, which has 2 lines; use an offset from 1 to 2"
        ),
        "{text}"
    );
}

#[test]
fn read_file_of_an_empty_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("e.txt"), "").unwrap();
    assert_eq!(
        ok(call(dir.path(), "read_file", json!({"file_path": "e.txt"}))),
        "e.txt is empty (0 bytes)."
    );
}

#[test]
fn read_file_of_a_binary_file_is_an_error_with_its_size() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("data.bin"), [0u8, 1, 2, 3, 0, 5]).unwrap();
    let text = err(call(
        dir.path(),
        "read_file",
        json!({"file_path": "data.bin"}),
    ));
    assert!(
        text.contains("data.bin is a binary file (6 bytes)"),
        "{text}"
    );
}

#[test]
fn read_file_returns_images_recognised_by_content_not_extension() {
    let dir = tempfile::tempdir().unwrap();
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";
    fs::write(dir.path().join("picture.dat"), png).unwrap();
    let outcome = call(dir.path(), "read_file", json!({"file_path": "picture.dat"}));
    let text = ok(outcome.clone());
    assert_eq!(
        text,
        format!("Image file picture.dat (image/png, {} bytes).", png.len())
    );
    let image = outcome.image.expect("an image");
    assert_eq!(image.media_type.as_deref(), Some("image/png"));
    assert_eq!(image.data.as_deref(), Some(&png[..]));
    // A text file with an image extension is read as text.
    fs::write(dir.path().join("fake.png"), "not an image\n").unwrap();
    let fake = call(dir.path(), "read_file", json!({"file_path": "fake.png"}));
    assert_eq!(ok(fake.clone()), "     1 | not an image");
    assert!(fake.image.is_none());
}

#[test]
fn read_file_of_a_missing_file_suggests_close_names() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("src")).unwrap();
    fs::write(dir.path().join("src/lib.rs"), "").unwrap();
    let text = err(call(
        dir.path(),
        "read_file",
        json!({"file_path": "src/lib.rx"}),
    ));
    assert!(
        text.contains("src/lib.rx does not exist. Did you mean src/lib.rs?"),
        "{text}"
    );
    let text = err(call(
        dir.path(),
        "read_file",
        json!({"file_path": "nowhere/x.rs"}),
    ));
    assert!(
        text.contains("Its directory nowhere does not exist either"),
        "{text}"
    );
}

#[test]
fn read_file_of_a_directory_points_to_list_dir() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("src")).unwrap();
    let text = err(call(dir.path(), "read_file", json!({"file_path": "src"})));
    assert!(
        text.contains("src is a directory, not a file; use list_dir or glob"),
        "{text}"
    );
}

#[test]
fn read_file_cuts_very_long_lines() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("long.txt"),
        format!("{}\nshort\n", "x".repeat(2500)),
    )
    .unwrap();
    let text = ok(call(
        dir.path(),
        "read_file",
        json!({"file_path": "long.txt"}),
    ));
    assert!(
        text.contains(" [... line cut: 500 more characters]\n     2 | short"),
        "{text}"
    );
}

#[test]
fn read_file_outside_the_working_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = err(call(
        dir.path(),
        "read_file",
        json!({"file_path": "/etc/passwd"}),
    ));
    assert!(
        text.contains("/etc/passwd is outside the working directory"),
        "{text}"
    );
}

// ---- write_file

#[test]
fn write_file_creates_parents_and_reports_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let text = ok(call(
        dir.path(),
        "write_file",
        json!({"file_path": "a/b/c.txt", "content": "hello\nworld\n"}),
    ));
    assert_eq!(text, "Created a/b/c.txt (12 bytes, 2 lines).");
    assert_eq!(
        fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
        "hello\nworld\n"
    );
    let text = ok(call(
        dir.path(),
        "write_file",
        json!({"file_path": "a/b/c.txt", "content": "x"}),
    ));
    assert_eq!(
        text,
        "Overwrote a/b/c.txt (1 byte, 1 line; it had 12 bytes)."
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
        "x"
    );
}

#[test]
fn write_file_onto_a_directory_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("d")).unwrap();
    let text = err(call(
        dir.path(),
        "write_file",
        json!({"file_path": "d", "content": "x"}),
    ));
    assert!(text.contains("d is a directory"), "{text}");
    assert!(dir.path().join("d").is_dir());
}

// ---- list_dir

#[test]
fn list_dir_shows_a_tree_with_sizes_to_the_requested_depth() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("src/tools")).unwrap();
    fs::write(dir.path().join("src/lib.rs"), "x".repeat(1536)).unwrap();
    fs::write(dir.path().join("src/tools/mod.rs"), "abc").unwrap();
    fs::write(dir.path().join("Cargo.toml"), "").unwrap();
    fs::write(dir.path().join("src-notes.txt"), "n").unwrap();
    let text = ok(call(dir.path(), "list_dir", json!({"depth": 3})));
    assert_eq!(
        text,
        "./\n  Cargo.toml (0 B)\n  src/\n    lib.rs (1.5 KB)\n    tools/\n      mod.rs (3 B)\n  src-notes.txt (1 B)"
    );
    let shallow = ok(call(dir.path(), "list_dir", json!({"path": "src"})));
    assert_eq!(shallow, "src/\n  lib.rs (1.5 KB)\n  tools/");
}

#[test]
fn list_dir_of_a_missing_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let text = err(call(dir.path(), "list_dir", json!({"path": "nope"})));
    assert!(text.contains("nope does not exist"), "{text}");
}

// ---- read_many_files

#[test]
fn read_many_files_heads_each_file_and_reports_unreadable_ones() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    fs::write(dir.path().join("b.txt"), "beta").unwrap();
    let text = ok(call(
        dir.path(),
        "read_many_files",
        json!({"paths": ["a.txt", "b.txt", "missing.txt"]}),
    ));
    assert_eq!(
        text,
        "--- a.txt ---\nalpha\n--- b.txt ---\nbeta\n--- missing.txt ---\n[not read: the file does not exist]"
    );
}

#[test]
fn read_many_files_stays_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let big = "y".repeat(60_000);
    for name in ["1.txt", "2.txt", "3.txt"] {
        fs::write(dir.path().join(name), &big).unwrap();
    }
    let text = ok(call(
        dir.path(),
        "read_many_files",
        json!({"paths": ["1.txt", "2.txt", "3.txt"]}),
    ));
    assert!(
        text.chars().count() < 100_000 + 1_000 /* read_many_files's budget */
    );
    assert!(
        text.contains(
            "[... cut at the 100000-character budget; read the rest with read_file offset=1]"
        ),
        "{}",
        &text[text.len() - 400..]
    );
    assert!(text.ends_with("[1 file(s) not read because the output limit was reached: 3.txt. Read them in another call.]"), "{}", &text[text.len() - 300..]);
}

#[test]
fn read_many_files_with_nothing_readable_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let text = err(call(
        dir.path(),
        "read_many_files",
        json!({"paths": ["x", "y"]}),
    ));
    assert!(text.contains("no file could be read"), "{text}");
}
