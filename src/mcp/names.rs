//! Names and schemas of MCP tools as the providers accept them.
//!
//! Names: `mcp__<server>__<tool>`, every character outside `[a-zA-Z0-9_-]` replaced by
//! `_`, at most 64 bytes. A name that had to be cut, or that is already taken, ends in `_`
//! and 8 hex digits of a 32-bit FNV-1a hash of `<server>/<tool>` (our own small stable hash;
//! Codex uses SHA-1 the same way). The one rule satisfies every provider: OpenAI
//! (`^[a-zA-Z0-9_-]{1,64}$`), Gemini (a letter or `_` first, at most 64) and Anthropic
//! (at most 128). The raw tool name is kept for the call.
//!
//! Schemas: every provider gets the server's input schema without `$schema`, without
//! empty `additionalProperties: {}` (it means "anything", which is the default) and
//! without `not` branches of `anyOf` (rejected by OpenAI and Anthropic's validators), with
//! an `object` root. Gemini's wire format then drops the keywords it does not know, as for
//! every tool. Pure functions; nothing here talks to a server.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// The longest tool name offered to any provider.
pub const MAX_TOOL_NAME: usize = 64;

/// The name the model sees for `tool` of `server`, unique among `taken`.
pub fn tool_name(server: &str, tool: &str, taken: &BTreeSet<String>) -> String {
    let full = format!("mcp__{}__{}", sanitise(server), sanitise(tool));
    if full.len() <= MAX_TOOL_NAME && !taken.contains(&full) {
        return full;
    }
    let suffix = format!("_{:08x}", fnv1a(format!("{server}/{tool}").as_bytes()));
    let mut name = full;
    name.truncate(MAX_TOOL_NAME - suffix.len());
    name.push_str(&suffix);
    // A second collision (the same hash) is resolved by counting.
    let mut n = 1;
    while taken.contains(&name) {
        let tail = format!("{suffix}{n}");
        name.truncate(MAX_TOOL_NAME - tail.len());
        name.push_str(&tail);
        n += 1;
    }
    name
}

fn sanitise(part: &str) -> String {
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// 32-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in bytes {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// The server's input schema as every provider accepts it (see the module docs).
pub fn sanitise_schema(schema: &Value) -> Value {
    let mut out = match schema {
        Value::Object(_) => clean(schema),
        _ => json!({}),
    };
    let root = out.as_object_mut().expect("an object");
    if root.get("type").and_then(Value::as_str) != Some("object") {
        root.insert("type".to_string(), json!("object"));
    }
    if !root.contains_key("properties") {
        root.insert("properties".to_string(), json!({}));
    }
    out
}

fn clean(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, item) in map {
                match (key.as_str(), item) {
                    ("$schema", _) => {}
                    ("additionalProperties", Value::Object(inner)) if inner.is_empty() => {}
                    ("anyOf", Value::Array(branches)) => {
                        let kept: Vec<Value> = branches
                            .iter()
                            .filter(|b| b.get("not").is_none())
                            .map(clean)
                            .collect();
                        match kept.len() {
                            0 => {}
                            1 if !out.contains_key("type") => {
                                if let Value::Object(only) = &kept[0] {
                                    for (k, v) in only {
                                        out.entry(k.clone()).or_insert_with(|| v.clone());
                                    }
                                }
                            }
                            _ => {
                                out.insert(key.clone(), Value::Array(kept));
                            }
                        }
                    }
                    _ => {
                        out.insert(key.clone(), clean(item));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(clean).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_sanitised_and_bounded() {
        let none = BTreeSet::new();
        assert_eq!(
            tool_name("everything", "echo", &none),
            "mcp__everything__echo"
        );
        assert_eq!(
            tool_name("my server", "get.time", &none),
            "mcp__my_server__get_time"
        );
        let long = "x".repeat(100);
        let name = tool_name("fake", &long, &none);
        assert_eq!(name.len(), MAX_TOOL_NAME);
        assert!(name.starts_with("mcp__fake__xxx"));
        assert_eq!(name, tool_name("fake", &long, &none), "stable");
        assert_ne!(name, tool_name("fake", &"x".repeat(99), &none));
    }

    #[test]
    fn a_taken_name_gets_a_hash_suffix() {
        let taken = BTreeSet::from(["mcp__a_b__c".to_string()]);
        let name = tool_name("a b", "c", &taken);
        assert!(
            name.starts_with("mcp__a_b__c_") && name.len() == 20,
            "{name}"
        );
        let both = BTreeSet::from(["mcp__a_b__c".to_string(), name.clone()]);
        let third = tool_name("a b", "c", &both);
        assert!(
            !both.contains(&third) && third.len() <= MAX_TOOL_NAME,
            "{third}"
        );
    }

    #[test]
    fn schemas_lose_what_providers_reject() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": {},
            "properties": {
                "x": {"anyOf": [{"type": "string"}, {"not": {"type": "null"}}]},
                "y": {"type": "object", "additionalProperties": {}},
                "z": {"type": "object", "additionalProperties": false}
            }
        });
        let clean = sanitise_schema(&schema);
        assert_eq!(
            clean,
            json!({
                "type": "object",
                "properties": {
                    "x": {"type": "string"},
                    "y": {"type": "object"},
                    "z": {"type": "object", "additionalProperties": false}
                }
            })
        );
        assert_eq!(
            sanitise_schema(&json!(null)),
            json!({"type": "object", "properties": {}})
        );
    }
}
