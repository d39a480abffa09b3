//! The host side of many remote sessions: every transport is read by the one poll loop
//! thread (`agentloop-poll`), not by a reader and a stderr thread per connection; one
//! exec-server shared by several environments and sessions ([`RemoteHost`]), each in its
//! own directory, directly and in a podman container.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use agentloop::CancelToken;
use agentloop::exec::remote::{
    ContainerKind, ContainerOptions, RemoteExecutionEnvironment, RemoteHost, Transport,
};
use agentloop::exec::{CommandRequest, ExecutionEnvironment};
use agentloop::llm::scripted::ScriptedTurn;
use serde_json::json;
use support::GENEROUS;
use support::podman::{Container, stripped_server};
use support::session::collect_input;

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

#[test]
fn environments_of_one_host_work_in_their_own_directories_and_cancel_only_their_calls() {
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let host = RemoteHost::connect(stdio_transport()).unwrap();
    let a = host.environment(Some(one.path())).unwrap();
    let b = host.environment(Some(two.path())).unwrap();
    assert_eq!(a.transport_pid(), b.transport_pid(), "one exec-server");
    assert_eq!(a.working_directory(), one.path());
    // Relative paths and commands without a directory land in each one's own.
    a.write_file(Path::new("out.txt"), b"from a").unwrap();
    b.write_file(Path::new("out.txt"), b"from b").unwrap();
    assert_eq!(fs::read(one.path().join("out.txt")).unwrap(), b"from a");
    assert_eq!(fs::read(two.path().join("out.txt")).unwrap(), b"from b");
    assert_eq!(run(&b, "cat out.txt", 20_000).stdout, "from b");
    assert_eq!(
        b.read_file(Path::new("out.txt"), None, None).unwrap().text,
        "from b"
    );
    // A cancelled command of one leaves the other's running command alone.
    let cancel = CancelToken::new();
    thread::scope(|s| {
        let long_b = s.spawn(|| run(&b, "sleep 1; echo still here", 20_000));
        let cancelled = s.spawn(|| {
            let request = CommandRequest::new("sleep 30", Duration::from_secs(60));
            a.exec_command(&request, &|_, _| {}, &cancel).unwrap()
        });
        thread::sleep(Duration::from_millis(200));
        cancel.cancel();
        assert!(cancelled.join().unwrap().cancelled);
        let r = long_b.join().unwrap();
        assert_eq!((r.exit_code, r.stdout.as_str()), (Some(0), "still here\n"));
    });
    // A directory the target lacks is refused.
    let missing = one.path().join("missing");
    let err = host.environment(Some(&missing)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    // Dropping one (and the host handle) leaves the other on the same server.
    let server = b.transport_pid();
    drop((a, host));
    assert_eq!(run(&b, "echo on", 20_000).stdout, "on\n");
    assert_eq!(b.transport_pid(), server);
    let pid = server.unwrap() as i32;
    drop(b);
    super::assert_gone(pid);
}

/// The exec-servers running in `container` (the supervisor left out).
fn servers_in(container: &Container) -> usize {
    container
        .processes()
        .iter()
        .filter(|l| l.contains("agentloop-exec-server") && !l.contains("--supervised"))
        .filter(|l| !l.contains("sh -c"))
        .count()
}

#[test]
fn two_sessions_share_one_exec_server_in_a_container() {
    let Some(container) = Container::start(&[]) else {
        return;
    };
    let mut options = ContainerOptions::new();
    options.bootstrap = Some(stripped_server());
    let transport = Transport::container(ContainerKind::Podman, &container.name, &options, None)
        .expect("podman is on PATH")
        .with_env(super::base_env());
    let host = RemoteHost::connect(transport).expect("the exec-server is placed and answers");
    let root = host.environment(None).unwrap();
    run(&root, "mkdir -p /work/a /work/b", 20_000);
    let a = Arc::new(host.environment(Some(Path::new("/work/a"))).unwrap());
    let b = Arc::new(host.environment(Some(Path::new("/work/b"))).unwrap());
    drop((root, host));
    let turns = |name: &str| {
        vec![
            ScriptedTurn::tool_call(
                "shell",
                json!({"command": format!("echo {name} > out.txt; pwd")}),
            ),
            ScriptedTurn::tool_call("read_file", json!({"file_path": "out.txt"})),
            ScriptedTurn::text("done"),
        ]
    };
    let (session_a, _) = super::session::session(Arc::clone(&a), turns("from-a"));
    let (session_b, _) = super::session::session(Arc::clone(&b), turns("from-b"));
    let mut events_a = session_a.events();
    let mut events_b = session_b.events();
    thread::scope(|s| {
        let ran_a = s.spawn(|| session_a.run("write, read, done").unwrap());
        let ran_b = s.spawn(|| session_b.run("write, read, done").unwrap());
        assert_eq!(ran_a.join().unwrap().text, "done");
        assert_eq!(ran_b.join().unwrap().text, "done");
    });
    for (events, name, dir) in [
        (&mut events_a, "from-a", "/work/a"),
        (&mut events_b, "from-b", "/work/b"),
    ] {
        let ends = super::session::tool_ends(&collect_input(events));
        assert_eq!(ends.len(), 2, "{ends:?}");
        assert!(!ends[0].1 && ends[0].2.contains(dir), "{ends:?}");
        assert!(!ends[1].1 && ends[1].2.contains(name), "{ends:?}");
    }
    assert_eq!(servers_in(&container), 1, "{:?}", container.processes());
    // Closing one session does not disturb the other's running command.
    let still = thread::scope(|s| {
        let long = s.spawn(|| run(&*b, "sleep 1; cat /work/b/out.txt", 20_000));
        thread::sleep(Duration::from_millis(100));
        drop(session_a);
        drop(a);
        long.join().unwrap()
    });
    assert_eq!(
        (still.exit_code, still.stdout.as_str()),
        (Some(0), "from-b\n")
    );
    assert_eq!(servers_in(&container), 1);
    // The last close leaves nothing running in the container.
    drop(session_b);
    drop(b);
    let deadline = Instant::now() + GENEROUS;
    while !container.processes().is_empty() {
        assert!(
            Instant::now() < deadline,
            "still running: {:?}",
            container.processes()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_sandboxed_host_gives_each_environment_its_sandbox_rooted_at_the_hosts_directory() {
    use agentloop::exec::{Network, Sandbox, SandboxPolicy};
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let (one, two) = (root.path().join("one"), root.path().join("two"));
    fs::create_dir_all(&one).unwrap();
    fs::create_dir_all(&two).unwrap();
    // Without /tmp, where the temporary directories are.
    let policy = SandboxPolicy::WorkspaceWrite {
        writable_roots: Vec::new(),
        include_tmp: false,
    };
    let sandbox = Sandbox::new(policy).with_network(Network::Off);
    let host = match RemoteHost::connect_sandboxed(stdio_transport(), Some(root.path()), sandbox) {
        Ok(host) => host,
        Err(e) if e.to_string().contains("Landlock is not available") => {
            eprintln!("skipped: no Landlock here ({e})");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let a = host.environment(Some(&one)).unwrap();
    let b = host.environment(Some(&two)).unwrap();
    assert_eq!(a.transport_pid(), b.transport_pid(), "one exec-server");
    assert!(a.applied_sandbox().is_some(), "the server applied it");
    let target = outside.path().join("escaped.txt");
    for (env, dir) in [(&a, &one), (&b, &two)] {
        // Each writes in its own directory, beneath the host's root ...
        let r = run(env, "echo inside > in.txt", 20_000);
        assert_eq!(r.exit_code, Some(0), "{r:?}");
        assert_eq!(fs::read_to_string(dir.join("in.txt")).unwrap(), "inside\n");
        // ... and neither can write outside it.
        let r = run(env, &format!("echo out > {}", target.display()), 20_000);
        assert_ne!(r.exit_code, Some(0), "{r:?}");
        assert!(!target.exists(), "a write outside the root landed");
    }
    // A reconnection carries the same sandbox.
    let pid = a.transport_pid().unwrap() as i32;
    // SAFETY: the exec-server transport is our child, not yet reaped.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let deadline = Instant::now() + GENEROUS;
    let r = loop {
        let r = b.exec_command(
            &CommandRequest::new(
                format!("echo out > {}", target.display()),
                Duration::from_secs(20),
            ),
            &|_, _| {},
            &CancelToken::new(),
        );
        match r {
            Ok(r) => break r,
            Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("no reconnection: {e}"),
        }
    };
    assert_ne!(b.transport_pid(), Some(pid as u32), "a new connection");
    assert_ne!(r.exit_code, Some(0), "{r:?}");
    assert!(
        !target.exists(),
        "a write outside the root landed after reconnecting"
    );
}
