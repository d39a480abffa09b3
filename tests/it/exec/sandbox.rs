//! The escape suite: real commands and the file tools under a sandbox with the network off
//! (Landlock + seccomp + read-only bind mounts), each test named after the attempt it
//! makes; and what must keep working. Skips (with a printed reason) only where the kernel
//! has no Landlock or a case's need (python3, root, ssh-agent, a writable `/run`) is
//! missing.
//!
//! The suite is a table ([`escapes!`]): a row names a test, the policy its environment runs
//! under and what it needs; the attempt is the function of the same name in [`attempts`]
//! (or the expression after `=>`). Adding a case is adding a row.

use std::fs;
use std::io::ErrorKind;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::{
    Enforcement, ExecutionEnvironment, LocalExecutionEnvironment, Network, Sandbox, SandboxPolicy,
};
use agentloop::llm::ToolCall;
use agentloop::tools::{
    ToolContext, ToolRegistry, apply_patch, edit_file, read_file, shell, write_file,
};
use agentloop::unstable::{ToolOutcome, prepare_call};
use serde_json::{Value, json};
use support::GENEROUS;

/// Writes one `#[test]` per row: `name: policy, need, …;` runs the attempt
/// `attempts::name`, and `name: policy, need, … => attempt;` runs `attempt` (a function or
/// closure of the fixture and the sandboxed environment), both through [`escape`] (or the
/// prelude named by a first `prelude: path;` line: the remote suite's, `sandbox/remote.rs`,
/// runs the same rows through an exec-server). The policy is a function below returning a
/// [`SandboxPolicy`]; each need is a `fn() -> bool` that prints why the test skips when it
/// answers `false`.
macro_rules! escapes {
    (@attempt $name:ident) => { attempts::$name };
    (@attempt $name:ident $attempt:expr) => { $attempt };
    (prelude: $prelude:path; $($name:ident: $policy:ident $(, $need:ident)* $(=> $attempt:expr)?;)*) => {
        $(
            #[test]
            fn $name() {
                $prelude($policy(), &[$($need),*], escapes!(@attempt $name $($attempt)?));
            }
        )*
    };
    ($($name:ident: $policy:ident $(, $need:ident)* $(=> $attempt:expr)?;)*) => {
        escapes!(prelude: escape; $($name: $policy $(, $need)* $(=> $attempt)?;)*);
    };
}

escapes! {
    // Writes outside the roots and into protected paths.
    a_shell_write_outside_the_roots_is_denied: workspace_write;
    every_file_tool_writing_outside_the_roots_is_denied: workspace_write;
    a_shell_write_into_git_config_hooks_and_agents_md_is_denied: workspace_write;
    every_file_tool_writing_into_protected_paths_is_denied: workspace_write;
    a_shell_write_through_a_symlink_to_outside_is_denied: workspace_write;
    a_symlink_swapped_in_during_file_tool_writes_never_lets_one_escape: workspace_write;
    // The network, other processes, the kernel's attack surface, privileges.
    connect_to_a_listening_loopback_tcp_port_is_denied: workspace_write, have_python;
    a_udp_sendto_is_denied: workspace_write, have_python;
    socket_af_inet6_is_denied: workspace_write, have_python
        => denied("python3 -c 'import socket; socket.socket(socket.AF_INET6)'");
    ptrace_of_a_sibling_is_denied: workspace_write, have_python;
    io_uring_setup_is_denied: workspace_write, have_python;
    a_setuid_binary_gains_no_privileges: workspace_write, have_python, am_root;
    a_child_that_double_forks_and_writes_later_is_denied: workspace_write;
    // Host daemons' UNIX sockets outside the workspace roots (`sandbox/host_sockets.rs`).
    a_listener_in_var_tmp_is_unreachable: workspace_write_and_tmp, have_python;
    a_listener_in_var_tmp_is_unreachable_read_only: read_only, have_python
        => attempts::a_listener_in_var_tmp_is_unreachable;
    a_listener_under_run_is_unreachable: workspace_write_and_tmp, have_python, can_bind_in_run;
    a_listener_under_run_is_unreachable_read_only: read_only, have_python, can_bind_in_run
        => attempts::a_listener_under_run_is_unreachable;
    an_abstract_listener_is_unreachable: workspace_write_and_tmp, have_python;
    an_abstract_listener_is_unreachable_read_only: read_only, have_python
        => attempts::an_abstract_listener_is_unreachable;
    ssh_agents_socket_is_unreachable: workspace_write_and_tmp, have_ssh_agent;
    ssh_agents_socket_is_unreachable_read_only: read_only, have_ssh_agent
        => attempts::ssh_agents_socket_is_unreachable;
    read_only_hides_even_the_workspaces_sockets: read_only, have_python;
    // What must keep working.
    builds_write_target_and_read_the_toolchain: workspace_write_and_tmp;
    tmp_is_writable_only_with_include_tmp: workspace_write_and_tmp;
    git_status_and_diff_work: workspace_write;
    unix_sockets_pipes_and_background_jobs_work: workspace_write, have_python;
    an_allow_listed_socket_connects: workspace_write_and_tmp, have_python;
    an_allow_listed_socket_connects_read_only: read_only, have_python
        => attempts::an_allow_listed_socket_connects;
    a_socket_inside_the_workspace_connects: workspace_write, have_python;
    read_only_lets_read_tools_and_commands_run: read_only;
    the_landlock_abi_is_probed_and_reported: workspace_write;
    a_subagent_inherits_the_parents_sandbox: workspace_write;
}

/// The prelude every row shares: the needs (each prints why it skips), the fixture, and
/// the environment under `policy` (`None`, a printed skip, where the kernel has no
/// Landlock); then the attempt.
fn escape(
    policy: SandboxPolicy,
    needs: &[fn() -> bool],
    attempt: impl FnOnce(&Fixture, LocalExecutionEnvironment),
) {
    if !needs.iter().all(|have| have()) {
        return;
    }
    let f = fixture();
    let Some(env) = sandboxed(&f.ws, policy) else {
        return;
    };
    attempt(&f, env);
}

/// The workspace and the roots given, nothing else writable.
fn workspace_write() -> SandboxPolicy {
    SandboxPolicy::WorkspaceWrite {
        writable_roots: Vec::new(),
        include_tmp: false,
    }
}

/// [`workspace_write`] and `/tmp`: compilers and linkers need a temporary directory (the
/// CLI's default includes it).
fn workspace_write_and_tmp() -> SandboxPolicy {
    SandboxPolicy::WorkspaceWrite {
        writable_roots: Vec::new(),
        include_tmp: true,
    }
}

fn read_only() -> SandboxPolicy {
    SandboxPolicy::ReadOnly
}

/// The attempt of a row that is one shell command, which the sandbox must refuse.
fn denied(command: &'static str) -> impl FnOnce(&Fixture, LocalExecutionEnvironment) {
    move |_, env| assert_denied(&sh(&env, command))
}

/// A workspace `ws` (a git repository with `AGENTS.md`) and `outside/` next to it.
struct Fixture {
    _top: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

fn fixture() -> Fixture {
    let top = tempfile::tempdir().unwrap();
    let ws = top.path().join("ws");
    let outside = top.path().join("outside");
    fs::create_dir(&ws).unwrap();
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret.txt"), "secret\n").unwrap();
    fs::write(ws.join("AGENTS.md"), "be nice\n").unwrap();
    fs::write(ws.join("code.txt"), "one\n").unwrap();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(&ws)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(status.status.success(), "git {args:?}: {status:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "init",
    ]);
    Fixture {
        _top: top,
        ws,
        outside,
    }
}

/// The environment under `policy` with the network off and enforcement required; `None`
/// (and a printed reason) where the kernel has no Landlock.
fn sandboxed(ws: &Path, policy: SandboxPolicy) -> Option<LocalExecutionEnvironment> {
    sandboxed_with(ws, policy, |sandbox| sandbox)
}

/// [`sandboxed`], the sandbox changed by `adjust` first.
fn sandboxed_with(
    ws: &Path,
    policy: SandboxPolicy,
    adjust: impl FnOnce(Sandbox) -> Sandbox,
) -> Option<LocalExecutionEnvironment> {
    let env = LocalExecutionEnvironment::new(ws).unwrap();
    let sandbox = adjust(Sandbox::new(policy).with_network(Network::Off));
    match env.with_sandbox(sandbox) {
        Ok(env) => Some(env),
        Err(e) if e.to_string().contains("Landlock is not available") => {
            eprintln!("skipped: this kernel has no Landlock ({e})");
            None
        }
        Err(e) => panic!("the sandbox cannot be enforced: {e}"),
    }
}

fn run_tool(env: &dyn ExecutionEnvironment, name: &str, args: Value) -> ToolOutcome {
    let mut registry = ToolRegistry::new();
    for tool in [
        write_file(),
        read_file(),
        edit_file(),
        apply_patch(),
        shell(),
    ] {
        registry.register(tool);
    }
    let cancel = CancelToken::new();
    let mut ctx = ToolContext::new(env, "c", &cancel);
    // The sandbox, not the tools' lexical check, must be what refuses.
    ctx.allow_outside_working_dir = true;
    prepare_call(&registry, &ToolCall::new("c", name, args))
        .expect("valid arguments")
        .run(&ctx)
}

fn sh(env: &dyn ExecutionEnvironment, command: &str) -> ToolOutcome {
    run_tool(
        env,
        "shell",
        json!({"command": command, "description": "t", "timeout_ms": 60_000}),
    )
}

/// The command's result says a sandbox refused it.
fn assert_denied(outcome: &ToolOutcome) {
    assert!(
        outcome.text.contains("[sandbox: denied"),
        "no denial in the result: {}",
        outcome.text
    );
}

fn assert_ok(outcome: &ToolOutcome) {
    assert!(
        !outcome.is_error && outcome.text.contains("exit code: 0"),
        "{}",
        outcome.text
    );
}

/// Whether python3 (the socket, ptrace and io_uring attempts are one-liners in it) is on
/// the PATH; without it the test skips with a printed reason, except under CI.
fn have_python() -> bool {
    let found = Command::new("python3")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("AGENTLOOP_CI").is_none(),
            "python3 is missing under CI"
        );
        eprintln!("skipped: python3 is not installed");
    }
    found
}

/// Whether this process runs as root: only root can make a setuid-root binary for the test;
/// otherwise it skips with a printed reason.
fn am_root() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    if !root {
        eprintln!("skipped: making a setuid-root binary needs root");
    }
    root
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn required_without_landlock_is_a_typed_error_before_anything_runs() {
    let f = fixture();
    let sandbox = Sandbox::new(SandboxPolicy::workspace_write()).with_landlock_abi_at_most(0);
    let err = LocalExecutionEnvironment::new(&f.ws)
        .unwrap()
        .with_sandbox(sandbox.clone())
        .unwrap_err();
    assert!(err.missing.iter().any(|m| m.contains("Landlock")), "{err}");
    let env = LocalExecutionEnvironment::new(&f.ws)
        .unwrap()
        .with_sandbox(sandbox.with_enforcement(Enforcement::BestEffort))
        .unwrap();
    assert!(
        env.warnings()
            .iter()
            .any(|w| w.contains("Landlock is not available")),
        "{:?}",
        env.warnings()
    );
    // It runs: seccomp still applies without Landlock.
    assert_ok(&sh(&env, "echo runs"));
}

#[test]
fn best_effort_without_landlock_runs_and_the_session_warns() {
    use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
    use agentloop::session::{EventKind, Session, SessionConfig};

    let f = fixture();
    let env = LocalExecutionEnvironment::new(&f.ws)
        .unwrap()
        .with_sandbox(
            Sandbox::new(SandboxPolicy::workspace_write())
                .with_enforcement(Enforcement::BestEffort)
                .with_landlock_abi_at_most(0),
        )
        .unwrap();
    let model = ScriptedModel::new(vec![ScriptedTurn::text("done")]);
    let client = support::client_for(model);
    let session = Session::new(
        support::session::profile(),
        std::sync::Arc::new(env),
        client,
        SessionConfig::default(),
    )
    .unwrap();
    let mut events = session.events();
    session.submit("hi").unwrap();
    let seen = support::session::collect_input(&mut events);
    let warning = seen.iter().find_map(|e| match &e.kind {
        EventKind::Warning { message, code } if code == "sandbox" => Some(message.clone()),
        _ => None,
    });
    assert!(
        warning
            .as_deref()
            .is_some_and(|w| w.contains("Landlock is not available")),
        "{seen:?}"
    );
}

mod host_sockets;
use host_sockets::{can_bind_in_run, have_ssh_agent};
mod remote;

/// The attempts of the table's rows, each named after its test.
mod attempts {
    pub(super) use super::host_sockets::{
        a_listener_in_var_tmp_is_unreachable, a_listener_under_run_is_unreachable,
        a_socket_inside_the_workspace_connects, an_abstract_listener_is_unreachable,
        an_allow_listed_socket_connects, read_only_hides_even_the_workspaces_sockets,
        ssh_agents_socket_is_unreachable,
    };
    use super::*;

    pub(super) fn a_shell_write_outside_the_roots_is_denied(
        f: &Fixture,
        env: impl ExecutionEnvironment,
    ) {
        let target = f.outside.join("new.txt");
        let outcome = sh(&env, &format!("echo x > {}", target.display()));
        assert_denied(&outcome);
        assert!(!target.exists());
        let outcome = sh(
            &env,
            &format!("echo x >> {}/secret.txt", f.outside.display()),
        );
        assert_denied(&outcome);
        assert_eq!(read(&f.outside.join("secret.txt")), "secret\n");
    }

    pub(super) fn every_file_tool_writing_outside_the_roots_is_denied(
        f: &Fixture,
        env: impl ExecutionEnvironment,
    ) {
        let secret = f.outside.join("secret.txt");
        let new = f.outside.join("new.txt");
        let attempts = [
            ("write_file", json!({"file_path": new, "content": "x"})),
            ("write_file", json!({"file_path": secret, "content": "x"})),
            (
                "edit_file",
                json!({"file_path": secret, "old_string": "secret", "new_string": "x"}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Add File: {}\n+x\n*** End Patch", new.display())}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Update File: {}\n@@\n-secret\n+x\n*** End Patch", secret.display())}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Delete File: {}\n*** End Patch", secret.display())}),
            ),
        ];
        for (tool, args) in attempts {
            let outcome = run_tool(&env, tool, args);
            assert!(outcome.is_error, "{tool}: {}", outcome.text);
            assert!(
                outcome.text.contains("outside the writable roots"),
                "{tool}: {}",
                outcome.text
            );
        }
        assert!(!new.exists());
        assert_eq!(read(&secret), "secret\n");
    }

    pub(super) fn a_shell_write_into_git_config_hooks_and_agents_md_is_denied(
        f: &Fixture,
        env: impl ExecutionEnvironment,
    ) {
        let config = read(&f.ws.join(".git/config"));
        for command in [
            "echo '[core] fsmonitor = evil' >> .git/config",
            "echo evil > .git/hooks/x",
            "echo evil > AGENTS.md",
            "rm AGENTS.md",
            "mv .git gone",
            "mv AGENTS.md moved.md",
        ] {
            let outcome = sh(&env, command);
            assert_denied(&outcome);
        }
        assert_eq!(read(&f.ws.join(".git/config")), config);
        assert!(!f.ws.join(".git/hooks/x").exists());
        assert_eq!(read(&f.ws.join("AGENTS.md")), "be nice\n");
        assert!(!f.ws.join("gone").exists());
    }

    pub(super) fn every_file_tool_writing_into_protected_paths_is_denied(
        f: &Fixture,
        env: impl ExecutionEnvironment,
    ) {
        symlink(".git", f.ws.join("git_link")).unwrap();
        let attempts = [
            (
                "write_file",
                json!({"file_path": ".git/hooks/x", "content": "x"}),
            ),
            (
                "write_file",
                json!({"file_path": "git_link/config", "content": "x"}),
            ),
            (
                "write_file",
                json!({"file_path": "AGENTS.md", "content": "x"}),
            ),
            (
                "write_file",
                json!({"file_path": "CLAUDE.md", "content": "x"}),
            ),
            (
                "edit_file",
                json!({"file_path": "AGENTS.md", "old_string": "nice", "new_string": "evil"}),
            ),
            (
                "apply_patch",
                json!({"patch": "*** Begin Patch\n*** Add File: .git/newdir/x\n+x\n*** End Patch"}),
            ),
            (
                "apply_patch",
                json!({"patch": "*** Begin Patch\n*** Delete File: AGENTS.md\n*** End Patch"}),
            ),
        ];
        for (tool, args) in attempts {
            let outcome = run_tool(&env, tool, args.clone());
            assert!(outcome.is_error, "{tool} {args}: {}", outcome.text);
            assert!(
                outcome.text.contains("protected"),
                "{tool}: {}",
                outcome.text
            );
        }
        assert!(!f.ws.join(".git/hooks/x").exists());
        assert!(
            !f.ws.join(".git/newdir").exists(),
            "no directory made either"
        );
        assert!(!f.ws.join("CLAUDE.md").exists());
        assert_eq!(read(&f.ws.join("AGENTS.md")), "be nice\n");
    }

    pub(super) fn a_shell_write_through_a_symlink_to_outside_is_denied(
        f: &Fixture,
        env: impl ExecutionEnvironment,
    ) {
        symlink(&f.outside, f.ws.join("link")).unwrap();
        let outcome = sh(&env, "echo x > link/escape.txt");
        assert_denied(&outcome);
        let outcome = sh(&env, "echo x >> link/secret.txt");
        assert_denied(&outcome);
        assert!(!f.outside.join("escape.txt").exists());
        assert_eq!(read(&f.outside.join("secret.txt")), "secret\n");
        let outcome = run_tool(
            &env,
            "write_file",
            json!({"file_path": "link/escape.txt", "content": "x"}),
        );
        assert!(outcome.is_error, "{}", outcome.text);
        assert!(!f.outside.join("escape.txt").exists());
    }

    pub(super) fn a_symlink_swapped_in_during_file_tool_writes_never_lets_one_escape(
        f: &Fixture,
        env: LocalExecutionEnvironment,
    ) {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (ws, outside, stop) = (f.ws.clone(), f.outside.clone(), stop.clone());
            thread::Builder::new()
                .name("swapper".into())
                .spawn(move || {
                    let real = ws.join("d.real");
                    fs::create_dir(&real).unwrap();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let _ = symlink(&outside, ws.join("d.link"));
                        let _ = fs::rename(ws.join("d.link"), ws.join("d"));
                        let _ = fs::remove_file(ws.join("d"));
                        let _ = fs::rename(&real, ws.join("d"));
                        let _ = fs::rename(ws.join("d"), &real);
                    }
                })
                .unwrap()
        };
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(3) {
            let _ = env.write_file(Path::new("d/f.txt"), b"x");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
        let names: Vec<_> = fs::read_dir(&f.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["secret.txt"]);
    }

    pub(super) fn connect_to_a_listening_loopback_tcp_port_is_denied(
        _: &Fixture,
        env: LocalExecutionEnvironment,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let outcome = sh(
            &env,
            &format!(
                "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5)'"
            ),
        );
        assert_denied(&outcome);
        listener.set_nonblocking(true).unwrap();
        assert_eq!(listener.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
    }

    pub(super) fn a_udp_sendto_is_denied(_: &Fixture, env: LocalExecutionEnvironment) {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = receiver.local_addr().unwrap().port();
        let outcome = sh(
            &env,
            &format!(
                "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"127.0.0.1\", {port}))'"
            ),
        );
        assert_denied(&outcome);
        receiver.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(
            receiver.recv(&mut buf).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
    }

    pub(super) fn ptrace_of_a_sibling_is_denied(f: &Fixture, env: LocalExecutionEnvironment) {
        // PTRACE_ATTACH (16) to a sibling `sleep`; exit 1 with the errno when refused.
        let script = "import ctypes, os, sys\n\
            libc = ctypes.CDLL(None, use_errno=True)\n\
            pid = int(sys.argv[1])\n\
            r = libc.ptrace(16, pid, 0, 0)\n\
            e = ctypes.get_errno()\n\
            print('ptrace', r, os.strerror(e))\n\
            sys.exit(0 if r == 0 else 1)\n";
        fs::write(f.ws.join("pt.py"), script).unwrap();
        let outcome = sh(&env, "sleep 5 & python3 pt.py $!; r=$?; kill %1; exit $r");
        assert_denied(&outcome);
        assert!(
            outcome.text.contains("ptrace -1 Operation not permitted"),
            "{}",
            outcome.text
        );
    }

    pub(super) fn io_uring_setup_is_denied(f: &Fixture, env: LocalExecutionEnvironment) {
        let script = "import ctypes, os, sys\n\
            libc = ctypes.CDLL(None, use_errno=True)\n\
            params = ctypes.create_string_buffer(120)\n\
            r = libc.syscall(425, 4, params)\n\
            print('io_uring_setup', r, os.strerror(ctypes.get_errno()))\n\
            sys.exit(0 if r >= 0 else 1)\n";
        fs::write(f.ws.join("uring.py"), script).unwrap();
        let outcome = sh(&env, "python3 uring.py");
        assert_denied(&outcome);
        assert!(
            outcome
                .text
                .contains("io_uring_setup -1 Operation not permitted"),
            "{}",
            outcome.text
        );
    }

    pub(super) fn a_setuid_binary_gains_no_privileges(f: &Fixture, env: LocalExecutionEnvironment) {
        let id = f.ws.join("suid-id");
        fs::copy("/usr/bin/id", &id).unwrap();
        fs::set_permissions(&id, fs::Permissions::from_mode(0o4755)).unwrap();
        for dir in [f.ws.as_path(), f.ws.parent().unwrap()] {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        }
        // Drop to nobody, then exec the setuid-root binary: its effective uid says whether
        // the exec gained root.
        let command = "python3 -c 'import os; os.setgid(65534); os.setuid(65534); os.execv(\"./suid-id\", [\"id\", \"-u\"])'";
        let unsandboxed = sh(&LocalExecutionEnvironment::new(&f.ws).unwrap(), command);
        assert!(
            unsandboxed.text.contains("<stdout>\n0\n"),
            "control: {}",
            unsandboxed.text
        );
        let outcome = sh(&env, command);
        assert!(
            outcome.text.contains("<stdout>\n65534\n"),
            "{}",
            outcome.text
        );
    }

    pub(super) fn a_child_that_double_forks_and_writes_later_is_denied(
        f: &Fixture,
        env: LocalExecutionEnvironment,
    ) {
        let target = f.outside.join("late.txt");
        let marker = f.ws.join("late-ran");
        let escaped = f.ws.join("escaped");
        // The command waits until the writer has left its process group (`setsid` has run and
        // exec'd `sh`): until then, the writer is still in the group, which the command's end
        // terminates — under load `setsid` can take longer to start than the drain lasts.
        let outcome = sh(
            &env,
            &format!(
                "( setsid sh -c 'touch {esc}; sleep 1; echo x > {}; echo $? > {}' </dev/null >/dev/null 2>&1 & ) ; \
                 while [ ! -e {esc} ]; do sleep 0.01; done; echo started",
                target.display(),
                marker.display(),
                esc = escaped.display(),
            ),
        );
        assert!(outcome.text.contains("started"), "{}", outcome.text);
        let deadline = Instant::now() + GENEROUS;
        while !marker.exists() {
            assert!(Instant::now() < deadline, "the late writer never ran");
            thread::sleep(Duration::from_millis(100));
        }
        assert_ne!(read(&marker).trim(), "0", "the late write failed");
        assert!(!target.exists());
    }

    pub(super) fn builds_write_target_and_read_the_toolchain(
        f: &Fixture,
        env: LocalExecutionEnvironment,
    ) {
        // Compilers and linkers need a temporary directory: the CLI's default includes /tmp.
        fs::write(f.ws.join("hello.rs"), "fn main() { println!(\"built\"); }").unwrap();
        let outcome = sh(
            &env,
            "mkdir -p target && rustc --edition 2021 -o target/hello hello.rs && ./target/hello && cargo --version >/dev/null",
        );
        assert_ok(&outcome);
        assert!(outcome.text.contains("built"), "{}", outcome.text);
    }

    pub(super) fn tmp_is_writable_only_with_include_tmp(
        f: &Fixture,
        with_tmp: LocalExecutionEnvironment,
    ) {
        let name = format!("/tmp/agentloop-sandbox-{}", std::process::id());
        assert_ok(&sh(&with_tmp, &format!("echo x > {name} && rm {name}")));
        let without = sandboxed(&f.ws, workspace_write()).unwrap();
        assert_denied(&sh(&without, &format!("echo x > {name}")));
        assert!(!Path::new(&name).exists());
    }

    pub(super) fn git_status_and_diff_work(f: &Fixture, env: LocalExecutionEnvironment) {
        fs::write(f.ws.join("code.txt"), "two\n").unwrap();
        let outcome = sh(&env, "git status --short && git diff");
        assert_ok(&outcome);
        assert!(outcome.text.contains("M code.txt"), "{}", outcome.text);
        assert!(outcome.text.contains("+two"), "{}", outcome.text);
    }

    pub(super) fn unix_sockets_pipes_and_background_jobs_work(
        f: &Fixture,
        env: LocalExecutionEnvironment,
    ) {
        let script = "import socket, os\n\
            a, b = socket.socketpair()\n\
            a.send(b'pair'); print(b.recv(4).decode())\n\
            s = socket.socket(socket.AF_UNIX); s.bind('sock'); s.listen(1)\n\
            c = socket.socket(socket.AF_UNIX); c.connect('sock')\n\
            conn, _ = s.accept(); c.sendall(b'unix'); print(conn.recv(4).decode())\n";
        fs::write(f.ws.join("unix.py"), script).unwrap();
        let outcome = sh(
            &env,
            "python3 unix.py && echo piped | tr a-z A-Z && (sleep 0.2; echo job > job.txt) & wait; cat job.txt",
        );
        assert_ok(&outcome);
        for expected in ["pair", "unix", "PIPED", "job"] {
            assert!(
                outcome.text.contains(expected),
                "{expected}: {}",
                outcome.text
            );
        }
    }

    pub(super) fn read_only_lets_read_tools_and_commands_run(
        f: &Fixture,
        env: LocalExecutionEnvironment,
    ) {
        let outcome = sh(
            &env,
            "cat code.txt && ls && git log --oneline | wc -l > /dev/null",
        );
        assert_ok(&outcome);
        let outcome = run_tool(&env, "read_file", json!({"file_path": "code.txt"}));
        assert!(
            !outcome.is_error && outcome.text.contains("one"),
            "{}",
            outcome.text
        );
        assert_denied(&sh(&env, "echo x > new.txt"));
        let outcome = run_tool(
            &env,
            "write_file",
            json!({"file_path": "new.txt", "content": "x"}),
        );
        assert!(
            outcome.is_error && outcome.text.contains("read-only"),
            "{}",
            outcome.text
        );
        assert!(!f.ws.join("new.txt").exists());
    }

    pub(super) fn the_landlock_abi_is_probed_and_reported(
        _: &Fixture,
        env: LocalExecutionEnvironment,
    ) {
        eprintln!("Landlock ABI {}", env.landlock_abi());
        assert!(env.landlock_abi() >= 1);
        assert!(env.warnings().is_empty(), "{:?}", env.warnings());
    }

    pub(super) fn a_subagent_inherits_the_parents_sandbox(
        f: &Fixture,
        env: LocalExecutionEnvironment,
    ) {
        use crate::session::subagents::{KIT, child_ended};
        use agentloop::session::{Session, SessionConfig};
        use support::Server;
        use support::turns::function;

        let target = f.outside.join("from-child.txt");
        let command = format!("echo x > {}", target.display());
        let server = Server::start_routed(
            vec![
                (
                    "PARENT-SANDBOX",
                    vec![
                        KIT.calls(&[function(
                            "p1",
                            "spawn_agent",
                            json!({"task": "TASK-SANDBOX write outside"}),
                        )]),
                        KIT.calls(&[function("p2", "wait", json!({"agent_id": "agent-1"}))]),
                        KIT.text("ok"),
                    ],
                ),
                (
                    "TASK-SANDBOX",
                    vec![
                        KIT.calls(&[function("c1", "shell", json!({ "command": command }))]),
                        KIT.text("tried"),
                    ],
                ),
            ],
            vec![],
        );
        let session = Session::new(
            KIT.profile(),
            std::sync::Arc::new(env),
            KIT.client(&server),
            SessionConfig::default(),
        )
        .unwrap();
        let mut events = session.events();
        session.submit("PARENT-SANDBOX delegate").unwrap();
        let seen = support::session::collect_input(&mut events);
        let child = child_ended(&seen, "agent-1");
        assert_eq!(child[0].tool_name, "shell");
        assert!(
            child[0].text.contains("[sandbox: denied"),
            "{}",
            child[0].text
        );
        assert!(!target.exists());
    }
}
