//! How a command is started (`exec/process/launch.rs`: a clone sharing the agent's memory until
//! `execve`, the sandbox applied in the child): what the command inherits, with and
//! without the sandbox, and a host whose standard descriptors are closed.

use std::io::ErrorKind;
use std::path::Path;
use std::time::Duration;

use agentloop::CancelToken;
use agentloop::exec::{
    CommandRequest, ExecResult, ExecutionEnvironment, LocalExecutionEnvironment, Network, Sandbox,
    SandboxPolicy,
};

fn run(env: &dyn ExecutionEnvironment, command: &str) -> ExecResult {
    let request = CommandRequest::new(command, Duration::from_secs(20));
    env.exec_command(&request, &|_, _| {}, &CancelToken::new())
        .expect("the command starts")
}

/// The plain environment, and (where the kernel has Landlock) the sandboxed one, with a
/// `.git` so that the sandboxed child is also cloned into its mount namespace.
fn environments(dir: &Path) -> Vec<(&'static str, LocalExecutionEnvironment)> {
    std::fs::create_dir(dir.join(".git")).unwrap();
    let mut envs = vec![("plain", LocalExecutionEnvironment::new(dir).unwrap())];
    let sandbox = Sandbox::new(SandboxPolicy::workspace_write()).with_network(Network::Off);
    match LocalExecutionEnvironment::new(dir)
        .unwrap()
        .with_sandbox(sandbox)
    {
        Ok(env) => envs.push(("sandboxed", env)),
        Err(e) => eprintln!("sandboxed half skipped: {e}"),
    }
    envs
}

/// A hex mask line of `/proc/self/status` as the command saw it.
fn mask(status: &str, name: &str) -> u64 {
    let line = status
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} in {status}"));
    u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
}

#[test]
fn a_command_starts_with_no_signal_blocked_and_sigpipe_at_its_default() {
    // The launcher blocks every signal in the spawning thread around the clone, and the
    // Rust runtime ignores SIGPIPE: the child must undo both, as std's spawn does.
    let dir = tempfile::tempdir().unwrap();
    for (name, env) in environments(dir.path()) {
        let result = run(&env, "cat /proc/self/status");
        assert_eq!(result.exit_code, Some(0), "{name}: {}", result.stderr);
        assert_eq!(
            mask(&result.stdout, "SigBlk:"),
            0,
            "{name}: blocked signals"
        );
        let sigpipe = 1u64 << (libc::SIGPIPE - 1);
        assert_eq!(
            mask(&result.stdout, "SigIgn:") & sigpipe,
            0,
            "{name}: SIGPIPE is ignored"
        );
        // And it behaves so: `yes` dies of SIGPIPE once `head` is done.
        let result = run(&env, "yes | head -n 2; echo \"${PIPESTATUS[0]}\"");
        assert_eq!(result.stdout, "y\ny\n141\n", "{name}");
    }
}

#[test]
fn a_command_is_the_leader_of_its_own_process_group_in_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().canonicalize().unwrap();
    for (name, env) in environments(dir.path()) {
        let result = run(&env, "echo $$; ps -o pgid= -p $$; pwd -P");
        let lines: Vec<&str> = result.stdout.lines().map(str::trim).collect();
        assert_eq!(lines.len(), 3, "{name}: {result:?}");
        assert_eq!(lines[0], lines[1], "{name}: the shell leads its group");
        assert_ne!(
            lines[1],
            // SAFETY: getpgrp cannot fail.
            unsafe { libc::getpgrp() }.to_string(),
            "{name}: not the test's group"
        );
        assert_eq!(Path::new(lines[2]), real, "{name}");
    }
}

#[test]
fn a_command_with_a_nul_byte_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();
    let request = CommandRequest::new("touch made\0here", Duration::from_secs(5));
    let err = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .expect_err("a NUL byte cannot reach execve");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("NUL"), "{err}");
    assert!(!dir.path().join("made").exists());
}

/// With fds 0, 1 and 2 closed, the pipes for the command land on them: the launcher must
/// move the child's ends above 2 before putting them in place (`dup2(1, 1)` would leave
/// the command's stdout close-on-exec). Runs in a copy of this test binary, because it
/// closes the process's own standard descriptors.
#[test]
fn a_host_with_its_standard_descriptors_closed_still_gets_the_commands_output() {
    support::run_ignored_alone("exec::launch::closed_stdio_child");
}

#[test]
#[ignore = "run in a child process by a_host_with_its_standard_descriptors_closed_still_gets_the_commands_output"]
fn closed_stdio_child() {
    let dir = tempfile::tempdir().unwrap();
    let envs = environments(dir.path());
    // SAFETY: dup/close/dup2 on the process's own standard descriptors; this copy of
    // the test binary runs this one test, and nothing prints until they are back.
    let saved = [0, 1, 2].map(|fd| unsafe { libc::dup(fd) });
    unsafe {
        for fd in 0..3 {
            libc::close(fd);
        }
    }
    let request = CommandRequest::new(
        "echo out; echo err >&2; cat; echo end",
        Duration::from_secs(20),
    );
    let results: Vec<(&str, std::io::Result<ExecResult>)> = envs
        .iter()
        .map(|(name, env)| {
            (
                *name,
                env.exec_command(&request, &|_, _| {}, &CancelToken::new()),
            )
        })
        .collect();
    unsafe {
        for (fd, copy) in saved.into_iter().enumerate() {
            libc::dup2(copy, fd as libc::c_int);
            libc::close(copy);
        }
    }
    for (name, result) in results {
        let result = result.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(result.stdout, "out\nend\n", "{name}: {result:?}");
        assert_eq!(result.stderr, "err\n", "{name}: {result:?}");
        assert_eq!(result.exit_code, Some(0), "{name}");
    }
}
