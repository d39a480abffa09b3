//! Unit tests of the schema validator: messages, keywords, and the bounds on hostile
//! schemas.

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
    let schema =
        json!({"type": "object", "properties": {"n": {"type": ["integer", "null"], "maximum": 9}}});
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
#[test]
fn const_lengths_patterns_and_exclusive_bounds_are_checked() {
    let schema = json!({"type": "object", "properties": {
        "kind": {"const": "report"},
        "id": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[a-z]+$"},
        "score": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    }});
    assert!(
        validate(
            &json!({"kind": "report", "id": "abc", "score": 0.5}),
            &schema
        )
        .is_empty()
    );
    assert_eq!(
        validate(
            &json!({"kind": "other", "id": "abcdef", "score": 1}),
            &schema
        ),
        vec![
            "\"id\" must be between 2 and 4 characters long, got 6".to_string(),
            "\"kind\" must be exactly \"report\", got \"other\"".to_string(),
            "\"score\" must be a number, got 1".to_string(),
        ]
    );
    assert_eq!(
        validate(&json!({"id": "AB"}), &schema),
        vec!["\"id\" must match the pattern \"^[a-z]+$\", got \"AB\"".to_string()]
    );
}

#[test]
fn any_of_one_of_and_refs_follow_the_schema() {
    let schema = json!({
        "$defs": {"finding": {"type": "object", "required": ["file"],
                              "properties": {"file": {"type": "string"}}}},
        "type": "object",
        "properties": {
            "findings": {"type": "array", "items": {"$ref": "#/$defs/finding"}},
            "status": {"anyOf": [{"const": "pass"}, {"type": "integer"}]},
            "exit": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
        }
    });
    assert!(
        validate(
            &json!({"findings": [{"file": "a.rs"}], "status": "pass"}),
            &schema
        )
        .is_empty()
    );
    assert_eq!(
        validate(&json!({"findings": [{"line": 3}]}), &schema),
        vec!["\"findings[0].file\" is required but missing (a string)".to_string()]
    );
    let problems = validate(&json!({"status": "fail", "exit": 2}), &schema);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].starts_with("2 of the allowed forms fit \"exit\""),
        "{problems:?}"
    );
    assert!(
        problems[1].starts_with(
            "none of the 2 allowed forms fits \"status\" (the closest: \"status\" must be"
        ),
        "{problems:?}"
    );
}

#[test]
fn hostile_schemas_are_reported_not_followed() {
    let circle = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                        "$ref": "#/$defs/a"});
    assert_eq!(
        validate(&json!(1), &circle),
        vec![
            "the arguments cannot be checked: the schema's references go round in a circle"
                .to_string()
        ]
    );
    let outside = json!({"$ref": "https://example.com/schema.json"});
    assert!(validate(&json!(1), &outside)[0].contains("outside itself"));
    let bad_pattern = json!({"type": "string", "pattern": "(unclosed"});
    assert!(validate(&json!("x"), &bad_pattern)[0].contains("not a usable regular expression"));
    // 30 definitions, each an anyOf of the one before twice: a small schema whose
    // walk has 2^30 branches unless it is bounded.
    let mut defs = serde_json::Map::new();
    defs.insert("d0".to_string(), json!({"type": "integer"}));
    for level in 1..=30 {
        let below = format!("#/$defs/d{}", level - 1);
        defs.insert(
            format!("d{level}"),
            json!({"anyOf": [{"$ref": below}, {"$ref": below}]}),
        );
    }
    let nested = json!({"$defs": defs, "$ref": "#/$defs/d30"});
    let problems = validate(&json!("text"), &nested);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("too large to be checked")),
        "{problems:?}"
    );
    let mut deep = json!(0);
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let problems = validate(&deep, &json!({"items": {"$ref": "#"}}));
    assert!(
        problems.iter().any(|p| p.contains("nested too deeply")),
        "{problems:?}"
    );
}
