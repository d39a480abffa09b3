//! The `edit_file` tool: replace a string in a file (the edit format Anthropic's models are
//! trained on). The matching engine ([`plan_edit`]) is pure; the executor reads and writes
//! only through the execution environment, and never writes when the edit fails.
//!
//! Matching, in order, stopping at the first level that finds `old_string`:
//!
//! 1. exact, on the file with CRLF line endings read as LF;
//! 2. whole lines, ignoring trailing whitespace;
//! 3. whole lines, ignoring indentation (when the file's lines are consistently indented
//!    differently from `old_string`'s, the replacement is re-indented the same way);
//! 4. whole lines, ignoring surrounding whitespace and treating typographic quotes, dashes and
//!    unusual spaces as their ASCII forms.
//!
//! The success message names the level when it was not exact. Several matches without
//! `replace_all` are an error listing their line numbers; no match is an error showing the
//! most similar region of the file.
//!
//! Bytes outside the replaced ranges are kept exactly: a BOM stays, and the replacement is
//! written with CRLF endings when most lines of the file end with CRLF. Deleting whole lines
//! (an empty `new_string` for an `old_string` that covers whole lines) also removes their line
//! ending, so no blank line is left behind.
//!
//! An empty `old_string` creates a new file with `new_string` as its content when the file
//! does not exist (or is empty), as in Claude Code; on a file with content it is an error.

use crate::llm::tool_schema::tool_schema;

use super::text::{self, BOM, Fuzz};
use super::{RegisteredTool, ToolContext, ToolDefinition, ToolInput, ToolOutput, args};

/// The tool's name.
pub const NAME: &str = "edit_file";

/// What the model reads about the tool.
pub const DESCRIPTION: &str = "\
Edit a file by replacing text. `old_string` must match the file's current text exactly, \
including whitespace and indentation (copy it from read_file output without the line-number \
prefix), and must occur exactly once unless `replace_all` is true; include a few surrounding \
lines to make it unique. `new_string` replaces it and must differ from it. Set `replace_all` \
to replace every occurrence, for example to rename a variable. An empty `old_string` creates \
a new file containing `new_string`. Read the file before editing it.";

/// The tool's definition.
pub fn definition() -> ToolDefinition {
    ToolDefinition {
        name: NAME.to_string(),
        description: DESCRIPTION.to_string(),
        parameters: tool_schema!({
            "type": "object",
            "properties": {
                "file_path": {
                    "type": "string",
                    "description": "Path of the file, absolute or relative to the working directory."
                },
                "old_string": {
                    "type": "string",
                    "description": "The exact text to replace."
                },
                "new_string": {
                    "type": "string",
                    "description": "The text to put in its place."
                },
                "replace_all": {
                    "type": "boolean",
                    "description": "Replace every occurrence instead of exactly one (default false)."
                }
            },
            "required": ["file_path", "old_string", "new_string"],
            "additionalProperties": false
        }),
        freeform: None,
    }
}

/// The `edit_file` tool.
pub fn tool() -> RegisteredTool {
    RegisteredTool::new(definition(), execute).doing_bounded_file_io()
}

/// A planned edit: the new content and what was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The file's new content.
    pub content: String,
    /// How many occurrences were replaced.
    pub replacements: usize,
    /// 1-based line numbers (in the original file) where each replaced text started.
    pub lines: Vec<usize>,
    /// How loosely `old_string` matched; `None` for an exact match.
    pub fuzz: Option<&'static str>,
}

fn execute(input: ToolInput, ctx: &ToolContext<'_>) -> Result<ToolOutput, String> {
    let args = args::json(&input)?;
    let raw_path = args::required_str(args, "file_path")?;
    let old = args::required_str(args, "old_string")?;
    let new = args::required_str(args, "new_string")?;
    let replace_all = args::optional_bool(args, "replace_all").unwrap_or(false);
    let path = args::resolve_path(ctx, raw_path)?;
    let existing = args::read_existing_with_stat(ctx, &path, raw_path, "give the path of a file")?;
    if old.is_empty() {
        return create(ctx, &path, raw_path, new, existing.as_ref());
    }
    let Some((bytes, stat)) = existing else {
        return Err(super::read_file::missing_file_message(ctx, &path, raw_path)
            + " To create a new file, call edit_file with an empty old_string, or use write_file.");
    };
    let content = String::from_utf8(bytes)
        .map_err(|_| format!("{raw_path} is not UTF-8 text; edit_file edits text files only"))?;
    let edit = plan_edit(raw_path, &content, old, new, replace_all)?;
    ctx.env
        .write_file_if_unchanged(&path, edit.content.as_bytes(), &stat)
        .map_err(|e| format!("could not write {raw_path}: {e}"))?;
    let lines = edit
        .lines
        .iter()
        .take(10)
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let mut message = format!(
        "Edited {raw_path}: {} replacement{} (at line{} {lines}{}).",
        edit.replacements,
        if edit.replacements == 1 { "" } else { "s" },
        if edit.lines.len() == 1 { "" } else { "s" },
        if edit.lines.len() > 10 { ", …" } else { "" }
    );
    if let Some(how) = edit.fuzz {
        message.push_str(&format!(
            " old_string did not match exactly; it matched after {how}."
        ));
    }
    Ok(ToolOutput::text(message))
}

fn create(
    ctx: &ToolContext<'_>,
    path: &std::path::Path,
    raw_path: &str,
    new: &str,
    existing: Option<&(Vec<u8>, crate::exec::FileStat)>,
) -> Result<ToolOutput, String> {
    match existing {
        Some((bytes, _)) if !bytes.is_empty() => Err(format!(
            "old_string is empty, which creates a new file, but {raw_path} already exists and \
             is not empty; give the text to replace as old_string, or use write_file to replace \
             the whole file"
        )),
        Some((_, stat)) => {
            ctx.env
                .write_file_if_unchanged(path, new.as_bytes(), stat)
                .map_err(|e| format!("could not write {raw_path}: {e}"))?;
            Ok(ToolOutput::text(format!(
                "Wrote {raw_path} ({} bytes; the file was empty).",
                new.len()
            )))
        }
        None => {
            ctx.env
                .write_file(path, new.as_bytes())
                .map_err(|e| format!("could not write {raw_path}: {e}"))?;
            Ok(ToolOutput::text(format!(
                "Created {raw_path} ({} bytes).",
                new.len()
            )))
        }
    }
}

/// The file's text with CRLF read as LF, and where each removed `\r` was.
struct Normalized {
    text: String,
    /// Positions in `text` of each `\n` that followed a removed `\r`, ascending.
    removed_cr: Vec<usize>,
}

impl Normalized {
    fn new(body: &str) -> Normalized {
        if !body.contains("\r\n") {
            return Normalized {
                text: body.to_string(),
                removed_cr: Vec::new(),
            };
        }
        let mut text = String::with_capacity(body.len());
        let mut removed_cr = Vec::new();
        let mut rest = body;
        while let Some(i) = rest.find("\r\n") {
            text.push_str(&rest[..i]);
            removed_cr.push(text.len());
            text.push('\n');
            rest = &rest[i + 2..];
        }
        text.push_str(rest);
        Normalized { text, removed_cr }
    }

    /// The byte position in the original body of position `i` of the normalised text.
    fn original(&self, i: usize) -> usize {
        i + self.removed_cr.partition_point(|&cr| cr < i)
    }
}

/// Plans replacing `old` with `new` in `content`, the text of the file at `path` (used in
/// messages). An `Err` is the message for the model.
pub fn plan_edit(
    path: &str,
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<Edit, String> {
    if old == new {
        return Err(
            "old_string and new_string are identical, so there is nothing to change; give the \
             new text in new_string"
                .to_string(),
        );
    }
    let (bom, body) = match content.strip_prefix(BOM) {
        Some(rest) => (BOM, rest),
        None => ("", content),
    };
    let file = Normalized::new(body);
    let old = old.replace("\r\n", "\n");
    let new = new.replace("\r\n", "\n");
    if old.is_empty() {
        return Err("old_string is empty; give the text to replace".to_string());
    }
    let (ranges, fuzz, new_text) = find(path, &file.text, &old, &new)?;
    if ranges.len() > 1 && !replace_all {
        let lines = line_numbers(&file.text, &ranges);
        let shown: Vec<String> = lines.iter().take(20).map(usize::to_string).collect();
        return Err(format!(
            "old_string matches {} places in {path} (lines {}{}). Add surrounding lines to \
             old_string so that it matches exactly one place, or set replace_all to true to \
             replace every occurrence",
            ranges.len(),
            shown.join(", "),
            if lines.len() > 20 { ", …" } else { "" }
        ));
    }
    let crlf = file.removed_cr.len() * 2 > crate::bytes::count(b'\n', file.text.as_bytes());
    let replacement = if crlf {
        new_text.replace('\n', "\r\n")
    } else {
        new_text
    };
    let lines = line_numbers(&file.text, &ranges);
    let mut out = String::with_capacity(content.len() + replacement.len() * ranges.len());
    out.push_str(bom);
    let mut next = 0;
    for &(start, end) in &ranges {
        let (start, end) = (file.original(start), file.original(end));
        out.push_str(&body[next..start]);
        out.push_str(&replacement);
        next = end;
    }
    out.push_str(&body[next..]);
    Ok(Edit {
        content: out,
        replacements: ranges.len(),
        lines,
        fuzz: fuzz.describe(),
    })
}

/// Byte ranges of the matches, the level that found them, and the replacement text.
type Found = (Vec<(usize, usize)>, Fuzz, String);

/// The non-overlapping ranges (in the normalised text) where `old` matches, the level that
/// found them, and the replacement text (re-indented for an indentation-insensitive match).
fn find(path: &str, text: &str, old: &str, new: &str) -> Result<Found, String> {
    let exact: Vec<(usize, usize)> = text
        .match_indices(old)
        .map(|(start, found)| (start, start + found.len()))
        .collect();
    if !exact.is_empty() {
        let ranges = if new.is_empty() && !old.ends_with('\n') {
            exact
                .into_iter()
                .map(|(start, end)| whole_line_deletion(text, start, end))
                .collect()
        } else {
            exact
        };
        return Ok((ranges, Fuzz::Exact, new.to_string()));
    }
    let lines = line_spans(text);
    let line_texts: Vec<&str> = lines.iter().map(|&(s, e)| &text[s..e]).collect();
    let with_newline = old.ends_with('\n');
    let wanted: Vec<&str> = old.strip_suffix('\n').unwrap_or(old).split('\n').collect();
    for fuzz in [
        Fuzz::TrailingWhitespace,
        Fuzz::Whitespace,
        Fuzz::Punctuation,
    ] {
        let starts = text::find_all_lines(&line_texts, &wanted, fuzz);
        if starts.is_empty() {
            continue;
        }
        let ranges = starts
            .iter()
            .map(|&first| {
                let last = first + wanted.len() - 1;
                let mut end = lines[last].1;
                if with_newline && end < text.len() {
                    end += 1;
                }
                (lines[first].0, end)
            })
            .collect();
        let new_text = if fuzz >= Fuzz::Whitespace {
            reindent(
                &wanted,
                &line_texts[starts[0]..starts[0] + wanted.len()],
                new,
            )
        } else {
            new.to_string()
        };
        return Ok((ranges, fuzz, new_text));
    }
    Err(not_found_message(path, &line_texts, &wanted))
}

/// Widens a deletion that covers whole lines to take their line ending too.
fn whole_line_deletion(text: &str, start: usize, end: usize) -> (usize, usize) {
    let at_line_start = start == 0 || text.as_bytes()[start - 1] == b'\n';
    if at_line_start && text.as_bytes().get(end) == Some(&b'\n') {
        (start, end + 1)
    } else {
        (start, end)
    }
}

/// Start and end (without the `\n`) of each line of `text`.
fn line_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    while let Some(i) = crate::bytes::find(b'\n', &text.as_bytes()[start..]) {
        spans.push((start, start + i));
        start += i + 1;
    }
    if start < text.len() || spans.is_empty() {
        spans.push((start, text.len()));
    }
    spans
}

/// 1-based line number of the start of each range.
fn line_numbers(text: &str, ranges: &[(usize, usize)]) -> Vec<usize> {
    let mut numbers = Vec::with_capacity(ranges.len());
    let mut line = 1;
    let mut position = 0;
    for &(start, _) in ranges {
        line += crate::bytes::count(b'\n', &text.as_bytes()[position..start]);
        position = start;
        numbers.push(line);
    }
    numbers
}

/// `new` re-indented the way the file's matched lines differ from `wanted`, when they do so
/// consistently.
fn reindent(wanted: &[&str], found: &[&str], new: &str) -> String {
    let change = text::indentation_change(wanted, found);
    if change.is_none() {
        return new.to_string();
    }
    new.split('\n')
        .map(|line| text::reindent_line(line, change))
        .collect::<Vec<_>>()
        .join("\n")
}

fn not_found_message(path: &str, lines: &[&str], wanted: &[&str]) -> String {
    let mut message = format!("old_string was not found in {path}.");
    if wanted.iter().any(|line| has_line_number_prefix(line)) {
        message.push_str(
            " It seems to include read_file's line-number prefixes (`NNN | `); old_string must \
             hold only the file's text.",
        );
    }
    match text::closest_region(lines, wanted) {
        Some((start, _)) => {
            let end = (start + wanted.len()).min(lines.len());
            message.push_str(&format!(
                " The most similar part of the file is {}:\n",
                text::line_range(start + 1, end)
            ));
            message.push_str(&text::numbered(
                start + 1,
                lines[start..end].iter().copied(),
            ));
            message.push_str(
                "Copy old_string exactly from the file, including whitespace and indentation, \
                 or read the file again if it may have changed.",
            );
        }
        None => message.push_str(
            " No part of the file is similar. Read the file again (it may have changed) and \
             copy old_string exactly from it.",
        ),
    }
    message
}

fn has_line_number_prefix(line: &str) -> bool {
    let trimmed = line.trim_start();
    let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && {
        let rest = &trimmed[digits..];
        rest.starts_with(" | ") || rest.starts_with('→') || rest.starts_with('\t')
    }
}

/// `edit_file` with gemini-cli's parameters (the Gemini profile's), run by the shared
/// executor.
pub(crate) fn gemini_cli_tool() -> RegisteredTool {
    let shared = tool();
    let mut definition = shared.definition.clone();
    definition.description = "\
Replace text in a file. `old_string` must be the file's current text exactly, including \
whitespace and indentation (copy it from read_file output without the line-number prefix), \
with enough surrounding lines (about three before and after) to match exactly one place. \
`new_string` is the replacement and must differ from it. Set `allow_multiple` to replace \
every occurrence instead. An empty `old_string` creates a new file containing `new_string`. \
Read the file before editing it."
        .to_string();
    definition.parameters = tool_schema!({
        "type": "object",
        "properties": {
            "file_path": {
                "type": "string",
                "description": "Path of the file, absolute or relative to the working directory."
            },
            "instruction": {
                "type": "string",
                "description": "A short description of what this edit does and why."
            },
            "old_string": {
                "type": "string",
                "description": "The exact text to replace."
            },
            "new_string": {
                "type": "string",
                "description": "The text to put in its place."
            },
            "allow_multiple": {
                "type": "boolean",
                "description": "Replace every occurrence instead of exactly one (default false)."
            }
        },
        "required": ["file_path", "old_string", "new_string"],
        "additionalProperties": false
    });
    let shared = shared.executor;
    RegisteredTool::new(definition, move |input, ctx| {
        let input = match input {
            ToolInput::Json(mut map) => {
                map.remove("instruction");
                if let Some(all) = map.remove("allow_multiple") {
                    map.insert("replace_all".to_string(), all);
                }
                ToolInput::Json(map)
            }
            freeform => freeform,
        };
        // The shared messages name the shared parameter.
        shared(input, ctx).map_err(|message| message.replace("replace_all", "allow_multiple"))
    })
    .doing_bounded_file_io()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(content: &str, old: &str, new: &str) -> Result<Edit, String> {
        plan_edit("f.rs", content, old, new, false)
    }

    #[test]
    fn an_exact_unique_match_is_replaced() {
        let edit = edit("a\nb\nc\n", "b", "B").unwrap();
        assert_eq!(edit.content, "a\nB\nc\n");
        assert_eq!(
            (edit.replacements, edit.lines.clone(), edit.fuzz),
            (1, vec![2], None)
        );
    }

    #[test]
    fn several_matches_need_replace_all() {
        let error = edit("x\ny\nx\n", "x", "z").unwrap_err();
        assert!(
            error.starts_with("old_string matches 2 places in f.rs (lines 1, 3)"),
            "{error}"
        );
        let all = plan_edit("f.rs", "x\ny\nx\n", "x", "z", true).unwrap();
        assert_eq!(all.content, "z\ny\nz\n");
        assert_eq!(all.lines, vec![1, 3]);
    }

    #[test]
    fn identical_strings_are_rejected() {
        assert!(edit("a", "a", "a").unwrap_err().contains("identical"));
    }

    #[test]
    fn crlf_files_match_lf_text_and_stay_crlf() {
        let edit = edit("one\r\ntwo\r\nthree\r\n", "one\ntwo\n", "1\n2\n").unwrap();
        assert_eq!(edit.content, "1\r\n2\r\nthree\r\n");
    }

    #[test]
    fn untouched_bytes_of_mixed_endings_and_a_bom_stay_identical() {
        let edit = edit("\u{feff}a\r\nb\nc\r\n", "b", "B").unwrap();
        assert_eq!(edit.content, "\u{feff}a\r\nB\nc\r\n");
    }

    #[test]
    fn trailing_whitespace_fuzz_is_reported() {
        let edit = edit(
            "fn a() {  \n    x();\n}\n",
            "fn a() {\n    x();",
            "fn b() {\n    y();",
        )
        .unwrap();
        assert_eq!(edit.content, "fn b() {\n    y();\n}\n");
        assert_eq!(edit.fuzz, Fuzz::TrailingWhitespace.describe());
    }

    #[test]
    fn indentation_fuzz_reindents_the_replacement() {
        let edit = edit(
            "impl A {\n    fn a() {\n        x();\n    }\n}\n",
            "fn a() {\n    x();\n}",
            "fn a() {\n    y();\n}",
        )
        .unwrap();
        assert_eq!(
            edit.content,
            "impl A {\n    fn a() {\n        y();\n    }\n}\n"
        );
        assert_eq!(edit.fuzz, Fuzz::Whitespace.describe());
    }

    #[test]
    fn typographic_punctuation_fuzz_matches_ascii_text() {
        let edit = edit(
            "say(“hello” – ‘world’)\n",
            "say(\"hello\" - 'world')",
            "say(\"hi\")",
        )
        .unwrap();
        assert_eq!(edit.content, "say(\"hi\")\n");
        assert_eq!(edit.fuzz, Fuzz::Punctuation.describe());
    }

    #[test]
    fn deleting_whole_lines_removes_their_line_endings() {
        assert_eq!(edit("a\nb\nc\n", "b", "").unwrap().content, "a\nc\n");
        assert_eq!(edit("a b c\n", "b ", "").unwrap().content, "a c\n");
    }

    #[test]
    fn not_found_shows_the_closest_region_and_spots_line_number_prefixes() {
        let error = edit("fn main() {\n    run(1);\n}\n", "     2 |     run(2);", "x").unwrap_err();
        assert!(
            error.starts_with("old_string was not found in f.rs."),
            "{error}"
        );
        assert!(error.contains("line-number prefixes"), "{error}");
        let error = edit(
            "fn main() {\n    run(1);\n}\n",
            "fn main() {\n    run(2);",
            "x",
        )
        .unwrap_err();
        assert!(
            error.contains("lines 1-2:\n     1 | fn main() {\n     2 |     run(1);\n"),
            "{error}"
        );
    }
}
