//! What every wire format is ([`WireFormat`], [`Decoder`], the [`HttpRequest`] it builds)
//! and the helpers they share: request bodies with provider options merged in, the joined
//! system text, image URLs, header-safe values, malformed-event errors, and decoding
//! a whole recorded body offline. It never does I/O and holds no format's serde structs:
//! those stay private to their format's files.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};
use crate::llm::{ImageData, Message, Request, Response, Role, StreamEvent, sse};

/// A request ready to send: everything a wire format decides.
pub(crate) struct HttpRequest {
    /// Full URL. May carry a key in its query (Gemini): never put it in an error unscrubbed.
    pub(crate) url: String,
    /// Headers, including authentication. Never printed or logged.
    pub(crate) headers: Vec<(String, String)>,
    /// JSON body.
    pub(crate) body: Vec<u8>,
}

/// What a wire format knows: how to build its request and how to read its errors.
pub(crate) trait WireFormat: Send + Sync {
    /// The provider id used in errors and responses (`"anthropic"`).
    fn provider_id(&self) -> &str;
    /// Builds the streaming HTTP request for `request`.
    fn build_request(&self, request: &Request) -> Result<HttpRequest>;
    /// A fresh decoder for one response stream.
    fn decoder(&self, request: &Request) -> Box<dyn Decoder>;
    /// Classifies a non-2xx response (status, lower-cased headers, body text).
    fn classify_error(&self, status: u16, headers: &[(String, String)], body: &str) -> Error;
}

/// Turns one provider's SSE events into [`StreamEvent`]s and accumulates the response.
pub(crate) trait Decoder: Send {
    /// Handles one SSE event. An in-stream error event returns `Err`.
    fn event(&mut self, event: sse::Event, out: &mut Vec<StreamEvent>) -> Result<()>;
    /// The body ended. Emits the final `Finish` (or returns a stream error if the stream
    /// ended before the provider's terminal event where it has one).
    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<()>;
}

/// Runs a whole body through the SSE parser and `decoder`; the response of its `Finish`.
/// The `decode_stream` of every format.
pub(crate) fn decode_body(decoder: &mut dyn Decoder, body: &[u8]) -> Result<Response> {
    let mut parser = sse::Parser::new();
    let mut sse_events = Vec::new();
    let mut events = Vec::new();
    parser.feed(body, &mut sse_events);
    parser.finish(&mut sse_events);
    let mut response = None;
    for event in sse_events {
        decoder.event(event, &mut events)?;
        take_finish(&mut events, &mut response);
    }
    decoder.end(&mut events)?;
    take_finish(&mut events, &mut response);
    response.ok_or_else(|| Error::new(ErrorKind::Stream, "the stream has no finish event"))
}

fn take_finish(events: &mut Vec<StreamEvent>, response: &mut Option<Response>) {
    for event in events.drain(..) {
        if let StreamEvent::Finish { response: r, .. } = event {
            *response = Some(*r);
        }
    }
}

/// A configuration error unless `value` can travel in an HTTP header (visible ASCII).
pub(crate) fn check_header_value(provider: &str, what: &str, value: &str) -> Result<()> {
    if value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Configuration,
            format!("the {provider} {what} contains characters an http header cannot carry"),
        )
        .with_provider(provider))
    }
}

/// The text of the system and developer messages, in order, joined with a blank line
/// (empty when there is none): the formats that take one instruction string.
pub(crate) fn system_text(messages: &[Message]) -> String {
    let mut system = String::new();
    for message in messages {
        if matches!(message.role, Role::System | Role::Developer) {
            let text = message.text();
            if !text.is_empty() {
                if !system.is_empty() {
                    system.push_str("\n\n");
                }
                system.push_str(&text);
            }
        }
    }
    system
}

/// The image as a URL: its own URL, or a `data:` URI of its bytes.
pub(crate) fn image_url(image: &ImageData) -> Cow<'_, str> {
    match (&image.url, &image.data) {
        (Some(url), _) => Cow::Borrowed(url.as_str()),
        (None, _) => Cow::Owned(format!(
            "data:{};base64,{}",
            image.media_type_or_default(),
            image.base64()
        )),
    }
}

/// `data:<mime>;base64,<payload>` → (mime, payload); the mime may be empty. `None` for any
/// other URL, and for a `data:` URL that is not base64.
pub(crate) fn parse_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, payload) = rest.split_once(',')?;
    let mime = meta.strip_suffix(";base64")?;
    Some((mime, payload))
}

/// Serialises `body`, then merges `options` (a provider's `provider_options` object) into it.
pub(crate) fn serialize_with_options<T: Serialize>(
    body: &T,
    options: Option<&serde_json::Map<String, Value>>,
) -> Result<Vec<u8>> {
    fn encode_error(e: impl std::fmt::Display) -> Error {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("cannot encode the request: {e}"),
        )
    }
    match options {
        None => crate::json::to_vec(body).map_err(encode_error),
        Some(options) => {
            let mut value = serde_json::to_value(body).map_err(encode_error)?;
            for (key, option) in options {
                merge_json(&mut value, key, option);
            }
            crate::json::to_vec(&value).map_err(encode_error)
        }
    }
}

/// Sets `target[key] = value`, merging key by key where both sides are objects.
fn merge_json(target: &mut Value, key: &str, value: &Value) {
    let Some(map) = target.as_object_mut() else {
        return;
    };
    match (map.get_mut(key), value) {
        (Some(existing @ Value::Object(_)), Value::Object(incoming)) => {
            for (k, v) in incoming {
                merge_json(existing, k, v);
            }
        }
        _ => {
            map.insert(key.to_string(), value.clone());
        }
    }
}

/// A stream error for an event whose data is not the JSON the format promises.
pub(crate) fn malformed(provider: &str, data: &str, error: &serde_json::Error) -> Error {
    Error::new(
        ErrorKind::Stream,
        format!("malformed event data from the provider: {error}"),
    )
    .with_provider(provider.to_string())
    .with_body(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn options_merge_into_nested_objects_key_by_key() {
        let body = json!({"model": "m", "reasoning": {"effort": "low", "summary": "auto"}});
        let options = json!({"reasoning": {"effort": "high"}, "store": true});
        let bytes = serialize_with_options(&body, options.as_object()).unwrap();
        let merged: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            merged,
            json!({"model": "m", "reasoning": {"effort": "high", "summary": "auto"}, "store": true})
        );
    }

    #[test]
    fn system_and_developer_texts_join_with_a_blank_line() {
        let messages = [
            Message::system("be brief"),
            Message::user("hi"),
            Message::system(""),
            Message {
                role: Role::Developer,
                ..Message::system("use tabs")
            },
        ];
        assert_eq!(system_text(&messages), "be brief\n\nuse tabs");
        assert_eq!(system_text(&[Message::user("hi")]), "");
    }

    #[test]
    fn data_urls_split_into_mime_and_payload() {
        assert_eq!(
            parse_data_url("data:image/jpeg;base64,AAEC"),
            Some(("image/jpeg", "AAEC"))
        );
        assert_eq!(parse_data_url("data:;base64,AAEC"), Some(("", "AAEC")));
        assert_eq!(parse_data_url("data:text/plain,hello"), None);
        assert_eq!(parse_data_url("https://x.test/a.png"), None);
    }
}
