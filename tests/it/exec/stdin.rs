//! `CommandRequest::stdin`: the bytes reach the command's standard input, and a command
//! that never reads them neither hangs the call nor outlives it.

use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::{CommandRequest, ExecutionEnvironment, LocalExecutionEnvironment};

use support::GENEROUS;

#[test]
fn stdin_bytes_reach_the_command_and_are_closed_after() {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();
    let request = CommandRequest::new(
        "wc -c; cat >/dev/null; echo closed",
        Duration::from_secs(20),
    )
    .with_stdin(b"{\"event\":\"pre_tool_use\"}\n".to_vec());
    let result = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .unwrap();
    assert_eq!(result.exit_code, Some(0), "{result:?}");
    assert_eq!(
        result.stdout.split_whitespace().collect::<Vec<_>>(),
        ["25", "closed"]
    );
}

#[test]
fn a_command_that_never_reads_a_large_input_ends_on_its_own_or_at_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let env = LocalExecutionEnvironment::new(dir.path()).unwrap();
    let big = vec![b'x'; 4 * 1024 * 1024];
    // Exits at once without reading: the writer sees a closed pipe.
    let request = CommandRequest::new("exit 3", Duration::from_secs(20)).with_stdin(big.clone());
    let result = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .unwrap();
    assert_eq!(result.exit_code, Some(3));
    // Never reads and never exits: the timeout ends it and the call returns.
    let started = Instant::now();
    let request = CommandRequest::new("sleep 30", Duration::from_millis(300)).with_stdin(big);
    let result = env
        .exec_command(&request, &|_, _| {}, &CancelToken::new())
        .unwrap();
    assert!(result.timed_out);
    assert!(started.elapsed() < GENEROUS);
}
