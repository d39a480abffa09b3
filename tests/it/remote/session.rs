//! A session whose tools run through RemoteExecutionEnvironment: the three-round task
//! (shell writes a file, read_file reads it, the model says done) over each transport,
//! and a transport killed mid-command: the call ends in an error result the model sees,
//! the session lives on, and the next call reconnects.

use agentloop::exec::remote::RemoteExecutionEnvironment;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Session, SessionConfig, SessionEvent};
use agentloop::tools;
use serde_json::json;
use std::sync::Arc;

use super::{Fixture, Via, assert_gone, pids_in, running};
use support::session::{collect_input, collect_until};

pub(super) fn session(
    env: Arc<RemoteExecutionEnvironment>,
    turns: Vec<ScriptedTurn>,
) -> (Session, ScriptedModel) {
    let profile = ProviderProfile::new("scripted", "scripted-model")
        .with_tool(tools::shell())
        .with_tool(tools::read_file())
        .with_tool(tools::write_file());
    let model = ScriptedModel::new(turns);
    let client = support::client_for(model.clone());
    let session = Session::new(profile, env, client, SessionConfig::default()).unwrap();
    (session, model)
}

/// `(tool_name, is_error, output or error)` of each finished call.
pub(super) fn tool_ends(events: &[SessionEvent]) -> Vec<(String, bool, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnd {
                tool_name,
                is_error,
                output,
                error,
                ..
            } => Some((
                tool_name.clone(),
                *is_error,
                output.clone().or(error.clone()).unwrap_or_default(),
            )),
            _ => None,
        })
        .collect()
}

fn three_round_task(via: Via) {
    let Some(f) = Fixture::new(via) else { return };
    let Fixture {
        env,
        dir,
        server_pid,
        sshd: _sshd,
        container: _container,
    } = f;
    let env = Arc::new(env);
    let (session, model) = session(
        Arc::clone(&env),
        vec![
            ScriptedTurn::tool_call("shell", json!({"command": "echo hello > out.txt"})),
            ScriptedTurn::tool_call("read_file", json!({"file_path": "out.txt"})),
            ScriptedTurn::text("done"),
        ],
    );
    let mut events = session.events();
    let outcome = session
        .run("write hello to out.txt, read it back, then say done")
        .unwrap();
    assert_eq!(outcome.text, "done");
    let ends = tool_ends(&collect_input(&mut events));
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert_eq!((ends[0].0.as_str(), ends[0].1), ("shell", false));
    assert_eq!((ends[1].0.as_str(), ends[1].1), ("read_file", false));
    assert!(ends[1].2.contains("hello"), "{ends:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "hello\n"
    );
    // The system prompt names the remote working directory.
    let first = format!("{:?}", model.requests()[0].messages);
    assert!(first.contains(&dir.path().display().to_string()), "{first}");
    drop(session);
    drop(env);
    assert_gone(server_pid);
}

#[test]
fn stdio_the_three_round_task_completes() {
    three_round_task(Via::Stdio);
}

#[test]
fn ssh_the_three_round_task_completes() {
    three_round_task(Via::Ssh);
}

#[test]
fn podman_the_three_round_task_completes() {
    three_round_task(Via::Podman);
}

/// Kills the transport child while a command sleeps; the session reports an error result,
/// goes on, and its next command reconnects.
fn transport_killed_mid_command(via: Via) {
    let Some(f) = Fixture::new(via) else { return };
    let Fixture {
        env,
        dir: _dir,
        server_pid,
        sshd: _sshd,
        container: _container,
    } = f;
    let env = Arc::new(env);
    let (session, model) = session(
        Arc::clone(&env),
        vec![
            ScriptedTurn::tool_call(
                "shell",
                json!({"command": "sleep 30 & echo \"pids $$ $!\"; wait", "timeout_ms": 60_000}),
            ),
            ScriptedTurn::text("the connection was lost"),
            ScriptedTurn::tool_call("shell", json!({"command": "echo reconnected"})),
            ScriptedTurn::text("back"),
        ],
    );
    let mut events = session.events();
    session.submit("sleep").unwrap();
    let seen = collect_until(
        &mut events,
        |e| matches!(&e.kind, EventKind::ToolCallOutputDelta { delta, .. } if delta.contains("pids ")),
    );
    let EventKind::ToolCallOutputDelta { delta, .. } = &seen.last().unwrap().kind else {
        unreachable!()
    };
    let pids = pids_in(delta);
    let transport = env.transport_pid().expect("connected") as i32;
    // SAFETY: `transport` is the transport child this test's environment started.
    unsafe { libc::kill(transport, libc::SIGKILL) };
    let first = collect_input(&mut events);
    let ends = tool_ends(&first);
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert!(ends[0].1, "the call must fail: {ends:?}");
    assert!(
        ends[0].2.contains("connection to the exec-server"),
        "{ends:?}"
    );
    // The model saw the error and answered; the session goes on.
    let second = format!("{:?}", model.requests()[1].messages);
    assert!(second.contains("connection to the exec-server"), "{second}");
    match via {
        // ssh died: sshd closes the server's input, the server ends the command's group.
        // `podman exec` died: conmon closes it the same way.
        Via::Ssh | Via::Podman => {
            assert_gone(server_pid);
            pids.iter().for_each(|p| assert_gone(*p));
        }
        // The server itself was killed (SIGKILL, no chance to clean up): documented.
        Via::Stdio => assert!(!running(server_pid)),
    }
    let outcome = session.run("again").unwrap();
    assert_eq!(outcome.text, "back");
    let ends = tool_ends(&collect_input(&mut events));
    assert!(
        ends.iter().any(|e| !e.1 && e.2.contains("reconnected")),
        "{ends:?}"
    );
    assert_ne!(env.transport_pid(), Some(transport as u32));
    // What the killed server could not end (stdio only) is ended here.
    for pid in pids.iter().filter(|p| running(**p)) {
        // SAFETY: these are processes this test's command started.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    drop(session);
    drop(env);
}

#[test]
fn stdio_a_killed_server_fails_the_call_and_the_session_reconnects() {
    transport_killed_mid_command(Via::Stdio);
}

#[test]
fn ssh_a_killed_ssh_client_fails_the_call_and_leaves_nothing_remote() {
    transport_killed_mid_command(Via::Ssh);
}

#[test]
fn podman_a_killed_podman_exec_fails_the_call_and_leaves_nothing_in_the_container() {
    transport_killed_mid_command(Via::Podman);
}
