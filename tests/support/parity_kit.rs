//! What the parity matrix needs per profile: the profile, a client for its native wire
//! format pointed at the loopback server, scripted turns in that format, the profile's
//! editing call, and readers for the recorded request bodies (tool outputs, the last user
//! text, reasoning settings, tool names).

use std::path::Path;
use std::sync::Arc;

use agentloop::exec::LocalExecutionEnvironment;
use agentloop::llm::Client;
use agentloop::llm::gemini::Gemini;
use agentloop::llm::openai::OpenAi;
use agentloop::profiles::{self, ProviderProfile};
use agentloop::session::{EventKind, Events, Session, SessionConfig, SessionEvent};
use serde_json::{Value, json};

use crate::session::collect_input;
use crate::turns::{self, Call, custom, function};
use crate::{FAKE_KEY, Reply, Server, http_options};

const OPENAI_KEY: &str = "sk-proj-FAKEKEY0123456789abcdefghij";
const GEMINI_KEY: &str = "AIzaFAKEKEY0123456789abcdefghijklmnopq";

/// One column of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kit {
    OpenAi,
    Anthropic,
    Gemini,
}

/// A tool output as the model saw it in a request body.
#[derive(Debug, Clone)]
pub struct SeenOutput {
    pub text: String,
    /// `None` where the wire format has no error flag (Responses).
    pub is_error: Option<bool>,
}

impl Kit {
    pub fn model(self) -> &'static str {
        match self {
            Kit::OpenAi => "gpt-5.2-codex",
            Kit::Anthropic => "claude-sonnet-4-5",
            Kit::Gemini => "gemini-2.5-pro",
        }
    }

    pub fn profile(self) -> ProviderProfile {
        match self {
            Kit::OpenAi => profiles::openai(self.model()),
            Kit::Anthropic => profiles::anthropic(self.model()),
            Kit::Gemini => profiles::gemini(self.model()),
        }
    }

    /// A client whose provider speaks the profile's native format to `server`.
    pub fn client(self, server: &Server) -> Client {
        match self {
            Kit::OpenAi => crate::client_for(
                OpenAi::new(OPENAI_KEY)
                    .with_base_url(format!("{}/v1", server.url()))
                    .with_http_options(http_options()),
            ),
            Kit::Anthropic => crate::anthropic_client(server),
            Kit::Gemini => crate::client_for(
                Gemini::new(GEMINI_KEY)
                    .with_base_url(server.url())
                    .with_http_options(http_options()),
            ),
        }
    }

    /// A scripted model turn in the native format.
    pub fn turn(self, text: &str, calls: &[Call]) -> Reply {
        match self {
            Kit::OpenAi => turns::responses_turn(text, calls),
            Kit::Anthropic => turns::anthropic_turn(text, calls),
            Kit::Gemini => turns::gemini_turn(text, calls),
        }
    }

    /// A turn with only tool calls.
    pub fn calls(self, calls: &[Call]) -> Reply {
        self.turn("", calls)
    }

    /// A turn with only text.
    pub fn text(self, text: &str) -> Reply {
        self.turn(text, &[])
    }

    /// The name of the profile's editing tool.
    pub fn edit_tool(self) -> &'static str {
        match self {
            Kit::OpenAi => "apply_patch",
            Kit::Anthropic | Kit::Gemini => "edit_file",
        }
    }

    /// Calls of the profile's editing tool replacing `old` with `new` in each file: one
    /// patch for all files (OpenAI), one `edit_file` call per file (Anthropic, Gemini).
    pub fn edits(self, id: &str, edits: &[(&str, &str, &str)]) -> Vec<Call> {
        match self {
            Kit::OpenAi => {
                let mut patch = String::from("*** Begin Patch\n");
                for (path, old, new) in edits {
                    patch.push_str(&format!("*** Update File: {path}\n@@\n"));
                    for line in old.lines() {
                        patch.push_str(&format!("-{line}\n"));
                    }
                    for line in new.lines() {
                        patch.push_str(&format!("+{line}\n"));
                    }
                }
                patch.push_str("*** End Patch\n");
                vec![custom(id, "apply_patch", &patch)]
            }
            Kit::Anthropic | Kit::Gemini => edits
                .iter()
                .enumerate()
                .map(|(i, (path, old, new))| {
                    function(
                        &format!("{id}_{i}"),
                        "edit_file",
                        json!({"file_path": path, "old_string": old, "new_string": new}),
                    )
                })
                .collect(),
        }
    }

    /// One edit call.
    pub fn edit(self, id: &str, path: &str, old: &str, new: &str) -> Call {
        self.edits(id, &[(path, old, new)]).remove(0)
    }

    /// The tool outputs in a request body, in conversation order.
    pub fn tool_outputs(self, body: &Value) -> Vec<SeenOutput> {
        let mut out = Vec::new();
        match self {
            Kit::OpenAi => {
                for item in body["input"].as_array().into_iter().flatten() {
                    let kind = item["type"].as_str().unwrap_or_default();
                    if kind == "function_call_output" || kind == "custom_tool_call_output" {
                        out.push(SeenOutput {
                            text: text_of(&item["output"]),
                            is_error: None,
                        });
                    }
                }
            }
            Kit::Anthropic => {
                for message in body["messages"].as_array().into_iter().flatten() {
                    for block in message["content"].as_array().into_iter().flatten() {
                        if block["type"] == "tool_result" {
                            out.push(SeenOutput {
                                text: text_of(&block["content"]),
                                is_error: Some(block["is_error"] == true),
                            });
                        }
                    }
                }
            }
            Kit::Gemini => {
                for content in body["contents"].as_array().into_iter().flatten() {
                    for part in content["parts"].as_array().into_iter().flatten() {
                        let response = &part["functionResponse"]["response"];
                        if let Some(result) = response.get("result") {
                            out.push(SeenOutput {
                                text: text_of(result),
                                is_error: Some(false),
                            });
                        } else if let Some(error) = response.get("error") {
                            out.push(SeenOutput {
                                text: text_of(error),
                                is_error: Some(true),
                            });
                        }
                    }
                }
            }
        }
        out
    }

    /// The text of the last user-role text part of a request body.
    pub fn last_user_text(self, body: &Value) -> String {
        let mut last = String::new();
        match self {
            Kit::OpenAi => {
                for item in body["input"].as_array().into_iter().flatten() {
                    if item["type"] == "message" && item["role"] == "user" {
                        for part in item["content"].as_array().into_iter().flatten() {
                            if let Some(text) = part["text"].as_str() {
                                last = text.to_string();
                            }
                        }
                    }
                }
            }
            Kit::Anthropic => {
                for message in body["messages"].as_array().into_iter().flatten() {
                    if message["role"] != "user" {
                        continue;
                    }
                    match &message["content"] {
                        Value::String(text) => last = text.clone(),
                        Value::Array(blocks) => {
                            for block in blocks {
                                if block["type"] == "text" {
                                    last = block["text"].as_str().unwrap_or_default().to_string();
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            Kit::Gemini => {
                for content in body["contents"].as_array().into_iter().flatten() {
                    if content["role"] != "user" {
                        continue;
                    }
                    for part in content["parts"].as_array().into_iter().flatten() {
                        if let Some(text) = part["text"].as_str() {
                            last = text.to_string();
                        }
                    }
                }
            }
        }
        last
    }

    /// The system prompt of a request body.
    pub fn system_prompt(self, body: &Value) -> String {
        match self {
            Kit::OpenAi => body["instructions"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            Kit::Anthropic => match &body["system"] {
                Value::String(text) => text.clone(),
                Value::Array(blocks) => blocks
                    .iter()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n\n"),
                _ => String::new(),
            },
            Kit::Gemini => body["systemInstruction"]["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n\n"),
        }
    }

    /// The names of the tools a request body offers.
    pub fn tool_names(self, body: &Value) -> Vec<String> {
        let names = |list: &Value| -> Vec<String> {
            list.as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        };
        match self {
            Kit::OpenAi | Kit::Anthropic => names(&body["tools"]),
            Kit::Gemini => names(&body["tools"][0]["functionDeclarations"]),
        }
    }

    /// The reasoning setting in a request body, in the format's own terms.
    pub fn reasoning(self, body: &Value) -> Value {
        match self {
            Kit::OpenAi => body["reasoning"]["effort"].clone(),
            Kit::Anthropic => body["thinking"].clone(),
            Kit::Gemini => body["generationConfig"]["thinkingConfig"].clone(),
        }
    }

    /// What [`reasoning`](Self::reasoning) reads for an effort (the adapters' documented
    /// mappings).
    pub fn expected_reasoning(self, effort: &str) -> Value {
        let budget = match effort {
            "low" => 2048,
            "medium" => 8192,
            _ => 24_576,
        };
        match self {
            Kit::OpenAi => json!(effort),
            Kit::Anthropic => json!({"type": "enabled", "budget_tokens": budget}),
            Kit::Gemini => {
                let budget = match effort {
                    "low" => 1024,
                    "medium" => 8192,
                    _ => 24_576,
                };
                json!({"thinkingBudget": budget, "includeThoughts": true})
            }
        }
    }
}

/// The text of a tool output value: a string, or text blocks joined.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        other => other.to_string(),
    }
}

/// A session of `kit`'s profile over a real local environment in a temp dir, talking to
/// a loopback server that replays `replies`.
pub struct Run {
    pub kit: Kit,
    pub session: Session,
    pub events: Events,
    pub server: Server,
    pub dir: tempfile::TempDir,
}

impl Run {
    pub fn start(kit: Kit, replies: Vec<Reply>) -> Run {
        Run::with(
            kit,
            Server::start(replies),
            SessionConfig::default(),
            |_| {},
        )
    }

    /// A run against `server`, with `config`, after `setup` prepared the directory.
    pub fn with(kit: Kit, server: Server, config: SessionConfig, setup: impl FnOnce(&Path)) -> Run {
        let dir = tempfile::tempdir().expect("temp dir");
        setup(dir.path());
        let env = Arc::new(LocalExecutionEnvironment::new(dir.path()).unwrap());
        let session =
            Session::new(kit.profile(), env, kit.client(&server), config).expect("session starts");
        let events = session.events();
        Run {
            kit,
            session,
            events,
            server,
            dir,
        }
    }

    /// Submits `input` and collects its events up to `PROCESSING_END`.
    pub fn input(&mut self, input: &str) -> Vec<SessionEvent> {
        self.session.submit(input).expect("submit");
        collect_input(&mut self.events)
    }

    pub fn path(&self, relative: &str) -> std::path::PathBuf {
        self.dir.path().join(relative)
    }

    pub fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative))
            .unwrap_or_else(|e| panic!("read {relative}: {e}"))
    }

    pub fn write(&self, relative: &str, content: &str) {
        let path = self.path(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, content).unwrap();
    }

    /// The recorded request bodies.
    pub fn bodies(&self) -> Vec<Value> {
        self.server
            .requests()
            .iter()
            .map(|r| r.json().clone())
            .collect()
    }
}

/// A `TOOL_CALL_END` as the host saw it.
#[derive(Debug, Clone)]
pub struct Ended {
    pub tool_name: String,
    /// The full output, or the full error text.
    pub text: String,
    pub is_error: bool,
    pub truncated: bool,
    pub duration_ms: u64,
}

/// The `TOOL_CALL_END`s among `events`, in order.
pub fn ended(events: &[SessionEvent]) -> Vec<Ended> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCallEnd {
                tool_name,
                output,
                error,
                is_error,
                truncated,
                duration_ms,
                ..
            } => Some(Ended {
                tool_name: tool_name.clone(),
                text: output.clone().or(error.clone()).unwrap_or_default(),
                is_error: *is_error,
                truncated: *truncated,
                duration_ms: *duration_ms,
            }),
            _ => None,
        })
        .collect()
}

/// The final answer text of an input (its last `ASSISTANT_TEXT_END`).
pub fn answer(events: &[SessionEvent]) -> String {
    events
        .iter()
        .rev()
        .find_map(|e| match &e.kind {
            EventKind::AssistantTextEnd { text, .. } => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The key the fake credentials use: they must not leak into events.
pub fn assert_no_key_in(events: &[SessionEvent]) {
    for event in events {
        let line = event.to_string();
        for key in [FAKE_KEY, OPENAI_KEY, GEMINI_KEY] {
            assert!(!line.contains(key), "a key leaked into {line}");
        }
    }
}
