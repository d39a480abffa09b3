//! What the client answers when a server asks something of it, and the host behind those
//! answers: [`McpHost`] (elicitation, the URL of a login, change notices), the session's
//! roots, and sampling, which this client declines.
//!
//! Both protocol eras end here: a `2025-*` server sends `elicitation/create` or
//! `roots/list` as a JSON-RPC request (answered on the connection's request thread), a
//! `2026-07-28` server puts them in an `input_required` result (answered on the caller's
//! thread before the retry). Nothing here does I/O of its own; a hostile request (an
//! oversized message or schema, a URL that is not http(s)) is refused with an error,
//! never passed to the host.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde_json::{Map, Value, json};

use crate::cancel::CancelToken;

/// The host side of an MCP client: what only the application embedding the library can
/// do. Every method has a default, so a host implements only what it supports; a session
/// without one ([`SessionConfig::mcp_host`](crate::session::SessionConfig::mcp_host))
/// declares no elicitation support and cannot log in interactively.
///
/// The methods are called from the library's own threads and must return promptly
/// (`elicit` when its `cancel` fires): an editor forwards the question over its protocol
/// and waits for the answer; a terminal asks the user.
///
/// ```
/// use std::sync::Arc;
/// use agentloop::CancelToken;
/// use agentloop::mcp::{Elicitation, ElicitationResponse, McpHost};
/// use agentloop::session::SessionConfig;
///
/// struct Editor;
///
/// impl McpHost for Editor {
///     fn elicit(&self, request: &Elicitation, _cancel: &CancelToken) -> ElicitationResponse {
///         // Show `request.message` with a form for `request.schema` (or the page
///         // `request.url`), then answer with what the user chose.
///         match &request.schema {
///             Some(_) => ElicitationResponse::Accept(Default::default()),
///             None => ElicitationResponse::Decline,
///         }
///     }
///
///     fn open_url(&self, _server: &str, _url: &str) -> bool {
///         // Ask the editor to open the login page; the library waits for the redirect.
///         true
///     }
/// }
///
/// let config = SessionConfig::default().with_mcp_host(Arc::new(Editor));
/// assert!(config.mcp_host.is_some());
/// ```
pub trait McpHost: Send + Sync {
    /// A server asks the user for input (`elicitation/create`): a form (`schema`) or a URL
    /// to open (`url`). The answer goes back to the server; fields the user left out of
    /// an accepted form get the schema's defaults. `cancel` fires when the connection
    /// closes; return [`ElicitationResponse::Cancel`] then. Default: decline.
    fn elicit(&self, request: &Elicitation, cancel: &CancelToken) -> ElicitationResponse {
        let _ = (request, cancel);
        ElicitationResponse::Decline
    }

    /// Whether this host answers elicitations (the client declares the capability, and
    /// servers then ask). Default `true`; a host that only handles logins says `false`.
    fn elicits(&self) -> bool {
        true
    }

    /// The user must open `url` in a browser to log in to `server` (OAuth). Hand it over
    /// (open a browser, print it, send it to the editor) and return `true` at once; the
    /// library then waits for the browser's redirect on its loopback listener. `false`
    /// (the default) means nobody can open it: the login is reported as needed instead.
    fn open_url(&self, server: &str, url: &str) -> bool {
        let _ = (server, url);
        false
    }

    /// `server`'s list of `"tools"`, `"resources"` or `"prompts"` changed (the new tools
    /// reach the model at its next call; a host lists resources and prompts again).
    fn list_changed(&self, server: &str, list: &str) {
        let _ = (server, list);
    }

    /// A resource the host subscribed to changed on `server`.
    fn resource_updated(&self, server: &str, uri: &str) {
        let _ = (server, uri);
    }
}

/// A server's question for the user (`elicitation/create`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Elicitation {
    /// The configured name of the server asking.
    pub server: String,
    /// What the server says to the user.
    pub message: String,
    /// Form mode: the JSON schema of the object wanted (flat properties of strings,
    /// numbers, booleans and enums, with optional `default`s).
    pub schema: Option<Value>,
    /// URL mode: the page the user is asked to open. Show its host, and open it when the
    /// user accepts; what the user enters there never comes back through the client.
    pub url: Option<String>,
    /// URL mode: the server's id of this elicitation.
    pub elicitation_id: Option<String>,
}

/// The user's answer to an [`Elicitation`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ElicitationResponse {
    /// Accepted, with the form's values (empty for URL mode). Omitted fields get the
    /// schema's defaults before the answer is checked against the schema.
    Accept(Map<String, Value>),
    /// The user said no.
    Decline,
    /// The user dismissed the question without choosing.
    Cancel,
}

/// The longest elicitation message passed to the host, in bytes.
const MAX_MESSAGE: usize = 16 * 1024;
/// The most form fields an elicitation may ask for.
const MAX_FIELDS: usize = 64;
/// The longest URL an elicitation may name.
const MAX_URL: usize = 4096;

/// Why the client refused a server's request: a JSON-RPC error code and message.
pub(crate) type Refusal = (i64, String);

/// The client side shared by every server of a session: the host and the roots (the
/// working directory first, then the host's own).
pub(crate) struct ClientContext {
    pub(crate) host: Option<Arc<dyn McpHost>>,
    roots: RwLock<Vec<PathBuf>>,
}

impl std::fmt::Debug for ClientContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientContext")
            .field("host", &self.host.is_some())
            .field("roots", &self.roots())
            .finish()
    }
}

impl Default for ClientContext {
    fn default() -> Self {
        ClientContext::new(None, Vec::new())
    }
}

impl ClientContext {
    pub(crate) fn new(host: Option<Arc<dyn McpHost>>, roots: Vec<PathBuf>) -> ClientContext {
        ClientContext {
            host,
            roots: RwLock::new(roots),
        }
    }

    /// The roots offered to servers now.
    pub(crate) fn roots(&self) -> Vec<PathBuf> {
        self.roots.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the roots; whether they changed.
    pub(crate) fn set_roots(&self, roots: Vec<PathBuf>) -> bool {
        let mut current = self.roots.write().unwrap_or_else(|e| e.into_inner());
        let changed = *current != roots;
        *current = roots;
        changed
    }

    /// The capabilities this client declares: roots (with change notices), elicitation
    /// (both modes) when a host can answer; never sampling.
    pub(crate) fn capabilities(&self) -> Value {
        let mut capabilities = json!({"roots": {"listChanged": true}});
        if self.host.as_ref().is_some_and(|host| host.elicits()) {
            capabilities["elicitation"] = json!({"form": {}, "url": {}});
        }
        capabilities
    }

    /// The answer to the server request `method` of `server`.
    pub(crate) fn answer(
        &self,
        server: &str,
        method: &str,
        params: &Value,
        cancel: &CancelToken,
    ) -> Result<Value, Refusal> {
        match method {
            "ping" => Ok(json!({})),
            "roots/list" => Ok(roots_result(&self.roots())),
            "elicitation/create" => self.elicit(server, params, cancel),
            "sampling/createMessage" => Err((
                -32601,
                "sampling is not supported by this client (it declares no sampling \
                 capability)"
                    .to_string(),
            )),
            _ => Err((-32601, "Method not found".to_string())),
        }
    }

    fn elicit(&self, server: &str, params: &Value, cancel: &CancelToken) -> Result<Value, Refusal> {
        let request = parse_elicitation(server, params)?;
        let Some(host) = self.host.as_ref().filter(|host| host.elicits()) else {
            return Ok(json!({"action": "decline"}));
        };
        match host.elicit(&request, cancel) {
            ElicitationResponse::Decline => Ok(json!({"action": "decline"})),
            ElicitationResponse::Cancel => Ok(json!({"action": "cancel"})),
            ElicitationResponse::Accept(_) if request.url.is_some() => {
                Ok(json!({"action": "accept"}))
            }
            ElicitationResponse::Accept(mut content) => {
                let schema = request.schema.unwrap_or_else(|| json!({"type": "object"}));
                apply_defaults(&mut content, &schema);
                let content = Value::Object(content);
                let problems = crate::tools::schema::validate(&content, &schema);
                if !problems.is_empty() {
                    return Err((
                        -32602,
                        format!(
                            "the answer does not match the requested schema: {}",
                            problems.join("; ")
                        ),
                    ));
                }
                Ok(json!({"action": "accept", "content": content}))
            }
        }
    }
}

/// Reads `elicitation/create` params; refuses what a host should never be shown.
fn parse_elicitation(server: &str, params: &Value) -> Result<Elicitation, Refusal> {
    let invalid = |why: &str| (-32602, format!("invalid elicitation: {why}"));
    let message = params.get("message").and_then(Value::as_str).unwrap_or("");
    if message.len() > MAX_MESSAGE {
        return Err(invalid("the message is too long"));
    }
    let mode = params.get("mode").and_then(Value::as_str).unwrap_or("form");
    let mut request = Elicitation {
        server: server.to_string(),
        message: message.to_string(),
        schema: None,
        url: None,
        elicitation_id: None,
    };
    match mode {
        "form" => {
            let schema = params
                .get("requestedSchema")
                .cloned()
                .unwrap_or(json!({"type": "object", "properties": {}}));
            let fields = schema.get("properties").and_then(Value::as_object);
            if !schema.is_object() || fields.is_some_and(|f| f.len() > MAX_FIELDS) {
                return Err(invalid("the requested schema is not a small object schema"));
            }
            request.schema = Some(schema);
        }
        "url" => {
            let url = params.get("url").and_then(Value::as_str).unwrap_or("");
            let web = url.starts_with("https://") || url.starts_with("http://");
            if !web || url.len() > MAX_URL || url.chars().any(char::is_control) {
                return Err(invalid("the URL must be an http(s) URL"));
            }
            request.url = Some(url.to_string());
            request.elicitation_id = params
                .get("elicitationId")
                .and_then(Value::as_str)
                .map(|id| id.chars().take(256).collect());
        }
        _ => return Err(invalid("unknown mode")),
    }
    Ok(request)
}

/// Fills the fields `content` leaves out with the schema's `default`s (SEP-1034).
fn apply_defaults(content: &mut Map<String, Value>, schema: &Value) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, property) in properties {
        if let Some(default) = property.get("default") {
            content
                .entry(name.clone())
                .or_insert_with(|| default.clone());
        }
    }
}

/// `roots/list`'s result for `roots`.
fn roots_result(roots: &[PathBuf]) -> Value {
    let roots: Vec<Value> = roots
        .iter()
        .map(|root| {
            let name = root
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| root.to_string_lossy().into_owned());
            json!({"uri": file_uri(root), "name": name})
        })
        .collect();
    json!({ "roots": roots })
}

/// `file://` and the path, percent-encoded outside RFC 3986's unreserved set and `/`.
pub(crate) fn file_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Accepting(Map<String, Value>);
    impl McpHost for Accepting {
        fn elicit(&self, _: &Elicitation, _: &CancelToken) -> ElicitationResponse {
            ElicitationResponse::Accept(self.0.clone())
        }
    }

    fn ask(host: Option<Arc<dyn McpHost>>, params: Value) -> Result<Value, Refusal> {
        let ctx = ClientContext::new(host, vec![PathBuf::from("/w/my project")]);
        ctx.answer("s", "elicitation/create", &params, &CancelToken::new())
    }

    #[test]
    fn omitted_fields_get_the_schemas_defaults_and_the_answer_is_checked() {
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "default": "Ada"},
            "age": {"type": "integer", "default": 30},
            "ok": {"type": "boolean"}
        }});
        let host: Arc<dyn McpHost> = Arc::new(Accepting(Map::new()));
        let params = json!({"message": "m", "requestedSchema": schema});
        let answer = ask(Some(host), params.clone()).unwrap();
        assert_eq!(
            answer,
            json!({"action": "accept", "content": {"name": "Ada", "age": 30}})
        );
        let wrong = Map::from_iter([("age".to_string(), json!("old"))]);
        let host: Arc<dyn McpHost> = Arc::new(Accepting(wrong));
        let (code, why) = ask(Some(host), params.clone()).unwrap_err();
        assert_eq!(code, -32602);
        assert!(why.contains("age"), "{why}");
        assert_eq!(ask(None, params).unwrap(), json!({"action": "decline"}));
    }

    #[test]
    fn hostile_elicitations_never_reach_the_host() {
        let host: Arc<dyn McpHost> = Arc::new(Accepting(Map::new()));
        let long = json!({"message": "x".repeat(MAX_MESSAGE + 1)});
        assert!(ask(Some(host.clone()), long).is_err());
        let file = json!({"mode": "url", "message": "m", "url": "file:///etc/passwd"});
        assert!(ask(Some(host.clone()), file).is_err());
        let fields: Map<String, Value> = (0..100)
            .map(|i| (format!("f{i}"), json!({"type": "string"})))
            .collect();
        let wide =
            json!({"message": "m", "requestedSchema": {"type": "object", "properties": fields}});
        assert!(ask(Some(host.clone()), wide).is_err());
        let url = json!({"mode": "url", "message": "m", "url": "https://e.example/x",
                         "elicitationId": "e1"});
        assert_eq!(ask(Some(host), url).unwrap(), json!({"action": "accept"}));
    }

    #[test]
    fn a_host_that_does_not_elicit_declares_none_and_declines() {
        struct LoginsOnly;
        impl McpHost for LoginsOnly {
            fn elicits(&self) -> bool {
                false
            }
            fn elicit(&self, _: &Elicitation, _: &CancelToken) -> ElicitationResponse {
                unreachable!("never asked")
            }
        }
        let host: Arc<dyn McpHost> = Arc::new(LoginsOnly);
        let ctx = ClientContext::new(Some(host.clone()), Vec::new());
        assert!(ctx.capabilities().get("elicitation").is_none());
        let params = json!({"message": "m"});
        assert_eq!(
            ask(Some(host), params).unwrap(),
            json!({"action": "decline"})
        );
    }

    #[test]
    fn roots_are_file_uris_and_sampling_is_declined() {
        let ctx = ClientContext::new(None, vec![PathBuf::from("/w/my project")]);
        let cancel = CancelToken::new();
        assert_eq!(
            ctx.answer("s", "roots/list", &json!({}), &cancel).unwrap(),
            json!({"roots": [{"uri": "file:///w/my%20project", "name": "my project"}]})
        );
        let (code, _) = ctx
            .answer("s", "sampling/createMessage", &json!({}), &cancel)
            .unwrap_err();
        assert_eq!(code, -32601);
        assert!(ctx.capabilities().get("sampling").is_none());
        assert!(ctx.capabilities().get("elicitation").is_none());
    }
}
