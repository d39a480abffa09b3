//! Session modes with the real local environment, real `bash`, `git` and the real sandbox:
//! plan mode changes nothing on disk (the editing tools are not offered, commands are
//! confined by the read-only policy) while reads, searches and `git status` still work;
//! `set_mode` switches between inputs; the plan tool becomes `PLAN_UPDATE` events; and
//! `set_model` switches the model of the next request.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use agentloop::exec::{LocalExecutionEnvironment, Sandbox, SandboxPolicy};
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{ContentPart, ToolCall};
use agentloop::profiles;
use agentloop::session::{EventKind, Session, SessionConfig, SessionEvent, SessionMode};
use agentloop::tools::PlanStatus;
use serde_json::json;

use support::session::{collect_input, collect_to_end};

/// A git repository with one committed file, `notes.txt`.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "needle in the notes\n").unwrap();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(status.status.success(), "git {args:?}: {status:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "notes.txt"]);
    git(&["commit", "-qm", "first"]);
    dir
}

/// Whether this kernel can confine commands (Landlock); prints why not.
fn sandbox_available(dir: &Path) -> bool {
    let env = LocalExecutionEnvironment::new(dir).unwrap();
    match env.with_sandbox(Sandbox::new(SandboxPolicy::ReadOnly)) {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped: this kernel cannot confine commands ({e})");
            false
        }
    }
}

/// A session with the OpenAI profile (it has `apply_patch` and `write_file`) on the
/// scripted model, in `dir`, without a sandbox of its own.
fn session(
    dir: &Path,
    turns: Vec<ScriptedTurn>,
    config: SessionConfig,
) -> (Session, ScriptedModel) {
    let env = Arc::new(LocalExecutionEnvironment::new(dir).unwrap());
    let profile = profiles::openai("gpt-5").with_provider_id("scripted");
    let model = ScriptedModel::new(turns);
    let client = support::client_for(model.clone());
    (Session::new(profile, env, client, config).unwrap(), model)
}

fn tool_output<'a>(events: &'a [SessionEvent], call: &str) -> (&'a str, bool) {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolCallEnd {
                call_id,
                output,
                error,
                is_error,
                ..
            } if call_id == call => Some((
                output.as_deref().or(error.as_deref()).unwrap_or(""),
                *is_error,
            )),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no end of {call}"))
}

/// A turn with one call whose id is `id`.
fn call(id: &str, name: &str, args: serde_json::Value) -> ScriptedTurn {
    ScriptedTurn::from_parts(vec![ContentPart::ToolCall(ToolCall::new(id, name, args))])
}

#[test]
fn plan_mode_changes_nothing_on_disk_while_reads_searches_and_git_status_work() {
    let dir = repository();
    if !sandbox_available(dir.path()) {
        return;
    }
    let before = std::fs::read_dir(dir.path()).unwrap().count();
    let turns = vec![
        call(
            "w",
            "write_file",
            json!({"file_path": "new.txt", "content": "x"}),
        ),
        call(
            "p",
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Add File: p.txt\n+x\n*** End Patch\n"}),
        ),
        call("t", "shell", json!({"command": "touch x"})),
        call("r", "read_file", json!({"file_path": "notes.txt"})),
        call("g", "grep", json!({"pattern": "needle"})),
        call(
            "s",
            "shell",
            json!({"command": "git status --short --branch"}),
        ),
        call(
            "u",
            "update_plan",
            json!({"plan": [
            {"step": "read the notes", "status": "completed"},
            {"step": "change them", "status": "pending"}]}),
        ),
        ScriptedTurn::text("here is the plan"),
    ];
    let config = SessionConfig::default().with_mode(SessionMode::Plan);
    let (session, model) = session(dir.path(), turns, config);
    let mut events = session.events();
    session.submit("plan the change").unwrap();
    let seen = collect_input(&mut events);

    // Nothing changed on disk: no new file, no `x`, the notes as they were.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), before);
    for name in ["new.txt", "p.txt", "x"] {
        assert!(!dir.path().join(name).exists(), "{name} was written");
    }
    // The editing tools were not offered, and a call of one is an unknown tool.
    let offered: Vec<String> = model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    for withdrawn in ["write_file", "apply_patch"] {
        assert!(!offered.contains(&withdrawn.to_string()), "{offered:?}");
    }
    assert!(offered.contains(&"update_plan".to_string()), "{offered:?}");
    assert!(tool_output(&seen, "w").1 && tool_output(&seen, "p").1);
    // The command ran, confined: the sandbox refused the write.
    let (touch, _) = tool_output(&seen, "t");
    assert!(!touch.contains("exit code: 0"), "{touch}");
    // Reads, searches and git status work.
    assert!(tool_output(&seen, "r").0.contains("needle in the notes"));
    assert!(tool_output(&seen, "g").0.contains("notes.txt"));
    let (status, failed) = tool_output(&seen, "s");
    assert!(!failed && status.contains("exit code: 0"), "{status}");
    assert!(status.contains("## "), "{status}");
    // The plan became an event, and the system prompt says which mode this is.
    let plan = seen
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::PlanUpdate { entries, .. } => Some(entries.clone()),
            _ => None,
        })
        .expect("a plan_update event");
    assert_eq!(plan.len(), 2);
    assert_eq!(plan[0].status, PlanStatus::Completed);
    assert_eq!(plan[1].content, "change them");
    let system = model.requests()[0].messages[0].text();
    assert!(system.contains("Mode: plan"), "{system}");
    session.close();
    collect_to_end(&mut events);
}

#[test]
fn set_mode_switches_what_the_next_input_may_change() {
    let dir = tempfile::tempdir().unwrap();
    if !sandbox_available(dir.path()) {
        return;
    }
    let turns = vec![
        call(
            "a1",
            "write_file",
            json!({"file_path": "one.txt", "content": "1"}),
        ),
        ScriptedTurn::text("wrote one"),
        call(
            "b1",
            "write_file",
            json!({"file_path": "two.txt", "content": "2"}),
        ),
        call("b2", "shell", json!({"command": "echo 3 > three.txt"})),
        ScriptedTurn::text("could not write"),
        call("c1", "shell", json!({"command": "echo 4 > four.txt"})),
        ScriptedTurn::text("wrote four"),
    ];
    let (session, model) = session(dir.path(), turns, SessionConfig::default());
    let mut events = session.events();
    assert_eq!(session.mode(), SessionMode::Default);
    session.submit("one").unwrap();
    collect_input(&mut events);
    assert!(dir.path().join("one.txt").exists());

    session.set_mode(SessionMode::ReadOnly).unwrap();
    session.submit("two").unwrap();
    let seen = collect_input(&mut events);
    let (refused, is_error) = tool_output(&seen, "b1");
    assert!(is_error && refused.contains("read-only mode"), "{refused}");
    assert!(!dir.path().join("two.txt").exists());
    assert!(!dir.path().join("three.txt").exists());
    // Read-only keeps the tool list (the write is refused, not withdrawn).
    let offered: Vec<String> = model.requests()[2]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(offered.contains(&"write_file".to_string()));

    session.set_mode(SessionMode::Default).unwrap();
    session.submit("three").unwrap();
    collect_input(&mut events);
    assert!(dir.path().join("four.txt").exists());
    session.close();
    collect_to_end(&mut events);
}

#[test]
fn set_model_switches_the_model_of_the_next_input() {
    let dir = tempfile::tempdir().unwrap();
    let turns = vec![ScriptedTurn::text("one"), ScriptedTurn::text("two")];
    let (session, model) = session(dir.path(), turns, SessionConfig::default());
    session.run("first").unwrap();
    session.set_model("gpt-5-mini").unwrap();
    session.run("second").unwrap();
    let requests = model.requests();
    assert_eq!(requests[0].model, "gpt-5");
    assert_eq!(requests[1].model, "gpt-5-mini");
    // The history carried over.
    assert!(requests[1].messages.len() > requests[0].messages.len());
}
