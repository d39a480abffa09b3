//! The static `agentloop` in a container image with no C library of its own: the image
//! holds the static binary, Debian's `bash-static` as `/bin/bash` (for the shell tool) and
//! empty `/tmp` and `/work`, made with `podman import` from files (no registry is
//! reachable). The agent there runs a task against the loopback model (the container
//! shares this machine's network: the server binds 127.0.0.1), its shell tool running
//! that bash. The binary is `AGENTLOOP_STATIC_BINARY` (`.ci/run` builds it before the
//! tests); without it, podman or `bash-static` the test is skipped with the reason (a
//! failure under `AGENTLOOP_CI=1`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use support::podman::podman;
use support::turns::{self, function};
use support::{FAKE_KEY, Reply, Server};

use crate::run_command;

const IMAGE: &str = "localhost/agentloop-nolibc:test";
const BASH_STATIC: &str = "/bin/bash-static";

/// What the test needs, or the reason it cannot run.
fn needs() -> Result<PathBuf, String> {
    let binary = std::env::var_os("AGENTLOOP_STATIC_BINARY")
        .map(PathBuf::from)
        .ok_or("AGENTLOOP_STATIC_BINARY is not set (.ci/run builds the static CLI)")?;
    if !binary.is_file() {
        return Err(format!("{} is missing", binary.display()));
    }
    if !Path::new(BASH_STATIC).is_file() {
        return Err("no /bin/bash-static (apt-get install bash-static)".into());
    }
    if Command::new("podman").arg("--version").output().is_err() {
        return Err("podman is not installed".into());
    }
    Ok(binary)
}

/// Imports the image: the static CLI, the static bash, `/tmp` and `/work`; nothing else.
fn import(binary: &Path) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    for sub in ["bin", "tmp", "work"] {
        std::fs::create_dir(dir.join(sub)).unwrap();
    }
    std::fs::copy(BASH_STATIC, dir.join("bin/bash")).unwrap();
    std::fs::copy(binary, dir.join("agentloop")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let tar = out.path().join("agentloop-nolibc.tar");
    let made = Command::new("tar")
        .arg("-C")
        .arg(dir)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(made.success(), "tar");
    let imported = podman(&["import", &tar.display().to_string(), IMAGE]);
    assert!(
        imported.status.success(),
        "podman import: {}",
        String::from_utf8_lossy(&imported.stderr)
    );
}

/// Removes the named container however the test ends.
struct Removed(String);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", &self.0]);
    }
}

fn run_in_image(name: &str, extra: &[&str], argv: &[&str]) -> support::programs::Ran {
    let mut command = Command::new("podman");
    command.args([
        "run",
        "--rm",
        "--name",
        name,
        "--runtime",
        "runc",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1000:1000",
    ]);
    command.args(extra).arg(IMAGE).args(argv);
    run_command(command, "")
}

#[test]
fn the_static_binary_runs_a_task_in_an_image_without_a_c_library() {
    let binary = match needs() {
        Ok(binary) => binary,
        Err(reason) => {
            assert!(
                std::env::var("AGENTLOOP_CI").as_deref() != Ok("1"),
                "AGENTLOOP_CI=1 and {reason}"
            );
            eprintln!("skipped: {reason}");
            return;
        }
    };
    import(&binary);
    let name = format!("agentloop-nolibc-{}", std::process::id());
    let _removed = Removed(name.clone());

    // The image has no C library anywhere (bash's own globbing looks: no other tools).
    let listed = run_in_image(
        &name,
        &[],
        &[
            "/bin/bash",
            "-c",
            "shopt -s nullglob globstar; f=(/**/libc.so* /**/ld-linux*); echo \"${#f[@]}\"",
        ],
    );
    assert_eq!(listed.status, Some(0), "{}", listed.all_output());
    assert_eq!(listed.stdout.trim(), "0", "C libraries in the image");

    let call = turns::anthropic_sse(
        "",
        &[function(
            "call_1",
            "shell",
            // Builtins only: the image has no other program.
            json!({"command": "echo \"made by bash $BASH_VERSION\" > out.txt; read -r l < out.txt; echo \"$l\""}),
        )],
    );
    let server = Server::start(vec![
        Reply::sse(call),
        Reply::sse(turns::anthropic_sse("done", &[])),
    ]);
    let key = format!("ANTHROPIC_API_KEY={FAKE_KEY}");
    let ran = run_in_image(
        &name,
        &[
            "--network",
            "host",
            "-e",
            &key,
            "-e",
            "HOME=/tmp",
            "-w",
            "/work",
        ],
        &[
            "/agentloop",
            "--provider",
            "anthropic",
            "--base-url",
            &server.url(),
            "--sandbox",
            "full-access",
            "write a line with bash's version to out.txt",
        ],
    );
    let output = ran.all_output();
    assert_eq!(ran.status, Some(0), "{output}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{output}");
    // The shell tool's output, as the model got it: the image's static bash ran it.
    let second = requests[1].body_text();
    let result = &second[second.find("tool_result").unwrap_or(0)..];
    assert!(result.contains("made by bash 5."), "{result}");
    assert!(!output.contains(FAKE_KEY), "the key in the output");
}
