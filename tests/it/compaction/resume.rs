//! Resume and strict replay of a compacted session.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentloop::llm::scripted::{ReplayMode, ScriptedModel, ScriptedTurn};
use agentloop::llm::{ContentPart, ToolCall};
use agentloop::session::transcript::Transcript;
use agentloop::session::{Session, StopReason};
use serde_json::json;

use super::*;
use support::session::{DirEnv, stop_reason};

/// Phase one: 40 echo rounds; phase two (its input says "phase two"): 3 more. Call ids are
/// explicit, so two instances of this model answer alike.
fn two_phase_model() -> ScriptedModel {
    let one = Arc::new(AtomicUsize::new(0));
    let two = Arc::new(AtomicUsize::new(0));
    ScriptedModel::dynamic(move |request| {
        if is_summary_request(request) {
            return ScriptedTurn::text(summarise(&summary_input(request)));
        }
        let phase_two = request_text(request).contains("phase two");
        let (counter, rounds, tag) = if phase_two {
            (&two, 3, "p2")
        } else {
            (&one, 40, "p1")
        };
        let n = counter.fetch_add(1, Ordering::SeqCst);
        if n < rounds {
            let call = ToolCall::new(
                format!("{tag}-call-{n}"),
                "echo",
                json!({"text": format!("{tag} round {n}: {}", "r".repeat(700))}),
            );
            ScriptedTurn::from_parts(vec![ContentPart::ToolCall(call)])
        } else {
            ScriptedTurn::text(format!("{tag} done"))
        }
    })
}

fn session_with(
    model: &ScriptedModel,
    dir: &std::path::Path,
    resume: Option<&std::path::Path>,
    transcript: Option<std::path::PathBuf>,
) -> Session {
    let env = Arc::new(DirEnv::new(dir));
    let client = support::client_for(model.clone());
    let mut config = config(8_000);
    if let Some(path) = transcript {
        config = config.with_transcript(path);
    }
    match resume {
        Some(path) => Session::resume(path, profile(), env, client, config).unwrap(),
        None => Session::new(profile(), env, client, config).unwrap(),
    }
}

#[test]
fn a_compacted_session_resumes_with_byte_identical_requests_and_replays_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let recorded = dir.path().join("a.jsonl");

    // The original: phase one (with compactions), then phase two.
    let model_a = two_phase_model();
    let a = session_with(&model_a, &work, None, Some(recorded.clone()));
    let mut events_a = a.events();
    a.submit("phase one: forty echo rounds").unwrap();
    let seen_a = collect_input(&mut events_a);
    assert_eq!(stop_reason(&seen_a), StopReason::Completed);
    let compacted = compactions(&seen_a).len();
    assert!(compacted >= 2, "{compacted} compactions");
    let after_one = dir.path().join("after-one.jsonl");
    std::fs::copy(&recorded, &after_one).unwrap();
    let before_two = model_a.request_count();
    a.submit("phase two: three more").unwrap();
    let seen_two = collect_input(&mut events_a);
    assert_eq!(stop_reason(&seen_two), StopReason::Completed);
    let original: Vec<String> = model_a.requests()[before_two..]
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    a.close();
    drop(a);

    // Resumed from the transcript as it was after phase one.
    let read = Transcript::read(&after_one).unwrap();
    assert_eq!(read.compaction_count(), compacted);
    let model_b = two_phase_model();
    let b = session_with(
        &model_b,
        &work,
        Some(&after_one),
        Some(dir.path().join("b.jsonl")),
    );
    let mut events_b = b.events();
    b.submit("phase two: three more").unwrap();
    assert_eq!(
        stop_reason(&collect_input(&mut events_b)),
        StopReason::Completed
    );
    let resumed: Vec<String> = model_b
        .requests()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    assert_eq!(resumed.len(), original.len());
    for (i, (got, want)) in resumed.iter().zip(&original).enumerate() {
        assert!(got == want, "request {i} of phase two differs after resume");
    }
    drop(b);

    // Strict replay of the whole recording.
    let full = Transcript::read(&recorded).unwrap();
    let replay = ScriptedModel::from_transcript(&full, ReplayMode::Strict);
    let c = session_with(&replay, &work, None, None);
    let mut events_c = c.events();
    let mut replayed = 0;
    for input in full.user_inputs() {
        c.submit(input).unwrap();
        let seen = collect_input(&mut events_c);
        let errors: Vec<_> = seen
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Error { message, .. } => Some(message.clone()),
                _ => None,
            })
            .collect();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(stop_reason(&seen), StopReason::Completed);
        replayed += compactions(&seen).len();
    }
    assert_eq!(full.user_inputs().len(), 2);
    assert_eq!(
        replayed,
        compactions(&seen_a).len() + compactions(&seen_two).len()
    );
}
