//! Faults of a container under a session whose tools run through `podman://`: the
//! container stopped, removed, or its exec-server killed while a `sleep 30` call runs.
//! Each call ends in an error result naming what happened (the runtime is asked what
//! became of the container), the session goes on (the next call reconnects, or says why it
//! cannot), and nothing is left running in the container after the session closes (checked
//! with `podman top`): the supervisor the bootstrap starts ends what a SIGKILLed server ran.

use std::sync::Arc;

use agentloop::exec::remote::{ContainerOptions, RemoteExecutionEnvironment, Transport};
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
