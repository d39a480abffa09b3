//! Forks: a new session from a prefix of the history, with its own id, transcript and
//! budget; parent and child run different follow-ups at the same time and neither sees the
//! other's turns; a fork from a transcript leaves the transcript as it was.

use std::sync::{Arc, Condvar, Mutex};

use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Client, Request, Role};
use agentloop::session::checkpoint::Fork;
use agentloop::session::transcript::{Step, Transcript};
use agentloop::session::{EventKind, Session, SessionConfig, StopReason};

use super::*;

/// The user messages of `request`, in order.
fn users(request: &Request) -> Vec<String> {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.text())
        .collect()
}

/// A model that answers each request with the user messages it saw, so that concurrent
/// sessions can share it.
fn echoing_model() -> ScriptedModel {
    ScriptedModel::dynamic(|request| {
        ScriptedTurn::text(format!("saw: {}", users(request).join(" | ")))
    })
}

/// [`echoing_model`], except that a request whose last user message ends in "follow-up"
/// is answered only once two such requests are in flight (or the generous ceiling passed):
/// two sessions running at the same time meet there, one after the other never do.
fn meeting_model(met: Arc<(Mutex<usize>, Condvar)>) -> ScriptedModel {
    ScriptedModel::dynamic(move |request| {
        let said = users(request);
        if said.last().is_some_and(|u| u.ends_with("follow-up")) {
            let (count, arrived) = &*met;
            let mut count = count.lock().unwrap();
            *count += 1;
            arrived.notify_all();
            let deadline = std::time::Instant::now() + support::GENEROUS;
            while *count < 2 && std::time::Instant::now() < deadline {
                count = arrived
                    .wait_timeout(count, deadline - std::time::Instant::now())
                    .unwrap()
                    .0;
            }
        }
        ScriptedTurn::text(format!("saw: {}", said.join(" | ")))
    })
}

fn parent(
    dir: &std::path::Path,
    state: &std::path::Path,
    model: ScriptedModel,
    config: SessionConfig,
) -> Session {
    let env: Arc<dyn ExecutionEnvironment> = Arc::new(LocalExecutionEnvironment::new(dir).unwrap());
    let config = config.with_transcript(state.join("session.jsonl"));
    Session::new(profile(), env, Client::new().with_provider(model), config).unwrap()
}

#[test]
fn parent_and_fork_run_different_follow_ups_at_once_and_neither_sees_the_others_turns() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let met = Arc::new((Mutex::new(0), Condvar::new()));
    let parent = parent(
        dir.path(),
        state.path(),
        meeting_model(met.clone()),
        SessionConfig::default().with_max_turns(3),
    );
    assert_eq!(
        parent.run("shared start").unwrap().text,
        "saw: shared start"
    );
    let child = parent.fork(Fork::latest()).unwrap();
    assert_ne!(child.id(), parent.id());

    let (parent_said, child_said) = std::thread::scope(|scope| {
        let p = scope.spawn(|| parent.run("parent follow-up").unwrap().text);
        let c = scope.spawn(|| child.run("child follow-up").unwrap().text);
        (p.join().unwrap(), c.join().unwrap())
    });
    assert_eq!(
        *met.0.lock().unwrap(),
        2,
        "both calls were in flight at once"
    );
    assert_eq!(parent_said, "saw: shared start | parent follow-up");
    assert_eq!(child_said, "saw: shared start | child follow-up");

    // Budgets apart: the parent has one call left of three; the child three of its own.
    assert_eq!(parent.run("p3").unwrap().stop_reason, StopReason::Completed);
    assert_eq!(parent.run("p4").unwrap().stop_reason, StopReason::TurnLimit);
    for input in ["c2", "c3"] {
        assert_eq!(child.run(input).unwrap().stop_reason, StopReason::Completed);
    }
    assert_eq!(child.run("c4").unwrap().stop_reason, StopReason::TurnLimit);
    drop((parent, child));

    // Transcripts apart: the child's is its own file, beside the parent's.
    let parent_log = Transcript::read(state.path().join("session.jsonl")).unwrap();
    let child_log = Transcript::read(state.path().join("session.fork-1.jsonl")).unwrap();
    assert_eq!(
        parent_log.user_inputs(),
        ["shared start", "parent follow-up", "p3", "p4"]
    );
    assert_eq!(
        child_log.user_inputs(),
        ["child follow-up", "c2", "c3", "c4"]
    );
    assert_eq!(
        child_log.steps()[0],
        Step::Input("child follow-up".into()),
        "the shared start is a copy in the child's transcript, not an input of it"
    );
    assert_ne!(
        child_log.header().session_id,
        parent_log.header().session_id
    );
}

#[test]
fn a_fork_at_an_input_starts_from_the_history_before_it_and_leaves_the_parent_alone() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let model = echoing_model();
    let parent = parent(dir.path(), state.path(), model, SessionConfig::default());
    for input in ["one", "two", "three"] {
        parent.run(input).unwrap();
    }
    let history = parent.history();
    let mut events = parent.events();
    let child = parent.fork(Fork::at_input(2)).unwrap();
    assert_eq!(parent.history(), history, "the parent is untouched");
    assert_eq!(child.history().len(), 2, "input 1 and its answer");
    assert_eq!(child.run("two again").unwrap().text, "saw: one | two again");
    assert_eq!(
        parent.run("four").unwrap().text,
        "saw: one | two | three | four"
    );
    parent.close();
    let kinds: Vec<&str> = events.by_ref().map(|e| e.kind.name()).collect();
    assert!(
        !kinds.contains(&"rewound"),
        "forking is not a rewind of the parent"
    );
    // The child can rewind within the prefix it got (history only: the files are shared).
    let report = child
        .rewind(agentloop::session::checkpoint::Rewind::to_input(1).history_only())
        .unwrap();
    assert_eq!(report.turns_removed, 4);
    assert!(child.history().is_empty());
}

#[test]
fn a_fork_from_a_transcript_leaves_the_transcript_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let recorded = parent(
        dir.path(),
        state.path(),
        echoing_model(),
        SessionConfig::default(),
    );
    for input in ["one", "two", "three"] {
        recorded.run(input).unwrap();
    }
    drop(recorded);
    let path = state.path().join("session.jsonl");
    let bytes = std::fs::read(&path).unwrap();

    let env: Arc<dyn ExecutionEnvironment> =
        Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let config = SessionConfig::default().with_transcript(state.path().join("fork.jsonl"));
    let fork = Session::fork_from(
        &path,
        Fork::at_input(3),
        profile(),
        env,
        Client::new().with_provider(echoing_model()),
        config,
    )
    .unwrap();
    let mut events = fork.events();
    assert_eq!(fork.run("branch").unwrap().text, "saw: one | two | branch");
    fork.close();
    assert!(events.any(|e| matches!(e.kind, EventKind::SessionEnd { .. })));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the source transcript is unchanged"
    );
    let forked = Transcript::read(state.path().join("fork.jsonl")).unwrap();
    assert_eq!(forked.user_inputs(), ["branch"]);
    assert_eq!(forked.history().len(), 6);
}
