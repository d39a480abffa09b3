//! OAuth 2.1 against our own authorization server (`support/oauth.rs`): discovery from the
//! 401, dynamic registration, PKCE through the loopback redirect, the token file (0600),
//! refresh after expiry (the server's 401 and the token's own `expires_in`), a revoked
//! refresh token (an error the model and the host read; a login fixes it), hostile
//! authorization servers, and no token anywhere but the `Authorization` header.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentloop::llm::scripted::ScriptedTurn;
use agentloop::mcp::{McpHost, McpServerState};
use agentloop::session::{SessionConfig, SessionEvent};
use serde_json::json;

use super::*;
use support::oauth::{AuthServer, Browser};
use support::{GENEROUS, Reply, Server};

const TOOL: &str = "mcp__protected__whoami";

fn whoami_turns(times: usize) -> Vec<ScriptedTurn> {
    (0..times)
        .flat_map(|_| {
            [
                ScriptedTurn::tool_call(TOOL, json!({})),
                ScriptedTurn::text("ok"),
            ]
        })
        .collect()
}

fn session_with(
    auth: &AuthServer,
    tokens: &Path,
    host: Option<Arc<dyn McpHost>>,
    turns: Vec<ScriptedTurn>,
    transcript: Option<&Path>,
) -> Harness {
    let server = McpServer::http("protected", auth.mcp_url()).with_token_file(tokens);
    let mut config = SessionConfig::default().with_mcp_server(server);
    if let Some(host) = host {
        config = config.with_mcp_host(host);
    }
    if let Some(path) = transcript {
        config = config.with_transcript(path).with_transcript_events(true);
    }
    harness_with(ScriptedModel::new(turns), profile(), config)
}

/// The whoami result of the last tool round of input `n` (0-based), and whether it failed.
fn whoami(h: &mut Harness) -> (String, bool, Vec<SessionEvent>) {
    h.session.submit("who am i").unwrap();
    let events = collect_input(&mut h.events);
    let (_, text, is_error) = ends(&events).pop().expect("the tool ran");
    (text, is_error, events)
}

#[test]
fn a_login_discovers_registers_and_uses_pkce_and_keeps_the_tokens_owner_only() {
    let auth = AuthServer::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("agentloop/mcp-tokens.json");
    let browser = Arc::new(Browser::default());
    let mut h = session_with(&auth, &tokens, Some(browser.clone()), whoami_turns(1), None);
    let (text, is_error, _) = whoami(&mut h);
    assert!(!is_error, "{text}");
    assert_eq!(text, "hello from the protected server");
    assert_eq!(browser.opened.lock().unwrap().len(), 1);
    let log = auth.log();
    let steps: Vec<String> = log
        .iter()
        .map(|l| format!("{} {}", l.method, l.path()))
        .collect();
    let base = auth.url();
    // Discovery from the 401, registration, the user's authorization, the code exchange,
    // then the MCP request again with the token.
    assert_eq!(
        steps[..7],
        [
            "POST /mcp",
            "GET /.well-known/oauth-protected-resource/mcp",
            "GET /.well-known/oauth-authorization-server",
            "POST /register",
            "GET /authorize",
            "POST /token",
            "POST /mcp",
        ],
        "{steps:?}"
    );
    assert_eq!(log[0].authorization, None);
    let registration: serde_json::Value = serde_json::from_str(&log[3].body).unwrap();
    let redirect = registration["redirect_uris"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert!(redirect.starts_with("http://127.0.0.1:") && redirect.ends_with("/callback"));
    assert_eq!(
        registration["grant_types"],
        json!(["authorization_code", "refresh_token"])
    );
    let authorize = &log[4];
    assert_eq!(
        authorize.field("code_challenge_method").as_deref(),
        Some("S256")
    );
    assert_eq!(authorize.field("resource"), Some(format!("{base}/mcp")));
    assert_eq!(authorize.field("scope").as_deref(), Some("mcp"));
    assert_eq!(authorize.field("redirect_uri"), Some(redirect));
    assert!(authorize.field("state").is_some_and(|s| s.len() >= 16));
    // The server checked the verifier against the challenge (a mismatch is invalid_grant).
    assert!(log[5].field("code_verifier").is_some());
    assert_eq!(log[5].field("resource"), Some(format!("{base}/mcp")));
    let issued = auth.issued();
    assert_eq!(log[6].authorization, Some(format!("Bearer {}", issued[0])));
    // The token file: owner-only, in a directory created for it, holding the tokens.
    let mode = std::fs::metadata(&tokens).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let kept = std::fs::read_to_string(&tokens).unwrap();
    assert!(kept.contains(&issued[0]) && kept.contains(&issued[1]));
    assert!(kept.contains(&format!("{base}/mcp")));
}

/// Fails if any issued token is in `text` (named by `what`).
fn assert_no_token(issued: &[String], text: &str, what: &str) {
    for token in issued {
        assert!(!text.contains(token.as_str()), "a token is in {what}");
    }
}

#[test]
fn tokens_are_refreshed_a_revoked_refresh_token_is_reported_and_a_login_fixes_it() {
    let auth = AuthServer::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    let transcript = dir.path().join("transcript.jsonl");
    // First a login in a session with a browser.
    {
        let browser: Arc<dyn McpHost> = Arc::new(Browser::default());
        let mut first = session_with(&auth, &tokens, Some(browser), whoami_turns(1), None);
        assert!(!whoami(&mut first).1);
    }
    assert_eq!(auth.count("GET", "/authorize"), 1);
    // Then a session with no one to log in: it uses the kept tokens.
    let mut h = session_with(&auth, &tokens, None, whoami_turns(6), Some(&transcript));
    let mut all_events = Vec::new();
    let (text, failed, events) = whoami(&mut h);
    assert!(!failed, "{text}");
    all_events.extend(events);
    assert_eq!(auth.count("GET", "/authorize"), 1, "no second login");
    // The server stops accepting the access token: 401, refresh, the call goes on.
    auth.expire_access();
    let (text, failed, events) = whoami(&mut h);
    assert!(!failed, "{text}");
    all_events.extend(events);
    let refreshes = |auth: &AuthServer| {
        auth.log()
            .iter()
            .filter(|l| l.field("grant_type").as_deref() == Some("refresh_token"))
            .count()
    };
    assert_eq!(refreshes(&auth), 1);
    // A token that says it expires at once is refreshed before it is sent (no 401).
    auth.set_lifetime(Duration::from_secs(3600), 1);
    auth.expire_access();
    assert!(!whoami(&mut h).1);
    let before = auth.log().len();
    let (text, failed, events) = whoami(&mut h);
    assert!(!failed, "{text}");
    all_events.extend(events);
    let after: Vec<_> = auth.log()[before..].to_vec();
    assert!(
        after[0].field("grant_type").as_deref() == Some("refresh_token"),
        "{after:?}"
    );
    assert!(
        after
            .iter()
            .filter(|l| l.path() == "/mcp")
            .all(|l| l.authorization.is_some())
    );
    assert!(
        !after
            .iter()
            .any(|l| l.path() == "/.well-known/oauth-protected-resource/mcp")
    );
    // Every token revoked: the refresh is refused and nobody can log in here.
    auth.revoke_all();
    let (text, failed, events) = whoami(&mut h);
    all_events.extend(events);
    assert!(failed);
    assert!(
        text.contains("needs a login (its refresh token was refused: invalid_grant)")
            && text.contains("`agentloop mcp login protected`"),
        "{text}"
    );
    let model_copy = last_result(&h.model.requests()[9]).content;
    assert_eq!(model_copy, text, "the model reads the same error");
    // A login (what `agentloop mcp login` runs) fixes it for the running session.
    let server = McpServer::http("protected", auth.mcp_url()).with_token_file(&tokens);
    assert!(
        !server.has_login(),
        "the refused tokens were dropped from the file"
    );
    server
        .login(Arc::new(Browser::default()), GENEROUS)
        .unwrap();
    assert!(server.has_login());
    assert_eq!(auth.count("GET", "/authorize"), 2);
    // The kept registration (and its redirect port) was used again.
    assert_eq!(auth.count("POST", "/register"), 1);
    let (text, failed, events) = whoami(&mut h);
    assert!(!failed, "{text}");
    all_events.extend(events);
    h.session.close();
    all_events.extend(collect_to_end(&mut h.events));
    // No token in any event, the transcript, an error or a Debug output.
    let issued = auth.issued();
    assert!(issued.len() >= 10);
    for event in &all_events {
        assert_no_token(&issued, &serde_json::to_string(event).unwrap(), "an event");
    }
    assert_no_token(
        &issued,
        &std::fs::read_to_string(&transcript).unwrap(),
        "the transcript",
    );
    assert_no_token(&issued, &format!("{server:?}"), "Debug");
    assert!(server.logout().unwrap());
    assert!(!server.has_login());
    assert!(!server.logout().unwrap());
}

#[test]
fn a_server_that_needs_a_login_nobody_can_do_is_reported_as_such() {
    let auth = AuthServer::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    let refusing: Arc<dyn McpHost> = Arc::new(Browser::refusing());
    let mut h = session_with(
        &auth,
        &tokens,
        Some(refusing),
        vec![ScriptedTurn::text("hi")],
        None,
    );
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let warnings = mcp_warnings(&events);
    assert!(warnings[0].contains("needs a login"), "{warnings:?}");
    match &h.session.mcp_servers()[0].state {
        McpServerState::NeedsLogin(why) => assert!(why.contains("agentloop mcp login protected")),
        other => panic!("{other:?}"),
    }
    // Registration happened (the URL was made), the user never came.
    assert_eq!(auth.count("GET", "/authorize"), 0);
    assert!(
        !std::fs::read_to_string(&tokens)
            .unwrap_or_default()
            .contains("secret-")
    );
}

#[test]
fn hostile_authorization_servers_cost_an_error_not_memory_or_time() {
    let host = || -> Arc<dyn McpHost> { Arc::new(Browser::default()) };
    let hosted = |server: McpServer| {
        let config = SessionConfig::default()
            .with_mcp_server(server)
            .with_mcp_host(host());
        harness_with(
            ScriptedModel::new(vec![ScriptedTurn::text("hi")]),
            profile(),
            config,
        )
    };
    // Metadata of 1 MB where the client looks for it (the well-known URI, as the 401
    // names none): refused after the 256 KiB cap, at once, for the probe and again for
    // `initialize`.
    let big = format!("{{\"pad\": \"{}\"}}", "y".repeat(1024 * 1024));
    let server = Server::start(vec![
        Reply::json(401, "{}"),
        Reply::json(200, big.clone()),
        Reply::json(401, "{}"),
        Reply::json(200, big),
    ]);
    let started = Instant::now();
    let mut h = hosted(McpServer::http("big", format!("{}/mcp", server.url())));
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let warning = &mcp_warnings(&events)[0];
    assert!(
        warning.contains("OAuth discovery") && warning.contains("reading the answer"),
        "{warning}"
    );
    assert!(!warning.contains("yyyy"));
    assert!(started.elapsed() < GENEROUS);
    // Metadata that never comes: the server's startup timeout ends each attempt.
    let stalling = Server::start(vec![
        Reply::json(401, "{}"),
        Reply::stall(),
        Reply::json(401, "{}"),
        Reply::stall(),
    ]);
    let started = Instant::now();
    let mut h = hosted(
        McpServer::http("stall", format!("{}/mcp", stalling.url()))
            .with_startup_timeout(Duration::from_secs(2)),
    );
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let warning = &mcp_warnings(&events)[0];
    // The login's own deadline and the session's wait for the server are the same 2 s:
    // whichever reports first, the warning names that timeout.
    assert!(
        warning.contains("did not finish within 2 s")
            || warning.contains("startup timeout of 2000 ms"),
        "{warning}"
    );
    assert!(started.elapsed() < GENEROUS, "{:?}", started.elapsed());
    // A challenge naming metadata at a plain-http, non-loopback host: refused unasked.
    let elsewhere = Server::start(vec![
        Reply::json(401, "{}").header(
            "www-authenticate",
            "Bearer resource_metadata=\"http://metadata.example/prm\"",
        ),
        Reply::json(401, "{}").header(
            "www-authenticate",
            "Bearer resource_metadata=\"http://metadata.example/prm\"",
        ),
    ]);
    let mut h = hosted(McpServer::http(
        "elsewhere",
        format!("{}/mcp", elsewhere.url()),
    ));
    h.session.submit("go").unwrap();
    let events = collect_input(&mut h.events);
    let warning = &mcp_warnings(&events)[0];
    assert!(warning.contains("is not https"), "{warning}");
    assert_eq!(elsewhere.requests().len(), 2, "only the two MCP requests");
}
