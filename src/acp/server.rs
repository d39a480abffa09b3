//! The reader side of an ACP connection: reads one line at a time, answers what it can at
//! once (`initialize`, `session/list`, errors), starts and ends sessions, and hands prompts,
//! cancels and mode changes to the session they name. It never waits for a model or a
//! tool: a prompt is queued on its session, whose pump answers it.

use std::collections::HashMap;
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::AcpAgent;
use super::files::ClientFs;
use super::rpc::{self, Connection, Incoming, Line, Read, RpcError, code};
use super::session::{AcpSession, Start};
use super::store;
use crate::mcp::McpServer;
use crate::session::SessionMode;
use crate::sync::lock;

/// The ACP version this agent speaks.
const PROTOCOL_VERSION: u64 = 1;

/// One connection's sessions and what the client said it can do.
pub(crate) struct Server<'a> {
    agent: &'a AcpAgent,
    connection: Arc<Connection>,
    sessions: HashMap<String, AcpSession>,
    fs: ClientFs,
}

impl<'a> Server<'a> {
    pub(crate) fn new(agent: &'a AcpAgent, connection: Arc<Connection>) -> Server<'a> {
        Server {
            agent,
            connection,
            sessions: HashMap::new(),
            fs: ClientFs::default(),
        }
    }

    /// Reads and handles messages until the input ends, then ends every session.
    pub(crate) fn run(&mut self, input: &mut impl BufRead) -> io::Result<()> {
        let mut buf = Vec::new();
        let result = loop {
            match rpc::read_line(input, &mut buf, self.agent.max_message_bytes) {
                Ok(Read::End) => break Ok(()),
                Ok(Read::TooLong(bytes)) => self.connection.respond(
                    Value::Null,
                    Err(RpcError::new(
                        code::INVALID_REQUEST,
                        format!(
                            "invalid request: a message of {bytes} bytes is over this agent's \
                             limit of {} bytes; it was not read",
                            self.agent.max_message_bytes
                        ),
                    )),
                ),
                Ok(Read::Line) => match rpc::parse(&buf) {
                    Line::Message(message) => self.handle(message),
                    Line::Invalid { id, error } => self.connection.respond(id, Err(error)),
                    Line::Blank => {}
                },
                Err(e) => break Err(e),
            }
        };
        self.end_all();
        result
    }

    /// Ends every session: no client answer will come any more, every input is aborted at
    /// once, then each pump and worker is joined.
    fn end_all(&mut self) {
        self.connection.close();
        for session in self.sessions.values() {
            session.session.abort();
        }
        for (_, session) in self.sessions.drain() {
            session.end();
        }
    }

    fn handle(&mut self, message: Incoming) {
        match message {
            // A prompt is answered by its session's pump when its input ends.
            Incoming::Request { id, method, params } if method == "session/prompt" => {
                if let Err(error) = self.prompt(&id, &params) {
                    self.connection.respond(id, Err(error));
                }
            }
            Incoming::Request { id, method, params } => {
                let result = self.request(&method, params);
                self.connection.respond(id, result);
            }
            Incoming::Notification { method, params } => {
                if method == "session/cancel" {
                    if let Some(session) = session_id(&params).and_then(|id| self.sessions.get(id))
                    {
                        session.cancel();
                    }
                }
            }
            Incoming::Response { id, result } => self.connection.answer(&id, result),
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            "initialize" => Ok(self.initialize(&params)),
            "authenticate" => Ok(json!({})),
            "session/new" => {
                let (id, session) = self.open(&params, None)?;
                self.keep(id, session, true)
            }
            "session/load" | "session/resume" => self.reopen(&params, method == "session/load"),
            "session/list" => self.list(&params),
            "session/close" => {
                let session = self.known(&params)?;
                let id = session.shared.id.clone();
                if let Some(session) = self.sessions.remove(&id) {
                    session.end();
                }
                Ok(json!({}))
            }
            "session/set_mode" => {
                let mode = params
                    .get("modeId")
                    .and_then(Value::as_str)
                    .ok_or_else(|| RpcError::invalid_params("`modeId` is missing"))?;
                let mode = SessionMode::from_id(mode)
                    .ok_or_else(|| RpcError::invalid_params(format!("unknown mode `{mode}`")))?;
                self.known(&params)?.set_mode(mode)?;
                Ok(json!({}))
            }
            "session/set_config_option" => {
                let session = self.known(&params)?;
                match (
                    params.get("configId").and_then(Value::as_str),
                    params.get("value"),
                ) {
                    (Some("model"), Some(Value::String(model))) => session.set_model(model)?,
                    (Some("model"), _) => {
                        return Err(RpcError::invalid_params("`value` must be a model id"));
                    }
                    (other, _) => {
                        return Err(RpcError::invalid_params(format!(
                            "unknown config option {other:?}; this agent has `model`"
                        )));
                    }
                }
                Ok(json!({"configOptions": session.config_options()}))
            }
            _ => Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("method not found: `{method}`"),
            )),
        }
    }

    fn initialize(&mut self, params: &Value) -> Value {
        let fs = &params["clientCapabilities"]["fs"];
        self.fs = ClientFs {
            read: fs["readTextFile"].as_bool() == Some(true),
            write: fs["writeTextFile"].as_bool() == Some(true),
        };
        let stored = self.agent.store.is_some();
        let mut sessions = json!({"close": {}});
        if stored {
            sessions["list"] = json!({});
            sessions["resume"] = json!({});
        }
        json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": stored,
                "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
                "mcpCapabilities": {"http": true, "sse": false},
                "sessionCapabilities": sessions,
            },
            "authMethods": [],
            "agentInfo": {"name": self.agent.name, "version": self.agent.version},
        })
    }

    /// The live session `params` names.
    fn known(&self, params: &Value) -> Result<&AcpSession, RpcError> {
        let id =
            session_id(params).ok_or_else(|| RpcError::invalid_params("`sessionId` is missing"))?;
        self.sessions.get(id).ok_or_else(|| {
            RpcError::new(code::RESOURCE_NOT_FOUND, format!("unknown session `{id}`"))
        })
    }

    /// Starts a session for `session/new` (`resume` is `None`) or for a load or resume of
    /// the transcript `resume` names.
    fn open(
        &self,
        params: &Value,
        resume: Option<(&str, &Path)>,
    ) -> Result<(String, AcpSession), RpcError> {
        let cwd = params
            .get("cwd")
            .and_then(Value::as_str)
            .map(PathBuf::from)
            .filter(|cwd| cwd.is_absolute())
            .ok_or_else(|| RpcError::invalid_params("`cwd` must be an absolute path"))?;
        let mcp_servers = match params.get("mcpServers") {
            None | Some(Value::Null) if resume.is_some() => Vec::new(),
            Some(Value::Array(servers)) => servers
                .iter()
                .map(mcp_server)
                .collect::<Result<Vec<_>, _>>()?,
            _ => return Err(RpcError::invalid_params("`mcpServers` must be an array")),
        };
        let id = match resume {
            Some((id, _)) => id.to_string(),
            None => crate::session::new_session_id(),
        };
        if let Some(store) = &self.agent.store {
            store.ensure().map_err(|e| {
                RpcError::new(
                    code::INTERNAL_ERROR,
                    format!("cannot create the sessions directory: {e}"),
                )
            })?;
        }
        let start = Start {
            id: id.clone(),
            cwd,
            mcp_servers,
            resume: resume.map(|(_, path)| path),
            fs: self.fs,
        };
        Ok((id, AcpSession::start(self.agent, &self.connection, start)?))
    }

    /// Starts the session's pump and keeps it; the answer of `session/new` and friends.
    fn keep(&mut self, id: String, session: AcpSession, with_id: bool) -> Result<Value, RpcError> {
        session.start_pump().map_err(|e| {
            RpcError::new(
                code::INTERNAL_ERROR,
                format!("no thread for the session: {e}"),
            )
        })?;
        let mut answer =
            json!({"modes": session.modes(), "configOptions": session.config_options()});
        if with_id {
            answer["sessionId"] = json!(id);
        }
        self.sessions.insert(id, session);
        Ok(answer)
    }

    /// `session/load` (with the history replayed first) and `session/resume`.
    fn reopen(&mut self, params: &Value, replay: bool) -> Result<Value, RpcError> {
        let Some(store) = self.agent.store.clone() else {
            return Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                "this agent keeps no sessions (loadSession is false)",
            ));
        };
        let id = session_id(params)
            .filter(|id| store::valid_id(id))
            .ok_or_else(|| RpcError::invalid_params("`sessionId` is missing or not one of ours"))?
            .to_string();
        let path = store.path(&id);
        if !path.is_file() {
            return Err(RpcError::new(
                code::RESOURCE_NOT_FOUND,
                format!("no session `{id}` is recorded in {}", store.dir.display()),
            ));
        }
        // Loading a session this connection has open starts it again from its transcript.
        if let Some(live) = self.sessions.remove(&id) {
            live.end();
        }
        let (id, session) = self.open(params, Some((&id, &path)))?;
        if replay {
            for update in session.replay() {
                session.shared.update(update);
            }
        }
        self.keep(id, session, false)
    }

    fn list(&self, params: &Value) -> Result<Value, RpcError> {
        let cwd = params.get("cwd").and_then(Value::as_str);
        let sessions = match &self.agent.store {
            Some(store) => store.list(cwd),
            None => Vec::new(),
        };
        Ok(json!({"sessions": sessions}))
    }

    /// `session/prompt`: queued on its session, answered by its pump when the input ends.
    fn prompt(&self, id: &Value, params: &Value) -> Result<(), RpcError> {
        let session = self.known(params)?;
        let blocks = params
            .get("prompt")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                RpcError::invalid_params("`prompt` must be an array of content blocks")
            })?;
        let text = prompt_text(blocks)?;
        let mut prompt = lock(&session.shared.prompt);
        if prompt.id.is_some() {
            return Err(RpcError::new(
                code::INVALID_REQUEST,
                "a prompt is already running in this session; cancel it or wait for its answer",
            ));
        }
        session.session.submit(text).map_err(|e| {
            RpcError::new(
                code::INTERNAL_ERROR,
                format!("the session cannot take a prompt: {e}"),
            )
        })?;
        prompt.id = Some(id.clone());
        prompt.cancelled = false;
        Ok(())
    }
}

/// The `sessionId` of a request's params.
fn session_id(params: &Value) -> Option<&str> {
    params.get("sessionId").and_then(Value::as_str)
}

/// An MCP server of `session/new`: stdio (`command`, `args`, `env`) or HTTP (`url`).
fn mcp_server(value: &Value) -> Result<McpServer, RpcError> {
    let name = value
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("an MCP server needs a `name`"))?;
    match (
        value.get("type").and_then(Value::as_str),
        value.get("command"),
    ) {
        (Some("http"), _) => {
            let url = value.get("url").and_then(Value::as_str).ok_or_else(|| {
                RpcError::invalid_params(format!("MCP server `{name}` has no `url`"))
            })?;
            Ok(McpServer::http(name, url))
        }
        (None | Some("stdio"), Some(Value::String(command))) => {
            let strings = |field: &str| -> Vec<&Value> {
                value
                    .get(field)
                    .and_then(Value::as_array)
                    .map(|a| a.iter().collect())
                    .unwrap_or_default()
            };
            let args: Vec<String> = strings("args")
                .into_iter()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect();
            let mut server = McpServer::stdio(name, command.as_str()).with_args(args);
            for var in strings("env") {
                if let (Some(n), Some(v)) = (var["name"].as_str(), var["value"].as_str()) {
                    server = server.with_env(n, v);
                }
            }
            Ok(server)
        }
        (Some(kind), _) => Err(RpcError::invalid_params(format!(
            "MCP server `{name}`: transport `{kind}` is not supported (stdio and http are)"
        ))),
        (None, _) => Err(RpcError::invalid_params(format!(
            "MCP server `{name}` needs a `command` or a `type`"
        ))),
    }
}

/// The text a prompt's content blocks make: text as is, a resource link as a Markdown
/// link, an embedded text resource in a `<context>` block.
pub(crate) fn prompt_text(blocks: &[Value]) -> Result<String, RpcError> {
    let mut text = String::new();
    for block in blocks {
        let piece = match block.get("type").and_then(Value::as_str) {
            Some("text") => block
                .get("text")
                .and_then(Value::as_str)
                .map(str::to_string),
            Some("resource_link") => {
                let uri = block.get("uri").and_then(Value::as_str).unwrap_or("");
                let name = block.get("name").and_then(Value::as_str).unwrap_or(uri);
                Some(format!("[{name}]({uri})"))
            }
            Some("resource") => {
                let resource = &block["resource"];
                let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("");
                resource
                    .get("text")
                    .and_then(Value::as_str)
                    .map(|content| format!("<context uri=\"{uri}\">\n{content}\n</context>"))
            }
            Some(kind @ ("image" | "audio")) => {
                return Err(RpcError::invalid_params(format!(
                    "this agent takes no {kind} content (promptCapabilities.{kind} is false)"
                )));
            }
            _ => None,
        };
        let piece = piece.ok_or_else(|| {
            RpcError::invalid_params(format!(
                "a prompt content block this agent cannot read: {block}"
            ))
        })?;
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&piece);
    }
    if text.trim().is_empty() {
        return Err(RpcError::invalid_params("the prompt is empty"));
    }
    Ok(text)
}
