//! Subagents in their own git worktrees: two edit the same file differently at the same
//! time, each from the parent's uncommitted state and neither seeing the other's files;
//! both patches come back; afterwards (also after an abort of the parent, and after a
//! crash, at the next start) no worktree, branch or lock file remains.

use std::path::Path;
use std::sync::Arc;

use agentloop::exec::{ExecutionEnvironment, LocalExecutionEnvironment};
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Client, Request, Role};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Session, SessionConfig, Turn};
use serde_json::Value;

use super::*;

fn profile_with_subagents() -> ProviderProfile {
    let mut profile = profile().with_parallel_tool_calls(true);
    for tool in agentloop::unstable::subagent_tools() {
        profile = profile.with_tool(tool);
    }
    profile
}

fn tool_results(request: &Request) -> usize {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .count()
}

/// The parent spawns two worktree subagents, then waits for both; each child edits the
/// same line of b.txt (uncommitted in the parent) its own way and adds a file of its own.
fn two_editors() -> ScriptedModel {
    ScriptedModel::dynamic(|request| {
        let system = request.messages[0].text();
        let task = request
            .messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| m.text())
            .unwrap_or_default();
        if system.contains("your own git worktree") {
            let me = if task.contains("agent one") {
                "one"
            } else {
                "two"
            };
            return match tool_results(request) {
                0 => edit("b.txt", "local change", &format!("changed by agent {me}"))
                    .with_tool_call(
                        "write_file",
                        json!({"file_path": format!("only-{me}.txt"), "content": me}),
                    ),
                _ => ScriptedTurn::text(format!("agent {me} done")),
            };
        }
        match tool_results(request) {
            0 => ScriptedTurn::tool_call(
                "spawn_agent",
                json!({"task": "you are agent one", "isolation": "worktree"}),
            )
            .with_tool_call(
                "spawn_agent",
                json!({"task": "you are agent two", "isolation": "worktree"}),
            ),
            2 => ScriptedTurn::tool_call("wait", json!({"agent_id": "agent-1"}))
                .with_tool_call("wait", json!({"agent_id": "agent-2"})),
            _ => ScriptedTurn::text("both back"),
        }
    })
}

fn session_with(dir: &Path, model: ScriptedModel, config: SessionConfig) -> Session {
    let env: Arc<dyn ExecutionEnvironment> = Arc::new(LocalExecutionEnvironment::new(dir).unwrap());
    Session::new(
        profile_with_subagents(),
        env,
        Client::new().with_provider(model),
        config,
    )
    .unwrap()
}

/// What a crash or a forgotten cleanup would leave: worktrees, `agentloop/` branches, lock
/// files, our directory's contents.
fn leftovers(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let worktrees = git(dir, &["worktree", "list", "--porcelain"]);
    found.extend(
        worktrees
            .lines()
            .filter(|l| l.starts_with("worktree ") && !l.ends_with(&*dir.to_string_lossy()))
            .map(str::to_string),
    );
    found.extend(
        git(dir, &["branch", "--list", "agentloop/*"])
            .lines()
            .map(|l| format!("branch {}", l.trim())),
    );
    let mut stack = vec![dir.join(".git")];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = path.to_string_lossy().into_owned();
            if path.is_dir() {
                stack.push(path);
            } else if name.ends_with(".lock")
                || name.contains("/.git/worktrees/")
                || name.contains("/.git/agentloop/")
            {
                found.push(name);
            }
        }
    }
    found
}

#[test]
fn two_worktree_subagents_edit_the_same_file_in_parallel_and_both_patches_come_back() {
    let dir = tempfile::tempdir().unwrap();
    seeded_repo(dir.path());
    let user = repo_state(dir.path());
    let before = tree(dir.path());
    let session = session_with(dir.path(), two_editors(), SessionConfig::default());
    let mut events = session.events();
    assert_eq!(session.run("split the work").unwrap().text, "both back");

    assert_eq!(
        tree(dir.path()),
        before,
        "the parent's files are as they were"
    );
    let history = session.history();
    let waits: Vec<Value> = history
        .turns()
        .iter()
        .filter_map(|t| match t {
            Turn::ToolResults(r) => Some(r.results.clone()),
            _ => None,
        })
        .flatten()
        .filter_map(|r| serde_json::from_str::<Value>(&r.content).ok())
        .filter(|v| v.get("patch").is_some())
        .collect();
    assert_eq!(waits.len(), 2, "{waits:#?}");
    // The two spawns run in parallel, so agent-1 may be either task: put agent one's first.
    let mut waits = waits;
    waits.sort_by_key(|wait| !wait["patch"]["patch"].to_string().contains("only-one.txt"));
    let mut patches = Vec::new();
    for (wait, me, other) in [(&waits[0], "one", "two"), (&waits[1], "two", "one")] {
        let patch = &wait["patch"];
        let text = patch["patch"]
            .as_str()
            .unwrap_or_else(|| panic!("{wait:#}"));
        // Made from the parent's uncommitted line, with only this agent's own files.
        assert!(text.contains("-local change"), "{text}");
        assert!(text.contains(&format!("+changed by agent {me}")), "{text}");
        assert!(text.contains(&format!("only-{me}.txt")), "{text}");
        assert!(
            !text.contains(&format!("only-{other}.txt")),
            "it never saw the other's files"
        );
        let file = patch["patch_file"].as_str().unwrap().to_string();
        assert!(
            Path::new(&file).exists(),
            "the patch file is there to apply"
        );
        patches.push(file);
    }
    // The parent can apply one; the second then conflicts on the same line, as it should.
    git(dir.path(), &["apply", &patches[0]]);
    assert!(
        std::fs::read_to_string(dir.path().join("b.txt"))
            .unwrap()
            .contains("changed by agent one")
    );
    std::fs::remove_file(dir.path().join("only-one.txt")).unwrap();
    put(dir.path(), "b.txt", "bravo x\nlocal change\n", 0o644);

    session.close();
    let _ = events.by_ref().count();
    drop(session);
    assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    for patch in patches {
        assert!(
            !Path::new(&patch).exists(),
            "the session's patch files go with it"
        );
    }
    assert_eq!(
        repo_state(dir.path()),
        user,
        "index, stash, branches, reflogs unchanged"
    );
}

#[test]
fn an_abort_of_the_parent_mid_run_leaves_no_worktree_branch_or_lock() {
    let dir = tempfile::tempdir().unwrap();
    seeded_repo(dir.path());
    let user = repo_state(dir.path());
    let model = ScriptedModel::dynamic(|request| {
        let system = request.messages[0].text();
        if system.contains("your own git worktree") {
            // The child works on and on.
            return ScriptedTurn::tool_call("shell", json!({"command": "sleep 30"}));
        }
        match tool_results(request) {
            0 => ScriptedTurn::tool_call(
                "spawn_agent",
                json!({"task": "take your time", "isolation": "worktree"}),
            ),
            _ => ScriptedTurn::tool_call("wait", json!({"agent_id": "agent-1"})),
        }
    });
    let session = session_with(
        dir.path(),
        model,
        SessionConfig::default().with_default_command_timeout(support::GENEROUS),
    );
    let mut events = session.events();
    session.submit("start one").unwrap();
    // Abort once the child's command runs in its worktree.
    for event in events.by_ref() {
        if let EventKind::SubagentEvent { event, .. } = &event.kind {
            if matches!(event.kind, EventKind::ToolCallStart { .. }) {
                break;
            }
        }
    }
    assert!(
        git(dir.path(), &["worktree", "list"]).lines().count() == 2,
        "the worktree exists while the child runs"
    );
    session.abort();
    assert!(events.any(|e| matches!(e.kind, EventKind::SessionEnd { .. })));
    drop(session);
    assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    assert_eq!(repo_state(dir.path()), user);
}

#[test]
fn a_worktree_a_crashed_process_left_is_removed_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    seeded_repo(dir.path());
    // What a process that died mid-run leaves: our naming, a locked worktree, a branch, a
    // patch. The owner is this process's id with another start time: a reused pid.
    let owner = format!("{}.1", std::process::id());
    let name = format!("{owner}-deadbeef-agent-1");
    let path = dir.path().join(".git/agentloop/worktrees").join(&name);
    git(
        dir.path(),
        &[
            "worktree",
            "add",
            "--lock",
            "--reason",
            &format!("agentloop owner {owner}"),
            "-b",
            &format!("agentloop/{owner}/deadbeef-agent-1"),
            path.to_str().unwrap(),
            "HEAD",
        ],
    );
    put(
        dir.path(),
        &format!(".git/agentloop/patches/{name}.patch"),
        "x",
        0o644,
    );
    assert!(!leftovers(dir.path()).is_empty());

    let session = session_with(
        dir.path(),
        ScriptedModel::new(vec![]),
        SessionConfig::default(),
    );
    assert_eq!(
        leftovers(dir.path()),
        Vec::<String>::new(),
        "cleaned at the start"
    );
    drop(session);
}
