//! MCP tools as registered tools: the definition the model sees (prefixed name,
//! sanitised schema) and an executor that validates against the server's own schema, calls
//! `tools/call` and maps the result (`content[]`, `structuredContent`, `isError`) to a
//! [`ToolOutput`]; and the three resource tools every server with resources shares
//! (`list_mcp_resources`, `list_mcp_resource_templates`, `read_mcp_resource`, named and
//! shaped as Codex's).
//!
//! It never truncates tool results (the session does, keeping the full text for
//! `TOOL_CALL_END`); a resource read is bounded in `resources.rs`.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::names::{sanitise_schema, tool_name};
use super::resources;
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

/// What the resource tools ask of a server that offers resources (its handle in
/// `server.rs` answers, so that this file knows nothing of connections).
pub(crate) trait ResourceServer: Send + Sync {
    /// The configured name.
    fn name(&self) -> &str;
    /// One page of `method` (`resources/list` or `resources/templates/list`) from
    /// `cursor`: the server's result.
    fn page(
        &self,
        method: &str,
        cursor: Option<&str>,
        cancel: &CancelToken,
    ) -> Result<Value, String>;
    /// Every page of the resources (`templates`: the templates), each entry with `server`.
    fn list(&self, templates: bool, cancel: &CancelToken) -> Result<Vec<Value>, String>;
    /// `resources/read` of `uri`: the `contents` entries.
    fn read(&self, uri: &str, cancel: &CancelToken) -> Result<Vec<Value>, String>;
}

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

/// The resource tools' names.
pub(crate) const RESOURCE_TOOLS: [&str; 3] = [
    "list_mcp_resources",
    "list_mcp_resource_templates",
    "read_mcp_resource",
];

/// Registers the three resource tools over `servers` (those that offer resources).
pub(crate) fn register_resource_tools(
    registry: &mut ToolRegistry,
    servers: Vec<Arc<dyn ResourceServer>>,
) {
    let servers = Arc::new(servers);
    let listing = |name: &str, what: &str| {
        ToolDefinition {
        name: name.to_string(),
        description: format!(
            "Lists the {what} that the connected MCP servers offer. Without `server`, every \
             server's; with `server`, one page of that server's, continued by passing the \
             `nextCursor` it returned as `cursor`."
        ),
        parameters: json!({"type": "object", "properties": {
            "server": {"type": "string", "description": "An MCP server's name."},
            "cursor": {"type": "string", "description": "The nextCursor of an earlier page (with server)."}
        }})
        .into(),
        freeform: None,
    }
    };
    for (index, (method, key)) in [
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
    ]
    .into_iter()
    .enumerate()
    {
        let what = if index == 0 {
            "resources (files, documents, records; each with a URI to read)"
        } else {
            "resource templates (URI patterns, RFC 6570, to fill in and read)"
        };
        let servers = Arc::clone(&servers);
        let tool = RegisteredTool::new(listing(RESOURCE_TOOLS[index], what), move |input, ctx| {
            let args = crate::tools::args::json(&input)?;
            list_page(&servers, args, method, key, ctx.cancel)
        });
        registry.register(tool.returning_on_cancel());
    }
    let read = ToolDefinition {
        name: RESOURCE_TOOLS[2].to_string(),
        description: "Reads a resource of an MCP server by its URI (one that \
                      list_mcp_resources gave, or a template filled in)."
            .to_string(),
        parameters: json!({"type": "object", "properties": {
            "server": {"type": "string", "description": "The MCP server's name."},
            "uri": {"type": "string", "description": "The resource's URI."}
        }, "required": ["server", "uri"]})
        .into(),
        freeform: None,
    };
    registry.register(
        RegisteredTool::new(read, move |input, ctx| {
            let args = crate::tools::args::json(&input)?;
            let server = crate::tools::args::required_str(args, "server")?;
            let uri = crate::tools::args::required_str(args, "uri")?;
            let handle = offering(&servers, server)?;
            let contents = handle.read(uri, ctx.cancel)?;
            Ok(resources::contents_output(server, &contents))
        })
        .returning_on_cancel(),
    );
}

/// The server called `name` among those offering resources, or an error naming them.
fn offering<'a>(
    servers: &'a [Arc<dyn ResourceServer>],
    name: &str,
) -> Result<&'a dyn ResourceServer, String> {
    servers
        .iter()
        .find(|s| s.name() == name)
        .map(|s| &**s)
        .ok_or_else(|| {
            let names: Vec<&str> = servers.iter().map(|s| s.name()).collect();
            format!(
                "no MCP server `{name}` offers resources; the servers with resources are: {}",
                names.join(", ")
            )
        })
}

/// One listing tool call: a page of one server, or every server's whole list.
fn list_page(
    servers: &[Arc<dyn ResourceServer>],
    args: &Map<String, Value>,
    method: &str,
    key: &str,
    cancel: &CancelToken,
) -> Result<ToolOutput, String> {
    let templates = key == "resourceTemplates";
    let server = crate::tools::args::optional_str(args, "server");
    let cursor = crate::tools::args::optional_str(args, "cursor");
    let mut out = Map::new();
    let items: Vec<Value> = match server {
        Some(name) => {
            let handle = offering(servers, name)?;
            let page = handle.page(method, cursor, cancel)?;
            if let Some(next) = page.get("nextCursor").and_then(Value::as_str) {
                out.insert("nextCursor".to_string(), json!(next));
            }
            let listed = page.get(key).and_then(Value::as_array);
            listed
                .into_iter()
                .flatten()
                .map(|item| with_server(item, name))
                .collect()
        }
        None if cursor.is_some() => {
            return Err("a cursor continues one server's listing: give `server` too".to_string());
        }
        None => {
            let mut all = Vec::new();
            for handle in servers {
                all.extend(
                    handle
                        .list(templates, cancel)?
                        .iter()
                        .map(|r| with_server(r, handle.name())),
                );
            }
            all
        }
    };
    out.insert(key.to_string(), Value::Array(items));
    Ok(ToolOutput::text(Value::Object(out).to_string()))
}

/// A listed item as the server gave it, with `server` first.
fn with_server(item: &Value, server: &str) -> Value {
    let mut out = Map::new();
    out.insert("server".to_string(), json!(server));
    if let Value::Object(fields) = item {
        for (k, v) in fields {
            if k != "server" && k != "_meta" && k != "annotations" && k != "icons" {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
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
