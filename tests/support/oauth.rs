//! Our own OAuth 2.1 authorization server and protected MCP server on 127.0.0.1, for the
//! MCP client's login tests: protected resource metadata, authorization server metadata,
//! dynamic registration, the authorization endpoint (a redirect with the code), the token
//! endpoint (code with PKCE `S256` checked by `ring`'s SHA-256, refresh with rotation,
//! expiry, revocation) and `/mcp`, which answers 401 with `WWW-Authenticate` until it gets
//! a valid token for itself. Also [`Browser`], a host that plays the user's browser.
//!
//! One thread serves connections one at a time (`connection: close`), blocked in `accept`
//! between them (its drop wakes it with a connection); every request is logged for the
//! tests' assertions.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One request the server got.
#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    /// The path with its query.
    pub target: String,
    pub authorization: Option<String>,
    pub body: String,
}

impl Logged {
    /// A query or form field of the request.
    pub fn field(&self, name: &str) -> Option<String> {
        let query = self.target.split_once('?').map_or("", |(_, q)| q);
        [query, self.body.as_str()]
            .into_iter()
            .flat_map(|text| text.split('&'))
            .find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                (k == name).then(|| decode(v))
            })
    }

    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Code {
    client_id: String,
    challenge: String,
    redirect_uri: String,
    resource: String,
}

#[derive(Default)]
struct State {
    clients: HashMap<String, Vec<String>>,
    codes: HashMap<String, Code>,
    /// Access token → when the server stops accepting it.
    access: HashMap<String, Instant>,
    /// Refresh token → (client, revoked).
    refresh: HashMap<String, (String, bool)>,
    issued: Vec<String>,
    log: Vec<Logged>,
    counter: u64,
    /// How long the server accepts an access token (`expires_in` may say otherwise).
    lifetime: Duration,
    /// `/mcp` answers without a token (the unauthenticated baseline of the bench).
    open: bool,
    /// Revoke every token once a request with this method has been answered.
    revoke_after: Option<String>,
    /// What `expires_in` says.
    advertised: u64,
}

/// The authorization server and protected MCP server (stopped and joined on drop).
pub struct AuthServer {
    base: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl AuthServer {
    /// The same server with an `/mcp` that needs no token.
    pub fn start_open() -> AuthServer {
        let server = AuthServer::start();
        server.state.lock().unwrap().open = true;
        server
    }

    pub fn start() -> AuthServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let state = Arc::new(Mutex::new(State {
            lifetime: Duration::from_secs(3600),
            advertised: 3600,
            ..State::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop, base) = (state.clone(), stop.clone(), base.clone());
            std::thread::Builder::new()
                .name("test-oauth-server".into())
                .spawn(move || serve(listener, &base, &state, &stop))
                .unwrap()
        };
        AuthServer {
            base,
            state,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// Access tokens from now on are accepted for `lifetime` and advertised with
    /// `expires_in` = `advertised` seconds.
    pub fn set_lifetime(&self, lifetime: Duration, advertised: u64) {
        let mut state = self.state.lock().unwrap();
        state.lifetime = lifetime;
        state.advertised = advertised;
    }

    /// Refuses every refresh token issued so far, and every access token.
    pub fn revoke_all(&self) {
        let mut state = self.state.lock().unwrap();
        for entry in state.refresh.values_mut() {
            entry.1 = true;
        }
        state.access.clear();
    }

    /// Revokes every token once `/mcp` has answered a request for `method`: a login
    /// that dies in the middle of a session.
    pub fn revoke_after(&self, method: &str) {
        self.state.lock().unwrap().revoke_after = Some(method.to_string());
    }

    /// Stops accepting every access token issued so far (refresh tokens stay good).
    pub fn expire_access(&self) {
        self.state.lock().unwrap().access.clear();
    }

    /// Every token issued (access and refresh).
    pub fn issued(&self) -> Vec<String> {
        self.state.lock().unwrap().issued.clone()
    }

    pub fn log(&self) -> Vec<Logged> {
        self.state.lock().unwrap().log.clone()
    }

    /// How many requests went to `path`.
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.log()
            .iter()
            .filter(|l| l.method == method && l.path() == path)
            .count()
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // The accept blocks: one connection wakes it to see the stop.
        let _ = TcpStream::connect(self.base.trim_start_matches("http://"));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(listener: TcpListener, base: &str, state: &Mutex<State>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        if let Ok((stream, _)) = listener.accept() {
            if !stop.load(Ordering::SeqCst) {
                handle(stream, base, state);
            }
        }
    }
}

fn handle(mut stream: TcpStream, base: &str, state: &Mutex<State>) {
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let header_end = loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&data[..header_end]).into_owned();
    let header = |name: &str| {
        head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let length: usize = header("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    while data.len() < header_end + length {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    }
    let mut parts = head.lines().next().unwrap_or("").split(' ');
    let logged = Logged {
        method: parts.next().unwrap_or("").to_string(),
        target: parts.next().unwrap_or("").to_string(),
        authorization: header("authorization"),
        body: String::from_utf8_lossy(&data[header_end..]).into_owned(),
    };
    state.lock().unwrap().log.push(logged.clone());
    let (status, headers, body) = route(&logged, base, state);
    let mut response = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        response.push_str(&format!("{k}: {v}\r\n"));
    }
    response.push_str("\r\n");
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.write_all(body.as_bytes());
}

type Answer = (u16, Vec<(&'static str, String)>, String);

fn json_answer(status: u16, value: Value) -> Answer {
    (
        status,
        vec![("content-type", "application/json".into())],
        value.to_string(),
    )
}

fn oauth_error(error: &str) -> Answer {
    json_answer(
        400,
        json!({"error": error, "error_description": format!("test server: {error}")}),
    )
}

fn route(request: &Logged, base: &str, state: &Mutex<State>) -> Answer {
    match (request.method.as_str(), request.path()) {
        ("GET", "/.well-known/oauth-protected-resource/mcp") => json_answer(
            200,
            json!({"resource": format!("{base}/mcp"), "authorization_servers": [base],
                   "scopes_supported": ["mcp"]}),
        ),
        ("GET", "/.well-known/oauth-authorization-server") => json_answer(
            200,
            json!({"issuer": base, "authorization_endpoint": format!("{base}/authorize"),
                   "token_endpoint": format!("{base}/token"),
                   "registration_endpoint": format!("{base}/register"),
                   "response_types_supported": ["code"],
                   "grant_types_supported": ["authorization_code", "refresh_token"],
                   "code_challenge_methods_supported": ["S256"],
                   "token_endpoint_auth_methods_supported": ["none"]}),
        ),
        ("POST", "/register") => {
            let body: Value = serde_json::from_str(&request.body).unwrap_or_default();
            let uris: Vec<String> = body["redirect_uris"]
                .as_array()
                .map(|u| {
                    u.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let mut state = state.lock().unwrap();
            state.counter += 1;
            let id = format!("client-{}", state.counter);
            state.clients.insert(id.clone(), uris.clone());
            json_answer(
                201,
                json!({"client_id": id, "redirect_uris": uris,
                                    "token_endpoint_auth_method": "none"}),
            )
        }
        ("GET", "/authorize") => authorize(request, base, state),
        ("POST", "/token") => token(request, base, state),
        ("POST", "/mcp") => mcp(request, base, state),
        _ => (404, vec![], "not found".into()),
    }
}

fn authorize(request: &Logged, base: &str, state: &Mutex<State>) -> Answer {
    let field = |name: &str| request.field(name).unwrap_or_default();
    let mut state = state.lock().unwrap();
    let redirect = field("redirect_uri");
    let registered = state
        .clients
        .get(&field("client_id"))
        .is_some_and(|uris| uris.contains(&redirect));
    if !registered
        || field("response_type") != "code"
        || field("code_challenge_method") != "S256"
        || field("code_challenge").len() != 43
        || field("resource") != format!("{base}/mcp")
    {
        return (400, vec![], "bad authorization request".into());
    }
    state.counter += 1;
    let code = format!("code-{}", state.counter);
    state.codes.insert(
        code.clone(),
        Code {
            client_id: field("client_id"),
            challenge: field("code_challenge"),
            redirect_uri: redirect.clone(),
            resource: field("resource"),
        },
    );
    let location = format!("{redirect}?code={code}&state={}", field("state"));
    (302, vec![("location", location)], String::new())
}

fn s256(verifier: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes());
    let mut text = String::new();
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = digest.as_ref();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            text.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    text
}

fn issue(state: &mut State, client: &str) -> Answer {
    state.counter += 1;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let access = format!("secret-access-{}-{nanos}", state.counter);
    let refresh = format!("secret-refresh-{}-{nanos}", state.counter);
    let until = Instant::now() + state.lifetime;
    state.access.insert(access.clone(), until);
    state
        .refresh
        .insert(refresh.clone(), (client.to_string(), false));
    state.issued.push(access.clone());
    state.issued.push(refresh.clone());
    json_answer(
        200,
        json!({"access_token": access, "token_type": "Bearer", "expires_in": state.advertised,
               "refresh_token": refresh, "scope": "mcp"}),
    )
}

fn token(request: &Logged, base: &str, state: &Mutex<State>) -> Answer {
    let field = |name: &str| request.field(name).unwrap_or_default();
    let mut state = state.lock().unwrap();
    if field("resource") != format!("{base}/mcp") {
        return oauth_error("invalid_target");
    }
    match field("grant_type").as_str() {
        "authorization_code" => {
            let Some(code) = state.codes.remove(&field("code")) else {
                return oauth_error("invalid_grant");
            };
            if code.client_id != field("client_id")
                || code.redirect_uri != field("redirect_uri")
                || code.resource != field("resource")
                || s256(&field("code_verifier")) != code.challenge
            {
                return oauth_error("invalid_grant");
            }
            issue(&mut state, &code.client_id)
        }
        "refresh_token" => {
            let presented = field("refresh_token");
            match state.refresh.get_mut(&presented) {
                Some((client, revoked)) if !*revoked && *client == field("client_id") => {
                    // Rotation: the presented refresh token is spent.
                    *revoked = true;
                    let client = client.clone();
                    issue(&mut state, &client)
                }
                _ => oauth_error("invalid_grant"),
            }
        }
        _ => oauth_error("unsupported_grant_type"),
    }
}

fn mcp(request: &Logged, base: &str, state: &Mutex<State>) -> Answer {
    let token = request
        .authorization
        .as_deref()
        .and_then(|h| h.strip_prefix("Bearer "));
    let open = state.lock().unwrap().open;
    let valid = open
        || token.is_some_and(|t| {
            state
                .lock()
                .unwrap()
                .access
                .get(t)
                .is_some_and(|until| Instant::now() < *until)
        });
    if !valid {
        let error = if token.is_some() {
            "error=\"invalid_token\", "
        } else {
            ""
        };
        let challenge = format!(
            "Bearer {error}resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
        );
        return (401, vec![("www-authenticate", challenge)], String::new());
    }
    let message: Value = serde_json::from_str(&request.body).unwrap_or_default();
    let id = message["id"].clone();
    {
        let mut state = state.lock().unwrap();
        if state.revoke_after.as_deref() == message["method"].as_str() {
            state.revoke_after = None;
            for entry in state.refresh.values_mut() {
                entry.1 = true;
            }
            state.access.clear();
        }
    }
    let result = match message["method"].as_str().unwrap_or("") {
        "initialize" => json!({"protocolVersion": message["params"]["protocolVersion"],
                               "capabilities": {"tools": {}},
                               "serverInfo": {"name": "protected", "version": "1"}}),
        "tools/list" => json!({"tools": [{"name": "whoami", "description": "Says hello.",
                                          "inputSchema": {"type": "object"}}]}),
        "tools/call" => {
            json!({"content": [{"type": "text", "text": "hello from the protected server"}]})
        }
        method if method.starts_with("notifications/") => return (202, vec![], String::new()),
        _ => {
            return json_answer(
                200,
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}),
            );
        }
    };
    json_answer(200, json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// A host that plays the user's browser: it opens the authorization URL, follows the
/// redirect to the client's loopback listener, and (when `refuse`) pretends nobody can
/// open URLs. Its visits are joined on drop.
#[derive(Default)]
pub struct Browser {
    pub refuse: bool,
    pub opened: Mutex<Vec<String>>,
    visits: Mutex<Vec<JoinHandle<()>>>,
}

impl Browser {
    /// A host that cannot open URLs.
    pub fn refusing() -> Browser {
        let mut browser = Browser::default();
        browser.refuse = true;
        browser
    }
}

impl agentloop::mcp::McpHost for Browser {
    fn open_url(&self, _server: &str, url: &str) -> bool {
        if self.refuse {
            return false;
        }
        self.opened.lock().unwrap().push(url.to_string());
        let url = url.to_string();
        let visit = std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .max_redirects(0)
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(20)))
                .proxy(None)
                .build()
                .new_agent();
            let Ok(answer) = agent.get(&url).call() else {
                return;
            };
            let Some(location) = answer
                .headers()
                .get("location")
                .and_then(|l| l.to_str().ok())
            else {
                return;
            };
            let _ = agent.get(location).call();
        });
        self.visits.lock().unwrap().push(visit);
        true
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        for visit in self.visits.lock().unwrap().drain(..) {
            let _ = visit.join();
        }
    }
}
