//! Golden request bodies: one neutral conversation serialised by each of the four wire
//! formats, captured through the loopback server and compared as JSON values with
//! `tests/data/requests/<format>.json`.
//!
//! The conversation has a system prompt; a user turn with text and an image; an assistant
//! turn with reasoning (an Anthropic thinking block and a Responses reasoning item), text
//! carrying a Gemini thought signature, and two parallel tool calls (a signed function call and a freeform custom
//! call); two tool results, one an error; and a final assistant answer. The tools are one
//! function and one freeform (lark grammar) tool.
//!
//! To regenerate the files after a deliberate change, run the tests with
//! `AGENTLOOP_BLESS_REQUESTS=1` and review the diff.

use std::path::PathBuf;

use agentloop::llm::{
    Client, ContentPart, FreeformFormat, ImageData, Message, Request, ThinkingData, ToolCall,
    ToolDefinition, ToolKind, ToolResult,
};
use serde_json::{Value, json};

use crate::llm::wire;
use support::providers;
use support::{self, Reply, Server};

/// The neutral conversation, for `model`.
fn conversation(model: &str) -> Request {
    let read = ToolCall {
        item_id: Some("fc_0001".into()),
        signature: Some("CiQB-gemini-call-signature".into()),
        ..ToolCall::new("call_read_1", "read_file", json!({"path": "src/lib.rs"}))
    };
    let patch = ToolCall {
        kind: ToolKind::Custom,
        item_id: Some("ctc_0002".into()),
        ..ToolCall::new(
            "call_patch_2",
            "apply_patch",
            Value::String("*** Begin Patch\n*** Add File: NOTES.md\n+hello\n*** End Patch".into()),
        )
    };
    let mut user = Message::user("What does this screenshot show? Fix the typo it points at.");
    // An 8-byte PNG signature stands in for a picture.
    user.content.push(ContentPart::Image(ImageData::from_bytes(
        vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a],
        "image/png",
    )));
    let assistant = Message {
        content: vec![
            // Reasoning as Anthropic returns it (a signed thinking block) and as the
            // Responses API does (an item id and encrypted content): each format sends back
            // only its own kind.
            ContentPart::Thinking(ThinkingData {
                text: "The screenshot shows a typo in lib.rs; read it, then patch.".into(),
                signature: Some("EqQBCkgIARABGAIiQ-anthropic-signature".into()),
                redacted: false,
                id: None,
            }),
            ContentPart::Thinking(ThinkingData {
                text: "**Reading the screenshot**".into(),
                signature: Some("gAAAAABo-openai-encrypted-content".into()),
                redacted: false,
                id: Some("rs_0000".into()),
            }),
            ContentPart::Text {
                text: "I'll read the file and add a note.".into(),
                signature: Some("Cs4B-gemini-text-signature".into()),
            },
            ContentPart::ToolCall(read.clone()),
            ContentPart::ToolCall(patch.clone()),
        ],
        ..Message::assistant("")
    };
    let read_result = ToolResult::for_call(&read, "pub fn greet() { println!(\"helo\"); }", false);
    let patch_result = ToolResult::for_call(
        &patch,
        "apply_patch failed: NOTES.md already exists; use *** Update File instead",
        true,
    );
    let mut request = Request::new(
        model,
        vec![
            Message::system("You are a careful coding agent. Keep answers short."),
            user,
            assistant,
            Message::tool_result(read_result),
            Message::tool_result(patch_result),
            Message::assistant("The typo is `helo` in src/lib.rs; it should read `hello`."),
        ],
    );
    request.tools = vec![
        ToolDefinition {
            name: "read_file".into(),
            description: "Read a file from the workspace.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Path to read"}},
                "required": ["path"],
                "additionalProperties": false
            })
            .into(),
            freeform: None,
        },
        ToolDefinition {
            name: "apply_patch".into(),
            description: "Apply a patch in the v4a format.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"input": {"type": "string", "description": "The whole patch"}},
                "required": ["input"]
            })
            .into(),
            freeform: Some(FreeformFormat {
                syntax: "lark".into(),
                definition: "start: begin_patch hunk+ end_patch".into(),
            }),
        },
    ];
    request.max_tokens = Some(16000);
    request.reasoning_effort = Some("medium".into());
    request
}

struct Case {
    format: &'static str,
    model: &'static str,
    path: &'static str,
    reply: &'static str,
    client: fn(&Server) -> Client,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            format: "anthropic",
            model: "claude-sonnet-4-5",
            path: "/v1/messages",
            reply: "anthropic/text_basic.sse",
            client: |server| support::anthropic_client(server),
        },
        Case {
            format: "openai",
            model: "gpt-5.2-codex",
            path: "/v1/responses",
            reply: "openai-responses/text_basic.sse",
            client: |server| support::client_for(providers::openai(server)),
        },
        Case {
            format: "openai-chat",
            model: "gpt-5.2",
            path: "/v1/chat/completions",
            reply: "openai-chat/text_with_usage.sse",
            client: |server| support::client_for(providers::openai_chat(server)),
        },
        Case {
            format: "gemini",
            model: "gemini-3-pro-preview",
            path: "/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse",
            reply: "gemini/text_basic.sse",
            client: |server| support::client_for(providers::gemini(server)),
        },
    ]
}

fn golden_path(format: &str) -> PathBuf {
    support::data_dir()
        .join("requests")
        .join(format!("{format}.json"))
}

#[test]
fn every_format_serialises_the_neutral_conversation_as_its_golden_body() {
    let bless = std::env::var_os("AGENTLOOP_BLESS_REQUESTS").is_some();
    for case in cases() {
        let capture = wire::capture(case.reply);
        let server = Server::start(vec![Reply::sse_file(&capture), Reply::sse_file(&capture)]);
        let client = (case.client)(&server);
        let request = conversation(case.model);
        client.complete(&request).unwrap();
        client.complete(&request).unwrap();
        let sent = server.requests();
        assert_eq!(sent[0].path, case.path, "{}", case.format);
        assert_eq!(
            sent[0].body, sent[1].body,
            "{}: the same request gives the same bytes",
            case.format
        );
        let body = sent[0].json().clone();
        let path = golden_path(case.format);
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let text = serde_json::to_string_pretty(&body).unwrap() + "\n";
            std::fs::write(&path, text).unwrap();
            continue;
        }
        let golden: Value = serde_json::from_str(
            &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap();
        assert_eq!(
            body,
            golden,
            "{}: the body differs from {}:\n{}",
            case.format,
            path.display(),
            serde_json::to_string_pretty(&body).unwrap()
        );
    }
}

#[test]
fn reasoning_signatures_and_custom_calls_reach_each_body_in_its_own_shape() {
    let body = |format: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(golden_path(format)).unwrap()).unwrap()
    };
    // OpenAI Responses: a reasoning item with the encrypted content, a custom tool call and
    // its custom output, and the freeform tool offered as a grammar.
    let openai = body("openai");
    let input = openai["input"].as_array().unwrap();
    let reasoning = input.iter().find(|i| i["type"] == "reasoning").unwrap();
    assert_eq!(reasoning["id"], "rs_0000");
    assert_eq!(
        reasoning["encrypted_content"],
        "gAAAAABo-openai-encrypted-content"
    );
    assert_eq!(input.iter().filter(|i| i["type"] == "reasoning").count(), 1);
    let custom = input
        .iter()
        .find(|i| i["type"] == "custom_tool_call")
        .unwrap();
    assert_eq!(custom["id"], "ctc_0002");
    assert!(
        custom["input"]
            .as_str()
            .unwrap()
            .starts_with("*** Begin Patch")
    );
    assert!(input.iter().any(|i| i["type"] == "custom_tool_call_output"));
    assert!(
        openai["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["type"] == "custom" && t["format"]["syntax"] == "lark")
    );
    // Gemini: each signature on the part it came with.
    let gemini = body("gemini");
    let model_parts = gemini["contents"][1]["parts"].as_array().unwrap();
    assert_eq!(model_parts.len(), 3, "no thinking parts: {model_parts:?}");
    assert_eq!(
        model_parts[0]["thoughtSignature"],
        "Cs4B-gemini-text-signature"
    );
    assert_eq!(
        model_parts[1]["thoughtSignature"],
        "CiQB-gemini-call-signature"
    );
    assert!(model_parts[2].get("thoughtSignature").is_none());
    // Anthropic: the thinking block with its signature first in the assistant turn.
    let anthropic = body("anthropic");
    let assistant = &anthropic["messages"][1]["content"][0];
    assert_eq!(assistant["type"], "thinking");
    assert_eq!(
        assistant["signature"],
        "EqQBCkgIARABGAIiQ-anthropic-signature"
    );
    let blocks = anthropic["messages"][1]["content"].as_array().unwrap();
    assert_eq!(blocks.iter().filter(|b| b["type"] == "thinking").count(), 1);
    // Chat Completions: both calls as function calls, the error result as a tool message.
    let chat = body("openai-chat");
    let calls = chat["messages"][2]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(chat["messages"][4]["role"], "tool");
}
