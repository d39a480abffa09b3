//! Applying the hunks of one `Update File` to a file's content: locating each hunk and
//! building the new content in memory. Strings in, a string out; it never touches a file.
//!
//! How a hunk is located:
//!
//! 1. Its `@@` hints, in order, each searched forward (from the end of the previous hunk,
//!    then after the previous hint) as a whole line ignoring surrounding whitespace, then
//!    with punctuation normalised, then as a part of a line; if a hint is not found forward,
//!    the whole file is searched. The hunk's lines are searched for from the last hint's
//!    line on (models often repeat the hint as the first context line).
//! 2. Its context and removed lines, searched forward from there at each fuzz level in turn:
//!    exact, trailing whitespace ignored, surrounding whitespace ignored, typographic
//!    punctuation normalised. A hunk marked `*** End of File` is tried at the end of the
//!    file first. If the lines come before the search start (hunks out of order), the whole
//!    file is searched as a last resort.
//! 3. A hunk with only `+` lines goes right after its last hint's line, or, without hints,
//!    at the end of the file.
//!
//! What is written: lines of the file that the hunk keeps as context stay byte-identical
//! (even when matched loosely); removed lines go; added lines take the file's dominant line
//! ending (CRLF files stay CRLF). When a hunk matched only with indentation ignored and the
//! patch's lines are consistently indented differently from the file's (the same prefix
//! swapped on every non-blank line), its added lines are re-indented the same way. A file's missing final newline is kept unless the patch
//! changes or adds the last line, in which case the file ends with a newline.

use std::borrow::Cow;

use super::parse::{Hunk, HunkLine};
use crate::tools::text::{self, Fuzz, Line, TextFile};

/// The new content of a file and notes on hunks that matched loosely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The file's new content.
    pub content: String,
    /// One note per hunk that did not match exactly, for the success message.
    pub notes: Vec<String>,
}

/// A line of a hunk's result: a line of the file kept as it is, or an added line.
#[derive(Clone)]
enum NewLine<'a> {
    Kept(Line<'a>),
    Added(Cow<'a, str>),
}

/// One located hunk: replace `old_len` lines at `start` with `new_lines`.
struct Replacement<'a> {
    start: usize,
    old_len: usize,
    new_lines: Vec<NewLine<'a>>,
    hunk_number: usize,
}

/// Applies `hunks` to `content` (the file at `path`, for messages). An `Err` explains which
/// hunk did not match and shows the closest region of the file.
pub fn apply_hunks(path: &str, content: &str, hunks: &[Hunk]) -> Result<Applied, String> {
    let file = TextFile::parse(content);
    let texts = file.texts();
    let ending = file.dominant_ending();
    let mut notes = Vec::new();
    let mut replacements: Vec<Replacement<'_>> = Vec::with_capacity(hunks.len());
    let mut cursor = 0;
    for (index, hunk) in hunks.iter().enumerate() {
        let number = index + 1;
        let hint_line = locate_hints(&texts, hunk, cursor, path, number)?;
        let old = hunk.old_lines();
        let (start, old, fuzz) = if old.is_empty() {
            let at = match hint_line {
                Some(line) => line + 1,
                None => texts.len(),
            };
            (at, old, Fuzz::Exact)
        } else {
            // From the hint line itself: models often repeat the hint as the first context
            // line.
            let from = hint_line.unwrap_or(cursor);
            match locate(&texts, &old, from, hunk.end_of_file) {
                Some((start, fuzz)) => (start, old, fuzz),
                None => match without_trailing_blank(hunk, &old).and_then(|shorter| {
                    locate(&texts, shorter, from, hunk.end_of_file).map(|found| (found, shorter))
                }) {
                    Some(((start, fuzz), shorter)) => (start, shorter.to_vec(), fuzz),
                    None => return Err(not_found(path, &texts, hunk, number, &old, from)),
                },
            }
        };
        if let Some(how) = fuzz.describe() {
            notes.push(format!("hunk {number} of {path} matched after {how}"));
        }
        let indent = if fuzz >= Fuzz::Whitespace {
            text::indentation_change(&old, &texts[start..start + old.len()])
        } else {
            None
        };
        let mut new_lines = Vec::with_capacity(hunk.lines.len());
        let mut file_index = start;
        let mut old_seen = 0;
        for line in &hunk.lines {
            match line {
                HunkLine::Context(_) if old_seen < old.len() => {
                    new_lines.push(NewLine::Kept(file.lines[file_index]));
                    file_index += 1;
                    old_seen += 1;
                }
                HunkLine::Remove(_) if old_seen < old.len() => {
                    file_index += 1;
                    old_seen += 1;
                }
                // A trailing blank context line dropped by the retry above: nothing to keep.
                HunkLine::Context(_) | HunkLine::Remove(_) => {}
                HunkLine::Add(text) => {
                    new_lines.push(NewLine::Added(text::reindent_line(text, indent)));
                }
            }
        }
        cursor = start + old.len();
        replacements.push(Replacement {
            start,
            old_len: old.len(),
            new_lines,
            hunk_number: number,
        });
    }
    replacements.sort_by_key(|r| (r.start, r.hunk_number));
    for pair in replacements.windows(2) {
        if pair[1].start < pair[0].start + pair[0].old_len {
            return Err(format!(
                "hunks {} and {} of {path} change overlapping lines (around line {}); merge \
                 them into one hunk",
                pair[0].hunk_number.min(pair[1].hunk_number),
                pair[0].hunk_number.max(pair[1].hunk_number),
                pair[1].start + 1
            ));
        }
    }
    let mut lines: Vec<Line<'_>> = Vec::with_capacity(file.lines.len() + hunks.len() * 4);
    let mut next = 0;
    for replacement in &replacements {
        lines.extend_from_slice(&file.lines[next..replacement.start]);
        lines.extend(replacement.new_lines.iter().map(|line| match line {
            NewLine::Kept(line) => *line,
            NewLine::Added(text) => Line { text, ending },
        }));
        next = replacement.start + replacement.old_len;
    }
    lines.extend_from_slice(&file.lines[next..]);
    // A last line added by the patch ends with a newline (added lines get `ending`); an
    // untouched last line keeps its own ending.
    Ok(Applied {
        content: text::join_lines(file.bom, &lines, ending),
        notes,
    })
}

/// Finds each hint in turn (each after the previous one); returns the index of the last
/// hint's line, or `None` when the hunk has no hints or none was found.
fn locate_hints(
    texts: &[&str],
    hunk: &Hunk,
    cursor: usize,
    path: &str,
    number: usize,
) -> Result<Option<usize>, String> {
    let mut position = None;
    for hint in &hunk.hints {
        let from = position.map_or(cursor, |line| line + 1);
        let found = find_hint(texts, hint, from).or_else(|| find_hint(texts, hint, 0));
        match found {
            Some(line) => position = Some(line),
            None if hunk.old_lines().is_empty() => {
                return Err(format!(
                    "hunk {number} of {path} adds lines after `@@ {hint}`, but no line of the \
                     file matches that hint. Use a line that exists in the file as the `@@` \
                     hint, or add context lines around the new lines"
                ));
            }
            // A hint that matches nothing does not stop a hunk whose own lines can place it.
            None => {}
        }
    }
    Ok(position)
}

/// The first line at or after `from` that is the hint: ignoring surrounding whitespace (the
/// parser trims hints, and models write them without the line's indentation), then with
/// punctuation normalised, then as a part of a line.
fn find_hint(texts: &[&str], hint: &str, from: usize) -> Option<usize> {
    let wanted = [hint];
    [Fuzz::Whitespace, Fuzz::Punctuation]
        .iter()
        .find_map(|&fuzz| text::find_lines(texts, &wanted, from, fuzz))
        .or_else(|| {
            let hint = hint.trim();
            (from..texts.len()).find(|&i| texts[i].contains(hint))
        })
}

/// Finds `old` at or after `from`, strictest fuzz first; the whole file as a last resort.
fn locate(texts: &[&str], old: &[&str], from: usize, end_of_file: bool) -> Option<(usize, Fuzz)> {
    if end_of_file && old.len() <= texts.len() {
        let at_end = texts.len() - old.len();
        if at_end >= from {
            for fuzz in Fuzz::ALL {
                if text::find_lines(texts, old, at_end, fuzz) == Some(at_end) {
                    return Some((at_end, fuzz));
                }
            }
        }
    }
    for start in [from, 0] {
        for fuzz in Fuzz::ALL {
            if let Some(found) = text::find_lines(texts, old, start, fuzz) {
                return Some((found, fuzz));
            }
        }
        if from == 0 {
            break;
        }
    }
    None
}

/// `old` without a final empty context line (models often end a hunk with a blank line
/// that stands for the end of the file), when it has one.
fn without_trailing_blank<'a, 'b>(hunk: &Hunk, old: &'b [&'a str]) -> Option<&'b [&'a str]> {
    match hunk.lines.last() {
        Some(HunkLine::Context(text)) if text.trim().is_empty() && old.len() > 1 => {
            Some(&old[..old.len() - 1])
        }
        _ => None,
    }
}

fn not_found(
    path: &str,
    texts: &[&str],
    hunk: &Hunk,
    number: usize,
    old: &[&str],
    from: usize,
) -> String {
    let mut message = format!(
        "hunk {number} ({}) of {path} did not match: these lines were not found{}:\n",
        hunk.hint_text(),
        if from > 0 {
            format!(" at or after line {}", from + 1)
        } else {
            String::new()
        }
    );
    for line in old.iter().take(12) {
        message.push_str("  ");
        message.push_str(line);
        message.push('\n');
    }
    if old.len() > 12 {
        message.push_str(&format!("  ... ({} more lines)\n", old.len() - 12));
    }
    match text::closest_region(texts, old) {
        Some((start, _)) => {
            let end = (start + old.len()).min(texts.len());
            message.push_str(&format!(
                "The closest region of {path} is {}:\n",
                text::line_range(start + 1, end)
            ));
            message.push_str(&text::numbered(
                start + 1,
                texts[start..end].iter().copied(),
            ));
        }
        None if texts.is_empty() => message.push_str(&format!("{path} is empty.\n")),
        None if texts.len() <= 30 => {
            message.push_str(&format!(
                "No similar lines exist in {path}; its whole content is:\n"
            ));
            message.push_str(&text::numbered(1, texts.iter().copied()));
        }
        None => message.push_str(&format!("No similar lines exist in {path}.\n")),
    }
    message.push_str(
        "Read the file again and make the context (` `) and removed (`-`) lines match it exactly.",
    );
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::apply_patch::parse::{Operation, parse_patch};

    fn apply(content: &str, hunks_text: &str) -> Result<Applied, String> {
        let patch = parse_patch(&format!(
            "*** Begin Patch\n*** Update File: f.txt\n{hunks_text}\n*** End Patch"
        ))
        .unwrap();
        let Operation::Update { hunks, .. } = &patch.operations[0] else {
            panic!("not an update")
        };
        apply_hunks("f.txt", content, hunks)
    }

    fn content(content: &str, hunks_text: &str) -> String {
        apply(content, hunks_text).unwrap().content
    }

    #[test]
    fn exact_hunks_replace_their_lines() {
        assert_eq!(content("a\nb\nc\n", "@@\n a\n-b\n+B\n c"), "a\nB\nc\n");
    }

    #[test]
    fn hunks_apply_forward_in_order() {
        let file = "x\ny\nx\ny\n";
        assert_eq!(content(file, "@@\n-x\n+1\n@@\n-x\n+2"), "1\ny\n2\ny\n");
    }

    #[test]
    fn hints_choose_the_occurrence() {
        let file = "fn a() {\n    ret();\n}\nfn b() {\n    ret();\n}\n";
        assert_eq!(
            content(file, "@@ fn b() {\n-    ret();\n+    done();"),
            "fn a() {\n    ret();\n}\nfn b() {\n    done();\n}\n"
        );
    }

    #[test]
    fn nested_hints_narrow_in_order() {
        let file = "class A:\n  def f():\n    x\nclass B:\n  def f():\n    x\n";
        assert_eq!(
            content(file, "@@ class B:\n@@ def f():\n-    x\n+    y"),
            "class A:\n  def f():\n    x\nclass B:\n  def f():\n    y\n"
        );
    }

    #[test]
    fn each_fuzz_level_is_tried_in_order_and_reported() {
        let applied = apply("a  \nb\n", "@@\n-a\n+c").unwrap();
        assert_eq!(applied.content, "c\nb\n");
        assert_eq!(
            applied.notes,
            vec!["hunk 1 of f.txt matched after ignoring trailing whitespace"]
        );
        let applied = apply("    a\n", "@@\n-a\n+c").unwrap();
        assert!(applied.notes[0].contains("indentation"));
        let applied = apply("say “hi” — ok\n", "@@\n-say \"hi\" - ok\n+x").unwrap();
        assert_eq!(applied.content, "x\n");
        assert!(applied.notes[0].contains("typographic"));
        assert!(apply("a\n", "@@\n-a\n+b").unwrap().notes.is_empty());
    }

    #[test]
    fn loosely_matched_context_lines_stay_byte_identical() {
        assert_eq!(
            content("  keep  \nold\n", "@@\n keep\n-old\n+new"),
            "  keep  \nnew\n"
        );
    }

    #[test]
    fn crlf_files_stay_crlf() {
        assert_eq!(
            content("a\r\nb\r\nc\r\n", "@@\n a\n-b\n+B1\n+B2"),
            "a\r\nB1\r\nB2\r\nc\r\n"
        );
    }

    #[test]
    fn pure_additions_go_after_the_hint_or_at_the_end() {
        assert_eq!(content("a\nb\n", "@@ a\n+new"), "a\nnew\nb\n");
        assert_eq!(content("a\nb\n", "@@\n+new"), "a\nb\nnew\n");
        assert_eq!(content("", "@@\n+first"), "first\n");
        let error = apply("a\n", "@@ nowhere\n+x").unwrap_err();
        assert!(
            error.contains("no line of the file matches that hint"),
            "{error}"
        );
    }

    #[test]
    fn end_of_file_anchors_at_the_end() {
        assert_eq!(
            content("x\nend\nx\nend\n", "@@\n x\n-end\n+END\n*** End of File"),
            "x\nend\nx\nEND\n"
        );
    }

    #[test]
    fn a_missing_final_newline_is_kept_unless_the_last_line_changes() {
        assert_eq!(content("a\nb", "@@\n-a\n+A"), "A\nb");
        assert_eq!(content("a\nb", "@@\n a\n-b\n+B"), "a\nB\n");
        assert_eq!(content("a\nb", "@@\n+c"), "a\nb\nc\n");
    }

    #[test]
    fn a_bom_is_kept() {
        assert_eq!(content("\u{feff}a\nb\n", "@@\n-a\n+A"), "\u{feff}A\nb\n");
    }

    #[test]
    fn out_of_order_hunks_still_apply() {
        assert_eq!(content("a\nb\nc\n", "@@\n-c\n+C\n@@\n-a\n+A"), "A\nb\nC\n");
    }

    #[test]
    fn overlapping_hunks_are_rejected() {
        let error = apply("a\nb\nc\n", "@@\n-b\n+B\n@@\n a\n-b\n+X").unwrap_err();
        assert!(
            error.contains("hunks 1 and 2 of f.txt change overlapping lines"),
            "{error}"
        );
    }

    #[test]
    fn a_trailing_blank_context_line_may_stand_for_the_end() {
        assert_eq!(content("a\nb\n", "@@\n a\n-b\n+c\n "), "a\nc\n");
    }

    #[test]
    fn an_unmatched_hunk_names_itself_and_shows_the_closest_region() {
        let error = apply(
            "fn main() {\n    run(1);\n}\n",
            "@@ fn main() {\n fn main() {\n-    run(2);\n+    run(3);",
        )
        .unwrap_err();
        assert!(
            error.starts_with("hunk 1 (@@ fn main() {) of f.txt did not match"),
            "{error}"
        );
        assert!(error.contains("  fn main() {\n      run(2);\n"), "{error}");
        assert!(error.contains("The closest region of f.txt is lines 1-2:\n     1 | fn main() {\n     2 |     run(1);\n"), "{error}");
    }
}
