//! Tool output truncation (spec §5.1–5.3): characters first, then lines. (Being built in part 4.)

use std::collections::BTreeMap;

/// A truncated output and how much was cut.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Truncated {
    /// The text for the model.
    pub text: String,
    /// Characters removed by character truncation.
    pub removed_chars: usize,
    /// Lines removed by line truncation.
    pub removed_lines: usize,
}

/// Truncates `output` of `tool_name` with the spec's defaults, overridden per tool by
/// `char_limits` and `line_limits`.
pub fn truncate_tool_output(
    output: &str,
    tool_name: &str,
    char_limits: &BTreeMap<String, usize>,
    line_limits: &BTreeMap<String, usize>,
) -> Truncated {
    let _ = (tool_name, char_limits, line_limits);
    Truncated {
        text: output.to_string(),
        removed_chars: 0,
        removed_lines: 0,
    }
}
