//! The small examples run offline (scripted model, temporary directories) and show what
//! their doc comment promises.

use std::process::Command;

use support::programs::{example, run_command};

/// Runs an example with an empty environment except `PATH`; returns its stdout.
fn run(name: &str) -> String {
    let mut command = Command::new(example(name));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    let ran = run_command(command, "");
    assert_eq!(ran.status, Some(0), "{name} failed: {}", ran.all_output());
    ran.stdout
}

#[test]
fn the_minimal_example_runs_a_command_and_answers() {
    let out = run("minimal");
    assert!(out.contains("hello from the tool"), "{out}");
    assert!(out.contains("The command printed a greeting."), "{out}");
}

#[test]
fn the_custom_tool_example_shows_a_result_and_a_validation_error() {
    let out = run("custom_tool");
    assert!(out.contains("word_count -> 4 words"), "{out}");
    assert!(out.contains("word_count failed -> "), "{out}");
    assert!(out.contains("\"text\" must be a string"), "{out}");
}

#[test]
fn the_approvals_example_denies_the_delete_and_approves_the_asked_write() {
    let out = run("approvals");
    assert!(out.contains("shell refused: "), "{out}");
    assert!(out.contains("deleting files is not allowed"), "{out}");
    assert!(out.contains("write_file ran: "), "{out}");
    assert!(out.contains("notes.txt: remember the milk"), "{out}");
}

#[test]
fn the_steering_example_delivers_the_steer_and_then_the_follow_up() {
    let out = run("steering");
    let steered = out.find("[steered: use tabs, not spaces]").expect(&out);
    let answered = out.find("Understood: tabs").expect(&out);
    let follow_up = out.find("> count the lines").expect(&out);
    assert!(steered < answered && answered < follow_up, "{out}");
}

#[test]
fn the_custom_environment_example_refuses_sudo_and_audits_every_operation() {
    let out = run("custom_environment");
    assert!(out.contains("shell (error): "), "{out}");
    assert!(out.contains("sudo is not available here"), "{out}");
    assert!(out.contains("exec: sudo apt-get install cowsay"), "{out}");
    assert!(out.contains("(3 bytes)"), "{out}");
    assert!(out.contains("exec: cat hi.txt"), "{out}");
}

#[test]
fn the_subagents_example_shows_the_child_at_work_and_its_result_in_the_parent() {
    let out = run("subagents");
    let child = out.find("[agent-1] write_file done").expect(&out);
    let waited = out.find("[parent] wait: ").expect(&out);
    assert!(child < waited, "{out}");
    assert!(
        out.contains("The subagent reports: \"TESTS.md lists two cases.\""),
        "{out}"
    );
    assert!(out.contains("- greets the world"), "{out}");
}

#[test]
fn the_acp_agent_example_serves_a_prompt_that_calls_its_own_tool() {
    use std::io::{BufRead, BufReader, Write};
    use support::{FAKE_KEY, GENEROUS, Server, turns};

    let server = Server::start(vec![
        turns::anthropic_turn(
            "",
            &[turns::function("c1", "rust_lines", serde_json::json!({}))],
        ),
        turns::anthropic_turn("two lines", &[]),
    ]);
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("src")).unwrap();
    std::fs::write(work.path().join("src/main.rs"), "fn main() {\n}\n").unwrap();
    let mut child = Command::new(example("acp_agent"))
        .current_dir(work.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("ANTHROPIC_API_KEY", FAKE_KEY)
        .env("ANTHROPIC_BASE_URL", server.url())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let cwd = work.path().display().to_string();
    let mut stdin = child.stdin.take().unwrap();
    for message in [
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}),
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}}),
    ] {
        writeln!(stdin, "{message}").unwrap();
    }
    let (tx, lines) = crossbeam_channel::unbounded();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::Builder::new()
        .name("example-acp-reader".to_string())
        .spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        })
        .unwrap();
    let next = || -> serde_json::Value {
        serde_json::from_str(&lines.recv_timeout(GENEROUS).expect("a message")).unwrap()
    };
    let session = loop {
        let message = next();
        if message["id"] == 1 {
            break message["result"]["sessionId"].as_str().unwrap().to_string();
        }
    };
    let prompt = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "how many lines?"}]}});
    writeln!(stdin, "{prompt}").unwrap();
    let mut seen = Vec::new();
    let answer = loop {
        let message = next();
        if message["id"] == 2 {
            break message;
        }
        seen.push(message);
    };
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let result = seen
        .iter()
        .find(|m| m["params"]["update"]["status"] == "completed")
        .unwrap_or_else(|| panic!("{seen:#?}"));
    assert_eq!(
        result["params"]["update"]["content"][0]["content"]["text"],
        "2 lines in 1 files"
    );
    drop(stdin);
    let status = support::programs::exit_within("the example", move || child.wait());
    assert_eq!(status.code(), Some(0));
    reader.join().unwrap();
}
