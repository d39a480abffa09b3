//! `agentloop --remote-command`: the three-round task with the tools behind an exec-server
//! (started through `env -C DIR`, a stand-in for `podman exec -i -w DIR ctr`; over ssh to
//! the private sshd too; a `podman://` URL into a real container), the header naming the
//! transport; bad remote options are usage errors, a missing container runtime an error;
//! `--sandbox workspace-write` denies a write outside the directory on the remote side.

use std::process::{Command, Stdio};

use serde_json::json;

use support::podman::{Container, SERVER_IN_CONTAINER, stripped_server};
use support::sshd::Sshd;

use crate::{agentloop, exec_server, run_command};
use support::turns::{self, function};
use support::{FAKE_KEY, Reply, Server};

fn replies() -> Vec<Reply> {
    let call = |id: &str, name: &str, args| turns::anthropic_sse("", &[function(id, name, args)]);
    vec![
        Reply::sse(call(
            "call_1",
            "shell",
            json!({"command": "echo hello > out.txt"}),
        )),
        Reply::sse(call("call_2", "read_file", json!({"file_path": "out.txt"}))),
        Reply::sse(turns::anthropic_sse("done", &[])),
    ]
}

fn agent(server: &Server, remote_args: &[String]) -> Command {
    let home = std::env::temp_dir();
    let mut command = Command::new(agentloop());
    command
        .args(["--provider", "anthropic", "--base-url", &server.url()])
        .args(remote_args)
        .arg("write hello to out.txt, read it back, then say done")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("ANTHROPIC_API_KEY", FAKE_KEY)
        .stdin(Stdio::null());
    command
}

fn completes_through(transport: String) {
    let server = Server::start(replies());
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().display().to_string();
    let args = vec![
        "--remote-command".to_string(),
        format!("{transport} env -C {dir}"),
        "--remote-server".to_string(),
        exec_server().display().to_string(),
    ];
    let ran = run_command(agent(&server, &args), "");
    let output = ran.all_output();
    assert_eq!(ran.status, Some(0), "{output}");
    assert_eq!(
        std::fs::read_to_string(work.path().join("out.txt")).unwrap(),
        "hello\n"
    );
    // The header shows the transport and the remote directory.
    assert!(
        output.contains("env -C") && output.contains(&dir),
        "{output}"
    );
    assert!(server.requests()[2].body_text().contains("hello"));
    assert!(!output.contains(FAKE_KEY));
}

#[test]
fn the_agent_runs_its_tools_through_a_stdio_transport() {
    completes_through(String::new());
}

#[test]
fn the_agent_runs_its_tools_through_ssh() {
    let Some(sshd) = Sshd::start() else { return };
    let ssh = format!(
        "ssh -T -o BatchMode=yes -p {} {} {}",
        sshd.port,
        sshd.options().join(" "),
        sshd.destination()
    );
    completes_through(ssh);
}

#[test]
fn an_unreachable_remote_is_an_error_and_conflicting_options_are_usage_errors() {
    let server = Server::start(Vec::new());
    let args = [
        "--remote-command".to_string(),
        "/nonexistent/transport".to_string(),
    ];
    let ran = run_command(agent(&server, &args), "");
    assert_eq!(ran.status, Some(1), "{}", ran.all_output());
    assert!(
        ran.stderr.contains("cannot reach the remote exec-server"),
        "{}",
        ran.stderr
    );
    let args = [
        "--remote".to_string(),
        "ssh://host".to_string(),
        "--remote-command".to_string(),
        "x".to_string(),
    ];
    let ran = run_command(agent(&server, &args), "");
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    let args = ["--remote".to_string(), "http://host".to_string()];
    let ran = run_command(agent(&server, &args), "");
    assert!(
        ran.stderr
            .contains("not an ssh://, podman://, docker:// or kubectl:// URL"),
        "{}",
        ran.stderr
    );
}

#[test]
fn a_missing_container_runtime_is_an_error_before_the_first_call() {
    let server = Server::start(Vec::new());
    let args = [
        "--remote".to_string(),
        "docker://task-1/src".to_string(),
        "--remote-runtime".to_string(),
        "/nonexistent/bin/docker".to_string(),
    ];
    let ran = run_command(agent(&server, &args), "");
    assert_eq!(ran.status, Some(1), "{}", ran.all_output());
    assert!(
        ran.stderr
            .contains("the runtime `/nonexistent/bin/docker` is not an executable file"),
        "{}",
        ran.stderr
    );
    assert!(server.requests().is_empty(), "the model was called");
}

/// The container has no exec-server: the CLI copies in the one installed beside it.
#[test]
fn the_agent_runs_its_tools_through_a_podman_url() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().display().to_string();
    let mount = format!("{dir}:{dir}");
    let Some(container) = Container::start(&["-v", &mount]) else {
        return;
    };
    let server = Server::start(replies());
    let args = vec![
        "--remote".to_string(),
        format!("podman://{}{dir}", container.name),
    ];
    let ran = run_command(agent(&server, &args), "");
    let output = ran.all_output();
    assert_eq!(ran.status, Some(0), "{output}");
    assert_eq!(
        std::fs::read_to_string(work.path().join("out.txt")).unwrap(),
        "hello\n"
    );
    let header = format!("podman://{} {dir}", container.name);
    assert!(output.contains(&header), "{output}");
    assert!(server.requests()[2].body_text().contains("hello"));
    // The exec-server ends once the runtime closes its input after the CLI's exit.
    let deadline = std::time::Instant::now() + support::GENEROUS;
    while !container.processes().is_empty() {
        let left = container.processes();
        assert!(
            std::time::Instant::now() < deadline,
            "left running: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let placed = container.sh("ls /tmp/agentloop");
    assert!(placed.starts_with("agentloop-exec-server-"), "{placed}");
}

/// `--sandbox workspace-write` through `args` (the working directory `dir`): the model's
/// write outside the directory is denied on the remote side, the header names the sandbox
/// the exec-server applied, and the run goes on to its answer.
fn a_write_outside_is_denied_through(args: Vec<String>, work: &std::path::Path) {
    let outside = work.join("outside");
    std::fs::create_dir(&outside).unwrap();
    let escape = outside.join("escape.txt");
    let command = format!("echo x > {}", escape.display());
    let server = Server::start(vec![
        Reply::sse(turns::anthropic_sse(
            "",
            &[function("call_1", "shell", json!({ "command": command }))],
        )),
        Reply::sse(turns::anthropic_sse("done", &[])),
    ]);
    let mut args = args;
    args.extend(["--sandbox".to_string(), "workspace-write".to_string()]);
    let ran = run_command(agent(&server, &args), "");
    let output = ran.all_output();
    assert_eq!(ran.status, Some(0), "{output}");
    assert!(!escape.exists(), "the write escaped");
    assert!(
        output.contains("sandbox workspace-write, network off; Landlock ABI")
            && output.contains("(remote)"),
        "{output}"
    );
    assert!(
        server.requests()[1]
            .body_text()
            .contains("[sandbox: denied"),
        "{}",
        server.requests()[1].body_text()
    );
}

#[test]
fn sandbox_workspace_write_denies_a_write_outside_through_a_stdio_transport() {
    // Not under /tmp, which workspace-write lets commands write.
    let top = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = top.path().join("ws");
    std::fs::create_dir(&dir).unwrap();
    let args = vec![
        "--remote-command".to_string(),
        format!("env -C {}", dir.display()),
        "--remote-server".to_string(),
        exec_server().display().to_string(),
    ];
    a_write_outside_is_denied_through(args, top.path());
}

#[test]
fn sandbox_workspace_write_denies_a_write_outside_through_a_podman_url() {
    // Not under /tmp, which workspace-write lets commands write.
    let top = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = top.path().join("ws");
    std::fs::create_dir(&dir).unwrap();
    let mount = format!("{0}:{0}", top.path().display());
    // The exec-server mounted in (the bootstrap is the test above's): no 80 MB checksum
    // of the debug build before the first call.
    let Some(container) = Container::with_server(&stripped_server(), &["-v", &mount]) else {
        return;
    };
    let args = vec![
        "--remote".to_string(),
        format!("podman://{}{}", container.name, dir.display()),
        "--remote-server".to_string(),
        SERVER_IN_CONTAINER.to_string(),
    ];
    a_write_outside_is_denied_through(args, top.path());
}
