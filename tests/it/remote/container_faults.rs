//! Faults of a container under a session whose tools run through `podman://`: the
//! container stopped, removed, or its exec-server killed while a `sleep 30` call runs.
//! Each call ends in an error result naming what happened (the runtime is asked what
//! became of the container), the session goes on (the next call reconnects, or says why it
//! cannot), and nothing is left running in the container after the session closes (checked
//! with `podman top`): the supervisor the bootstrap starts ends what a SIGKILLed server ran.
//! A container stopped mid-call and started again is reconnected to by the next call; a
//! command over the container's memory limit (`--memory 64m`) is OOM-killed (SIGKILL) and
//! the next call runs.

use std::sync::Arc;
use std::time::Duration;

use agentloop::CancelToken;
use agentloop::exec::remote::{
    ContainerOptions, RemoteError, RemoteExecutionEnvironment, Transport,
};
use agentloop::exec::{CommandRequest, ExecutionEnvironment};
use agentloop::llm::scripted::ScriptedTurn;
use agentloop::session::EventKind;
use serde_json::json;
use support::podman::{Container, podman, stripped_server};
use support::session::{collect_input, collect_until};

use super::containers::wait_until_empty;
use super::session::{session, tool_ends};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Stop,
    Remove,
    KillServer,
}

fn fault_mid_sleep(fault: Fault) {
    let Some(container) = Container::start(&[]) else {
        return;
    };
    let mut options = ContainerOptions::new();
    options.bootstrap = Some(stripped_server());
    let url = format!("podman://{}/tmp", container.name);
    let (transport, dir) = Transport::parse_container_url(&url, &options, None).unwrap();
    let env = Arc::new(RemoteExecutionEnvironment::connect(transport, dir.as_deref()).unwrap());
    let (session, model) = session(
        Arc::clone(&env),
        vec![
            ScriptedTurn::tool_call(
                "shell",
                json!({"command": "echo \"server $PPID\"; sleep 30", "timeout_ms": 60_000}),
            ),
            ScriptedTurn::text("the call failed"),
            ScriptedTurn::tool_call("shell", json!({"command": "echo after"})),
            ScriptedTurn::text("back"),
        ],
    );
    let mut events = session.events();
    session.submit("sleep").unwrap();
    let seen = collect_until(
        &mut events,
        |e| matches!(&e.kind, EventKind::ToolCallOutputDelta { delta, .. } if delta.contains("server ")),
    );
    let EventKind::ToolCallOutputDelta { delta, .. } = &seen.last().unwrap().kind else {
        unreachable!()
    };
    let server_pid = delta.trim().trim_start_matches("server ").to_string();
    let name = container.name.as_str();
    let done = match fault {
        Fault::Stop => podman(&["stop", "-t", "1", name]),
        Fault::Remove => podman(&["rm", "-f", "-t", "0", name]),
        Fault::KillServer => podman(&["exec", name, "sh", "-c", &format!("kill -9 {server_pid}")]),
    };
    assert!(done.status.success(), "{fault:?}: {done:?}");
    let ends = tool_ends(&collect_input(&mut events));
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert!(ends[0].1, "the call must fail: {ends:?}");
    // What the runtime says when asked: `stopped` while podman finishes a stop, `exited`
    // after it (also while `rm -f` is still removing), no such container once removed.
    let causes: &[&str] = match fault {
        Fault::Stop => &["container is: stopped", "container is: exited"],
        Fault::Remove => &[
            "no such container",
            "container is: exited",
            "container is: stopped",
        ],
        Fault::KillServer => &["the runtime says the container is: running"],
    };
    assert!(
        causes.iter().any(|c| ends[0].2.contains(c)),
        "{fault:?}: {ends:?}"
    );
    let second = format!("{:?}", model.requests()[1].messages);
    assert!(second.contains("connection to the exec-server"), "{second}");
    // The session goes on: its next call reconnects, or says why it cannot.
    let outcome = session.run("again").unwrap();
    assert_eq!(outcome.text, "back");
    let ends = tool_ends(&collect_input(&mut events));
    assert_eq!(ends.len(), 1, "{ends:?}");
    match fault {
        // The container is gone or stopped: the reconnection says why, in podman's words.
        Fault::Stop => assert!(
            ends[0].1 && ends[0].2.contains("container state improper"),
            "{ends:?}"
        ),
        Fault::Remove => {
            let said = ["no such container", "container state improper"];
            assert!(
                ends[0].1 && said.iter().any(|s| ends[0].2.contains(s)),
                "{ends:?}"
            )
        }
        Fault::KillServer => assert!(!ends[0].1 && ends[0].2.contains("after"), "{ends:?}"),
    }
    drop(session);
    drop(env);
    // Nothing is left: the new exec-server ended with the session, and the `sleep 30` the
    // SIGKILLed one ran was ended by its supervisor (the container gone or stopped holds
    // nothing either).
    if fault == Fault::KillServer {
        wait_until_empty(&container);
    }
}

#[test]
fn podman_stop_mid_call_fails_the_call_and_the_session_goes_on() {
    fault_mid_sleep(Fault::Stop);
}

#[test]
fn podman_rm_mid_call_fails_the_call_and_the_session_goes_on() {
    fault_mid_sleep(Fault::Remove);
}

#[test]
fn a_killed_exec_server_mid_call_fails_the_call_and_leaves_nothing_running() {
    fault_mid_sleep(Fault::KillServer);
}

#[test]
fn a_container_started_again_is_reconnected_to_by_the_next_call() {
    let Some(container) = Container::start(&[]) else {
        return;
    };
    let mut options = ContainerOptions::new();
    options.bootstrap = Some(stripped_server());
    let url = format!("podman://{}/tmp", container.name);
    let (transport, dir) = Transport::parse_container_url(&url, &options, None).unwrap();
    let env = RemoteExecutionEnvironment::connect(transport, dir.as_deref()).unwrap();
    let name = container.name.as_str();
    // The call in flight fails with what the runtime says.
    let failed = std::thread::scope(|s| {
        let call = s.spawn(|| {
            let request = CommandRequest::new("sleep 30", Duration::from_secs(60));
            env.exec_command(&request, &|_, _| {}, &CancelToken::new())
        });
        std::thread::sleep(Duration::from_millis(300));
        let stopped = podman(&["stop", "-t", "1", name]);
        assert!(stopped.status.success(), "{stopped:?}");
        call.join().unwrap()
    });
    let error = failed.expect_err("the call in flight fails");
    assert!(RemoteError::of(&error).is_some(), "{error}");
    let said = error.to_string();
    assert!(
        said.contains("container is: stopped") || said.contains("container is: exited"),
        "{said}"
    );
    // Started again, the next call reconnects (the copy in /tmp is reused or placed again).
    let started = podman(&["start", name]);
    assert!(started.status.success(), "{started:?}");
    assert_eq!(super::run(&env, "echo back", 20_000).stdout, "back\n");
    drop(env);
    wait_until_empty(&container);
}

#[test]
fn a_command_over_the_containers_memory_limit_is_killed_and_the_session_goes_on() {
    // cgroup memory limits work here (runc, hybrid layout): the kernel kills the largest
    // process of the container's group, the command's shell; the exec-server lives on.
    let Some(container) = Container::start(&["--memory", "64m"]) else {
        return;
    };
    let mut options = ContainerOptions::new();
    options.bootstrap = Some(stripped_server());
    let url = format!("podman://{}/tmp", container.name);
    let (transport, dir) = Transport::parse_container_url(&url, &options, None).unwrap();
    let env = RemoteExecutionEnvironment::connect(transport, dir.as_deref()).unwrap();
    let hog = "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo ${#x}";
    let r = super::run(&env, hog, 60_000);
    assert_eq!(r.signal, Some(9), "OOM-killed: {r:?}");
    assert!(r.stdout.is_empty(), "{r:?}");
    let oom = container.sh("cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || true");
    assert!(!oom.contains("oom_kill 0"), "{oom}");
    assert_eq!(super::run(&env, "echo alive", 20_000).stdout, "alive\n");
    drop(env);
    wait_until_empty(&container);
}

#[test]
fn an_image_without_bash_runs_commands_with_sh_and_bash_syntax_fails_visibly() {
    // The exec-server is placed with `sh`, and runs commands with `/bin/sh` when the
    // target has no bash (as locally): the session works; bash-only syntax fails as sh
    // says, in the command's own output.
    let Some(container) = Container::start(&[]) else {
        return;
    };
    container.sh("rm -f /usr/bin/bash /bin/bash");
    assert_eq!(container.sh("command -v bash || echo none").trim(), "none");
    let mut options = ContainerOptions::new();
    options.bootstrap = Some(stripped_server());
    let url = format!("podman://{}/tmp", container.name);
    let (transport, dir) = Transport::parse_container_url(&url, &options, None).unwrap();
    let env = RemoteExecutionEnvironment::connect(transport, dir.as_deref()).unwrap();
    let r = super::run(&env, "echo \"[$BASH_VERSION]\"", 20_000);
    assert_eq!((r.exit_code, r.stdout.as_str()), (Some(0), "[]\n"), "{r:?}");
    let r = super::run(&env, "[[ 1 == 1 ]] && echo bash", 20_000);
    assert_ne!(r.exit_code, Some(0), "{r:?}");
    assert!(r.stderr.contains("[[: not found"), "{r:?}");
    drop(env);
    wait_until_empty(&container);
}
