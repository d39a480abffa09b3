//! A command's own sandbox policy (`CommandRequest::sandbox`, what a session's mode sets)
//! on the local environment: it tightens any environment, loosens only up to the ceiling
//! the host set, and a policy the kernel cannot enforce fails the command instead of
//! running it open. Real `bash`, real files, the real Landlock sandbox.

use std::path::Path;
use std::time::Duration;

use agentloop::CancelToken;
use agentloop::exec::{
    CommandRequest, ExecResult, ExecutionEnvironment, LocalExecutionEnvironment, Sandbox,
    SandboxPolicy,
};

fn run(env: &dyn ExecutionEnvironment, request: CommandRequest) -> ExecResult {
    env.exec_command(&request, &|_, _| {}, &CancelToken::new())
        .expect("the command starts")
}

fn touch(name: &str) -> CommandRequest {
    CommandRequest::new(format!("touch {name}"), Duration::from_secs(10))
}

/// The environment sandboxed to its workspace (without `/tmp`, so that another temporary
/// directory is outside); `None` (with the reason printed) where the kernel has no Landlock.
fn workspace(dir: &Path) -> Option<LocalExecutionEnvironment> {
    let env = LocalExecutionEnvironment::new(dir).unwrap();
    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: Vec::new(),
        include_tmp: false,
    };
    match env.with_sandbox(Sandbox::new(policy)) {
        Ok(env) => Some(env),
        Err(e) if e.to_string().contains("Landlock is not available") => {
            eprintln!("skipped: this kernel has no Landlock ({e})");
            None
        }
        Err(e) => panic!("the sandbox cannot be enforced: {e}"),
    }
}

#[test]
fn a_read_only_request_keeps_a_command_of_an_unsandboxed_environment_from_writing() {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();
    if workspace(dir.path()).is_none() {
        return;
    }
    let refused = run(
        &env,
        touch("x").with_sandbox_policy(SandboxPolicy::ReadOnly),
    );
    assert_ne!(refused.exit_code, Some(0), "{refused:?}");
    assert!(refused.sandbox_denied, "{refused:?}");
    assert!(!dir.path().join("x").exists());
    // Reads still work, and the next command without a policy of its own writes again:
    // the policy was the call's, not the environment's.
    std::fs::write(dir.path().join("seen.txt"), "seen\n").unwrap();
    let read = CommandRequest::new("cat seen.txt", Duration::from_secs(10))
        .with_sandbox_policy(SandboxPolicy::ReadOnly);
    assert_eq!(run(&env, read).stdout, "seen\n");
    assert_eq!(run(&env, touch("y")).exit_code, Some(0));
    assert!(dir.path().join("y").exists());
}

#[test]
fn full_access_asked_of_a_sandboxed_environment_is_clamped_to_its_own_policy() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let Some(env) = workspace(dir.path()) else {
        return;
    };
    let target = outside.path().join("escaped");
    let request =
        touch(&target.display().to_string()).with_sandbox_policy(SandboxPolicy::FullAccess);
    let result = run(&env, request);
    assert_ne!(result.exit_code, Some(0), "{result:?}");
    assert!(!target.exists(), "the host allowed no loosening");
}

#[test]
fn full_access_within_the_hosts_ceiling_loosens_the_sandbox_for_that_command_only() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let Some(env) = workspace(dir.path()) else {
        return;
    };
    let env = env.with_per_call_policy_up_to(SandboxPolicy::FullAccess);
    let target = outside.path().join("allowed");
    let shown = target.display().to_string();
    let loosened = run(
        &env,
        touch(&shown).with_sandbox_policy(SandboxPolicy::FullAccess),
    );
    assert_eq!(loosened.exit_code, Some(0), "{loosened:?}");
    assert!(target.exists());
    // The same command under the environment's own policy is still refused.
    std::fs::remove_file(&target).unwrap();
    let own = run(&env, touch(&shown));
    assert_ne!(own.exit_code, Some(0), "{own:?}");
    assert!(!target.exists());
    // And a tighter request still tightens.
    let read_only = run(
        &env,
        touch("inside").with_sandbox_policy(SandboxPolicy::ReadOnly),
    );
    assert!(read_only.sandbox_denied, "{read_only:?}");
    assert!(!dir.path().join("inside").exists());
}

#[test]
fn a_policy_the_kernel_cannot_enforce_fails_the_command_instead_of_running_it_open() {
    let dir = tempfile::tempdir().unwrap();
    // A host that runs with full access and treats the kernel as having no Landlock: a
    // read-only request cannot be enforced, and with the default enforcement (required)
    // the command fails instead of running unconfined.
    let open = || {
        LocalExecutionEnvironment::new(dir.path())
            .unwrap()
            .with_sandbox(Sandbox::new(SandboxPolicy::FullAccess).with_landlock_abi_at_most(0))
            .unwrap()
    };
    let err = open()
        .exec_command(
            &touch("x").with_sandbox_policy(SandboxPolicy::ReadOnly),
            &|_, _| {},
            &CancelToken::new(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("Landlock"), "{err}");
    assert!(!dir.path().join("x").exists());
    // Best effort, the host's choice, runs it with what can be enforced (seccomp).
    let best_effort = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_sandbox(
            Sandbox::new(SandboxPolicy::FullAccess)
                .with_landlock_abi_at_most(0)
                .with_enforcement(agentloop::exec::Enforcement::BestEffort),
        )
        .unwrap();
    let ran = run(
        &best_effort,
        touch("y").with_sandbox_policy(SandboxPolicy::ReadOnly),
    );
    assert_eq!(ran.exit_code, Some(0), "{ran:?}");
    // Without a policy of its own the command runs as the host configured.
    assert_eq!(run(&open(), touch("z")).exit_code, Some(0));
}
