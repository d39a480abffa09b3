//! The host side of many remote sessions: every transport is read by the one poll loop
//! thread (`agentloop-poll`), not by a reader and a stderr thread per connection.

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use agentloop::exec::remote::RemoteExecutionEnvironment;
use support::GENEROUS;

use super::{run, stdio_transport};

/// How many of this process's threads have a name starting with `prefix` (the kernel
/// keeps the first 15 bytes of a thread's name).
fn threads_named(prefix: &str) -> usize {
    let Ok(tasks) = fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end().starts_with(prefix))
        .count()
}

#[test]
fn sixteen_connections_are_read_by_one_poll_thread() {
    const N: usize = 16;
    let dirs: Vec<tempfile::TempDir> = (0..N).map(|_| tempfile::tempdir().unwrap()).collect();
    let envs: Vec<RemoteExecutionEnvironment> = dirs
        .iter()
        .map(|d| RemoteExecutionEnvironment::connect(stdio_transport(), Some(d.path())).unwrap())
        .collect();
    // All of them answer, in parallel, each in its own directory.
    thread::scope(|s| {
        for (env, dir) in envs.iter().zip(&dirs) {
            s.spawn(move || {
                let r = run(env, "pwd; echo err >&2", 20_000);
                assert_eq!(r.exit_code, Some(0), "{r:?}");
                let want = dir.path().canonicalize().unwrap();
                assert_eq!(r.stdout.trim(), want.to_str().unwrap());
                assert_eq!(r.stderr.trim(), "err");
            });
        }
    });
    // Other tests' connections share the loop; one that closed the last of them a moment
    // ago may leave its loop thread ending beside ours, so this waits for one.
    let deadline = Instant::now() + GENEROUS;
    while threads_named("agentloop-poll") != 1 {
        assert!(Instant::now() < deadline, "not one poll thread");
        thread::sleep(Duration::from_millis(10));
    }
    // A reader and a stderr thread per connection would be at least N of each (other
    // tests running beside this one start a few of their own).
    let readers = threads_named("agentloop-remot");
    let stderr = threads_named("agentloop-stder");
    assert!(
        readers < N,
        "{readers} remote reader threads for {N} connections"
    );
    assert!(stderr < N, "{stderr} stderr threads for {N} connections");
    drop(envs);
}
