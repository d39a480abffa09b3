//! A session with one Streamable HTTP MCP server whose every tool the (scripted) model calls
//! once, with arguments made up from the tool's schema; then it prints the results. The
//! official conformance runner launches it with the server URL as the last argument, the
//! scenario in `MCP_CONFORMANCE_SCENARIO` and the scenario's data (a pre-registered
//! client) in `MCP_CONFORMANCE_CONTEXT`.
//!
//! Its host accepts every elicitation as the user would who only confirms (the library
//! fills in the schema's defaults), and plays the user's browser for a login: it opens the
//! authorization URL and follows the redirect to the client's loopback listener.
//!
//! ```text
//! cargo run --example mcp_client -- http://127.0.0.1:3001/mcp
//! node conformance/dist/index.js client --scenario auth/metadata-default \
//!     --command target/debug/examples/mcp_client
//! ```

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use agentloop::CancelToken;
use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::scripted::{ScriptedModel, ScriptedTurn};
use agentloop::llm::{Client, Role};
use agentloop::mcp::{Elicitation, ElicitationResponse, McpHost, McpServer, McpServerState};
use agentloop::profiles::ProviderProfile;
use agentloop::session::{EventKind, Session, SessionConfig};
use serde_json::{Map, Value, json};

/// The client metadata document URL the conformance suite expects a client to use where
/// the authorization server takes one (it is not fetched).
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// A value of the schema's type (numbers 1, strings "test", …).
fn sample(schema: &Value) -> Value {
    match schema.get("type").and_then(Value::as_str) {
        Some("number") | Some("integer") => json!(1),
        Some("string") => json!("test"),
        Some("boolean") => json!(true),
        Some("array") => json!([]),
        Some("object") => {
            let mut out = Map::new();
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    if required.contains(&name.as_str()) {
                        out.insert(name.clone(), sample(property));
                    }
                }
            }
            Value::Object(out)
        }
        _ => Value::Null,
    }
}

/// The host: confirms elicitations, opens login URLs like a browser that follows the
/// authorization server's redirect (visits joined when it is dropped).
#[derive(Default)]
struct Host {
    visits: Mutex<Vec<JoinHandle<()>>>,
}

impl McpHost for Host {
    fn elicit(&self, request: &Elicitation, _cancel: &CancelToken) -> ElicitationResponse {
        eprintln!("elicitation from {}: {}", request.server, request.message);
        ElicitationResponse::Accept(Map::new())
    }

    fn open_url(&self, server: &str, url: &str) -> bool {
        eprintln!("opening the login of {server}");
        let url = url.to_string();
        let visit = std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .max_redirects(0)
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(20)))
                .proxy(None)
                .build()
                .new_agent();
            let location = agent.get(&url).call().ok().and_then(|answer| {
                let location = answer.headers().get("location")?.to_str().ok()?;
                Some(location.to_string())
            });
            match location {
                Some(location) => {
                    let _ = agent.get(&location).call();
                }
                None => eprintln!("the authorization server gave no redirect"),
            }
        });
        self.visits.lock().unwrap().push(visit);
        true
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for visit in self.visits.lock().unwrap().drain(..) {
            let _ = visit.join();
        }
    }
}

/// The server, with the OAuth settings the scenario gives.
fn server(url: String) -> McpServer {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(Value::Null);
    let text = |key: &str| context.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut server =
        McpServer::http("server", url).with_oauth_client_metadata_url(CLIENT_METADATA_URL);
    if let Some(id) = text("client_id") {
        server = server.with_oauth_client(id, text("client_secret"));
    }
    if scenario.starts_with("auth/client-credentials") {
        server = server.with_oauth_client_credentials();
    }
    if let Some(key) = text("private_key_pem") {
        server = server.with_oauth_client_key(key);
    }
    if let (Some(endpoint), Some(client), Some(token)) = (
        text("idp_token_endpoint"),
        text("idp_client_id"),
        text("idp_id_token"),
    ) {
        server = server.with_oauth_identity_assertion(endpoint, client, token);
    }
    server
}

fn main() {
    // The runner appends the URL as the last argument.
    let Some(url) = std::env::args()
        .skip(1)
        .next_back()
        .filter(|a| a.starts_with("http"))
    else {
        eprintln!("usage: mcp_client <server URL>");
        std::process::exit(2);
    };
    // First answer: call every MCP tool offered; then stop.
    let model = ScriptedModel::dynamic(|request| {
        if request.messages.iter().any(|m| m.role == Role::Tool) {
            return ScriptedTurn::text("done");
        }
        let mut turn = ScriptedTurn::text("");
        for tool in request.tools.iter().filter(|t| t.name.starts_with("mcp__")) {
            turn = turn.with_tool_call(tool.name.clone(), sample(&tool.parameters));
        }
        turn
    });
    let host = Arc::new(Host::default());
    let config = SessionConfig::default()
        .with_mcp_server(server(url))
        .with_mcp_host(host.clone());
    let env = Arc::new(LocalExecutionEnvironment::new(std::env::temp_dir()).expect("the temp dir"));
    let profile = ProviderProfile::new("scripted", "conformance");
    let session = match Session::new(profile, env, Client::new().with_provider(model), config) {
        Ok(session) => session,
        Err(err) => {
            eprintln!("mcp_client: {err}");
            std::process::exit(1);
        }
    };
    for status in session.mcp_servers() {
        eprintln!(
            "server {}: {:?}, {} tools",
            status.name, status.state, status.tools
        );
        if status.state != McpServerState::Ready {
            std::process::exit(1);
        }
    }
    let events = session.events();
    let _ = session.submit("call the tools");
    session.close();
    for event in events {
        match event.kind {
            EventKind::ToolCallEnd {
                tool_name,
                output,
                error,
                ..
            } => println!("{tool_name}: {}", output.or(error).unwrap_or_default()),
            EventKind::Warning { message, .. } => eprintln!("warning: {message}"),
            _ => {}
        }
    }
}
