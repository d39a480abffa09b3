//! The cross-provider parity matrix of spec §9.12: every cell runs a session of the real
//! profile against the loopback server speaking the profile's native wire format (OpenAI →
//! Responses, Anthropic → Messages, Gemini → Gemini) with scripted model turns, over a real
//! local environment in a temp dir. Cells assert on files on disk, on events, and on the
//! recorded request bodies. Each cell is one test per profile: `parity::<profile>::<cell>`.

use std::time::Instant;

use agentloop::session::{EventKind, SessionConfig, SessionEvent, StopReason};
use serde_json::{Value, json};

use support::GENEROUS;
use support::Server;
use support::parity_kit::{Kit, Run, answer, assert_no_key_in, ended};
use support::session::{names, position, stop_reason};
use support::turns::{custom, function};

/// Generates `parity::<profile>::<cell>` for every profile and cell.
macro_rules! matrix {
    ($($cell:ident),* $(,)?) => {
        mod openai {
            $(#[test] fn $cell() { super::$cell(support::parity_kit::Kit::OpenAi) })*
        }
        mod anthropic {
            $(#[test] fn $cell() { super::$cell(support::parity_kit::Kit::Anthropic) })*
        }
        mod gemini {
            $(#[test] fn $cell() { super::$cell(support::parity_kit::Kit::Gemini) })*
        }
    };
}

matrix!(
    file_creation,
    read_then_edit,
    multi_file_edit,
    shell_command,
    shell_timeout,
    grep_and_glob,
    multi_step_read_analyze_edit,
    truncation_of_a_large_file,
    parallel_tool_calls,
    steering_mid_task,
    reasoning_effort_change,
    subagent_spawn_and_wait,
    loop_detection_warns,
    error_recovery,
    provider_editing_format,
);

/// A shell command that blocks until the file `go` exists in the working directory.
const GATED: &str = "until [ -e go ]; do sleep 0.02; done; echo released";

fn file_creation(kit: Kit) {
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&[function(
                "call_1",
                "write_file",
                json!({"file_path": "hello.py", "content": "print('Hello World')\n"}),
            )]),
            kit.text("Created hello.py."),
        ],
    );
    let events = run.input("Create hello.py that prints Hello World");
    assert_eq!(run.read("hello.py"), "print('Hello World')\n");
    let ends = ended(&events);
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].tool_name, "write_file");
    assert!(!ends[0].is_error, "{}", ends[0].text);
    assert_eq!(stop_reason(&events), StopReason::Completed);
    assert_eq!(answer(&events), "Created hello.py.");
    let bodies = run.bodies();
    assert_eq!(bodies.len(), 2);
    let seen = kit.tool_outputs(&bodies[1]);
    assert_eq!(seen.len(), 1);
    assert!(seen[0].text.contains("hello.py"), "{}", seen[0].text);
    assert_ne!(seen[0].is_error, Some(true));
    assert_no_key_in(&events);
}

fn read_then_edit(kit: Kit) {
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&[function(
                "call_1",
                "read_file",
                json!({"file_path": "config.py"}),
            )]),
            kit.calls(&[kit.edit("call_2", "config.py", "DEBUG = False", "DEBUG = True")]),
            kit.text("Debug mode is on."),
        ],
    );
    run.write("config.py", "DEBUG = False\nPORT = 8000\n");
    let events = run.input("Turn on debug mode in config.py");
    assert_eq!(run.read("config.py"), "DEBUG = True\nPORT = 8000\n");
    let ends = ended(&events);
    let tools: Vec<&str> = ends.iter().map(|e| e.tool_name.as_str()).collect();
    assert_eq!(tools, ["read_file", kit.edit_tool()]);
    assert!(ends.iter().all(|e| !e.is_error), "{ends:?}");
    let bodies = run.bodies();
    assert_eq!(bodies.len(), 3);
    // The model saw the numbered file before it edited.
    let read = &kit.tool_outputs(&bodies[1])[0].text;
    assert!(read.contains("1 | DEBUG = False"), "{read}");
    assert!(read.contains("2 | PORT = 8000"), "{read}");
    let edit = &kit.tool_outputs(&bodies[2])[1];
    assert_ne!(edit.is_error, Some(true), "{}", edit.text);
}

fn multi_file_edit(kit: Kit) {
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&kit.edits(
                "call_1",
                &[("a.txt", "alpha", "ALPHA"), ("b.txt", "beta", "BETA")],
            )),
            kit.text("Both files are updated."),
            kit.calls(&[kit.edit("call_2", "c.txt", "gamma", "GAMMA")]),
            kit.text("The third file is updated."),
        ],
    );
    run.write("a.txt", "alpha\n");
    run.write("b.txt", "beta\n");
    run.write("c.txt", "gamma\n");
    let first = run.input("Upper-case the words in a.txt and b.txt");
    assert_eq!(stop_reason(&first), StopReason::Completed);
    let second = run.input("Now c.txt too");
    assert_eq!(stop_reason(&second), StopReason::Completed);
    assert_eq!(run.read("a.txt"), "ALPHA\n");
    assert_eq!(run.read("b.txt"), "BETA\n");
    assert_eq!(run.read("c.txt"), "GAMMA\n");
    let ends: Vec<_> = ended(&first).into_iter().chain(ended(&second)).collect();
    assert!(
        ends.iter()
            .all(|e| e.tool_name == kit.edit_tool() && !e.is_error),
        "{ends:?}"
    );
    // One session: the second input's request carries the first input's history.
    let bodies = run.bodies();
    assert_eq!(bodies.len(), 4);
    assert!(
        bodies[3]
            .to_string()
            .contains("Upper-case the words in a.txt and b.txt")
    );
}

fn shell_command(kit: Kit) {
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&[function(
                "call_1",
                "shell",
                json!({"command": "echo hello from the shell && pwd", "description": "greet"}),
            )]),
            kit.text("The shell greeted us."),
        ],
    );
    let events = run.input("Say hello from the shell");
    let ends = ended(&events);
    assert_eq!(ends[0].tool_name, "shell");
    assert!(!ends[0].is_error, "{}", ends[0].text);
    assert!(
        ends[0].text.contains("hello from the shell"),
        "{}",
        ends[0].text
    );
    let dir = run.dir.path().display().to_string();
    assert!(
        ends[0].text.contains(&dir),
        "runs in the working directory: {}",
        ends[0].text
    );
    assert!(ends[0].text.contains("exit code: 0"), "{}", ends[0].text);
    // Live output reached the host before the end event.
    let delta = position(&events, "tool_call_output_delta");
    assert!(delta < position(&events, "tool_call_end"));
    let seen = kit.tool_outputs(&run.bodies()[1]);
    assert!(
        seen[0].text.contains("hello from the shell"),
        "{}",
        seen[0].text
    );
}

fn shell_timeout(kit: Kit) {
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&[function(
                "call_1",
                "shell",
                json!({"command": "echo started; sleep 30", "timeout_ms": 500}),
            )]),
            kit.text("The command took too long; I will try another way."),
        ],
    );
    let started = Instant::now();
    let events = run.input("Run the slow command");
    let elapsed = started.elapsed();
    // A ceiling that catches a missing kill, not a speed target.
    assert!(elapsed < GENEROUS, "took {elapsed:?}");
    let ends = ended(&events);
    assert!(ends[0].is_error, "a timeout is an error result");
    assert!(
        ends[0].text.contains("Command timed out after 500ms"),
        "{}",
        ends[0].text
    );
    assert!(
        ends[0].text.contains("started"),
        "partial output kept: {}",
        ends[0].text
    );
    assert!(ends[0].duration_ms >= 500);
    let seen = &kit.tool_outputs(&run.bodies()[1])[0];
    assert!(
        seen.text.contains("timeout_ms"),
        "the model is told how to retry: {}",
        seen.text
    );
    assert_ne!(seen.is_error, Some(false));
    assert_eq!(stop_reason(&events), StopReason::Completed);
}

fn grep_and_glob(kit: Kit) {
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&[
                function("call_1", "glob", json!({"pattern": "**/*.rs"})),
                function(
                    "call_2",
                    "grep",
                    json!({"pattern": "fn target", "glob_filter": "*.rs"}),
                ),
            ]),
            kit.text("target is defined in src/lib.rs."),
        ],
    );
    run.write("src/lib.rs", "pub fn target() {}\n");
    run.write("src/main.rs", "fn main() { lib::target(); }\n");
    run.write("docs/notes.md", "fn target practice\n");
    let events = run.input("Where is target defined?");
    let ends = ended(&events);
    assert_eq!(ends.len(), 2);
    let glob = ends.iter().find(|e| e.tool_name == "glob").unwrap();
    let grep = ends.iter().find(|e| e.tool_name == "grep").unwrap();
    assert!(
        glob.text.contains("src/lib.rs") && glob.text.contains("src/main.rs"),
        "{}",
        glob.text
    );
    assert!(!glob.text.contains("notes.md"), "{}", glob.text);
    assert_eq!(grep.text, "src/lib.rs:1:pub fn target() {}");
    let seen = kit.tool_outputs(&run.bodies()[1]);
    assert_eq!(seen.len(), 2);
    assert!(seen[1].text.contains("src/lib.rs:1:pub fn target() {}"));
}

fn multi_step_read_analyze_edit(kit: Kit) {
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&[function(
                "call_1",
                "read_file",
                json!({"file_path": "calc.py"}),
            )]),
            kit.calls(&[function("call_2", "grep", json!({"pattern": "add\\("}))]),
            kit.calls(&[kit.edit("call_3", "calc.py", "    return a - b", "    return a + b")]),
            kit.text("add() subtracted; it adds now."),
        ],
    );
    run.write("calc.py", "def add(a, b):\n    return a - b\n");
    run.write(
        "test_calc.py",
        "from calc import add\nassert add(2, 2) == 4\n",
    );
    let events = run.input("The test fails; find out why and fix it");
    assert_eq!(run.read("calc.py"), "def add(a, b):\n    return a + b\n");
    let tools: Vec<String> = ended(&events).into_iter().map(|e| e.tool_name).collect();
    assert_eq!(tools, ["read_file", "grep", kit.edit_tool()]);
    let bodies = run.bodies();
    assert_eq!(bodies.len(), 4);
    // Each step's request carries every earlier result.
    for (i, body) in bodies.iter().enumerate() {
        assert_eq!(kit.tool_outputs(body).len(), i, "request {i}");
    }
    let grep = &kit.tool_outputs(&bodies[2])[1].text;
    assert!(grep.contains("calc.py:1:def add(a, b):"), "{grep}");
    assert!(
        grep.contains("test_calc.py:2:assert add(2, 2) == 4"),
        "{grep}"
    );
    let found =
        |event: &SessionEvent| matches!(event.kind, EventKind::ProcessingEnd { rounds: 3, .. });
    assert!(events.iter().any(found), "three tool rounds");
}

fn truncation_of_a_large_file(kit: Kit) {
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&[function(
                "call_1",
                "read_file",
                json!({"file_path": "big.txt"}),
            )]),
            kit.text("It is a long file."),
        ],
    );
    let big: String = (1..=2000)
        .map(|i| format!("line {i:04} {}\n", "x".repeat(40)))
        .collect();
    run.write("big.txt", &big);
    let events = run.input("Read big.txt");
    let ends = ended(&events);
    let full = &ends[0].text;
    assert!(ends[0].truncated);
    assert!(full.contains("line 0001") && full.contains("line 1000") && full.contains("line 2000"));
    assert!(
        full.len() > 100_000,
        "the host gets everything: {} chars",
        full.len()
    );
    let seen = &kit.tool_outputs(&run.bodies()[1])[0].text;
    assert!(
        seen.contains("[WARNING: Tool output was truncated."),
        "the model's copy has the marker"
    );
    assert!(
        seen.contains("line 0001") && seen.contains("line 2000"),
        "head and tail kept"
    );
    assert!(!seen.contains("line 1000"), "the middle is cut");
    assert!(
        seen.chars().count() < 51_000,
        "{} chars",
        seen.chars().count()
    );
}

fn parallel_tool_calls(kit: Kit) {
    // Each command waits for the other to start: only concurrent execution lets both see
    // the other before their own 5 s loop gives up.
    let rendezvous = |me: &str, other: &str| {
        format!(
            "touch {me}.started; for i in $(seq 1 500); do [ -e {other}.started ] && break; \
             sleep 0.01; done; [ -e {other}.started ] && echo {me} saw {other}"
        )
    };
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&[
                function("call_a", "shell", json!({"command": rendezvous("a", "b")})),
                function("call_b", "shell", json!({"command": rendezvous("b", "a")})),
            ]),
            kit.text("Both ran."),
        ],
    );
    assert!(kit.profile().supports_parallel_tool_calls);
    let events = run.input("Run both at once");
    let ends = ended(&events);
    assert_eq!(ends.len(), 2);
    let all: String = ends.iter().map(|e| e.text.as_str()).collect();
    assert!(all.contains("a saw b") && all.contains("b saw a"), "{all}");
    // Results reach the model in call order.
    let seen = kit.tool_outputs(&run.bodies()[1]);
    assert!(seen[0].text.contains("a saw b"), "{}", seen[0].text);
    assert!(seen[1].text.contains("b saw a"), "{}", seen[1].text);
}

fn steering_mid_task(kit: Kit) {
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&[function("call_1", "shell", json!({"command": GATED}))]),
            kit.text("Switching to tabs."),
        ],
    );
    let steer = "Actually, indent with tabs, not spaces";
    run.session.submit("Reformat the project").unwrap();
    let mut events = Vec::new();
    for event in run.events.by_ref() {
        let kind = event.kind.name();
        events.push(event);
        match kind {
            "tool_call_start" => {
                run.session.steer(steer).unwrap();
                std::fs::write(run.dir.path().join("go"), "").unwrap();
            }
            "processing_end" => break,
            _ => {}
        }
    }
    let injected = position(&events, "steering_injected");
    let second_call = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind.name() == "assistant_text_start")
        .nth(1)
        .map(|(i, _)| i)
        .expect("a second model call");
    assert!(injected < second_call, "{:?}", names(&events));
    let bodies = run.bodies();
    assert!(!bodies[0].to_string().contains(steer));
    assert_eq!(kit.last_user_text(&bodies[1]), steer);
    assert!(kit.tool_outputs(&bodies[1])[0].text.contains("released"));
}

fn reasoning_effort_change(kit: Kit) {
    let server = Server::start(vec![
        kit.calls(&[function("call_1", "shell", json!({"command": GATED}))]),
        kit.text("Done thinking harder."),
    ]);
    let config = SessionConfig::default().with_reasoning_effort("low");
    let mut run = Run::with(kit, server, config, |_| {});
    run.session.submit("Solve it").unwrap();
    for event in run.events.by_ref() {
        match event.kind.name() {
            "tool_call_start" => {
                run.session.set_reasoning_effort(Some("high".to_string()));
                std::fs::write(run.dir.path().join("go"), "").unwrap();
            }
            "processing_end" => break,
            _ => {}
        }
    }
    let bodies = run.bodies();
    assert_eq!(bodies.len(), 2);
    assert_eq!(kit.reasoning(&bodies[0]), kit.expected_reasoning("low"));
    assert_eq!(kit.reasoning(&bodies[1]), kit.expected_reasoning("high"));
}

fn subagent_spawn_and_wait(kit: Kit) {
    let parent_input = "PARENT-INPUT delegate the note";
    let task = "CHILD-TASK write note.txt containing hi";
    let server = Server::start_routed(
        vec![
            (
                parent_input,
                vec![
                    kit.calls(&[function("call_1", "spawn_agent", json!({"task": task}))]),
                    kit.calls(&[function("call_2", "wait", json!({"agent_id": "agent-1"}))]),
                    kit.text("The subagent wrote note.txt."),
                ],
            ),
            (
                task,
                vec![
                    kit.calls(&[function(
                        "call_c1",
                        "write_file",
                        json!({"file_path": "note.txt", "content": "hi\n"}),
                    )]),
                    kit.text("note written"),
                ],
            ),
        ],
        vec![],
    );
    let mut run = Run::with(kit, server, SessionConfig::default(), |_| {});
    let events = run.input(parent_input);
    assert_eq!(stop_reason(&events), StopReason::Completed);
    assert_eq!(
        run.read("note.txt"),
        "hi\n",
        "the child shares the filesystem"
    );
    let ends = ended(&events);
    let spawn = ends.iter().find(|e| e.tool_name == "spawn_agent").unwrap();
    let spawned: Value = serde_json::from_str(&spawn.text).unwrap();
    assert_eq!(spawned["agent_id"], "agent-1");
    let wait = ends.iter().find(|e| e.tool_name == "wait").unwrap();
    let result: Value = serde_json::from_str(&wait.text).unwrap();
    assert_eq!(result["output"], "note written");
    assert_eq!(result["success"], true);
    assert_eq!(result["turns_used"], 2);
    // The child's tool call is in the parent's stream, under the agent id.
    let child_call = events.iter().any(|e| match &e.kind {
        EventKind::SubagentEvent { agent_id, event } => {
            agent_id == "agent-1"
                && matches!(&event.kind, EventKind::ToolCallStart { tool_name, .. } if tool_name == "write_file")
        }
        _ => false,
    });
    assert!(child_call, "{:?}", names(&events));
    // The child runs its own conversation, without the subagent tools (depth 1 = max).
    let requests = run.server.requests();
    let child = requests
        .iter()
        .map(|r| r.json())
        .find(|b| !b.to_string().contains("PARENT-INPUT"))
        .expect("a child request");
    assert!(!kit.tool_names(child).contains(&"spawn_agent".to_string()));
    assert!(kit.system_prompt(child).contains("You are a subagent"));
    let parent_first = requests[0].json();
    assert!(
        kit.tool_names(parent_first)
            .contains(&"spawn_agent".to_string())
    );
}

fn loop_detection_warns(kit: Kit) {
    let call = || function("call_x", "read_file", json!({"file_path": "same.txt"}));
    let mut replies: Vec<_> = (0..10).map(|_| kit.calls(&[call()])).collect();
    replies.push(kit.text("I was repeating myself."));
    let mut run = Run::start(kit, replies);
    run.write("same.txt", "unchanged\n");
    let events = run.input("Check same.txt until it changes");
    let detection = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::LoopDetection { message } => Some(message.clone()),
            _ => None,
        })
        .expect("a LOOP_DETECTION event");
    assert!(detection.contains("Loop detected"), "{detection}");
    assert_eq!(stop_reason(&events), StopReason::Completed);
    let bodies = run.bodies();
    assert_eq!(bodies.len(), 11);
    assert_eq!(
        kit.last_user_text(&bodies[10]),
        detection,
        "the model gets the warning"
    );
    assert!(!bodies[9].to_string().contains("Loop detected"));
}

fn error_recovery(kit: Kit) {
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&[kit.edit("call_1", "app.py", "print('helo')", "print('hello')")]),
            kit.calls(&[function(
                "call_2",
                "read_file",
                json!({"file_path": "app.py"}),
            )]),
            kit.calls(&[kit.edit("call_3", "app.py", "print('hi')", "print('hello')")]),
            kit.text("Fixed after re-reading the file."),
        ],
    );
    run.write("app.py", "print('hi')\n");
    let events = run.input("Make app.py print hello");
    assert_eq!(run.read("app.py"), "print('hello')\n");
    let ends = ended(&events);
    assert!(ends[0].is_error, "the first edit fails: {}", ends[0].text);
    assert!(!ends[1].is_error && !ends[2].is_error);
    let failed = &kit.tool_outputs(&run.bodies()[1])[0];
    assert_ne!(failed.is_error, Some(false), "the model sees the failure");
    assert!(failed.text.contains("app.py"), "{}", failed.text);
    assert_eq!(stop_reason(&events), StopReason::Completed);
}

fn provider_editing_format(kit: Kit) {
    match kit {
        Kit::OpenAi => apply_patch_format(kit),
        Kit::Anthropic => edit_file_format(kit, "replace_all", json!({})),
        Kit::Gemini => edit_file_format(
            kit,
            "allow_multiple",
            json!({"instruction": "rename the counter everywhere"}),
        ),
    }
}

/// OpenAI: `apply_patch` is offered as a freeform grammar tool and one patch adds,
/// updates (with an `@@` hint), moves and deletes files.
fn apply_patch_format(kit: Kit) {
    let patch = "*** Begin Patch\n\
                 *** Add File: docs/README.md\n\
                 +# Tool\n\
                 *** Update File: src/app.py\n\
                 @@ def main():\n\
                 \x20    args = parse()\n\
                 -    run(args)\n\
                 +    run(args, verbose=True)\n\
                 \x20    return 0\n\
                 *** Update File: old_name.py\n\
                 *** Move to: new_name.py\n\
                 @@\n\
                 -VALUE = 1\n\
                 +VALUE = 2\n\
                 *** Delete File: obsolete.txt\n\
                 *** End Patch\n";
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&[custom("call_1", "apply_patch", patch)]),
            kit.text("Patched."),
        ],
    );
    run.write(
        "src/app.py",
        "def helper():\n    run(args)\n\ndef main():\n    args = parse()\n    run(args)\n    return 0\n",
    );
    run.write("old_name.py", "VALUE = 1\n");
    run.write("obsolete.txt", "bye\n");
    let events = run.input("Apply the change");
    let ends = ended(&events);
    assert!(!ends[0].is_error, "{}", ends[0].text);
    assert_eq!(run.read("docs/README.md"), "# Tool\n");
    assert_eq!(
        run.read("src/app.py"),
        "def helper():\n    run(args)\n\ndef main():\n    args = parse()\n    run(args, verbose=True)\n    return 0\n",
        "the @@ hint picked the second run(args)"
    );
    assert_eq!(run.read("new_name.py"), "VALUE = 2\n");
    assert!(!run.path("old_name.py").exists() && !run.path("obsolete.txt").exists());
    let bodies = run.bodies();
    let tool = bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "apply_patch")
        .unwrap();
    assert_eq!(tool["type"], "custom");
    assert_eq!(tool["format"]["type"], "grammar");
    assert_eq!(tool["format"]["syntax"], "lark");
    assert!(
        tool["format"]["definition"]
            .as_str()
            .unwrap()
            .contains("*** Begin Patch")
    );
    // The output goes back as the output of the custom call.
    let output = bodies[1]["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "custom_tool_call_output")
        .expect("a custom_tool_call_output item");
    assert_eq!(output["call_id"], "call_1");
}

/// Anthropic and Gemini: `edit_file` with the provider's parameter names; the
/// replace-every-occurrence flag under the provider's name.
fn edit_file_format(kit: Kit, all_flag: &str, extra: Value) {
    let mut args = json!({"file_path": "counter.js", "old_string": "count", "new_string": "total"});
    args[all_flag] = json!(true);
    for (key, value) in extra.as_object().unwrap() {
        args[key] = value.clone();
    }
    let mut run = Run::start(
        kit,
        vec![
            kit.calls(&[function(
                "call_1",
                "edit_file",
                json!({"file_path": "counter.js", "old_string": "count", "new_string": "total"}),
            )]),
            kit.calls(&[function("call_2", "edit_file", args)]),
            kit.text("Renamed."),
        ],
    );
    run.write(
        "counter.js",
        "let count = 0;\ncount += 1;\nconsole.log(count);\n",
    );
    let events = run.input("Rename count to total");
    assert_eq!(
        run.read("counter.js"),
        "let total = 0;\ntotal += 1;\nconsole.log(total);\n"
    );
    let ends = ended(&events);
    assert!(
        ends[0].is_error,
        "three matches without the flag are refused"
    );
    assert!(
        ends[0].text.contains(all_flag),
        "the error names this profile's flag: {}",
        ends[0].text
    );
    assert!(!ends[1].is_error, "{}", ends[1].text);
    let bodies = run.bodies();
    let schema = match kit {
        Kit::Anthropic => bodies[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "edit_file")
            .unwrap()["input_schema"]
            .clone(),
        _ => bodies[0]["tools"][0]["functionDeclarations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "edit_file")
            .unwrap()["parameters"]
            .clone(),
    };
    let properties = schema["properties"].as_object().unwrap();
    for name in ["file_path", "old_string", "new_string", all_flag] {
        assert!(properties.contains_key(name), "{name} in {schema}");
    }
}
