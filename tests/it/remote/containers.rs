//! Container transports: `docker://` and `kubectl://` URLs checked by the exact argv a
//! stand-in runtime script receives (it records its arguments, then runs the exec-server
//! they name: no daemon or cluster exists here), `podman://` against a real container of
//! the local test image, and a missing runtime refused before anything runs; the
//! exec-server copied into a container that has none, reused, and refused with a clear
//! error by a target that cannot run it.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use agentloop::exec::remote::{
    ContainerOptions, RemoteError, RemoteExecutionEnvironment, Transport,
};
use support::podman::{Container, SERVER_IN_CONTAINER, stripped_server};

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
    wait_until_empty(&container);
}

fn bootstrapping(local: &Path) -> ContainerOptions {
    let mut options = ContainerOptions::new();
    options.bootstrap = Some(local.to_path_buf());
    options
}

/// `inode mtime name` of each file in the bootstrap directory.
fn placed(container: &Container) -> String {
    container.sh("cd /tmp/agentloop && for f in * .[!.]*; do [ -e \"$f\" ] && stat -c '%i %Y %n' \"$f\"; done; true")
}

#[test]
fn podman_places_the_exec_server_on_the_first_connection_and_reuses_it() {
    let Some(container) = Container::start(&[]) else {
        return;
    };
    assert_eq!(
        container.sh("command -v agentloop-exec-server; ls /tmp"),
        "",
        "the image has no exec-server"
    );
    let options = bootstrapping(&stripped_server());
    let url = format!("podman://{}/tmp", container.name);
    let (transport, dir) = Transport::parse_container_url(&url, &options, None).unwrap();
    let env = RemoteExecutionEnvironment::connect(transport.clone(), dir.as_deref()).unwrap();
    assert_eq!(run(&env, "pwd", 20_000).stdout, "/tmp\n");
    let first = placed(&container);
    let sum = std::process::Command::new("sha256sum")
        .arg(options.bootstrap.as_ref().unwrap())
        .output()
        .unwrap();
    let sum = String::from_utf8_lossy(&sum.stdout)[..64].to_string();
    assert!(
        first
            .trim()
            .ends_with(&format!(" agentloop-exec-server-{sum}"))
            && first.lines().count() == 1,
        "one checksummed copy and no upload left over: {first}"
    );
    drop(env);
    wait_until_empty(&container);
    // The next connection starts the same copy: nothing is uploaded or rewritten.
    let env = RemoteExecutionEnvironment::connect(transport, dir.as_deref()).unwrap();
    assert_eq!(run(&env, "echo again", 20_000).stdout, "again\n");
    assert_eq!(placed(&container), first);
    drop(env);
    wait_until_empty(&container);
}

#[test]
fn a_target_that_cannot_run_the_exec_server_gets_a_clear_error() {
    let Some(container) = Container::start(&[]) else {
        return;
    };
    let bin = tempfile::tempdir().unwrap();
    // The same binary marked as an aarch64 ELF (e_machine, offset 18): the kernel refuses it.
    let local = bin.path().join("agentloop-exec-server");
    let mut bytes = fs::read(stripped_server()).unwrap();
    bytes[18..20].copy_from_slice(&183u16.to_le_bytes());
    fs::write(&local, bytes).unwrap();
    let url = format!("podman://{}", container.name);
    let (transport, _) =
        Transport::parse_container_url(&url, &bootstrapping(&local), None).unwrap();
    let err = RemoteExecutionEnvironment::connect(transport, None).unwrap_err();
    let remote = RemoteError::of(&err).expect("a remote error");
    assert!(
        matches!(remote, RemoteError::Bootstrap { .. }),
        "{remote:?}"
    );
    let text = err.to_string();
    assert!(text.contains("cannot run on this x86_64 target"), "{text}");
    assert_eq!(
        placed(&container),
        "",
        "the copy that cannot run is removed"
    );
    wait_until_empty(&container);

    // A directory that cannot be written, and a target without `sh`, say so too.
    let mut options = bootstrapping(&stripped_server());
    options.bootstrap_dir = Some("/proc/agentloop".into());
    let (transport, _) = Transport::parse_container_url(&url, &options, None).unwrap();
    let err = RemoteExecutionEnvironment::connect(transport, None).unwrap_err();
    assert!(
        err.to_string().contains("/proc/agentloop is not writable"),
        "{err}"
    );
    container.sh("rm /usr/bin/sh /usr/bin/dash 2>/dev/null; rm -f /bin/sh");
    let (transport, _) =
        Transport::parse_container_url(&url, &bootstrapping(&local), None).unwrap();
    let err = RemoteExecutionEnvironment::connect(transport, None).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(RemoteError::of(&err), Some(RemoteError::Bootstrap { .. })),
        "{text}"
    );
    assert!(text.contains("\"sh\": executable file not found"), "{text}");
}

/// Waits (bounded) until nothing but the container's init runs in it.
pub(super) fn wait_until_empty(container: &Container) {
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
