//! Lenient field readers for Chat Completions chunks. Compatible servers differ in small
//! ways (a count sent as `null`, `arguments` sent as an object, `content` as a list); one
//! odd field must not turn a whole answer into a stream error, so these read what they can
//! and let the rest go. They never allocate for a plain string without escapes.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// A string; anything else (null, a number, an object, a list) reads as `None`.
pub(super) fn text<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    deserializer.deserialize_any(TextVisitor { json: false })
}

/// A string, or any other JSON value except null as its compact JSON text (for tool-call
/// `arguments` that a server sent as an object).
pub(super) fn json_text<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    deserializer.deserialize_any(TextVisitor { json: true })
}

/// A non-negative integer; anything else reads as `None`.
pub(super) fn count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    Ok(
        match <Value as serde::Deserialize>::deserialize(deserializer)? {
            Value::Number(n) => n.as_u64(),
            _ => None,
        },
    )
}

struct TextVisitor {
    json: bool,
}

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(self.json.then(|| Cow::Owned(v.to_string())))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(self.json.then(|| Cow::Owned(v.to_string())))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(self.json.then(|| Cow::Owned(v.to_string())))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(self.json.then(|| Cow::Owned(v.to_string())))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        if self.json {
            let value: Value =
                serde::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
            Ok(Some(Cow::Owned(value.to_string())))
        } else {
            IgnoredAny.visit_map(map)?;
            Ok(None)
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        if self.json {
            let value: Value =
                serde::Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
            Ok(Some(Cow::Owned(value.to_string())))
        } else {
            IgnoredAny.visit_seq(seq)?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Probe<'a> {
        #[serde(default, borrow, deserialize_with = "text")]
        text: Option<Cow<'a, str>>,
        #[serde(default, borrow, deserialize_with = "json_text")]
        json: Option<Cow<'a, str>>,
        #[serde(default, deserialize_with = "count")]
        count: Option<u64>,
    }

    #[test]
    fn odd_values_read_as_none_or_as_json_text() {
        let p: Probe =
            serde_json::from_str(r#"{"text":[{"type":"text"}],"json":{"a":1},"count":null}"#)
                .unwrap();
        assert_eq!(
            (p.text, p.json.as_deref(), p.count),
            (None, Some("{\"a\":1}"), None)
        );
        let p: Probe =
            serde_json::from_str(r#"{"text":"plain","json":"{\"a\"","count":7}"#).unwrap();
        assert!(
            matches!(p.text, Some(Cow::Borrowed("plain"))),
            "no copy for a plain string"
        );
        assert_eq!((p.json.as_deref(), p.count), (Some("{\"a\""), Some(7)));
        let p: Probe = serde_json::from_str(r#"{"text":"esc\u00e9"}"#).unwrap();
        assert_eq!(p.text.as_deref(), Some("escé"));
    }
}
