//! MCP tools as registered tools: the definition the model sees (prefixed name,
//! sanitised schema) and an executor that validates against the server's own schema, calls
//! `tools/call` and maps the result (`content[]`, `structuredContent`, `isError`) to a
//! [`ToolOutput`].
//!
//! It never truncates (the session does, keeping the full text for `TOOL_CALL_END`).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::names::{sanitise_schema, tool_name};
use crate::cancel::CancelToken;
use crate::llm::{ImageData, ToolDefinition};
use crate::tools::{RegisteredTool, ToolInput, ToolOutput, ToolRegistry, schema};

/// One tool as the server listed it.
#[derive(Debug, Clone)]
pub(crate) struct ListedTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

impl ListedTool {
    /// Reads one entry of `tools/list`; `None` without a name.
    pub(crate) fn from_json(tool: &Value) -> Option<ListedTool> {
        let name = tool.get("name")?.as_str()?.to_string();
        let title = tool.get("title").and_then(Value::as_str);
        let description = tool.get("description").and_then(Value::as_str);
        let description = match (title, description) {
            (Some(t), Some(d)) => format!("{t}: {d}"),
            (None, Some(d)) => d.to_string(),
            (Some(t), None) => t.to_string(),
            (None, None) => String::new(),
        };
        Some(ListedTool {
            name,
            description,
            input_schema: tool.get("inputSchema").cloned().unwrap_or(json!({})),
        })
    }
}

/// Calls one tool of a server: `(tool, arguments, cancel)` → the `tools/call` result, or an
/// error text for the model. The server's handle (`server.rs`) provides it, so that this
/// file knows nothing of connections and restarts.
pub(crate) type CallTool =
    Arc<dyn Fn(&str, Value, &CancelToken) -> Result<Value, String> + Send + Sync>;

/// Registers every tool of the server named `server` in `registry`, each calling it through
/// `call`; returns the names given.
pub(crate) fn register(
    registry: &mut ToolRegistry,
    server: &str,
    call: &CallTool,
    tools: &[ListedTool],
) -> Vec<String> {
    let mut taken: BTreeSet<String> = registry.names().into_iter().collect();
    let mut names = Vec::new();
    for tool in tools {
        let name = tool_name(server, &tool.name, &taken);
        taken.insert(name.clone());
        let description = if tool.description.is_empty() {
            format!("Tool `{}` of the MCP server `{server}`.", tool.name)
        } else {
            tool.description.clone()
        };
        let definition = ToolDefinition {
            name: name.clone(),
            description,
            parameters: sanitise_schema(&tool.input_schema).into(),
            freeform: None,
        };
        let (call, raw, raw_schema) = (
            Arc::clone(call),
            tool.name.clone(),
            tool.input_schema.clone(),
        );
        registry.register(
            RegisteredTool::new(definition, move |input, ctx| {
                let arguments = match input {
                    ToolInput::Json(map) => Value::Object(map),
                    ToolInput::Freeform(text) => json!({ "input": text }),
                };
                let problems = schema::validate(&arguments, &raw_schema);
                if !problems.is_empty() {
                    return Err(format!(
                        "invalid arguments for `{raw}`: {}",
                        problems.join("; ")
                    ));
                }
                let result = call(&raw, arguments, ctx.cancel)?;
                map_result(&result)
            })
            .returning_on_cancel(),
        );
        names.push(name);
    }
    names
}

/// Maps a `tools/call` result: text parts joined, the first image as an image part,
/// resource links and embedded resources as text, `structuredContent` when there is no
/// text, `isError` as an error for the model.
pub(crate) fn map_result(result: &Value) -> Result<ToolOutput, String> {
    let mut parts: Vec<String> = Vec::new();
    let mut image = None;
    for item in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        let text = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" => parts.push(text("text").to_string()),
            "image" => {
                let mime = text("mimeType");
                let decoded: Option<ImageData> =
                    serde_json::from_value(json!({"data": text("data"), "media_type": mime})).ok();
                match decoded {
                    Some(data) if image.is_none() => {
                        image = Some(data);
                        parts.push(format!("[image: {mime}]"));
                    }
                    _ => parts.push(format!("[image: {mime}, not shown]")),
                }
            }
            "audio" => parts.push(format!("[audio: {}, not shown]", text("mimeType"))),
            "resource_link" => parts.push(format!(
                "Resource link: {} <{}>{}{}",
                text("name"),
                text("uri"),
                match text("mimeType") {
                    "" => String::new(),
                    mime => format!(" ({mime})"),
                },
                match text("description") {
                    "" => String::new(),
                    d => format!(": {d}"),
                }
            )),
            "resource" => {
                let resource = item.get("resource").cloned().unwrap_or(Value::Null);
                let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("");
                match resource.get("text").and_then(Value::as_str) {
                    Some(body) => parts.push(format!("Resource <{uri}>:\n{body}")),
                    None => parts.push(format!("[resource <{uri}>: binary, not shown]")),
                }
            }
            other => parts.push(format!("[{other} content, not shown]")),
        }
    }
    let mut text = parts.join("\n");
    if text.is_empty() {
        if let Some(structured) = result.get("structuredContent") {
            text = structured.to_string();
        }
    }
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(if text.is_empty() {
            "the tool reported an error".to_string()
        } else {
            text
        });
    }
    Ok(ToolOutput { text, image })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_maps_to_text_images_and_links() {
        let result = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "iVBORw==", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "file:///a", "name": "a", "mimeType": "text/plain"},
            {"type": "resource", "resource": {"uri": "file:///b", "text": "bee"}}
        ]});
        let out = map_result(&result).unwrap();
        assert_eq!(
            out.text,
            "hello\n[image: image/png]\nResource link: a <file:///a> (text/plain)\n\
             Resource <file:///b>:\nbee"
        );
        let image = out.image.unwrap();
        assert_eq!(image.media_type.as_deref(), Some("image/png"));
        assert_eq!(image.data.unwrap(), vec![0x89, b'P', b'N', b'G']);
    }

    #[test]
    fn structured_content_errors_and_empty_results() {
        let out = map_result(&json!({"content": [], "structuredContent": {"sum": 3}})).unwrap();
        assert_eq!(out.text, r#"{"sum":3}"#);
        let err = map_result(&json!({"content": [{"type": "text", "text": "no"}],
                                     "isError": true}));
        assert_eq!(err.unwrap_err(), "no");
        assert_eq!(map_result(&json!({})).unwrap().text, "");
    }
}
