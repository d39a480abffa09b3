//! The escape suite's core through an exec-server: the same rows (`escapes!` with a prelude
//! of its own) run over the plain stdio transport (the exec-server a local child) and over
//! `podman://` into a container of the test image (the exec-server copied in by the
//! bootstrap, podman's default seccomp profile and capabilities), the fixture mounted at
//! its own path so both sides name the same files. With full access the same commands
//! escape. A required sandbox the target cannot enforce (Landlock assumed absent, or
//! filtered by the container's seccomp profile) is refused when connecting, a best-effort
//! one runs with the target's warnings, a server that applies no sandbox is refused, and a
//! command's own policy narrows a full-access connection.

use std::io;
use std::net::TcpListener;

use agentloop::exec::CommandRequest;
use agentloop::exec::remote::{
    ContainerKind, ContainerOptions, RemoteError, RemoteExecutionEnvironment, Transport,
};
use support::podman::{Container, stripped_server};

use super::*;

/// How a test reaches its exec-server; a container lives as long as the value.
enum Via {
    Stdio,
    Podman(Container),
}

impl Via {
    /// The container for `f` (its top directory mounted at its own path, the host's
    /// network so a host port is reachable with the network on); `None` without podman.
    fn podman(f: &Fixture) -> Option<Via> {
        let top = f.ws.parent().unwrap().display().to_string();
        let mount = format!("{top}:{top}");
        Container::start(&["-v", &mount, "--network", "host"]).map(Via::Podman)
    }

    fn connect(&self, f: &Fixture, sandbox: Sandbox) -> io::Result<RemoteExecutionEnvironment> {
        let transport = match self {
            Via::Stdio => {
                Transport::direct(vec![support::programs::exec_server().display().to_string()])
            }
            Via::Podman(container) => {
                let mut options = ContainerOptions::new();
                options.bootstrap = Some(stripped_server());
                Transport::container(ContainerKind::Podman, &container.name, &options, None)?
            }
        };
        RemoteExecutionEnvironment::connect_sandboxed(transport, Some(&f.ws), sandbox)
    }
}

/// The prelude of the remote rows: the needs, the fixture, the environment through `via`
/// under `policy` with the network off, enforcement required; then the attempt.
fn remote_escape(
    via: fn(&Fixture) -> Option<Via>,
    policy: SandboxPolicy,
    needs: &[fn() -> bool],
    attempt: impl FnOnce(&Fixture, RemoteExecutionEnvironment),
) {
    if !needs.iter().all(|have| have()) {
        return;
    }
    let f = fixture();
    let Some(via) = via(&f) else { return };
    let sandbox = Sandbox::new(policy).with_network(Network::Off);
    match via.connect(&f, sandbox) {
        Ok(env) => attempt(&f, env),
        Err(e) if e.to_string().contains("Landlock is not available") => {
            eprintln!("skipped: the target's kernel has no Landlock ({e})");
        }
        Err(e) => panic!("the remote sandbox cannot be applied: {e}"),
    }
}

/// The rows, once for each transport (a module each, so the names repeat).
macro_rules! remote_rows {
    ($module:ident, $via:expr) => {
        mod $module {
            use super::*;

            fn prelude(
                policy: SandboxPolicy,
                needs: &[fn() -> bool],
                attempt: impl FnOnce(&Fixture, RemoteExecutionEnvironment),
            ) {
                remote_escape($via, policy, needs, attempt);
            }

            escapes! {
                prelude: prelude;
                a_shell_write_outside_the_roots_is_denied: workspace_write;
                every_file_tool_writing_outside_the_roots_is_denied: workspace_write;
                a_shell_write_into_git_config_hooks_and_agents_md_is_denied: workspace_write;
                every_file_tool_writing_into_protected_paths_is_denied: workspace_write;
                a_shell_write_through_a_symlink_to_outside_is_denied: workspace_write;
                a_tcp_connect_to_a_host_port_is_denied: workspace_write
                    => tcp_to_a_host_port;
            }

            #[test]
            fn the_same_commands_escape_with_full_access() {
                escape_with_full_access($via);
            }

            #[test]
            fn required_is_refused_and_best_effort_warns_where_the_target_cannot_enforce() {
                unenforceable($via);
            }

            #[test]
            fn a_commands_own_policy_narrows_a_full_access_connection() {
                per_call_policy($via);
            }
        }
    };
}

remote_rows!(stdio, |_| Some(Via::Stdio));
remote_rows!(podman, Via::podman);

/// Without python (the test image has none): bash's `/dev/tcp` to a port listening on the
/// host's loopback (the container shares the host's network).
fn tcp_to_a_host_port(_: &Fixture, env: impl ExecutionEnvironment) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let outcome = sh(&env, &tcp_connect(port));
    assert_denied(&outcome);
    assert!(!outcome.text.contains("connected"), "{}", outcome.text);
}

fn tcp_connect(port: u16) -> String {
    format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")
}

/// The rows' commands with full access: each succeeds, so the sandbox is what stops them.
fn escape_with_full_access(via: fn(&Fixture) -> Option<Via>) {
    let f = fixture();
    let Some(via) = via(&f) else { return };
    let env = via
        .connect(&f, Sandbox::new(SandboxPolicy::FullAccess))
        .unwrap();
    assert_eq!(env.applied_sandbox(), None);
    let outside = f.outside.display();
    for command in [
        format!("echo x > {outside}/new.txt"),
        "echo '# harmless' >> .git/config".to_string(),
        "echo changed > AGENTS.md".to_string(),
    ] {
        assert_ok(&sh(&env, &command));
    }
    assert_eq!(read(&f.outside.join("new.txt")), "x\n");
    assert_eq!(read(&f.ws.join("AGENTS.md")), "changed\n");
    let written = run_tool(
        &env,
        "write_file",
        json!({"file_path": f.outside.join("tool.txt"), "content": "x"}),
    );
    assert!(!written.is_error, "{}", written.text);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let outcome = sh(&env, &tcp_connect(port));
    assert!(outcome.text.contains("connected"), "{}", outcome.text);
}

/// `sandbox` (required) is refused at connect with a [`RemoteError::Sandbox`] saying
/// Landlock is not available there; best-effort, it connects and the target's warning
/// says so. The best-effort environment.
fn refused_required_then_warned(
    via: &Via,
    f: &Fixture,
    sandbox: Sandbox,
) -> RemoteExecutionEnvironment {
    let err = via.connect(f, sandbox.clone()).unwrap_err();
    assert!(
        matches!(RemoteError::of(&err), Some(RemoteError::Sandbox { .. })),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("Landlock is not available"),
        "{err}"
    );
    let env = via
        .connect(f, sandbox.with_enforcement(Enforcement::BestEffort))
        .unwrap();
    let warnings = env.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("Landlock is not available")),
        "{warnings:?}"
    );
    env
}

/// The target's Landlock treated as absent: `Required` fails at connect with a
/// [`RemoteError::Sandbox`] naming it; `BestEffort` connects, the warnings come back to the
/// host and the header text names the sandbox applied.
fn unenforceable(via: fn(&Fixture) -> Option<Via>) {
    let f = fixture();
    let Some(via) = via(&f) else { return };
    let sandbox = Sandbox::new(SandboxPolicy::workspace_write()).with_landlock_abi_at_most(0);
    let env = refused_required_then_warned(&via, &f, sandbox);
    let applied = env.applied_sandbox().unwrap_or_default();
    assert!(
        applied.starts_with("workspace-write, network off") && applied.contains("ABI 0"),
        "{applied}"
    );
    // It runs: seccomp still keeps the network off without Landlock.
    assert_ok(&sh(&env, "echo runs"));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    assert_denied(&sh(&env, &tcp_connect(port)));
}

/// A session's mode (read-only) on a command and a background process of a full-access
/// connection: denied there; without it the same write succeeds.
fn per_call_policy(via: fn(&Fixture) -> Option<Via>) {
    let f = fixture();
    let Some(via) = via(&f) else { return };
    let env = via
        .connect(&f, Sandbox::new(SandboxPolicy::FullAccess))
        .unwrap();
    let request = CommandRequest::new("echo x > mode.txt", Duration::from_secs(60))
        .with_sandbox_policy(SandboxPolicy::ReadOnly);
    let result = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .unwrap();
    assert!(result.sandbox_denied, "{result:?}");
    assert!(!f.ws.join("mode.txt").exists());
    // A background process started under the mode's policy is denied alike.
    let request = CommandRequest::new("echo x > bg.txt", Duration::from_secs(60))
        .with_sandbox_policy(SandboxPolicy::ReadOnly);
    let process = env
        .start_background(&request, 4096, Box::new(|_| {}))
        .unwrap();
    let exit = process.wait(GENEROUS, &CancelToken::new()).unwrap();
    assert!(exit.is_some_and(|r| r.exit_code != Some(0)));
    assert!(!f.ws.join("bg.txt").exists());
    let request = CommandRequest::new("echo x > mode.txt", Duration::from_secs(60));
    let result = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .unwrap();
    assert_eq!(result.exit_code, Some(0), "{result:?}");
}

/// A server that answers `hello` as one from before sandboxes travelled (no
/// `sandbox_applied`): a sandboxed session is refused, a full-access one is not.
#[test]
fn a_server_that_applies_no_sandbox_is_refused() {
    let script = r#"read -r line
id=$(printf '%s' "$line" | sed 's/.*"id":\([0-9]*\).*/\1/')
printf '{"jsonrpc":"2.0","id":%s,"result":{"protocol_version":2,"server":"old-server","working_directory":"/","platform":"linux","os_version":"Linux","max_command_timeout_ms":600000,"max_line_bytes":33554432,"sandbox":["full-access"]}}\n' "$id"
cat > /dev/null"#;
    let old = || Transport::direct(vec!["bash".into(), "-c".into(), script.into()]);
    let sandbox = Sandbox::new(SandboxPolicy::workspace_write());
    let err = RemoteExecutionEnvironment::connect_sandboxed(old(), None, sandbox).unwrap_err();
    assert!(
        matches!(RemoteError::of(&err), Some(RemoteError::Sandbox { .. })),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("`old-server` applies no sandbox"),
        "{err}"
    );
    let open = RemoteExecutionEnvironment::connect(old(), None).unwrap();
    assert_eq!(open.applied_sandbox(), None);
}

/// A container whose seccomp profile answers Landlock's syscalls with `ENOSYS` (a runtime
/// or kernel without it): the exec-server's probe finds no Landlock there, so a required
/// sandbox is refused at connect and a best-effort one runs with the target's warning.
#[test]
fn a_container_that_filters_landlock_refuses_required_and_warns_best_effort() {
    let f = fixture();
    let profile = f.ws.parent().unwrap().join("no-landlock.json");
    let rule = json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{
        "names": ["landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"],
        "action": "SCMP_ACT_ERRNO", "errnoRet": 38}]});
    fs::write(&profile, rule.to_string()).unwrap();
    let top = f.ws.parent().unwrap().display().to_string();
    let mount = format!("{top}:{top}");
    let seccomp = format!("seccomp={}", profile.display());
    let Some(container) = Container::start(&["-v", &mount, "--security-opt", &seccomp]) else {
        return;
    };
    let via = Via::Podman(container);
    let sandbox = Sandbox::new(SandboxPolicy::workspace_write());
    let env = refused_required_then_warned(&via, &f, sandbox);
    assert_ok(&sh(&env, "echo runs"));
}

/// The target's warnings reach the session: a `WARNING` event (code `sandbox`) at start,
/// as for the local sandbox.
#[test]
fn the_targets_sandbox_warnings_are_the_sessions_warning_events() {
    use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
    use agentloop::session::{EventKind, Session, SessionConfig};

    let f = fixture();
    let sandbox = Sandbox::new(SandboxPolicy::workspace_write())
        .with_enforcement(Enforcement::BestEffort)
        .with_landlock_abi_at_most(0);
    let env = Via::Stdio.connect(&f, sandbox).unwrap();
    let model = ScriptedModel::new(vec![ScriptedTurn::text("done")]);
    let session = Session::new(
        support::session::profile(),
        std::sync::Arc::new(env),
        support::client_for(model),
        SessionConfig::default(),
    )
    .unwrap();
    let mut events = session.events();
    session.submit("hi").unwrap();
    let seen = support::session::collect_input(&mut events);
    let warned = seen.iter().any(|e| {
        matches!(&e.kind, EventKind::Warning { message, code }
            if code == "sandbox" && message.contains("Landlock is not available"))
    });
    assert!(warned, "{seen:?}");
}
