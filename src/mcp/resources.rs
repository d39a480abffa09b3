//! Resources and prompts of a server: the paginated listings (`resources/list`,
//! `resources/templates/list`, `prompts/list`; the host gets each entry as the server gave
//! it, with `server` added), `resources/read` and `prompts/get`, and the mapping of read
//! contents to what the model gets.
//!
//! Every listing stops after [`MAX_PAGES`] pages and [`MAX_ITEMS`] entries, and a read
//! gives the model at most
//! [`MAX_TEXT_FOR_MODEL`] bytes of text and images no larger than [`MAX_IMAGE`]: a hostile
//! server's 60 MB resource costs the context a note, not its size.

use serde_json::{Map, Value, json};

use super::connection::Connection;
use super::rpc::RpcFailure;
use crate::cancel::CancelToken;
use crate::llm::{ContentPart, ImageData, Message, Role};
use crate::tools::ToolOutput;

/// Most pages read of one listing.
pub(crate) const MAX_PAGES: usize = 100;
/// Most entries kept of one listing.
const MAX_ITEMS: usize = 10_000;
/// The longest name, URI or description kept from a listing, in characters.
const MAX_FIELD: usize = 4096;
/// Most text of one read given to the model (the host's own reads get all of it).
pub(crate) const MAX_TEXT_FOR_MODEL: usize = 256 * 1024;
/// The largest image of a read shown to the model.
const MAX_IMAGE: usize = 5 * 1024 * 1024;

/// A bounded string field of a server's object.
fn field(value: &Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .map(|s| s.chars().take(MAX_FIELD).collect())
}

/// Every page of the listing `method` (whose items are under `key`): each item as the
/// server gave it (an object; others are dropped), with `server` added.
fn list_all(
    conn: &Connection,
    server: &str,
    method: &str,
    key: &str,
    timeout: std::time::Duration,
    cancel: &CancelToken,
) -> Result<Vec<Value>, RpcFailure> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let mut page = conn.request(method, params, timeout, cancel)?;
        if let Some(Value::Array(items)) = page.get_mut(key).map(Value::take) {
            out.extend(items.into_iter().filter_map(|item| match item {
                Value::Object(mut fields) => {
                    fields.insert("server".to_string(), json!(server));
                    Some(Value::Object(fields))
                }
                _ => None,
            }));
        }
        out.truncate(MAX_ITEMS);
        cursor = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .filter(|c| c.len() <= MAX_FIELD)
            .map(str::to_owned);
        if cursor.is_none() || out.len() >= MAX_ITEMS {
            break;
        }
    }
    Ok(out)
}

/// `resources/list` (or with `templates`, `resources/templates/list`), every page.
pub(crate) fn list_resources(
    conn: &Connection,
    server: &str,
    templates: bool,
    timeout: std::time::Duration,
    cancel: &CancelToken,
) -> Result<Vec<Value>, RpcFailure> {
    let (method, key) = if templates {
        ("resources/templates/list", "resourceTemplates")
    } else {
        ("resources/list", "resources")
    };
    list_all(conn, server, method, key, timeout, cancel)
}

/// `prompts/list`, every page.
pub(crate) fn list_prompts(
    conn: &Connection,
    server: &str,
    timeout: std::time::Duration,
    cancel: &CancelToken,
) -> Result<Vec<Value>, RpcFailure> {
    list_all(conn, server, "prompts/list", "prompts", timeout, cancel)
}

/// `resources/read` of `uri`: the `contents` entries as the server gave them.
pub(crate) fn read(
    conn: &Connection,
    uri: &str,
    timeout: std::time::Duration,
    cancel: &CancelToken,
) -> Result<Vec<Value>, RpcFailure> {
    let mut result =
        conn.request_with_input("resources/read", json!({ "uri": uri }), timeout, cancel)?;
    Ok(match result.get_mut("contents").map(Value::take) {
        Some(Value::Array(contents)) => contents.into_iter().filter(Value::is_object).collect(),
        _ => Vec::new(),
    })
}

/// What the model gets for a read: the texts (at most [`MAX_TEXT_FOR_MODEL`] bytes in
/// all, cut with a note), the first small image as an image, other blobs as a note.
pub(crate) fn contents_output(server: &str, contents: &[Value]) -> ToolOutput {
    let mut text = String::new();
    let mut image = None;
    for part in contents {
        let field = |key: &str| part.get(key).and_then(Value::as_str);
        let uri: String = field("uri").unwrap_or("").chars().take(MAX_FIELD).collect();
        let mime: String = field("mimeType").unwrap_or("").chars().take(200).collect();
        let label = match mime.as_str() {
            "" => format!("Resource <{uri}> of `{server}`"),
            mime => format!("Resource <{uri}> of `{server}` ({mime})"),
        };
        if !text.is_empty() {
            text.push('\n');
        }
        match (field("text"), field("blob")) {
            (Some(body), _) => {
                let room = MAX_TEXT_FOR_MODEL.saturating_sub(text.len());
                text.push_str(&format!("{label}:\n"));
                if body.len() <= room {
                    text.push_str(body);
                } else {
                    let cut = (0..=room)
                        .rev()
                        .find(|i| body.is_char_boundary(*i))
                        .unwrap_or(0);
                    text.push_str(&body[..cut]);
                    text.push_str(&format!(
                        "\n[… cut: the resource has {} bytes of text; {} are shown]",
                        body.len(),
                        cut
                    ));
                }
            }
            (None, Some(encoded)) => {
                let size = encoded.trim_end_matches('=').len() * 3 / 4;
                let shown = (image.is_none() && mime.starts_with("image/") && size <= MAX_IMAGE)
                    .then(|| crate::base64::decode(encoded))
                    .flatten();
                match shown {
                    Some(bytes) => {
                        text.push_str(&format!("{label}: [image, {} bytes]", bytes.len()));
                        image = Some(ImageData::from_bytes(bytes, mime.as_str()));
                    }
                    None => text.push_str(&format!("{label}: [binary, {size} bytes, not shown]")),
                }
            }
            (None, None) => text.push_str(&format!("{label}: [no contents]")),
        }
    }
    if text.is_empty() {
        text = format!("The resource has no contents (server `{server}`).");
    }
    ToolOutput { text, image }
}

/// `prompts/get` of `name` with `arguments`: the messages, as the llm data model's.
pub(crate) fn get_prompt(
    conn: &Connection,
    name: &str,
    arguments: &Map<String, Value>,
    timeout: std::time::Duration,
    cancel: &CancelToken,
) -> Result<Vec<Message>, RpcFailure> {
    let params = json!({"name": name, "arguments": arguments});
    let result = conn.request_with_input("prompts/get", params, timeout, cancel)?;
    let messages = result.get("messages").and_then(Value::as_array);
    Ok(messages
        .into_iter()
        .flatten()
        .take(1000)
        .map(|m| {
            let role = match m.get("role").and_then(Value::as_str) {
                Some("assistant") => Role::Assistant,
                _ => Role::User,
            };
            let content = m.get("content").unwrap_or(&Value::Null);
            let part = match content.get("type").and_then(Value::as_str) {
                Some("text") => ContentPart::text(field(content, "text").unwrap_or_default()),
                Some("image") => {
                    let mime = field(content, "mimeType").unwrap_or_else(|| "image/png".into());
                    match content
                        .get("data")
                        .and_then(Value::as_str)
                        .and_then(crate::base64::decode)
                    {
                        Some(bytes) => ContentPart::Image(ImageData::from_bytes(bytes, mime)),
                        None => ContentPart::text(format!("[image: {mime}, unreadable]")),
                    }
                }
                Some("resource") => {
                    let resource = content.get("resource").unwrap_or(&Value::Null);
                    let uri = field(resource, "uri").unwrap_or_default();
                    match resource.get("text").and_then(Value::as_str) {
                        Some(text) => ContentPart::text(format!("Resource <{uri}>:\n{text}")),
                        None => ContentPart::text(format!("[resource <{uri}>: binary]")),
                    }
                }
                Some("resource_link") => ContentPart::text(format!(
                    "Resource link: {} <{}>",
                    field(content, "name").unwrap_or_default(),
                    field(content, "uri").unwrap_or_default()
                )),
                other => ContentPart::text(format!("[{} content]", other.unwrap_or("unknown"))),
            };
            Message {
                role,
                content: vec![part],
                name: None,
                tool_call_id: None,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(text: Option<&str>, blob: Option<&[u8]>, mime: &str) -> Value {
        let mut part = json!({"uri": "test://r", "mimeType": mime});
        if let Some(text) = text {
            part["text"] = json!(text);
        }
        if let Some(blob) = blob {
            part["blob"] = json!(crate::base64::encode(blob));
        }
        part
    }

    #[test]
    fn texts_are_bounded_for_the_model_and_images_become_image_parts() {
        let big = "é".repeat(MAX_TEXT_FOR_MODEL);
        let out = contents_output("s", &[contents(Some(&big), None, "text/plain")]);
        assert!(
            out.text.len() < MAX_TEXT_FOR_MODEL + 400,
            "{}",
            out.text.len()
        );
        assert!(out.text.contains("[… cut: the resource has"));
        let png = [0x89, b'P', b'N', b'G', 1, 2];
        let out = contents_output(
            "s",
            &[
                contents(Some("hello"), None, "text/plain"),
                contents(None, Some(&png), "image/png"),
                contents(None, Some(&[0; 9]), "application/octet-stream"),
            ],
        );
        assert_eq!(
            out.text,
            "Resource <test://r> of `s` (text/plain):\nhello\n\
             Resource <test://r> of `s` (image/png): [image, 6 bytes]\n\
             Resource <test://r> of `s` (application/octet-stream): [binary, 9 bytes, not shown]"
        );
        assert_eq!(out.image.unwrap().data.unwrap(), png);
    }
}
