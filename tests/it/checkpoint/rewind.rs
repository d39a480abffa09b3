//! Rewinding a session that wrote, edited, patched, moved, deleted and ran `sed -i`, `rm`,
//! `chmod` and `ln` through the shell: back to each input in turn, in a git repository
//! (everything restored, the user's index, stash, branches and reflogs untouched, ignored
//! files untouched) and in a plain directory (what the file tools did restored, what the
//! shell did reported as not covered and left).

use std::collections::BTreeMap;
use std::path::Path;

use agentloop::llm::scripted::ScriptedTurn;
use agentloop::session::checkpoint::Rewind;
use agentloop::session::{EventKind, Session};

use super::*;

const PATCH: &str = "*** Begin Patch
*** Update File: src/lib.rs
@@
-fn one() {}
+fn one() {}
+fn two() {}
*** Add File: added.rs
+pub fn added() {}
*** Delete File: c.txt
*** Update File: old/name.txt
*** Move to: moved/name.txt
@@
-moving
+moved
*** End Patch";

const SHELL: &str = "sed -i 's/bravo/BRAVO/' b.txt && rm run.sh && printf 'by shell\\n' > shell.txt \
                     && mkdir -p shdir && echo x > shdir/f && chmod +x src/lib.rs";

/// The four inputs: their texts and the model's turns for them.
fn script() -> (Vec<&'static str>, Vec<ScriptedTurn>) {
    let inputs = vec!["write and edit", "patch", "shell", "links"];
    let turns = vec![
        write("new.txt", "new\n").with_tool_call(
            "write_file",
            json!({"file_path": "deep/dir/made.txt", "content": "made\n"}),
        ),
        edit("a.txt", "alpha", "ALPHA"),
        ScriptedTurn::text("wrote and edited"),
        patch(PATCH),
        ScriptedTurn::text("patched"),
        shell(SHELL),
        ScriptedTurn::text("ran the shell"),
        write("target/agent.o", "agent output\n"),
        write("link", "via link\n"),
        shell("ln -s b.txt link2 && rm link"),
        ScriptedTurn::text("linked"),
    ];
    (inputs, turns)
}

/// Runs the four inputs; the tree before each.
fn run_script(dir: &Path, session: &Session) -> Vec<BTreeMap<String, Entry>> {
    let (inputs, _) = script();
    let mut before = Vec::new();
    for input in inputs {
        before.push(tree(dir));
        session.run(input).unwrap();
    }
    assert_eq!(
        failed_calls(session),
        Vec::<String>::new(),
        "every tool call worked"
    );
    before
}

#[test]
fn in_a_git_repository_each_input_is_rewound_byte_for_byte_and_the_users_git_state_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    seeded_repo(dir.path());
    let ignored = [
        touch_print(&dir.path().join("target/build.o")),
        touch_print(&dir.path().join("debug.log")),
    ];
    let user = repo_state(dir.path());
    let (_, turns) = script();
    let session = session_in(dir.path(), state.path(), turns, checkpoints());
    let mut events = session.events();
    let before = run_script(dir.path(), &session);
    assert_ne!(tree(dir.path()), before[0], "the session changed the tree");

    for input in (1..=4).rev() {
        let report = session.rewind(Rewind::to_input(input)).unwrap();
        assert!(report.conflicts.is_empty(), "input {input}: {report:#?}");
        assert!(report.not_covered.is_empty(), "input {input}: {report:#?}");
        let now = tree(dir.path());
        assert_eq!(
            differences(&now, &before[input - 1]),
            Vec::<String>::new(),
            "after the rewind to input {input}: {report:#?}"
        );
    }
    assert!(session.history().is_empty(), "the history went back too");
    assert_eq!(
        repo_state(dir.path()),
        user,
        "index, stash, branches, reflogs unchanged"
    );
    assert_eq!(
        [
            touch_print(&dir.path().join("target/build.o")),
            touch_print(&dir.path().join("debug.log")),
        ],
        ignored,
        "ignored files were never written"
    );
    let refs = git(
        dir.path(),
        &["for-each-ref", "--format=%(refname) %(objecttype)"],
    );
    assert!(
        refs.lines()
            .filter(|l| l.starts_with("refs/agentloop/"))
            .all(|l| l.ends_with(" tree")),
        "checkpoints are trees under private refs, never commits: {refs}"
    );
    session.close();
    let rewound = events
        .by_ref()
        .filter(|e| matches!(e.kind, EventKind::Rewound { .. }))
        .count();
    assert_eq!(rewound, 4, "each rewind is an event");
}

#[test]
fn in_a_plain_directory_the_file_tools_changes_are_rewound_and_the_shells_are_reported_not_covered()
{
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    seed(dir.path());
    let (_, turns) = script();
    let session = session_in(dir.path(), state.path(), turns, checkpoints());
    let before = run_script(dir.path(), &session);
    let after = tree(dir.path());
    // What the shell changed in input 3 (and input 4's link) stays as the shell left it.
    let by_shell = [
        "b.txt",
        "run.sh",
        "shell.txt",
        "shdir",
        "shdir/f",
        "link",
        "link2",
    ];

    let report = session.rewind(Rewind::to_input(4)).unwrap();
    assert!(
        report
            .not_covered
            .iter()
            .any(|n| n.contains("input 4 ran shell commands")),
        "{report:#?}"
    );
    let now = tree(dir.path());
    for (path, entry) in &before[3] {
        if !by_shell.contains(&path.as_str()) {
            assert_eq!(now.get(path), Some(entry), "{path} is back");
        }
    }
    assert!(
        !now.contains_key("target/agent.o"),
        "the file tool's ignored output is gone"
    );
    assert_eq!(
        now.get("link2"),
        after.get("link2"),
        "the shell's symlink was left"
    );

    let report = session.rewind(Rewind::to_input(3)).unwrap();
    assert!(
        report
            .not_covered
            .iter()
            .any(|n| n.contains("input 3 ran shell commands")),
        "{report:#?}"
    );
    let now = tree(dir.path());
    for path in ["b.txt", "shell.txt", "shdir/f"] {
        assert_eq!(
            now.get(path),
            after.get(path),
            "{path}: not covered, not guessed"
        );
    }
    assert!(
        !now.contains_key("run.sh"),
        "a file the shell removed is not made up"
    );

    // src/lib.rs was patched in input 2 and chmod'ed by the shell in input 3: outside git
    // that cannot be told from an edit of the user's, so it is a conflict, left alone.
    let report = session.rewind(Rewind::to_input(2)).unwrap();
    let conflicts: Vec<_> = report.conflicts.iter().map(|c| c.path.clone()).collect();
    assert_eq!(
        conflicts,
        [dir.path().canonicalize().unwrap().join("src/lib.rs")]
    );
    let now = tree(dir.path());
    assert_eq!(now.get("src/lib.rs"), after.get("src/lib.rs"));
    for path in ["c.txt", "old/name.txt", "moved/name.txt", "added.rs"] {
        assert_eq!(now.get(path), before[1].get(path), "{path} is back");
    }

    session.rewind(Rewind::to_input(1)).unwrap();
    let now = tree(dir.path());
    for path in ["new.txt", "deep", "deep/dir", "deep/dir/made.txt", "a.txt"] {
        assert_eq!(now.get(path), before[0].get(path), "{path} is back");
    }
}

#[test]
fn a_dry_run_lists_exactly_what_the_rewind_then_does_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    seeded_repo(dir.path());
    let (_, turns) = script();
    let session = session_in(dir.path(), state.path(), turns, checkpoints());
    run_script(dir.path(), &session);
    let after = tree(dir.path());
    let turns = session.history().len();

    let planned = session.rewind(Rewind::to_input(2).dry_run()).unwrap();
    assert!(planned.dry_run);
    assert_eq!(tree(dir.path()), after, "a dry run writes nothing");
    assert_eq!(session.history().len(), turns, "nor cuts the history");
    assert!(planned.turns_removed > 0);

    let done = session.rewind(Rewind::to_input(2)).unwrap();
    let sorted = |mut paths: Vec<std::path::PathBuf>| {
        paths.sort();
        paths
    };
    assert_eq!(sorted(planned.restored), sorted(done.restored.clone()));
    assert_eq!(sorted(planned.removed), sorted(done.removed.clone()));
    assert_eq!(planned.turns_removed, done.turns_removed);
    assert!(
        !done.restored.is_empty() && !done.removed.is_empty(),
        "{done:#?}"
    );
}

#[test]
fn files_only_and_history_only_rewinds_leave_the_other_half_alone() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    seeded_repo(dir.path());
    let (_, turns) = script();
    let session = session_in(dir.path(), state.path(), turns, checkpoints());
    let before = run_script(dir.path(), &session);

    let history = session.history();
    session.rewind(Rewind::to_input(3).files_only()).unwrap();
    assert_eq!(session.history(), history, "files only: the history stays");
    assert_eq!(
        differences(&tree(dir.path()), &before[2]),
        Vec::<String>::new()
    );

    let files = tree(dir.path());
    let report = session.rewind(Rewind::to_input(2).history_only()).unwrap();
    assert_eq!(tree(dir.path()), files, "history only: the files stay");
    assert!(report.restored.is_empty() && report.removed.is_empty());
    let users: Vec<String> = session
        .history()
        .turns()
        .iter()
        .filter_map(|t| match t {
            agentloop::session::Turn::User(u) => Some(u.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(users, ["write and edit"], "the history ends before input 2");
    // The files can still go back to input 1 (the checkpoints of inputs 1 and 2 are kept).
    session.rewind(Rewind::to_input(1).files_only()).unwrap();
    assert_eq!(
        differences(&tree(dir.path()), &before[0]),
        Vec::<String>::new()
    );
}
