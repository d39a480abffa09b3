//! Background processes through the exec-server (stdio transport): the suite of
//! `exec/background.rs`, and what only the remote side has (the processes end with the
//! connection, the server's environment stays out of their output).

use std::time::Duration;

use agentloop::CancelToken;
use agentloop::exec::{ExecutionEnvironment, OutputStream};
use serde_json::json;
use support::GENEROUS;

use super::{Fixture, SECRET, Via};
use crate::exec::background::{Keep, LIMIT, assert_all_gone, read_pids, start};

fn remote_env() -> Option<(Keep, Box<dyn ExecutionEnvironment>)> {
    let fixture = Fixture::new(Via::Stdio)?;
    let Fixture { env, dir, .. } = fixture;
    Some((Box::new(dir), Box::new(env)))
}

crate::exec::background::background_suite!(remote_env());

#[test]
fn a_server_ended_by_sigterm_ends_its_background_processes_and_the_client_hears_of_it() {
    let fixture = Fixture::new(Via::Stdio).unwrap();
    let (process, exits) = start(
        &fixture.env,
        "sh -c 'echo pid $(cut -d\" \" -f4 /proc/self/stat); exec sleep 300' & wait",
        LIMIT,
    );
    let mut pids = read_pids(&*process, 1);
    pids.push(process.pid() as i32);
    // SAFETY: a signal to the exec-server this test started.
    assert_eq!(unsafe { libc::kill(fixture.server_pid, libc::SIGTERM) }, 0);
    super::assert_gone(fixture.server_pid);
    assert_all_gone(&pids);
    let exit = exits.recv_timeout(GENEROUS).expect("the exit is reported");
    assert!(exit.cancelled && exit.exit_code.is_none(), "{exit:?}");
    // Using the handle now is an error, not a hang.
    let err = process.write_stdin(b"x\n").unwrap_err();
    assert!(
        agentloop::exec::remote::RemoteError::of(&err).is_some(),
        "{err}"
    );
}

#[test]
fn end_of_input_ends_the_background_processes_and_the_server() {
    // The protocol by hand: a client that starts a background process and disappears.
    let mut server = std::process::Command::new(super::server_binary())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take();
    let mut stdout = std::io::BufReader::new(server.stdout.take().unwrap());
    let mut call = |line: serde_json::Value| -> serde_json::Value {
        use std::io::{BufRead, Write};
        writeln!(stdin.as_ref().unwrap(), "{line}").unwrap();
        loop {
            let mut answer = String::new();
            stdout.read_line(&mut answer).unwrap();
            let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
            if answer.get("id") == line.get("id") {
                return answer;
            }
        }
    };
    let version = agentloop::exec::remote::protocol::PROTOCOL_VERSION;
    call(json!({"jsonrpc": "2.0", "id": 1, "method": "hello",
        "params": {"protocol_version": version}}));
    let started = call(
        json!({"jsonrpc": "2.0", "id": 2, "method": "background/start",
        "params": {"command": "echo pid $$; exec sleep 300", "output_limit": 4096}}),
    );
    let pid = started["result"]["pid"].as_i64().expect("a pid") as i32;
    let read = call(
        json!({"jsonrpc": "2.0", "id": 3, "method": "background/read",
        "params": {"id": 2, "stream": "stdout", "from": 0, "max_bytes": 100, "wait_ms": 20_000}}),
    );
    assert!(read["result"]["total"].as_u64().unwrap() > 0, "{read}");
    // End of input: the client is gone.
    stdin.take();
    assert_all_gone(&[pid]);
    let status = support::programs::exit_within("the exec-server", move || server.wait());
    assert!(status.success(), "{status:?}");
}

#[test]
fn the_servers_secrets_stay_out_of_background_output() {
    let fixture = Fixture::new(Via::Stdio).unwrap();
    let (process, exits) = start(
        &fixture.env,
        "echo key=${OPENAI_API_KEY:-none}; tr '\\0' '\\n' < /proc/$PPID/environ",
        LIMIT,
    );
    exits.recv_timeout(GENEROUS).unwrap();
    let out = process
        .read(
            OutputStream::Stdout,
            0,
            usize::MAX,
            Duration::ZERO,
            &CancelToken::new(),
        )
        .unwrap();
    let text = String::from_utf8_lossy(&out.bytes);
    assert!(text.starts_with("key=none\n"), "{text}");
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains("[REDACTED:OPENAI_API_KEY]"), "{text}");
    drop(process);
    fixture.finish();
}
