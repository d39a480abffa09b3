//! Responses request bodies: the unified conversation as `instructions`, `input` items and
//! tools. Pure and deterministic: no I/O, and the same request always gives the same bytes.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use crate::error::Result;
use crate::json::RawJson;
use crate::llm::wire::{image_url, serialize_with_options, system_text};
use crate::llm::{
    ContentPart, ImageData, Message, Request, Role, ToolChoice, ToolKind, ToolResult,
};

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<String>,
    input: Vec<Item<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<Reasoning<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    store: bool,
    stream: bool,
    #[serde(skip_serializing_if = "<[&str]>::is_empty")]
    include: &'static [&'static str],
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

#[derive(Serialize)]
struct Reasoning<'a> {
    effort: &'a str,
    summary: &'static str,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item<'a> {
    Message {
        role: &'static str,
        content: Vec<Content<'a>>,
    },
    Reasoning {
        id: &'a str,
        summary: Vec<SummaryText<'a>>,
        encrypted_content: &'a str,
    },
    FunctionCall {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        call_id: &'a str,
        name: &'a str,
        arguments: Cow<'a, str>,
    },
    FunctionCallOutput {
        call_id: &'a str,
        output: Output<'a>,
    },
    CustomToolCall {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        call_id: &'a str,
        name: &'a str,
        input: Cow<'a, str>,
    },
    CustomToolCallOutput {
        call_id: &'a str,
        output: Output<'a>,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Content<'a> {
    InputText {
        text: &'a str,
    },
    OutputText {
        text: &'a str,
    },
    InputImage {
        image_url: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<&'a str>,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum Output<'a> {
    Text(&'a str),
    Parts(Vec<Content<'a>>),
}

#[derive(Serialize)]
struct SummaryText<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Tool<'a> {
    Function {
        name: &'a str,
        description: &'a str,
        parameters: RawJson<'a>,
        strict: bool,
    },
    Custom {
        name: &'a str,
        description: &'a str,
        format: Grammar<'a>,
    },
}

#[derive(Serialize)]
struct Grammar<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    syntax: &'a str,
    definition: &'a str,
}

/// Builds the JSON body of a streaming Responses request.
pub(super) fn request_body(request: &Request, provider_id: &str) -> Result<Vec<u8>> {
    let instructions = Some(system_text(&request.messages)).filter(|s| !s.is_empty());
    let mut input: Vec<Item<'_>> = Vec::with_capacity(request.messages.len() + 4);
    for message in &request.messages {
        match message.role {
            Role::System | Role::Developer => {}
            Role::User | Role::Assistant | Role::Tool => push_items(message, &mut input),
        }
    }
    let tools: Vec<Tool<'_>> = request
        .tools
        .iter()
        .map(|tool| match &tool.freeform {
            Some(format) => Tool::Custom {
                name: &tool.name,
                description: &tool.description,
                format: Grammar {
                    kind: "grammar",
                    syntax: &format.syntax,
                    definition: &format.definition,
                },
            },
            None => Tool::Function {
                name: &tool.name,
                description: &tool.description,
                parameters: tool.parameters.raw(),
                strict: false,
            },
        })
        .collect();
    let tool_choice = if tools.is_empty() {
        None
    } else {
        Some(
            match request.tool_choice.as_ref().unwrap_or(&ToolChoice::Auto) {
                ToolChoice::Auto => Value::from("auto"),
                ToolChoice::None => Value::from("none"),
                ToolChoice::Required => Value::from("required"),
                ToolChoice::Named(name) => {
                    let custom = request
                        .tools
                        .iter()
                        .any(|t| &t.name == name && t.freeform.is_some());
                    let kind = if custom { "custom" } else { "function" };
                    serde_json::json!({"type": kind, "name": name})
                }
            },
        )
    };
    let body = Body {
        model: &request.model,
        instructions,
        input,
        tools,
        tool_choice,
        reasoning: request.reasoning_effort.as_deref().map(|effort| Reasoning {
            effort,
            summary: "auto",
        }),
        max_output_tokens: request.max_tokens,
        temperature: request.temperature,
        top_p: request.top_p,
        store: false,
        stream: true,
        include: if reasons(&request.model) {
            &["reasoning.encrypted_content"]
        } else {
            &[]
        },
        prompt_cache_key: request.cache_key.as_deref(),
    };
    serialize_with_options(&body, request.options_for(provider_id))
}

/// Whether `model` may reason, so that its reasoning must be asked for as encrypted
/// content. The GPT-4 and GPT-3.5 families do not reason and reject the `include`; every
/// other model (o-series, GPT-5 and later, unknown names) gets it.
fn reasons(model: &str) -> bool {
    !["gpt-4", "gpt-3.5", "chatgpt-4"]
        .iter()
        .any(|prefix| model.starts_with(prefix))
}

/// Appends the input items of one user, assistant or tool message, in part order.
fn push_items<'a>(message: &'a Message, input: &mut Vec<Item<'a>>) {
    let assistant = message.role == Role::Assistant;
    let role = if assistant { "assistant" } else { "user" };
    let mut content: Vec<Content<'a>> = Vec::new();
    let flush = |content: &mut Vec<Content<'a>>, input: &mut Vec<Item<'a>>| {
        if !content.is_empty() {
            input.push(Item::Message {
                role,
                content: std::mem::take(content),
            });
        }
    };
    for part in &message.content {
        match part {
            ContentPart::Text { text, .. } => {
                if text.is_empty() {
                    continue;
                }
                if message.role == Role::Tool {
                    // Text in a tool message answers the message's call.
                    if let Some(call_id) = &message.tool_call_id {
                        flush(&mut content, input);
                        input.push(Item::FunctionCallOutput {
                            call_id,
                            output: Output::Text(text),
                        });
                        continue;
                    }
                }
                content.push(if assistant {
                    Content::OutputText { text }
                } else {
                    Content::InputText { text }
                });
            }
            ContentPart::Image(image) => {
                // The Responses API takes no images in assistant messages.
                if !assistant {
                    content.push(image_content(image));
                }
            }
            ContentPart::ToolCall(call) => {
                flush(&mut content, input);
                input.push(match call.kind {
                    ToolKind::Custom => Item::CustomToolCall {
                        id: call.item_id.as_deref(),
                        call_id: &call.id,
                        name: &call.name,
                        input: Cow::Owned(call.arguments_text()),
                    },
                    ToolKind::Function => Item::FunctionCall {
                        id: call.item_id.as_deref(),
                        call_id: &call.id,
                        name: &call.name,
                        arguments: Cow::Owned(call.arguments_text()),
                    },
                });
            }
            ContentPart::ToolResult(result) => {
                flush(&mut content, input);
                input.push(result_item(result));
            }
            ContentPart::Thinking(thinking) => {
                if let (Some(id), Some(encrypted)) = (&thinking.id, &thinking.signature) {
                    flush(&mut content, input);
                    let summary = if thinking.text.is_empty() {
                        Vec::new()
                    } else {
                        vec![SummaryText {
                            kind: "summary_text",
                            text: &thinking.text,
                        }]
                    };
                    input.push(Item::Reasoning {
                        id,
                        summary,
                        encrypted_content: encrypted,
                    });
                }
            }
        }
    }
    flush(&mut content, input);
}

fn result_item(result: &ToolResult) -> Item<'_> {
    let output = match &result.image {
        None => Output::Text(&result.content),
        Some(image) => Output::Parts(vec![
            Content::InputText {
                text: &result.content,
            },
            image_content(image),
        ]),
    };
    match result.kind {
        ToolKind::Custom => Item::CustomToolCallOutput {
            call_id: &result.tool_call_id,
            output,
        },
        ToolKind::Function => Item::FunctionCallOutput {
            call_id: &result.tool_call_id,
            output,
        },
    }
}

fn image_content(image: &ImageData) -> Content<'_> {
    Content::InputImage {
        image_url: image_url(image),
        detail: image.detail.as_deref(),
    }
}
