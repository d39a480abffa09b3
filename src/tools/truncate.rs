//! Tool output truncation (spec §5.1–5.3): characters first, then lines. Pure string work;
//! it never reads configuration or the environment itself.
//!
//! Character counts are Unicode scalar values (`char`s), and every cut falls on a char
//! boundary, so multi-byte text never panics. The work is linear in the input and touches
//! only its two ends after one counting pass: a 10 MB single line costs one `chars().count()`
//! plus walks over the kept head and tail.
//!
//! Defaults (spec §5.2, and ours for tools the spec does not list):
//!
//! | tool | chars | mode | lines |
//! |---|---|---|---|
//! | `read_file` | 50,000 | head_tail | – |
//! | `shell` | 30,000 | head_tail | 256 |
//! | `grep` | 20,000 | tail | 200 |
//! | `glob` | 20,000 | tail | 500 |
//! | `edit_file` | 10,000 | tail | – |
//! | `apply_patch` | 10,000 | tail | – |
//! | `write_file` | 1,000 | tail | – |
//! | `spawn_agent` | 20,000 | head_tail | – |
//! | `list_dir` (ours) | 20,000 | tail | – |
//! | `read_many_files` (ours) | 100,000 | head_tail | – |
//! | `wait` (ours, subagent output) | 20,000 | head_tail | – |
//! | any other tool (ours) | 30,000 | head_tail | – |
//!
//! With an odd character limit the head keeps `limit / 2` characters and the tail the rest,
//! so the text kept is exactly `limit` characters and the marker's count is exact.

use std::borrow::Cow;
use std::collections::BTreeMap;

/// Which part of an over-long output is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TruncationMode {
    /// Keep the beginning and the end; cut the middle.
    HeadTail,
    /// Keep the end; cut the beginning.
    Tail,
}

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

/// The default character limit and mode for `tool_name` (table in the module docs).
pub fn default_char_limit(tool_name: &str) -> (usize, TruncationMode) {
    use TruncationMode::{HeadTail, Tail};
    match tool_name {
        "read_file" => (50_000, HeadTail),
        "shell" => (30_000, HeadTail),
        "grep" => (20_000, Tail),
        "glob" => (20_000, Tail),
        "edit_file" => (10_000, Tail),
        "apply_patch" => (10_000, Tail),
        "write_file" => (1_000, Tail),
        "spawn_agent" => (20_000, HeadTail),
        "list_dir" => (20_000, Tail),
        "read_many_files" => (100_000, HeadTail),
        "wait" => (20_000, HeadTail),
        _ => (30_000, HeadTail),
    }
}

/// The default line limit for `tool_name`, if it has one (shell 256, grep 200, glob 500).
pub fn default_line_limit(tool_name: &str) -> Option<usize> {
    match tool_name {
        "shell" => Some(256),
        "grep" => Some(200),
        "glob" => Some(500),
        _ => None,
    }
}

/// Truncates `output` of `tool_name` with the defaults, overridden per tool by
/// `char_limits` and `line_limits` (an override changes the limit, never the mode).
/// Character truncation runs first, then line truncation (spec §5.3).
pub fn truncate_tool_output(
    output: &str,
    tool_name: &str,
    char_limits: &BTreeMap<String, usize>,
    line_limits: &BTreeMap<String, usize>,
) -> Truncated {
    let (default_chars, mode) = default_char_limit(tool_name);
    let max_chars = char_limits.get(tool_name).copied().unwrap_or(default_chars);
    let (text, removed_chars) = truncate_output(output, max_chars, mode);
    let max_lines = line_limits
        .get(tool_name)
        .copied()
        .or_else(|| default_line_limit(tool_name));
    let (text, removed_lines) = match max_lines {
        Some(max_lines) => match truncate_lines(&text, max_lines) {
            (Cow::Borrowed(_), 0) => (text, 0),
            (lines, removed) => (Cow::Owned(lines.into_owned()), removed),
        },
        None => (text, 0),
    };
    Truncated {
        text: text.into_owned(),
        removed_chars,
        removed_lines,
    }
}

/// Character truncation (spec §5.1): returns the text and the number of characters removed.
/// The output is borrowed when nothing was cut.
pub fn truncate_output(
    output: &str,
    max_chars: usize,
    mode: TruncationMode,
) -> (Cow<'_, str>, usize) {
    // A string of at most `max_chars` bytes has at most `max_chars` chars: no count needed.
    if output.len() <= max_chars {
        return (Cow::Borrowed(output), 0);
    }
    let total = output.chars().count();
    if total <= max_chars {
        return (Cow::Borrowed(output), 0);
    }
    let removed = total - max_chars;
    match mode {
        TruncationMode::HeadTail => {
            let head = max_chars / 2;
            let tail = max_chars - head;
            let head_end = byte_index_after_chars(output, head);
            let tail_start = byte_index_of_last_chars(output, tail);
            let mut text = String::with_capacity(head_end + (output.len() - tail_start) + 300);
            text.push_str(&output[..head_end]);
            text.push_str("\n\n[WARNING: Tool output was truncated. ");
            text.push_str(&removed.to_string());
            text.push_str(
                " characters were removed from the middle. \
                 The full output is available in the event stream. \
                 If you need to see specific parts, re-run the tool with more targeted parameters.]\n\n",
            );
            text.push_str(&output[tail_start..]);
            (Cow::Owned(text), removed)
        }
        TruncationMode::Tail => {
            let tail_start = byte_index_of_last_chars(output, max_chars);
            let mut text = String::with_capacity(output.len() - tail_start + 200);
            text.push_str("[WARNING: Tool output was truncated. First ");
            text.push_str(&removed.to_string());
            text.push_str(
                " characters were removed. The full output is available in the event stream.]\n\n",
            );
            text.push_str(&output[tail_start..]);
            (Cow::Owned(text), removed)
        }
    }
}

/// Line truncation (spec §5.3), applied after character truncation: keeps the first
/// `max_lines / 2` and the last `max_lines - max_lines / 2` lines (split on `\n`) and returns
/// the number of lines omitted.
pub fn truncate_lines(output: &str, max_lines: usize) -> (Cow<'_, str>, usize) {
    let line_count = crate::bytes::count(b'\n', output.as_bytes()) + 1;
    if line_count <= max_lines {
        return (Cow::Borrowed(output), 0);
    }
    let head_count = max_lines / 2;
    let tail_count = max_lines - head_count;
    let omitted = line_count - head_count - tail_count;
    let bytes = output.as_bytes();
    // The head is the text before the `head_count`-th newline.
    let head_end = if head_count == 0 {
        0
    } else {
        crate::bytes::after_nth(b'\n', bytes, head_count).map_or(bytes.len(), |past| past - 1)
    };
    // The tail starts after the `tail_count`-th newline counted from the end.
    let tail_start = if tail_count == 0 {
        bytes.len()
    } else {
        crate::bytes::nth_last(b'\n', bytes, tail_count).map_or(0, |i| i + 1)
    };
    let mut text = String::with_capacity(head_end + (bytes.len() - tail_start) + 40);
    text.push_str(&output[..head_end]);
    text.push_str("\n[... ");
    text.push_str(&omitted.to_string());
    text.push_str(" lines omitted ...]\n");
    text.push_str(&output[tail_start..]);
    (Cow::Owned(text), omitted)
}

/// The byte index just after the first `n` chars of `s` (`s.len()` if it has fewer).
fn byte_index_after_chars(s: &str, n: usize) -> usize {
    s.char_indices().nth(n).map_or(s.len(), |(i, _)| i)
}

/// The byte index where the last `n` chars of `s` start (`0` if it has fewer).
fn byte_index_of_last_chars(s: &str, n: usize) -> usize {
    if n == 0 {
        return s.len();
    }
    s.char_indices().rev().nth(n - 1).map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD_TAIL_MARKER_START: &str = "\n\n[WARNING: Tool output was truncated. ";
    const HEAD_TAIL_MARKER_END: &str = " characters were removed from the middle. The full output is available in the event stream. If you need to see specific parts, re-run the tool with more targeted parameters.]\n\n";

    fn no_limits() -> BTreeMap<String, usize> {
        BTreeMap::new()
    }

    #[test]
    fn output_within_the_limit_is_returned_unchanged() {
        let (text, removed) = truncate_output("hello", 5, TruncationMode::HeadTail);
        assert_eq!(text, "hello");
        assert_eq!(removed, 0);
        assert!(matches!(text, Cow::Borrowed(_)));
    }

    #[test]
    fn head_tail_keeps_both_halves_with_the_spec_marker() {
        let output = format!("{}{}{}", "a".repeat(10), "m".repeat(5), "z".repeat(10));
        let (text, removed) = truncate_output(&output, 20, TruncationMode::HeadTail);
        let expected = format!(
            "{}{HEAD_TAIL_MARKER_START}5{HEAD_TAIL_MARKER_END}{}",
            "a".repeat(10),
            "z".repeat(10)
        );
        assert_eq!(text, expected);
        assert_eq!(removed, 5);
    }

    #[test]
    fn tail_keeps_the_end_with_the_spec_marker() {
        let output = format!("{}{}", "x".repeat(7), "y".repeat(10));
        let (text, removed) = truncate_output(&output, 10, TruncationMode::Tail);
        let expected = format!(
            "[WARNING: Tool output was truncated. First 7 characters were removed. The full output is available in the event stream.]\n\n{}",
            "y".repeat(10)
        );
        assert_eq!(text, expected);
        assert_eq!(removed, 7);
    }

    #[test]
    fn odd_limits_keep_exactly_the_limit() {
        let output = "0123456789";
        let (text, removed) = truncate_output(output, 5, TruncationMode::HeadTail);
        assert_eq!(removed, 5);
        assert!(text.starts_with("01\n\n[WARNING"));
        assert!(text.ends_with("]\n\n789"));
    }

    #[test]
    fn characters_are_counted_as_chars_not_bytes() {
        // 13 chars, 39 bytes: within a 13-char limit although longer than 13 bytes.
        let output = "日本語のテキストです。ああ";
        assert_eq!(output.chars().count(), 13);
        let (text, removed) = truncate_output(output, 13, TruncationMode::Tail);
        assert_eq!(text, output);
        assert_eq!(removed, 0);
        let (text, removed) = truncate_output(output, 4, TruncationMode::HeadTail);
        assert_eq!(removed, 9);
        assert!(text.starts_with("日本\n\n"));
        assert!(text.ends_with("\n\nああ"));
    }

    #[test]
    fn multi_byte_characters_at_every_cut_point_never_panic() {
        let output = "é🎉a日\u{301}b".repeat(7);
        let total = output.chars().count();
        for limit in 0..=total + 1 {
            for mode in [TruncationMode::HeadTail, TruncationMode::Tail] {
                let (text, removed) = truncate_output(&output, limit, mode);
                assert_eq!(removed, total.saturating_sub(limit), "limit {limit}");
                if removed == 0 {
                    assert_eq!(text, output);
                } else if mode == TruncationMode::HeadTail {
                    let marker = format!("{HEAD_TAIL_MARKER_START}{removed}{HEAD_TAIL_MARKER_END}");
                    let kept = text.chars().count() - marker.chars().count();
                    assert_eq!(kept, limit, "limit {limit}");
                    assert!(text.contains(&marker));
                }
            }
        }
    }

    #[test]
    fn zero_limit_keeps_only_the_marker() {
        let (text, removed) = truncate_output("abc", 0, TruncationMode::HeadTail);
        assert_eq!(removed, 3);
        assert_eq!(
            text,
            format!("{HEAD_TAIL_MARKER_START}3{HEAD_TAIL_MARKER_END}")
        );
        let (text, _) = truncate_output("abc", 0, TruncationMode::Tail);
        assert!(text.ends_with("stream.]\n\n"));
    }

    #[test]
    fn line_truncation_keeps_head_and_tail_lines_with_the_spec_marker() {
        let output = (1..=10)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        let (text, omitted) = truncate_lines(&output, 4);
        assert_eq!(text, "1\n2\n[... 6 lines omitted ...]\n9\n10");
        assert_eq!(omitted, 6);
    }

    #[test]
    fn line_truncation_with_odd_limit_gives_the_extra_line_to_the_tail() {
        let output = "a\nb\nc\nd\ne\nf";
        let (text, omitted) = truncate_lines(output, 3);
        assert_eq!(text, "a\n[... 3 lines omitted ...]\ne\nf");
        assert_eq!(omitted, 3);
    }

    #[test]
    fn a_trailing_newline_counts_as_an_empty_last_line() {
        // "a\nb\nc\n" splits into ["a", "b", "c", ""]: four lines.
        let (text, omitted) = truncate_lines("a\nb\nc\n", 2);
        assert_eq!(text, "a\n[... 2 lines omitted ...]\n");
        assert_eq!(omitted, 2);
        let (text, omitted) = truncate_lines("a\nb\nc\n", 4);
        assert_eq!(text, "a\nb\nc\n");
        assert_eq!(omitted, 0);
    }

    #[test]
    fn character_truncation_runs_before_line_truncation() {
        // Two 100k-char lines: line truncation alone would keep them.
        let output = format!("{}\n{}", "a".repeat(100_000), "b".repeat(100_000));
        let truncated = truncate_tool_output(&output, "shell", &no_limits(), &no_limits());
        assert_eq!(truncated.removed_chars, 200_001 - 30_000);
        assert_eq!(truncated.removed_lines, 0);
        assert!(truncated.text.starts_with(&"a".repeat(15_000)));
        assert!(truncated.text.ends_with(&"b".repeat(15_000)));
    }

    #[test]
    fn shell_output_is_cut_to_256_lines_after_characters() {
        let output = (0..1000)
            .map(|i| format!("l{i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let truncated = truncate_tool_output(&output, "shell", &no_limits(), &no_limits());
        assert_eq!(truncated.removed_chars, 0);
        assert_eq!(truncated.removed_lines, 1000 - 256);
        assert!(
            truncated
                .text
                .contains("\nl127\n[... 744 lines omitted ...]\nl872\n")
        );
    }

    #[test]
    fn overrides_change_the_limit_but_not_the_mode() {
        let chars = BTreeMap::from([("grep".to_string(), 5)]);
        let lines = BTreeMap::from([("read_file".to_string(), 2)]);
        let grep = truncate_tool_output("0123456789", "grep", &chars, &no_limits());
        assert!(
            grep.text
                .starts_with("[WARNING: Tool output was truncated. First 5")
        );
        assert!(grep.text.ends_with("56789"));
        let read = truncate_tool_output("a\nb\nc", "read_file", &no_limits(), &lines);
        assert_eq!(read.text, "a\n[... 1 lines omitted ...]\nc");
        assert_eq!(read.removed_lines, 1);
    }

    #[test]
    fn defaults_match_the_spec_table() {
        use TruncationMode::{HeadTail, Tail};
        assert_eq!(default_char_limit("read_file"), (50_000, HeadTail));
        assert_eq!(default_char_limit("shell"), (30_000, HeadTail));
        assert_eq!(default_char_limit("grep"), (20_000, Tail));
        assert_eq!(default_char_limit("glob"), (20_000, Tail));
        assert_eq!(default_char_limit("edit_file"), (10_000, Tail));
        assert_eq!(default_char_limit("apply_patch"), (10_000, Tail));
        assert_eq!(default_char_limit("write_file"), (1_000, Tail));
        assert_eq!(default_char_limit("spawn_agent"), (20_000, HeadTail));
        assert_eq!(default_line_limit("shell"), Some(256));
        assert_eq!(default_line_limit("grep"), Some(200));
        assert_eq!(default_line_limit("glob"), Some(500));
        assert_eq!(default_line_limit("read_file"), None);
        assert_eq!(default_line_limit("edit_file"), None);
    }

    #[test]
    fn a_ten_megabyte_single_line_is_cut_to_the_limit() {
        let output = "x".repeat(10 * 1024 * 1024);
        let truncated = truncate_tool_output(&output, "shell", &no_limits(), &no_limits());
        assert_eq!(truncated.removed_chars, output.len() - 30_000);
        assert!(truncated.text.len() < 30_400);
    }
}
