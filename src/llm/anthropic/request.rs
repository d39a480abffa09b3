//! Anthropic request translation: a [`Request`] to the Messages API body (the rules are in
//! the parent module's docs). It never does I/O and never reads a response.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{CACHE_BETA, ID, LONG_CACHE_BETA, config_error};
use crate::error::Result;
use crate::json::RawJson;
use crate::llm::wire::parse_data_url;
use crate::llm::{
    ContentPart, ImageData, Message, Request, Role, ToolCall, ToolChoice, ToolResult,
};

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    #[serde(flatten)]
    options: Map<String, Value>,
    messages: Vec<WireMessage<'a>>,
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: RawJson<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize, Clone, Copy)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'static str>,
}

/// A breakpoint with the request's TTL (`5m`, `1h`, or the API's default when unset).
fn breakpoint(ttl: Option<&'static str>) -> CacheControl {
    CacheControl {
        kind: "ephemeral",
        ttl,
    }
}

/// The `cache_control.ttl` for `Request::cache_ttl_secs`: the two the API takes.
fn cache_ttl(seconds: Option<u64>) -> Result<Option<&'static str>> {
    match seconds {
        None => Ok(None),
        Some(300) => Ok(Some("5m")),
        Some(3600) => Ok(Some("1h")),
        Some(other) => Err(config_error(format!(
            "Anthropic keeps prompt-cache entries 5 minutes or 1 hour (cache_ttl_secs 300 or \
             3600), not {other} s"
        ))),
    }
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Image {
        source: ImageSource<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Cow<'a, Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ToolResultContent<'a>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
}

impl Block<'_> {
    fn is_tool_result(&self) -> bool {
        matches!(self, Block::ToolResult { .. })
    }

    /// Marks this block as a cache breakpoint; `false` for blocks that cannot carry one.
    fn mark_cache(&mut self, mark: CacheControl) -> bool {
        match self {
            Block::Text { cache_control, .. }
            | Block::Image { cache_control, .. }
            | Block::ToolUse { cache_control, .. }
            | Block::ToolResult { cache_control, .. } => {
                *cache_control = Some(mark);
                true
            }
            Block::Thinking { .. } | Block::RedactedThinking { .. } => false,
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum ToolResultContent<'a> {
    Text(&'a str),
    Blocks(Vec<Block<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ImageSource<'a> {
    Base64 {
        media_type: Cow<'a, str>,
        data: Cow<'a, str>,
    },
    Url {
        url: &'a str,
    },
}

/// A serialised body and the beta features it needs.
pub(super) struct BuiltBody {
    pub(super) body: Vec<u8>,
    pub(super) betas: Vec<String>,
}

/// Keys of `provider_options.anthropic` that are adapter settings, not body fields.
const SETTINGS_KEYS: &[&str] = &["beta_headers", "auto_cache"];
/// Body fields the translation owns; options cannot replace them.
const OWNED_KEYS: &[&str] = &["model", "messages", "system", "tools", "stream"];

fn thinking_budget(effort: &str) -> Result<u32> {
    match effort.to_ascii_lowercase().as_str() {
        "minimal" => Ok(1024),
        "low" => Ok(2048),
        "medium" => Ok(8192),
        "high" => Ok(24576),
        other => Err(config_error(format!(
            "unknown reasoning_effort `{other}` for anthropic; use minimal, low, medium or high, \
             or set provider_options.anthropic.thinking"
        ))),
    }
}

pub(super) fn build_body(request: &Request, max_tokens_default: u32) -> Result<BuiltBody> {
    let options = request.options_for(ID);
    let setting = |key: &str| options.and_then(|o| o.get(key));
    let auto_cache = setting("auto_cache")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let mut betas = beta_headers(setting("beta_headers"))?;

    // Body fields from options, minus settings and the keys the translation owns.
    let mut merged = Map::new();
    if let Some(options) = options {
        for (key, value) in options {
            if !SETTINGS_KEYS.contains(&key.as_str()) && !OWNED_KEYS.contains(&key.as_str()) {
                merged.insert(key.clone(), value.clone());
            }
        }
    }

    // Thinking and max_tokens.
    let budget = match (&request.reasoning_effort, merged.contains_key("thinking")) {
        (Some(effort), false) => Some(thinking_budget(effort)?),
        _ => None,
    };
    let max_tokens = max_tokens(request, budget, &merged, max_tokens_default)?;
    let thinking =
        budget.map(|budget| serde_json::json!({"type": "enabled", "budget_tokens": budget}));

    // Tools and tool choice.
    let offer_tools = !request.tools.is_empty() && request.tool_choice != Some(ToolChoice::None);
    let mut tools: Vec<WireTool> = if offer_tools {
        request
            .tools
            .iter()
            .map(|t| WireTool {
                name: &t.name,
                description: &t.description,
                input_schema: t.parameters.raw(),
                cache_control: None,
            })
            .collect()
    } else {
        Vec::new()
    };
    let tool_choice = match (&request.tool_choice, offer_tools) {
        (_, false) | (None | Some(ToolChoice::Auto), true) => None,
        (Some(ToolChoice::Required), true) => Some(serde_json::json!({"type": "any"})),
        (Some(ToolChoice::Named(name)), true) => {
            Some(serde_json::json!({"type": "tool", "name": name}))
        }
        (Some(ToolChoice::None), true) => None,
    };

    let (mut system, mut messages) = translate_messages(&request.messages);

    let ttl = cache_ttl(request.cache_ttl_secs)?;
    if auto_cache && mark_breakpoints(&mut system, &mut tools, &mut messages, breakpoint(ttl)) {
        push_unique(&mut betas, CACHE_BETA);
        if ttl == Some("1h") {
            push_unique(&mut betas, LONG_CACHE_BETA);
        }
    }

    let body = Body {
        model: &request.model,
        max_tokens: (!merged.contains_key("max_tokens")).then_some(max_tokens),
        stream: true,
        temperature: request.temperature,
        top_p: request.top_p,
        stop_sequences: &request.stop_sequences,
        thinking,
        tool_choice,
        tools,
        system,
        options: merged,
        messages,
    };
    let body = crate::json::to_vec(&body)
        .map_err(|e| config_error(format!("the request cannot be serialised: {e}")))?;
    Ok(BuiltBody { body, betas })
}

/// The `anthropic-beta` values from `provider_options.anthropic.beta_headers` (a list, or
/// one comma-separated string).
fn beta_headers(setting: Option<&Value>) -> Result<Vec<String>> {
    let mut betas: Vec<String> = Vec::new();
    match setting {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                let Some(beta) = item.as_str() else {
                    return Err(config_error(
                        "provider_options.anthropic.beta_headers must be a list of strings",
                    ));
                };
                push_unique(&mut betas, beta);
            }
        }
        Some(Value::String(beta)) => {
            for beta in beta.split(',') {
                push_unique(&mut betas, beta.trim());
            }
        }
        Some(_) => {
            return Err(config_error(
                "provider_options.anthropic.beta_headers must be a list of strings",
            ));
        }
    }
    Ok(betas)
}

/// `max_tokens`: the request's, or the default plus room for the thinking budget (from
/// `reasoning_effort` or a `thinking` object in the provider options).
fn max_tokens(
    request: &Request,
    budget: Option<u32>,
    merged: &Map<String, Value>,
    max_tokens_default: u32,
) -> Result<u32> {
    Ok(match (request.max_tokens, budget) {
        (Some(max), Some(budget)) if max <= budget => {
            return Err(config_error(format!(
                "max_tokens ({max}) must exceed the thinking budget ({budget}) of reasoning_effort \
                 `{}`; raise max_tokens or lower the effort",
                request.reasoning_effort.as_deref().unwrap_or_default()
            )));
        }
        (Some(max), _) => max,
        (None, Some(budget)) => max_tokens_default.saturating_add(budget),
        (None, None) => {
            // A `thinking` object given through provider options: leave room for it too.
            let option_budget = merged
                .get("thinking")
                .filter(|t| t.get("type").and_then(Value::as_str) == Some("enabled"))
                .and_then(|t| t.get("budget_tokens"))
                .and_then(Value::as_u64)
                .map_or(0, |b| u32::try_from(b).unwrap_or(u32::MAX));
            max_tokens_default.saturating_add(option_budget)
        }
    })
}

/// Marks the four breakpoints (the most the API takes): the last system block, the last
/// tool, and the last block of each of the two latest user messages. The latest one moves
/// forward every round; the one before it sits exactly where the previous request's latest
/// one sat, so each request reads the whole prefix the previous one wrote, however many
/// blocks the round between them added (the API looks back only about 20 blocks from a
/// breakpoint for an earlier entry). Returns whether any was marked.
fn mark_breakpoints(
    system: &mut [Block<'_>],
    tools: &mut [WireTool<'_>],
    messages: &mut [WireMessage<'_>],
    mark: CacheControl,
) -> bool {
    let mut cached = false;
    if let Some(last) = system.last_mut() {
        cached |= last.mark_cache(mark);
    }
    if let Some(last) = tools.last_mut() {
        last.cache_control = Some(mark);
        cached = true;
    }
    for turn in messages
        .iter_mut()
        .rev()
        .filter(|m| m.role == "user")
        .take(2)
    {
        let last = turn
            .content
            .iter_mut()
            .rev()
            .find(|b| !matches!(b, Block::Thinking { .. } | Block::RedactedThinking { .. }));
        if let Some(block) = last {
            cached |= block.mark_cache(mark);
        }
    }
    cached
}

fn push_unique(list: &mut Vec<String>, item: &str) {
    if !item.is_empty() && !list.iter().any(|b| b == item) {
        list.push(item.to_string());
    }
}

/// Splits the conversation into `system` blocks and alternating user/assistant messages.
fn translate_messages(messages: &[Message]) -> (Vec<Block<'_>>, Vec<WireMessage<'_>>) {
    let mut system = Vec::new();
    let mut out: Vec<WireMessage> = Vec::new();
    for message in messages {
        let role = match message.role {
            Role::System | Role::Developer => {
                for part in &message.content {
                    if let ContentPart::Text { text, .. } = part {
                        if !text.is_empty() {
                            system.push(Block::Text {
                                text,
                                cache_control: None,
                            });
                        }
                    }
                }
                continue;
            }
            Role::User | Role::Tool => "user",
            Role::Assistant => "assistant",
        };
        let blocks: Vec<Block> = message
            .content
            .iter()
            .filter_map(|part| translate_part(part, role))
            .collect();
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => out.push(WireMessage {
                role,
                content: blocks,
            }),
        }
    }
    for message in &mut out {
        if message.role == "user" {
            // tool_result blocks must lead a user message; keep both groups' order.
            let (mut results, rest): (Vec<Block>, Vec<Block>) =
                std::mem::take(&mut message.content)
                    .into_iter()
                    .partition(Block::is_tool_result);
            results.extend(rest);
            message.content = results;
        }
    }
    (system, out)
}

fn translate_part<'a>(part: &'a ContentPart, role: &str) -> Option<Block<'a>> {
    match part {
        ContentPart::Text { text, .. } => (!text.is_empty()).then_some(Block::Text {
            text,
            cache_control: None,
        }),
        ContentPart::Image(image) => Some(Block::Image {
            source: image_source(image)?,
            cache_control: None,
        }),
        ContentPart::ToolCall(call) if role == "assistant" => Some(tool_use(call)),
        ContentPart::ToolCall(_) => None,
        ContentPart::ToolResult(result) => Some(tool_result(result)),
        ContentPart::Thinking(t) if role == "assistant" && t.id.is_none() => {
            let signature = t.signature.as_deref().filter(|s| !s.is_empty())?;
            Some(if t.redacted {
                Block::RedactedThinking { data: signature }
            } else {
                Block::Thinking {
                    thinking: &t.text,
                    signature,
                }
            })
        }
        ContentPart::Thinking(_) => None,
    }
}

fn tool_use(call: &ToolCall) -> Block<'_> {
    let input = match &call.arguments {
        Value::Object(_) => Cow::Borrowed(&call.arguments),
        // Arguments that were not a JSON object (the model sent invalid JSON, or a custom
        // tool's raw text): the API takes only objects, so send the object they parse to,
        // or an empty one; the tool result already told the model what was wrong.
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(value @ Value::Object(_)) => Cow::Owned(value),
            _ => Cow::Owned(Value::Object(Map::new())),
        },
        _ => Cow::Owned(Value::Object(Map::new())),
    };
    Block::ToolUse {
        id: &call.id,
        name: &call.name,
        input,
        cache_control: None,
    }
}

fn tool_result(result: &ToolResult) -> Block<'_> {
    let content = match &result.image {
        None => ToolResultContent::Text(&result.content),
        Some(image) => {
            let mut blocks = Vec::with_capacity(2);
            if !result.content.is_empty() {
                blocks.push(Block::Text {
                    text: &result.content,
                    cache_control: None,
                });
            }
            if let Some(source) = image_source(image) {
                blocks.push(Block::Image {
                    source,
                    cache_control: None,
                });
            }
            ToolResultContent::Blocks(blocks)
        }
    };
    Block::ToolResult {
        tool_use_id: &result.tool_call_id,
        content,
        is_error: result.is_error,
        cache_control: None,
    }
}

fn image_source(image: &ImageData) -> Option<ImageSource<'_>> {
    if image.data.is_some() {
        return Some(ImageSource::Base64 {
            media_type: Cow::Borrowed(image.media_type_or_default()),
            data: Cow::Owned(image.base64()),
        });
    }
    let url = image.url.as_deref()?;
    if url.starts_with("data:") {
        let (media_type, payload) = parse_data_url(url)?;
        return Some(ImageSource::Base64 {
            media_type: Cow::Borrowed(if media_type.is_empty() {
                image.media_type_or_default()
            } else {
                media_type
            }),
            data: Cow::Borrowed(payload),
        });
    }
    Some(ImageSource::Url { url })
}

#[cfg(test)]
mod tests {
    use super::super::DEFAULT_MAX_TOKENS;
    use super::*;
    use crate::error::ErrorKind;
    use crate::llm::ToolDefinition;

    fn body_json(request: &Request) -> Value {
        serde_json::from_slice(&build_body(request, DEFAULT_MAX_TOKENS).unwrap().body).unwrap()
    }

    #[test]
    fn roles_alternate_and_tool_results_lead_user_messages() {
        let call = ToolCall::new("t1", "shell", serde_json::json!({"command": "ls"}));
        let request = Request::new(
            "m",
            vec![
                Message::system("be brief"),
                Message::user("hi"),
                Message::user("there"),
                Message {
                    role: Role::Assistant,
                    content: vec![ContentPart::text("ok"), ContentPart::ToolCall(call.clone())],
                    name: None,
                    tool_call_id: None,
                },
                Message::user("also this"),
                Message::tool_result(ToolResult::for_call(&call, "boom", true)),
            ],
        );
        let body = body_json(&request);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[0]["content"].as_array().unwrap().len(), 2);
        let last = messages[2]["content"].as_array().unwrap();
        assert_eq!(last[0]["type"], "tool_result");
        assert_eq!(last[0]["is_error"], true);
        assert_eq!(last[1]["text"], "also this");
        assert_eq!(body["system"][0]["text"], "be brief");
    }

    #[test]
    fn effort_enables_thinking_with_room_for_the_answer() {
        let mut request = Request::new("m", vec![Message::user("x")]);
        request.reasoning_effort = Some("low".into());
        let body = body_json(&request);
        assert_eq!(body["thinking"]["budget_tokens"], 2048);
        assert_eq!(body["max_tokens"], 2048 + DEFAULT_MAX_TOKENS);
        request.max_tokens = Some(1000);
        let err = build_body(&request, DEFAULT_MAX_TOKENS).err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Configuration);
        request.reasoning_effort = Some("extreme".into());
        assert!(build_body(&request, DEFAULT_MAX_TOKENS).is_err());
        request.reasoning_effort = None;
        request.max_tokens = None;
        request.provider_options = Some(serde_json::json!({"anthropic": {
            "thinking": {"type": "enabled", "budget_tokens": 5000}
        }}));
        let body = body_json(&request);
        assert_eq!(body["thinking"]["budget_tokens"], 5000);
        assert_eq!(body["max_tokens"], 5000 + DEFAULT_MAX_TOKENS);
    }

    #[test]
    fn tool_choice_none_omits_tools_and_options_merge() {
        let mut request = Request::new("m", vec![Message::user("x")]);
        request.tools = vec![ToolDefinition {
            name: "f".into(),
            description: "d".into(),
            parameters: serde_json::json!({"type": "object"}).into(),
            freeform: None,
        }];
        request.tool_choice = Some(ToolChoice::None);
        request.provider_options = Some(serde_json::json!({"anthropic": {
            "top_k": 5, "model": "ignored", "auto_cache": false, "beta_headers": ["b1", "b1"]
        }}));
        let built = build_body(&request, DEFAULT_MAX_TOKENS).unwrap();
        let body: Value = serde_json::from_slice(&built.body).unwrap();
        assert!(body.get("tools").is_none());
        assert!(body.get("tool_choice").is_none());
        assert_eq!(body["top_k"], 5);
        assert_eq!(body["model"], "m");
        assert_eq!(built.betas, ["b1"]);
        assert!(
            !String::from_utf8(built.body)
                .unwrap()
                .contains("cache_control")
        );
    }

    #[test]
    fn images_become_base64_or_url_sources() {
        let mut message = Message::user("look");
        message
            .content
            .push(ContentPart::Image(ImageData::from_bytes(
                vec![1, 2, 3],
                "image/gif",
            )));
        message.content.push(ContentPart::Image(ImageData {
            url: Some("https://x.test/a.png".into()),
            data: None,
            media_type: None,
            detail: None,
        }));
        message.content.push(ContentPart::Image(ImageData {
            url: Some("data:image/jpeg;base64,AAEC".into()),
            data: None,
            media_type: None,
            detail: None,
        }));
        let body = body_json(&Request::new("m", vec![message]));
        let content = &body["messages"][0]["content"];
        assert_eq!(content[1]["source"]["type"], "base64");
        assert_eq!(content[1]["source"]["media_type"], "image/gif");
        assert_eq!(content[1]["source"]["data"], "AQID");
        assert_eq!(content[2]["source"]["url"], "https://x.test/a.png");
        assert_eq!(content[3]["source"]["media_type"], "image/jpeg");
        assert_eq!(content[3]["source"]["data"], "AAEC");
    }
}
