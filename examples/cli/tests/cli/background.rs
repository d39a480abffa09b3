//! Background processes and the CLI's end: SIGTERM (and SIGHUP, SIGINT twice: the same
//! abort) ends them with the session, before `session_end`; under the sandbox (the CLI's
//! default) a SIGKILL of the agent ends them too, a daemon that left its process group
//! included. Checked through `/proc`; the model is the loopback server.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Wire, agent, exit_within, kinds};
use support::{FAKE_KEY, GENEROUS, Reply, Server};

/// What the background process runs: it writes its pid (as this machine sees it, also
/// from inside a PID namespace), starts a daemon that leaves its process group and writes
/// its pid too, and sleeps.
const BACKGROUND_SCRIPT: &str = r#"cut -d' ' -f4 /proc/self/stat > bg.pid
setsid sh -c 'cut -d" " -f4 /proc/self/stat > daemon.pid; exec sleep 301' </dev/null >/dev/null 2>&1 &
exec sleep 300
"#;

/// A model that starts `bg.sh` in the background, then a foreground command that says it
/// started and sleeps.
fn server() -> Server {
    Server::start(vec![
        Reply::sse(Wire::Anthropic.turn(
            "",
            &[(
                "call_bg",
                "shell",
                json!({"command": "sh bg.sh", "run_in_background": true}),
            )],
        )),
        Reply::sse(Wire::Anthropic.turn(
            "",
            &[(
                "call_fg",
                "shell",
                json!({"command": "echo $$ > fg.pid; echo started; exec sleep 30", "timeout_ms": 60000}),
            )],
        )),
    ])
}

/// Whether `pid` runs (a zombie does not).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

fn assert_gone(pid: i32, what: &str) {
    let deadline = Instant::now() + GENEROUS;
    while running(pid) {
        assert!(
            Instant::now() < deadline,
            "{what} (pid {pid}) survived the agent"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid in `work/name`, once the file is written.
fn pid_file(work: &Path, name: &str) -> i32 {
    let deadline = Instant::now() + GENEROUS;
    loop {
        if let Some(pid) = std::fs::read_to_string(work.join(name))
            .ok()
            .and_then(|text| text.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "no {name}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs the agent on [`server`]'s script in `work` until the foreground command runs;
/// returns the child, its event lines so far with their reader, and the three pids
/// (background, daemon, foreground).
fn running_agent(
    work: &Path,
    home: &Path,
    url: &str,
    sandbox: &str,
) -> (
    std::process::Child,
    crossbeam_channel::Receiver<String>,
    std::thread::JoinHandle<()>,
    [i32; 3],
) {
    std::fs::write(work.join("bg.sh"), BACKGROUND_SCRIPT).unwrap();
    let mut child = agent(
        &[
            "--json",
            "--sandbox",
            sandbox,
            "--cwd",
            work.to_str().unwrap(),
            "start the server",
        ],
        &[("ANTHROPIC_API_KEY", FAKE_KEY), ("ANTHROPIC_BASE_URL", url)],
        home,
    )
    .stdin(Stdio::null())
    .spawn()
    .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (line_tx, lines) = crossbeam_channel::unbounded::<String>();
    let reader = std::thread::Builder::new()
        .name("agent-cli-stdout".to_string())
        .spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = line_tx.send(line);
            }
        })
        .unwrap();
    let deadline = Instant::now() + GENEROUS;
    loop {
        let line = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the foreground command starts");
        if line.contains("tool_call_output_delta") && line.contains("started") {
            break;
        }
    }
    let pids = [
        pid_file(work, "bg.pid"),
        pid_file(work, "daemon.pid"),
        pid_file(work, "fg.pid"),
    ];
    assert!(pids.iter().all(|&pid| running(pid)), "{pids:?}");
    (child, lines, reader, pids)
}

/// Sends `signal` to the agent while its foreground command runs: it exits with `status`,
/// `session_end` last, after the background process's `background_exit`, and nothing it
/// started runs any more (the daemon too, where background processes get a PID
/// namespace).
fn ends_everything_on(signal: i32, status: i32) {
    let server = server();
    let (work, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut child, lines, reader, [bg, daemon, fg]) =
        running_agent(work.path(), home.path(), &server.url(), "workspace-write");
    let namespaced = in_a_pid_namespace(bg);
    // SAFETY: a signal to our own child, still running.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    let exited = exit_within("the agent after the signal", move || child.wait());
    reader.join().unwrap();
    let events: Vec<Value> = lines
        .try_iter()
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect();
    assert_eq!(exited.code(), Some(status));
    let kinds = kinds(&events);
    let end = kinds
        .iter()
        .position(|k| *k == "session_end")
        .expect("session_end");
    assert_eq!(end, kinds.len() - 2, "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"exit"), "{kinds:?}");
    let exit = events
        .iter()
        .find(|e| e["kind"] == "background_exit")
        .unwrap_or_else(|| panic!("no background_exit: {kinds:?}"));
    assert_eq!(
        (
            exit["data"]["id"].as_u64(),
            exit["data"]["stopped"].as_bool()
        ),
        (Some(1), Some(true))
    );
    assert_gone(fg, "the foreground command");
    assert_gone(bg, "the background process");
    if namespaced {
        assert_gone(daemon, "the daemon that left the group");
    } else {
        eprintln!("no PID namespace here: the daemon that left the group outlives the agent");
        // SAFETY: the daemon's pid, read from its own /proc entry.
        unsafe { libc::kill(daemon, libc::SIGKILL) };
    }
}

#[test]
fn sigterm_ends_the_background_processes_with_the_session_before_session_end() {
    ends_everything_on(libc::SIGTERM, 143);
}

#[test]
fn sighup_ends_the_background_processes_with_the_session_before_session_end() {
    ends_everything_on(libc::SIGHUP, 129);
}

#[test]
fn ctrl_c_in_a_one_shot_run_ends_the_background_processes_with_the_session() {
    // The press interrupts the input; a one-shot run then closes its session.
    ends_everything_on(libc::SIGINT, 130);
}

#[test]
fn sigkill_of_the_agent_ends_its_background_processes_under_the_sandbox() {
    let server = server();
    let (work, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut child, _lines, reader, [bg, daemon, fg]) =
        running_agent(work.path(), home.path(), &server.url(), "workspace-write");
    if !in_a_pid_namespace(bg) {
        eprintln!("skipped: no PID namespace for background processes on this kernel");
        let _ = child.kill();
        let _ = child.wait();
        for pid in [bg, daemon, fg] {
            // SAFETY: pids read from the processes' own /proc entries.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        return;
    }
    child.kill().unwrap(); // SIGKILL: nothing of the agent runs any more
    let _ = child.wait();
    reader.join().unwrap();
    assert_gone(bg, "the background process");
    assert_gone(daemon, "the daemon that left the group");
    // A foreground command is in no namespace: it outlives an agent killed this way
    // (the README says so); end it here.
    // SAFETY: the pid the command wrote of itself.
    unsafe { libc::kill(fg, libc::SIGKILL) };
}

/// Whether `pid` runs in a PID namespace below this process's (`NSpid` has two entries).
fn in_a_pid_namespace(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .is_some_and(|ids| ids.split_whitespace().count() > 1)
}
