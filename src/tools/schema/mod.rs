//! JSON-Schema subset validation of tool arguments and of structured final answers. It
//! checks values against a schema and words the problems for the model; it never coerces a
//! value into another type.
//!
//! Supported keywords: `type` (`object`, `string`, `integer`, `number`, `boolean`, `array`,
//! `null`, or an array of these), `properties`, `required`, `additionalProperties` (`false`
//! or a schema), `enum`, `const`, `items`, `minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum`, `minItems`, `maxItems`, `minLength`, `maxLength`, `pattern`, `anyOf`,
//! `oneOf`, `allOf`, and `$ref` to a place in the same schema (`#/$defs/…`). Other keywords
//! (`description`, `default`, …) are ignored. An integer is any JSON number without a
//! fractional part (`3` and `3.0`).
//!
//! A schema is the host's, but a value is the model's: the walk is bounded whatever either
//! holds. It follows at most 64 levels of nesting and `$ref` hops and at most 100 000
//! schema checks per value (then it reports that the value could not be checked), and a
//! `pattern` is compiled with a size limit (an oversized or invalid one is reported).
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
    let as_value = Value::Object(map);
    let mut problems = validate(&as_value, schema);
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
    let mut walk = Walk::new(schema);
    check(value, schema, &mut walk);
    walk.problems
}

/// Deepest nesting (values and `$ref` hops) the walk follows.
const MAX_DEPTH: usize = 64;
/// Most schema checks for one value (`anyOf` inside `anyOf` multiplies them).
const MAX_STEPS: usize = 100_000;
/// Largest compiled `pattern`.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// One validation: the schema's root (for `$ref`), where the walk is, what it found.
struct Walk<'a> {
    root: &'a Value,
    path: Vec<Segment<'a>>,
    problems: Vec<String>,
    depth: usize,
    steps: usize,
    /// Set once the walk gave up (too deep or too long); reported once.
    gave_up: bool,
    patterns: Vec<(&'a str, Option<regex::Regex>)>,
}

impl<'a> Walk<'a> {
    fn new(root: &'a Value) -> Walk<'a> {
        Walk {
            root,
            path: Vec::new(),
            problems: Vec::new(),
            depth: 0,
            steps: 0,
            gave_up: false,
            patterns: Vec::new(),
        }
    }

    /// A walk of the same place on its own (for one branch of `anyOf`/`oneOf`): its
    /// problems are its own, its steps count toward this one's.
    fn branch(&self) -> Walk<'a> {
        Walk {
            root: self.root,
            path: self.path.clone(),
            problems: Vec::new(),
            depth: self.depth,
            steps: self.steps,
            gave_up: false,
            patterns: Vec::new(),
        }
    }

    fn problem(&mut self, text: String) {
        self.problems.push(text);
    }

    fn here(&self) -> String {
        path_text(&self.path)
    }

    /// Counts one step; `false` (after reporting it once) when the walk must stop.
    fn step(&mut self) -> bool {
        self.steps += 1;
        if self.depth < MAX_DEPTH && self.steps <= MAX_STEPS {
            return true;
        }
        if !self.gave_up {
            self.gave_up = true;
            let what = if self.depth >= MAX_DEPTH {
                "is nested too deeply"
            } else {
                "is too large"
            };
            let here = self.here();
            self.problem(format!("{here} {what} to be checked against the schema"));
        }
        false
    }

    /// Whether `text` matches `pattern` (`None`: the pattern is unusable, reported).
    fn matches(&mut self, pattern: &'a str, text: &str) -> Option<bool> {
        let index = match self.patterns.iter().position(|(p, _)| *p == pattern) {
            Some(index) => index,
            None => {
                let compiled = regex::RegexBuilder::new(pattern)
                    .size_limit(PATTERN_SIZE_LIMIT)
                    .build()
                    .ok();
                self.patterns.push((pattern, compiled));
                self.patterns.len() - 1
            }
        };
        let matched = self.patterns[index].1.as_ref().map(|re| re.is_match(text));
        if matched.is_none() {
            let here = self.here();
            self.problem(format!(
                "{here} cannot be checked: the schema's pattern {} is not a usable regular \
                 expression",
                show(&Value::String(pattern.to_string()))
            ));
        }
        matched
    }
}

/// The schema a `$ref` points to, following up to [`MAX_DEPTH`] hops; only references into
/// the same schema (`#`, `#/$defs/name`, any JSON pointer after `#`) resolve.
fn resolve<'a>(schema: &'a Value, root: &'a Value) -> Result<&'a Value, String> {
    let mut current = schema;
    for _ in 0..MAX_DEPTH {
        let Some(reference) = current.get("$ref").and_then(Value::as_str) else {
            return Ok(current);
        };
        let Some(pointer) = reference.strip_prefix('#') else {
            return Err(format!("the schema refers to {reference}, outside itself"));
        };
        current = root
            .pointer(pointer)
            .ok_or_else(|| format!("the schema's reference {reference} leads nowhere"))?;
    }
    Err("the schema's references go round in a circle".to_string())
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
#[derive(Clone, Copy)]
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

fn check<'a>(value: &'a Value, schema: &'a Value, walk: &mut Walk<'a>) {
    if !walk.step() {
        return;
    }
    let schema = match resolve(schema, walk.root) {
        Ok(schema) => schema,
        Err(message) => {
            let here = walk.here();
            walk.problem(format!("{here} cannot be checked: {message}"));
            return;
        }
    };
    let types = type_names(schema);
    let wrong_type = !types.is_empty() && !types.iter().any(|t| has_type(value, t));
    let not_allowed = schema
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|allowed| !allowed.iter().any(|a| same_value(a, value)))
        || schema.get("const").is_some_and(|c| !same_value(c, value));
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    let out_of_range = value.as_f64().is_some_and(|number| {
        bound("minimum").is_some_and(|min| number < min)
            || bound("maximum").is_some_and(|max| number > max)
            || bound("exclusiveMinimum").is_some_and(|min| number <= min)
            || bound("exclusiveMaximum").is_some_and(|max| number >= max)
    });
    // One message for all three: `describe` states what is accepted (the allowed values,
    // or the type with its range).
    if wrong_type || not_allowed || out_of_range {
        let here = walk.here();
        walk.problem(format!(
            "{here} must be {}, got {}",
            describe(schema),
            show(value)
        ));
        return;
    }
    check_combinations(value, schema, walk);
    walk.depth += 1;
    match value {
        Value::Object(map) => check_object(map, schema, walk),
        Value::Array(items) => check_array(items, schema, walk),
        Value::String(text) => check_string(text, schema, walk),
        _ => {}
    }
    walk.depth -= 1;
}

/// `allOf` (every branch), `anyOf` (one at least) and `oneOf` (exactly one).
fn check_combinations<'a>(value: &'a Value, schema: &'a Value, walk: &mut Walk<'a>) {
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for branch in all {
            check(value, branch, walk);
        }
    }
    for (key, exactly_one) in [("anyOf", false), ("oneOf", true)] {
        let Some(branches) = schema.get(key).and_then(Value::as_array) else {
            continue;
        };
        let mut valid = 0;
        let mut closest: Option<Vec<String>> = None;
        for branch in branches {
            let mut alone = walk.branch();
            check(value, branch, &mut alone);
            walk.steps = alone.steps;
            if alone.gave_up {
                // The whole walk is over its bounds: pass on why, once.
                walk.gave_up = true;
                walk.problems.extend(alone.problems.pop());
                return;
            }
            if alone.problems.is_empty() {
                valid += 1;
            } else if closest
                .as_ref()
                .is_none_or(|c| alone.problems.len() < c.len())
            {
                closest = Some(alone.problems);
            }
        }
        let here = walk.here();
        if valid == 0 && !branches.is_empty() {
            let why = closest.unwrap_or_default().join("; ");
            walk.problem(format!(
                "none of the {} allowed forms fits {here} (the closest: {why})",
                branches.len()
            ));
        } else if exactly_one && valid > 1 {
            walk.problem(format!(
                "{valid} of the allowed forms fit {here}, and exactly one must"
            ));
        }
    }
}

fn check_array<'a>(items: &'a [Value], schema: &'a Value, walk: &mut Walk<'a>) {
    let count = items.len() as u64;
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
        if count < min {
            let here = walk.here();
            walk.problem(format!(
                "{here} must have at least {min} item{}, got {count}",
                if min == 1 { "" } else { "s" }
            ));
        }
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
        if count > max {
            let here = walk.here();
            walk.problem(format!("{here} must have at most {max} items, got {count}"));
        }
    }
    if let Some(item_schema) = schema.get("items") {
        for (index, item) in items.iter().enumerate() {
            walk.path.push(Segment::Index(index));
            check(item, item_schema, walk);
            walk.path.pop();
        }
    }
}

fn check_string<'a>(text: &str, schema: &'a Value, walk: &mut Walk<'a>) {
    let length = text.chars().count() as u64;
    let min = schema.get("minLength").and_then(Value::as_u64);
    let max = schema.get("maxLength").and_then(Value::as_u64);
    if min.is_some_and(|min| length < min) || max.is_some_and(|max| length > max) {
        let wanted = match (min, max) {
            (Some(min), Some(max)) => format!("between {min} and {max} characters"),
            (Some(min), None) => format!("at least {min} characters"),
            (None, _) => format!("at most {} characters", max.unwrap_or_default()),
        };
        let here = walk.here();
        walk.problem(format!("{here} must be {wanted} long, got {length}"));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        if walk.matches(pattern, text) == Some(false) {
            let here = walk.here();
            walk.problem(format!(
                "{here} must match the pattern {}, got {}",
                show(&Value::String(pattern.to_string())),
                show(&Value::String(text.to_string()))
            ));
        }
    }
}

fn check_object<'a>(map: &'a Map<String, Value>, schema: &'a Value, walk: &mut Walk<'a>) {
    let properties = schema.get("properties").and_then(Value::as_object);
    for name in required_names(schema) {
        if !map.contains_key(name) {
            walk.path.push(Segment::Name(name));
            let expectation = properties
                .and_then(|p| p.get(name))
                .map(describe)
                .filter(|d| !d.is_empty())
                .map(|d| format!(" ({d})"))
                .unwrap_or_default();
            let here = walk.here();
            walk.problem(format!("{here} is required but missing{expectation}"));
            walk.path.pop();
        }
    }
    for (name, value) in map {
        match properties.and_then(|p| p.get(name)) {
            Some(property_schema) => {
                walk.path.push(Segment::Name(name));
                check(value, property_schema, walk);
                walk.path.pop();
            }
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    walk.path.push(Segment::Name(name));
                    let allowed = properties
                        .map(|p| p.keys().map(String::as_str).collect::<Vec<_>>().join(", "))
                        .unwrap_or_default();
                    let here = walk.here();
                    walk.problem(if allowed.is_empty() {
                        format!("unexpected argument {here}; this takes no arguments")
                    } else {
                        format!("unexpected argument {here}; the allowed arguments are: {allowed}")
                    });
                    walk.path.pop();
                }
                Some(extra @ Value::Object(_)) => {
                    walk.path.push(Segment::Name(name));
                    check(value, extra, walk);
                    walk.path.pop();
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
    if let Some(constant) = schema.get("const") {
        return format!("exactly {}", show(constant));
    }
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
mod tests;
