//! Protocol faults, both ways: a "server" (a bash script speaking just enough of the
//! protocol) that sends a malformed or oversized line or an old version, and the real
//! exec-server given malformed, oversized, early or wrong-version input.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::remote::protocol::PROTOCOL_VERSION;
use agentloop::exec::remote::{RemoteError, RemoteExecutionEnvironment, Transport};
use agentloop::exec::{CommandRequest, ExecutionEnvironment};
use serde_json::{Value, json};

use super::{base_env, server_binary};

use support::GENEROUS;

/// A hello answer for protocol version `version`.
fn hello(version: u64) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "result": {
        "protocol_version": version, "server": "fake-server 0.0.1",
        "working_directory": "/tmp", "platform": "linux", "os_version": "Fake 1",
        "max_command_timeout_ms": 600_000, "max_line_bytes": 1024, "sandbox": ["full-access"]
    }})
    .to_string()
}

/// A transport running `script` in bash (the script reads requests from stdin).
fn fake(script: &str) -> Transport {
    Transport::direct(vec!["bash".into(), "-c".into(), script.into()])
        .with_env(base_env())
        .with_label("fake-server")
}

fn connect_error(script: &str) -> (std::io::Error, RemoteError) {
    let error = RemoteExecutionEnvironment::connect(fake(script), None).unwrap_err();
    let remote = RemoteError::of(&error)
        .expect("a RemoteError inside")
        .clone();
    (error, remote)
}

#[test]
fn an_old_server_version_is_refused_with_a_message() {
    let (error, remote) = connect_error(&format!("read l; echo '{}'; read l", hello(0)));
    assert!(matches!(
        remote,
        RemoteError::Version {
            server_version: 0,
            client_version: PROTOCOL_VERSION,
            ..
        }
    ));
    let message = error.to_string();
    assert!(
        message.contains("fake-server 0.0.1") && message.contains("version 0"),
        "{message}"
    );
    assert!(message.contains("same agentloop release"), "{message}");
    assert_eq!(error.kind(), std::io::ErrorKind::Unsupported);
}

#[test]
fn a_version_1_server_without_background_processes_is_refused_with_a_message() {
    // What an exec-server of version 1 answers a client of a newer version.
    let reply = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32001,
        "message": "protocol version 2 is not supported; agentloop-exec-server 0.1.0 speaks version 1",
        "data": {"supported": 1}}});
    let (error, remote) = connect_error(&format!("read l; echo '{reply}'; read l"));
    assert!(
        matches!(
            remote,
            RemoteError::Version {
                server_version: 1,
                client_version: PROTOCOL_VERSION,
                ..
            }
        ),
        "{remote:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("version 1") && message.contains(&format!("version {PROTOCOL_VERSION}")),
        "{message}"
    );
    assert!(message.contains("same agentloop release"), "{message}");
    // A version-1 hello answer is refused the same way.
    let (_, remote) = connect_error(&format!("read l; echo '{}'; read l", hello(1)));
    assert!(
        matches!(
            remote,
            RemoteError::Version {
                server_version: 1,
                ..
            }
        ),
        "{remote:?}"
    );
}

#[test]
fn a_server_that_does_not_know_hello_is_refused_as_too_old() {
    let reply = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"unknown method"}}"#;
    let (_, remote) = connect_error(&format!("read l; echo '{reply}'; read l"));
    assert!(
        matches!(
            remote,
            RemoteError::Version {
                server_version: 0,
                ..
            }
        ),
        "{remote:?}"
    );
}

/// A fake server that answers hello, then sends `line` after the next request.
fn after_hello(line_command: &str) -> RemoteError {
    let script = format!(
        "read l; echo '{}'; read l; {line_command}; sleep 30",
        hello(PROTOCOL_VERSION)
    );
    let env = RemoteExecutionEnvironment::connect(fake(&script), None).unwrap();
    let started = Instant::now();
    let error = env.stat(Path::new("x")).unwrap_err();
    // The fake sleeps 30 s after the line, longer than the ceiling.
    assert!(
        started.elapsed() < GENEROUS,
        "the error waited for the transport"
    );
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData, "{error}");
    RemoteError::of(&error)
        .expect("a RemoteError inside")
        .clone()
}

#[test]
fn a_malformed_line_from_the_server_is_a_typed_error() {
    let remote = after_hello("echo 'this is not json'");
    let RemoteError::Malformed { detail } = &remote else {
        panic!("{remote:?}")
    };
    assert!(detail.contains("this is not json"), "{detail}");
}

#[test]
fn an_oversized_line_from_the_server_is_a_typed_error() {
    // 33 MiB without a newline, then one.
    let remote = after_hello("head -c 34603008 /dev/zero | tr '\\0' x; echo");
    assert!(
        matches!(remote, RemoteError::LineTooLong { limit } if limit == 32 << 20),
        "{remote:?}"
    );
}

#[test]
fn a_transport_that_cannot_start_is_a_spawn_error() {
    let transport = Transport::direct(vec!["/nonexistent/exec-server".into()]);
    let error = RemoteExecutionEnvironment::connect(transport, None).unwrap_err();
    assert!(
        matches!(RemoteError::of(&error), Some(RemoteError::Spawn { .. })),
        "{error}"
    );
}

#[test]
fn a_transport_that_exits_at_once_says_why() {
    let (error, remote) = connect_error("echo 'Permission denied (publickey).' >&2; exit 255");
    assert!(matches!(remote, RemoteError::Closed { .. }), "{remote:?}");
    assert!(
        error.to_string().contains("Permission denied (publickey)"),
        "{error}"
    );
}

/// The real exec-server, talked to line by line.
struct Raw {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Raw {
    fn start() -> Raw {
        let mut child = Command::new(server_binary())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Raw {
            child,
            stdin,
            stdout,
        }
    }

    /// Says hello with this client's version.
    fn hello(&mut self) -> Value {
        let hello = json!({"jsonrpc": "2.0", "id": 1, "method": "hello",
            "params": {"protocol_version": PROTOCOL_VERSION}});
        self.send(hello.to_string().as_bytes())
    }

    fn send(&mut self, line: &[u8]) -> Value {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        serde_json::from_str(&answer).unwrap()
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_server_answers_bad_input_with_typed_errors_and_goes_on() {
    let mut raw = Raw::start();
    let early = raw.send(br#"{"jsonrpc":"2.0","id":1,"method":"fs/stat","params":{"path":"."}}"#);
    assert_eq!(early["error"]["code"], -32002, "{early}");
    let old =
        raw.send(br#"{"jsonrpc":"2.0","id":2,"method":"hello","params":{"protocol_version":0}}"#);
    assert_eq!(old["error"]["code"], -32001, "{old}");
    assert!(
        old["error"]["message"]
            .as_str()
            .unwrap()
            .contains("version 0"),
        "{old}"
    );
    let garbage = raw.send(b"{not json");
    assert_eq!(
        (garbage["id"].clone(), garbage["error"]["code"].clone()),
        (Value::Null, json!(-32700))
    );
    let huge = vec![b'x'; 33 * 1024 * 1024];
    let too_long = raw.send(&huge);
    assert_eq!(too_long["error"]["code"], -32700, "{too_long}");
    assert!(
        too_long["error"]["message"]
            .as_str()
            .unwrap()
            .contains("longer than")
    );
    let hello = raw.send(
        json!({"jsonrpc":"2.0","id":3,"method":"hello","params":{"protocol_version":PROTOCOL_VERSION}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(
        hello["result"]["protocol_version"], PROTOCOL_VERSION,
        "{hello}"
    );
    let unknown = raw.send(br#"{"jsonrpc":"2.0","id":4,"method":"fs/format","params":{}}"#);
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    let sandbox = raw.send(
        br#"{"jsonrpc":"2.0","id":5,"method":"fs/stat","params":{"path":".","sandbox":"root"}}"#,
    );
    assert_eq!(sandbox["error"]["code"], -32602, "{sandbox}");
    let missing = raw
        .send(br#"{"jsonrpc":"2.0","id":6,"method":"fs/stat","params":{"path":"/nonexistent/x"}}"#);
    assert_eq!(missing["error"]["data"]["kind"], "NotFound", "{missing}");
}

#[test]
fn end_of_input_ends_the_running_commands_and_the_server() {
    // The client starts a command and disappears: the server ends it and exits.
    let mut raw = Raw::start();
    raw.hello();
    let start = json!({"jsonrpc":"2.0","id":2,"method":"process/start",
        "params":{"command":"echo \"pids $$\"; sleep 30","timeout_ms":60000}});
    let output = raw.send(start.to_string().as_bytes());
    let data = output["params"]["data"].as_str().unwrap().to_string();
    let text = String::from_utf8(decode(&data)).unwrap();
    let pid = super::pids_in(&text)[0];
    // End of input, as when the connection drops: the server ends the command and exits.
    raw.stdin.take();
    super::assert_gone(pid);
    let deadline = Instant::now() + GENEROUS;
    while raw.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the server did not exit at end of input"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn decode(text: &str) -> Vec<u8> {
    // Standard base64 with padding (the protocol's), decoded independently of the crate.
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            _ => 63,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

#[test]
fn a_command_cancelled_before_it_starts_never_runs() {
    let Some(f) = super::Fixture::new(super::Via::Stdio) else {
        return;
    };
    let cancel = CancelToken::new();
    cancel.cancel();
    let request = CommandRequest::new("touch ran", Duration::from_secs(10));
    let r = f.env.exec_command(&request, &|_, _| {}, &cancel).unwrap();
    assert!(r.cancelled);
    assert!(!f.dir.path().join("ran").exists());
    f.finish();
}

#[test]
fn a_server_ended_by_sigterm_ends_its_commands_first() {
    let Some(f) = super::Fixture::new(super::Via::Stdio) else {
        return;
    };
    let (tx, rx) = crossbeam_channel::unbounded::<Vec<u8>>();
    let request = CommandRequest::new(
        "sleep 30 & echo \"pids $$ $!\"; grep SigBlk /proc/self/status; wait",
        Duration::from_secs(60),
    );
    let result = std::thread::scope(|s| {
        let running = s.spawn(|| {
            f.env.exec_command(
                &request,
                &|_, c| tx.send(c.to_vec()).unwrap(),
                &CancelToken::new(),
            )
        });
        // Both lines first: the pids, and the signal mask of the `grep` that ran (a
        // SIGTERM sent after the first line alone could end the command before `grep`).
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("SigBlk") {
            let chunk = rx
                .recv_timeout(GENEROUS)
                .expect("the pids and the signal mask arrive");
            seen.extend_from_slice(&chunk);
        }
        // SAFETY: the server is this test's own child.
        unsafe { libc::kill(f.server_pid, libc::SIGTERM) };
        running.join().unwrap()
    });
    // The server answered before it exited: the command was stopped, not lost.
    let result = result.expect("the server answers the call before exiting");
    assert!(result.cancelled, "{result:?}");
    // Commands do not inherit the server's blocked signals.
    assert!(
        result.stdout.contains("SigBlk:\t0000000000000000"),
        "{}",
        result.stdout
    );
    for pid in super::pids_in(&result.stdout) {
        super::assert_gone(pid);
    }
    super::assert_gone(f.server_pid);
    // The next call reconnects.
    assert_eq!(super::run(&f.env, "echo back", 20_000).stdout, "back\n");
    drop(f);
}
