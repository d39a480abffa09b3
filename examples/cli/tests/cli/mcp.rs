//! `agentloop --mcp-config FILE --json` with server-everything, end to end: the loopback model
//! server records the requests; the tool is offered as `mcp__everything__echo`, called,
//! and its result is in the next request.

use std::process::Command;

use serde_json::{Value, json};

use support::ci::npm_bin;

use crate::{agentloop, run_command};
use support::turns::{anthropic_sse, function};
use support::{FAKE_KEY, Reply, Server};

#[test]
fn the_cli_offers_calls_and_returns_a_server_everything_tool() {
    let Some(bin) = npm_bin("mcp-server-everything") else {
        return;
    };
    let server = Server::start(vec![
        Reply::sse(anthropic_sse(
            "",
            &[function(
                "call_1",
                "mcp__everything__echo",
                json!({"message": "from the cli"}),
            )],
        )),
        Reply::sse(anthropic_sse("done", &[])),
    ]);
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("mcp.json");
    let file = json!({"mcpServers": {"everything": {
        "command": bin.to_string_lossy(),
        "args": ["stdio"],
        "env": {"EVERYTHING_TEST": "1"}
    }}});
    std::fs::write(&config, file.to_string()).unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(agentloop());
    command
        .args([
            "--provider",
            "anthropic",
            "--base-url",
            &server.url(),
            "--json",
        ])
        .arg("--cwd")
        .arg(work.path())
        .arg("--mcp-config")
        .arg(&config)
        .arg("echo something")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("ANTHROPIC_API_KEY", FAKE_KEY);
    let ran = run_command(command, "");
    assert_eq!(ran.status, Some(0), "{}", ran.all_output());
    assert!(
        ran.stderr.contains("mcp: everything: ")
            && ran.stderr.contains(" tools, ")
            && ran.stderr.contains(" prompts ("),
        "the header lists the server and its counts: {}",
        ran.stderr
    );
    let events: Vec<Value> = ran
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
        .collect();
    let end = events
        .iter()
        .find(|e| e["kind"] == "tool_call_end")
        .expect("a tool call ended");
    assert_eq!(end["data"]["tool_name"], "mcp__everything__echo");
    assert_eq!(end["data"]["output"], "Echo: from the cli");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let first: Value = serde_json::from_str(&requests[0].body_text()).unwrap();
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(tools.contains(&"mcp__everything__echo"), "{tools:?}");
    assert!(tools.contains(&"mcp__everything__get-sum"), "{tools:?}");
    assert!(requests[1].body_text().contains("Echo: from the cli"));
    assert!(!ran.all_output().contains(FAKE_KEY));
}

/// An `mcpServers` file in `dir` with our OAuth-protected server and the fake server (with
/// resources and prompts); the arguments that point the CLI at it and at a token file.
fn mcp_setup(dir: &std::path::Path, protected: &str) -> (Vec<String>, std::path::PathBuf) {
    let fake = support::data_dir().join("mcp/fake_server.py");
    let file = json!({"mcpServers": {
        "protected": {"url": protected},
        "fake": {"command": "python3", "args": [fake.to_string_lossy(), "--resources"]}
    }});
    let config = dir.join("mcp.json");
    std::fs::write(&config, file.to_string()).unwrap();
    let tokens = dir.join("logins/mcp-tokens.json");
    let args = vec![
        "--mcp-config".to_string(),
        config.to_string_lossy().into_owned(),
        "--mcp-tokens".to_string(),
        tokens.to_string_lossy().into_owned(),
    ];
    (args, tokens)
}

fn cli(args: &[String], more: &[&str], home: &std::path::Path) -> Command {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend_from_slice(more);
    crate::agent(&all, &[("ANTHROPIC_API_KEY", FAKE_KEY)], home)
}

/// `agentloop mcp login protected`, with the test as the user's browser: the address the
/// CLI prints is opened and its redirect followed. The CLI's output.
fn login(args: &[String], home: &std::path::Path) -> (i32, String, String) {
    use std::io::{BufRead, BufReader, Read};
    let mut child = cli(args, &["mcp", "login", "protected"], home)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let browser = support::oauth::Browser::default();
    let mut said = String::new();
    let deadline = std::time::Instant::now() + support::GENEROUS;
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        said.push_str(&line);
        if let Some(url) = line.split_whitespace().find(|w| w.contains("/authorize?")) {
            agentloop::mcp::McpHost::open_url(&browser, "protected", url);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no address: {said}");
    }
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    said.push_str(&rest);
    let output = crate::exit_within("agentloop mcp login", move || child.wait_with_output());
    drop(browser);
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        said,
    )
}

#[test]
fn mcp_list_login_and_logout_with_a_server_that_needs_oauth() {
    let auth = support::oauth::AuthServer::start();
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (args, tokens) = mcp_setup(work.path(), &auth.mcp_url());
    let list = |home: &std::path::Path| run_command(cli(&args, &["mcp", "list"], home), "");
    let before = list(home.path());
    assert_eq!(before.status, Some(0), "{}", before.all_output());
    assert!(
        before.stdout.contains(&format!(
            "protected  http {}; no login kept",
            auth.mcp_url()
        )) && before
            .stdout
            .contains("needs a login: run `agentloop mcp login protected`"),
        "{}",
        before.stdout
    );
    assert!(
        before
            .stdout
            .contains("16 tools, 5 resources, 1 resource template, 2 prompts (2026-07-28)"),
        "{}",
        before.stdout
    );
    // The login: the address on stderr, the tokens in the owner-only file.
    let (status, stdout, stderr) = login(&args, home.path());
    assert_eq!(status, 0, "{stdout}{stderr}");
    assert!(
        stderr.contains("mcp: protected needs a login; open this address in a browser:"),
        "{stderr}"
    );
    assert!(
        stdout.starts_with("logged in to protected; the tokens are kept in "),
        "{stdout}"
    );
    let mode = std::fs::metadata(&tokens).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    let after = list(home.path());
    assert!(
        after.stdout.contains("; login kept\n  1 tool (2025-11-25)"),
        "{}",
        after.stdout
    );
    for token in auth.issued() {
        assert!(!after.all_output().contains(&token) && !stdout.contains(&token));
    }
    // The logout forgets it.
    let out = run_command(cli(&args, &["mcp", "logout", "protected"], home.path()), "");
    assert_eq!(out.stdout, "logged out of protected\n");
    assert!(list(home.path()).stdout.contains("; no login kept"));
    let again = run_command(cli(&args, &["mcp", "logout", "protected"], home.path()), "");
    assert_eq!(again.stdout, "protected had no login kept\n");
}

#[test]
fn a_revoked_login_is_an_error_the_model_reads_and_agentloop_mcp_login_fixes_it() {
    let auth = support::oauth::AuthServer::start();
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (args, _) = mcp_setup(work.path(), &auth.mcp_url());
    assert_eq!(login(&args, home.path()).0, 0);
    let mut outputs = Vec::new();
    // One prompt: the model calls the protected tool; the tool's end and what the model got.
    let ask = |outputs: &mut Vec<String>| {
        let model = Server::start(vec![
            Reply::sse(anthropic_sse(
                "",
                &[function("call_1", "mcp__protected__whoami", json!({}))],
            )),
            Reply::sse(anthropic_sse("done", &[])),
        ]);
        let mut run_args = args.clone();
        run_args.extend(["--provider", "anthropic", "--json", "--base-url"].map(String::from));
        run_args.push(model.url());
        let cwd = work.path().to_string_lossy().into_owned();
        let ran = run_command(
            cli(&run_args, &["--cwd", &cwd, "who am i"], home.path()),
            "",
        );
        outputs.push(ran.all_output());
        outputs.extend(model.requests().iter().map(|r| r.body_text()));
        let end = ran
            .events()
            .into_iter()
            .find(|e| e["kind"] == "tool_call_end")
            .unwrap_or_else(|| panic!("no tool call: {}", ran.all_output()));
        let model_saw = model.requests()[1].body_text();
        (end, model_saw)
    };
    let (end, _) = ask(&mut outputs);
    assert_eq!(
        end["data"]["output"], "hello from the protected server",
        "{end}"
    );
    // The login dies while the session runs: after its tools are listed, before the call.
    auth.revoke_after("tools/list");
    let (end, model_saw) = ask(&mut outputs);
    assert_eq!(end["data"]["is_error"], true, "{end}");
    let error = end["data"]["error"].as_str().unwrap();
    assert!(
        error.contains("needs a login (its refresh token was refused: invalid_grant)")
            && error.contains("`agentloop mcp login protected`"),
        "{error}"
    );
    assert!(
        model_saw.contains("agentloop mcp login protected"),
        "the model reads it"
    );
    assert_eq!(login(&args, home.path()).0, 0);
    let (end, _) = ask(&mut outputs);
    assert_eq!(
        end["data"]["output"], "hello from the protected server",
        "{end}"
    );
    // No token in any output of the CLI or anything the model was sent.
    for token in auth.issued() {
        for output in &outputs {
            assert!(!output.contains(&token), "a token in the CLI's output");
        }
    }
}
