//! The CLI against what a user cannot control: a model stream wedged on keep-alive
//! comments (`--stream-idle-timeout`).

use std::io::{Read, Write};
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use support::GENEROUS;
use support::raw_server::{SSE_HEAD, raw_server};

use crate::agent;

#[test]
fn stream_idle_timeout_ends_a_keep_alive_only_stream_after_that_many_seconds() {
    // Headers, then an SSE comment every second and never an event.
    let (url, server) = raw_server(|mut stream| {
        let started = Instant::now();
        if stream.write_all(SSE_HEAD).is_err() {
            return;
        }
        while started.elapsed() < Duration::from_secs(50) {
            if stream.write_all(b": keep-alive\n\n").is_err() {
                return;
            }
            thread::sleep(Duration::from_secs(1));
        }
    });
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let base_url = format!("{url}/v1");
    let mut command = agent(
        &[
            "--json",
            "--provider",
            "openai-chat",
            "--base-url",
            &base_url,
            "--cwd",
            work.path().to_str().unwrap(),
            "--stream-idle-timeout",
            "20",
            "say hi",
        ],
        &[("OPENAI_COMPATIBLE_API_KEY", support::FAKE_KEY)],
        home.path(),
    );
    command.stdin(Stdio::null());
    let started = Instant::now();
    let mut child = command.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let limit = Duration::from_secs(20) + GENEROUS;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the agent was still waiting after {limit:?}");
        }
        thread::sleep(Duration::from_millis(50));
    };
    let took = started.elapsed();
    let out = reader.join().unwrap();
    drop(server);
    assert!(!status.success(), "the stream timed out: {out}");
    assert!(
        out.contains("the stream sent no event for 20")
            && out.contains("(the progress timeout, 20 s): only keep-alive data arrived"),
        "the error names how long it waited:\n{out}"
    );
    assert!(
        took >= Duration::from_secs(20),
        "ended after {took:?}, before the timeout"
    );
}
