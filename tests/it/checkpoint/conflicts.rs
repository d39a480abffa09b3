//! What the user wrote is never overwritten unless the host forces it: a file changed after
//! the agent's edit, or between two inputs, is a conflict, listed and left as the user left
//! it (also by a later rewind further back); `force` restores it and says so. Each case in
//! a git repository and in a plain directory (where the change times tell).

use std::path::Path;

use agentloop::llm::scripted::ScriptedTurn;
use agentloop::session::checkpoint::{Conflict, Rewind};
use tempfile::TempDir;

use super::*;

fn setup(in_git: bool) -> (TempDir, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    if in_git {
        seeded_repo(dir.path());
    } else {
        seed(dir.path());
    }
    (dir, tempfile::tempdir().unwrap())
}

fn append(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    let mut content = std::fs::read_to_string(&path).unwrap();
    content.push_str(text);
    std::fs::write(path, content).unwrap();
}

fn read(dir: &Path, rel: &str) -> String {
    std::fs::read_to_string(dir.join(rel)).unwrap()
}

fn conflicted(conflicts: &[Conflict]) -> Vec<String> {
    let mut names: Vec<String> = conflicts
        .iter()
        .map(|c| c.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Input 1 edits a.txt; input 2 edits c.txt and writes b.txt; input 3 edits a.txt again.
fn three_inputs() -> Vec<ScriptedTurn> {
    vec![
        edit("a.txt", "alpha", "ALPHA"),
        ScriptedTurn::text("one"),
        edit("c.txt", "charlie", "CHARLIE"),
        write("b.txt", "agent b\n"),
        ScriptedTurn::text("two"),
        edit("a.txt", "ALPHA", "ALPHA3"),
        ScriptedTurn::text("three"),
    ]
}

fn a_later_user_edit_is_a_conflict_left_alone_also_by_later_rewinds(in_git: bool) {
    let (dir, state) = setup(in_git);
    let b_before = read(dir.path(), "b.txt");
    let session = session_in(dir.path(), state.path(), three_inputs(), checkpoints());
    for input in ["one", "two", "three"] {
        session.run(input).unwrap();
    }
    append(dir.path(), "a.txt", "mine\n");

    let planned = session.rewind(Rewind::to_input(3).dry_run()).unwrap();
    assert_eq!(conflicted(&planned.conflicts), ["a.txt"]);
    assert!(!planned.conflicts[0].overwritten);
    assert!(
        planned.conflicts[0]
            .reason
            .contains("changed since the agent's last change"),
        "{planned:#?}"
    );
    let report = session.rewind(Rewind::to_input(3)).unwrap();
    assert_eq!(conflicted(&report.conflicts), ["a.txt"]);
    assert_eq!(
        read(dir.path(), "a.txt"),
        "ALPHA3\nmine\n",
        "left as the user left it"
    );

    // Further back, the user's change is still the user's.
    let report = session.rewind(Rewind::to_input(1)).unwrap();
    assert_eq!(conflicted(&report.conflicts), ["a.txt"], "{report:#?}");
    assert_eq!(read(dir.path(), "a.txt"), "ALPHA3\nmine\n");
    assert_eq!(
        read(dir.path(), "c.txt"),
        "charlie\n",
        "the agent's own edits go back"
    );
    assert_eq!(read(dir.path(), "b.txt"), b_before);
}

#[test]
fn in_git_a_file_changed_after_the_agents_edit_is_a_conflict_left_as_the_user_left_it() {
    a_later_user_edit_is_a_conflict_left_alone_also_by_later_rewinds(true);
}

#[test]
fn in_a_plain_directory_a_file_changed_after_the_agents_edit_is_a_conflict_left_as_the_user_left_it()
 {
    a_later_user_edit_is_a_conflict_left_alone_also_by_later_rewinds(false);
}

fn an_edit_between_inputs_is_a_conflict_even_when_the_agent_edited_on_top(in_git: bool) {
    let (dir, state) = setup(in_git);
    let turns = vec![
        edit("c.txt", "charlie", "charlie 1"),
        ScriptedTurn::text("one"),
        edit("c.txt", "charlie 1", "charlie 2"),
        ScriptedTurn::text("two"),
    ];
    let session = session_in(dir.path(), state.path(), turns, checkpoints());
    session.run("one").unwrap();
    append(dir.path(), "c.txt", "written by the user between inputs\n");
    session.run("two").unwrap();
    assert_eq!(
        read(dir.path(), "c.txt"),
        "charlie 2\nwritten by the user between inputs\n"
    );
    let report = session.rewind(Rewind::to_input(1)).unwrap();
    assert_eq!(conflicted(&report.conflicts), ["c.txt"], "{report:#?}");
    assert_eq!(
        read(dir.path(), "c.txt"),
        "charlie 2\nwritten by the user between inputs\n",
        "the user's lines are not thrown away with the agent's"
    );
}

#[test]
fn in_git_a_file_the_user_edited_between_inputs_is_a_conflict() {
    an_edit_between_inputs_is_a_conflict_even_when_the_agent_edited_on_top(true);
}

#[test]
fn in_a_plain_directory_a_file_the_user_edited_between_inputs_is_a_conflict() {
    an_edit_between_inputs_is_a_conflict_even_when_the_agent_edited_on_top(false);
}

fn force_restores_the_conflicts_and_says_so(in_git: bool) {
    let (dir, state) = setup(in_git);
    let session = session_in(dir.path(), state.path(), three_inputs(), checkpoints());
    for input in ["one", "two", "three"] {
        session.run(input).unwrap();
    }
    append(dir.path(), "a.txt", "mine\n");
    let report = session.rewind(Rewind::to_input(1).force()).unwrap();
    assert_eq!(conflicted(&report.conflicts), ["a.txt"]);
    assert!(report.conflicts[0].overwritten, "{report:#?}");
    assert_eq!(read(dir.path(), "a.txt"), "alpha\n");
    assert_eq!(read(dir.path(), "c.txt"), "charlie\n");
}

#[test]
fn in_git_force_restores_a_conflict_and_reports_it_overwritten() {
    force_restores_the_conflicts_and_says_so(true);
}

#[test]
fn in_a_plain_directory_force_restores_a_conflict_and_reports_it_overwritten() {
    force_restores_the_conflicts_and_says_so(false);
}

#[test]
fn a_file_the_user_created_or_changed_outside_the_agents_files_is_never_touched() {
    // In git, a file the agent never touched but the user changed between inputs shows in
    // the diff since the checkpoint: it is the user's, left alone.
    let (dir, state) = setup(true);
    let turns = vec![
        edit("a.txt", "alpha", "ALPHA"),
        ScriptedTurn::text("one"),
        ScriptedTurn::text("two"),
    ];
    let session = session_in(dir.path(), state.path(), turns, checkpoints());
    session.run("one").unwrap();
    put(dir.path(), "notes.md", "my notes\n", 0o644);
    append(dir.path(), "src/lib.rs", "// mine\n");
    session.run("two").unwrap();
    let report = session.rewind(Rewind::to_input(1)).unwrap();
    assert_eq!(
        conflicted(&report.conflicts),
        ["lib.rs", "notes.md"],
        "{report:#?}"
    );
    assert_eq!(read(dir.path(), "notes.md"), "my notes\n");
    assert_eq!(read(dir.path(), "src/lib.rs"), "fn one() {}\n// mine\n");
    assert_eq!(read(dir.path(), "a.txt"), "alpha\n");
}
