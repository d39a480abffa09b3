//! Hostile transports: one that floods 300 MB without a newline (at `hello`, or on a later
//! call) and one that never answers `hello`. Each fails at once or at the hello timeout
//! with an error naming the cause, the transport's process group is ended, and after a
//! flood the environment's next call reconnects.

use std::path::Path;
use std::time::{Duration, Instant};

use agentloop::exec::ExecutionEnvironment;
use agentloop::exec::remote::{
    DEFAULT_HELLO_TIMEOUT, RemoteError, RemoteExecutionEnvironment, Transport,
};
use serde_json::json;

use super::{assert_gone, base_env, running, server_binary};
use support::GENEROUS;

/// A transport running `script` in bash, which first writes its pid to `dir/pid`.
fn scripted(dir: &Path, script: &str) -> Transport {
    let pid_file = dir.join("pid");
    let script = format!("echo $$ > '{}'; {script}", pid_file.display());
    Transport::direct(vec!["bash".into(), "-c".into(), script])
        .with_env(base_env())
        .with_label("hostile-transport")
}

fn pid_in(dir: &Path) -> i32 {
    let text = std::fs::read_to_string(dir.join("pid")).unwrap();
    text.trim().parse().unwrap()
}

/// 300 MB of NUL bytes without a newline, then the pipe held open for ten minutes.
const FLOOD: &str = "head -c 314572800 /dev/zero; exec sleep 600";

#[test]
fn a_transport_flooding_300_mb_at_hello_fails_at_the_line_cap_and_is_ended() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let error = RemoteExecutionEnvironment::connect(scripted(dir.path(), FLOOD), None)
        .expect_err("a flood is no hello");
    assert!(started.elapsed() < GENEROUS, "{:?}", started.elapsed());
    assert!(
        matches!(
            RemoteError::of(&error),
            Some(RemoteError::LineTooLong { limit }) if *limit == 32 << 20
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("33554432-byte cap"), "{error}");
    // Ended before `connect` returned, not when the flood or the sleep would end.
    assert!(!running(pid_in(dir.path())), "the transport still runs");
}

#[test]
fn a_flood_mid_session_fails_that_call_and_the_next_call_reconnects() {
    let dir = tempfile::tempdir().unwrap();
    // The first connection answers `hello` like a server, then floods on the next request;
    // every later connection is the real exec-server.
    let hello = json!({"jsonrpc": "2.0", "id": 1, "result": {
        "protocol_version": 2, "server": "flooding-server", "working_directory": "/tmp",
        "platform": "linux", "os_version": "Fake 1", "max_command_timeout_ms": 600_000,
    }});
    let flag = dir.path().join("flooded");
    let script = format!(
        "if [ -e '{flag}' ]; then exec '{server}'; fi; touch '{flag}'; read l; echo '{hello}'; \
         read l; {FLOOD}",
        flag = flag.display(),
        server = server_binary().display(),
    );
    let env = RemoteExecutionEnvironment::connect(scripted(dir.path(), &script), None).unwrap();
    let flooding = pid_in(dir.path());
    let started = Instant::now();
    let error = env
        .stat(Path::new("/"))
        .expect_err("the flood ends the call");
    assert!(started.elapsed() < GENEROUS, "{:?}", started.elapsed());
    assert!(
        matches!(
            RemoteError::of(&error),
            Some(RemoteError::LineTooLong { .. })
        ),
        "{error:?}"
    );
    assert_gone(flooding);
    // The environment lives on: the next call starts a new connection, to a real server.
    let stat = env.stat(Path::new("/")).expect("the next call reconnects");
    assert!(stat.is_dir);
    assert_ne!(pid_in(dir.path()), flooding, "a new transport");
}

#[test]
fn a_transport_that_never_answers_hello_fails_at_the_hello_timeout_and_is_ended() {
    let dir = tempfile::tempdir().unwrap();
    let timeout = Duration::from_millis(1500);
    let transport = scripted(
        dir.path(),
        "echo 'waiting for a passphrase' >&2; exec sleep 600",
    )
    .with_hello_timeout(timeout);
    let started = Instant::now();
    let error = RemoteExecutionEnvironment::connect(transport, None).expect_err("no hello");
    let waited = started.elapsed();
    assert!(
        waited >= timeout && waited < timeout + GENEROUS,
        "{waited:?}"
    );
    assert!(
        matches!(
            RemoteError::of(&error),
            Some(RemoteError::NoHello { waited, .. }) if *waited == timeout
        ),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("`hostile-transport`")
            && message.contains("within 1.5 s (its hello timeout)")
            && message.contains("waiting for a passphrase"),
        "the message names the transport, the timeout and its last words: {message}"
    );
    assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
    assert!(!running(pid_in(dir.path())), "the transport still runs");
    assert!(
        DEFAULT_HELLO_TIMEOUT.as_secs() * 2 <= 60,
        "the default is well under a minute"
    );
}
