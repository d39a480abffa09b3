//! JSON-Schema subset validation of tool arguments. It checks values against a schema and
//! words the problems for the model; it never coerces a value into another type.
//!
//! Supported keywords: `type` (`object`, `string`, `integer`, `number`, `boolean`, `array`,
//! `null`, or an array of these), `properties`, `required`, `additionalProperties` (`false`
//! or a schema), `enum`, `items`, `minimum`, `maximum`, `minItems`, `maxItems`. Other keywords
//! (`description`, `default`, …) are ignored. An integer is any JSON number without a
//! fractional part (`3` and `3.0`).
//!
//! One leniency: a top-level optional argument sent as `null` is treated as absent, because
//! models in strict structured-output mode send `null` for every optional field they skip.

use serde_json::{Map, Value};

/// At most this many problems are listed in one message.
const MAX_PROBLEMS: usize = 5;

/// Parses and validates the arguments of a call to `tool` against `schema`.
/// An `Err` is the error text for the model, naming each problem and what was expected.
pub fn parse_arguments(
    tool: &str,
    arguments: &Value,
    schema: &Value,
) -> Result<Map<String, Value>, String> {
    let mut map = match arguments {
        Value::Object(map) => map.clone(),
        Value::String(raw) if raw.trim().is_empty() => Map::new(),
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(map)) => map,
            Ok(other) => {
                return Err(format!(
                    "Invalid arguments for tool {tool}: expected a JSON object of arguments, got {}",
                    kind_with_article(&other)
                ));
            }
            Err(e) => {
                return Err(format!(
                    "Invalid arguments for tool {tool}: the arguments are not valid JSON ({e}) \
                     near `{}`. Send one JSON object that matches the tool's parameters",
                    excerpt_at(raw, e.line(), e.column())
                ));
            }
        },
        Value::Null => Map::new(),
        other => {
            return Err(format!(
                "Invalid arguments for tool {tool}: expected a JSON object of arguments, got {}",
                kind_with_article(other)
            ));
        }
    };
    drop_null_optionals(&mut map, schema);
    let mut problems = Vec::new();
    let as_value = Value::Object(map);
    check(&as_value, schema, &mut Vec::new(), &mut problems);
    let Value::Object(map) = as_value else {
        unreachable!("built from a map above")
    };
    if problems.is_empty() {
        return Ok(map);
    }
    let more = problems.len().saturating_sub(MAX_PROBLEMS);
    problems.truncate(MAX_PROBLEMS);
    let mut message = format!("Invalid arguments for tool {tool}: {}", problems.join("; "));
    if more > 0 {
        message.push_str(&format!(" (and {more} more problems)"));
    }
    Err(message)
}

/// Validates `value` against `schema`; returns every problem found, worded for the model.
pub fn validate(value: &Value, schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    check(value, schema, &mut Vec::new(), &mut problems);
    problems
}

/// Removes top-level `null` values of properties that are not required.
fn drop_null_optionals(map: &mut Map<String, Value>, schema: &Value) {
    let required = required_names(schema);
    let allows_null = |name: &str| {
        schema
            .get("properties")
            .and_then(|p| p.get(name))
            .is_some_and(|s| type_names(s).contains(&"null"))
    };
    map.retain(|name, value| {
        !(value.is_null() && !required.contains(&name.as_str()) && !allows_null(name))
    });
}

fn required_names(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A path segment: a property name or an array index.
enum Segment<'a> {
    Name(&'a str),
    Index(usize),
}

fn path_text(path: &[Segment<'_>]) -> String {
    if path.is_empty() {
        return "the arguments".to_string();
    }
    let mut text = String::from("\"");
    for (i, segment) in path.iter().enumerate() {
        match segment {
            Segment::Name(name) if i == 0 => text.push_str(name),
            Segment::Name(name) => {
                text.push('.');
                text.push_str(name);
            }
            Segment::Index(index) => text.push_str(&format!("[{index}]")),
        }
    }
    text.push('"');
    text
}

fn check<'a>(
    value: &'a Value,
    schema: &'a Value,
    path: &mut Vec<Segment<'a>>,
    problems: &mut Vec<String>,
) {
    let types = type_names(schema);
    let wrong_type = !types.is_empty() && !types.iter().any(|t| has_type(value, t));
    let not_allowed = schema
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|allowed| !allowed.iter().any(|a| same_value(a, value)));
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    let out_of_range = value.as_f64().is_some_and(|number| {
        bound("minimum").is_some_and(|min| number < min)
            || bound("maximum").is_some_and(|max| number > max)
    });
    // One message for all three: `describe` states what is accepted (the allowed values,
    // or the type with its range).
    if wrong_type || not_allowed || out_of_range {
        problems.push(format!(
            "{} must be {}, got {}",
            path_text(path),
            describe(schema),
            show(value)
        ));
        return;
    }
    match value {
        Value::Object(map) => check_object(map, schema, path, problems),
        Value::Array(items) => {
            let count = items.len() as u64;
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
                if count < min {
                    problems.push(format!(
                        "{} must have at least {min} item{}, got {count}",
                        path_text(path),
                        if min == 1 { "" } else { "s" }
                    ));
                }
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
                if count > max {
                    problems.push(format!(
                        "{} must have at most {max} items, got {count}",
                        path_text(path)
                    ));
                }
            }
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    path.push(Segment::Index(index));
                    check(item, item_schema, path, problems);
                    path.pop();
                }
            }
        }
        _ => {}
    }
}

fn check_object<'a>(
    map: &'a Map<String, Value>,
    schema: &'a Value,
    path: &mut Vec<Segment<'a>>,
    problems: &mut Vec<String>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    for name in required_names(schema) {
        if !map.contains_key(name) {
            path.push(Segment::Name(name));
            let expectation = properties
                .and_then(|p| p.get(name))
                .map(describe)
                .filter(|d| !d.is_empty())
                .map(|d| format!(" ({d})"))
                .unwrap_or_default();
            problems.push(format!(
                "{} is required but missing{expectation}",
                path_text(path)
            ));
            path.pop();
        }
    }
    for (name, value) in map {
        match properties.and_then(|p| p.get(name)) {
            Some(property_schema) => {
                path.push(Segment::Name(name));
                check(value, property_schema, path, problems);
                path.pop();
            }
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    path.push(Segment::Name(name));
                    let allowed = properties
                        .map(|p| p.keys().map(String::as_str).collect::<Vec<_>>().join(", "))
                        .unwrap_or_default();
                    problems.push(if allowed.is_empty() {
                        format!(
                            "unexpected argument {}; this takes no arguments",
                            path_text(path)
                        )
                    } else {
                        format!(
                            "unexpected argument {}; the allowed arguments are: {allowed}",
                            path_text(path)
                        )
                    });
                    path.pop();
                }
                Some(extra @ Value::Object(_)) => {
                    path.push(Segment::Name(name));
                    check(value, extra, path, problems);
                    path.pop();
                }
                _ => {}
            },
        }
    }
}

fn type_names(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(name)) => vec![name.as_str()],
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn has_type(value: &Value, type_name: &str) -> bool {
    match type_name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => match value {
            Value::Number(n) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            _ => false,
        },
        // An unknown type name constrains nothing we can check.
        _ => true,
    }
}

/// Equality for `enum`, treating `3` and `3.0` as the same number.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// What `schema` expects, in words: `an integer ≥ 1`, `one of "a", "b"`, `a string or null`.
fn describe(schema: &Value) -> String {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        return format!("one of {}", list.join(", "));
    }
    let types = type_names(schema);
    let mut words: Vec<String> = types
        .iter()
        .map(|t| match *t {
            "integer" => "an integer".to_string(),
            "array" => match schema.get("items").map(describe) {
                Some(items) if !items.is_empty() => format!("an array of {}", plural(&items)),
                _ => "an array".to_string(),
            },
            "object" => "an object".to_string(),
            "null" => "null".to_string(),
            other => format!("a {other}"),
        })
        .collect();
    let min = schema.get("minimum").and_then(Value::as_f64);
    let max = schema.get("maximum").and_then(Value::as_f64);
    let bound = match (min, max) {
        (Some(min), Some(max)) => format!(" between {} and {}", number(min), number(max)),
        (Some(min), None) => format!(" ≥ {}", number(min)),
        (None, Some(max)) => format!(" ≤ {}", number(max)),
        (None, None) => String::new(),
    };
    if !bound.is_empty() {
        for word in &mut words {
            if word == "an integer" || word == "a number" {
                word.push_str(&bound);
            }
        }
        if words.is_empty() {
            words.push(format!("a number{bound}"));
        }
    }
    words.join(" or ")
}

fn plural(description: &str) -> String {
    let bare = description
        .strip_prefix("an ")
        .or_else(|| description.strip_prefix("a "))
        .unwrap_or(description);
    match bare.split_once(' ') {
        Some((noun, rest)) => format!("{noun}s {rest}"),
        None => format!("{bare}s"),
    }
}

fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

fn kind_with_article(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A short rendering of `value` for a message: its JSON, cut to 60 characters.
fn show(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 60 {
        return text;
    }
    let cut: String = text.chars().take(57).collect();
    format!("{cut}... ({})", kind_with_article(value))
}

/// Up to 40 characters of `raw` ending at 1-based `line`/`column`, on one line.
fn excerpt_at(raw: &str, line: usize, column: usize) -> String {
    let offset: usize = raw
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .sum::<usize>()
        + column;
    let mut end = offset.min(raw.len());
    while !raw.is_char_boundary(end) {
        end -= 1;
    }
    let mut start = end.saturating_sub(40);
    while !raw.is_char_boundary(start) {
        start -= 1;
    }
    raw[start..end].replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read_file_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string"},
                "offset": {"type": "integer", "minimum": 1},
                "limit": {"type": "integer", "minimum": 1},
            },
            "required": ["file_path"],
            "additionalProperties": false,
        })
    }

    fn error(arguments: Value) -> String {
        parse_arguments("read_file", &arguments, &read_file_schema()).unwrap_err()
    }

    #[test]
    fn valid_arguments_pass_through_unchanged() {
        let args = json!({"file_path": "a.rs", "offset": 3});
        let map = parse_arguments("read_file", &args, &read_file_schema()).unwrap();
        assert_eq!(Value::Object(map), args);
    }

    #[test]
    fn arguments_given_as_a_json_string_are_parsed() {
        let args = json!("{\"file_path\": \"a.rs\"}");
        let map = parse_arguments("read_file", &args, &read_file_schema()).unwrap();
        assert_eq!(map["file_path"], "a.rs");
    }

    #[test]
    fn a_wrong_type_names_the_argument_and_the_expectation() {
        assert_eq!(
            error(json!({"file_path": "a", "offset": "ten"})),
            "Invalid arguments for tool read_file: \"offset\" must be an integer ≥ 1, got \"ten\""
        );
    }

    #[test]
    fn a_value_below_the_minimum_is_rejected() {
        assert_eq!(
            error(json!({"file_path": "a", "limit": 0})),
            "Invalid arguments for tool read_file: \"limit\" must be an integer ≥ 1, got 0"
        );
    }

    #[test]
    fn a_missing_required_argument_is_named() {
        assert_eq!(
            error(json!({"offset": 2})),
            "Invalid arguments for tool read_file: \"file_path\" is required but missing (a string)"
        );
    }

    #[test]
    fn an_unexpected_property_is_named_with_the_allowed_ones() {
        let message = error(json!({"file_path": "a", "path": "b"}));
        assert_eq!(
            message,
            "Invalid arguments for tool read_file: unexpected argument \"path\"; \
             the allowed arguments are: file_path, limit, offset"
        );
    }

    #[test]
    fn invalid_json_is_reported_with_position_and_excerpt() {
        let message = error(json!("{\"file_path\": \"a.rs\" \"offset\": 2}"));
        assert!(message.starts_with("Invalid arguments for tool read_file: the arguments are not valid JSON (expected `,` or `}` at line 1 column 22)"), "{message}");
        assert!(
            message.contains("near `{\"file_path\": \"a.rs\" \"`"),
            "{message}"
        );
    }

    #[test]
    fn arguments_that_are_not_an_object_are_rejected() {
        assert_eq!(
            error(json!("[1, 2]")),
            "Invalid arguments for tool read_file: expected a JSON object of arguments, got an array"
        );
        assert_eq!(
            error(json!(7)),
            "Invalid arguments for tool read_file: expected a JSON object of arguments, got a number"
        );
    }

    #[test]
    fn null_for_an_optional_argument_counts_as_absent() {
        let map = parse_arguments(
            "read_file",
            &json!({"file_path": "a", "offset": null}),
            &read_file_schema(),
        )
        .unwrap();
        assert!(!map.contains_key("offset"));
        assert_eq!(
            error(json!({"file_path": null})),
            "Invalid arguments for tool read_file: \"file_path\" must be a string, got null"
        );
    }

    #[test]
    fn integers_written_with_a_zero_fraction_are_integers() {
        assert!(
            parse_arguments(
                "read_file",
                &json!({"file_path": "a", "offset": 2.0}),
                &read_file_schema()
            )
            .is_ok()
        );
        assert!(error(json!({"file_path": "a", "offset": 2.5})).contains("got 2.5"));
    }

    #[test]
    fn nested_paths_name_array_items_and_object_fields() {
        let schema = json!({
            "type": "object",
            "properties": {
                "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "options": {
                    "type": "object",
                    "properties": {"mode": {"enum": ["fast", "full"]}},
                    "additionalProperties": false
                }
            }
        });
        let problems = validate(
            &json!({"paths": ["a", 5], "options": {"mode": "slow", "x": 1}}),
            &schema,
        );
        assert_eq!(
            problems,
            vec![
                "\"options.mode\" must be one of \"fast\", \"full\", got \"slow\"".to_string(),
                "unexpected argument \"options.x\"; the allowed arguments are: mode".to_string(),
                "\"paths[1]\" must be a string, got 5".to_string(),
            ]
        );
        assert_eq!(
            validate(&json!({"paths": []}), &schema),
            vec!["\"paths\" must have at least 1 item, got 0".to_string()]
        );
    }

    #[test]
    fn type_arrays_accept_any_listed_type() {
        let schema = json!({"type": "object", "properties": {"n": {"type": ["integer", "null"], "maximum": 9}}});
        assert!(validate(&json!({"n": null}), &schema).is_empty());
        assert!(validate(&json!({"n": 4}), &schema).is_empty());
        assert_eq!(
            validate(&json!({"n": "4"}), &schema),
            vec!["\"n\" must be an integer ≤ 9 or null, got \"4\"".to_string()]
        );
    }

    #[test]
    fn many_problems_are_capped() {
        let schema = json!({"type": "object", "properties": {}, "additionalProperties": false});
        let args = json!({"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1, "g": 1});
        let message = parse_arguments("t", &args, &schema).unwrap_err();
        assert!(message.ends_with("(and 2 more problems)"), "{message}");
        assert!(message.contains("unexpected argument \"a\"; this takes no arguments"));
    }

    #[test]
    fn long_values_are_shortened_in_messages() {
        let message = error(json!({"file_path": ["x".repeat(500)]}));
        assert!(message.len() < 200, "{message}");
        assert!(message.contains("... (an array)"), "{message}");
    }
}
