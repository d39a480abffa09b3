//! The shell tool with real bash through LocalExecutionEnvironment: output layout, timeouts
//! (per call, default, clamped), live output, interruption.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::{LocalExecutionEnvironment, OutputStream};
use agentloop::llm::ToolCall;
use agentloop::tools::{ToolContext, ToolRegistry, shell};
use agentloop::unstable::{ToolOutcome, prepare_call};
use serde_json::{Value, json};

use support::GENEROUS;

const TIMEOUT_MESSAGE_TAIL: &str = "ms. Partial output is shown above.\nYou can retry with a longer timeout by setting the timeout_ms parameter.]";

fn run(ctx: &ToolContext<'_>, arguments: Value) -> ToolOutcome {
    let mut registry = ToolRegistry::new();
    registry.register(shell());
    prepare_call(&registry, &ToolCall::new("call-1", "shell", arguments))
        .expect("valid arguments")
        .run(ctx)
}

/// Runs the shell tool with `arguments` in `dir`, on a fresh context `configure` adjusts.
fn run_in(
    dir: &Path,
    arguments: Value,
    configure: impl FnOnce(&mut ToolContext<'_>),
) -> ToolOutcome {
    let env = LocalExecutionEnvironment::new(dir).unwrap();
    let cancel = CancelToken::new();
    let mut ctx = ToolContext::new(&env, "c", &cancel);
    configure(&mut ctx);
    run(&ctx, arguments)
}

/// Runs the shell tool with `arguments` in a fresh temporary directory.
fn run_shell(arguments: Value) -> ToolOutcome {
    let dir = tempfile::tempdir().unwrap();
    run_in(dir.path(), arguments, |_| {})
}

#[test]
fn shell_reports_stdout_stderr_exit_code_and_duration() {
    let outcome =
        run_shell(json!({"command": "echo out; echo err >&2; exit 3", "description": "demo"}));
    assert!(
        !outcome.is_error,
        "a non-zero exit is not a tool error: {}",
        outcome.text
    );
    assert!(
        outcome.text.starts_with(
            "<stdout>\nout\n</stdout>\n<stderr>\nerr\n</stderr>\nexit code: 3\nduration: "
        ),
        "{}",
        outcome.text
    );
    assert!(outcome.text.ends_with(" ms"), "{}", outcome.text);
}

#[test]
fn shell_runs_in_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("marker.txt"), "here").unwrap();
    let outcome = run_in(dir.path(), json!({"command": "cat marker.txt"}), |_| {});
    assert!(
        outcome
            .text
            .starts_with("<stdout>\nhere\n</stdout>\nexit code: 0"),
        "{}",
        outcome.text
    );
}

#[test]
fn a_command_without_output_says_so() {
    let outcome = run_shell(json!({"command": "true"}));
    assert!(
        outcome
            .text
            .starts_with("(no output)\nexit code: 0\nduration: "),
        "{}",
        outcome.text
    );
}

#[test]
fn a_timeout_is_an_error_with_partial_output_and_the_spec_message() {
    let started = Instant::now();
    let outcome = run_shell(json!({"command": "echo partial; sleep 30", "timeout_ms": 400}));
    assert!(started.elapsed() < GENEROUS, "took {:?}", started.elapsed());
    assert!(outcome.is_error, "{}", outcome.text);
    assert!(
        outcome.text.contains("<stdout>\npartial\n</stdout>"),
        "{}",
        outcome.text
    );
    assert!(
        outcome.text.ends_with(&format!(
            "\n[ERROR: Command timed out after 400{TIMEOUT_MESSAGE_TAIL}"
        )),
        "{}",
        outcome.text
    );
}

#[test]
fn the_context_default_timeout_applies_when_the_call_sets_none() {
    let dir = tempfile::tempdir().unwrap();
    let outcome = run_in(dir.path(), json!({"command": "sleep 30"}), |ctx| {
        ctx.default_timeout = Duration::from_millis(300);
    });
    assert!(outcome.is_error);
    assert!(
        outcome
            .text
            .ends_with(&format!("after 300{TIMEOUT_MESSAGE_TAIL}")),
        "{}",
        outcome.text
    );
}

#[test]
fn a_timeout_longer_than_the_maximum_is_clamped() {
    let dir = tempfile::tempdir().unwrap();
    let arguments = json!({"command": "sleep 30", "timeout_ms": 600_000});
    let outcome = run_in(dir.path(), arguments, |ctx| {
        ctx.max_timeout = Duration::from_millis(350);
    });
    assert!(outcome.is_error);
    assert!(
        outcome
            .text
            .ends_with(&format!("after 350{TIMEOUT_MESSAGE_TAIL}")),
        "{}",
        outcome.text
    );
}

#[test]
fn output_reaches_the_context_callback_live_and_cancel_interrupts() {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();
    let cancel = CancelToken::new();
    let (chunk_tx, chunk_rx) = crossbeam_channel::unbounded::<(OutputStream, Vec<u8>)>();
    let on_output = move |stream: OutputStream, chunk: &[u8]| {
        let _ = chunk_tx.send((stream, chunk.to_vec()));
    };
    let mut ctx = ToolContext::new(&env, "c", &cancel);
    ctx.on_output = &on_output;
    let (outcome, after_cancel) = thread::scope(|scope| {
        let running = thread::Builder::new()
            .name("test-shell-call".into())
            .spawn_scoped(scope, || {
                let outcome = run(
                    &ctx,
                    json!({"command": "echo started; sleep 30", "timeout_ms": 60_000}),
                );
                (outcome, Instant::now())
            })
            .expect("spawn the call thread");
        let (stream, chunk) = chunk_rx
            .recv_timeout(GENEROUS)
            .expect("the first output arrives while the command runs");
        assert_eq!(
            (stream, chunk.as_slice()),
            (OutputStream::Stdout, &b"started\n"[..])
        );
        let cancelled_at = Instant::now();
        cancel.cancel();
        let (outcome, returned_at) = running.join().expect("the call thread");
        (outcome, returned_at - cancelled_at)
    });
    assert!(after_cancel < GENEROUS, "took {after_cancel:?}");
    assert!(outcome.is_error, "{}", outcome.text);
    assert!(
        outcome.text.contains("<stdout>\nstarted\n</stdout>"),
        "{}",
        outcome.text
    );
    assert!(
        outcome.text.contains("[Command interrupted:"),
        "{}",
        outcome.text
    );
}

#[test]
fn an_escaped_process_is_noted() {
    let outcome = run_shell(json!({"command": "setsid sleep 30 & echo $!; echo done"}));
    let pid: u32 = outcome
        .text
        .lines()
        .nth(1)
        .and_then(|line| line.trim().parse().ok())
        .expect("the command prints the escaped pid");
    // Clean up what the library deliberately leaves alone.
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    assert!(!outcome.is_error, "{}", outcome.text);
    assert!(
        outcome
            .text
            .contains("[note: a process left the command's process group"),
        "{}",
        outcome.text
    );
}

#[test]
fn an_empty_command_is_refused() {
    let outcome = run_shell(json!({"command": "  "}));
    assert!(outcome.is_error);
    assert!(
        outcome.text.contains("the command is empty"),
        "{}",
        outcome.text
    );
}
