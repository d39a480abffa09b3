//! The architecture's invariants that can be checked from the source tree itself
//! (ARCHITECTURE.md, "Invariants"): no async runtime in the lock file, `llm/` independent of
//! the agent layers, processes and `unsafe` confined to `exec/`, no printing from library
//! code, and the process environment read only where the docs say.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, with its path relative to the crate root.
fn rust_files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).expect("readable source dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(root())
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push((rel, fs::read_to_string(&path).expect("utf-8 source")));
            }
        }
    }
    out.sort();
    out
}

/// The code of a file without its unit-test modules and comment lines, for checks that
/// concern what the library does at run time.
fn library_code(text: &str) -> String {
    let code = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_test_file(path: &str) -> bool {
    path.ends_with("/tests.rs") || path.contains("/tests/")
}

#[test]
fn no_async_runtime_is_in_the_lock_file() {
    let lock = fs::read_to_string(root().join("Cargo.lock")).expect("Cargo.lock is committed");
    for runtime in [
        "tokio",
        "async-std",
        "smol",
        "futures-executor",
        "async-io",
        "async-executor",
    ] {
        assert!(
            !lock.contains(&format!("name = \"{runtime}\"")),
            "{runtime} is in Cargo.lock"
        );
    }
}

#[test]
fn llm_never_imports_the_agent_layers() {
    for (path, text) in rust_files(&root().join("src/llm")) {
        // Doc links may point up to the layers that use llm; code may not.
        let code = library_code(&text);
        for layer in ["tools", "session", "exec", "profiles", "prompt", "subagent"] {
            assert!(
                !code.contains(&format!("crate::{layer}")),
                "{path} uses crate::{layer}"
            );
        }
    }
}

#[test]
fn only_exec_spawns_processes() {
    for (path, text) in rust_files(&root().join("src")) {
        if path.starts_with("src/exec/") || is_test_file(&path) {
            continue;
        }
        let code = library_code(&text);
        assert!(
            !code.contains("Command::new") && !code.contains("process::Command"),
            "{path} spawns a process"
        );
    }
}

#[test]
fn unsafe_code_is_only_in_exec_and_every_block_says_why() {
    for (path, text) in rust_files(&root().join("src")) {
        let code = library_code(&text);
        let has_unsafe =
            code.contains("unsafe {") || code.contains("unsafe fn") || code.contains("unsafe impl");
        if !path.starts_with("src/exec/") {
            assert!(!has_unsafe, "{path} contains unsafe code");
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.contains("unsafe {") && !line.trim_start().starts_with("//") {
                let window = &lines[i.saturating_sub(6)..=i];
                assert!(
                    window.iter().any(|l| l.contains("SAFETY:")),
                    "{path}:{} has an unsafe block without a SAFETY note",
                    i + 1
                );
            }
        }
    }
}

#[test]
fn library_code_never_prints() {
    for (path, text) in rust_files(&root().join("src")) {
        if is_test_file(&path) {
            continue;
        }
        let code = library_code(&text);
        for mac in ["println!", "eprintln!", "print!(", "eprint!(", "dbg!("] {
            assert!(!code.contains(mac), "{path} uses {mac}");
        }
    }
}

#[test]
fn the_process_environment_is_read_only_where_documented() {
    // from_env() constructors, LocalExecutionEnvironment::new (what commands inherit,
    // filtered) and the ripgrep lookup on PATH.
    let allowed = [
        "src/llm/client.rs",
        "src/exec/local.rs",
        "src/exec/search/ripgrep.rs",
    ];
    for (path, text) in rust_files(&root().join("src")) {
        if is_test_file(&path) || allowed.contains(&path.as_str()) {
            continue;
        }
        let code = library_code(&text);
        for read in ["env::var(", "env::vars(", "env::var_os(", "env::vars_os("] {
            assert!(
                !code.contains(read),
                "{path} reads the environment ({read})"
            );
        }
        for write in ["env::set_var(", "env::remove_var(", "set_current_dir("] {
            assert!(
                !code.contains(write),
                "{path} mutates process state ({write})"
            );
        }
    }
}
