//! The process's limit on open descriptors: many sessions under a low soft limit, and the
//! limit the processes the library starts see. Each check runs in a child process of this
//! test binary, because the limit belongs to the whole process and the other tests must
//! not see it change.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::exec::{LocalExecutionEnvironment, Network, Sandbox, SandboxPolicy};
use agentloop::llm::Client;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Session, SessionConfig};
use agentloop::tools;
use serde_json::json;

use crate::mcp::fake;
use support::GENEROUS;
use support::run_ignored_alone;
use support::session::collect_input;

/// The descriptor limit the child sets itself before any session starts.
fn limit() -> libc::rlimit {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `limit`, valid for the call.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    limit
}

/// Sets the soft limit to `soft` (the hard limit stays); `false` (and a printed reason)
/// when the hard limit is too low for the check to mean anything.
fn lower_soft_limit(soft: u64) -> bool {
    let hard = limit().rlim_max;
    if hard < 4 * soft {
        eprintln!("skipped: the hard limit on open descriptors is {hard}");
        return false;
    }
    let lowered = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads `lowered`, valid for the call.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) }, 0);
    true
}

/// The soft limit on open descriptors of process `pid`, from `/proc/<pid>/limits`.
fn soft_limit_of(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

fn shell_session(env: LocalExecutionEnvironment, turns: Vec<ScriptedTurn>) -> Session {
    shell_session_with(env, turns, SessionConfig::default())
}

fn shell_session_with(
    env: LocalExecutionEnvironment,
    turns: Vec<ScriptedTurn>,
    config: SessionConfig,
) -> Session {
    let profile = ProviderProfile::new("scripted", "scripted-model").with_tool(tools::shell());
    let client = Client::new().with_provider(ScriptedModel::new(turns));
    Session::new(profile, Arc::new(env), client, config).unwrap()
}

/// The outputs of the session's shell calls, `Err` for a failed one.
fn shell_outputs(session: &Session) -> Vec<Result<String, String>> {
    let mut events = session.events();
    collect_input(&mut events)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::ToolCallEnd { output, error, .. } => Some(match error {
                Some(error) => Err(error),
                None => Ok(output.unwrap_or_default()),
            }),
            _ => None,
        })
        .collect()
}

/// The one shell call printed 200 (`ulimit -Sn`).
fn assert_limit_printed(outputs: &[Result<String, String>]) {
    assert!(
        matches!(outputs, [Ok(out)] if out.contains("<stdout>\n200\n</stdout>")),
        "the command saw the host's own soft limit: {outputs:?}"
    );
}

const SESSIONS: usize = 64;

#[test]
#[ignore = "run in a child process by many_sessions_run_their_commands_under_a_low_soft_limit"]
fn many_sessions_child() {
    if !lower_soft_limit(128) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Every session's command is running at the same moment (each waits for the others
    // through the files they create), so the commands' pipes are all open at once: more
    // than 128 descriptors.
    let sessions: Vec<Session> = (0..SESSIONS)
        .map(|i| {
            let command = format!(
                "touch started.{i}; for _ in $(seq 200); do \
                 [ $(ls started.* | wc -l) -ge {SESSIONS} ] && break; sleep 0.05; done; \
                 echo ok $(ls started.* | wc -l)"
            );
            let turns = vec![
                ScriptedTurn::tool_call("shell", json!({ "command": command })),
                ScriptedTurn::text("done"),
            ];
            let session = shell_session(LocalExecutionEnvironment::new(dir.path()).unwrap(), turns);
            session.submit("run it").unwrap();
            session
        })
        .collect();
    let expected = limit().rlim_max.min(1 << 20);
    assert_eq!(
        limit().rlim_cur,
        expected,
        "the first session raised the soft limit to the hard limit"
    );
    for (i, session) in sessions.iter().enumerate() {
        let outputs = shell_outputs(session);
        assert_eq!(outputs.len(), 1, "session {i}: {outputs:?}");
        let output = outputs[0]
            .as_ref()
            .unwrap_or_else(|e| panic!("session {i}: {e}"));
        assert!(
            output.contains(&format!("ok {SESSIONS}")),
            "session {i} ran while all {SESSIONS} commands had started: {output}"
        );
    }
}

#[test]
fn many_sessions_run_their_commands_under_a_low_soft_limit() {
    run_ignored_alone("exec::open_files::many_sessions_child");
}

#[test]
#[ignore = "run in a child process by the processes_the_library_starts_get_the_hosts_own_limit"]
fn hosts_own_limit_child() {
    if !lower_soft_limit(200) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("mcp.log");
    let turns = || {
        vec![
            ScriptedTurn::tool_call("shell", json!({ "command": "ulimit -Sn" })),
            ScriptedTurn::text("done"),
        ]
    };
    let config =
        SessionConfig::default().with_mcp_server(fake("fake", &["--log", log.to_str().unwrap()]));
    let plain = shell_session_with(
        LocalExecutionEnvironment::new(dir.path()).unwrap(),
        turns(),
        config,
    );
    plain.submit("go").unwrap();
    assert_limit_printed(&shell_outputs(&plain));
    assert!(
        limit().rlim_cur > 200,
        "this process's own limit was raised"
    );

    // The MCP server is a long-lived child started the other way (`std::process`).
    let deadline = Instant::now() + GENEROUS;
    let pid = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(pid) = text.lines().find_map(|l| l.strip_prefix("pid ")) {
            break pid.parse::<u32>().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the MCP server never logged its pid"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(soft_limit_of(pid), 200, "the MCP server's limit");

    // Under the sandbox the limit is set back before the filter and ruleset are applied.
    let sandboxed = LocalExecutionEnvironment::new(dir.path())
        .unwrap()
        .with_sandbox(
            Sandbox::new(SandboxPolicy::WorkspaceWrite {
                writable_roots: Vec::new(),
                include_tmp: false,
            })
            .with_network(Network::Off),
        );
    match sandboxed {
        Ok(env) => {
            let session = shell_session(env, turns());
            session.submit("go").unwrap();
            assert_limit_printed(&shell_outputs(&session));
        }
        Err(e) => eprintln!("skipped the sandboxed half: {e}"),
    }
}

#[test]
fn processes_the_library_starts_get_the_hosts_own_limit() {
    run_ignored_alone("exec::open_files::hosts_own_limit_child");
}

#[test]
#[ignore = "run in a child process by a_command_short_of_descriptors_fails_naming_the_limit"]
fn short_of_descriptors_child() {
    let dir = tempfile::tempdir().unwrap();
    let session = shell_session(
        LocalExecutionEnvironment::new(dir.path()).unwrap(),
        vec![
            ScriptedTurn::tool_call("shell", json!({ "command": "echo unreachable" })),
            ScriptedTurn::text("done"),
        ],
    );
    let mut events = session.events();
    support::session::collect_until(&mut events, |e| {
        matches!(e.kind, EventKind::SessionStart { .. })
    });
    // One descriptor more than this process holds: a pipe needs two.
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    let tight = libc::rlimit {
        rlim_cur: open + 1,
        rlim_max: open + 1,
    };
    // SAFETY: setrlimit reads `tight`, valid for the call.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &tight) }, 0);
    session.submit("go").unwrap();
    let errors: Vec<String> = collect_input(&mut events)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::ToolCallEnd { error, .. } => error,
            _ => None,
        })
        .collect();
    let expected = format!(
        "may have {} open descriptors (RLIMIT_NOFILE, hard limit {})",
        open + 1,
        open + 1
    );
    assert!(
        matches!(&errors[..], [e] if e.contains("Too many open files") && e.contains(&expected)),
        "{errors:?}"
    );
}

#[test]
fn a_command_short_of_descriptors_fails_naming_the_limit() {
    run_ignored_alone("exec::open_files::short_of_descriptors_child");
}

/// A session whose one command prints its soft limit (`ulimit -Sn`), run to its end.
fn printed_limit(dir: &std::path::Path) -> Vec<Result<String, String>> {
    let session = shell_session(
        LocalExecutionEnvironment::new(dir).unwrap(),
        vec![
            ScriptedTurn::tool_call("shell", json!({ "command": "ulimit -Sn" })),
            ScriptedTurn::text("done"),
        ],
    );
    session.submit("go").unwrap();
    shell_outputs(&session)
}

#[test]
#[ignore = "run in a child process by a_host_that_keeps_its_limit_before_the_first_session_keeps_it"]
fn kept_before_the_first_session_child() {
    if !lower_soft_limit(200) {
        return;
    }
    LocalExecutionEnvironment::keep_open_file_limit();
    let dir = tempfile::tempdir().unwrap();
    assert_limit_printed(&printed_limit(dir.path()));
    assert_eq!(limit().rlim_cur, 200, "no session raised the limit");
}

#[test]
fn a_host_that_keeps_its_limit_before_the_first_session_keeps_it() {
    run_ignored_alone("exec::open_files::kept_before_the_first_session_child");
}

/// Soft limit 200, then a first environment in `dir`, which raises it (asserted); `false`
/// when the hard limit is too low for the check.
fn raised_from_200(dir: &std::path::Path) -> bool {
    if !lower_soft_limit(200) {
        return false;
    }
    drop(LocalExecutionEnvironment::new(dir).unwrap());
    assert!(
        limit().rlim_cur >= 4 * 200,
        "the first environment raised it"
    );
    true
}

#[test]
#[ignore = "run in a child process by a_raise_already_made_is_undone_when_the_host_keeps_its_limit"]
fn kept_after_a_raise_child() {
    let dir = tempfile::tempdir().unwrap();
    if !raised_from_200(dir.path()) {
        return;
    }
    LocalExecutionEnvironment::keep_open_file_limit();
    assert_eq!(limit().rlim_cur, 200, "the host's own limit is back");
    assert_limit_printed(&printed_limit(dir.path()));
    assert_eq!(limit().rlim_cur, 200, "a later session raised nothing");
}

#[test]
fn a_raise_already_made_is_undone_when_the_host_keeps_its_limit() {
    run_ignored_alone("exec::open_files::kept_after_a_raise_child");
}

#[test]
#[ignore = "run in a child process by a_limit_the_host_set_after_the_raise_stays_when_it_keeps_its_limit"]
fn host_set_after_the_raise_child() {
    let dir = tempfile::tempdir().unwrap();
    if !raised_from_200(dir.path()) {
        return;
    }
    assert!(lower_soft_limit(300));
    LocalExecutionEnvironment::keep_open_file_limit();
    assert_eq!(limit().rlim_cur, 300, "the host's later choice stays");
}

#[test]
fn a_limit_the_host_set_after_the_raise_stays_when_it_keeps_its_limit() {
    run_ignored_alone("exec::open_files::host_set_after_the_raise_child");
}
