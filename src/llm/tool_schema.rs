//! [`ToolSchema`]: a tool's parameter schema held as compact JSON text, and the
//! `tool_schema!` macro that writes a built-in tool's schema at compile time.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::json::RawJson;

/// The JSON Schema of a tool's arguments (its root is an `object`), held as compact JSON
/// text and shared by its clones.
///
/// Every model call repeats every tool's schema, so the schema is written out once: a
/// request body copies the text instead of serialising a tree of values again, and a copy
/// of a [`ToolDefinition`](super::ToolDefinition) shares it instead of copying the tree.
/// The built-in tools' texts are written at compile time. The parsed [`Value`] is built
/// when it is first read ([`value`](Self::value), or through `Deref`: `schema["required"]`),
/// for argument validation and for hosts that look inside.
///
/// Make one from a `serde_json::Value`:
///
/// ```
/// use agentloop::llm::ToolSchema;
/// use agentloop::serde_json::json;
///
/// let schema: ToolSchema = json!({
///     "type": "object",
///     "properties": {"path": {"type": "string"}},
///     "required": ["path"]
/// })
/// .into();
/// assert_eq!(schema["required"][0], "path");
/// assert_eq!(
///     schema.as_json(),
///     r#"{"properties":{"path":{"type":"string"}},"required":["path"],"type":"object"}"#
/// );
/// ```
///
/// A schema cannot be changed in place; to change one, change its value and make a new
/// schema of it (`let mut value = schema.value().clone(); …; schema = value.into();`).
#[derive(Clone)]
pub struct ToolSchema(Arc<Inner>);

struct Inner {
    text: Text,
    /// The parsed schema, once something read it.
    value: OnceLock<Value>,
}

enum Text {
    /// A built-in schema, minified at compile time (`tool_schema!`); checked by the tests.
    Static(&'static str, OnceLock<Box<RawValue>>),
    /// Written from a value by `serde_json`.
    Written(Box<RawValue>),
}

impl ToolSchema {
    /// The schema's compact JSON text, as requests carry it.
    pub fn as_json(&self) -> &str {
        match &self.0.text {
            Text::Static(text, _) => text,
            Text::Written(raw) => raw.get(),
        }
    }

    /// The schema as a JSON value, parsed when first asked for.
    pub fn value(&self) -> &Value {
        self.0.value.get_or_init(|| {
            // The text is valid JSON: written by serde_json, or minified at compile time
            // from a JSON literal and parsed by the tests.
            serde_json::from_str(self.as_json()).unwrap_or(Value::Null)
        })
    }

    /// The text for a request body: written as it is by the crate's JSON writer.
    pub(crate) fn raw(&self) -> RawJson<'_> {
        RawJson(self.as_json())
    }

    fn raw_value(&self) -> &RawValue {
        match &self.0.text {
            Text::Static(text, raw) => raw.get_or_init(|| {
                RawValue::from_string((*text).to_string())
                    .unwrap_or_else(|_| RawValue::from_string("{}".to_string()).unwrap())
            }),
            Text::Written(raw) => raw,
        }
    }
}

impl From<Value> for ToolSchema {
    fn from(value: Value) -> ToolSchema {
        let raw = serde_json::value::to_raw_value(&value)
            .unwrap_or_else(|_| RawValue::from_string("{}".to_string()).unwrap());
        ToolSchema(Arc::new(Inner {
            text: Text::Written(raw),
            value: OnceLock::from(value),
        }))
    }
}

impl Deref for ToolSchema {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl PartialEq for ToolSchema {
    fn eq(&self, other: &ToolSchema) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || self.as_json() == other.as_json()
            || self.value() == other.value()
    }
}

impl fmt::Debug for ToolSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ToolSchema").field(&self.as_json()).finish()
    }
}

impl Serialize for ToolSchema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ToolSchema {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ToolSchema, D::Error> {
        Value::deserialize(deserializer).map(ToolSchema::from)
    }
}

/// The schema `tool_schema!` wrote, as a [`ToolSchema`] (shared from then on).
pub(crate) fn from_static(inner: &'static OnceLock<ToolSchema>, text: &'static str) -> ToolSchema {
    inner
        .get_or_init(|| {
            ToolSchema(Arc::new(Inner {
                text: Text::Static(text, OnceLock::new()),
                value: OnceLock::new(),
            }))
        })
        .clone()
}

/// A built-in tool's schema from a JSON literal, minified at compile time: the same
/// literal `serde_json::json!` takes (no Rust expressions inside), with Rust's string
/// escapes limited to JSON's (`\"`, `\\`, `\/`, `\n`, `\r`, `\t`) and `\` line
/// continuations. The text is made once per process and shared by every copy.
macro_rules! tool_schema {
    ($($json:tt)+) => {{
        const SOURCE: &str = stringify!($($json)+);
        const MINIFIED: ([u8; SOURCE.len()], usize) = $crate::llm::tool_schema::minify(SOURCE);
        const TEXT: &str = $crate::llm::tool_schema::minified_str(&MINIFIED);
        static SHARED: ::std::sync::OnceLock<$crate::llm::ToolSchema> =
            ::std::sync::OnceLock::new();
        $crate::llm::tool_schema::from_static(&SHARED, TEXT)
    }};
}
pub(crate) use tool_schema;

/// JSON text from `stringify!` of a JSON literal with the whitespace between tokens
/// removed and Rust's line continuations inside strings resolved: the bytes and their
/// count. Fails the build on an escape JSON does not share with Rust.
pub(crate) const fn minify<const N: usize>(source: &str) -> ([u8; N], usize) {
    let bytes = source.as_bytes();
    let mut out = [0u8; N];
    let (mut i, mut len) = (0, 0);
    let mut in_string = false;
    while i < bytes.len() {
        let byte = bytes[i];
        i += 1;
        if !in_string {
            if matches!(byte, b' ' | b'\n' | b'\r' | b'\t') {
                continue;
            }
            in_string = byte == b'"';
            out[len] = byte;
            len += 1;
            continue;
        }
        match byte {
            b'"' => in_string = false,
            b'\\' => {
                assert!(i < bytes.len(), "a schema string ends in a backslash");
                let next = bytes[i];
                i += 1;
                if next == b'\n' {
                    // A line continuation: the newline and the indentation after it go.
                    while i < bytes.len() && matches!(bytes[i], b' ' | b'\n' | b'\r' | b'\t') {
                        i += 1;
                    }
                    continue;
                }
                assert!(
                    matches!(next, b'"' | b'\\' | b'/' | b'n' | b'r' | b't'),
                    "a schema string uses an escape that JSON does not share with Rust"
                );
                out[len] = byte;
                out[len + 1] = next;
                len += 2;
                continue;
            }
            _ => {}
        }
        out[len] = byte;
        len += 1;
    }
    assert!(!in_string, "a schema string is not closed");
    (out, len)
}

/// The text [`minify`] made.
pub(crate) const fn minified_str<const N: usize>(
    minified: &'static ([u8; N], usize),
) -> &'static str {
    let (bytes, _) = minified.0.split_at(minified.1);
    match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(_) => panic!("a schema is not UTF-8"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The same literal through `tool_schema!` and through `json!`.
    macro_rules! both {
        ($($json:tt)+) => {
            (tool_schema!($($json)+), json!($($json)+))
        };
    }

    #[test]
    fn a_literal_is_minified_at_compile_time_into_the_json_serde_json_reads() {
        let (schema, expected) = both!({
            "type": "object",
            "properties": {
                "count": {"type": "integer", "minimum": -1, "maximum": 1.5e3},
                "text": {
                    "type": "string",
                    "description": "Quotes \"inside\", a back\\slash, a tab\t, a / and a long \
                                    line continued, with spaces kept : [ ] { } ,"
                },
                "flag": {"type": ["boolean", "null"], "default": false, "enum": [true, null]}
            },
            "required": ["count"],
            "additionalProperties": false
        });
        assert_eq!(
            schema.as_json(),
            concat!(
                r#"{"type":"object","properties":{"count":{"type":"integer","minimum":-1,"#,
                r#""maximum":1.5e3},"text":{"type":"string","description":"Quotes \"inside\", "#,
                r#"a back\\slash, a tab\t, a / and a long line continued, with spaces kept : "#,
                r#"[ ] { } ,"},"flag":{"type":["boolean","null"],"default":false,"#,
                r#""enum":[true,null]}},"required":["count"],"additionalProperties":false}"#
            )
        );
        assert_eq!(*schema.value(), expected);
        assert_eq!(schema, ToolSchema::from(expected));
    }

    #[test]
    fn a_static_schema_is_made_once_and_shared_by_every_copy() {
        fn make() -> ToolSchema {
            tool_schema!({"type": "object"})
        }
        let (a, b) = (make(), make());
        assert!(Arc::ptr_eq(&a.0, &b.0), "the schema was made twice");
        assert!(std::ptr::eq(a.value(), b.clone().value()));
    }

    #[test]
    fn serde_json_and_the_crate_writer_copy_the_text_as_it_is() {
        let from_value: ToolSchema = json!({"type": "object", "required": ["a"]}).into();
        let from_literal = tool_schema!({"type": "object", "required": ["a"]});
        for schema in [&from_value, &from_literal] {
            let wrapped = json!({"schema": schema});
            assert_eq!(wrapped["schema"], *schema.value());
            let text = serde_json::to_string(&vec![schema]).unwrap();
            assert_eq!(text, format!("[{}]", schema.as_json()));
            let ours = crate::json::to_vec(&vec![schema]).unwrap();
            assert_eq!(String::from_utf8(ours).unwrap(), text);
            let ours = crate::json::to_vec(&[schema.raw()]).unwrap();
            assert_eq!(String::from_utf8(ours).unwrap(), text);
            let back: ToolSchema = serde_json::from_str(&text[1..text.len() - 1]).unwrap();
            assert_eq!(&back, schema);
        }
        assert_eq!(
            serde_json::to_string(&from_literal.raw()).unwrap(),
            from_literal.as_json(),
            "serde_json's RawValue protocol changed: RAW_TOKEN must follow it"
        );
    }

    #[test]
    fn a_schema_reads_through_deref_and_prints_its_text() {
        let schema: ToolSchema = json!({"type": "object", "properties": {}}).into();
        assert_eq!(schema["type"], "object");
        assert!(schema.get("properties").is_some_and(Value::is_object));
        assert_eq!(
            format!("{schema:?}"),
            r#"ToolSchema("{\"properties\":{},\"type\":\"object\"}")"#
        );
    }
}
