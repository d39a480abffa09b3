//! What the CLI guards against: it never silently skips the user's task, refuses mistakes
//! before anything starts, never sends a key where it was not asked to, ends cleanly on
//! SIGTERM and SIGHUP (also in its first milliseconds), survives closed standard streams,
//! keeps terminal control sequences from the model and commands off the terminal, and
//! keeps keys out of what the commands it runs can read.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Wire, agent, agentloop, exit_within, kinds, run_agent, run_command};
use support::providers::OPENAI_KEY;
use support::{FAKE_KEY, GENEROUS, Reply, Server};

#[test]
fn a_prompt_without_a_configured_provider_exits_2_and_says_how_to_configure_one() {
    let ran = run_agent(&["fix the failing test"], &[], "");
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    assert!(
        ran.stdout.is_empty(),
        "the demo ran instead: {}",
        ran.stdout
    );
    for needed in [
        "your prompt was not sent",
        "ANTHROPIC_API_KEY",
        "--provider openai-chat --base-url",
    ] {
        assert!(ran.stderr.contains(needed), "{needed}: {}", ran.stderr);
    }
}

#[test]
fn the_openai_key_does_not_reach_a_non_openai_base_url() {
    let done = || Reply::sse(Wire::OpenAiChat.turn("done", &[]));
    let server = Server::start(vec![done(), done(), done()]);
    let work = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", server.url());
    let cwd = work.path().to_str().unwrap();
    let args = [
        "--provider",
        "openai-chat",
        "--base-url",
        &base,
        "--cwd",
        cwd,
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        args.iter()
            .chain(extra)
            .chain(&["say done"])
            .map(|s| s.to_string())
            .collect()
    };
    let run = |args: Vec<String>, vars: &[(&str, &str)]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut vars = vars.to_vec();
        vars.push(("OPENAI_COMPATIBLE_MODEL", "gpt-5"));
        run_agent(&args, &vars, "")
    };

    // OPENAI_API_KEY alone: the local server is used without a key.
    let ran = run(with(&[]), &[("OPENAI_API_KEY", OPENAI_KEY)]);
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    // The key meant for that server.
    let ran = run(
        with(&[]),
        &[
            ("OPENAI_API_KEY", OPENAI_KEY),
            ("OPENAI_COMPATIBLE_API_KEY", "local-server-key"),
        ],
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    // Asked for explicitly.
    let ran = run(
        with(&["--send-openai-key"]),
        &[("OPENAI_API_KEY", OPENAI_KEY)],
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].header("authorization"), None);
    assert_eq!(
        requests[1].header("authorization"),
        Some("Bearer local-server-key")
    );
    assert_eq!(
        requests[2].header("authorization"),
        Some(format!("Bearer {OPENAI_KEY}").as_str())
    );
    for request in &requests[..2] {
        let all = format!("{:?}{}", request.headers, request.body_text());
        assert!(!all.contains(OPENAI_KEY), "the OpenAI key was sent");
    }

    // The Responses provider needs a key: it says which, and sends nothing.
    let ran = run_agent(
        &[
            "--provider",
            "openai",
            "--base-url",
            &base,
            "--cwd",
            cwd,
            "hi",
        ],
        &[("OPENAI_API_KEY", OPENAI_KEY)],
        "",
    );
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    assert!(
        ran.stderr.contains("OPENAI_COMPATIBLE_API_KEY")
            && ran.stderr.contains("--send-openai-key"),
        "{}",
        ran.stderr
    );
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn the_header_line_shows_where_requests_go_with_a_base_url() {
    let server = Server::start(vec![Reply::sse(Wire::OpenAiChat.turn("done", &[]))]);
    let work = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", server.url());
    let ran = run_agent(
        &[
            "--provider",
            "openai-chat",
            "--base-url",
            &base,
            "--cwd",
            work.path().to_str().unwrap(),
            "say done",
        ],
        &[("OPENAI_COMPATIBLE_MODEL", "gpt-5")],
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let header = ran.stdout.lines().next().unwrap_or("");
    assert!(header.contains(&format!("requests to {base}")), "{header}");
}

#[test]
fn a_malformed_base_url_is_refused_before_anything_starts() {
    for (url, says) in [
        ("127.0.0.1:11434/v1", "write `http://127.0.0.1:11434/v1`"),
        ("http://127.0.0.1:11434/v1 ", "whitespace"),
        ("ftp://127.0.0.1/v1", "scheme `ftp`"),
    ] {
        let ran = run_agent(
            &["--provider", "openai-chat", "--base-url", url, "hi"],
            &[],
            "",
        );
        assert_eq!(ran.status, Some(2), "{url}: {}", ran.all_output());
        assert!(ran.stderr.contains(says), "{url}: {}", ran.stderr);
    }
}

/// Gives the child the default action for SIGINT, SIGTERM and SIGHUP, as in a terminal: a
/// test run started in the background by a non-interactive shell inherits SIGINT ignored,
/// and a signal sent before the CLI installs its handlers would then be lost.
fn default_signal_actions(command: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal(2) is async-signal-safe; the child only resets dispositions.
    unsafe {
        command.pre_exec(|| {
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}

/// The `sleep 30` task: the command records its pid, says it started and sleeps.
fn sleeping_agent(work: &Path, home: &Path, url: &str) -> std::process::Child {
    default_signal_actions(&mut agent(
        &["--json", "--cwd", work.to_str().unwrap(), "sleep a while"],
        &[("ANTHROPIC_API_KEY", FAKE_KEY), ("ANTHROPIC_BASE_URL", url)],
        home,
    ))
    .stdin(Stdio::null())
    .spawn()
    .unwrap()
}

fn ends_like_an_abort_on(signal: i32, expected_status: i32) {
    let server = Server::start(vec![Reply::sse(Wire::Anthropic.turn(
        "",
        &[(
            "call_s",
            "shell",
            json!({"command": "echo $$ > pid.txt; echo started; exec sleep 30", "timeout_ms": 60000}),
        )],
    ))]);
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut child = sleeping_agent(work.path(), home.path(), &server.url());
    let pid = child.id() as i32;
    let stdout = child.stdout.take().unwrap();
    let (line_tx, line_rx) = crossbeam_channel::unbounded::<String>();
    let reader = std::thread::Builder::new()
        .name("agent-cli-stdout".to_string())
        .spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = line_tx.send(line);
            }
        })
        .unwrap();
    let deadline = Instant::now() + GENEROUS;
    let mut lines = Vec::new();
    loop {
        let line = line_rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the command starts");
        let started = line.contains("tool_call_output_delta") && line.contains("started");
        lines.push(line);
        if started {
            break;
        }
    }
    let sleeper: i32 = std::fs::read_to_string(work.path().join("pid.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: sending a signal to our own, still running child.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let status = exit_within("the agent after the signal", move || child.wait());
    reader.join().unwrap();
    lines.extend(line_rx.try_iter());
    assert_eq!(status.code(), Some(expected_status), "{lines:#?}");
    let events: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // `session_end`, then the exit record naming the signal's status.
    assert_eq!(
        kinds(&events)[events.len() - 2],
        "session_end",
        "{lines:#?}"
    );
    let record = events.last().unwrap();
    assert_eq!(record["kind"], "exit", "{lines:#?}");
    assert_eq!(record["data"]["code"], expected_status);
    let reason = match expected_status {
        130 => "interrupted",
        143 => "terminated",
        _ => "hangup",
    };
    assert_eq!(record["data"]["reason"], reason);
    // The command's process is gone (not re-parented and left running).
    let deadline = Instant::now() + GENEROUS;
    while Path::new(&format!("/proc/{sleeper}")).exists() {
        let state = std::fs::read_to_string(format!("/proc/{sleeper}/stat")).unwrap_or_default();
        if state.contains(") Z") {
            break; // a zombie about to be reaped: it no longer runs
        }
        assert!(
            Instant::now() < deadline,
            "the command (pid {sleeper}) survived the agent"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_during_a_command_ends_its_group_writes_session_end_and_exits_143() {
    ends_like_an_abort_on(libc::SIGTERM, 143);
}

#[test]
fn sigint_during_a_command_of_one_prompt_ends_its_group_and_exits_130() {
    ends_like_an_abort_on(libc::SIGINT, 130);
}

#[test]
fn sighup_during_a_command_ends_its_group_writes_session_end_and_exits_129() {
    ends_like_an_abort_on(libc::SIGHUP, 129);
}

#[test]
fn terminal_escapes_are_neutralised_in_the_human_view() {
    let hostile = "look \x1b]52;c;SGVsbG8=\x07 and \x1b]0;pwned\x07 then \x1b[2J\x1b[H done";
    let server = Server::start(vec![
        Reply::sse(Wire::Anthropic.turn(
            "",
            &[(
                "call_e",
                "shell",
                json!({"command": "printf 'out \\033]0;title\\007 \\033[2J\\033c end\\n'"}),
            )],
        )),
        Reply::sse(Wire::Anthropic.turn(hostile, &[])),
    ]);
    let work = tempfile::tempdir().unwrap();
    let url = server.url();
    let ran = run_agent(
        &["--cwd", work.path().to_str().unwrap(), "print something"],
        &[
            ("ANTHROPIC_API_KEY", FAKE_KEY),
            ("ANTHROPIC_BASE_URL", &url),
        ],
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert!(
        !ran.stdout.contains('\x1b') && !ran.stderr.contains('\x1b'),
        "an escape reached the terminal: {:?}",
        ran.all_output()
    );
    // Shown, not obeyed.
    assert!(ran.stdout.contains("^[]52;c;SGVsbG8=^G"), "{}", ran.stdout);
    assert!(
        ran.stdout.contains("│ out ^[]0;title^G ^[[2J^[c end"),
        "{}",
        ran.stdout
    );
}

#[test]
fn a_command_reading_proc_ppid_environ_sees_no_key() {
    let server = Server::start(vec![
        Reply::sse(Wire::Anthropic.turn(
            "",
            &[(
                "call_p",
                "shell",
                json!({"command": "tr '\\0' '\\n' < /proc/$PPID/environ > environ.txt; echo $PPID > ppid.txt"}),
            )],
        )),
        Reply::sse(Wire::Anthropic.turn("done", &[])),
    ]);
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let url = server.url();
    let command = agent(
        &["--json", "--cwd", work.path().to_str().unwrap(), "read it"],
        &[
            ("ANTHROPIC_API_KEY", FAKE_KEY),
            ("ANTHROPIC_BASE_URL", &url),
            ("OPENAI_API_KEY", OPENAI_KEY),
        ],
        home.path(),
    );
    let ran = run_command(command, "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let environ = std::fs::read_to_string(work.path().join("environ.txt")).unwrap();
    // It read the agent's environment (HOME is there), and no key is in it.
    assert!(
        environ.contains(&format!("HOME={}", home.path().display())),
        "{environ}"
    );
    assert!(
        !environ.contains(FAKE_KEY) && !environ.contains(OPENAI_KEY),
        "{environ}"
    );
    assert!(!environ.contains("_API_KEY="), "{environ}");
    // The agent still had its key: the server received it.
    let requests = server.requests();
    assert_eq!(requests[0].header("x-api-key"), Some(FAKE_KEY));
}

#[test]
fn approve_ask_without_a_terminal_is_refused_before_anything_starts() {
    use std::os::unix::process::CommandExt;
    let home = tempfile::tempdir().unwrap();
    let mut command = agent(&["--json", "--approve", "ask"], &[], home.path());
    // SAFETY: setsid is async-signal-safe; in the new session the child has no
    // controlling terminal, so /dev/tty cannot be opened (as under CI).
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let ran = run_command(command, "");
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    // Nothing started: stdout holds the exit record alone.
    let events = ran.events();
    assert_eq!(
        kinds(&events),
        ["exit"],
        "something started: {}",
        ran.stdout
    );
    assert!(
        ran.stderr.contains("--approve ask needs a terminal"),
        "{}",
        ran.stderr
    );
}

#[test]
fn a_full_disk_on_stdout_ends_with_one_line_on_stderr() {
    let home = tempfile::tempdir().unwrap();
    for json in [true, false] {
        let args: &[&str] = if json { &["--json"] } else { &[] };
        let mut command = agent(args, &[], home.path());
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        command.stdout(Stdio::from(full)).stderr(Stdio::piped());
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("cannot write to stdout"))
            .collect();
        assert_eq!(lines.len(), 1, "json {json}: {stderr}");
        assert!(lines[0].contains("No space left on device"), "{stderr}");
    }
}

#[test]
fn transcript_problems_are_refused_before_anything_starts_and_name_resume() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("run.jsonl");
    std::fs::write(&existing, "").unwrap();
    let path = existing.to_str().unwrap();
    let ran = run_agent(&["--provider", "demo", "--transcript", path], &[], "");
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    assert!(ran.stdout.is_empty(), "{}", ran.stdout);
    assert!(
        ran.stderr.contains(&format!("--resume {path}")),
        "{}",
        ran.stderr
    );

    let missing = dir.path().join("no/such/dir/run.jsonl");
    let ran = run_agent(
        &[
            "--provider",
            "demo",
            "--transcript",
            missing.to_str().unwrap(),
        ],
        &[],
        "",
    );
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    assert!(ran.stderr.contains("does not exist"), "{}", ran.stderr);

    let ran = run_agent(&["--provider", "demo", "--resume", path], &[], "");
    assert_eq!(ran.status, Some(2), "{}", ran.all_output());
    assert!(ran.stderr.contains("--resume"), "{}", ran.stderr);
}

#[test]
fn resume_of_a_transcript_from_another_directory_continues_there() {
    let server = Server::start(vec![
        Reply::sse(Wire::Anthropic.turn("first", &[])),
        Reply::sse(Wire::Anthropic.turn("second", &[])),
    ]);
    let recorded = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let transcript = elsewhere.path().join("run.jsonl");
    let url = server.url();
    let vars = [
        ("ANTHROPIC_API_KEY", FAKE_KEY),
        ("ANTHROPIC_BASE_URL", url.as_str()),
    ];
    let ran = run_agent(
        &[
            "--cwd",
            recorded.path().to_str().unwrap(),
            "--transcript",
            transcript.to_str().unwrap(),
            "one",
        ],
        &vars,
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    // The second run starts in another directory (the test's own) without --cwd.
    let ran = run_agent(
        &["--resume", transcript.to_str().unwrap(), "two"],
        &vars,
        "",
    );
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let recorded_dir = recorded.path().display().to_string();
    assert!(
        ran.stderr
            .contains(&format!("continuing in {recorded_dir}")),
        "{}",
        ran.stderr
    );
    let header = ran.stdout.lines().next().unwrap_or("");
    assert!(header.contains(&recorded_dir), "{header}");
}

#[test]
fn a_signal_in_the_first_milliseconds_still_ends_the_cli_cleanly() {
    // The server never answers: whenever the signal lands (before the session exists,
    // while it starts, or while it waits for the model), the CLI ends promptly, and a
    // session that started always ends with `session_end`.
    let server = Server::start(vec![Reply::stall(); 8]);
    let url = server.url();
    for (signal, delay_ms) in [
        (libc::SIGINT, 0),
        (libc::SIGINT, 3),
        (libc::SIGINT, 10),
        (libc::SIGTERM, 0),
        (libc::SIGTERM, 5),
        (libc::SIGHUP, 2),
    ] {
        let work = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let child = default_signal_actions(&mut agent(
            &["--json", "--cwd", work.path().to_str().unwrap(), "wait"],
            &[
                ("ANTHROPIC_API_KEY", FAKE_KEY),
                ("ANTHROPIC_BASE_URL", &url),
            ],
            home.path(),
        ))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: signalling our own child, not yet reaped.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let output = exit_within(&format!("signal {signal} after {delay_ms} ms"), move || {
            child.wait_with_output()
        });
        let stdout = String::from_utf8_lossy(&output.stdout);
        use std::os::unix::process::ExitStatusExt;
        match output.status.code() {
            Some(code) => assert_eq!(code, 128 + signal, "{signal} after {delay_ms} ms"),
            // Before the session existed: the default action, nothing to clean up.
            None => assert_eq!(output.status.signal(), Some(signal)),
        }
        if stdout.contains("\"session_start\"") {
            // `session_end`, then the exit record.
            let lines: Vec<&str> = stdout.lines().collect();
            let end = lines.len().saturating_sub(2);
            assert!(
                lines[end].contains("\"session_end\"")
                    && lines.last().unwrap().contains("\"kind\":\"exit\""),
                "{signal} after {delay_ms} ms: {stdout}"
            );
        }
    }
}

/// The names of `pid`'s threads (`/proc/<pid>/task/*/comm`).
fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect()
}

#[test]
fn the_signal_watcher_starts_while_the_model_has_not_answered_and_acts_on_sigterm() {
    // The watcher starts 10 ms into the session, off the way to the first request; it must
    // start although no event comes (the server never answers), and then act.
    let server = Server::start(vec![Reply::stall()]);
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let child = default_signal_actions(&mut agent(
        &["--json", "--cwd", work.path().to_str().unwrap(), "wait"],
        &[
            ("ANTHROPIC_API_KEY", FAKE_KEY),
            ("ANTHROPIC_BASE_URL", &server.url()),
        ],
        home.path(),
    ))
    .stdin(Stdio::null())
    .spawn()
    .unwrap();
    server.wait_for_requests(1, GENEROUS);
    let deadline = Instant::now() + GENEROUS;
    let mut names = thread_names(child.id());
    while !names.iter().any(|n| n == "agent-ctrl-c") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
        names = thread_names(child.id());
    }
    assert!(
        names.iter().any(|n| n == "agent-ctrl-c"),
        "no watcher thread while the request waits: {names:?}"
    );
    // SAFETY: signalling our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let output = exit_within("the agent after SIGTERM", move || child.wait_with_output());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(143), "{stdout}");
    // `session_end`, then the exit record.
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.len() >= 2
            && lines[lines.len() - 2].contains("\"session_end\"")
            && lines[lines.len() - 1].contains("\"reason\":\"terminated\""),
        "{stdout}"
    );
}

/// Started with its stdin and stderr closed, the CLI must not let a descriptor it opens
/// take their place: its signal pipe would become fd 2 and every diagnostic it writes a
/// "signal". The offline demo runs to its end.
#[test]
fn with_stdin_and_stderr_closed_the_demo_still_runs_to_its_end() {
    let home = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new("/bin/bash");
    command
        .args(["-c", "exec 0<&- 2>&-; exec \"$0\" --json"])
        .arg(agentloop())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path());
    let ran = run_command(command, "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    let events = ran.events();
    assert_eq!(kinds(&events).last().copied(), Some("exit"));
    assert_eq!(kinds(&events)[events.len() - 2], "session_end");
    assert!(
        ran.stdout.contains("\"stop_reason\":\"completed\""),
        "{}",
        ran.stdout
    );
}

/// A reader that went away makes the CLI's next write fail: it reports an output error
/// (exit 1) instead of dying of SIGPIPE.
#[test]
fn a_closed_stdout_is_an_output_error_not_a_death_by_sigpipe() {
    let home = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = agent(&["--json"], &[], home.path())
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), None, "{status:?}");
    assert_eq!(status.code(), Some(1), "{status:?}");
}
