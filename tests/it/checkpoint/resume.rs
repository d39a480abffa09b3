//! Checkpoints outlive the process: a resumed session rewinds to inputs recorded before the
//! resume; a strict replay of a transcript with a rewind reproduces it; and the store keeps
//! within its cap, dropping the oldest checkpoints with a marker.

use std::path::Path;
use std::sync::Arc;

use agentloop::ErrorKind;
use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
use agentloop::llm::Client;
use agentloop::llm::scripted::{ReplayMode, ScriptedModel, ScriptedTurn};
use agentloop::session::checkpoint::{CheckpointConfig, Rewind};
use agentloop::session::transcript::{Step, Transcript};
use agentloop::session::{Session, SessionConfig, Turn};

use super::*;

fn user_inputs(session: &Session) -> Vec<String> {
    session
        .history()
        .turns()
        .iter()
        .filter_map(|t| match t {
            Turn::User(u) => Some(u.content.clone()),
            _ => None,
        })
        .collect()
}

fn resume_in(dir: &Path, transcript: &Path, turns: Vec<ScriptedTurn>) -> Session {
    let env: Arc<dyn ExecutionEnvironment> = Arc::new(LocalExecutionEnvironment::new(dir).unwrap());
    let client = Client::new().with_provider(ScriptedModel::new(turns));
    Session::resume(transcript, profile(), env, client, checkpoints()).unwrap()
}

#[test]
fn a_resumed_session_rewinds_files_and_history_to_inputs_recorded_before_the_resume() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    seeded_repo(dir.path());
    let first = vec![
        write("new.txt", "new\n"),
        ScriptedTurn::text("one"),
        shell("sed -i 's/alpha/ALPHA/' a.txt && rm c.txt"),
        ScriptedTurn::text("two"),
    ];
    let before_one = tree(dir.path());
    let session = session_in(dir.path(), state.path(), first, checkpoints());
    session.run("one").unwrap();
    let before_two = tree(dir.path());
    session.run("two").unwrap();
    drop(session);

    let transcript = state.path().join("session.jsonl");
    let resumed = resume_in(
        dir.path(),
        &transcript,
        vec![edit("b.txt", "bravo", "BRAVO"), ScriptedTurn::text("three")],
    );
    resumed.run("three").unwrap();
    assert_eq!(user_inputs(&resumed), ["one", "two", "three"]);

    let report = resumed.rewind(Rewind::to_input(2)).unwrap();
    assert!(report.conflicts.is_empty(), "{report:#?}");
    assert_eq!(
        differences(&tree(dir.path()), &before_two),
        Vec::<String>::new()
    );
    assert_eq!(user_inputs(&resumed), ["one"]);
    resumed.rewind(Rewind::to_input(1)).unwrap();
    assert_eq!(
        differences(&tree(dir.path()), &before_one),
        Vec::<String>::new()
    );
    assert!(resumed.history().is_empty());
    drop(resumed);

    // The transcript says what happened, and a later resume continues from it.
    let read = Transcript::read(&transcript).unwrap();
    assert!(read.history().is_empty());
    let again = resume_in(dir.path(), &transcript, vec![]);
    let err = again.rewind(Rewind::to_input(1)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{err}");
}

#[test]
fn a_strict_replay_of_a_session_with_a_rewind_reproduces_it() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    seed(dir.path());
    let initial = tree(dir.path());
    let turns = vec![
        write("one.txt", "1\n"),
        ScriptedTurn::text("wrote one"),
        edit("a.txt", "alpha", "ALPHA"),
        ScriptedTurn::text("edited a"),
        write("three.txt", "3\n"),
        ScriptedTurn::text("wrote three"),
    ];
    let session = session_in(dir.path(), state.path(), turns, checkpoints());
    session.run("first").unwrap();
    session.run("second").unwrap();
    session.rewind(Rewind::to_input(2)).unwrap();
    session.run("third").unwrap();
    let recorded_tree = tree(dir.path());
    let recorded_history = session.history().to_messages();
    drop(session);

    let transcript = Transcript::read(state.path().join("session.jsonl")).unwrap();
    assert_eq!(
        transcript.steps(),
        [
            Step::Input("first".into()),
            Step::Input("second".into()),
            Step::Rewind(Rewind::to_input(2)),
            Step::Input("third".into()),
        ]
    );
    // Replay in the same directory, from the same start.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        match std::fs::symlink_metadata(&path).unwrap().is_dir() {
            true => std::fs::remove_dir_all(&path).unwrap(),
            false => std::fs::remove_file(&path).unwrap(),
        }
    }
    seed(dir.path());
    assert_eq!(tree(dir.path()), initial);
    let replay_store = tempfile::tempdir().unwrap();
    let model = ScriptedModel::from_transcript(&transcript, ReplayMode::Strict);
    let env: Arc<dyn ExecutionEnvironment> =
        Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
    let config = SessionConfig::default()
        .with_loop_detection(false)
        .with_checkpoints(CheckpointConfig::enabled().with_dir(replay_store.path()));
    let replay = Session::new(profile(), env, Client::new().with_provider(model), config).unwrap();
    for step in transcript.steps() {
        match step {
            Step::Input(text) => {
                replay.run(text.clone()).unwrap(); // Err on the first difference
            }
            Step::Rewind(rewind) => {
                replay.rewind(*rewind).unwrap();
            }
            other => panic!("a step this test does not know: {other:?}"),
        }
    }
    assert_eq!(tree(dir.path()), recorded_tree);
    assert_eq!(replay.history().to_messages(), recorded_history);
}

#[test]
fn the_store_keeps_within_its_cap_over_a_thousand_files_by_dropping_the_oldest_checkpoints() {
    const FILES: usize = 1000;
    const PER_INPUT: usize = 100;
    const CAP: u64 = 32 << 20;
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let filler = "x".repeat(100 * 1024 - 7);
    for i in 0..FILES {
        put(
            dir.path(),
            &format!("f{i:04}.txt"),
            &format!("line 0\n{filler}"),
            0o644,
        );
    }
    let mut turns = Vec::new();
    for input in 0..FILES / PER_INPUT {
        let mut turn = edit(
            &format!("f{:04}.txt", input * PER_INPUT),
            "line 0",
            "line 1",
        );
        for i in 1..PER_INPUT {
            turn = turn.with_tool_call(
                "edit_file",
                json!({"file_path": format!("f{:04}.txt", input * PER_INPUT + i),
                       "old_string": "line 0", "new_string": "line 1"}),
            );
        }
        turns.push(turn);
        turns.push(ScriptedTurn::text("edited a hundred files"));
    }
    let config = checkpoints()
        .with_checkpoints(CheckpointConfig::enabled().with_max_bytes(CAP))
        .with_max_parallel_tool_calls(4);
    let session = session_in(dir.path(), state.path(), turns, config);
    let mut events = session.events();
    for input in 0..FILES / PER_INPUT {
        session.run(format!("edit batch {input}")).unwrap();
    }
    assert_eq!(failed_calls(&session), Vec::<String>::new());

    let store = state.path().join("session.jsonl.checkpoints");
    let mut blob_bytes = 0;
    let mut dropped = 0;
    for entry in std::fs::read_dir(&store).unwrap() {
        let path = entry.unwrap().path();
        if path.join("manifest.jsonl").exists() {
            let manifest = std::fs::read_to_string(path.join("manifest.jsonl")).unwrap();
            if manifest.contains(r#""t":"dropped""#) {
                dropped += 1;
                assert!(
                    !path.join("blobs").exists(),
                    "a dropped checkpoint keeps no blobs"
                );
            }
            if let Ok(blobs) = std::fs::read_dir(path.join("blobs")) {
                for blob in blobs {
                    blob_bytes += blob.unwrap().metadata().unwrap().len();
                }
            }
        }
    }
    assert!(
        blob_bytes <= CAP,
        "{blob_bytes} bytes of pre-images over the cap"
    );
    assert!(
        blob_bytes > CAP / 2,
        "the cap is used, not emptied: {blob_bytes}"
    );
    assert!(
        dropped >= 6,
        "the oldest were dropped, each with a marker: {dropped}"
    );
    // The oldest went, the newest stayed: a rewind to the last input would restore its
    // hundred files; one to the first is refused.
    let newest = session
        .rewind(Rewind::to_input(FILES / PER_INPUT).dry_run())
        .unwrap();
    assert_eq!(newest.restored.len(), PER_INPUT, "{newest:#?}");
    let oldest = session.rewind(Rewind::to_input(1).dry_run()).unwrap_err();
    assert!(oldest.to_string().contains("was dropped"), "{oldest}");
    // The pre-images of 100 KB files are hard links to the replaced inodes: they restore
    // byte for byte.
    session.rewind(Rewind::to_input(FILES / PER_INPUT)).unwrap();
    let last = std::fs::read_to_string(dir.path().join(format!("f{:04}.txt", FILES - 1))).unwrap();
    assert_eq!(last, format!("line 0\n{filler}"));

    session.close();
    let events: Vec<_> = events.by_ref().collect();
    let notices = warnings(&events, "checkpoint");
    assert!(
        notices
            .iter()
            .any(|w| w.contains("before input 1 was dropped")),
        "{notices:?}"
    );
}

#[test]
fn a_rewind_to_a_dropped_checkpoint_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let big = "y".repeat(600 * 1024);
    put(dir.path(), "big.txt", &format!("v0\n{big}"), 0o644);
    let turns = vec![
        edit("big.txt", "v0", "v1"),
        ScriptedTurn::text("one"),
        edit("big.txt", "v1", "v2"),
        ScriptedTurn::text("two"),
    ];
    let config =
        checkpoints().with_checkpoints(CheckpointConfig::enabled().with_max_bytes(1 << 20));
    let session = session_in(dir.path(), state.path(), turns, config);
    session.run("one").unwrap();
    session.run("two").unwrap();
    let now = tree(dir.path());
    let history = session.history();
    let err = session.rewind(Rewind::to_input(1)).unwrap_err();
    assert!(err.to_string().contains("was dropped"), "{err}");
    assert_eq!(tree(dir.path()), now);
    assert_eq!(
        session.history(),
        history,
        "nothing changed, history included"
    );
    session.rewind(Rewind::to_input(2)).unwrap();
    assert!(
        std::fs::read_to_string(dir.path().join("big.txt"))
            .unwrap()
            .starts_with("v1\n")
    );
}
