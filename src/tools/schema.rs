//! JSON-Schema subset validation of tool arguments. (Being built in part 4.)

use serde_json::{Map, Value};

/// Parses and validates the arguments of a call to `tool` against `schema`.
/// An `Err` is the error text for the model.
pub fn parse_arguments(
    tool: &str,
    arguments: &Value,
    schema: &Value,
) -> Result<Map<String, Value>, String> {
    let _ = schema;
    match arguments {
        Value::Object(map) => Ok(map.clone()),
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(format!(
                "Invalid arguments for tool {tool}: expected a JSON object"
            )),
            Err(e) => Err(format!(
                "Invalid arguments for tool {tool}: the arguments are not valid JSON ({e})"
            )),
        },
        Value::Null => Ok(Map::new()),
        _ => Err(format!(
            "Invalid arguments for tool {tool}: expected a JSON object"
        )),
    }
}
