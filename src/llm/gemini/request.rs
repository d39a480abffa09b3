//! Gemini request bodies: `systemInstruction`, `contents`, `tools`, `toolConfig` and
//! `generationConfig`, and the JSON Schema subset for function declarations.
//! Pure and deterministic: no I/O, and the same request always gives the same bytes.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::ID;
use crate::base64;
use crate::error::{Error, ErrorKind, Result};
use crate::llm::wire::{parse_data_url, serialize_with_options, system_text};
use crate::llm::{ContentPart, ImageData, Message, Request, Role, ToolChoice};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<SystemInstruction>,
    contents: Vec<Content<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ToolGroup<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation_config: Option<GenerationConfig<'a>>,
}

#[derive(Serialize)]
struct SystemInstruction {
    parts: [TextOnly; 1],
}

#[derive(Serialize)]
struct TextOnly {
    text: String,
}

#[derive(Serialize)]
struct Content<'a> {
    role: &'static str,
    parts: Vec<Part<'a>>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    thought: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    inline_data: Option<Blob<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file_data: Option<FileData<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<FunctionCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_response: Option<FunctionResponse<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Blob<'a> {
    mime_type: Cow<'a, str>,
    data: Cow<'a, str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FileData<'a> {
    mime_type: &'a str,
    file_uri: &'a str,
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    args: Cow<'a, Value>,
}

#[derive(Serialize)]
struct FunctionResponse<'a> {
    name: &'a str,
    response: Value,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolGroup<'a> {
    function_declarations: Vec<FunctionDeclaration<'a>>,
}

#[derive(Serialize)]
struct FunctionDeclaration<'a> {
    name: &'a str,
    description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_config: Option<Value>,
}

/// Builds the JSON body of a streaming generateContent request.
pub(super) fn request_body(request: &Request) -> Result<Vec<u8>> {
    let system = system_text(&request.messages);
    // Function responses need the function's name: the result's own, or its call's.
    let mut call_names: HashMap<&str, &str> = HashMap::new();
    for message in &request.messages {
        for call in message.tool_calls() {
            call_names.insert(&call.id, &call.name);
        }
    }
    let mut contents: Vec<Content<'_>> = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        let role = match message.role {
            Role::System | Role::Developer => continue,
            Role::Assistant => "model",
            Role::User | Role::Tool => "user",
        };
        let parts = parts_of(message, &call_names)?;
        if parts.is_empty() {
            continue;
        }
        match contents.last_mut() {
            Some(last) if last.role == role => last.parts.extend(parts),
            _ => contents.push(Content { role, parts }),
        }
    }
    if !request.model.contains("gemini-1") && !request.model.contains("gemini-2") {
        mark_unsigned_calls(&mut contents);
    }

    let declarations: Vec<FunctionDeclaration<'_>> = request
        .tools
        .iter()
        .map(|tool| FunctionDeclaration {
            name: &tool.name,
            description: &tool.description,
            parameters: function_parameters(&tool.parameters),
        })
        .collect();
    let tool_config = (!declarations.is_empty()).then(|| {
        let config = match request.tool_choice.as_ref().unwrap_or(&ToolChoice::Auto) {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Required => json!({"mode": "ANY"}),
            ToolChoice::Named(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
        };
        json!({ "functionCallingConfig": config })
    });
    let tools = if declarations.is_empty() {
        Vec::new()
    } else {
        vec![ToolGroup {
            function_declarations: declarations,
        }]
    };
    let generation = GenerationConfig {
        max_output_tokens: request.max_tokens,
        temperature: request.temperature,
        top_p: request.top_p,
        stop_sequences: &request.stop_sequences,
        thinking_config: request
            .reasoning_effort
            .as_deref()
            .map(|effort| thinking_config(&request.model, effort)),
    };
    let empty_generation = generation.max_output_tokens.is_none()
        && generation.temperature.is_none()
        && generation.top_p.is_none()
        && generation.stop_sequences.is_empty()
        && generation.thinking_config.is_none();
    let body = Body {
        system_instruction: (!system.is_empty()).then_some(SystemInstruction {
            parts: [TextOnly { text: system }],
        }),
        contents,
        tools,
        tool_config,
        generation_config: (!empty_generation).then_some(generation),
    };
    serialize_with_options(&body, request.options_for(ID))
}

/// The `thoughtSignature` Google documents for a function call that has none of Gemini's
/// own: it tells the API to skip checking it.
const UNSIGNED_CALL: &str = "skip_thought_signature_validator";

/// Gemini 3 refuses a function call of the current turn (after the last user text) without
/// a thought signature. Calls another provider made — before a fallback to Gemini, or in a
/// resumed session — carry none: the first call of each such model content gets Google's
/// placeholder instead. Contents with a signature of Gemini's own are left as they came.
fn mark_unsigned_calls(contents: &mut [Content<'_>]) {
    let turn_start = contents
        .iter()
        .rposition(|c| c.role == "user" && c.parts.iter().any(|p| p.text.is_some()))
        .map_or(0, |index| index + 1);
    for content in &mut contents[turn_start..] {
        if content.role != "model" || content.parts.iter().any(|p| p.thought_signature.is_some()) {
            continue;
        }
        if let Some(call) = content.parts.iter_mut().find(|p| p.function_call.is_some()) {
            call.thought_signature = Some(UNSIGNED_CALL);
        }
    }
}

fn parts_of<'a>(
    message: &'a Message,
    call_names: &HashMap<&str, &'a str>,
) -> Result<Vec<Part<'a>>> {
    let mut parts = Vec::with_capacity(message.content.len());
    for part in &message.content {
        match part {
            ContentPart::Text { text, signature } => {
                if message.role == Role::Tool {
                    if let Some(call_id) = &message.tool_call_id {
                        let name = name_for(call_id, None, call_names)?;
                        parts.push(function_response(name, text, false));
                        continue;
                    }
                }
                // An empty part still goes back when it carries a signature.
                if !text.is_empty() || signature.is_some() {
                    parts.push(Part {
                        text: Some(text),
                        thought_signature: signature.as_deref(),
                        ..Part::default()
                    });
                }
            }
            ContentPart::Image(image) => parts.push(image_part(image)),
            ContentPart::ToolCall(call) => {
                let args = match &call.arguments {
                    Value::Object(_) => Cow::Borrowed(&call.arguments),
                    Value::String(text) => match serde_json::from_str::<Value>(text) {
                        Ok(value @ Value::Object(_)) => Cow::Owned(value),
                        _ => Cow::Owned(json!({ "input": text })),
                    },
                    other => Cow::Owned(json!({ "input": other })),
                };
                parts.push(Part {
                    function_call: Some(FunctionCall {
                        name: &call.name,
                        args,
                    }),
                    thought_signature: call.signature.as_deref(),
                    ..Part::default()
                });
            }
            ContentPart::ToolResult(result) => {
                let name = name_for(&result.tool_call_id, result.name.as_deref(), call_names)?;
                parts.push(function_response(name, &result.content, result.is_error));
                if let Some(image) = &result.image {
                    parts.push(image_part(image));
                }
            }
            // Thought summaries are not needed back, and a signature on a thinking part may
            // be another provider's (Anthropic, OpenAI): Gemini's own signatures ride on
            // text and function-call parts, which keep them.
            ContentPart::Thinking(_) => {}
        }
    }
    Ok(parts)
}

fn name_for<'a>(
    call_id: &str,
    own: Option<&'a str>,
    call_names: &HashMap<&str, &'a str>,
) -> Result<&'a str> {
    own.filter(|n| !n.is_empty())
        .or_else(|| call_names.get(call_id).copied())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!(
                    "the result of tool call `{call_id}` has no tool name and no call with that id \
                     precedes it; gemini needs the name (set ToolResult::name)"
                ),
            )
            .with_provider(ID)
        })
}

fn function_response<'a>(name: &'a str, content: &str, is_error: bool) -> Part<'a> {
    let key = if is_error { "error" } else { "result" };
    let mut response = Map::new();
    response.insert(key.to_string(), Value::from(content));
    Part {
        function_response: Some(FunctionResponse {
            name,
            response: Value::Object(response),
        }),
        ..Part::default()
    }
}

fn image_part(image: &ImageData) -> Part<'_> {
    if let Some(url) = &image.url {
        if let Some((mime, data)) = parse_data_url(url) {
            return Part {
                inline_data: Some(Blob {
                    mime_type: Cow::Borrowed(if mime.is_empty() { "image/png" } else { mime }),
                    data: Cow::Borrowed(data),
                }),
                ..Part::default()
            };
        }
        return Part {
            file_data: Some(FileData {
                mime_type: image.media_type_or_default(),
                file_uri: url,
            }),
            ..Part::default()
        };
    }
    Part {
        inline_data: Some(Blob {
            mime_type: Cow::Borrowed(image.media_type_or_default()),
            data: Cow::Owned(base64::encode(image.data.as_deref().unwrap_or_default())),
        }),
        ..Part::default()
    }
}

/// `thinkingConfig` for `effort` on `model` (see the module docs for the mapping).
fn thinking_config(model: &str, effort: &str) -> Value {
    let model = model.strip_prefix("models/").unwrap_or(model);
    let effort = effort.trim().to_ascii_lowercase();
    if model.starts_with("gemini-2") || model.starts_with("gemini-1") {
        let budget: i64 = match effort.as_str() {
            "minimal" => 512,
            "low" => 1024,
            "medium" => 8192,
            "high" => 24576,
            other => other.parse().unwrap_or(-1),
        };
        return json!({"thinkingBudget": budget, "includeThoughts": true});
    }
    let level = match (model.contains("-pro"), effort.as_str()) {
        (true, "minimal") => "low".to_string(),
        (true, "medium") => "high".to_string(),
        (_, other) => other.to_string(),
    };
    json!({"thinkingLevel": level, "includeThoughts": true})
}

/// A tool's parameters in Gemini's schema subset, or `None` when it takes no arguments.
fn function_parameters(schema: &Value) -> Option<Value> {
    let converted = gemini_schema(schema);
    let has_properties = converted
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty());
    let is_object = converted.get("type").and_then(Value::as_str) == Some("object");
    if is_object && !has_properties {
        return None;
    }
    Some(converted)
}

/// Reduces a JSON Schema to the subset Gemini's function declarations accept.
pub(super) fn gemini_schema(schema: &Value) -> Value {
    let Some(source) = schema.as_object() else {
        return json!({});
    };
    let mut out = Map::new();
    let mut nullable = source
        .get("nullable")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut kind: Option<String> = None;
    match source.get("type") {
        Some(Value::String(t)) => kind = Some(t.clone()),
        Some(Value::Array(types)) => {
            for t in types.iter().filter_map(Value::as_str) {
                if t == "null" {
                    nullable = true;
                } else if kind.is_none() {
                    kind = Some(t.to_string());
                }
            }
        }
        _ => {}
    }
    let mut enum_values: Option<Vec<Value>> = source
        .get("enum")
        .and_then(Value::as_array)
        .filter(|values| values.iter().all(Value::is_string))
        .cloned();
    if let Some(Value::String(constant)) = source.get("const") {
        enum_values = Some(vec![Value::String(constant.clone())]);
    }
    if enum_values.is_some() && kind.is_none() {
        kind = Some("string".to_string());
    }
    if let Some(kind) = &kind {
        out.insert("type".to_string(), Value::String(kind.clone()));
    }
    if nullable {
        out.insert("nullable".to_string(), Value::Bool(true));
    }
    if let Some(format) = source.get("format").and_then(Value::as_str) {
        let allowed = match kind.as_deref() {
            Some("string") => matches!(format, "enum" | "date-time"),
            Some("integer" | "number") => matches!(format, "int32" | "int64" | "float" | "double"),
            _ => false,
        };
        if allowed {
            out.insert("format".to_string(), Value::from(format));
        }
    }
    for key in ["title", "description", "pattern"] {
        if let Some(Value::String(text)) = source.get(key) {
            out.insert(key.to_string(), Value::String(text.clone()));
        }
    }
    for key in [
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
    ] {
        if let Some(number @ Value::Number(_)) = source.get(key) {
            out.insert(key.to_string(), number.clone());
        }
    }
    if let Some(values) = enum_values {
        out.insert("enum".to_string(), Value::Array(values));
    }
    if let Some(Value::Object(properties)) = source.get("properties") {
        let converted: Map<String, Value> = properties
            .iter()
            .map(|(name, property)| (name.clone(), gemini_schema(property)))
            .collect();
        if let Some(Value::Array(required)) = source.get("required") {
            let present: Vec<Value> = required
                .iter()
                .filter(|r| r.as_str().is_some_and(|r| converted.contains_key(r)))
                .cloned()
                .collect();
            if !present.is_empty() {
                out.insert("required".to_string(), Value::Array(present));
            }
        }
        if let Some(Value::Array(order)) = source.get("propertyOrdering") {
            out.insert("propertyOrdering".to_string(), Value::Array(order.clone()));
        }
        if !converted.is_empty() {
            out.insert("properties".to_string(), Value::Object(converted));
        }
    }
    if let Some(items) = source.get("items").filter(|i| i.is_object()) {
        out.insert("items".to_string(), gemini_schema(items));
    }
    if let Some(Value::Array(options)) = source.get("anyOf").or_else(|| source.get("oneOf")) {
        let converted: Vec<Value> = options.iter().map(gemini_schema).collect();
        out.insert("anyOf".to_string(), Value::Array(converted));
    }
    Value::Object(out)
}
