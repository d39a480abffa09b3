//! Container transports: `docker://` and `kubectl://` URLs checked by the exact argv a
//! stand-in runtime script receives (it records its arguments, then runs the exec-server
//! they name: no daemon or cluster exists here), `podman://` against a real container of
//! the local test image, and a missing runtime refused before anything runs.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use agentloop::exec::remote::{ContainerOptions, RemoteExecutionEnvironment, Transport};
use support::podman::{Container, SERVER_IN_CONTAINER};

use super::{run, server_binary};

/// Writes an executable stand-in runtime at `dir/name`: it records its arguments one a
/// line in `dir/argv`, then runs what follows `--` (kubectl) or its last argument (docker).
fn stand_in(dir: &Path, name: &str) -> PathBuf {
    let run = if name == "kubectl" {
        r#"while [ "$1" != "--" ]; do shift; done; shift; exec "$@""#
    } else {
        r#"for last; do :; done; exec "$last""#
    };
    let path = dir.join(name);
    let script = format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$(dirname \"$0\")/argv\"\n{run}\n");
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn recorded(dir: &Path) -> Vec<String> {
    let text = fs::read_to_string(dir.join("argv")).unwrap();
    text.lines().map(str::to_string).collect()
}

#[test]
fn docker_urls_become_docker_exec_with_user_workdir_env_and_extra_args() {
    let bin = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut options = ContainerOptions::new();
    options.runtime = Some(stand_in(bin.path(), "docker"));
    options.user = Some("1000:1000".into());
    options.workdir = Some("/w".into());
    options.env = BTreeMap::from([("MODE".to_string(), "ci".to_string())]);
    options.extra_args = vec!["--privileged=false".into()];
    let server = server_binary().display().to_string();
    let url = format!("docker://task-7{}", work.path().display());
    let (transport, dir) = Transport::parse_container_url(&url, &options, Some(&server)).unwrap();
    assert_eq!(transport.label, "docker://task-7");
    let env = RemoteExecutionEnvironment::connect(transport, dir.as_deref()).unwrap();
    let r = run(&env, "pwd", 20_000);
    assert_eq!(
        r.stdout.trim(),
        work.path().canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(
        recorded(bin.path()),
        [
            "exec",
            "-i",
            "--user",
            "1000:1000",
            "--workdir",
            "/w",
            "--env",
            "MODE=ci",
            "--privileged=false",
            "task-7",
            &server
        ]
    );
}

#[test]
fn kubectl_urls_become_kubectl_exec_with_namespace_container_and_env() {
    let bin = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut options = ContainerOptions::new();
    options.runtime = Some(stand_in(bin.path(), "kubectl"));
    options.env = BTreeMap::from([("MARK".to_string(), "seen".to_string())]);
    let server = server_binary().display().to_string();
    let url = format!("kubectl://tasks/pod-3/tools/{}", work.path().display());
    let (transport, dir) = Transport::parse_container_url(&url, &options, Some(&server)).unwrap();
    assert_eq!(transport.label, "kubectl://tasks/pod-3/tools");
    assert_eq!(dir.as_deref(), Some(work.path()));
    let env = RemoteExecutionEnvironment::connect(transport, dir.as_deref()).unwrap();
    // `env MARK=seen` really ran before the server: its commands see the variable.
    let r = run(&env, "echo $MARK; pwd", 20_000);
    let here = work.path().canonicalize().unwrap();
    assert_eq!(r.stdout, format!("seen\n{}\n", here.display()));
    assert_eq!(
        recorded(bin.path()),
        [
            "exec",
            "-i",
            "-n",
            "tasks",
            "-c",
            "tools",
            "pod-3",
            "--",
            "env",
            "MARK=seen",
            &server
        ]
    );
}

#[test]
fn a_missing_runtime_binary_is_refused_before_anything_runs() {
    let mut options = ContainerOptions::new();
    options.runtime = Some("/nonexistent/bin/podman".into());
    let err = Transport::parse_container_url("podman://ctr/src", &options, None).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(err.to_string().contains("/nonexistent/bin/podman"), "{err}");
}

#[test]
fn podman_urls_reach_an_exec_server_in_a_real_container() {
    let Some(container) = Container::with_server(&server_binary(), &[]) else {
        return;
    };
    let mut options = ContainerOptions::new();
    options.workdir = Some("/tmp".into());
    options.env = BTreeMap::from([("MARK".to_string(), "in-container".to_string())]);
    let url = format!("podman://{}/work", container.name);
    let (transport, dir) =
        Transport::parse_container_url(&url, &options, Some(SERVER_IN_CONTAINER)).unwrap();
    assert_eq!(transport.label, format!("podman://{}", container.name));
    let env = RemoteExecutionEnvironment::connect(transport, dir.as_deref()).unwrap();
    // The container's own pid 1 (its `sleep infinity`), its /work, the --env variable.
    let r = run(
        &env,
        "tr '\\0' ' ' < /proc/1/cmdline; echo; pwd; echo $MARK",
        20_000,
    );
    assert_eq!(r.stdout, "/bin/sleep infinity \n/work\nin-container\n");
    assert!(!container.processes().is_empty(), "the exec-server runs");
    drop(env);
    let deadline = std::time::Instant::now() + support::GENEROUS;
    while !container.processes().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "left running: {:?}",
            container.processes()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
